//! Retries of one acquisition. A caller may name an acquire with a request
//! id, the same on every retry of it; the grant's id is then made from that
//! name: its 80 random bits are a digest of the name locked, the holder and
//! the request id. A retry that finds the name held by a lock whose id
//! carries the same digest, for the same holder, is the caller's own grant
//! (its answer was lost, or came too late): it is answered with that lock
//! renewed, not refused as held. The mark travels in the lock's id, so a
//! speaker elected since, which rebuilt the lock from the members' records,
//! knows it too.

use locktable::{AcquireError, Lock, LockId};
use sha2::{Digest, Sha256};

use crate::refusal::Refusal;

/// The 80 bits of a lock id that follow its time.
const RANDOM_BITS: u32 = 80;

/// The random part an acquisition of `name` by `holder` named `request`
/// gives its grant.
fn digest(name: &str, holder: &str, request: &str) -> u128 {
    let mut hash = Sha256::new();
    for part in [
        b"leasehold request".as_slice(),
        name.as_bytes(),
        holder.as_bytes(),
    ] {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    hash.update(request.as_bytes());
    let bytes = hash.finalize();
    let mut bits = [0u8; 16];
    bits.copy_from_slice(&bytes[..16]);
    u128::from_be_bytes(bits) & ((1u128 << RANDOM_BITS) - 1)
}

/// The id of a grant of `name` to `holder` made at `wall_ms`, for the
/// acquisition the caller named `request`.
pub fn request_lock_id(wall_ms: u64, name: &str, holder: &str, request: &str) -> LockId {
    LockId::from_parts(wall_ms, digest(name, holder, request))
}

/// Whether `lock` is the grant of the acquisition named `request` of
/// `lock`'s name by `holder`.
pub fn is_grant_of(lock: &Lock, holder: &str, request: &str) -> bool {
    let random = lock.id.as_u128() & ((1u128 << RANDOM_BITS) - 1);
    lock.holder == holder && random == digest(&lock.name, holder, request)
}

/// An acquisition its caller named: who asks, the caller's request id,
/// and the wall-clock time its grant's id starts with.
#[derive(Debug, Clone, Copy)]
pub struct Named<'a> {
    /// Who asks.
    pub holder: &'a str,
    /// The caller's name for this acquisition, the same on its retries.
    pub request: &'a str,
    /// Milliseconds since the epoch, the first part of a grant's id.
    pub wall_ms: u64,
}

impl Named<'_> {
    /// The id this acquisition's grant of `name` gets.
    pub fn lock_id(&self, name: &str) -> LockId {
        request_lock_id(self.wall_ms, name, self.holder, self.request)
    }

    /// Whether `lock` is this acquisition's own grant.
    pub fn owns(&self, lock: &Lock) -> bool {
        is_grant_of(lock, self.holder, self.request)
    }
}

/// What a waiting acquisition's client is answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Waited {
    /// The lock, granted while it waited.
    Granted(Lock),
    /// Its own grant holds the name (an earlier try's): answer it renewed.
    Own(Lock),
}

/// How the table's answer to a waiting acquisition, `named` or not, is
/// answered: a grant; the caller's own earlier grant, to renew; or a
/// refusal (held by another, or the table dropped meanwhile: turned away
/// as [`Refusal::NotRebuilt`], whatever the cause; [`Member::unable`]
/// says which).
///
/// [`Member::unable`]: crate::Member::unable
pub fn waited(
    answer: Result<Lock, AcquireError>,
    named: Option<Named<'_>>,
) -> Result<Waited, Refusal> {
    match answer {
        Ok(lock) => Ok(Waited::Granted(lock)),
        Err(AcquireError::Held(lock)) if named.is_some_and(|n| n.owns(&lock)) => {
            Ok(Waited::Own(*lock))
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use locktable::{Fence, MonoTime};
    use std::time::Duration;

    fn lock(id: LockId, name: &str, holder: &str) -> Lock {
        Lock {
            session: Default::default(),
            delay: Default::default(),
            kind: Default::default(),
            name: name.into(),
            id,
            node: 1,
            holder: holder.into(),
            fence: Fence::new(1, 1),
            lease: Duration::from_secs(1),
            acquired: MonoTime::from_nanos(1),
            expires: MonoTime::from_nanos(2),
            data: None,
            data_rev: 0,
        }
    }

    #[test]
    fn a_grant_is_known_by_its_request_only_for_its_name_and_holder() {
        let id = request_lock_id(1_700_000_000_000, "jobs/1", "w1", "req-7");
        let granted = lock(id, "jobs/1", "w1");
        assert!(is_grant_of(&granted, "w1", "req-7"));
        assert!(!is_grant_of(&granted, "w1", "req-8"));
        assert!(!is_grant_of(&granted, "w2", "req-7"));
        let other_name = lock(id, "jobs/2", "w1");
        assert!(!is_grant_of(&other_name, "w1", "req-7"));
        // Made at another instant, the same acquisition keeps its mark.
        let later = request_lock_id(1_700_000_000_999, "jobs/1", "w1", "req-7");
        assert_ne!(later, id);
        assert!(is_grant_of(&lock(later, "jobs/1", "w1"), "w1", "req-7"));
        // Parts do not run into each other.
        let a = request_lock_id(0, "ab", "c", "r");
        let b = request_lock_id(0, "a", "bc", "r");
        assert_ne!(a, b);
    }
}
