//! openraft 0.10.0-alpha.37 as leasehold configures it (standard leader
//! id, pre-vote, no leader restore, heartbeat 50 ms, election timeout
//! 150-300 ms), reduced to what the speaker protocol leans on. Each rule
//! names the openraft code it follows:
//!
//! - A vote carries a lease (`utime.rs`, `Leased`): a committed vote gets
//!   `leader_lease` (= `election_timeout_max`) at every heartbeat accepted
//!   (`vote_handler::update_vote`), an uncommitted one none. A follower
//!   refuses pre-votes and votes while its lease runs
//!   (`engine_impl.rs`, `handle_pre_vote_req`, `handle_vote_req`), and a
//!   leader while a quorum acknowledged it within the lease
//!   (`Leader::is_lease_valid`).
//! - A node campaigns (pre-vote first) once `lease + election_timeout` passed
//!   since its vote was last touched (`raft_core.rs`, `handle_tick_election`,
//!   `Leased::is_expired`); the timeout is resampled at every campaign.
//! - A restarted node reloads its vote with a zero lease
//!   (`storage/helper.rs`): it grants (pre-)votes at once.
//! - A leader keeps its term however long its quorum lapses; it steps
//!   down only on seeing a greater vote.
//! - `last_quorum_acked` is the send time of the latest heartbeat a quorum
//!   acknowledged (`Leader::update_clock`: the leader's own entry moves to
//!   the send time of every acknowledged heartbeat).
//! - ReadIndex (`handle_get_linearizer`) sends a heartbeat round and waits
//!   until a quorum acknowledges a later round, or gives up after one leader
//!   lease; a leader that steps down fails its pending reads.
//! - A leadership transfer disables the leader's and the followers' vote
//!   lease until their vote next changes (`transfer_leader`,
//!   `HandleTransferLeader`, `Leased::disable_lease`), and the target's
//!   votes skip the lease checks (`leadership_transfer`). A leader handing
//!   over sends no heartbeats and refuses reads (`send_heartbeat`,
//!   `ensure_leader_handler`) for the rest of its term.
//!
//! Logs are one blank entry per elected leader: a heartbeat carries the
//! leader's last log id and a follower that accepts it has that log.
//! Messages that reach a node whose Raft has not started are dropped (the
//! node queues them, and answers after their sender gave up).

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use locktable::NodeId;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::config::timing::{
    ELECTION_MAX_MS, ELECTION_MIN_MS, HEARTBEAT_MS, LEADER_LEASE_MS, SMALLER_LOG_MS,
};

/// A vote: who leads (or asks to) in which term, and whether a quorum
/// granted it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Vote {
    pub(crate) term: u64,
    pub(crate) node: NodeId,
    pub(crate) committed: bool,
}

impl Vote {
    /// openraft's partial order of votes with the standard leader id.
    fn compare(&self, other: &Vote) -> Option<Ordering> {
        match self.term.cmp(&other.term) {
            Ordering::Equal if self.node == other.node => {
                Some(self.committed.cmp(&other.committed))
            }
            Ordering::Equal => match (self.committed, other.committed) {
                (true, false) => Some(Ordering::Greater),
                (false, true) => Some(Ordering::Less),
                _ => None,
            },
            other => Some(other),
        }
    }

    fn at_least(&self, other: &Vote) -> bool {
        matches!(
            self.compare(other),
            Some(Ordering::Greater | Ordering::Equal)
        )
    }

    fn greater(&self, other: &Vote) -> bool {
        self.compare(other) == Some(Ordering::Greater)
    }
}

/// The last log id: the term of the leader that wrote it and its index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub(crate) struct LogId {
    term: u64,
    index: u64,
}

/// When a heartbeat was sent, and in which round.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Stamp {
    time: u64,
    round: u64,
}

/// What Raft members say to each other.
#[derive(Debug, Clone)]
pub(crate) enum RaftMsg {
    /// A heartbeat (replication with the leader's log).
    Append {
        vote: Vote,
        log: LogId,
        stamp: Stamp,
    },
    /// Its answer; `vote` is the answerer's.
    AppendReply {
        leader: Vote,
        ok: bool,
        vote: Vote,
        stamp: Stamp,
    },
    /// Would you vote for me?
    PreVote { vote: Vote, log: LogId },
    /// The answer, with the answerer's vote and log.
    PreVoteReply {
        asked: Vote,
        vote: Vote,
        log: LogId,
        granted: bool,
    },
    /// Vote for me.
    RequestVote {
        vote: Vote,
        log: LogId,
        transfer: bool,
    },
    /// The answer, with the answerer's vote (after it) and log.
    VoteReply {
        vote: Vote,
        log: LogId,
        granted: bool,
    },
    /// The leader hands over to `to`.
    TransferLeader { vote: Vote, to: NodeId, log: LogId },
}

struct Leading {
    round: u64,
    next_heartbeat: u64,
    acked: BTreeMap<NodeId, Stamp>,
    transfer_to: Option<NodeId>,
    reads: Vec<PendingRead>,
}

struct PendingRead {
    id: u64,
    after: Stamp,
    deadline: u64,
}

struct Campaign {
    vote: Vote,
    started: u64,
    granted: BTreeSet<NodeId>,
}

/// What the durable store keeps across a restart.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Persisted {
    vote: Vote,
    log: LogId,
}

/// One member's Raft.
pub(crate) struct Raft {
    id: NodeId,
    voters: Vec<NodeId>,
    vote: Vote,
    vote_touched: Option<u64>,
    lease: u64,
    lease_enabled: bool,
    log: LogId,
    election_timeout: u64,
    greater_log: bool,
    leader: Option<Leading>,
    candidate: Option<Campaign>,
    pre_candidate: Option<Campaign>,
    running: bool,
    rng: StdRng,
    /// Messages to send: (to, message).
    pub(crate) out: Vec<(NodeId, RaftMsg)>,
    /// Reads that ended: (read id, confirmed).
    pub(crate) reads_done: Vec<(u64, bool)>,
    /// Terms this node was elected leader in, since last drained.
    pub(crate) elected: Vec<u64>,
}

impl Raft {
    /// A member's Raft at process start: its vote and log from the store
    /// (none on a first start), the vote's lease zero, not running yet.
    pub(crate) fn load(
        id: NodeId,
        voters: u64,
        store: Option<Persisted>,
        seed: u64,
        now: u64,
    ) -> Raft {
        let store = store.unwrap_or(Persisted {
            vote: Vote {
                term: 0,
                node: 0,
                committed: false,
            },
            log: LogId::default(),
        });
        // No leader restore (`Engine::startup`): a leader's vote comes back
        // uncommitted, so it must win a new term.
        let vote = if store.vote.node == id {
            Vote {
                committed: false,
                ..store.vote
            }
        } else {
            store.vote
        };
        let mut raft = Raft {
            id,
            voters: (1..=voters).collect(),
            vote,
            vote_touched: Some(now),
            lease: 0,
            lease_enabled: true,
            log: store.log,
            election_timeout: 0,
            greater_log: false,
            leader: None,
            candidate: None,
            pre_candidate: None,
            running: false,
            rng: StdRng::seed_from_u64(seed),
            out: Vec::new(),
            reads_done: Vec::new(),
            elected: Vec::new(),
        };
        raft.resample();
        raft
    }

    /// What survives a crash.
    pub(crate) fn persisted(&self) -> Persisted {
        Persisted {
            vote: self.vote,
            log: self.log,
        }
    }

    /// Starts Raft (`Raft::run`); the lowest member of a new cluster
    /// initializes it and campaigns at once.
    pub(crate) fn run(&mut self, now: u64) {
        self.running = true;
        if self.vote.term == 0 && self.log == LogId::default() && self.id == self.voters[0] {
            self.elect(now, false);
        }
    }

    /// Whether Raft runs on this node.
    pub(crate) fn running(&self) -> bool {
        self.running
    }

    /// The term this node leads, as `Raft::as_leader` says it.
    pub(crate) fn leader_term(&self) -> Option<u64> {
        (self.vote.committed && self.vote.node == self.id).then_some(self.vote.term)
    }

    /// The leader this node knows of (`current_leader`).
    pub(crate) fn current_leader(&self) -> Option<NodeId> {
        self.vote.committed.then_some(self.vote.node)
    }

    /// The current term.
    pub(crate) fn term(&self) -> u64 {
        self.vote.term
    }

    /// The send time of the latest heartbeat a quorum acknowledged, while
    /// this node leads.
    pub(crate) fn last_quorum_acked(&self) -> Option<u64> {
        self.quorum_acked().map(|s| s.time)
    }

    fn quorum_acked(&self) -> Option<Stamp> {
        let leading = self.leader.as_ref()?;
        let mut stamps: Vec<Stamp> = leading.acked.values().copied().collect();
        stamps.sort_unstable_by(|a, b| b.cmp(a));
        stamps.get(self.voters.len() / 2).copied()
    }

    fn lease_valid(&self, now: u64) -> bool {
        self.last_quorum_acked()
            .is_some_and(|acked| now < acked + LEADER_LEASE_MS)
    }

    fn expired(&self, now: u64, timeout: u64) -> bool {
        match self.vote_touched {
            Some(touched) => now > touched + self.lease + timeout,
            None => true,
        }
    }

    fn resample(&mut self) {
        self.election_timeout = self.rng.gen_range(ELECTION_MIN_MS..ELECTION_MAX_MS);
    }

    fn others(&self) -> Vec<NodeId> {
        self.voters
            .iter()
            .copied()
            .filter(|&v| v != self.id)
            .collect()
    }

    fn quorum(&self) -> usize {
        self.voters.len() / 2 + 1
    }

    /// openraft's tick: a leader sends heartbeats when due and gives up on
    /// reads past their deadline; anyone else campaigns when its vote's
    /// lease and election timeout have passed.
    pub(crate) fn tick(&mut self, now: u64) {
        if !self.running {
            return;
        }
        if let Some(leading) = self.leader.as_mut() {
            let (done, pending): (Vec<PendingRead>, Vec<PendingRead>) =
                leading.reads.drain(..).partition(|r| r.deadline <= now);
            leading.reads = pending;
            self.reads_done
                .extend(done.into_iter().map(|r| (r.id, false)));
            // A leader handing over sends no more heartbeats
            // (`RaftCore::send_heartbeat`).
            if leading.transfer_to.is_none() && now >= leading.next_heartbeat {
                self.heartbeat(now);
            }
            return;
        }
        let mut timeout = self.election_timeout;
        if self.greater_log {
            timeout += SMALLER_LOG_MS;
        }
        if !self.expired(now, timeout) {
            return;
        }
        if self
            .pre_candidate
            .as_ref()
            .is_some_and(|p| now < p.started + timeout)
        {
            return;
        }
        self.greater_log = false;
        self.pre_elect(now);
    }

    fn heartbeat(&mut self, now: u64) {
        let vote = self.vote;
        let log = self.log;
        let others = self.others();
        let Some(leading) = self.leader.as_mut() else {
            return;
        };
        leading.round += 1;
        leading.next_heartbeat = now + HEARTBEAT_MS;
        let stamp = Stamp {
            time: now,
            round: leading.round,
        };
        for to in others {
            self.out.push((to, RaftMsg::Append { vote, log, stamp }));
        }
    }

    fn pre_elect(&mut self, now: u64) {
        if self.vote.committed && !self.expired(now, 0) {
            return;
        }
        self.resample();
        let vote = Vote {
            term: self.vote.term + 1,
            node: self.id,
            committed: false,
        };
        self.pre_candidate = Some(Campaign {
            vote,
            started: now,
            granted: BTreeSet::from([self.id]),
        });
        let log = self.log;
        for to in self.others() {
            self.out.push((to, RaftMsg::PreVote { vote, log }));
        }
    }

    fn elect(&mut self, now: u64, transfer: bool) {
        self.pre_candidate = None;
        if self.leader.is_some() {
            return;
        }
        self.resample();
        let vote = Vote {
            term: self.vote.term + 1,
            node: self.id,
            committed: false,
        };
        self.candidate = Some(Campaign {
            vote,
            started: now,
            granted: BTreeSet::from([self.id]),
        });
        let _ = self.update_vote(vote, now);
        let log = self.log;
        for to in self.others() {
            self.out.push((
                to,
                RaftMsg::RequestVote {
                    vote,
                    log,
                    transfer,
                },
            ));
        }
    }

    fn establish(&mut self, now: u64) {
        let Some(candidate) = self.candidate.take() else {
            return;
        };
        self.pre_candidate = None;
        let vote = Vote {
            committed: true,
            ..candidate.vote
        };
        let _ = self.update_vote(vote, now);
    }

    /// `vote_handler::update_vote`: takes `vote` if it is at least this
    /// node's, touching the lease (a leader's lease for a committed vote,
    /// none for a candidate's).
    fn update_vote(&mut self, vote: Vote, now: u64) -> Result<(), ()> {
        if !vote.at_least(&self.vote) {
            return Err(());
        }
        let lease = if vote.committed { LEADER_LEASE_MS } else { 0 };
        if vote.greater(&self.vote) {
            self.vote = vote;
            self.vote_touched = Some(now);
            self.lease = lease;
            self.lease_enabled = true;
        } else {
            self.vote_touched = Some(now);
            if self.lease_enabled {
                self.lease = lease;
            }
        }
        if self.vote.node == self.id && self.vote.committed {
            self.become_leader(now);
        } else if self.vote.node != self.id {
            self.become_following();
        }
        Ok(())
    }

    fn become_leader(&mut self, now: u64) {
        if self.leader.is_some() {
            return;
        }
        self.candidate = None;
        self.pre_candidate = None;
        self.log = LogId {
            term: self.vote.term,
            index: self.log.index + 1,
        };
        self.leader = Some(Leading {
            round: 0,
            next_heartbeat: now,
            acked: BTreeMap::from([(
                self.id,
                Stamp {
                    time: now,
                    round: 0,
                },
            )]),
            transfer_to: None,
            reads: Vec::new(),
        });
        self.elected.push(self.vote.term);
        self.heartbeat(now);
    }

    fn become_following(&mut self) {
        if let Some(leading) = self.leader.take() {
            self.reads_done
                .extend(leading.reads.into_iter().map(|r| (r.id, false)));
        }
        self.candidate = None;
        self.pre_candidate = None;
    }

    /// ReadIndex (`ensure_linearizable`): false if this node does not
    /// lead, or hands leadership over (`ensure_leader_handler`); otherwise
    /// the read ends later in `reads_done`, confirmed once a quorum
    /// acknowledged a heartbeat sent after now, or not after one leader
    /// lease.
    pub(crate) fn start_read(&mut self, id: u64, now: u64) -> bool {
        if !self.running || self.leader_term().is_none() {
            return false;
        }
        let Some(leading) = self.leader.as_mut().filter(|l| l.transfer_to.is_none()) else {
            return false;
        };
        leading.reads.push(PendingRead {
            id,
            after: Stamp {
                time: now,
                round: leading.round,
            },
            deadline: now + LEADER_LEASE_MS,
        });
        self.heartbeat(now);
        true
    }

    fn confirm_reads(&mut self) {
        let Some(acked) = self.quorum_acked() else {
            return;
        };
        let Some(leading) = self.leader.as_mut() else {
            return;
        };
        let (done, pending): (Vec<PendingRead>, Vec<PendingRead>) =
            leading.reads.drain(..).partition(|r| acked > r.after);
        leading.reads = pending;
        self.reads_done
            .extend(done.into_iter().map(|r| (r.id, true)));
    }

    /// The voter the node hands leadership to: the most caught up.
    pub(crate) fn transfer_target(&self) -> Option<NodeId> {
        let leading = self.leader.as_ref()?;
        self.others().into_iter().max_by_key(|id| {
            (
                leading.acked.get(id).map(|s| s.round),
                std::cmp::Reverse(*id),
            )
        })
    }

    /// `trigger().transfer_leader(to)`: disables this node's vote lease and
    /// tells every member.
    pub(crate) fn transfer_leader(&mut self, to: NodeId) -> bool {
        let vote = self.vote;
        let log = self.log;
        let others = self.others();
        let Some(leading) = self.leader.as_mut() else {
            return false;
        };
        leading.transfer_to = Some(to);
        self.lease = 0;
        self.lease_enabled = false;
        for member in others {
            self.out
                .push((member, RaftMsg::TransferLeader { vote, to, log }));
        }
        true
    }

    /// Handles a message from `from`.
    pub(crate) fn handle(&mut self, from: NodeId, msg: RaftMsg, now: u64) {
        if !self.running {
            return;
        }
        match msg {
            RaftMsg::Append { vote, log, stamp } => {
                let ok = self.update_vote(vote, now).is_ok();
                if ok {
                    self.log = log;
                }
                self.out.push((
                    from,
                    RaftMsg::AppendReply {
                        leader: vote,
                        ok,
                        vote: self.vote,
                        stamp,
                    },
                ));
            }
            RaftMsg::AppendReply {
                leader,
                ok,
                vote,
                stamp,
            } => {
                if self.leader.is_none() || leader != self.vote {
                    return;
                }
                if ok {
                    let id = self.id;
                    let leading = self.leader.as_mut().expect("checked");
                    for member in [from, id] {
                        let entry = leading.acked.entry(member).or_insert(stamp);
                        *entry = (*entry).max(stamp);
                    }
                    self.confirm_reads();
                } else if vote.greater(&self.vote) {
                    let _ = self.update_vote(vote, now);
                }
            }
            RaftMsg::PreVote { vote, log } => {
                let granted = self.would_vote(vote, log, false, now);
                self.out.push((
                    from,
                    RaftMsg::PreVoteReply {
                        asked: vote,
                        vote: self.vote,
                        log: self.log,
                        granted,
                    },
                ));
            }
            RaftMsg::PreVoteReply {
                asked,
                vote,
                log,
                granted,
            } => {
                let Some(pre) = self.pre_candidate.as_mut() else {
                    return;
                };
                if pre.vote != asked {
                    return;
                }
                if granted {
                    pre.granted.insert(from);
                    if pre.granted.len() >= self.quorum() {
                        self.elect(now, false);
                    }
                    return;
                }
                if log > self.log {
                    self.greater_log = true;
                }
                if vote.greater(&self.vote) {
                    let vote = Vote {
                        committed: false,
                        ..vote
                    };
                    let _ = self.update_vote(vote, now);
                }
            }
            RaftMsg::RequestVote {
                vote,
                log,
                transfer,
            } => {
                let granted = self.lease_allows(transfer, now)
                    && log >= self.log
                    && self.update_vote(vote, now).is_ok();
                self.out.push((
                    from,
                    RaftMsg::VoteReply {
                        vote: self.vote,
                        log: self.log,
                        granted,
                    },
                ));
            }
            RaftMsg::VoteReply { vote, log, granted } => {
                let Some(candidate) = self.candidate.as_mut() else {
                    return;
                };
                if granted && vote == candidate.vote {
                    candidate.granted.insert(from);
                    if candidate.granted.len() >= self.quorum() {
                        self.establish(now);
                    }
                    return;
                }
                if log > self.log {
                    self.greater_log = true;
                }
                let vote = Vote {
                    committed: false,
                    ..vote
                };
                let _ = self.update_vote(vote, now);
            }
            RaftMsg::TransferLeader { vote, to, log } => {
                if self.vote != vote {
                    return;
                }
                self.lease = 0;
                self.lease_enabled = false;
                if to == self.id && log <= self.log {
                    self.elect(now, true);
                }
            }
        }
    }

    /// Whether the leader lease this node backs (as follower or leader)
    /// lets it vote; a leadership transfer skips the check.
    fn lease_allows(&self, transfer: bool, now: u64) -> bool {
        if transfer {
            return true;
        }
        if self.vote.committed && !self.expired(now, 0) {
            return false;
        }
        !(self.leader.is_some() && self.lease_valid(now))
    }

    /// `handle_pre_vote_req`: whether this node would vote for `vote`,
    /// changing nothing.
    fn would_vote(&self, vote: Vote, log: LogId, transfer: bool, now: u64) -> bool {
        self.lease_allows(transfer, now) && log >= self.log && vote.at_least(&self.vote)
    }
}

#[cfg(test)]
mod tests;
