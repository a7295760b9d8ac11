//! Becoming and stopping being the speaker: drop on every change of leader
//! or term, rebuild from every member before granting.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_api::{PeerLock, RebuildReport};
use leasehold_raft::codec::CodecError;
use leasehold_raft::{leader_state, ReadPolicy};
use locktable::{Lock, NodeId, RebuildFrom};

use crate::config::RebuildMode;
use crate::node::Node;
use crate::report::{self, MemberReport, ReportHeader, ReportLock};

/// How often the speaker task looks at Raft's view of the leader.
const WATCH_EVERY: Duration = Duration::from_millis(10);

/// Watches leadership until `stop` fires: drops the table whenever the
/// leader or term changes, and rebuilds it when this node leads.
pub(crate) async fn watch_leadership(
    node: Arc<Node>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut speaking: Option<u64> = None;
    loop {
        let term = leader_state(&node.raft).map(|l| l.term());
        if term != speaking {
            speaking = term;
            let generation = node.drop_table(term);
            match term {
                Some(term) => {
                    tracing::info!(
                        node = node.id(),
                        term,
                        "became leader: rebuilding the lock table"
                    );
                    tokio::spawn(rebuild(Arc::clone(&node), term, generation));
                }
                None => tracing::info!(node = node.id(), "not the speaker"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(WATCH_EVERY) => {}
            _ = stop.changed() => return,
        }
    }
}

/// Reads every member and rebuilds the table for `term`, unless the table
/// moved on meanwhile.
async fn rebuild(node: Arc<Node>, term: u64, generation: u64) {
    let started = Instant::now();
    // The blank entry of this term committed: a quorum knows this leader.
    let linearized = tokio::time::timeout(
        node.config.rebuild_timeout.max(Duration::from_secs(1)),
        node.raft.ensure_linearizable(ReadPolicy::ReadIndex),
    )
    .await;
    if !matches!(linearized, Ok(Ok(_))) {
        tracing::warn!(
            term,
            "could not confirm leadership before the rebuild; waiting for the next term"
        );
        return;
    }
    let (reports, missing) = read_members(&node).await;
    let now = node.clock.now();
    let mut locks: Vec<Lock> = Vec::with_capacity(reports.iter().map(|(_, r)| r.locks.len()).sum());
    let mut members_read = Vec::new();
    for (member, report) in reports {
        members_read.push(member);
        // Already on this clock: each frame's leases were counted from its
        // arrival as it was read (`ReportReader::push`).
        locks.extend(report.locks);
    }
    let mut missing = missing;
    let hold_until = match node.config.rebuild_mode {
        RebuildMode::Strict if !missing.is_empty() => Some(now + node.config.lease.max),
        _ => None,
    };
    let outcome = {
        let mut state = node.state();
        let still_leader = leader_state(&node.raft).is_some_and(|l| l.term() == term);
        if !still_leader || state.speaking != Some(term) {
            tracing::info!(term, "rebuild discarded: leadership moved on");
            return;
        }
        let result = state.table.rebuild(
            RebuildFrom {
                generation,
                epoch: term,
                locks,
                hold_new_grants_until: hold_until,
            },
            now,
        );
        match result {
            Ok(rebuilt) => {
                missing.sort_unstable();
                members_read.sort_unstable();
                let report = RebuildReport {
                    term,
                    members_read,
                    members_missing: missing,
                    locks: rebuilt.locks as u64,
                    conflicts: rebuilt.lost.len() as u64,
                    took_ms: started.elapsed().as_millis() as u64,
                };
                tracing::info!(?report, "failover report: lock table rebuilt");
                state.last_rebuild = Some(report);
                node.changed(&state);
                rebuilt.lost
            }
            Err(e) => {
                tracing::info!(term, %e, "rebuild discarded");
                return;
            }
        }
    };
    tell_losers(&node, outcome).await;
}

type Reports = Vec<(NodeId, MemberReport)>;

/// Reads every member's report in parallel, up to the rebuild timeout. A
/// member that does not answer, or restarted less than the longest lease
/// ago (its memory of its clients' locks is incomplete), is missing.
async fn read_members(node: &Arc<Node>) -> (Reports, Vec<NodeId>) {
    let timeout = node.config.rebuild_timeout;
    let max_lease = node.config.lease.max;
    let mut reads = Vec::new();
    for (id, addr) in node.config.peers.clone() {
        let node = Arc::clone(node);
        reads.push(async move {
            let started = Instant::now();
            let report = if id == node.id() {
                Ok(node.own_report())
            } else {
                node.peers
                    .report(&addr, timeout, node.config.report_frame_bytes, node.clock)
                    .await
            };
            (id, started.elapsed(), report)
        });
    }
    let mut read = Vec::new();
    let mut missing = Vec::new();
    for (id, took, report) in futures::future::join_all(reads).await {
        match report {
            Ok(report) => {
                tracing::info!(
                    member = id,
                    locks = report.locks.len(),
                    frames = report.frames,
                    took_ms = took.as_millis() as u64,
                    "member read"
                );
                let header = &report.header;
                if !header.first_start && Duration::from_millis(header.uptime_ms) < max_lease {
                    missing.push(id);
                }
                read.push((id, report));
            }
            Err(e) => {
                tracing::warn!(member = id, %e, "member missing at the rebuild");
                missing.push(id);
            }
        }
    }
    (read, missing)
}

async fn tell_losers(node: &Arc<Node>, lost: Vec<Lock>) {
    let now = node.clock.now();
    let mut by_node: BTreeMap<NodeId, Vec<Lock>> = BTreeMap::new();
    for lock in lost {
        by_node.entry(lock.node).or_default().push(lock);
    }
    for (member, locks) in by_node {
        if member == node.id() {
            node.lost(locks.iter().map(|l| l.id));
        } else if let Some(addr) = node.config.peers.get(&member) {
            node.peers
                .lost(
                    addr,
                    locks
                        .iter()
                        .map(|l| PeerLock::from(l.in_transit(now)))
                        .collect(),
                )
                .await;
        }
    }
}

impl Node {
    /// What this node tells a rebuilding speaker of itself: how long it has
    /// been up, and whether this is its first start.
    fn report_header(&self) -> ReportHeader {
        ReportHeader {
            node: self.id(),
            uptime_ms: self.clock.uptime().as_millis() as u64,
            first_start: self.first_start,
        }
    }

    /// This node's report read by itself as the rebuilding speaker: its
    /// clients' locks and what it granted, on its own clock as they are.
    pub(crate) fn own_report(&self) -> MemberReport {
        let now = self.clock.now();
        let state = self.state();
        let mut locks = state.held.live(now);
        locks.extend(state.table.granted(now));
        drop(state);
        MemberReport {
            header: self.report_header(),
            locks,
            frames: 0,
        }
    }

    /// This node's report to another, rebuilding, node: the header, then
    /// its clients' locks and what it granted, in frames of at most
    /// `--report-frame-bytes`.
    ///
    /// The clients' locks are encoded where they are kept, under the node's
    /// lock: the frames are the only copy made of them.
    pub(crate) fn report_frames(&self) -> Result<Vec<Vec<u8>>, CodecError> {
        let header = self.report_header();
        let started = Instant::now();
        let now = self.clock.now();
        let state = self.state();
        let granted = state.table.granted(now);
        let held = state.held.iter_live(now).map(|l| ReportLock::held(l, now));
        let granted = granted.iter().map(|l| ReportLock::of(l, now));
        let frames = report::encode(&header, held.chain(granted), self.config.report_frame_bytes)?;
        drop(state);
        tracing::info!(
            frames = frames.len(),
            bytes = frames.iter().map(Vec::len).sum::<usize>(),
            locked_ms = started.elapsed().as_millis() as u64,
            "report encoded for a rebuilding speaker"
        );
        Ok(frames)
    }
}

/// Ends leases and waits on time: sleeps until the table's next deadline or
/// until the table changes.
pub(crate) async fn run_expiry(node: Arc<Node>, mut stop: tokio::sync::watch::Receiver<bool>) {
    loop {
        node.expiry_armed
            .store(0, std::sync::atomic::Ordering::Release);
        let next = node.poll();
        let sleep = match next {
            Some(at) => at
                .saturating_duration_since(node.clock.now())
                .min(Duration::from_millis(500)),
            None => Duration::from_millis(500),
        };
        let wake_at = node.clock.now() + sleep;
        node.expiry_armed
            .store(wake_at.as_nanos(), std::sync::atomic::Ordering::Release);
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
            _ = node.table_changed.notified() => {}
            _ = stop.changed() => return,
        }
    }
}
