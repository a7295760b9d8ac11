//! What the table tells of itself besides its locks: a listing (the locks
//! under a prefix, how many there are, who waits for each, in order), and
//! the leases that ran out, for the caller's metrics.

use std::time::Duration;

use crate::lock::{Kind, Lock, NodeId};
use crate::time::MonoTime;

/// The most waiting requests a listing shows of one lock (the first ones,
/// in the order they will be served); `waiters` counts them all.
pub const QUEUE_SHOWN: usize = 100;

/// Locks listed under a prefix ([`crate::Table::listing`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    /// The locks, in name order, at most the limit asked: of a name held
    /// shared or as permits, its oldest holder.
    pub locks: Vec<Lock>,
    /// The other holders of each of `locks`' names, oldest first, in the
    /// same order (empty where one holds the name, or where not known).
    pub also: Vec<Vec<Lock>>,
    /// How many locks are held under the prefix in all (`None` where it is
    /// not known: a listing forwarded to a speaker of an older protocol).
    pub total: Option<usize>,
    /// How many requests wait for each of `locks`, in the same order.
    pub waiters: Vec<usize>,
    /// The requests waiting for each of `locks`, in the same order, each
    /// in the order it will be served, at most [`QUEUE_SHOWN`] of a lock
    /// (empty where not known: a speaker of an older build).
    pub queues: Vec<Vec<Queued>>,
    /// The names under the prefix that nobody holds but requests wait for
    /// (a set waiting for all its names keeps the free ones for itself), in
    /// name order, at most the limit asked (empty where not known: a
    /// speaker of an earlier build).
    pub awaited: Vec<Awaited>,
}

/// A name nobody holds that requests wait for, kept free for them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Awaited {
    /// The name.
    pub name: String,
    /// How many wait.
    pub count: usize,
    /// The first [`QUEUE_SHOWN`] of them, in the order they will be served.
    pub first: Vec<Queued>,
}

/// The requests waiting for one name ([`crate::Table::waiting_for`]), and
/// the name's holders besides the one a get answers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Waiting {
    /// How many wait.
    pub count: usize,
    /// The first [`QUEUE_SHOWN`] of them, in the order they will be served.
    pub first: Vec<Queued>,
    /// The name's other holders (held shared or as permits), oldest first,
    /// after the oldest (empty where not known: a speaker of an earlier
    /// build).
    pub others: Vec<Lock>,
}

/// A request waiting for a lock held by another, as a listing shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued {
    /// Who asks.
    pub holder: String,
    /// The node whose client asks.
    pub node: NodeId,
    /// When it began to wait.
    pub since: MonoTime,
    /// When its wait ends, unless granted before.
    pub until: MonoTime,
    /// The lease it will be granted.
    pub lease: Duration,
    /// What it asks for.
    pub kind: Kind,
    /// The other names it asks for together with this one (a set), in the
    /// order asked; empty for one name.
    pub with: Vec<String>,
}

/// The most lapsed leases the table keeps between two
/// [`crate::Table::take_lapsed`]: more are counted in
/// [`crate::Table::expired`] only.
pub const LAPSED_KEPT: usize = 100_000;

/// A lease that ran out (no release came), as the table's metrics see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lapsed {
    /// The name that was locked.
    pub name: String,
    /// How long the lock was held, from its grant to its lease's end.
    pub held: Duration,
}
