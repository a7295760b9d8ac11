//! The leasehold member protocol above the lock table, with no I/O: a
//! [`Member`] takes events (leadership facts from Raft as a [`Guard`],
//! client calls, peer messages, reports) with the time they happen at, and
//! answers what to do. The node drives it on tokio and HTTP; the
//! simulation drives the same code on a simulated clock and network.
//!
//! What lives here is every rule of the speaker protocol that the lock
//! table (`locktable`) does not own:
//! - the grant guard: a speaker grants only for the term its table was
//!   rebuilt in, while a quorum's last acknowledgement is fresh
//!   ([`guard`]);
//! - when a table is dropped, and when a rebuild is tried, retried and
//!   given up on ([`Leadership`]);
//! - which members a rebuild must read and when it has read enough
//!   ([`Reads`]), which to read now and again and when to stop
//!   ([`Reading`]), and what the rebuilt table holds back ([`Member::rebuild`]);
//! - the holder's node's record (`Held`) and copies, which member may keep
//!   a record of a lock, and who hears of a release ([`Members`]);
//! - how many copies a grant needs, where they go and when its client may
//!   hear of it ([`OnRecord`]), and
//!   the fewest a running grant may have after the count rose
//!   ([`CopiesFloor`]);
//! - a retry of an acquisition the caller named: answered with its own
//!   grant, not refused as held ([`Member::acquire_named`], [`waited`]);
//! - how a release is passed on to a member: retried with backoff until
//!   acknowledged or ended, and given to every other member while that one
//!   is slow or failing ([`ReleaseSender`]).
//!
//! Nothing here reads a clock, sleeps or sends: every method takes `now`
//! (the lease clock, [`locktable::MonoTime`]) and returns what to send.

mod config;
mod copies;
mod departed;
mod floor;
pub mod guard;
mod leadership;
mod member;
mod members;
mod rebuild;
mod refusal;
mod releases;
mod retry;
mod sabotage;

pub use config::{MemberConfig, RebuildMode};
pub use copies::{
    copies_for, copies_in, copies_needed, CopyRound, CopyStep, COPY_HEDGE, COPY_TIMEOUT,
    DEFAULT_COPIES,
};
pub use departed::{Departed, DepartedRead, Gone};
pub use floor::{CopiesFloor, FLOOR_MARGIN};
pub use guard::{Guard, Leader, LEASE_MARGIN};
pub use leadership::{Attempt, Leadership, Step, RETRY_AT_MOST, RETRY_FIRST, STEP_DOWN_AFTER};
pub use member::{
    Acquisition, Copying, Forwarded, Made, Member, OnRecord, PeerTerms, Polled, RecordOut,
    Recording, Renewal, RenewedSession, SessionLocks, SessionRenewal, SessionSent, SetAcquisition,
};
pub use members::Members;
pub use rebuild::{
    at_risk_for, AttemptOut, LateRead, MemberRead, ReadOut, Reading, Reads, RebuildDone,
    RebuildFeed, RebuildInput, RebuildJob, Rebuilding, SettledRebuild, READ_AGAIN_AFTER,
    STRAGGLER_SHARE,
};
pub use refusal::Refusal;
pub use releases::{Batch, Outbox, Release, ReleaseSender};
pub use retry::{is_grant_of, request_lock_id, waited, Named, Waited};
pub use sabotage::Sabotage;
