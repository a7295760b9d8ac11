//! Why a member refuses a call: typed, so the driver maps each to its
//! answer and callers can branch on it.

use locktable::{AcquireError, Kind, Lock};

/// A call the protocol refuses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// This member speaks, but its table is not rebuilt from the members
    /// yet (or was dropped).
    #[error("the cluster lock table is not rebuilt from the nodes yet; retry")]
    NotRebuilt,
    /// This member does not speak for the cluster: it is not the leader,
    /// or was deposed.
    #[error("this node does not speak for the cluster now (the speaker changed); retry")]
    NotSpeaking,
    /// This member leads, but no quorum acknowledged it within its leader
    /// lease (less the guard's margin): another leader may be chosen
    /// meanwhile, so it grants nothing until one does. A speaker too busy
    /// to hear its members' heartbeat answers, paused, or cut off.
    #[error(
        "the speaker has not heard from a quorum of members within its leader lease (it is \
         overloaded, was paused or is cut off); retry"
    )]
    Unconfirmed,
    /// The table a grant was made in was dropped or rebuilt while the
    /// grant was put on record.
    #[error("the speaker's table changed while the grant was put on record; retry")]
    MovedOn,
    /// New grants are held back after a rebuild that missed members
    /// (strict mode).
    #[error("new grants are held back after a rebuild that missed members (strict mode); retry")]
    HeldBack,
    /// The speaker used every fence of its term.
    #[error("the fences of this speaker's term are used up; a new term is needed; retry")]
    FencesExhausted,
    /// The name is held by another lock.
    #[error("{} is held by another", .0.name)]
    Held(Box<Lock>),
    /// The name is held or awaited as another kind (permits on a lock, a
    /// lock on a semaphore, or another permit count): refused, not queued.
    #[error("the name is held or awaited as {0}")]
    KindMismatch(Kind),
    /// The name is free, but earlier requests wait for it (a set waiting
    /// for its other names), and this one would not wait.
    #[error("{0} is free, but earlier requests wait for it")]
    Awaited(String),
    /// A set that names no name, or one name twice.
    #[error("a set names each of its names once, and at least one")]
    BadSet,
    /// A lock-delay over a minute, or one leaving no lease under the
    /// speaker's longest.
    #[error("a lock-delay is at most 60 s and shorter than the longest lease ({} ms)", .max.as_millis())]
    BadDelay {
        /// The speaker's longest lease.
        max: std::time::Duration,
    },
    /// No lock of that name and id.
    #[error("the lock is not held under that id")]
    NotHeld,
    /// The session a lock was to hang off is not held.
    #[error("the session is not held: it ended, its lease ran out, or it never was")]
    NoSession,
    /// A renewal of a lock that hangs off a session: the session is renewed.
    #[error("the lock hangs off a session: renew the session")]
    InSession,
    /// A take-back of a grant its first caller never heard of, refused: the
    /// lock was renewed since, so a client has it (a retry of the same
    /// request was answered with it).
    #[error("the lock was renewed since it was granted: a client has it")]
    Claimed,
    /// A renewal of a lock the table lacks while new grants are held back:
    /// a member the rebuild missed may have it on record.
    #[error(
        "this lock is not in the table rebuilt without some members, which may have it on \
         record; new grants are held back meanwhile: retry (through another node)"
    )]
    MayBeOnRecordElsewhere,
    /// A session's renewal through a node that keeps a record of the
    /// session, which the table lacks (a rebuild missed the members keeping
    /// it): the node is to send its records of the session's locks, to be
    /// taken back ([`crate::Member::reclaim_session`]).
    #[error("this session is not in the table: its node's records are wanted to take it back")]
    RecordsWanted,
    /// A newer speaker read this member while a grant's answer was on its
    /// way: that rebuild did not see it, so its client must not hear of it.
    #[error("the speaker of term {read} read this node while the answer was on its way; retry")]
    ReadMeanwhile {
        /// The term that read this member.
        read: u64,
    },
    /// This member is stopping (shut down or removed): it takes no new
    /// record, which would leave with it.
    #[error("this node is stopping and keeps no new record; retry through another")]
    Stopping,
    /// Copies from a speaker older than a term this member has seen.
    #[error("copies from the speaker of term {term}, but term {seen} has begun")]
    StaleCopies {
        /// The sender's term.
        term: u64,
        /// The newest term this member has seen or been read by.
        seen: u64,
    },
    /// A grant reached too few members to be answered.
    #[error(
        "the lock reached {reached} of the {needed} other members it must reach before it is \
         answered (--copies {copies}); retry"
    )]
    TooFewCopies {
        /// Members that acknowledged a copy.
        reached: usize,
        /// Members that had to.
        needed: usize,
        /// The setting.
        copies: usize,
    },
}

impl Refusal {
    /// The refusal's kind as one snake_case word, for metrics' labels and
    /// logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::NotRebuilt => "not_rebuilt",
            Refusal::NotSpeaking => "not_speaking",
            Refusal::Unconfirmed => "unconfirmed",
            Refusal::MovedOn => "moved_on",
            Refusal::HeldBack => "held_back",
            Refusal::FencesExhausted => "fences_exhausted",
            Refusal::Held(_) => "held",
            Refusal::KindMismatch(_) => "kind_mismatch",
            Refusal::Awaited(_) => "awaited",
            Refusal::BadSet => "bad_set",
            Refusal::BadDelay { .. } => "bad_delay",
            Refusal::NotHeld => "not_held",
            Refusal::NoSession => "no_session",
            Refusal::InSession => "in_session",
            Refusal::Claimed => "claimed",
            Refusal::MayBeOnRecordElsewhere => "may_be_on_record_elsewhere",
            Refusal::RecordsWanted => "records_wanted",
            Refusal::ReadMeanwhile { .. } => "read_meanwhile",
            Refusal::Stopping => "stopping",
            Refusal::StaleCopies { .. } => "stale_copies",
            Refusal::TooFewCopies { .. } => "too_few_copies",
        }
    }
}

/// A refusal of the table's as the protocol answers it.
impl From<AcquireError> for Refusal {
    fn from(e: AcquireError) -> Self {
        match e {
            AcquireError::Held(lock) => Refusal::Held(lock),
            AcquireError::KindMismatch(kind) => Refusal::KindMismatch(kind),
            AcquireError::Awaited(name) => Refusal::Awaited(name),
            AcquireError::BadSet => Refusal::BadSet,
            AcquireError::BadDelay { max } => Refusal::BadDelay { max },
            AcquireError::NoSession => Refusal::NoSession,
            AcquireError::NotRebuilt(_) => Refusal::NotRebuilt,
            AcquireError::HeldBack { .. } => Refusal::HeldBack,
            AcquireError::FencesExhausted => Refusal::FencesExhausted,
        }
    }
}
