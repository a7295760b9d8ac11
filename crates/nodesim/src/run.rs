//! One seeded run: a cluster, clients taking, renewing and releasing
//! locks through random nodes, and faults on one member at a time (crash
//! and restart, partitions both ways and one way, held links, lossy
//! links, pauses, and replacements: a member removed through the API, the
//! speaker too, and added again on a wiped data directory), or a routine
//! change followed by one fault of the speaker ([`crate::change`]); then
//! the faults heal and every member must serve again. The checks of
//! [`crate::check`] read what the clients saw.

use std::collections::{BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::{Method, StatusCode};
use leasehold_node::{RebuildMode, Sabotage};
use locktable::LeaseRule;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

pub use crate::change::Change;
use crate::change::Doing;
use crate::check::{check, Excuses};
use crate::client::{grant_through, CALL};
use crate::cluster::{self, Options};
use crate::guards::Guards;
use crate::history::{now, Call, Event, History};
use crate::net::call;
use crate::pauses::Pauses;

/// How soon after the faults heal every node must serve a grant, with
/// the leases of most runs ([`LEASE`]): [`liveness_bound`].
pub const LIVENESS_BOUND: Duration = liveness_bound(LEASE);

/// How soon after the faults heal every node must serve a grant, with
/// leases of at most `lease.max`: seven seconds (an election, a rebuild's
/// reads, a retry, round trips on a slow network) and, for strict mode's
/// hold after a rebuild that missed a member, the longest lease.
pub const fn liveness_bound(lease: LeaseRule) -> Duration {
    Duration::from_secs(7).saturating_add(lease.max)
}

/// The leases of most runs: short, so that many come and go.
pub const LEASE: LeaseRule = LeaseRule {
    default: Duration::from_secs(2),
    max: Duration::from_secs(3),
};

/// What one run does.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The seed of every choice.
    pub seed: u64,
    /// The rebuild mode.
    pub mode: RebuildMode,
    /// `--copies`: `None` for the default (2); `Some(1)` is the sabotage
    /// the checks must catch.
    pub copies: Option<usize>,
    /// Clients.
    pub clients: usize,
    /// Fault episodes before the faults heal for good.
    pub faults: usize,
    /// Which faults strike: all kinds, or only one kind, always on the
    /// speaker (for the sabotage tests: what a mechanism is for, as often
    /// as possible).
    pub focus: Focus,
    /// Safety mechanisms the nodes run without: the checks must see it.
    pub sabotage: Sabotage,
}

impl RunOptions {
    /// A run of `seed` with the defaults.
    pub fn new(seed: u64) -> Self {
        RunOptions {
            seed,
            mode: RebuildMode::Proceed,
            copies: None,
            clients: 4,
            faults: 4,
            focus: Focus::Mixed,
            sabotage: Sabotage::NONE,
        }
    }
}

/// Which faults a run's episodes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Focus {
    /// Every kind, on the speaker 70 % of the time.
    Mixed,
    /// Every episode a crash of the speaker.
    SpeakerCrashes,
    /// Every episode a pause of the speaker.
    SpeakerPauses,
    /// Every episode a replacement of the speaker.
    SpeakerReplaces,
    /// A routine change, and one fault of the speaker at a seeded moment
    /// after one of its steps ([`Change`]).
    Change(Change),
}

/// What a run came to.
#[derive(Debug)]
pub struct Outcome {
    /// What the checks found; empty when the run passed.
    pub violations: Vec<String>,
    /// What the clients saw.
    pub history: History,
    /// The faults, in words, from when until when in simulated time.
    pub faults: Vec<String>,
    /// Simulated time the run took.
    pub simulated: Duration,
    /// The longest a node took to serve after the faults healed.
    pub liveness_worst: Duration,
}

impl Outcome {
    /// A digest of what the clients saw and of the faults: two runs of one
    /// seed that replay alike have the same.
    pub fn digest(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        // SipHash with fixed keys: the same in every process.
        #[allow(deprecated)]
        let mut hasher = std::hash::SipHasher::new();
        format!("{:?}", self.history.events).hash(&mut hasher);
        self.faults.hash(&mut hasher);
        hasher.finish()
    }

    /// Panics, naming `what` ran, with the violations and the faults, if
    /// the run failed (for tests).
    pub fn assert_passed(&self, what: &str) {
        assert!(
            self.violations.is_empty(),
            "{what}: {:#?}\nfaults: {:#?}",
            self.violations,
            self.faults
        );
    }

    /// Grants answered to clients.
    pub fn grants(&self) -> usize {
        self.history
            .events
            .iter()
            .filter(|e| matches!(e, Event::Held { renewal: false, .. }))
            .count()
    }
}

/// A fault on one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// Killed, then restarted on its data directory.
    Crash,
    /// Cut off from every other member both ways.
    Isolate,
    /// Nothing it sends arrives.
    Mute,
    /// Nothing sent to it arrives.
    Deaf,
    /// Its links hold every message until the fault ends.
    Hold,
    /// Paused as SIGSTOP pauses a process (`crate::pauses`): it runs
    /// nothing while time goes on, then wakes with its clock jumped and
    /// what arrived meanwhile waiting.
    Pause,
    /// Its links drop what is in flight now and then (each simulated
    /// millisecond with probability [`LOSS_PER_MS`]): requests and answers
    /// on those connections are lost, and their callers time out.
    Lossy,
    /// A speaker the moment it is elected, before its first rebuild has
    /// read a quorum: nothing sent to it arrives for longer than
    /// openraft's ReadIndex waits (one leader lease), so that rebuild
    /// fails while the speaker keeps its term (its heartbeats still
    /// arrive). Struck now and then ([`BLIP_CHANCE`]) when no other fault
    /// is on.
    Blip,
    /// Removed from the cluster by an operator (`DELETE
    /// /v1/cluster/members/{id}` through another member): it shuts down and
    /// its host stops; then its host starts again on a wiped data
    /// directory and joins the cluster under the same id. Over once it
    /// votes again (a plan of [`Doing`] steps).
    Replace,
}

/// How long a step of a change may take (a replacement's removal, a
/// join, a restart): longer is a violation.
const STEP_WITHIN: Duration = Duration::from_secs(60);

/// When a [`Focus::Change`] run begins its change, once a speaker is seen.
const CHANGE_AT: Duration = Duration::from_secs(3);

/// How long after a restart the next fault may begin: a restarted member
/// counts as missing from rebuilds for the longest lease, and a second
/// missing member would be as many as there are copies.
const AFTER_RESTART: Duration = LEASE.max.saturating_add(Duration::from_secs(1));

/// How often a speaker just elected is struck by [`Fault::Blip`].
const BLIP_CHANCE: f64 = 0.2;

/// How long after a blip heals the next fault may begin: the speaker's
/// retried rebuild (its ReadIndex, its reads within the node's rebuild
/// timeout) ends first, so that no rebuild runs under two faults.
const AFTER_BLIP: Duration = Duration::from_secs(3);

/// How often a lossy link drops what it carries, per simulated millisecond.
const LOSS_PER_MS: f64 = 0.005;

/// One fault: what, to whom (the speaker, as last seen, or a member),
/// from when, for how long.
#[derive(Debug, Clone, Copy)]
struct Episode {
    fault: Fault,
    speaker: bool,
    member: u64,
    start: Duration,
    length: Duration,
}

/// The faults of `seed`: one member at a time, each healed before the
/// next, and after a restart [`AFTER_RESTART`] before the next. A change
/// run's one fault strikes the speaker at a moment its change sets.
fn schedule(rng: &mut StdRng, count: usize, nodes: u64, focus: Focus) -> Vec<Episode> {
    if let Focus::Change(change) = focus {
        let fault = match change {
            Change::Timings => Fault::Isolate,
            _ => Fault::Crash,
        };
        return vec![Episode {
            fault,
            speaker: true,
            member: 1,
            start: Duration::MAX,
            length: Duration::from_millis(rng.gen_range(300..4_000)),
        }];
    }
    let mut at = Duration::from_secs(3);
    (0..count)
        .map(|_| {
            let fault = *[
                Fault::Crash,
                Fault::Isolate,
                Fault::Mute,
                Fault::Deaf,
                Fault::Hold,
                Fault::Lossy,
                Fault::Pause,
                Fault::Replace,
            ]
            .choose(rng)
            .expect("faults");
            let fault = match focus {
                Focus::Mixed | Focus::Change(_) => fault,
                Focus::SpeakerCrashes => Fault::Crash,
                Focus::SpeakerPauses => Fault::Pause,
                Focus::SpeakerReplaces => Fault::Replace,
            };
            let episode = Episode {
                fault,
                speaker: focus != Focus::Mixed || rng.gen_bool(0.7),
                member: rng.gen_range(1..=nodes),
                start: at,
                length: Duration::from_millis(rng.gen_range(300..4_000)),
            };
            let rest = match fault {
                // A replacement's end is not scheduled: the next fault is
                // put off until after it (see `run`).
                Fault::Crash | Fault::Replace => AFTER_RESTART,
                _ => Duration::from_millis(rng.gen_range(500..2_000)),
            };
            at = episode.start + episode.length + rest;
            episode
        })
        .collect()
}

/// What the driver and the clients share.
#[derive(Debug, Default)]
struct Shared {
    history: History,
    /// The speaker the observer saw last.
    speaker: Option<u64>,
    /// When the last fault healed.
    healed: Option<Duration>,
    /// The step of a change under way, and whose turn it is.
    change: Option<Doing>,
    /// The members, as the changes made them.
    members: BTreeSet<u64>,
}

/// A change under way, as the driver follows it.
#[derive(Debug)]
struct Changing {
    /// The steps after the one under way.
    plan: VecDeque<Doing>,
    /// Steps over so far.
    steps: usize,
    /// When the step under way began.
    step_began: Duration,
    /// After which step the change run's fault is due, and how long after.
    fault_after: Option<(usize, Duration)>,
}

/// Runs `options` in a fresh simulation with its data in a temporary
/// directory.
pub fn run(options: &RunOptions) -> Outcome {
    let dirs = tempfile::tempdir().expect("a temporary directory");
    let change = match options.focus {
        Focus::Change(change) => Some(change),
        _ => None,
    };
    let (nodes, initial) = change.map_or((3, 3), Change::hosts);
    let settings = change.map(Change::initial).unwrap_or_default();
    let mode = change.map_or(options.mode, |c| c.mode(options.mode));
    let lease = change.map_or(LEASE, Change::lease);
    let bound = liveness_bound(lease);
    let cluster_options = Options {
        nodes,
        initial,
        seed: options.seed,
        mode,
        copies: options.copies,
        lease,
        duration: Duration::from_secs(600),
        sabotage: options.sabotage,
        guards: Guards::default(),
        timings: settings.timings.unwrap_or_default(),
        protocol: settings.protocol,
        ..Options::default()
    };
    let guards = cluster_options.guards.clone();
    let leaders = cluster_options.leaders.clone();
    let pauses = cluster_options.pauses.clone();
    let hosts = cluster_options.hosts.clone();
    let mut elected: BTreeSet<(u64, u64)> = BTreeSet::new();
    // Until when a member restarted lately counts as missing from rebuilds.
    let mut restarted_until = Duration::ZERO;
    let mut rng = StdRng::seed_from_u64(options.seed);
    let mut episodes = schedule(&mut rng, options.faults, nodes, options.focus);
    let fault_delay = Duration::from_millis(rng.gen_range(0..3_000));
    let mut sim = cluster::build(&cluster_options, dirs.path());
    let shared = Arc::new(Mutex::new(Shared {
        members: (1..=initial).collect(),
        ..Shared::default()
    }));

    let observer = Arc::clone(&shared);
    sim.client("observer", async move {
        let mut ask = 1;
        while observer.lock().unwrap().healed.is_none() {
            if let Some(s) = crate::client::speaker(ask).await {
                observer.lock().unwrap().speaker = Some(s);
            }
            ask = ask % nodes + 1;
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    });
    for client in 0..options.clients {
        let seed = rng.gen();
        let shared = Arc::clone(&shared);
        sim.client(format!("client{client}"), async move {
            work(client, nodes, lease, seed, shared).await;
            Ok(())
        });
    }
    let operator_shared = Arc::clone(&shared);
    sim.client("operator", async move {
        operator(nodes, operator_shared).await;
        Ok(())
    });
    for node in 1..=nodes {
        let shared = Arc::clone(&shared);
        sim.client(format!("probe{node}"), async move {
            probe(node, bound, shared).await;
            Ok(())
        });
    }

    let mut faults: Vec<String> = Vec::new();
    let mut next = 0;
    let mut active: Option<(Episode, u64)> = None;
    let mut changing: Option<Changing> = None;
    let mut change_begun = change.is_none();
    let mut failed = None;
    let mut stuck = Vec::new();
    loop {
        match sim.step() {
            Ok(true) => break,
            Ok(false) => {}
            Err(e) => {
                failed = Some(format!("the simulation failed: {e}"));
                break;
            }
        }
        let t = sim.elapsed();
        for (node, term) in leaders.leading() {
            let new = elected.insert((node, term));
            let healing = shared.lock().unwrap().healed.is_some();
            // Not while a member restarted lately counts as missing: a
            // blip striking after the rebuild's ReadIndex, during its
            // reads, would make a second missing member.
            let quiet = t >= restarted_until && changing.is_none();
            if new && active.is_none() && quiet && !healing && rng.gen_bool(BLIP_CHANCE) {
                let blip = Episode {
                    fault: Fault::Blip,
                    speaker: true,
                    member: node,
                    start: t,
                    length: Duration::from_millis(rng.gen_range(400..900)),
                };
                if let Some(first) = episodes.get(next).filter(|e| e.start != Duration::MAX) {
                    let late = (t + blip.length + AFTER_BLIP).saturating_sub(first.start);
                    for episode in &mut episodes[next..] {
                        episode.start += late;
                    }
                }
                inflict(&mut sim, &pauses, blip.fault, node, nodes);
                faults.push(format!("{t:?}: fault {:?} of n{node}", blip.fault));
                active = Some((blip, node));
            }
        }
        // A change run's change, once a speaker is seen.
        if let (Some(change), false) = (change, change_begun) {
            let seen = shared.lock().unwrap().speaker;
            if let Some(speaker) = seen.filter(|_| t >= CHANGE_AT && active.is_none()) {
                let pick = crate::change::next_other(rng.gen_range(0..nodes), speaker, nodes);
                let (plan, anchor) = change.plan(speaker, pick);
                faults.push(format!("{t:?}: {change:?}: {plan:?}"));
                changing = Some(begin(&shared, plan, t, Some((anchor, fault_delay))));
                change_begun = true;
            }
        }
        // The step under way: the driver's turn, or over.
        if let Some(doing) = changing.as_mut() {
            let mut shared_now = shared.lock().unwrap();
            match shared_now.change {
                Some(step) if !step.operators() => {
                    let moved = step.drive(&mut sim, &hosts);
                    shared_now.change = moved;
                    if moved.is_some_and(|m| m != step) {
                        faults.push(format!("{t:?}: {moved:?}"));
                    }
                }
                Some(step) if t.saturating_sub(doing.step_began) > STEP_WITHIN => {
                    stuck.push(format!("{step:?} not over within {STEP_WITHIN:?}"));
                    shared_now.change = None;
                    changing = None;
                }
                Some(_) => {}
                None => {
                    doing.steps += 1;
                    if let Some((anchor, delay)) = doing.fault_after {
                        if doing.steps == anchor {
                            if let Some(fault) = episodes.get_mut(next) {
                                fault.start = t + delay;
                            }
                        }
                    }
                    match doing.plan.pop_front() {
                        Some(step) => {
                            faults.push(format!("{t:?}: {step:?}"));
                            shared_now.change = Some(step);
                            doing.step_began = t;
                        }
                        None => {
                            faults.push(format!("{t:?}: change over"));
                            changing = None;
                        }
                    }
                }
            }
        }
        if let Some((episode, victim)) = active {
            let over = match episode.fault {
                Fault::Replace => changing.is_none(),
                _ => t >= episode.start + episode.length,
            };
            if over {
                heal(&mut sim, &pauses, episode.fault, victim, nodes);
                if let Fault::Crash | Fault::Replace = episode.fault {
                    restarted_until = t + AFTER_RESTART;
                }
                if let Fault::Replace = episode.fault {
                    // The next faults keep their distance from its end.
                    if let Some(first) = episodes.get(next) {
                        let late = (t + AFTER_RESTART).saturating_sub(first.start);
                        for episode in &mut episodes[next..] {
                            episode.start += late;
                        }
                    }
                }
                if let Some(last) = faults.iter_mut().rev().find(|f| f.contains("fault ")) {
                    last.push_str(&format!(" until {t:?}"));
                }
                active = None;
            }
        } else if let Some(episode) = episodes.get(next).filter(|e| t >= e.start) {
            let seen = shared.lock().unwrap().speaker;
            let victim = match (episode.speaker, seen) {
                (true, Some(s)) => s,
                _ => episode.member,
            };
            inflict(&mut sim, &pauses, episode.fault, victim, nodes);
            if let Fault::Replace = episode.fault {
                let plan = [
                    Doing::Removing(victim),
                    Doing::Rejoining {
                        id: victim,
                        at_once: false,
                    },
                ];
                changing = Some(begin(&shared, plan.into(), t, None));
            }
            faults.push(format!("{t:?}: fault {:?} of n{victim}", episode.fault));
            active = Some((*episode, victim));
            next += 1;
        }
        let quiet = next == episodes.len() && active.is_none() && changing.is_none();
        if quiet && change_begun && shared.lock().unwrap().healed.is_none() {
            shared.lock().unwrap().healed = Some(t);
        }
    }

    let simulated = sim.elapsed();
    let (history, members) = {
        let shared = shared.lock().unwrap();
        (shared.history.clone(), shared.members.clone())
    };
    let excuses = Excuses {
        losses: change.is_some_and(Change::may_lose),
    };
    let mut violations = check(&history, &members, bound, excuses);
    violations.extend(hosts.failures());
    violations.extend(failed);
    violations.extend(stuck);
    violations.extend(guards.violations());
    let liveness_worst = history
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Served { healed, at, .. } => Some(at.saturating_sub(*healed)),
            _ => None,
        })
        .max()
        .unwrap_or_default();
    Outcome {
        violations,
        history,
        faults,
        simulated,
        liveness_worst,
    }
}

/// Begins a change whose first step is `plan`'s.
fn begin(
    shared: &Mutex<Shared>,
    mut plan: VecDeque<Doing>,
    t: Duration,
    fault_after: Option<(usize, Duration)>,
) -> Changing {
    shared.lock().unwrap().change = plan.pop_front();
    Changing {
        plan,
        steps: 0,
        step_began: t,
        fault_after,
    }
}

/// The other members of `victim`'s cluster, as host names.
fn others(victim: u64, nodes: u64) -> Vec<String> {
    (1..=nodes)
        .filter(|n| *n != victim)
        .map(cluster::host)
        .collect()
}

fn inflict(sim: &mut turmoil::Sim<'_>, pauses: &Pauses, fault: Fault, victim: u64, nodes: u64) {
    let host = cluster::host(victim);
    for other in others(victim, nodes) {
        let (a, b) = (host.as_str(), other.as_str());
        match fault {
            Fault::Crash | Fault::Pause | Fault::Replace => {}
            Fault::Isolate => sim.partition(a, b),
            Fault::Mute => sim.partition_oneway(a, b),
            Fault::Deaf | Fault::Blip => sim.partition_oneway(b, a),
            Fault::Hold => sim.hold(a, b),
            Fault::Lossy => sim.set_link_fail_rate(a, b, LOSS_PER_MS),
        }
    }
    match fault {
        Fault::Crash => sim.crash(host.as_str()),
        Fault::Pause => pauses.pause(victim),
        _ => {}
    }
}

fn heal(sim: &mut turmoil::Sim<'_>, pauses: &Pauses, fault: Fault, victim: u64, nodes: u64) {
    let host = cluster::host(victim);
    for other in others(victim, nodes) {
        let (a, b) = (host.as_str(), other.as_str());
        match fault {
            Fault::Crash | Fault::Pause | Fault::Replace => {}
            Fault::Isolate | Fault::Mute | Fault::Deaf | Fault::Blip => sim.repair(a, b),
            Fault::Hold => sim.release(a, b),
            Fault::Lossy => {
                sim.set_link_fail_rate(a, b, 0.0);
                sim.repair(a, b);
            }
        }
    }
    match fault {
        Fault::Crash => sim.bounce(host.as_str()),
        Fault::Pause => pauses.resume(victim),
        _ => {}
    }
}

/// The operator: carries out the steps of a change whose turn is its own
/// ([`Doing::operate`]), and notes who is a member as removals and joins
/// end.
async fn operator(nodes: u64, shared: Arc<Mutex<Shared>>) {
    let mut via = 0;
    loop {
        let (doing, healed) = {
            let shared = shared.lock().unwrap();
            (shared.change, shared.healed.is_some())
        };
        match doing {
            None if healed => return,
            Some(step) if step.operators() => {
                let (moved, asked) = step.operate(via, nodes).await;
                via = asked;
                let mut shared = shared.lock().unwrap();
                if shared.change == doing {
                    shared.change = moved;
                    match (step, moved) {
                        (Doing::Removing(id), None) => {
                            shared.members.remove(&id);
                        }
                        (Doing::Joining(id), None) => {
                            shared.members.insert(id);
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An answer through one of the nodes.
struct Through {
    /// The node that answered.
    node: u64,
    /// When the call that it answered was sent.
    sent: Duration,
    status: StatusCode,
    answer: Value,
    /// No node was tried before it: no earlier try may have been carried
    /// out with its answer lost.
    first: bool,
}

/// A client's calls through one node after another (in a random order)
/// until one answers other than `503` or not at all; `None` when none did.
async fn through_any(rng: &mut StdRng, nodes: u64, path: &str, body: &Value) -> Option<Through> {
    let mut order: Vec<u64> = (1..=nodes).collect();
    order.shuffle(rng);
    for (tried, node) in order.into_iter().enumerate() {
        let sent = now();
        match call(
            &cluster::addr(node),
            Method::POST,
            path,
            Some(body.clone()),
            CALL,
        )
        .await
        {
            Ok((StatusCode::SERVICE_UNAVAILABLE, _)) | Err(_) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok((status, answer)) => {
                return Some(Through {
                    node,
                    sent,
                    status,
                    answer,
                    first: tried == 0,
                })
            }
        }
    }
    None
}

/// The lock of a grant or renewal answered at `sent`: its id, its fence
/// and the end of its lease on the holder's count (`served_ms` is absent
/// from a renewal's answer: 0); what is missing or wrong, if the answer is
/// not one.
fn answered_lock(
    sent: Duration,
    name: &str,
    answer: &Value,
) -> Result<(String, u64, Duration), String> {
    let lock = &answer["lock"];
    let (Some(id), Some(fence), Some(ttl)) = (
        lock["id"].as_str(),
        lock["fence"].as_u64(),
        lock["ttl_ms"].as_u64(),
    ) else {
        return Err(format!(
            "an answer without a lock's id, fence and ttl_ms: {answer}"
        ));
    };
    if lock["name"] != json!(name) {
        return Err(format!("asked for {name}, answered {answer}"));
    }
    let served = answer["served_ms"].as_u64().unwrap_or(0);
    Ok((
        id.to_string(),
        fence,
        sent + Duration::from_millis(served + ttl),
    ))
}

/// One client's work until the faults have healed and a little after:
/// take a random name with a lease of half the longest to the longest,
/// hold it for a while renewing a third of a lease apart, then release it
/// or let it expire.
async fn work(client: usize, nodes: u64, lease: LeaseRule, seed: u64, shared: Arc<Mutex<Shared>>) {
    let longest = u64::try_from(lease.max.as_millis()).unwrap_or(u64::MAX);
    let mut rng = StdRng::seed_from_u64(seed);
    let done = |shared: &Arc<Mutex<Shared>>| {
        shared
            .lock()
            .unwrap()
            .healed
            .is_some_and(|h| now() > h + Duration::from_secs(3))
    };
    while !done(&shared) {
        let name = format!("jobs/{}", rng.gen_range(0..2));
        let lease_ms: u64 = rng.gen_range(longest / 2..=longest);
        let body = json!({"name": name, "holder": format!("client{client}"), "lease_ms": lease_ms});
        let Some(Through {
            node,
            sent,
            status,
            answer,
            ..
        }) = through_any(&mut rng, nodes, "/v1/locks/acquire", &body).await
        else {
            continue;
        };
        if status != StatusCode::OK {
            tokio::time::sleep(Duration::from_millis(rng.gen_range(20..150))).await;
            continue;
        }
        let (id, fence, mut ends) = match answered_lock(sent, &name, &answer) {
            Ok(lock) => lock,
            Err(why) => {
                shared.lock().unwrap().history.push(Event::Malformed(why));
                return;
            }
        };
        let held = |node, sent| Call {
            client,
            node,
            name: name.clone(),
            id: id.clone(),
            sent,
            at: now(),
        };
        shared.lock().unwrap().history.push(Event::Held {
            call: held(node, sent),
            fence,
            ends,
            renewal: false,
        });
        let renewals = rng.gen_range(0..6);
        let mut kept = true;
        for _ in 0..renewals {
            tokio::time::sleep(Duration::from_millis(lease_ms / 3)).await;
            if now() >= ends {
                kept = false;
                break;
            }
            let body = json!({"name": name, "id": id, "lease_ms": lease_ms});
            match through_any(&mut rng, nodes, "/v1/locks/renew", &body).await {
                Some(Through {
                    node,
                    sent,
                    status: StatusCode::OK,
                    answer,
                    ..
                }) => {
                    let renewed = answered_lock(sent, &name, &answer).and_then(|lock| match lock {
                        (renewed, ..) if renewed != id => {
                            Err(format!("renewed {id}, answered {answer}"))
                        }
                        lock => Ok(lock),
                    });
                    let (_, fence, until) = match renewed {
                        Ok(lock) => lock,
                        Err(why) => {
                            shared.lock().unwrap().history.push(Event::Malformed(why));
                            return;
                        }
                    };
                    ends = until;
                    shared.lock().unwrap().history.push(Event::Held {
                        call: held(node, sent),
                        fence,
                        ends,
                        renewal: true,
                    });
                }
                Some(Through {
                    node,
                    sent,
                    status: StatusCode::NOT_FOUND,
                    ..
                }) => {
                    shared
                        .lock()
                        .unwrap()
                        .history
                        .push(Event::NotHeld(held(node, sent)));
                    kept = false;
                    break;
                }
                _ => {}
            }
        }
        if kept && rng.gen_bool(0.7) {
            shared.lock().unwrap().history.push(Event::Released {
                name: name.clone(),
                id: id.clone(),
                sent: now(),
            });
            let body = json!({"name": name, "id": id});
            // A release answered not_held while the lease still ran was a
            // lock lost; unless an earlier try may have released it.
            if let Some(Through {
                node,
                sent,
                status: StatusCode::NOT_FOUND,
                first: true,
                ..
            }) = through_any(&mut rng, nodes, "/v1/locks/release", &body).await
            {
                shared
                    .lock()
                    .unwrap()
                    .history
                    .push(Event::NotHeld(held(node, sent)));
            }
        } else {
            // Let it expire: wait out the lease on the holder's count.
            let left = ends.saturating_sub(now());
            tokio::time::sleep(left).await;
        }
    }
}

/// Once the faults have healed, takes a fresh name through `node`, if it
/// is a member, until it is granted, and notes when.
async fn probe(node: u64, bound: Duration, shared: Arc<Mutex<Shared>>) {
    let healed = loop {
        if let Some(h) = shared.lock().unwrap().healed {
            break h;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    if !shared.lock().unwrap().members.contains(&node) {
        return;
    }
    let name = format!("probe/{node}");
    if let Some(at) = grant_through(node, &name, healed + bound * 3).await {
        shared
            .lock()
            .unwrap()
            .history
            .push(Event::Served { node, healed, at });
    }
}
