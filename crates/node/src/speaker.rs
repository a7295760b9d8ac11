//! Becoming and stopping being the speaker: drop on every change of leader
//! or term, rebuild from every member before granting, and retry the
//! rebuild for as long as this node leads that term without serving.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use leasehold_api::{PeerLock, RebuildReport};
use leasehold_raft::codec::CodecError;
use leasehold_raft::{leader_state, ReadPolicy};
use locktable::{Lock, NodeId, RebuildError, RebuildFrom};
use tokio::task::JoinHandle;

use crate::config::RebuildMode;
use crate::node::Node;
use crate::peers::PeerError;
use crate::report::{self, MemberReport, ReportHeader, ReportLock};

/// How often the speaker task looks at Raft's view of the leader.
const WATCH_EVERY: Duration = Duration::from_millis(10);

/// The first wait before a failed rebuild is tried again; it doubles on
/// every failure up to [`RETRY_AT_MOST`].
const RETRY_FIRST: Duration = Duration::from_millis(50);

/// The longest wait between two rebuild attempts of one term.
const RETRY_AT_MOST: Duration = Duration::from_secs(1);

/// How long a leader may fail to rebuild before it hands leadership to
/// another member, so that the cluster is not left with a leader that
/// cannot serve.
const STEP_DOWN_AFTER: Duration = Duration::from_secs(10);

/// How one rebuild attempt ended.
#[derive(Debug)]
enum Attempt {
    /// The table serves.
    Rebuilt,
    /// Not rebuilt, for a reason that may pass (no quorum confirmed this
    /// leader in time, or the table was dropped again meanwhile).
    Failed(&'static str),
    /// This node can never serve in this term (its term is beyond the
    /// fences' range): it must hand leadership on.
    CannotSpeak(RebuildError),
}

/// When the next rebuild attempt of this term may start.
struct Retry {
    failures: u32,
    next: Instant,
    failing_since: Option<Instant>,
}

impl Retry {
    fn new() -> Self {
        Retry {
            failures: 0,
            next: Instant::now(),
            failing_since: None,
        }
    }

    fn due(&self) -> bool {
        Instant::now() >= self.next
    }

    fn failed(&mut self) {
        let wait = RETRY_FIRST
            .saturating_mul(1 << self.failures.min(16))
            .min(RETRY_AT_MOST);
        self.failures += 1;
        self.next = Instant::now() + wait;
        self.failing_since.get_or_insert_with(Instant::now);
    }

    /// Whether the rebuild has failed for so long that another member
    /// should try to speak.
    fn hopeless(&self) -> bool {
        self.failing_since
            .is_some_and(|since| since.elapsed() >= STEP_DOWN_AFTER)
    }
}

/// Watches leadership until `stop` fires: drops the table whenever the
/// leader or term changes, and rebuilds it while this node leads and the
/// table is not rebuilt.
///
/// Every state has a way out: a rebuild that fails (openraft's ReadIndex
/// gives up after one leader lease while a quorum is out of reach, and the
/// leader keeps its term when the quorum comes back) is tried again with
/// backoff for as long as this node leads the term; one that cannot succeed,
/// or keeps failing for [`STEP_DOWN_AFTER`], makes this node drop its table
/// and hand leadership on.
pub(crate) async fn watch_leadership(
    node: Arc<Node>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut speaking: Option<u64> = None;
    let mut attempt: Option<JoinHandle<Attempt>> = None;
    let mut retry = Retry::new();
    // Since when this node, rebuilt, has been barred from granting by its
    // guard (no quorum acknowledges it) while still leading the term.
    let mut muted_since: Option<Instant> = None;
    loop {
        let term = if node.is_stopping() {
            None
        } else {
            leader_state(&node.raft).map(|l| l.term())
        };
        if term != speaking {
            speaking = term;
            node.drop_table(term);
            if let Some(stale) = attempt.take() {
                stale.abort();
            }
            retry = Retry::new();
            muted_since = None;
            match term {
                Some(term) => tracing::info!(
                    node = node.id(),
                    term,
                    "became leader: rebuilding the lock table"
                ),
                None => tracing::info!(node = node.id(), "not the speaker"),
            }
        }
        if let Some(term) = speaking {
            if attempt.as_ref().is_some_and(JoinHandle::is_finished) {
                let outcome = match attempt.take().expect("checked").await {
                    Ok(outcome) => outcome,
                    Err(e) => Attempt::Failed(if e.is_panic() { "panicked" } else { "aborted" }),
                };
                match outcome {
                    Attempt::Rebuilt => retry = Retry::new(),
                    Attempt::Failed(why) => {
                        retry.failed();
                        tracing::warn!(
                            term,
                            why,
                            attempts = retry.failures,
                            "rebuild failed; trying again while this node leads the term"
                        );
                        if retry.hopeless() {
                            step_down(&node, term, "the rebuild keeps failing").await;
                            retry = Retry::new();
                        }
                    }
                    Attempt::CannotSpeak(e) => {
                        step_down(&node, term, &e.to_string()).await;
                        retry.failed();
                    }
                }
            }
            if attempt.is_none() && retry.due() && !node.is_rebuilt() {
                let generation = node.generation();
                attempt = Some(tokio::spawn(rebuild(Arc::clone(&node), term, generation)));
            }
            // A leader whose acknowledgements stopped coming back while its
            // heartbeats still arrive (a one-way fault) keeps its followers
            // from campaigning yet cannot grant: after as long as a rebuild
            // may fail, it hands leadership on.
            if node.is_rebuilt() && !node.may_speak_now() {
                let since = *muted_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= STEP_DOWN_AFTER {
                    step_down(&node, term, "no quorum has acknowledged this leader").await;
                    muted_since = None;
                }
            } else {
                muted_since = None;
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(WATCH_EVERY) => {}
            _ = stop.changed() => {
                if let Some(attempt) = attempt.take() {
                    attempt.abort();
                }
                return;
            }
        }
    }
}

/// Drops the table, then asks Raft to hand leadership to another member.
///
/// The order matters: openraft's transfer disables the followers' leader
/// lease and transfer votes skip the lease check, so a new leader can exist
/// as soon as the transfer is sent; this node must not grant past that.
async fn step_down(node: &Arc<Node>, term: u64, why: &str) {
    node.drop_table(Some(term));
    match node.transfer_leadership().await {
        Some(to) => tracing::warn!(term, why, to, "stepping down: leadership handed on"),
        None => tracing::warn!(term, why, "stepping down: no member to hand leadership to"),
    }
}

/// Reads every member and rebuilds the table for `term`, unless the table
/// moved on meanwhile.
async fn rebuild(node: Arc<Node>, term: u64, generation: u64) -> Attempt {
    let started = Instant::now();
    // The blank entry of this term committed: a quorum knows this leader.
    // openraft's ReadIndex gives up after about one leader lease without a
    // quorum; the caller tries again.
    let linearized = tokio::time::timeout(
        node.config.rebuild_timeout.max(Duration::from_secs(1)),
        node.raft.ensure_linearizable(ReadPolicy::ReadIndex),
    )
    .await;
    if !matches!(linearized, Ok(Ok(_))) {
        return Attempt::Failed("no quorum confirmed this leader");
    }
    let (reports, missing) = read_members(&node, term).await;
    let now = node.clock.now();
    let mut locks: Vec<Lock> = Vec::with_capacity(reports.iter().map(|(_, r)| r.locks.len()).sum());
    let mut members_read = Vec::new();
    let mut longest_lease = node.config.lease.max;
    let mut fewest_copies = node.config.copies();
    for (member, report) in reports {
        members_read.push(member);
        let theirs = Duration::from_millis(report.header.max_lease_ms);
        if theirs != node.config.lease.max {
            tracing::error!(
                member,
                theirs_ms = report.header.max_lease_ms,
                ours_ms = node.config.lease.max.as_millis() as u64,
                "members run with different --max-lease: the strict hold covers the longest \
                 of the members read, not of a missing one; run one value cluster-wide"
            );
        }
        longest_lease = longest_lease.max(theirs);
        let their_copies = usize::try_from(report.header.copies).unwrap_or(usize::MAX);
        if their_copies != node.config.copies() {
            tracing::error!(
                member,
                theirs = their_copies,
                ours = node.config.copies(),
                "members run with different --copies: a rebuild counts on the fewest of the \
                 members read, not of a missing one; run one value cluster-wide"
            );
        }
        fewest_copies = fewest_copies.min(their_copies);
        // Already on this clock: each frame's leases were counted from its
        // arrival as it was read (`ReportReader::push`).
        locks.extend(report.locks);
    }
    let mut missing = missing;
    // Every grant answered to a client is on record with `--copies`
    // members: a rebuild that missed fewer has read every one of them.
    let all_seen = missing.len() < fewest_copies;
    // Otherwise: a lease granted before this rebuild ends by `now +
    // longest_lease`; an old speaker missing from the rebuild may have
    // granted until its guard ran out, at most one leader lease before
    // this term began.
    let held_back = match node.config.rebuild_mode {
        RebuildMode::Strict if !all_seen => {
            Some(longest_lease + node.config.timings.leader_lease())
        }
        _ => None,
    };
    let hold_until = held_back.map(|hold| now + hold);
    let outcome = {
        let mut state = node.state();
        let still_leader = leader_state(&node.raft).is_some_and(|l| l.term() == term);
        if !still_leader || state.speaking != Some(term) {
            tracing::info!(term, "rebuild discarded: leadership moved on");
            return Attempt::Failed("leadership moved on during the rebuild");
        }
        let result = state.table.rebuild(
            RebuildFrom {
                generation,
                epoch: term,
                locks,
                hold_new_grants_until: hold_until,
                seen_all: all_seen,
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
                    all_seen,
                    locks: rebuilt.locks as u64,
                    conflicts: rebuilt.lost.len() as u64,
                    held_back_ms: held_back.map_or(0, |d| d.as_millis() as u64),
                    took_ms: started.elapsed().as_millis() as u64,
                };
                tracing::info!(?report, "failover report: lock table rebuilt");
                state.last_rebuild = Some(report);
                node.changed(&state);
                rebuilt.lost
            }
            Err(RebuildError::Stale(_)) => {
                return Attempt::Failed("the table was dropped again during the rebuild")
            }
            // Another node spoke in a later term: Raft will depose this one.
            Err(RebuildError::NewerTerm { .. }) => {
                return Attempt::Failed("a member reported a lock of a later term")
            }
            Err(e) => return Attempt::CannotSpeak(e),
        }
    };
    tell_losers(&node, outcome).await;
    Attempt::Rebuilt
}

type Reports = Vec<(NodeId, MemberReport)>;

/// How long a rebuild waits before it reads again a member whose read
/// failed.
const READ_AGAIN_AFTER: Duration = Duration::from_millis(50);

/// Reads every member's report in parallel, up to the rebuild timeout. A
/// member that does not answer, or restarted less than the longest lease
/// ago (its memory of its clients' locks is incomplete), is missing.
///
/// A member whose read failed is read again until the timeout while the
/// members failing, with those missing already, are as many as there are
/// copies: then each one read makes the difference between a rebuild that
/// has seen every grant and one that has not. With fewer, the rebuild has
/// seen every grant without them, and does not wait.
///
/// The read carries `term`: a member still speaking for an older term drops
/// its table before it answers, so it grants nothing after its report.
async fn read_members(node: &Arc<Node>, term: u64) -> (Reports, Vec<NodeId>) {
    let deadline = Instant::now() + node.config.rebuild_timeout;
    let copies = node.config.copies();
    let max_lease = node.config.lease.max;
    let read_after =
        |id, addr, delay| read_member(Arc::clone(node), id, addr, term, deadline, delay);
    let mut reads: FuturesUnordered<_> = node
        .config
        .peers
        .iter()
        .map(|(id, addr)| read_after(*id, addr.clone(), None))
        .collect();
    let mut read = Vec::new();
    let mut missing = Vec::new();
    // Members not read yet whose first read has not ended, and members
    // whose last read failed, with why.
    let mut unanswered: BTreeSet<NodeId> = node.config.peers.keys().copied().collect();
    let mut failing: BTreeMap<NodeId, String> = BTreeMap::new();
    while let Some((id, addr, took, report)) = reads.next().await {
        unanswered.remove(&id);
        match report {
            Ok(report) => {
                failing.remove(&id);
                tracing::info!(
                    member = id,
                    locks = report.locks.len(),
                    frames = report.frames,
                    took_ms = took.as_millis() as u64,
                    "member read"
                );
                let header = &report.header;
                let longest = max_lease.max(Duration::from_millis(header.max_lease_ms));
                if !header.first_start && Duration::from_millis(header.uptime_ms) < longest {
                    missing.push(id);
                }
                read.push((id, report));
            }
            Err(e) => {
                // Members missing for having restarted may already be as
                // many as copies: then no read can change the outcome.
                if missing.len() < copies && Instant::now() + READ_AGAIN_AFTER < deadline {
                    reads.push(read_after(id, addr, Some(READ_AGAIN_AFTER)));
                }
                failing.insert(id, e.to_string());
            }
        }
        if unanswered.is_empty() && missing.len() + failing.len() < copies {
            break;
        }
    }
    // Every member not read is missing, whatever stopped the reads.
    for id in node.config.peers.keys() {
        if !read.iter().any(|(r, _)| r == id) {
            let why = failing.get(id).map_or("no answer", String::as_str);
            tracing::warn!(member = id, e = why, "member missing at the rebuild");
            missing.push(*id);
        }
    }
    (read, missing)
}

/// One read of member `id`'s report (after `delay`, if given), bounded by
/// `deadline`: the member, its address, how long the read took, and the
/// report.
async fn read_member(
    node: Arc<Node>,
    id: NodeId,
    addr: String,
    term: u64,
    deadline: Instant,
    delay: Option<Duration>,
) -> (NodeId, String, Duration, Result<MemberReport, PeerError>) {
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    let started = Instant::now();
    let report = if id == node.id() {
        // Read by this term like any member: an answer from an older
        // speaker arriving after this is not recorded (`record_held`)
        // and a copy from one is refused (`take_copies`).
        node.deposed_by(term);
        Ok(node.own_report())
    } else {
        let timeout = deadline.saturating_duration_since(started);
        node.peers
            .report(
                &addr,
                term,
                timeout,
                node.config.report_frame_bytes,
                node.clock,
            )
            .await
    };
    (id, addr, started.elapsed(), report)
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
            max_lease_ms: u64::try_from(self.config.lease.max.as_millis()).unwrap_or(u64::MAX),
            copies: self.config.copies() as u64,
        }
    }

    /// This node's report read by itself as the rebuilding speaker: its
    /// clients' locks and what it granted, on its own clock as they are.
    pub(crate) fn own_report(&self) -> MemberReport {
        let now = self.clock.now();
        let state = self.state();
        let mut locks = state.held.live(now);
        locks.extend(state.copies.live(now));
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
        let held = state
            .held
            .iter_live(now)
            .chain(state.copies.iter_live(now))
            .map(|l| ReportLock::held(l, now));
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
