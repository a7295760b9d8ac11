//! One seeded run: a cluster, clients taking, renewing and releasing
//! locks through random nodes, and faults on one member at a time (crash
//! and restart, partitions both ways and one way, held links, lossy
//! links, pauses, and replacements: a member removed through the API, the
//! speaker too, and added again on a wiped data directory), or a routine
//! change followed by one fault of the speaker ([`crate::change`]); then
//! the faults heal and every member must serve again. The checks of
//! [`crate::check`] read what the clients saw. The faults and their
//! schedule are in [`crate::faults`], the leases in [`crate::lease`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_node::{RebuildMode, Sabotage};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub use crate::change::Change;
use crate::change::Doing;
use crate::check::{check, Excuses};
use crate::cluster::{self, Options};
pub use crate::faults::Focus;
use crate::faults::{
    heal, inflict, schedule, Episode, Fault, AFTER_BLIP, AFTER_RESTART, BLIP_CHANCE,
};
use crate::guards::Guards;
use crate::history::{Event, History};
pub use crate::lease::{liveness_bound, LEASE, LIVENESS_BOUND};
use crate::workload::{observe, operator, probe, work, Draws, Shared};

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
    /// Names of every kind: besides exclusive ones, a name readers hold
    /// shared (writers among them) and a semaphore of two permits. Off,
    /// every name is exclusive and a seed draws what it always drew.
    pub kinds: bool,
    /// Sets of names: now and then a client asks for both exclusive names
    /// at once (`names`), in a random order, and holds them together. Off,
    /// a seed draws what it always drew.
    pub sets: bool,
    /// Lock-delays: now and then a grant of one name asks for a delay, so
    /// that its lease running out unreleased keeps the name closed that
    /// much longer, which the checks hold it to. Off, a seed draws what it
    /// always drew.
    pub delays: bool,
    /// Sessions: now and then a client opens a session, takes both
    /// exclusive names in it, renews the session alone, then closes it or
    /// lets it lapse; each lock of it is checked as any lock, and must be
    /// free once the session ended. Off, a seed draws what it always drew.
    pub sessions: bool,
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
            kinds: false,
            sets: false,
            delays: false,
            sessions: false,
        }
    }
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

/// How long a step of a change may take (a replacement's removal, a
/// join, a restart): longer is a violation.
const STEP_WITHIN: Duration = Duration::from_secs(60);

/// When a [`Focus::Change`] run begins its change, once a speaker is seen.
const CHANGE_AT: Duration = Duration::from_secs(3);

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
    // The term each speaker was last seen rebuilt for.
    let mut rebuilt: BTreeMap<u64, Option<u64>> = BTreeMap::new();
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
        observe(nodes, observer).await;
        Ok(())
    });
    for client in 0..options.clients {
        let seed = rng.gen();
        let shared = Arc::clone(&shared);
        let draws = Draws {
            seed,
            kinds: options.kinds,
            sets: options.sets,
            delays: options.delays,
            sessions: options.sessions,
        };
        sim.client(format!("client{client}"), async move {
            work(client, nodes, lease, draws, shared).await;
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
            let now_rebuilt = leaders.rebuilt(node).then_some(term);
            if rebuilt.insert(node, now_rebuilt) != Some(now_rebuilt) && now_rebuilt.is_some() {
                let seen = Event::Rebuilt { node, at: t };
                shared.lock().unwrap().history.push(seen);
            }
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
