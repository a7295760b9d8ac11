//! The faults of a run: their kinds, which a run's [`Focus`] lets strike,
//! their schedule (one member at a time, each healed before the next), and
//! how each strikes and heals on turmoil's network.

use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use turmoil::Sim;

use crate::change::Change;
use crate::cluster;
use crate::lease::LEASE;
use crate::pauses::Pauses;

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

/// A fault on one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
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
    /// votes again (a plan of [`Doing`](crate::change::Doing) steps).
    Replace,
}

/// How long after a restart the next fault may begin: a restarted member
/// counts as missing from rebuilds for the longest lease, and a second
/// missing member would be as many as there are copies.
pub(crate) const AFTER_RESTART: Duration = LEASE.max.saturating_add(Duration::from_secs(1));

/// How often a speaker just elected is struck by [`Fault::Blip`].
pub(crate) const BLIP_CHANCE: f64 = 0.2;

/// How long after a blip heals the next fault may begin: the speaker's
/// retried rebuild (its ReadIndex, its reads within the node's rebuild
/// timeout) ends first, so that no rebuild runs under two faults.
pub(crate) const AFTER_BLIP: Duration = Duration::from_secs(3);

/// How often a lossy link drops what it carries, per simulated millisecond.
pub(crate) const LOSS_PER_MS: f64 = 0.005;

/// One fault: what, to whom (the speaker, as last seen, or a member),
/// from when, for how long.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Episode {
    pub(crate) fault: Fault,
    pub(crate) speaker: bool,
    pub(crate) member: u64,
    pub(crate) start: Duration,
    pub(crate) length: Duration,
}

/// The faults of `seed`: one member at a time, each healed before the
/// next, and after a restart [`AFTER_RESTART`] before the next. A change
/// run's one fault strikes the speaker at a moment its change sets.
pub(crate) fn schedule(rng: &mut StdRng, count: usize, nodes: u64, focus: Focus) -> Vec<Episode> {
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

/// The other members of `victim`'s cluster, as host names.
fn others(victim: u64, nodes: u64) -> Vec<String> {
    (1..=nodes)
        .filter(|n| *n != victim)
        .map(cluster::host)
        .collect()
}

/// Strikes `victim`, one of `nodes`, with `fault`.
pub(crate) fn inflict(sim: &mut Sim<'_>, pauses: &Pauses, fault: Fault, victim: u64, nodes: u64) {
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

/// Heals `fault` of `victim`, one of `nodes`.
pub(crate) fn heal(sim: &mut Sim<'_>, pauses: &Pauses, fault: Fault, victim: u64, nodes: u64) {
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
