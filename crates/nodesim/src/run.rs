//! One seeded run: a cluster, clients taking, renewing and releasing
//! locks through random nodes, and faults on one member at a time (crash
//! and restart, partitions both ways and one way, held links, lossy
//! links, pauses, and replacements: a member removed through the API, the
//! speaker too, and added again on a wiped data directory); then the
//! faults heal and every node must serve again. The checks of
//! [`crate::check`] read what the clients saw.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::{Method, StatusCode};
use leasehold_node::{RebuildMode, Sabotage};
use locktable::LeaseRule;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::check::check;
use crate::client::{grant_through, CALL};
use crate::cluster::{self, Options, Rejoins};
use crate::guards::Guards;
use crate::history::{now, Call, Event, History};
use crate::net::{admin_call, call};
use crate::pauses::Pauses;

/// How soon after the faults heal every node must serve a grant.
pub const LIVENESS_BOUND: Duration = Duration::from_secs(10);

/// The leases of a run: short, so that many come and go.
const LEASE: LeaseRule = LeaseRule {
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
    /// A routine change, then one crash of the speaker ([`Change`]).
    Change(Change),
}

/// A routine change a run makes before its one fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A member other than the speaker (one of the two that may hold a
    /// lock's copy, with three nodes and two copies) is removed through the
    /// API and its host restarted at once, as the removal is answered, on a
    /// wiped directory under the same id at the same address, joining;
    /// then the speaker crashes at a seeded moment.
    Replace,
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
#[derive(Debug, Clone, Copy)]
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
    /// votes again, or after [`REPLACE_WITHIN`] (a violation).
    Replace,
}

/// How long a replacement may take, from the removal asked to the node
/// voting again.
const REPLACE_WITHIN: Duration = Duration::from_secs(60);

/// How long the operator waits for a removal's answer.
const REMOVE_CALL: Duration = Duration::from_secs(45);

/// Where a replacement is ([`Fault::Replace`]): the driver and the
/// operator (a client) move it on in turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Replacing {
    /// The operator asks a member to remove the node.
    Remove(u64),
    /// Removed: the driver restarts its host, once it stopped, wiped and
    /// joining.
    Removed(u64),
    /// Joining: the operator waits until it votes again.
    Join(u64),
    /// It votes again.
    Done,
}

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
/// next, and after a restart [`AFTER_RESTART`] before the next.
fn schedule(rng: &mut StdRng, count: usize, nodes: u64, focus: Focus) -> Vec<Episode> {
    let mut at = Duration::from_secs(3);
    if let Focus::Change(Change::Replace) = focus {
        // The replacement, then the crash of the speaker: put off until
        // after the replacement's end by `run`, plus a seeded moment.
        let replace = Episode {
            fault: Fault::Replace,
            speaker: false,
            member: rng.gen_range(1..=nodes),
            start: at,
            length: Duration::ZERO,
        };
        let crash = Episode {
            fault: Fault::Crash,
            speaker: true,
            member: 1,
            start: at + Duration::from_millis(rng.gen_range(0..3_000)),
            length: Duration::from_millis(rng.gen_range(300..4_000)),
        };
        return vec![replace, crash];
    }
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
                Focus::Mixed => fault,
                Focus::SpeakerCrashes => Fault::Crash,
                Focus::SpeakerPauses => Fault::Pause,
                Focus::SpeakerReplaces => Fault::Replace,
                Focus::Change(Change::Replace) => Fault::Crash,
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
    /// The replacement under way.
    replacing: Option<Replacing>,
}

/// Runs `options` in a fresh simulation with its data in a temporary
/// directory.
pub fn run(options: &RunOptions) -> Outcome {
    let dirs = tempfile::tempdir().expect("a temporary directory");
    let nodes = 3;
    let cluster_options = Options {
        nodes,
        seed: options.seed,
        mode: options.mode,
        copies: options.copies,
        lease: LEASE,
        duration: Duration::from_secs(600),
        sabotage: options.sabotage,
        guards: Guards::default(),
        ..Options::default()
    };
    let guards = cluster_options.guards.clone();
    let leaders = cluster_options.leaders.clone();
    let pauses = cluster_options.pauses.clone();
    let rejoins = cluster_options.rejoins.clone();
    let mut elected: BTreeSet<(u64, u64)> = BTreeSet::new();
    // Until when a member restarted lately counts as missing from rebuilds.
    let mut restarted_until = Duration::ZERO;
    let mut rng = StdRng::seed_from_u64(options.seed);
    let mut episodes = schedule(&mut rng, options.faults, nodes, options.focus);
    let mut sim = cluster::build(&cluster_options, dirs.path());
    let shared = Arc::new(Mutex::new(Shared::default()));

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
            work(client, nodes, seed, shared).await;
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
            probe(node, shared).await;
            Ok(())
        });
    }

    let mut faults: Vec<String> = Vec::new();
    let mut next = 0;
    let mut active: Option<(Episode, u64)> = None;
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
            let quiet = t >= restarted_until;
            if new && active.is_none() && quiet && !healing && rng.gen_bool(BLIP_CHANCE) {
                let blip = Episode {
                    fault: Fault::Blip,
                    speaker: true,
                    member: node,
                    start: t,
                    length: Duration::from_millis(rng.gen_range(400..900)),
                };
                if let Some(first) = episodes.get(next) {
                    let late = (t + blip.length + AFTER_BLIP).saturating_sub(first.start);
                    for episode in &mut episodes[next..] {
                        episode.start += late;
                    }
                }
                inflict(&mut sim, &pauses, blip.fault, node, nodes);
                faults.push(format!("{t:?}: {:?} of n{node}", blip.fault));
                active = Some((blip, node));
            }
        }
        if let Some((episode, victim)) = active {
            let over = match episode.fault {
                Fault::Replace => {
                    let at_once = matches!(options.focus, Focus::Change(Change::Replace));
                    let over = replacement(&mut sim, &shared, &rejoins, t - episode.start, at_once);
                    if let Err(why) = &over {
                        stuck.push(format!("replacing n{victim}: {why}"));
                    }
                    over.unwrap_or(true)
                }
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
                        let late = match options.focus {
                            // The seeded moment after the replacement.
                            Focus::Change(_) => late + first.start.saturating_sub(episode.start),
                            _ => late,
                        };
                        for episode in &mut episodes[next..] {
                            episode.start += late;
                        }
                    }
                }
                if let Some(last) = faults.last_mut() {
                    last.push_str(&format!(" until {t:?}"));
                }
                active = None;
                if next == episodes.len() {
                    shared.lock().unwrap().healed = Some(t);
                }
            }
        } else if let Some(episode) = episodes.get(next).filter(|e| t >= e.start) {
            let seen = shared.lock().unwrap().speaker;
            let victim = match (episode.speaker, seen) {
                (true, Some(s)) => s,
                // A change's member is not the speaker.
                (false, Some(s)) if matches!(options.focus, Focus::Change(_)) => {
                    next_other(episode.member, s, nodes)
                }
                _ => episode.member,
            };
            inflict(&mut sim, &pauses, episode.fault, victim, nodes);
            if let Fault::Replace = episode.fault {
                shared.lock().unwrap().replacing = Some(Replacing::Remove(victim));
            }
            faults.push(format!("{t:?}: {:?} of n{victim}", episode.fault));
            active = Some((*episode, victim));
            next += 1;
        }
        if episodes.is_empty() && shared.lock().unwrap().healed.is_none() {
            shared.lock().unwrap().healed = Some(t);
        }
    }

    let simulated = sim.elapsed();
    let history = shared.lock().unwrap().history.clone();
    let mut violations = check(&history, nodes, LIVENESS_BOUND);
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

/// Moves the replacement under way on: once the removed node's host has
/// stopped (`at_once`: as soon as the removal is answered, the host
/// stopped then if it still runs), restarts it wiped and joining. Answers
/// whether it is over, or why it is stuck past [`REPLACE_WITHIN`] (`took`
/// since it began).
fn replacement(
    sim: &mut turmoil::Sim<'_>,
    shared: &Mutex<Shared>,
    rejoins: &Rejoins,
    took: Duration,
    at_once: bool,
) -> Result<bool, String> {
    let mut shared = shared.lock().unwrap();
    match shared.replacing {
        Some(Replacing::Removed(v)) if at_once => {
            if sim.is_host_running(cluster::host(v)) {
                sim.crash(cluster::host(v));
            }
            rejoins.wipe_and_join(v);
            sim.bounce(cluster::host(v));
            shared.replacing = Some(Replacing::Join(v));
            Ok(false)
        }
        Some(Replacing::Removed(v)) if !sim.is_host_running(cluster::host(v)) => {
            rejoins.wipe_and_join(v);
            sim.bounce(cluster::host(v));
            shared.replacing = Some(Replacing::Join(v));
            Ok(false)
        }
        Some(Replacing::Done) => {
            shared.replacing = None;
            Ok(true)
        }
        state if took > REPLACE_WITHIN => {
            shared.replacing = None;
            Err(format!("not over within {REPLACE_WITHIN:?}, at {state:?}"))
        }
        _ => Ok(false),
    }
}

/// The operator: carries a replacement out as the driver asks
/// ([`Shared::replacing`]): asks a member other than the node to remove
/// it, and once its host has restarted wiped and joining, waits until the
/// members show it voting again, with no change under way.
async fn operator(nodes: u64, shared: Arc<Mutex<Shared>>) {
    let mut via = 0;
    loop {
        let (replacing, healed) = {
            let shared = shared.lock().unwrap();
            (shared.replacing, shared.healed.is_some())
        };
        let moved = match replacing {
            None if healed => return,
            Some(Replacing::Remove(v)) => {
                via = next_other(via, v, nodes);
                let path = format!("/v1/cluster/members/{v}");
                let addr = cluster::addr(via);
                let asked = admin_call(&addr, Method::DELETE, &path, REMOVE_CALL);
                // 404: a try whose answer was lost removed it.
                matches!(asked.await, Ok((StatusCode::OK | StatusCode::NOT_FOUND, _)))
                    .then_some(Replacing::Removed(v))
            }
            Some(Replacing::Join(v)) => {
                via = next_other(via, v, nodes);
                let view = crate::client::cluster_view(via).await;
                view.filter(|view| votes(view, v) && view["changing"] == json!(false))
                    .map(|_| Replacing::Done)
            }
            _ => None,
        };
        if let Some(moved) = moved {
            let mut shared = shared.lock().unwrap();
            if shared.replacing == replacing {
                shared.replacing = Some(moved);
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The member after `via` other than `not`, in turn.
fn next_other(via: u64, not: u64, nodes: u64) -> u64 {
    let next = via % nodes + 1;
    if next == not {
        next % nodes + 1
    } else {
        next
    }
}

/// Whether the cluster `view` shows node `id` as a voter.
fn votes(view: &Value, id: u64) -> bool {
    view["members"].as_array().is_some_and(|members| {
        members
            .iter()
            .any(|m| m["id"] == json!(id) && m["role"] == json!("voter"))
    })
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
/// take a random name, hold it for a while renewing a third of a lease
/// apart, then release it or let it expire.
async fn work(client: usize, nodes: u64, seed: u64, shared: Arc<Mutex<Shared>>) {
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
        let lease_ms: u64 = rng.gen_range(1_500..=3_000);
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

/// Once the faults have healed, takes a fresh name through `node` until
/// it is granted, and notes when.
async fn probe(node: u64, shared: Arc<Mutex<Shared>>) {
    let healed = loop {
        if let Some(h) = shared.lock().unwrap().healed {
            break h;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let name = format!("probe/{node}");
    if let Some(at) = grant_through(node, &name, healed + LIVENESS_BOUND * 3).await {
        shared
            .lock()
            .unwrap()
            .history
            .push(Event::Served { node, healed, at });
    }
}
