//! The errors of table operations, as types a caller branches on.

use crate::lock::Lock;
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
    /// This speaker has used every fence of its term; a new term is needed.
    #[error("the fences of this term are used up; a new speaker term is needed")]
    FencesExhausted,
}

/// Why a lock was not renewed or released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LockError {
    /// No lock of that name holds that id: it was released, expired, or
    /// lost to a conflict.
    #[error("the lock is not held under that id")]
    NotHeld,
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
