//! Routine change in a run: the steps an operator takes (add a member,
//! remove one, replace one in place, restart one with other settings), each
//! carried out in turn by the driver (which starts and stops hosts) and the
//! operator (a simulated client calling the API), as a plan of steps.
//!
//! A [`Change`] run makes one such change and, at a seeded moment after one
//! of its steps, strikes the speaker with one fault; the checks of every run
//! then read what the clients saw.

use std::collections::VecDeque;
use std::time::Duration;

use hyper::{Method, StatusCode};
use leasehold_node::{LeaseRule, RaftTimings, RebuildMode};
use serde_json::{json, Value};

use crate::cluster::{self, Hosts, Settings};
use crate::net::admin_call;

/// A routine change a run makes before its one fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// A member other than the speaker (one of the two that may hold a
    /// lock's copy, with three nodes and two copies) is removed through the
    /// API and its host restarted at once, as the removal is answered, on a
    /// wiped directory under the same id at the same address, joining;
    /// the speaker crashes at a seeded moment from the removal's answer,
    /// while the replacement joins or after.
    Replace,
    /// Growth from one node: a single node serves alone, then two more
    /// join (`--join`) one after the other; the speaker crashes at a
    /// seeded moment from when the first joiner votes, while the second
    /// may still be joining. Grants made alone have one copy.
    Grow,
    /// Four members; one other than the speaker is removed through the API
    /// (it hands its records over and stops for good); the speaker crashes
    /// at a seeded moment after the removal is answered.
    Remove,
    /// Four members; the speaker itself is removed through the API (asked
    /// of another member, forwarded to it): it stops granting when its
    /// removal is written, hands leadership on once it commits and stops
    /// for good; the speaker, whichever it is by then, crashes at a seeded
    /// moment after the removal is answered.
    RemoveSpeaker,
    /// Timings lowered one member at a time, as a rolling restart does: the
    /// members start with slow Raft timings ([`SLOW`]), the followers are
    /// stopped cleanly and started again with the defaults one after the
    /// other, and before the speaker's turn it is cut off from both.
    Timings,
    /// A rolling upgrade: the members start offering protocol version 0
    /// (as the build before versions), and are stopped cleanly and started
    /// again offering this build's one at a time, a follower, the speaker,
    /// the last follower; the cluster agrees the new version once every
    /// member offers it; then the speaker crashes at a seeded moment.
    Protocol,
}

impl Change {
    /// Every kind, with its name on the command line.
    pub const ALL: [(&'static str, Change); 6] = [
        ("replace", Change::Replace),
        ("grow", Change::Grow),
        ("remove", Change::Remove),
        ("remove-speaker", Change::RemoveSpeaker),
        ("timings", Change::Timings),
        ("protocol", Change::Protocol),
    ];

    /// The kind named `name` on the command line.
    pub fn named(name: &str) -> Option<Change> {
        Change::ALL
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, change)| *change)
    }

    /// How many hosts the run has, and how many of them form the cluster
    /// at the start.
    pub fn hosts(self) -> (u64, u64) {
        match self {
            Change::Grow => (3, 1),
            Change::Remove | Change::RemoveSpeaker => (4, 4),
            Change::Replace | Change::Timings | Change::Protocol => (3, 3),
        }
    }

    /// The rebuild mode the run checks, given the one asked for: growth
    /// from one node makes grants with one copy, which a crash of the node
    /// that made them loses in proceed mode, as the promises allow; a
    /// member replaced in place lost its records (it is stopped at once,
    /// as a machine that died), and a crash on top of that is a second
    /// member missing. Only strict mode promises that none is granted
    /// twice then.
    pub fn mode(self, asked: RebuildMode) -> RebuildMode {
        match self {
            Change::Grow | Change::Replace => RebuildMode::Strict,
            _ => asked,
        }
    }

    /// Whether the change may lose a lock: it loses every record of some
    /// grants before its fault strikes (growth from one node: grants made
    /// with one copy; a replacement in place: the replaced member's
    /// records), so a crash then may lose them; strict mode still grants
    /// none of them twice.
    pub fn may_lose(self) -> bool {
        matches!(self, Change::Grow | Change::Replace)
    }

    /// The leases of the run: for the changes whose hazard is a record
    /// lost with a member (a grant made with one copy, a record on a member
    /// that left), longer than most runs' so that a grant made before the
    /// change is still running, unrenewed, when the fault strikes.
    pub fn lease(self) -> LeaseRule {
        match self {
            Change::Grow | Change::Remove | Change::RemoveSpeaker | Change::Replace => LeaseRule {
                default: Duration::from_secs(6),
                max: Duration::from_secs(9),
            },
            Change::Timings | Change::Protocol => crate::lease::LEASE,
        }
    }

    /// The settings every member starts with.
    pub fn initial(self) -> Settings {
        match self {
            Change::Timings => Settings {
                timings: Some(SLOW),
                protocol: None,
            },
            Change::Protocol => Settings {
                timings: None,
                protocol: Some(0),
            },
            _ => Settings::default(),
        }
    }

    /// The plan of the change, `speaker` the speaker as last seen and
    /// `pick` a seeded member other than it; and after which step (counted
    /// from 1) the fault's seeded moment counts.
    pub fn plan(self, speaker: u64, pick: u64) -> (VecDeque<Doing>, usize) {
        let (nodes, _) = self.hosts();
        let other = |not: &[u64]| (1..=nodes).find(|n| !not.contains(n)).unwrap_or(1);
        match self {
            Change::Replace => (
                [
                    Doing::Removing(pick),
                    Doing::Rejoining {
                        id: pick,
                        at_once: true,
                    },
                ]
                .into(),
                1,
            ),
            Change::Grow => ([Doing::Adding(2), Doing::Adding(3)].into(), 1),
            Change::Remove => ([Doing::Removing(pick)].into(), 1),
            Change::RemoveSpeaker => ([Doing::Removing(speaker)].into(), 1),
            Change::Timings => {
                let lowered = Settings {
                    timings: Some(RaftTimings::default()),
                    protocol: None,
                };
                let last = other(&[speaker, pick]);
                (
                    [
                        Doing::Restarting(pick, lowered),
                        Doing::Restarting(last, lowered),
                    ]
                    .into(),
                    2,
                )
            }
            Change::Protocol => {
                let upgraded = Settings {
                    timings: None,
                    protocol: Some(leasehold_raft::version::SPEAKS),
                };
                let last = other(&[speaker, pick]);
                (
                    [
                        Doing::Restarting(pick, upgraded),
                        Doing::Restarting(speaker, upgraded),
                        Doing::Restarting(last, upgraded),
                    ]
                    .into(),
                    3,
                )
            }
        }
    }
}

/// The slow timings a [`Change::Timings`] run starts with: a leader lease
/// four times the default's.
pub const SLOW: RaftTimings = RaftTimings {
    heartbeat_ms: 100,
    election_min_ms: 600,
    election_max_ms: 1200,
};

/// Where a step of a change is, and whose turn it is: the driver's (it
/// starts and stops hosts) or the operator's (it calls the API).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Doing {
    /// Driver: starts node `id`'s host, held back until now, joining.
    Adding(u64),
    /// Operator: asks a member other than `id` to remove it; the step is
    /// over once that is answered.
    Removing(u64),
    /// Driver: once node `id`'s host stopped after its removal (`at_once`:
    /// as soon as the removal is answered, stopping the host if it still
    /// runs), starts it again on a wiped directory, joining.
    Rejoining {
        /// The node.
        id: u64,
        /// Without waiting for the removed node to stop by itself.
        at_once: bool,
    },
    /// Operator: waits until a member other than `id` shows it voting, with
    /// no membership change under way, and node `id` itself does and names
    /// a speaker; then the step is over.
    Joining(u64),
    /// Driver: stops node `id` cleanly (as SIGTERM), to start it again
    /// with these settings.
    Restarting(u64, Settings),
    /// Driver: once node `id`'s host stopped, starts it again.
    Stopping(u64),
    /// Operator: waits until node `id` names a speaker and the members show
    /// it voting; then the step is over.
    Returning(u64),
}

impl Doing {
    /// Whether it is the operator's turn.
    pub fn operators(self) -> bool {
        matches!(
            self,
            Doing::Removing(_) | Doing::Joining(_) | Doing::Returning(_)
        )
    }

    /// The driver's turn: what it does with the hosts, and where the step
    /// is then (`None`: over); `self` while it waits.
    pub fn drive(self, sim: &mut turmoil::Sim<'_>, hosts: &Hosts) -> Option<Doing> {
        match self {
            Doing::Adding(id) => {
                hosts.start(id);
                Some(Doing::Joining(id))
            }
            Doing::Rejoining { id, at_once } => {
                let host = cluster::host(id);
                if sim.is_host_running(host.as_str()) {
                    if !at_once {
                        return Some(self);
                    }
                    sim.crash(host.as_str());
                }
                hosts.wipe_and_join(id);
                sim.bounce(host.as_str());
                Some(Doing::Joining(id))
            }
            Doing::Restarting(id, settings) => {
                hosts.settle(id, settings);
                hosts.stop(id);
                Some(Doing::Stopping(id))
            }
            Doing::Stopping(id) => {
                let host = cluster::host(id);
                if sim.is_host_running(host.as_str()) {
                    return Some(self);
                }
                sim.bounce(host.as_str());
                Some(Doing::Returning(id))
            }
            operators => Some(operators),
        }
    }

    /// The operator's turn, `via` the member it asked last: answers where
    /// the step is then (`None`: over), `self` while it waits, and the
    /// member it asked.
    pub async fn operate(self, via: u64, nodes: u64) -> (Option<Doing>, u64) {
        match self {
            Doing::Removing(id) => {
                let via = next_other(via, id, nodes);
                let path = format!("/v1/cluster/members/{id}");
                let addr = cluster::addr(via);
                let asked = admin_call(&addr, Method::DELETE, &path, REMOVE_CALL);
                // 404: a try whose answer was lost removed it.
                let removed =
                    matches!(asked.await, Ok((StatusCode::OK | StatusCode::NOT_FOUND, _)));
                (if removed { None } else { Some(self) }, via)
            }
            Doing::Joining(id) => {
                let via = next_other(via, id, nodes);
                let view = crate::client::cluster_view(via).await;
                let own = crate::client::cluster_view(id).await;
                // Its own view too: a member that has not applied the
                // removal yet still shows the node voting.
                let joined = view
                    .is_some_and(|view| votes(&view, id) && view["changing"] == json!(false))
                    && own.is_some_and(|own| votes(&own, id) && own["leader"].as_u64().is_some());
                (if joined { None } else { Some(self) }, via)
            }
            Doing::Returning(id) => {
                let via = next_other(via, id, nodes);
                let others = crate::client::cluster_view(via).await;
                let own = crate::client::cluster_view(id).await;
                let back = others.is_some_and(|view| votes(&view, id))
                    && own.is_some_and(|view| view["leader"].as_u64().is_some());
                if !back {
                    return (Some(self), via);
                }
                // As an operator of a rolling restart looks at the member
                // once more before the next one.
                tokio::time::sleep(SETTLE).await;
                (None, via)
            }
            drivers => (Some(drivers), via),
        }
    }
}

/// How long the operator lets a restarted member run before the next step.
const SETTLE: Duration = Duration::from_secs(2);

/// How long the operator waits for a removal's answer.
const REMOVE_CALL: Duration = Duration::from_secs(45);

/// The member after `via` other than `not`, in turn.
pub fn next_other(via: u64, not: u64, nodes: u64) -> u64 {
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
