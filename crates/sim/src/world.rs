//! The simulated world: nodes, clients, the network and the Raft oracle.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::time::Duration;

use locktable::{
    AcquireError, Acquired, Held, LeaseRule, LockId, LockInTransit, MonoTime, NodeId, RebuildFrom,
    Request, Table, WaiterId,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// What to simulate.
#[derive(Debug, Clone)]
pub struct Config {
    /// Members.
    pub nodes: u64,
    /// Clients, each talking to one node.
    pub clients: usize,
    /// Names they contend for.
    pub names: usize,
    /// Simulated time, in ms.
    pub duration_ms: u64,
    /// Strict rebuild mode (else proceed).
    pub strict: bool,
    /// Chance a message is lost.
    pub loss: f64,
    /// Longest message delay, in ms.
    pub max_delay_ms: u64,
    /// A protocol rule to break on purpose, to show the checker catches it.
    pub sabotage: Option<Sabotage>,
}

/// Rules the simulation can break, to prove its checker is not blind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sabotage {
    /// A new speaker serves from an empty table instead of rebuilding.
    SkipRebuild,
    /// A speaker grants without checking its leader lease.
    IgnoreLeaderLease,
}

impl Config {
    /// A configuration drawn from `seed`.
    pub fn from_seed(seed: u64) -> Config {
        let mut rng = StdRng::seed_from_u64(seed ^ 0xC0F1);
        Config {
            nodes: if rng.gen_bool(0.5) { 3 } else { 5 },
            clients: rng.gen_range(2..8),
            names: rng.gen_range(1..4),
            duration_ms: 8_000,
            strict: rng.gen_bool(0.5),
            loss: rng.gen_range(0.0..0.08),
            max_delay_ms: rng.gen_range(1..40),
            sabotage: None,
        }
    }
}

/// What a run saw.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Holding intervals clients completed.
    pub grants: usize,
    /// Overlapping intervals of one name.
    pub overlaps: usize,
    /// Overlaps, and fences out of order, explained by a rebuild that
    /// missed members (proceed mode).
    pub explained: usize,
    /// Overlaps the promises do not allow.
    pub unexplained: Vec<String>,
    /// Fences that did not increase along a name's history.
    pub fence_inversions: Vec<String>,
    /// Leaders elected.
    pub elections: usize,
    /// Crashes, and pauses, injected.
    pub crashes: usize,
    /// Pauses injected.
    pub pauses: usize,
    /// Messages lost.
    pub lost_messages: usize,
}

impl Report {
    /// Whether every promise held.
    pub fn ok(&self) -> bool {
        self.unexplained.is_empty() && self.fence_inversions.is_empty()
    }
}

const LEASE_MS: u64 = 1_000;
const MAX_LEASE_MS: u64 = 2_000;
const HEARTBEAT_MS: u64 = 50;
/// The leader lease the guard allows after a heartbeat round (300 - 75).
const LEADER_LEASE_MS: u64 = 225;
/// Followers refuse votes this long after the last heartbeat.
const ELECTION_MAX_MS: u64 = 300;
const REBUILD_TIMEOUT_MS: u64 = 300;
const POLL_MS: u64 = 20;
/// How early a client stops before its own count of the lease ends.
const CLIENT_MARGIN_MS: u64 = 100;

type ClientId = usize;
type ReqId = u64;

#[derive(Debug, Clone)]
enum Refusal {
    Held,
    Unavailable,
}

#[derive(Debug, Clone)]
enum Msg {
    // Client and its node.
    Acquire {
        client: ClientId,
        req: ReqId,
        name: String,
        wait_ms: u64,
    },
    Release {
        name: String,
        id: LockId,
    },
    Reply {
        req: ReqId,
        result: Result<(LockInTransit, u64), Refusal>,
    },
    // Between nodes.
    Forward {
        from: NodeId,
        client: ClientId,
        req: ReqId,
        name: String,
        wait_ms: u64,
    },
    ForwardReply {
        client: ClientId,
        req: ReqId,
        result: Result<(LockInTransit, u64), Refusal>,
    },
    ForwardRelease {
        name: String,
        id: LockId,
    },
    Forget {
        name: String,
        id: LockId,
        /// The time the released lease had left at the send.
        left: Duration,
    },
    ReadReport {
        leader: NodeId,
        term: u64,
    },
    Report {
        from: NodeId,
        term: u64,
        locks: Vec<LockInTransit>,
        restarted: bool,
    },
    Lost {
        ids: Vec<LockId>,
    },
    Heartbeat {
        leader: NodeId,
        term: u64,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum To {
    Node(NodeId),
    Client(ClientId),
}

#[derive(Debug)]
enum Event {
    Deliver(To, Box<Msg>),
    Tick,
    Poll(NodeId),
    RebuildDeadline(NodeId, u64),
    ClientWake(ClientId),
    ClientRelease(ClientId, ReqId),
    Fault,
    Heal(NodeId),
}

/// Who is waiting for a table answer.
#[derive(Debug, Clone, Copy)]
enum Origin {
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

struct Rebuilding {
    term: u64,
    generation: u64,
    /// Each member's report, whether it restarted lately, and when the
    /// report arrived.
    reports: BTreeMap<NodeId, (Vec<LockInTransit>, bool, u64)>,
}

struct Node {
    id: NodeId,
    /// This node's clock reads `offset + sim time`: only durations cross.
    offset_ms: u64,
    alive: bool,
    paused_until: u64,
    restarted_at: Option<u64>,
    table: Table,
    held: Held,
    known_term: u64,
    leader: Option<NodeId>,
    speaking: Option<u64>,
    /// The leader lease, on the sim clock (what quorum acks would show).
    lease_until: u64,
    rebuilding: Option<Rebuilding>,
    waiters: HashMap<WaiterId, Origin>,
    /// Forwarded acquires: (sent at, client request arrived at).
    pending: HashMap<ReqId, (u64, u64)>,
}

impl Node {
    fn new(id: NodeId, offset_ms: u64) -> Node {
        Node {
            id,
            offset_ms,
            alive: true,
            paused_until: 0,
            restarted_at: None,
            table: Table::new(LeaseRule {
                default: Duration::from_millis(LEASE_MS),
                max: Duration::from_millis(MAX_LEASE_MS),
            }),
            held: Held::new(),
            known_term: 0,
            leader: None,
            speaking: None,
            lease_until: 0,
            rebuilding: None,
            waiters: HashMap::new(),
            pending: HashMap::new(),
        }
    }

    fn mono(&self, t: u64) -> MonoTime {
        MonoTime::from_nanos((self.offset_ms + t) * 1_000_000)
    }

    fn may_speak(&self, t: u64, ignore_lease: bool) -> bool {
        self.table.is_rebuilt()
            && self.speaking == Some(self.known_term)
            && self.leader == Some(self.id)
            && (ignore_lease || t < self.lease_until)
    }
}

#[derive(Debug, Clone)]
enum ClientState {
    Idle,
    Asking {
        req: ReqId,
        sent: u64,
        name: String,
    },
    Holding {
        req: ReqId,
        name: String,
        id: LockId,
        fence: u64,
        start: u64,
        ends: u64,
    },
}

struct Client {
    node: NodeId,
    state: ClientState,
}

struct Interval {
    name: String,
    fence: u64,
    start: u64,
    end: u64,
}

struct World {
    t: u64,
    seq: u64,
    rng: StdRng,
    config: Config,
    events: BinaryHeap<Reverse<(u64, u64, usize)>>,
    bodies: HashMap<usize, Event>,
    next_body: usize,
    nodes: BTreeMap<NodeId, Node>,
    clients: Vec<Client>,
    next_req: ReqId,
    next_lock: u128,
    // The oracle.
    term: u64,
    leader: Option<NodeId>,
    intervals: Vec<Interval>,
    /// Rebuilds that missed members: (time, term).
    missing_rebuilds: Vec<u64>,
    report: Report,
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
        next_body: 0,
        nodes: BTreeMap::new(),
        clients: Vec::new(),
        next_req: 0,
        next_lock: 0,
        term: 0,
        leader: None,
        intervals: Vec::new(),
        missing_rebuilds: Vec::new(),
        report: Report {
            seed,
            ..Report::default()
        },
    };
    for id in 1..=config.nodes {
        let offset = world.rng.gen_range(1_000_000..1_000_000_000);
        world.nodes.insert(id, Node::new(id, offset));
    }
    for c in 0..config.clients {
        let node = 1 + (c as u64 % config.nodes);
        world.clients.push(Client {
            node,
            state: ClientState::Idle,
        });
        let at = world.rng.gen_range(0..200);
        world.at(at, Event::ClientWake(c));
    }
    for id in 1..=config.nodes {
        world.at(id, Event::Poll(id));
    }
    world.at(0, Event::Tick);
    world.at(500, Event::Fault);
    while let Some(Reverse((t, _, body))) = world.events.pop() {
        if t > config.duration_ms {
            break;
        }
        world.t = t;
        let event = world.bodies.remove(&body).expect("queued");
        world.handle(event);
    }
    world.check();
    world.report
}

impl World {
    fn at(&mut self, t: u64, event: Event) {
        self.seq += 1;
        let body = self.next_body;
        self.next_body += 1;
        self.bodies.insert(body, event);
        self.events.push(Reverse((t, self.seq, body)));
    }

    fn send(&mut self, to: To, msg: Msg) {
        if self.rng.gen_bool(self.config.loss) {
            self.report.lost_messages += 1;
            return;
        }
        let delay = self.rng.gen_range(1..=self.config.max_delay_ms);
        self.at(self.t + delay, Event::Deliver(to, Box::new(msg)));
    }

    fn node_ready(&self, id: NodeId) -> Option<bool> {
        let node = &self.nodes[&id];
        if !node.alive {
            return None;
        }
        Some(self.t >= node.paused_until)
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Deliver(To::Client(c), msg) => self.client_message(c, *msg),
            Event::Deliver(To::Node(n), msg) => match self.node_ready(n) {
                None => {}
                Some(false) => {
                    let resume = self.nodes[&n].paused_until;
                    self.at(resume, Event::Deliver(To::Node(n), msg));
                }
                Some(true) => self.node_message(n, *msg),
            },
            Event::Tick => self.tick(),
            Event::Poll(n) => {
                if self.node_ready(n) == Some(true) {
                    self.poll(n);
                }
                self.at(self.t + POLL_MS, Event::Poll(n));
            }
            Event::RebuildDeadline(n, term) => match self.node_ready(n) {
                Some(true) => self.finish_rebuild(n, term),
                Some(false) => {
                    let resume = self.nodes[&n].paused_until;
                    self.at(resume, Event::RebuildDeadline(n, term));
                }
                None => {}
            },
            Event::ClientWake(c) => self.client_wake(c),
            Event::ClientRelease(c, req) => self.client_release(c, req),
            Event::Fault => self.fault(),
            Event::Heal(n) => self.heal(n),
        }
    }

    /// The oracle's heartbeat round: extends a healthy leader's lease, tells
    /// the nodes who leads, and elects a new leader once the old lease ran
    /// out.
    fn tick(&mut self) {
        let t = self.t;
        let healthy = |w: &World, id: NodeId| w.node_ready(id) == Some(true);
        match self.leader {
            Some(l) if healthy(self, l) => {
                let term = self.term;
                let node = self.nodes.get_mut(&l).expect("member");
                node.lease_until = t + LEADER_LEASE_MS;
                for id in 1..=self.config.nodes {
                    if id != l {
                        self.send(To::Node(id), Msg::Heartbeat { leader: l, term });
                    }
                }
                // Now and then a leader loses its quorum for no visible reason.
                if self.rng.gen_bool(0.005) {
                    self.leader = None;
                }
            }
            _ => {
                let last_lease = self
                    .nodes
                    .values()
                    .map(|n| n.lease_until)
                    .max()
                    .unwrap_or(0);
                // Followers vote only once every lease a leader could hold ran out.
                if t >= last_lease + (ELECTION_MAX_MS - LEADER_LEASE_MS) {
                    let candidates: Vec<NodeId> = (1..=self.config.nodes)
                        .filter(|&id| healthy(self, id))
                        .collect();
                    if candidates.len() as u64 > self.config.nodes / 2 {
                        let winner = candidates[self.rng.gen_range(0..candidates.len())];
                        self.term += 1;
                        self.leader = Some(winner);
                        self.report.elections += 1;
                        let term = self.term;
                        self.nodes.get_mut(&winner).expect("member").lease_until =
                            t + LEADER_LEASE_MS;
                        self.learn_term(winner, winner, term);
                    }
                }
            }
        }
        self.at(t + HEARTBEAT_MS, Event::Tick);
    }

    fn learn_term(&mut self, n: NodeId, leader: NodeId, term: u64) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        if term < node.known_term || (term == node.known_term && node.leader == Some(leader)) {
            return;
        }
        node.known_term = term;
        node.leader = Some(leader);
        let speaking = (leader == n).then_some(term);
        if node.speaking != speaking || speaking.is_some() {
            let now = node.mono(t);
            node.table.drop_table(now);
            node.speaking = speaking;
            node.rebuilding = None;
            self.dispatch(n);
        }
        if leader == n {
            let generation = self.nodes[&n].table.generation();
            let own = self.report_of(n);
            let node = self.nodes.get_mut(&n).expect("member");
            let mut reports = BTreeMap::new();
            reports.insert(n, (own.0, own.1, t));
            node.rebuilding = Some(Rebuilding {
                term,
                generation,
                reports,
            });
            for id in 1..=self.config.nodes {
                if id != n {
                    self.send(To::Node(id), Msg::ReadReport { leader: n, term });
                }
            }
            self.at(t + REBUILD_TIMEOUT_MS, Event::RebuildDeadline(n, term));
        }
    }

    fn report_of(&self, n: NodeId) -> (Vec<LockInTransit>, bool) {
        let node = &self.nodes[&n];
        let now = node.mono(self.t);
        let mut locks: Vec<LockInTransit> = node
            .held
            .live(now)
            .iter()
            .map(|l| l.in_transit(now))
            .collect();
        locks.extend(node.table.granted(now).iter().map(|l| l.in_transit(now)));
        let restarted = node
            .restarted_at
            .is_some_and(|at| self.t < at + MAX_LEASE_MS);
        (locks, restarted)
    }

    fn finish_rebuild(&mut self, n: NodeId, term: u64) {
        let t = self.t;
        let strict = self.config.strict;
        let nodes = self.config.nodes;
        let sabotage = self.config.sabotage;
        let node = self.nodes.get_mut(&n).expect("member");
        let Some(rebuilding) = node.rebuilding.take() else {
            return;
        };
        if rebuilding.term != term || node.speaking != Some(term) || node.known_term != term {
            return;
        }
        let now = node.mono(t);
        let mut locks = Vec::new();
        let mut missing = nodes - rebuilding.reports.len() as u64;
        for (report, restarted, arrived) in rebuilding.reports.into_values() {
            missing += u64::from(restarted);
            // The speaker counts a reported lease from the report's
            // arrival: its table must not end a lease before the holder.
            let arrived = node.mono(arrived);
            locks.extend(report.into_iter().map(|l| l.arrive(arrived)));
        }
        if sabotage == Some(Sabotage::SkipRebuild) {
            locks.clear();
            missing = 0;
        }
        let hold = (strict && missing > 0).then(|| now + Duration::from_millis(MAX_LEASE_MS));
        let from = RebuildFrom {
            generation: rebuilding.generation,
            epoch: term,
            locks,
            hold_new_grants_until: hold,
        };
        if let Ok(rebuilt) = node.table.rebuild(from, now) {
            if missing > 0 {
                self.missing_rebuilds.push(t);
            }
            let mut by_node: BTreeMap<NodeId, Vec<LockId>> = BTreeMap::new();
            for lock in rebuilt.lost {
                by_node.entry(lock.node).or_default().push(lock.id);
            }
            for (owner, ids) in by_node {
                self.send(To::Node(owner), Msg::Lost { ids });
            }
        }
    }

    fn poll(&mut self, n: NodeId) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        if node.may_speak(t, self.config.sabotage == Some(Sabotage::IgnoreLeaderLease)) {
            node.table.poll(now);
        } else if node.table.is_rebuilt() && node.table.waiting() > 0 {
            node.table.turn_away_waiters();
        }
        node.held.expire(now);
        self.dispatch(n);
    }

    /// Sends the table's answers to whoever waits for them.
    fn dispatch(&mut self, n: NodeId) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        let mut out = Vec::new();
        for answer in node.table.take_answers() {
            let Some(origin) = node.waiters.remove(&answer.waiter) else {
                continue;
            };
            if let (Ok(lock), Origin::Local { .. }) = (&answer.result, origin) {
                node.held.record(lock.clone());
            }
            let result = match answer.result {
                Ok(lock) => Ok(lock.in_transit(now)),
                Err(AcquireError::Held(_)) => Err(Refusal::Held),
                Err(_) => Err(Refusal::Unavailable),
            };
            match origin {
                Origin::Local {
                    client,
                    req,
                    arrived,
                } => out.push((
                    To::Client(client),
                    Msg::Reply {
                        req,
                        result: result.map(|l| (l, t - arrived)),
                    },
                )),
                Origin::Forwarded {
                    node,
                    client,
                    req,
                    arrived,
                } => out.push((
                    To::Node(node),
                    Msg::ForwardReply {
                        client,
                        req,
                        result: result.map(|l| (l, t - arrived)),
                    },
                )),
            }
        }
        for (to, msg) in out {
            self.send(to, msg);
        }
    }

    /// A grant or refusal as the speaker, for a client of `from`.
    fn speak_acquire(
        &mut self,
        n: NodeId,
        from: NodeId,
        client: ClientId,
        req: ReqId,
        name: String,
        wait_ms: u64,
    ) {
        let t = self.t;
        self.next_lock += 1;
        let id = LockId::from_u128(self.next_lock);
        let node = self.nodes.get_mut(&n).expect("member");
        let origin = if from == n {
            Origin::Local {
                client,
                req,
                arrived: t,
            }
        } else {
            Origin::Forwarded {
                node: from,
                client,
                req,
                arrived: t,
            }
        };
        let reply = |w: &mut World, result: Result<(LockInTransit, u64), Refusal>| match origin {
            Origin::Local { client, req, .. } => {
                w.send(To::Client(client), Msg::Reply { req, result })
            }
            Origin::Forwarded {
                node, client, req, ..
            } => w.send(
                To::Node(node),
                Msg::ForwardReply {
                    client,
                    req,
                    result,
                },
            ),
        };
        if !node.may_speak(t, self.config.sabotage == Some(Sabotage::IgnoreLeaderLease)) {
            reply(self, Err(Refusal::Unavailable));
            return;
        }
        let now = node.mono(t);
        let request = Request {
            name,
            id,
            node: from,
            holder: String::new(),
            lease: Some(Duration::from_millis(LEASE_MS)),
            wait: Duration::from_millis(wait_ms),
            data: None,
        };
        match node.table.acquire(request, now) {
            Ok(Acquired::Granted(lock)) => {
                if from == n {
                    node.held.record(lock.clone());
                }
                let transit = lock.in_transit(now);
                reply(self, Ok((transit, 0)));
            }
            Ok(Acquired::Waiting(w)) => {
                node.waiters.insert(w, origin);
            }
            Err(AcquireError::Held(_)) => reply(self, Err(Refusal::Held)),
            Err(_) => reply(self, Err(Refusal::Unavailable)),
        }
    }

    fn speak_release(&mut self, n: NodeId, name: &str, id: LockId) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        if !node.may_speak(t, self.config.sabotage == Some(Sabotage::IgnoreLeaderLease)) {
            return;
        }
        let now = node.mono(t);
        if let Ok(lock) = node.table.release(name, id, now) {
            node.held.remove(id);
            // As the node does: a lock granted this term is in the record
            // of its node only (the sim has no renewals through other
            // nodes); one from an earlier term may be in anyone's.
            let this_term = Some(lock.fence.epoch()) == node.speaking;
            let left = lock.expires.saturating_duration_since(now);
            for other in 1..=self.config.nodes {
                if other != n && (!this_term || other == lock.node) {
                    self.send(
                        To::Node(other),
                        Msg::Forget {
                            name: name.to_string(),
                            id,
                            left,
                        },
                    );
                }
            }
        }
        self.dispatch(n);
    }

    fn node_message(&mut self, n: NodeId, msg: Msg) {
        let t = self.t;
        match msg {
            Msg::Heartbeat { leader, term } => self.learn_term(n, leader, term),
            Msg::Acquire {
                client,
                req,
                name,
                wait_ms,
            } => {
                let node = &self.nodes[&n];
                match node.leader {
                    Some(l) if l == n => self.speak_acquire(n, n, client, req, name, wait_ms),
                    Some(l) => {
                        self.nodes
                            .get_mut(&n)
                            .expect("member")
                            .pending
                            .insert(req, (t, t));
                        self.send(
                            To::Node(l),
                            Msg::Forward {
                                from: n,
                                client,
                                req,
                                name,
                                wait_ms,
                            },
                        );
                    }
                    None => self.send(
                        To::Client(client),
                        Msg::Reply {
                            req,
                            result: Err(Refusal::Unavailable),
                        },
                    ),
                }
            }
            Msg::Forward {
                from,
                client,
                req,
                name,
                wait_ms,
            } => self.speak_acquire(n, from, client, req, name, wait_ms),
            Msg::ForwardReply {
                client,
                req,
                result,
            } => {
                let node = self.nodes.get_mut(&n).expect("member");
                let Some((sent, arrived)) = node.pending.remove(&req) else {
                    return;
                };
                let result = match result {
                    Ok((transit, served)) => {
                        // Counted from the send plus the speaker's time.
                        let lock = transit.arrive(node.mono(sent + served));
                        let now = node.mono(t);
                        let view = lock.in_transit(now);
                        node.held.record(lock);
                        Ok((view, t - arrived))
                    }
                    Err(e) => Err(e),
                };
                self.send(To::Client(client), Msg::Reply { req, result });
            }
            Msg::Release { name, id } => {
                let node = self.nodes.get_mut(&n).expect("member");
                node.held.remove(id);
                match node.leader {
                    Some(l) if l == n => self.speak_release(n, &name, id),
                    Some(l) => self.send(To::Node(l), Msg::ForwardRelease { name, id }),
                    None => {}
                }
            }
            Msg::ForwardRelease { name, id } => self.speak_release(n, &name, id),
            Msg::Forget { name, id, left } => {
                let node = self.nodes.get_mut(&n).expect("member");
                let now = node.mono(t);
                node.held.remove(id);
                node.table.forget(&name, id, left, now);
                self.dispatch(n);
            }
            Msg::ReadReport { leader, term } => {
                let (locks, restarted) = self.report_of(n);
                self.send(
                    To::Node(leader),
                    Msg::Report {
                        from: n,
                        term,
                        locks,
                        restarted,
                    },
                );
            }
            Msg::Report {
                from,
                term,
                locks,
                restarted,
            } => {
                let nodes = self.config.nodes;
                let node = self.nodes.get_mut(&n).expect("member");
                let complete = match node.rebuilding.as_mut() {
                    Some(r) if r.term == term => {
                        r.reports.insert(from, (locks, restarted, t));
                        r.reports.len() as u64 == nodes
                    }
                    _ => false,
                };
                if complete {
                    self.finish_rebuild(n, term);
                }
            }
            Msg::Lost { ids } => {
                let node = self.nodes.get_mut(&n).expect("member");
                for id in ids {
                    node.held.remove(id);
                }
            }
            Msg::Reply { .. } => {}
        }
    }

    fn client_wake(&mut self, c: ClientId) {
        if !matches!(self.clients[c].state, ClientState::Idle) {
            return;
        }
        let name = format!("n{}", self.rng.gen_range(0..self.config.names));
        let wait_ms = if self.rng.gen_bool(0.5) {
            0
        } else {
            self.rng.gen_range(10..800)
        };
        self.next_req += 1;
        let req = self.next_req;
        let until = self.t + wait_ms + 500;
        self.clients[c].state = ClientState::Asking {
            req,
            sent: self.t,
            name: name.clone(),
        };
        let node = self.clients[c].node;
        self.send(
            To::Node(node),
            Msg::Acquire {
                client: c,
                req,
                name,
                wait_ms,
            },
        );
        // Give up on an answer that never comes.
        self.at(until, Event::ClientRelease(c, req));
    }

    fn client_message(&mut self, c: ClientId, msg: Msg) {
        let Msg::Reply { req, result } = msg else {
            return;
        };
        let t = self.t;
        let ClientState::Asking {
            req: asked,
            sent,
            name,
            ..
        } = self.clients[c].state.clone()
        else {
            return;
        };
        if asked != req {
            return;
        }
        match result {
            Ok((transit, served)) => {
                let ends = sent + served + transit.ttl.as_millis() as u64;
                if t + CLIENT_MARGIN_MS >= ends {
                    // Arrived after its lease: not held; give it back.
                    let node = self.clients[c].node;
                    self.send(
                        To::Node(node),
                        Msg::Release {
                            name,
                            id: transit.id,
                        },
                    );
                    self.clients[c].state = ClientState::Idle;
                    self.at(t + 10, Event::ClientWake(c));
                    return;
                }
                self.clients[c].state = ClientState::Holding {
                    req,
                    name,
                    id: transit.id,
                    fence: transit.fence.0,
                    start: t,
                    ends: ends - CLIENT_MARGIN_MS,
                };
                let hold = self.rng.gen_range(1..=(ends - CLIENT_MARGIN_MS - t));
                self.at(t + hold, Event::ClientRelease(c, req));
            }
            Err(_) => {
                self.clients[c].state = ClientState::Idle;
                let backoff = self.rng.gen_range(5..100);
                self.at(t + backoff, Event::ClientWake(c));
            }
        }
    }

    fn client_release(&mut self, c: ClientId, req: ReqId) {
        let t = self.t;
        match self.clients[c].state.clone() {
            ClientState::Holding {
                req: held,
                name,
                id,
                fence,
                start,
                ends,
            } if held == req => {
                self.intervals.push(Interval {
                    name: name.clone(),
                    fence,
                    start,
                    end: t.min(ends),
                });
                let node = self.clients[c].node;
                self.send(To::Node(node), Msg::Release { name, id });
            }
            ClientState::Asking { req: asked, .. } if asked == req => {}
            _ => return,
        }
        self.clients[c].state = ClientState::Idle;
        let pause = self.rng.gen_range(1..50);
        self.at(t + pause, Event::ClientWake(c));
    }

    fn fault(&mut self) {
        let t = self.t;
        let n = self.rng.gen_range(1..=self.config.nodes);
        let down = self
            .nodes
            .values()
            .filter(|node| !node.alive || node.paused_until > t)
            .count() as u64;
        // Keep a quorum most of the time; sometimes take it away.
        if down < (self.config.nodes - 1) / 2 || self.rng.gen_bool(0.1) {
            let length = self.rng.gen_range(50..2500);
            if self.rng.gen_bool(0.5) {
                let node = self.nodes.get_mut(&n).expect("member");
                if node.alive {
                    node.alive = false;
                    self.report.crashes += 1;
                    if self.leader == Some(n) {
                        self.leader = None;
                    }
                    self.at(t + length, Event::Heal(n));
                }
            } else {
                let node = self.nodes.get_mut(&n).expect("member");
                if node.alive && node.paused_until <= t {
                    node.paused_until = t + length;
                    self.report.pauses += 1;
                }
            }
        }
        let next = self.rng.gen_range(100..1500);
        self.at(t + next, Event::Fault);
    }

    /// A crashed node comes back with nothing in memory.
    fn heal(&mut self, n: NodeId) {
        let offset = self.rng.gen_range(1_000_000..1_000_000_000);
        let mut node = Node::new(n, offset);
        node.restarted_at = Some(self.t);
        self.nodes.insert(n, node);
    }

    fn check(&mut self) {
        let max_lease = MAX_LEASE_MS + 1_000;
        let mut by_name: BTreeMap<&str, Vec<&Interval>> = BTreeMap::new();
        for i in &self.intervals {
            by_name.entry(&i.name).or_default().push(i);
        }
        let explained_by = |start: u64| {
            self.missing_rebuilds
                .iter()
                .any(|&r| r <= start && r + max_lease >= start)
        };
        for (name, mut list) in by_name {
            list.sort_by_key(|i| (i.start, i.fence));
            for (k, later) in list.iter().enumerate() {
                for earlier in &list[..k] {
                    if earlier.end > later.start {
                        self.report.overlaps += 1;
                        if !self.config.strict && explained_by(later.start) {
                            self.report.explained += 1;
                        } else {
                            self.report.unexplained.push(format!(
                                "{name}: fence {} held [{}, {}) overlaps fence {} from {}",
                                earlier.fence, earlier.start, earlier.end, later.fence, later.start
                            ));
                        }
                    } else if earlier.fence >= later.fence {
                        // In proceed mode an older grant whose holder's
                        // node was missing can surface after a newer one:
                        // the fence is what turns it away at the resource.
                        if !self.config.strict
                            && (explained_by(earlier.start) || explained_by(later.start))
                        {
                            self.report.explained += 1;
                            continue;
                        }
                        self.report.fence_inversions.push(format!(
                            "{name}: fence {} after {}",
                            later.fence, earlier.fence
                        ));
                    }
                }
            }
        }
        self.report.grants = self.intervals.len();
    }
}
