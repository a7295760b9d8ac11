//! The errors callers branch on.

use leasehold_api::LockView;

/// Why a call did not do what was asked.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Another holds the lock (at the end of the wait, if any).
    #[error("{} is held by {:?}", .0.name, .0.holder)]
    Held(Box<LockView>),
    /// The name is free, but an earlier request waits for it (a set
    /// waiting for all its names keeps its free ones from later requests):
    /// refused as [`Error::Held`] is, with no holder to show (`409 held`
    /// without `lock`). Ask with a wait to queue behind it, or retry.
    #[error("{0}")]
    Reserved(String),
    /// The name is held or awaited as another kind than asked (permits on
    /// a lock, a lock on a semaphore, another permit count): refused, not
    /// queued.
    #[error("{0}")]
    KindMismatch(String),
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
    /// Nodes answered, but none could serve (no speaker yet, `503`), or
    /// could not be reached at all, before the call's time ran out, and no
    /// attempt was left without an answer after it was sent.
    /// Retry later. (A follower may answer `503` after the speaker granted
    /// a lock, if a newer speaker read it meanwhile: that grant is never
    /// answered to anyone, and its lease runs out unrenewed.)
    #[error("the cluster is unavailable: {0}")]
    Unavailable(String),
    /// No node answered before the call's time ran out (unreachable, timed
    /// out). For an acquire or a release the outcome is unknown: the lock
    /// may have been granted (its lease then runs out unrenewed) or
    /// released.
    #[error("no answer from the cluster: {0}")]
    NoAnswer(String),
    /// The cluster refused the credentials (`401`): a token is missing or
    /// wrong. Retrying will not help.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// The token may not do that to that name, or on that route (`403`).
    /// Retrying will not help.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// A node failed (`500`), is not a member of the cluster the client
    /// was given (`409 wrong_member`), or answered without what its answer
    /// must carry. Retrying elsewhere may help; the operator should look.
    #[error("the node failed: {0}")]
    Server(String),
    /// The request was refused as malformed, or the options are invalid.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// A membership change was refused: an unknown member, one that
    /// exists, another change under way, or a quorum that would be lost.
    #[error("{0}: {1}")]
    Membership(leasehold_api::ErrorCode, String),
    /// The node serves no such call (`404 unknown_route`, `405
    /// method_not_allowed`): the endpoint is not a node's address (a path
    /// after `host:port`, a proxy in between), or the node is of a version
    /// without it. Nothing was done; retrying will not help.
    #[error("the node serves no such call (is the endpoint a leasehold node's address?): {0}")]
    UnknownRoute(String),
}

impl Error {
    /// Whether someone else has the name now: it is held
    /// ([`Error::Held`]) or kept for an earlier request ([`Error::Reserved`]).
    /// Ordinary contention: retry later, or ask with a wait to queue.
    pub fn is_taken(&self) -> bool {
        matches!(self, Error::Held(_) | Error::Reserved(_))
    }
}
