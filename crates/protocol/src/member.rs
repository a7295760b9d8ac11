//! A member's state above the lock table: the table it speaks from, its
//! clients' locks (`Held`), copies of other members' grants, and who else
//! may keep a record of each lock; with the speaker's operations and a
//! follower's.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use leasehold_api::RebuildReport;
use locktable::{Acquired, Held, Lock, LockId, MonoTime, NodeId, Table};

use crate::config::MemberConfig;
use crate::departed::Departed;
use crate::floor::CopiesFloor;
use crate::guard::Guard;
use crate::members::Members;
use crate::refusal::Refusal;
use crate::sabotage::Sabotage;

mod copying;
mod recording;
mod records;
mod sessions;
mod speaker;
mod terms;

pub use copying::{Copying, OnRecord, SessionLocks};
pub use recording::{RecordOut, Recording};
pub use sessions::{RenewedSession, SessionRenewal, SessionSent};

/// The nodes a lock moved from (or was copied to), whose records of it
/// end by `until`.
#[derive(Debug, Clone, Copy)]
struct Moved {
    from: Members,
    until: MonoTime,
}

/// The size at which `Member::moved` is first pruned.
const MOVED_PRUNE_AT: usize = 4096;

/// The table a grant or renewal was made by: its term and generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Made {
    /// The term the table speaks for (`None` while it speaks for none).
    pub term: Option<u64>,
    /// The table's generation.
    pub generation: u64,
}

/// What the speaker answers an acquisition ([`Member::acquire_named`]).
#[derive(Debug)]
pub enum Acquisition {
    /// The table's answer (granted or waiting), and the table that made it.
    Table(Acquired, Made),
    /// The caller's own earlier grant holds the name: renew it and answer
    /// with it.
    Own(Lock),
}

/// What the speaker answers a set's acquisition ([`Member::acquire_set`]).
#[derive(Debug)]
pub enum SetAcquisition {
    /// The table's answer (granted or waiting), and the table that made it.
    Table(locktable::AcquiredSet, Made),
    /// The caller's own earlier grants hold every name: renew them and
    /// answer with them, in the order asked.
    Own(Vec<Lock>),
}

/// A renewal as the speaker receives it.
#[derive(Debug, Clone)]
pub struct Renewal<'a> {
    /// The lock's name.
    pub name: &'a str,
    /// The lock's id.
    pub id: LockId,
    /// The lease asked for.
    pub lease: Option<Duration>,
    /// The node whose client renews: it keeps the record from now on.
    pub node: NodeId,
    /// That node's record of the lock, if it has one.
    pub record: Option<Lock>,
    /// New data for the lock, if the renewal changes it.
    pub data: Option<String>,
}

/// A call this member forwarded to the speaker, as it left: when, and the
/// highest term that had read this member then (read from
/// [`Member::read_by`], or a mirror of it, before the call is sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forwarded {
    /// When the call was sent.
    pub sent: MonoTime,
    /// The highest term whose speaker had read this member when it was.
    pub read_before: u64,
}

/// What [`Member::poll`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Polled {
    /// When the table next has something to end (only while it may grant).
    pub next: Option<MonoTime>,
    /// Whether the table's locks or waits changed.
    pub changed: bool,
}

/// One member's protocol state.
pub struct Member {
    config: MemberConfig,
    pub(crate) table: Table,
    held: Held,
    /// Copies of locks held through other nodes, sent by a speaker so
    /// that a grant outlives one crash.
    copies: Held,
    /// The term whose speaker this table is (or is being rebuilt for).
    pub(crate) speaking: Option<u64>,
    /// Locks granted this term that other members than the lock's node
    /// may keep a record of: the nodes a renewal moved them from, and the
    /// members sent a copy.
    moved: HashMap<LockId, Moved>,
    /// Locks of a session answered to a retry of their named acquisition
    /// (`Own`): their client holds them, which no renewal of their own
    /// shows, so a take-back of the first try keeps them.
    /// Each with its session: pruned once the session is gone.
    claimed: HashMap<LockId, LockId>,
    /// `moved` is pruned of ended records when it grows to this size.
    moved_prune_at: usize,
    pub(crate) last_rebuild: Option<RebuildReport>,
    /// The sessions renewed since the last rebuild while it held new
    /// grants back: their clients were answered the session's locks as the
    /// table had them, so a late read takes none of theirs back (a lock the
    /// client was told it lost, or never counted, would be held by nobody
    /// for as long as the session runs).
    pub(crate) renewed_in_hold: BTreeSet<LockId>,
    /// Set when the member starts to shut down: it speaks no more,
    /// whatever Raft still says.
    stopping: bool,
    /// The highest term whose speaker has read this member's report.
    read_by: u64,
    /// Members that failed a copy and have not acknowledged one since.
    suspects: BTreeSet<NodeId>,
    /// The lower copies this member made before its count last rose, while
    /// a grant made with them may run.
    own_floor: CopiesFloor,
    /// The copies other members said they make (their own floor), while a
    /// grant they made with them may run.
    heard_floor: CopiesFloor,
    /// The leader lease each other member last said it runs with.
    leader_leases: BTreeMap<NodeId, Duration>,
    /// Members gone from the configuration lately, which rebuilds still
    /// read.
    pub(crate) departed: Departed,
}

/// What another member says it runs with (stamped on its messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerTerms {
    /// The fewest copies a grant of its may still have (`None`: it has
    /// made none that may run).
    pub copies: Option<usize>,
    /// Its longest lease.
    pub max_lease: Duration,
    /// Its leader lease: how long after a heartbeat it took it refuses to
    /// vote for another (`None`: not said, as on a request, which may have
    /// waited since its member restarted with other timings).
    pub leader_lease: Option<Duration>,
}

impl Member {
    /// A member with an empty table that speaks for no term.
    pub fn new(config: MemberConfig) -> Self {
        let config = config.sorted();
        Member {
            table: Table::new(config.lease),
            config,
            held: Held::new(),
            copies: Held::new(),
            speaking: None,
            moved: HashMap::new(),
            claimed: Default::default(),
            moved_prune_at: MOVED_PRUNE_AT,
            last_rebuild: None,
            renewed_in_hold: BTreeSet::new(),
            stopping: false,
            read_by: 0,
            suspects: BTreeSet::new(),
            own_floor: CopiesFloor::default(),
            heard_floor: CopiesFloor::default(),
            leader_leases: BTreeMap::new(),
            departed: Departed::default(),
        }
    }

    /// Whether `id` was released (or lost) lately: a grant must not reuse
    /// it, or a rebuild would leave it out.
    pub fn is_forgotten(&self, id: LockId, now: MonoTime) -> bool {
        self.table.is_forgotten(id, now)
    }

    /// The settings.
    pub fn config(&self) -> &MemberConfig {
        &self.config
    }

    /// Switches safety mechanisms off, or on again (a chaos suite's fault
    /// plan changes at run time); [`Sabotage::NONE`] but in such tests.
    pub fn set_sabotage(&mut self, sabotage: Sabotage) {
        self.config.sabotage = sabotage;
    }

    /// This member's id.
    pub fn id(&self) -> NodeId {
        self.config.id
    }

    /// The members a release of a lock held through `node` goes to.
    pub fn member(&self, node: NodeId) -> Members {
        match self.config.members.binary_search(&node) {
            Ok(_) => Members::only(node),
            Err(_) => Members::ALL,
        }
    }

    /// The members of `to` other than this one, in id order: where a
    /// release this member passes on goes.
    pub fn others_in(&self, to: Members) -> impl Iterator<Item = NodeId> + '_ {
        let me = self.config.id;
        self.config
            .members
            .iter()
            .copied()
            .filter(move |id| to.contains(*id) && *id != me)
    }

    /// Whether the table is rebuilt (it may still be barred from granting
    /// by the guard).
    pub fn is_rebuilt(&self) -> bool {
        self.table.is_rebuilt()
    }

    /// The table's generation: it moves on at every drop.
    pub fn generation(&self) -> u64 {
        self.table.generation()
    }

    /// The term whose speaker this table is, or is being rebuilt for.
    pub fn speaking(&self) -> Option<u64> {
        self.speaking
    }

    /// When the table next has a lease or wait to end.
    pub fn next_deadline(&self) -> Option<MonoTime> {
        self.table.next_deadline()
    }

    /// Locks and waiting requests in the table.
    pub fn table_size(&self) -> (usize, usize) {
        (self.table.len(), self.table.waiting())
    }

    /// The leases that ran out in the table since the last call (for the
    /// driver's metrics; see [`Table::take_lapsed`]).
    pub fn take_lapsed(&mut self) -> Vec<locktable::Lapsed> {
        self.table.take_lapsed()
    }

    /// How many requests wait for each name that has any, in no order.
    pub fn queue_lengths(&self) -> impl Iterator<Item = (&str, usize)> {
        self.table.queue_lengths()
    }

    /// How many leases the table has ended as they ran out, so far.
    pub fn expired(&self) -> u64 {
        self.table.expired()
    }

    /// What the last rebuild did.
    pub fn last_rebuild(&self) -> Option<&RebuildReport> {
        self.last_rebuild.as_ref()
    }

    /// The highest term whose speaker has read this member's report.
    pub fn read_by(&self) -> u64 {
        self.read_by
    }

    /// Whether the member is shutting down.
    pub fn is_stopping(&self) -> bool {
        self.stopping
    }

    /// The table as it is now.
    pub fn made(&self) -> Made {
        Made {
            term: self.speaking,
            generation: self.table.generation(),
        }
    }

    /// Whether this member leads the term its table speaks for and its
    /// guard lets it grant at `now`, rebuilt or not.
    pub fn may_speak(&self, guard: &Guard, now: MonoTime) -> bool {
        !self.stopping
            && self.speaking.is_some_and(|term| {
                guard.allows(term, self.guard_lease(), now)
                    || (self.config.sabotage.no_grant_guard && guard.leader_term() == Some(term))
            })
    }

    /// Why this member cannot grant at `now` ([`Refusal::NotRebuilt`] if it
    /// can by now): for a waiting request its table turned away.
    pub fn unable(&self, guard: &Guard, now: MonoTime) -> Refusal {
        self.speaker(guard, now)
            .err()
            .unwrap_or(Refusal::NotRebuilt)
    }

    /// `Ok` if this member may grant from its table at `now`; if not, why
    /// not: stopping, not speaking (or deposed), not rebuilt, or its
    /// leadership not confirmed by a quorum within the guard's lease.
    fn speaker(&self, guard: &Guard, now: MonoTime) -> Result<(), Refusal> {
        if self.table.is_rebuilt() && self.may_speak(guard, now) {
            return Ok(());
        }
        let Some(term) = self.speaking else {
            return Err(Refusal::NotSpeaking);
        };
        if self.stopping {
            Err(Refusal::Stopping)
        } else if guard.leader_term() != Some(term) {
            Err(Refusal::NotSpeaking)
        } else if !self.table.is_rebuilt() {
            Err(Refusal::NotRebuilt)
        } else {
            Err(Refusal::Unconfirmed)
        }
    }

    /// Whether the table that made a grant still speaks, rebuilt and
    /// within its guard: same term, same generation (a table dropped and
    /// rebuilt again may have settled the grant as lost).
    pub fn still_speaks_for(&self, made: Made, guard: &Guard, now: MonoTime) -> bool {
        self.speaks_for(made, guard, now).is_ok()
    }

    /// `Ok` if the table that made a grant still speaks, rebuilt and
    /// guarded, at `now`; if not, why not ([`Refusal::MovedOn`] when it
    /// was dropped or rebuilt since).
    pub fn speaks_for(&self, made: Made, guard: &Guard, now: MonoTime) -> Result<(), Refusal> {
        if made != self.made() {
            return Err(Refusal::MovedOn);
        }
        self.speaker(guard, now)
    }
}
