//! The fences a table hands out.

use crate::error::AcquireError;
use crate::lock::Fence;

/// Hands out fences: the term in the high bits, a counter in the low.
#[derive(Debug, Default)]
pub(super) struct FenceCounter {
    pub(super) next: u64,
    pub(super) end: u64,
}

impl FenceCounter {
    /// Whether `n` more fences can be taken.
    pub(super) fn has(&self, n: usize) -> bool {
        self.end.saturating_sub(self.next) >= n as u64
    }

    pub(super) fn take(&mut self) -> Result<Fence, AcquireError> {
        if self.next >= self.end {
            return Err(AcquireError::FencesExhausted);
        }
        self.next += 1;
        Ok(Fence(self.next - 1))
    }

    /// From here on every fence carries [`Fence::SEEN_ALL`]: the counter
    /// moves up to the first such fence of its term, if below.
    pub(super) fn mark_seen_all(&mut self) {
        let epoch = Fence(self.next).epoch();
        self.next = self.next.max(Fence::new(epoch, Fence::SEEN_ALL | 1).0);
    }
}
