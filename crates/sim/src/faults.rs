//! Faults: crashes and restarts, pauses (and dozes that end when a
//! successor's read arrives), partitions, graceful restarts that hand
//! leadership over, quorum blips, and the targeted scenarios. Each
//! fault records when it heals; once the fault window is over and the last
//! fault healed, the quiet tail begins.

use locktable::NodeId;
use rand::seq::SliceRandom;
use rand::Rng;

use crate::client_state::Client;
use crate::config::timing::{HANDOVER_PATIENCE_MS, MAX_LEASE_MS, RAFT_TICK_MS, REBUILD_TIMEOUT_MS};
use crate::config::Scenario;
use crate::msg::{Event, Msg};
use crate::node::Node;
use crate::world::World;

impl World {
    pub(crate) fn fault(&mut self) {
        let t = self.t;
        if t >= self.config.duration_ms {
            let quiet = t.max(self.last_heal);
            self.at(quiet, Event::Quiet);
            return;
        }
        let next = match self.config.scenario {
            Scenario::Mixed => self.mixed_fault(),
            Scenario::SpeakerPauses => self.pause_speaker(),
            Scenario::RestartBehindCut => self.restart_behind_cut(),
            Scenario::QuorumBlip => self.crash_speaker(),
            Scenario::SlowReports | Scenario::SpeakerCrashes => 1_000,
            Scenario::AcksLost if !self.deafened => self.crash_speaker(),
            Scenario::AcksLost => 1_000,
        };
        self.at(t + next, Event::Fault);
    }

    fn healed_at(&mut self, t: u64) {
        self.last_heal = self.last_heal.max(t);
    }

    /// Notes that member `n` is faulted from now until `until`.
    fn faulted(&mut self, n: NodeId, until: u64) {
        self.history.faults.push((n, self.t, until));
    }

    /// Nodes down, paused or stopping now.
    fn down(&self) -> u64 {
        let t = self.t;
        self.nodes
            .values()
            .filter(|n| !n.alive || n.paused_until > t || n.member.is_stopping())
            .count() as u64
    }

    /// Whether node `n` is up, awake and not stopping: it may be faulted.
    fn fit(&self, n: NodeId) -> bool {
        let node = &self.nodes[&n];
        node.alive && node.paused_until <= self.t && !node.member.is_stopping()
    }

    /// The node that leads the highest term among those that run.
    fn speaker(&self) -> Option<NodeId> {
        self.nodes
            .values()
            .filter(|n| self.fit(n.id))
            .filter_map(|n| n.raft.leader_term().map(|term| (term, n.id)))
            .max()
            .map(|(_, id)| id)
    }

    fn mixed_fault(&mut self) -> u64 {
        // The speaker is faulted more often than its share: its changes are
        // what the protocol is about.
        let n = match self.speaker() {
            Some(speaker) if self.rng.gen_bool(0.4) => speaker,
            _ => self.rng.gen_range(1..=self.config.nodes),
        };
        let length = self.rng.gen_range(50..2500);
        let kind = self.rng.gen_range(0..100);
        // Keep a quorum most of the time; sometimes take it away.
        let may_take = self.down() < (self.config.nodes - 1) / 2 || self.rng.gen_bool(0.1);
        if kind < 30 {
            if may_take && self.fit(n) {
                self.crash(n, length);
            }
        } else if kind < 55 {
            if may_take && self.fit(n) {
                self.pause(n, length);
            }
        } else if kind < 85 {
            let others: Vec<NodeId> = (1..=self.config.nodes)
                .filter(|&m| m != n && self.rng.gen_bool(0.5))
                .collect();
            let (out, back) = match self.rng.gen_range(0..10) {
                0..=5 => (true, true),
                6 | 7 => (true, false),
                _ => (false, true),
            };
            if !others.is_empty() {
                self.cut(n, &others, out, back, length);
            }
        } else if may_take && self.fit(n) {
            self.stop_gracefully(n, length);
        }
        self.rng.gen_range(100..1500)
    }

    /// Crashes node `n`; it starts again after `length`, with its Raft
    /// store and nothing else.
    pub(crate) fn crash(&mut self, n: NodeId, length: u64) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        node.alive = false;
        // Reads that waited for it while it was paused fail with it.
        let parked = std::mem::take(&mut node.parked);
        for (_, event) in &parked {
            if let Event::Deliver(to, msg) = event {
                self.read_failed(msg, *to);
            }
        }
        self.faulted(n, t + length);
        self.report.crashes += 1;
        self.note(|| format!("node {n} crashes for {length} ms"));
        self.at(t + length, Event::Restart(n));
        self.healed_at(t + length);
    }

    fn pause(&mut self, n: NodeId, length: u64) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        node.paused_until = t + length;
        let incarnation = node.incarnation;
        self.faulted(n, t + length);
        self.report.pauses += 1;
        self.note(|| format!("node {n} paused for {length} ms"));
        self.at(t + length, Event::Wake(n, incarnation));
        self.healed_at(t + length);
    }

    /// What reaches a paused node waits until it wakes; a dozing speaker
    /// wakes soon after its successor's read arrives.
    pub(crate) fn park(&mut self, n: NodeId, event: Event) {
        let t = self.t;
        let read =
            matches!(&event, Event::Deliver(_, msg) if matches!(**msg, Msg::ReadReport { .. }));
        let node = self.nodes.get_mut(&n).expect("member");
        node.parked.push((t, event));
        if read && std::mem::take(&mut node.dozing) {
            // Its report still makes the rebuild's deadline.
            let latest = REBUILD_TIMEOUT_MS.saturating_sub(2 * self.config.max_delay_ms + 20);
            let wake = t + self.rng.gen_range(100..latest.max(101));
            let node = self.nodes.get_mut(&n).expect("member");
            if wake < node.paused_until {
                node.paused_until = wake;
                let incarnation = node.incarnation;
                self.at(wake, Event::Wake(n, incarnation));
            }
        }
    }

    /// A paused process takes its queued requests in no particular order
    /// when it wakes, while the Raft core works through its own queue in
    /// order. A copy that waited is noted with how long it did: its
    /// member counts its lease from when it takes it.
    pub(crate) fn wake(&mut self, n: NodeId, incarnation: u64) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        if node.incarnation != incarnation || node.paused_until != t {
            return;
        }
        let parked = std::mem::take(&mut node.parked);
        let raft_after = self.rng.gen_range(0..6);
        for (parked_at, event) in parked {
            let after = match &event {
                Event::Deliver(_, msg) if matches!(**msg, Msg::Raft { .. }) => raft_after,
                Event::Deliver(..) => self.rng.gen_range(0..6),
                _ => 0,
            };
            if let Event::Deliver(_, msg) = &event {
                self.history.copy_waited(msg, t + after - parked_at);
            }
            self.at(t + after, event);
        }
    }

    /// Cuts the links from `n` to `others` (`out`) and back (`back`).
    fn cut(&mut self, n: NodeId, others: &[NodeId], out: bool, back: bool, length: u64) {
        let t = self.t;
        let mut links = Vec::new();
        for &m in others {
            if out {
                links.push((n, m));
            }
            if back {
                links.push((m, n));
            }
        }
        for &link in &links {
            *self.cuts.entry(link).or_default() += 1;
        }
        // Both sides of a cut count as faulted.
        for m in others.iter().copied().chain([n]) {
            self.faulted(m, t + length);
        }
        self.report.partitions += 1;
        self.note(|| format!("links cut for {length} ms: {links:?}"));
        self.at(t + length, Event::Reconnect(links));
        self.healed_at(t + length);
    }

    /// `RunningNode::shutdown`: stop speaking (drop the table), hand
    /// leadership over if leading, wait for another leader (at most
    /// `HANDOVER_PATIENCE`), stop; start again `length` after stopping.
    fn stop_gracefully(&mut self, n: NodeId, length: u64) {
        let t = self.t;
        self.report.graceful_stops += 1;
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        node.member.stop_speaking(now);
        node.restart_after = length;
        self.faulted(n, t + HANDOVER_PATIENCE_MS + RAFT_TICK_MS + length);
        self.note(|| format!("node {n} shuts down"));
        self.dispatch(n);
        let node = self.nodes.get_mut(&n).expect("member");
        let handed_over = match node.raft.transfer_target() {
            Some(to) if node.raft.leader_term().is_some() => node.raft.transfer_leader(to),
            _ => false,
        };
        self.flush_raft(n);
        self.healed_at(t + HANDOVER_PATIENCE_MS + RAFT_TICK_MS + length);
        if handed_over {
            let incarnation = self.nodes[&n].incarnation;
            self.at(t + RAFT_TICK_MS, Event::StopCheck(n, incarnation));
            self.nodes.get_mut(&n).expect("member").stop_began = t;
        } else {
            self.crash(n, length);
        }
    }

    pub(crate) fn stop_check(&mut self, n: NodeId, incarnation: u64) {
        let t = self.t;
        let node = &self.nodes[&n];
        if !node.alive || node.incarnation != incarnation {
            return;
        }
        let other = node.raft.current_leader().is_some_and(|l| l != n);
        if other || t >= node.stop_began + HANDOVER_PATIENCE_MS {
            let length = node.restart_after;
            self.crash(n, length);
        } else {
            self.at(t + RAFT_TICK_MS, Event::StopCheck(n, incarnation));
        }
    }

    /// A new process of node `n`: Raft reloads its vote (with a zero lease)
    /// and log, and runs a leader lease later.
    pub(crate) fn restart(&mut self, n: NodeId) {
        let t = self.t;
        let old = &self.nodes[&n];
        let store = old.raft.persisted();
        let incarnation = old.incarnation + 1;
        let offset = self.rng.gen_range(1_000_000..1_000_000_000);
        let seed = self.rng.gen();
        let mut node = Node::start(n, &self.config, offset, Some(store), seed, t);
        node.incarnation = incarnation;
        // Its batches numbered apart from an earlier process's, whose late
        // acknowledgements may still arrive.
        node.outbox.number_from(incarnation << 32);
        self.nodes.insert(n, node);
        self.note(|| format!("node {n} restarts"));
        self.schedule_raft_start(n);
    }

    /// Cuts leader `n` off from every member, both ways, for `length`.
    pub(crate) fn blip(&mut self, n: NodeId, length: u64) {
        let others: Vec<NodeId> = (1..=self.config.nodes).filter(|&m| m != n).collect();
        self.report.blips += 1;
        self.cut(n, &others, true, true, length);
    }

    /// A leader was elected: in the blip scenario (and now and then in the
    /// mixed one) it is cut off from everyone at once, for longer than its
    /// ReadIndex waits and too briefly for a follower to campaign.
    pub(crate) fn on_election(&mut self, n: NodeId, _term: u64) {
        if self.t >= self.config.duration_ms {
            return;
        }
        let (blip, deaf) = match self.config.scenario {
            Scenario::QuorumBlip => (true, false),
            Scenario::AcksLost => (false, !self.deafened && self.t >= 500),
            Scenario::Mixed => (self.rng.gen_bool(0.05), self.rng.gen_bool(0.01)),
            _ => (false, false),
        };
        if blip {
            let length = self.rng.gen_range(330..400);
            self.blip(n, length);
        } else if deaf {
            // Longer than the step-down bound and the ReadIndex after it.
            self.deafened = true;
            let length = self.rng.gen_range(11_800..13_000);
            let others: Vec<NodeId> = (1..=self.config.nodes).filter(|&m| m != n).collect();
            self.cut(n, &others, false, true, length);
        }
    }

    fn crash_speaker(&mut self) -> u64 {
        match self.speaker() {
            Some(n) => {
                let length = self.rng.gen_range(200..600);
                self.crash(n, length);
                self.rng.gen_range(1500..2500)
            }
            None => 200,
        }
    }

    /// The speaker answered its own client a grant of `lease`: of the
    /// longest lease, in the slow reports scenario it dozes off (now and
    /// then) until its successor reads it; in the speaker crashes scenario
    /// it crashes.
    pub(crate) fn on_local_answer(&mut self, n: NodeId, lease: std::time::Duration) {
        let t = self.t;
        let targeted = matches!(
            self.config.scenario,
            Scenario::SlowReports | Scenario::SpeakerCrashes
        );
        if !targeted
            || t < self.next_doze
            || t >= self.config.duration_ms
            || lease < std::time::Duration::from_millis(MAX_LEASE_MS)
        {
            return;
        }
        self.next_doze = t + self.rng.gen_range(2000..3000);
        if self.config.scenario == Scenario::SpeakerCrashes {
            let length = self.rng.gen_range(100..600);
            self.crash(n, length);
            return;
        }
        self.pause(n, 1_500);
        self.nodes.get_mut(&n).expect("member").dozing = true;
    }

    fn pause_speaker(&mut self) -> u64 {
        match self.speaker() {
            Some(n) => {
                let length = self.rng.gen_range(3200..4200);
                self.pause(n, length);
                length + self.rng.gen_range(1000..2000)
            }
            None => 200,
        }
    }

    /// The speaker is cut off from a minority of followers, both ways; a
    /// while later (they campaign meanwhile) one of the followers its
    /// quorum counts on crashes and restarts at once, a few times over.
    fn restart_behind_cut(&mut self) -> u64 {
        let Some(l) = self.speaker() else {
            return 200;
        };
        let mut followers: Vec<NodeId> = (1..=self.config.nodes)
            .filter(|&m| m != l && self.fit(m))
            .collect();
        let minority = ((self.config.nodes - 1) / 2) as usize;
        if followers.len() <= minority {
            return 200;
        }
        followers.shuffle(&mut self.rng);
        let length = self.rng.gen_range(1200..2000);
        self.cut(l, &followers[..minority], true, true, length);
        // It restarts again and again, each time with a zero vote lease,
        // while the cut-off followers campaign.
        let restarted = followers[minority];
        let mut at = self.t + self.rng.gen_range(500..800);
        for _ in 0..self.rng.gen_range(4..10) {
            let down = self.rng.gen_range(1..20);
            self.at(at, Event::Crash(restarted, down));
            at += down + self.rng.gen_range(60..150);
        }
        self.healed_at(at);
        self.rng.gen_range(2500..3500)
    }

    /// The last fault healed: no more loss; a probe per node asks for a
    /// grant until it gets one.
    pub(crate) fn quiet(&mut self) {
        self.quiet_since = Some(self.t);
        self.note(|| "quiet: every fault healed".to_string());
        for n in 1..=self.config.nodes {
            self.clients.push(Client::new(n, true));
            let c = self.clients.len() - 1;
            self.at(self.t, Event::Probe(c));
        }
    }
}
