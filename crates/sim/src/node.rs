//! One leasehold process: its Raft, its table and `Held`, and the speaker
//! task's state (`crates/node/src/node.rs` and `speaker.rs`).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use locktable::{Answer, Held, LeaseRule, LockInTransit, MonoTime, NodeId, Table, WaiterId};

use crate::config::timing::{
    LEADER_LEASE_MS, LEASE_MARGIN_MS, LEASE_MS, MAX_LEASE_MS, RETRY_AT_MOST_MS, RETRY_FIRST_MS,
    STEP_DOWN_AFTER_MS,
};
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

/// Where a rebuild attempt is.
pub(crate) enum Phase {
    /// Waiting for ReadIndex.
    Confirming,
    /// Reading the members: each report, whether its member restarted
    /// lately, and when it arrived.
    Reading(BTreeMap<NodeId, (Vec<LockInTransit>, bool, u64)>),
    /// Over; the watch loop takes the outcome at its next turn.
    Done(Outcome),
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
    pub(crate) waiters: HashMap<WaiterId, Origin>,
    /// Answers the table gave inside an acquire, told at the next dispatch.
    pub(crate) undelivered: Vec<Answer>,
    /// Forwarded acquires: (sent at, client request arrived at).
    pub(crate) pending: HashMap<ReqId, (u64, u64)>,
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

    /// What this node tells a rebuilding speaker: its clients' locks and
    /// what it granted, and whether it restarted less than the longest
    /// lease ago.
    pub(crate) fn report(&self, t: u64) -> (Vec<LockInTransit>, bool) {
        let now = self.mono(t);
        let mut locks: Vec<LockInTransit> = self
            .held
            .live(now)
            .iter()
            .map(|l| l.in_transit(now))
            .collect();
        locks.extend(self.table.granted(now).iter().map(|l| l.in_transit(now)));
        let restarted = !self.first_start && t < self.started_at + MAX_LEASE_MS;
        (locks, restarted)
    }
}
