//! Releasing: one lock, or a set's locks in one call, tried node after
//! node while a lease runs.

use std::time::Duration;

use leasehold_api::{ErrorCode, LockRef, ReleaseBody};
use tokio::time::Instant;

use crate::transport::{CallError, Transport};
use crate::{refused, retryable, Error};

/// The attempts at one release while its lease runs.
/// The longest one renewal attempt may take before another node is tried.
pub(crate) const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(2);

/// The shortest time one attempt is given, however many endpoints share
/// what is left.
const SHORTEST_ATTEMPT: Duration = Duration::from_millis(100);

/// How long one attempt may take with `left` before the deadline: a share
/// of it for each endpoint not tried yet in this round, so a node that
/// hangs leaves time to try the others (at least 100 ms, or what is left).
pub(crate) fn attempt_timeout(left: Duration, tries_left: usize) -> Duration {
    let share = left / u32::try_from(tries_left.max(1)).unwrap_or(u32::MAX);
    share.max(SHORTEST_ATTEMPT).min(left).min(ATTEMPT_TIMEOUT)
}

/// A held lock whose renewals stopped, handed over to be released with
/// others in one call.
pub(crate) trait HandedLock {
    /// The lock, by name and id.
    fn lock(&self) -> &LockRef;
    /// When its lease ends on this client's clock (suspends included).
    fn ends(&self) -> Instant;
}

struct Tries {
    /// Whether an earlier attempt may have released unseen (its answer
    /// was lost).
    unknown: bool,
}

impl Tries {
    /// The next attempt's timeout, for a lease that `ends` then; `None`
    /// once it has ended (nothing is left to release).
    fn timeout(&self, transport: &dyn Transport, ends: Instant) -> Option<Duration> {
        let now = Instant::now();
        if now >= ends {
            return None;
        }
        Some(attempt_timeout(
            ends.saturating_duration_since(now),
            transport.endpoints(),
        ))
    }

    /// What an attempt's answer (`Ok(true)`: all released; `Ok(false)`:
    /// some were not held) makes of the release, or `None` to try again,
    /// on the next node after a pause.
    async fn judge(
        &mut self,
        transport: &dyn Transport,
        answer: Result<bool, CallError>,
    ) -> Option<Result<(), Error>> {
        match answer {
            Ok(true) => Some(Ok(())),
            // An earlier attempt went through, its answer lost.
            Ok(false) if self.unknown => Some(Ok(())),
            Ok(false) => Some(Err(Error::Lost)),
            Err(CallError::Api(e)) if e.error == ErrorCode::NotHeld && self.unknown => Some(Ok(())),
            Err(CallError::Api(e)) if e.error == ErrorCode::NotHeld => Some(Err(Error::Lost)),
            Err(e @ CallError::Api(_)) if !retryable(&e) => Some(Err(refused(e))),
            Err(e) => {
                self.unknown |= matches!(e, CallError::NoAnswer(_));
                transport.move_on();
                tokio::time::sleep(Duration::from_millis(50)).await;
                None
            }
        }
    }
}

/// Releases `lock`, trying node after node until its lease (as `ends`
/// says) is over; `unknown`: an earlier attempt (of a set's release) may
/// have released it unseen. `Err(Error::Lost)` when it was not held.
pub(crate) async fn release_one(
    transport: &dyn Transport,
    lock: &LockRef,
    ends: impl Fn() -> Instant,
    unknown: bool,
) -> Result<(), Error> {
    let body = ReleaseBody::one(lock.name.clone(), lock.id.clone());
    let mut tries = Tries { unknown };
    loop {
        let Some(timeout) = tries.timeout(transport, ends()) else {
            // The lease is over anyway.
            return Ok(());
        };
        let answer = transport.release(body.clone(), timeout).await.map(|_| true);
        if let Some(done) = tries.judge(transport, answer).await {
            return done;
        }
    }
}

/// Releases every one of `held` in one call (`locks`), trying node after
/// node while any of their leases runs; a lock whose lease is over is
/// left out. `Err(Error::Lost)` when any was not held. A node that does
/// not read a set's release (a build before it answers `400`, as does a
/// transport that does not carry it) gets one release per lock, at once.
pub(crate) async fn release_together<H: HandedLock>(
    transport: &dyn Transport,
    held: &[H],
) -> Result<(), Error> {
    let mut tries = Tries { unknown: false };
    loop {
        let now = Instant::now();
        let live: Vec<&H> = held.iter().filter(|h| h.ends() > now).collect();
        let Some(ends) = live.iter().map(|h| h.ends()).max() else {
            return Ok(());
        };
        let Some(timeout) = tries.timeout(transport, ends) else {
            return Ok(());
        };
        let body = ReleaseBody::set(live.iter().map(|h| h.lock().clone()).collect());
        let answer = transport.release_set(body, timeout).await;
        if matches!(&answer, Err(CallError::Api(e)) if e.error == ErrorCode::BadRequest) {
            let each = live
                .iter()
                .map(|h| release_one(transport, h.lock(), || h.ends(), tries.unknown));
            return futures::future::join_all(each).await.into_iter().collect();
        }
        let answer = answer.map(|(_, not_held)| not_held.is_empty());
        if let Some(done) = tries.judge(transport, answer).await {
            return done;
        }
    }
}
