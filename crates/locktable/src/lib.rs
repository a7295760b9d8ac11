//! The cluster locks of leasehold: the table the node speaking for the
//! cluster grants them from ([`Table`]), and the record every node keeps of
//! the locks its own clients hold ([`Held`]).
//!
//! A lock is granted for a lease, and lapses when the lease ends whatever its
//! holder became: a process that died holding one does not hold it forever.
//!
//! A lease is counted on the clock of the node keeping the lock, which is
//! the monotonic clock of the process: a step of the wall clock does not end
//! it early. The nodes pass a lease to one another as the time left
//! ([`LockInTransit`]), which each adds to its own clock, so their clocks
//! need not agree on the time, only tick at the same rate. The holder is to
//! be done before the lease ends, which it counts on its own clock the same
//! way.
//!
//! The table is in memory, and the node speaking for the cluster changes. A
//! node taking the speaking over rebuilds its table ([`Table::rebuild`]) from
//! what every node says its clients hold, and what it granted while it spoke
//! ([`Table::granted`]), before it grants anything: its own table is the one
//! it had when it last spoke, or none. The grants are read too because a
//! lock granted to a request a node handed over is held before that node
//! hears of it.
//!
//! This crate does no I/O, reads no clock and starts no thread: the caller
//! passes the time in ([`MonoTime`]) and collects the answers to waiting
//! requests ([`Table::take_answers`]).

mod chunked;
mod error;
mod forgotten;
mod held;
mod holders;
mod listing;
mod lock;
mod rebuild;
pub mod session;
mod settle;
mod sharded;
mod slots;
mod table;
mod time;

pub use error::{AcquireError, LockError, NotRebuilt, RebuildError, StaleGeneration};
pub use held::{Held, HeldLock};
pub use listing::{Awaited, Lapsed, Listing, Queued, Waiting, LAPSED_KEPT, QUEUE_SHOWN};
pub use lock::{newer_data, BadLockId, Fence, Kind, Lock, LockId, LockInTransit, NodeId, Request};
pub use rebuild::{RebuildBasis, RebuildFrom, Settled, Settling};
pub use session::{is_session_name, session_name, SESSION_PREFIX};
pub use table::{Acquired, AcquiredSet, Answer, Rebuilt, SessionRenewed, Table, WaiterId};
pub use time::{LeaseRule, MonoTime};
