//! The simulated world: a clock, an event queue, the network between nodes
//! and clients, and the run loop; what travels in it is in `msg`. Each
//! node (`node`) drives `leasehold_protocol`: its speaker task in
//! `speaker`, its calls and messages in `serve`, its copies in `copies`.
//! The Raft model is in `raft`, the clients in `client`, the faults in
//! `faults`, and the checker in `check`.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};

use locktable::NodeId;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::client_state::Client;
use crate::config::{liveness_bound_ms, timing, Config};
use crate::history::{History, Report};
use crate::msg::{Event, Msg, ReqId, To};
use crate::node::Node;

pub(crate) struct World {
    pub(crate) t: u64,
    seq: u64,
    pub(crate) rng: StdRng,
    pub(crate) config: Config,
    events: BinaryHeap<Reverse<(u64, u64)>>,
    bodies: HashMap<u64, Event>,
    pub(crate) nodes: BTreeMap<NodeId, Node>,
    pub(crate) clients: Vec<Client>,
    pub(crate) next_req: ReqId,
    pub(crate) next_lock: u128,
    pub(crate) next_attempt: u64,
    pub(crate) next_copy: u64,
    /// The sets of names whose locks are being put on record, by key: the
    /// set is answered once every lock of it concluded.
    pub(crate) sets_on_record: BTreeMap<u64, crate::node::SetWait>,
    /// Directed links cut by partitions, with how many partitions cut each.
    pub(crate) cuts: BTreeMap<(NodeId, NodeId), u32>,
    /// When the faults injected so far have all healed.
    pub(crate) last_heal: u64,
    /// When the quiet tail began: no more faults, no message loss.
    pub(crate) quiet_since: Option<u64>,
    /// Whether a leader was made deaf to acknowledgements (once a run).
    pub(crate) deafened: bool,
    /// When the speaker may next doze off (slow reports).
    pub(crate) next_doze: u64,
    pub(crate) history: History,
    pub(crate) report: Report,
    pub(crate) trace: Option<Vec<String>>,
}

/// Runs one seed and checks the promises.
pub fn run(seed: u64, config: &Config) -> Report {
    let mut world = World {
        t: 0,
        seq: 0,
        rng: StdRng::seed_from_u64(seed),
        config: config.clone(),
        events: BinaryHeap::new(),
        bodies: HashMap::new(),
        nodes: BTreeMap::new(),
        clients: Vec::new(),
        next_req: 0,
        next_lock: 0,
        next_attempt: 0,
        next_copy: 0,
        sets_on_record: BTreeMap::new(),
        cuts: BTreeMap::new(),
        last_heal: 0,
        quiet_since: None,
        deafened: false,
        next_doze: 0,
        history: History::default(),
        report: Report {
            seed,
            ..Report::default()
        },
        trace: config.trace.then(Vec::new),
    };
    for id in 1..=config.nodes {
        let offset = world.rng.gen_range(1_000_000..1_000_000_000);
        let seed = world.rng.gen();
        world
            .nodes
            .insert(id, Node::start(id, config, offset, None, seed, 0));
        world.schedule_raft_start(id);
        world.at(id, Event::Tick(id));
    }
    for c in 0..config.clients {
        let node = 1 + (c as u64 % config.nodes);
        world.clients.push(Client::new(node, false));
        let at = world.rng.gen_range(0..200);
        world.at(at, Event::ClientWake(c));
    }
    world.at(500, Event::Fault);
    let bound = liveness_bound_ms(config.max_delay_ms, config.strict);
    while let Some(Reverse((t, seq))) = world.events.pop() {
        if world.quiet_since.is_some_and(|q| t > q + bound) {
            break;
        }
        world.t = t;
        let event = world.bodies.remove(&seq).expect("queued");
        world.handle(event);
    }
    world.report.sim_ms = world.t;
    world.check(bound);
    if let Some(trace) = world.trace.take() {
        world.report.trace = trace;
    }
    world.report
}

impl World {
    pub(crate) fn at(&mut self, t: u64, event: Event) {
        self.seq += 1;
        self.bodies.insert(self.seq, event);
        self.events.push(Reverse((t, self.seq)));
    }

    /// Notes a line in the trace, if the run keeps one.
    pub(crate) fn note(&mut self, line: impl FnOnce() -> String) {
        if let Some(trace) = self.trace.as_mut() {
            trace.push(format!("{:>6} {}", self.t, line()));
        }
    }

    /// Raft starts a leader lease after the process, unless sabotaged.
    pub(crate) fn schedule_raft_start(&mut self, n: NodeId) {
        let incarnation = self.nodes[&n].incarnation;
        let wait = if self.config.sabotage.no_restart_wait {
            0
        } else {
            timing::LEADER_LEASE_MS
        };
        self.at(self.t + wait, Event::RaftStart(n, incarnation));
    }

    /// Sends `msg` from node `from` (or from a client, `None`) to `to`:
    /// lost with the run's loss rate (before the quiet tail) or on a cut
    /// link, otherwise delayed.
    pub(crate) fn send(&mut self, from: Option<NodeId>, to: To, msg: Msg) {
        let cut =
            matches!((from, to), (Some(from), To::Node(to)) if self.cuts.contains_key(&(from, to)));
        if cut || (self.quiet_since.is_none() && self.rng.gen_bool(self.config.loss)) {
            self.report.lost_messages += 1;
            self.read_failed(&msg, to);
            return;
        }
        let delay = self.rng.gen_range(1..=self.config.max_delay_ms);
        self.at(self.t + delay, Event::Deliver(to, Box::new(msg)));
    }

    /// A rebuild's read `msg` to `to`, or its answer, is lost (or its
    /// member is down): the read failed.
    pub(crate) fn read_failed(&mut self, msg: &Msg, to: To) {
        let (leader, attempt, member) = match (msg, to) {
            (
                Msg::ReadReport {
                    leader, attempt, ..
                },
                To::Node(m),
            ) => (*leader, *attempt, m),
            (Msg::Report { from, attempt, .. }, To::Node(leader)) => (leader, *attempt, *from),
            _ => return,
        };
        self.read_lost(leader, attempt, member);
    }

    /// Sends what node `n`'s Raft queued, and hands its finished reads and
    /// elections on.
    pub(crate) fn flush_raft(&mut self, n: NodeId) {
        let node = self.nodes.get_mut(&n).expect("member");
        let out = std::mem::take(&mut node.raft.out);
        let reads = std::mem::take(&mut node.raft.reads_done);
        let elected = std::mem::take(&mut node.raft.elected);
        for (to, msg) in out {
            self.send(Some(n), To::Node(to), Msg::Raft { from: n, msg });
        }
        for term in elected {
            self.elected(n, term);
            self.note(|| format!("node {n} elected leader of term {term}"));
            self.on_election(n, term);
        }
        for (attempt, confirmed) in reads {
            self.read_confirmed(n, attempt, confirmed);
        }
    }

    /// Whether node `n` runs (`Some(true)`), is paused (`Some(false)`), or
    /// is down (`None`).
    pub(crate) fn node_ready(&self, n: NodeId) -> Option<bool> {
        let node = &self.nodes[&n];
        if !node.alive {
            return None;
        }
        Some(self.t >= node.paused_until)
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Deliver(To::Client(c), msg) => self.client_message(c, *msg),
            Event::Deliver(To::Node(n), msg) => match self.node_ready(n) {
                None => self.read_failed(&msg, To::Node(n)),
                Some(false) => self.park(n, Event::Deliver(To::Node(n), msg)),
                Some(true) => self.node_message(n, *msg),
            },
            Event::Tick(n) => {
                if self.node_ready(n) == Some(true) {
                    self.tick(n);
                }
                self.at(self.t + timing::RAFT_TICK_MS, Event::Tick(n));
            }
            Event::RaftStart(n, incarnation) => {
                let node = self.nodes.get_mut(&n).expect("member");
                if node.alive && node.incarnation == incarnation {
                    node.raft.run(self.t);
                    self.note(|| format!("node {n}: Raft runs"));
                    self.flush_raft(n);
                }
            }
            Event::ReadDeadline(n, attempt) => match self.node_ready(n) {
                Some(true) => self.reads_moved_on(n, attempt),
                Some(false) => self.park(n, Event::ReadDeadline(n, attempt)),
                None => {}
            },
            Event::ReadsMayStop(n, attempt) => match self.node_ready(n) {
                Some(true) => self.reads_moved_on(n, attempt),
                Some(false) => self.park(n, Event::ReadsMayStop(n, attempt)),
                None => {}
            },
            Event::ReadFailed(n, attempt, member) => match self.node_ready(n) {
                Some(true) => self.read_failed_at(n, attempt, member),
                Some(false) => self.park(n, Event::ReadFailed(n, attempt, member)),
                None => {}
            },
            Event::ReadAgain(n, attempt, member) => match self.node_ready(n) {
                Some(true) => self.read_again(n, attempt, member),
                Some(false) => self.park(n, Event::ReadAgain(n, attempt, member)),
                None => {}
            },
            Event::ClientWake(c) => self.client_wake(c),
            Event::ClientGiveUp(c, req) => self.client_give_up(c, req, false),
            Event::ClientRelease(c, req) => self.client_give_up(c, req, true),
            Event::Probe(c) => self.probe(c),
            Event::Fault => self.fault(),
            Event::Restart(n) => self.restart(n),
            Event::Reconnect(links) => {
                for link in links {
                    if let Some(count) = self.cuts.get_mut(&link) {
                        *count -= 1;
                        if *count == 0 {
                            self.cuts.remove(&link);
                        }
                    }
                }
            }
            Event::StopCheck(n, since) => self.stop_check(n, since),
            Event::Wake(n, incarnation) => self.wake(n, incarnation),
            Event::Crash(n, length) => {
                if self.nodes[&n].alive {
                    self.crash(n, length);
                }
            }
            Event::Quiet => self.quiet(),
            Event::CopyFlush(n, incarnation) => {
                let node = &self.nodes[&n];
                if node.alive && node.incarnation == incarnation {
                    match self.node_ready(n) {
                        Some(true) => self.flush_copies(n),
                        _ => self.park(n, Event::CopyFlush(n, incarnation)),
                    }
                }
            }
            Event::CopyTimeout(n, incarnation, key, member) => {
                let node = &self.nodes[&n];
                if node.alive && node.incarnation == incarnation {
                    match self.node_ready(n) {
                        Some(true) => self.copy_answered(n, key, member, false),
                        _ => self.park(n, Event::CopyTimeout(n, incarnation, key, member)),
                    }
                }
            }
            Event::CopyHedge(n, incarnation, key, member) => {
                let node = &self.nodes[&n];
                if node.alive && node.incarnation == incarnation {
                    match self.node_ready(n) {
                        Some(true) => self.copy_unanswered(n, key, member),
                        _ => self.park(n, Event::CopyHedge(n, incarnation, key, member)),
                    }
                }
            }
            Event::ForgetLate(n, incarnation, member, key) => {
                let node = &self.nodes[&n];
                if node.alive && node.incarnation == incarnation {
                    match self.node_ready(n) {
                        Some(true) => self.forgets_late(n, key),
                        _ => self.park(n, Event::ForgetLate(n, incarnation, member, key)),
                    }
                }
            }
            Event::ForgetTimeout(n, incarnation, member, key) => {
                let node = &self.nodes[&n];
                if node.alive && node.incarnation == incarnation {
                    match self.node_ready(n) {
                        Some(true) => self.forgets_answered(n, key, false),
                        _ => self.park(n, Event::ForgetTimeout(n, incarnation, member, key)),
                    }
                }
            }
            Event::ForgetRetry(n, incarnation, key) => {
                let node = &self.nodes[&n];
                if node.alive && node.incarnation == incarnation {
                    match self.node_ready(n) {
                        Some(true) => self.forgets_retry(n, key),
                        _ => self.park(n, Event::ForgetRetry(n, incarnation, key)),
                    }
                }
            }
            Event::ClientRenew(c, req) => self.client_renew(c, req),
            Event::RenewGiveUp(c, req) => self.renew_give_up(c, req),
            Event::SessionRenew(c, req) => self.session_renew(c, req),
            Event::SessionRenewGiveUp(c, req) => self.session_renew_give_up(c, req),
        }
    }

    /// A node's periodic work: Raft's tick, the speaker's watch, and every
    /// other tick the expiry poll.
    fn tick(&mut self, n: NodeId) {
        let t = self.t;
        self.nodes.get_mut(&n).expect("member").raft.tick(t);
        self.flush_raft(n);
        self.watch(n);
        self.check_guard(n);
        if t % timing::POLL_MS < timing::RAFT_TICK_MS {
            self.poll(n);
        }
    }
}
