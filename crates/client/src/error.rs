//! The errors callers branch on.

use leasehold_api::LockView;

/// Why a call did not do what was asked.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another holds the lock (at the end of the wait, if any).
    #[error("{} is held by {:?}", .0.name, .0.holder)]
    Held(Box<LockView>),
    /// The lock is not held under that id: released, expired, or lost.
    #[error("the lock is not held")]
    NotHeld,
    /// The lock was lost: a renewal was refused, or the lease ran out on the
    /// client's own clock before a renewal got through.
    #[error("the lock was lost")]
    Lost,
    /// A grant arrived after the client's own count of its lease had run
    /// out; it was released and is not held.
    #[error("the grant arrived after its lease had run out; it was released")]
    ArrivedLate,
    /// No node answered, or none could serve, before the call's time ran
    /// out. For an acquire or a release the outcome is unknown.
    #[error("the cluster is unavailable: {0}")]
    Unavailable(String),
    /// The request was refused as malformed, or the options are invalid.
    #[error("bad request: {0}")]
    BadRequest(String),
}
