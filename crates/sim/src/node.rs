//! One leasehold process: its Raft, its table and `Held`, and the speaker
//! task's state (`crates/node/src/node.rs` and `speaker.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use locktable::{
    Answer, Held, LeaseRule, LockId, LockInTransit, MonoTime, NodeId, Table, WaiterId,
};

use crate::config::timing::{
    LEADER_LEASE_MS, LEASE_MARGIN_MS, LEASE_MS, MAX_LEASE_MS, RETRY_AT_MOST_MS, RETRY_FIRST_MS,
    STEP_DOWN_AFTER_MS,
};
use crate::copies::CopyWait;
use crate::raft::{Persisted, Raft};
use crate::world::{ClientId, Event, ReqId};

/// Who is waiting for a table answer.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Origin {
    Local {
        client: ClientId,
        req: ReqId,
        arrived: u64,
    },
    Forwarded {
        node: NodeId,
        client: ClientId,
        req: ReqId,
        arrived: u64,
    },
}

impl Origin {
    /// The node whose client asked: the holder's node.
    pub(crate) fn node(&self, speaker: NodeId) -> NodeId {
        match self {
            Origin::Local { .. } => speaker,
            Origin::Forwarded { node, .. } => *node,
        }
    }

    pub(crate) fn arrived(&self) -> u64 {
        match self {
            Origin::Local { arrived, .. } | Origin::Forwarded { arrived, .. } => *arrived,
        }
    }
}

/// The table a grant or renewal was made by: its term and generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Made {
    pub(crate) term: Option<u64>,
    pub(crate) generation: u64,
}

/// A call this node forwarded to the speaker, waiting for its answer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Forwarded {
    pub(crate) sent: u64,
    /// The highest term that had read this node when the call left.
    pub(crate) read_before: u64,
    /// The lock a forwarded renewal is for.
    pub(crate) renewing: Option<LockId>,
}

/// Where a rebuild attempt is.
pub(crate) enum Phase {
    /// Waiting for ReadIndex.
    Confirming,
    /// Reading the members.
    Reading(Reads),
    /// Over; the watch loop takes the outcome at its next turn.
    Done(Outcome),
}

/// A rebuild's reads of the members (`read_members`).
pub(crate) struct Reads {
    /// Each report read, whether its member restarted lately, and when it
    /// arrived.
    pub(crate) reports: BTreeMap<NodeId, (Vec<LockInTransit>, bool, u64)>,
    /// The members not read yet.
    pub(crate) unread: BTreeMap<NodeId, Unread>,
    /// When the reads end (`--rebuild-timeout` after they began).
    pub(crate) deadline: u64,
}

/// A member a rebuild has not read yet.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Unread {
    /// A read of it failed (`failing`): its first read has ended.
    pub(crate) failing: bool,
    /// The network lost its read under way or the answer, or the member
    /// was down when the read came: the read has failed, and the speaker
    /// learns so at its next look (`ReadCheck`).
    pub(crate) lost: bool,
}

impl Reads {
    /// The node's condition to stop reading early: every member's first
    /// read has ended (answered or failed), and the members failing, with
    /// those that answered but restarted lately, are fewer than `copies`.
    pub(crate) fn enough(&self, copies: usize) -> bool {
        let restarted = self.reports.values().filter(|r| r.1).count();
        self.unread.is_empty()
            || (self.unread.values().all(|u| u.failing) && restarted + self.unread.len() < copies)
    }
}

/// How a rebuild attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Rebuilt,
    Failed(&'static str),
}

/// One rebuild attempt (`speaker.rs`, `rebuild`).
pub(crate) struct Attempt {
    pub(crate) id: u64,
    pub(crate) term: u64,
    pub(crate) generation: u64,
    pub(crate) phase: Phase,
}

/// When the next rebuild attempt of this term may start (`Retry`).
pub(crate) struct Retry {
    pub(crate) failures: u32,
    pub(crate) next: u64,
    pub(crate) failing_since: Option<u64>,
}

impl Retry {
    pub(crate) fn new(now: u64) -> Retry {
        Retry {
            failures: 0,
            next: now,
            failing_since: None,
        }
    }

    pub(crate) fn due(&self, now: u64) -> bool {
        now >= self.next
    }

    /// 50 ms doubling to 1 s, as the node.
    pub(crate) fn failed(&mut self, now: u64) {
        let wait = (RETRY_FIRST_MS << self.failures.min(16)).min(RETRY_AT_MOST_MS);
        self.failures += 1;
        self.next = now + wait;
        self.failing_since.get_or_insert(now);
    }

    pub(crate) fn hopeless(&self, now: u64) -> bool {
        self.failing_since
            .is_some_and(|since| now - since >= STEP_DOWN_AFTER_MS)
    }
}

pub(crate) struct Node {
    pub(crate) id: NodeId,
    /// Counts the node's processes: events for an earlier one are void.
    pub(crate) incarnation: u64,
    /// This node's clock reads `offset + sim time`: only durations cross.
    pub(crate) offset_ms: u64,
    pub(crate) alive: bool,
    pub(crate) paused_until: u64,
    /// What reached this node while it was paused.
    pub(crate) parked: Vec<Event>,
    /// Paused until its successor's read arrives (then a little longer).
    pub(crate) dozing: bool,
    /// When this process started.
    pub(crate) started_at: u64,
    /// Whether it is the node's first process (a new data directory).
    pub(crate) first_start: bool,
    pub(crate) raft: Raft,
    pub(crate) table: Table,
    pub(crate) held: Held,
    /// Copies of locks held through other nodes, sent by a speaker.
    pub(crate) copies: Held,
    /// The highest term whose speaker has read this node's report.
    pub(crate) read_by: u64,
    /// Members other than a lock's node that may keep a record of a lock
    /// granted this term (a renewal moved it from them, or they took a
    /// copy): a release is passed on to them too.
    pub(crate) moved: BTreeMap<LockId, BTreeSet<NodeId>>,
    /// Members that failed a copy and have not acknowledged one since.
    pub(crate) suspects: BTreeSet<NodeId>,
    /// Grants and renewals waiting for their copies' acknowledgements.
    pub(crate) copying: BTreeMap<u64, CopyWait>,
    /// Copies queued for their members, sent at the next flush: (member,
    /// key, term, lock).
    pub(crate) copy_queue: Vec<(NodeId, u64, u64, locktable::Lock)>,
    /// The term whose speaker this table is (or is being rebuilt for).
    pub(crate) speaking: Option<u64>,
    /// Shutting down: speaks no more.
    pub(crate) stopping: bool,
    /// When a shutdown began, and how long after it stops the node starts
    /// again.
    pub(crate) stop_began: u64,
    pub(crate) restart_after: u64,
    pub(crate) attempt: Option<Attempt>,
    pub(crate) retry: Retry,
    pub(crate) waiters: HashMap<WaiterId, (Origin, Made)>,
    /// Answers the table gave inside an acquire, told at the next dispatch.
    pub(crate) undelivered: Vec<Answer>,
    /// Forwarded acquires and renewals.
    pub(crate) pending: HashMap<ReqId, Forwarded>,
}

impl Node {
    /// A process of node `id` starting now, with what its store kept.
    pub(crate) fn start(
        id: NodeId,
        voters: u64,
        offset_ms: u64,
        store: Option<Persisted>,
        seed: u64,
        now: u64,
    ) -> Node {
        Node {
            id,
            incarnation: 0,
            offset_ms,
            alive: true,
            paused_until: 0,
            parked: Vec::new(),
            dozing: false,
            started_at: now,
            first_start: store.is_none(),
            raft: Raft::load(id, voters, store, seed, now),
            table: Table::new(LeaseRule {
                default: Duration::from_millis(LEASE_MS),
                max: Duration::from_millis(MAX_LEASE_MS),
            }),
            held: Held::new(),
            copies: Held::new(),
            read_by: 0,
            moved: BTreeMap::new(),
            suspects: BTreeSet::new(),
            copying: BTreeMap::new(),
            copy_queue: Vec::new(),
            speaking: None,
            stopping: false,
            stop_began: 0,
            restart_after: 0,
            attempt: None,
            retry: Retry::new(now),
            waiters: HashMap::new(),
            undelivered: Vec::new(),
            pending: HashMap::new(),
        }
    }

    pub(crate) fn mono(&self, t: u64) -> MonoTime {
        MonoTime::from_nanos((self.offset_ms + t) * 1_000_000)
    }

    pub(crate) fn made(&self) -> Made {
        Made {
            term: self.speaking,
            generation: self.table.generation(),
        }
    }

    /// `still_speaks_for`: the table that made a grant still speaks,
    /// rebuilt and within its guard.
    pub(crate) fn still_speaks_for(&self, made: Made, t: u64, ignore_lease: bool) -> bool {
        made == self.made() && self.may_speak(t, ignore_lease)
    }

    /// `lock` as this node sends it at `t`.
    pub(crate) fn lock_view(&self, lock: &locktable::Lock, t: u64) -> LockInTransit {
        lock.in_transit(self.mono(t))
    }

    /// This node's record of `id`: its client's, or a copy.
    pub(crate) fn held_record(&self, id: LockId) -> Option<locktable::Lock> {
        match (self.held.get(id), self.copies.get(id)) {
            (Some(held), Some(copy)) if copy.expires > held.expires => Some(copy),
            (held, copy) => held.or(copy),
        }
    }

    /// `Node::may_speak`: this node leads the term its table is for, and a
    /// quorum acknowledged it recently enough that no other leader can
    /// exist yet.
    pub(crate) fn may_speak(&self, t: u64, ignore_lease: bool) -> bool {
        if self.stopping || !self.table.is_rebuilt() {
            return false;
        }
        let Some(term) = self.raft.leader_term() else {
            return false;
        };
        if self.speaking != Some(term) {
            return false;
        }
        ignore_lease
            || self
                .raft
                .last_quorum_acked()
                .is_some_and(|acked| t < acked + LEADER_LEASE_MS - LEASE_MARGIN_MS)
    }

    /// What this node tells a rebuilding speaker: its clients' locks, its
    /// copies and what it granted, and whether it restarted less than the longest
    /// lease ago.
    pub(crate) fn report(&self, t: u64) -> (Vec<LockInTransit>, bool) {
        let now = self.mono(t);
        let mut locks: Vec<LockInTransit> = self
            .held
            .live(now)
            .iter()
            .map(|l| l.in_transit(now))
            .collect();
        locks.extend(self.copies.live(now).iter().map(|l| l.in_transit(now)));
        locks.extend(self.table.granted(now).iter().map(|l| l.in_transit(now)));
        let restarted = !self.first_start && t < self.started_at + MAX_LEASE_MS;
        (locks, restarted)
    }
}
