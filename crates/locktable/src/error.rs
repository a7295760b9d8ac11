//! The errors of table operations, as types a caller branches on.

use crate::lock::{Kind, Lock};
use crate::time::MonoTime;

/// The table is not rebuilt from the nodes yet (or was dropped): the request
/// may be retried, at this node once it is rebuilt or at the next speaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the cluster lock table is not rebuilt from the nodes yet")]
pub struct NotRebuilt;

/// Why a lock was not granted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AcquireError {
    /// Another holds the lock, and still did at the end of the wait.
    #[error("lock {} is held by another", .0.name)]
    Held(Box<Lock>),
    /// The table is not rebuilt yet, or was dropped while the request waited.
    #[error(transparent)]
    NotRebuilt(#[from] NotRebuilt),
    /// A rebuild that missed members holds new grants back until this
    /// instant (strict mode); holders may reclaim and renew meanwhile.
    #[error("new grants are held back after a rebuild that missed members")]
    HeldBack {
        /// When new grants resume.
        until: MonoTime,
    },
    /// The name is held or awaited as another family of kind than the one
    /// asked (permits on a lock, a lock on a semaphore, another permit
    /// count): the request is refused, not queued.
    #[error("the name is held or awaited as {0}")]
    KindMismatch(Kind),
    /// This speaker has used every fence of its term; a new term is needed.
    #[error("the fences of this term are used up; a new speaker term is needed")]
    FencesExhausted,
    /// The name is free, but earlier requests wait for it (a set waiting
    /// for its other names): nobody overtakes them.
    #[error("lock {0} is free but awaited by earlier requests")]
    Awaited(String),
    /// A set that names no name, or one name (or one id) twice.
    #[error("a set names each of its names once, each with an id of its own, and at least one")]
    BadSet,
    /// A lock-delay over [`crate::Lock::MAX_DELAY`], or one that leaves no
    /// room for a lease under the table's longest (`max`).
    #[error("a lock-delay is at most {:?} and shorter than the longest lease, {:?}", crate::Lock::MAX_DELAY, .max)]
    BadDelay {
        /// The table's longest lease.
        max: std::time::Duration,
    },
    /// The session the lock was to hang off is not held: it ended, its
    /// lease ran out, or it never was.
    #[error("the session is not held")]
    NoSession,
}

/// Why a lock was not renewed or released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LockError {
    /// No lock of that name holds that id: it was released, expired, or
    /// lost to a conflict.
    #[error("the lock is not held under that id")]
    NotHeld,
    /// The lock hangs off a session: it is renewed by renewing its session.
    #[error("the lock hangs off a session: renew the session")]
    InSession,
    /// The table is not rebuilt yet.
    #[error(transparent)]
    NotRebuilt(#[from] NotRebuilt),
}

/// A rebuild was for a generation the table has left: it changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("rebuild for generation {asked} discarded: the table is at generation {current}")]
pub struct StaleGeneration {
    /// The generation the rebuild was for.
    pub asked: u64,
    /// The table's generation now.
    pub current: u64,
}

/// Why a rebuild changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RebuildError {
    /// The table was dropped since the generation the nodes were read for.
    #[error(transparent)]
    Stale(#[from] StaleGeneration),
    /// The term is too large to be carried in a fence.
    #[error("term {0} does not fit in a fence")]
    EpochTooLarge(u64),
    /// A report holds a lock granted in a later term than the rebuild's:
    /// another node has spoken since, so this one no longer leads. (Taken
    /// in, that lock would stay in this node's `Granted`, where a release
    /// passed on only to the nodes that hold the lock would not reach it.)
    #[error("a member reported a lock of term {reported}, later than term {term}")]
    NewerTerm {
        /// The rebuild's term.
        term: u64,
        /// The latest term of a reported lock.
        reported: u64,
    },
    /// A rebuild that has not seen every grant and holds no new grant
    /// back, in a term whose fences already say it has
    /// ([`Fence::SEEN_ALL`], from an earlier rebuild of the term or the end
    /// of its strict hold): fences only grow, so every later one would say
    /// so too, and win a settlement it must not. The term cannot speak
    /// again.
    ///
    /// [`Fence::SEEN_ALL`]: crate::Fence::SEEN_ALL
    #[error("term {0} already granted as having seen every grant; this rebuild has not")]
    SeenAllSpent(u64),
}
