//! One leasehold process as the simulation runs it: its model of Raft, the
//! protocol's `Member` and `Leadership` (`leasehold_protocol`, the crate
//! `crates/node` drives), and the driver's plumbing around them: the
//! rebuild attempt under way, copies on their way, calls waiting for their
//! answers, and the guard's facts taken from the Raft model.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use leasehold_protocol::{
    Attempt, Forwarded, Guard, Leader, Leadership, Made, Member, MemberConfig, Outbox, RebuildFeed,
    RebuildMode, Rebuilding, Recording, SessionLocks,
};
use locktable::{Answer, LeaseRule, Lock, LockId, MonoTime, NodeId, WaiterId};

use crate::config::timing::{LEADER_LEASE_MS, LEASE_MS, MAX_LEASE_MS, REBUILD_TIMEOUT_MS};
use crate::config::Config;
use crate::msg::{ClientId, Event, ReportHeader, ReqId};
use crate::raft::{Persisted, Raft};

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
    /// Whoever asked node `n`: its own client, or a client of `from`.
    pub(crate) fn of(n: NodeId, from: NodeId, client: ClientId, req: ReqId, arrived: u64) -> Self {
        if from == n {
            Origin::Local {
                client,
                req,
                arrived,
            }
        } else {
            Origin::Forwarded {
                node: from,
                client,
                req,
                arrived,
            }
        }
    }

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

/// A call this node forwarded to the speaker, waiting for its answer.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    /// As the protocol counts it.
    pub(crate) call: Forwarded,
    /// When it left, in simulated time.
    pub(crate) sent: u64,
    /// The lock a forwarded renewal is for.
    pub(crate) renewing: Option<LockId>,
    /// The session a forwarded session's renewal is for, and what this node
    /// recorded of its locks at the send.
    pub(crate) session: Option<(crate::msg::SessionCall, leasehold_protocol::SessionSent)>,
}

/// One rebuild attempt.
pub(crate) struct RebuildAttempt {
    /// Its reads' messages' id, unique in the run.
    pub(crate) id: u64,
    /// The protocol's side: what to do next.
    pub(crate) rebuilding: Rebuilding,
    /// Where the reports settle as they arrive, once handed out.
    pub(crate) feed: Option<RebuildFeed>,
    /// How it ended, for the watch loop's next turn.
    pub(crate) ended: Option<Attempt>,
}

/// A grant or renewal waiting for its copies' acknowledgements.
pub(crate) struct CopyWait {
    /// The protocol's side: the copies to send, the decision.
    pub(crate) recording: Recording,
    pub(crate) lock: Lock,
    pub(crate) origin: Origin,
    pub(crate) grant: bool,
    /// The set of names the lock is one of, by its key in
    /// `World::sets_on_record` (none for one name).
    pub(crate) set: Option<u64>,
}

/// A set of names granted, its locks being put on record: answered once
/// each concluded, whole if all are on record, else refused and every
/// lock taken back.
pub(crate) struct SetWait {
    pub(crate) node: NodeId,
    pub(crate) origin: Origin,
    /// The set's locks, in the order asked.
    pub(crate) locks: Vec<Lock>,
    /// How many have not concluded yet.
    pub(crate) left: usize,
    /// Why one was not put on record, if one was not.
    pub(crate) failed: Option<crate::msg::Refusal>,
    /// A session's renewal rather than a set: the session first in
    /// `locks`, then its locks copied again. Refused, none is taken back.
    pub(crate) session: Option<SessionAnswer>,
}

/// What a session's renewal answers once on record.
pub(crate) struct SessionAnswer {
    /// Every lock of the session, when the renewing node's records may
    /// differ from the table's.
    pub(crate) records: Option<Vec<Lock>>,
    /// The digest the client sent.
    pub(crate) client_digest: Option<u128>,
}

/// One process of a member, as the simulation runs it.
pub(crate) struct Node {
    pub(crate) id: NodeId,
    /// Counts the node's processes: events for an earlier one are void.
    pub(crate) incarnation: u64,
    /// This node's clock reads `offset + sim time`: only durations cross.
    pub(crate) offset_ms: u64,
    pub(crate) alive: bool,
    pub(crate) paused_until: u64,
    /// What reached this node while it was paused, and when.
    pub(crate) parked: Vec<(u64, Event)>,
    /// Paused until its successor's read arrives (then a little longer).
    pub(crate) dozing: bool,
    /// When this process started.
    pub(crate) started_at: u64,
    /// Whether it is the node's first process (a new data directory).
    pub(crate) first_start: bool,
    pub(crate) raft: Raft,
    /// The protocol's state: table, `Held`, copies, who may keep a record.
    pub(crate) member: Member,
    /// The speaker task's decisions.
    pub(crate) lead: Leadership,
    /// When a shutdown began, and how long after it stops the node starts
    /// again.
    pub(crate) stop_began: u64,
    pub(crate) restart_after: u64,
    pub(crate) attempt: Option<RebuildAttempt>,
    /// The late reads of the members its last rebuild missed, during the
    /// strict hold: their messages' id, and the term they read for.
    pub(crate) late_reads: Option<(u64, u64)>,
    /// Grants and renewals waiting for their copies' acknowledgements.
    pub(crate) copying: BTreeMap<u64, CopyWait>,
    /// Copies queued for their members, sent at the next flush: (member,
    /// key, term, lock, and for a session's copy its locks as noted).
    pub(crate) copy_queue: Vec<(NodeId, u64, u64, Lock, Option<SessionLocks>)>,
    pub(crate) waiters: HashMap<WaiterId, (Origin, Made)>,
    /// Answers the table gave inside an acquire, told at the next dispatch.
    pub(crate) undelivered: Vec<Answer>,
    /// Forwarded acquires and renewals.
    pub(crate) pending: HashMap<ReqId, Pending>,
    /// Releases on their way to each member.
    pub(crate) outbox: Outbox,
}

/// Member `id`'s settings in a run of `config`.
fn member_config(id: NodeId, config: &Config) -> MemberConfig {
    let voters = (1..=config.nodes).count();
    MemberConfig {
        id,
        members: (1..=config.nodes).collect(),
        copy_to: (1..=config.nodes).collect(),
        copies: leasehold_protocol::copies_in(Some(config.copies), voters, voters),
        lease: LeaseRule {
            default: Duration::from_millis(LEASE_MS),
            max: Duration::from_millis(MAX_LEASE_MS),
        },
        rebuild_mode: if config.strict {
            RebuildMode::Strict
        } else {
            RebuildMode::Proceed
        },
        leader_lease: Duration::from_millis(LEADER_LEASE_MS),
        rebuild_timeout: Duration::from_millis(REBUILD_TIMEOUT_MS),
        sabotage: config.sabotage,
    }
}

/// Member `id`'s outbox, with a lane to every other member.
fn outbox(id: NodeId, config: &Config) -> Outbox {
    let mut outbox = Outbox::new(id);
    let addrs: Vec<(NodeId, String)> = (1..=config.nodes).map(|m| (m, m.to_string())).collect();
    outbox.set_members(addrs.iter().map(|(m, a)| (*m, a.as_str())));
    outbox
}

impl Node {
    /// A process of node `id` starting now, with what its store kept.
    pub(crate) fn start(
        id: NodeId,
        config: &Config,
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
            raft: Raft::load(id, config.nodes, store, seed, now),
            member: Member::new(member_config(id, config)),
            lead: Leadership::new(config.sabotage),
            stop_began: 0,
            restart_after: 0,
            attempt: None,
            late_reads: None,
            copying: BTreeMap::new(),
            copy_queue: Vec::new(),
            waiters: HashMap::new(),
            undelivered: Vec::new(),
            pending: HashMap::new(),
            outbox: outbox(id, config),
        }
    }

    /// Simulated time `t` on this node's clock.
    pub(crate) fn mono(&self, t: u64) -> MonoTime {
        MonoTime::from_nanos((self.offset_ms + t) * 1_000_000)
    }

    /// An instant on this node's clock in simulated time.
    pub(crate) fn sim_ms(&self, at: MonoTime) -> u64 {
        (at.as_nanos() / 1_000_000).saturating_sub(self.offset_ms)
    }

    /// The guard's facts, from the Raft model: the term this node
    /// leads and when a quorum last acknowledged it.
    pub(crate) fn guard(&self) -> Guard {
        Guard {
            leader: self.raft.leader_term().map(|term| Leader {
                term,
                quorum_acked_at: self.raft.last_quorum_acked().map(|at| self.mono(at)),
            }),
            // The simulation pauses processes; it suspends no machine.
            resumed_at: None,
        }
    }

    /// The term, number and outcome of the rebuild attempt that ended,
    /// taken.
    pub(crate) fn ended_attempt(&mut self) -> Option<(u64, u64, Attempt)> {
        let attempt = self.attempt.take_if(|a| a.ended.is_some())?;
        let outcome = attempt.ended?;
        Some((
            attempt.rebuilding.term(),
            attempt.rebuilding.number(),
            outcome,
        ))
    }

    /// What this node tells a rebuilding speaker of itself at `t`.
    pub(crate) fn report_header(&self, t: u64) -> ReportHeader {
        let config = self.member.config();
        ReportHeader {
            uptime: Duration::from_millis(t - self.started_at),
            first_start: self.first_start,
            max_lease: config.lease.max,
            copies: config.copies,
        }
    }
}
