//! The speaker task: carries out what the protocol's `Leadership` says
//! (drop the table, rebuild, step down), and each rebuild attempt as its
//! `Rebuilding` says (openraft's ReadIndex, the reads of every member, the
//! settle on a blocking thread, the losers told).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use leasehold_api::PeerLock;
use leasehold_protocol::{
    Attempt, AttemptOut, DepartedRead, Gone, Leadership, MemberRead, ReadOut, Rebuilding, Step,
};
use leasehold_raft::{ReadPolicy, WatchReceiver};
use locktable::{Lock, NodeId};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::node::Node;
use crate::peers::PeerError;
use crate::report::MemberReport;
use collect::{Collector, Frames};
use tokio_util::sync::CancellationToken;

mod collect;
mod late;

/// The longest the speaker task sleeps without looking: its guard can run
/// out (and a shutdown begin) with no event to wake it.
const LOOK_AT_LEAST_EVERY: Duration = Duration::from_millis(100);

/// The task of the rebuild attempt under way.
type Running = Option<JoinHandle<()>>;

/// Watches leadership until `stop` fires, and does what the protocol's
/// [`Leadership`] says: drop the table on every change of leader or term,
/// rebuild it while this node leads and it is not rebuilt, retry, and step
/// down. Wakes when Raft's server state changes, when an attempt ends, when
/// a retry falls due, and at least every [`LOOK_AT_LEAST_EVERY`].
pub(crate) async fn watch_leadership(node: Arc<Node>, stop: CancellationToken) {
    let mut lead = Leadership::new(node.sabotage());
    let (ended_tx, mut ended_rx) = mpsc::unbounded_channel::<(u64, Attempt)>();
    let mut attempt: Running = None;
    let mut ended: Option<(u64, Attempt)> = None;
    let mut server = node.raft.server_metrics();
    let mut raft_alive = true;
    let mut speaker_seen: Option<u64> = None;
    loop {
        // Each change from one speaker to another, as this node sees it.
        let speaker_now = node.raft.metrics().borrow_watched().current_leader;
        if speaker_now.is_some() && speaker_now != speaker_seen {
            if speaker_seen.is_some() {
                node.metrics.speaker_changes.inc();
            }
            speaker_seen = speaker_now;
        }
        let term = if node.is_stopping() {
            None
        } else {
            node.leading_term()
        };
        if let Some(Step::Drop(term)) = lead.leads(term) {
            node.drop_table(term);
            if let Some(stale) = attempt.take() {
                stale.abort();
            }
            match term {
                Some(term) => tracing::info!(
                    node = node.id(),
                    term,
                    "leads this term in Raft: rebuilding the lock table (it speaks once rebuilt)"
                ),
                None => tracing::info!(node = node.id(), "not the speaker"),
            }
        }
        // `Leadership` drops the outcome of an attempt abandoned above.
        if let Some((number, outcome)) = ended.take() {
            if let Some(step) = lead.attempt_ended(number, outcome, node.clock.now()) {
                carry_out(&node, step, &mut attempt, &ended_tx).await;
            }
        }
        let now = node.clock.now();
        if let Some(step) = lead.tick(node.is_rebuilt(), node.may_speak_now(), now) {
            carry_out(&node, step, &mut attempt, &ended_tx).await;
        }
        // A lower count of copies that ended is no longer stamped.
        node.refresh_terms();
        let mut sleep = LOOK_AT_LEAST_EVERY;
        if let Some(due) = lead.next_due() {
            sleep = sleep.min(due.saturating_duration_since(node.clock.now()));
        }
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
            // Once the Raft core is gone its metrics never change again,
            // and `changed` would answer at once forever: sleep instead.
            changed = server.changed(), if raft_alive => raft_alive = changed.is_ok(),
            Some(outcome) = ended_rx.recv() => ended = Some(outcome),
            _ = stop.cancelled() => {
                if let Some(attempt) = attempt.take() {
                    attempt.abort();
                }
                return;
            }
        }
    }
}

/// Does `step`: starts a rebuild attempt (its outcome sent to `ended`
/// with its number), or steps down.
async fn carry_out(
    node: &Arc<Node>,
    step: Step,
    attempt: &mut Running,
    ended: &mpsc::UnboundedSender<(u64, Attempt)>,
) {
    match step {
        Step::Drop(term) => {
            node.drop_table(term);
        }
        Step::Rebuild { term, attempt: id } => {
            let rebuilding = node
                .state()
                .member
                .start_attempt(id, term, node.clock.now());
            let (rebuilder, ended) = (Arc::clone(node), ended.clone());
            let task = node.tasks.spawn(
                async move {
                    let outcome = AssertUnwindSafe(rebuild(rebuilder, rebuilding))
                        .catch_unwind()
                        .await
                        .unwrap_or(Attempt::Failed("panicked"));
                    let _ = ended.send((id, outcome));
                }
                .in_current_span(),
            );
            *attempt = Some(task);
        }
        Step::StepDown { term, why } => step_down(node, term, &why).await,
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

/// A read of a member under way: the member, how long the read took, and
/// its report.
type MemberReadDone = (NodeId, Duration, Result<MemberReport, PeerError>);

/// Carries out the rebuild `attempt` (`Rebuilding` decides: confirm, read
/// every member, settle, tell losers) and answers how it ended.
async fn rebuild(node: Arc<Node>, mut attempt: Rebuilding) -> Attempt {
    let term = attempt.term();
    // The roster, as it is once the leader is confirmed.
    let mut roster = node.roster();
    let mut reads = FuturesUnordered::new();
    let mut collector: Option<Collector> = None;
    let mut deadline = Instant::now();
    loop {
        while let Some(out) = attempt.poll() {
            match out {
                AttemptOut::Confirm { within } => {
                    // The blank entry of this term committed: a quorum
                    // knows this leader. openraft's ReadIndex gives up
                    // after about one leader lease without a quorum; the
                    // caller tries again.
                    let linearized = node.raft.ensure_linearizable(ReadPolicy::ReadIndex);
                    if !matches!(tokio::time::timeout(within, linearized).await, Ok(Ok(_))) {
                        attempt.not_confirmed("no quorum confirmed this leader");
                        continue;
                    }
                    // Every member of the latest configuration, both
                    // halves of a joint one and the learners: any of them
                    // may hold locks of its clients; and the members that
                    // left within a lease, which may too.
                    roster = node.roster();
                    let configuration: Vec<NodeId> = roster.ids().collect();
                    let guard = node.guard();
                    let mut state = node.state();
                    let now = node.clock.now();
                    let ended = attempt.confirmed(&mut state.member, &configuration, &guard, now);
                    drop(state);
                    node.departed_ended(ended);
                    if let Some(at) = attempt.read_deadline() {
                        deadline = Instant::now() + at.saturating_duration_since(now);
                    }
                }
                AttemptOut::Collect(feed) => collector = Some(Collector::start(feed)),
                AttemptOut::Read(read) => {
                    let (id, delay) = match read {
                        ReadOut::Read(id) => (id, None),
                        ReadOut::ReadAgain { member, after } => (member, Some(after)),
                    };
                    let addr = roster.addr(id).or_else(|| attempt.departed_addr(id));
                    let addr = addr.unwrap_or_default().to_string();
                    let node = Arc::clone(&node);
                    let frames = collector.as_ref().map(|c| c.frames().clone());
                    reads.push(read_member(node, id, addr, term, deadline, delay, frames));
                }
                // Counted and put in place under the state's lock; settled
                // apart from it, as the frames arrived and then closed,
                // where blocking work runs (a thread of its own; inline
                // under a simulator): a million locks take most of a second
                // to settle, and meanwhile the node answers (Raft's
                // heartbeats, its clients, which wait for the state's lock)
                // on the runtime's threads.
                AttemptOut::Settle(job) => {
                    // The reads are over: a read still under way is
                    // dropped (its member's report is not waited for; the
                    // frames it passed on are records all the same).
                    reads.clear();
                    let feed = match collector.take() {
                        Some(collector) => collector.finish().await,
                        None => None,
                    };
                    let Some(feed) = feed else {
                        return Attempt::Failed("settling the reports as they came panicked");
                    };
                    let settle = move || job.settle(feed);
                    let Ok(settled) = leasehold_raft::blocking::unblock(settle).await else {
                        return Attempt::Failed("settling the reports panicked");
                    };
                    let guard = node.guard();
                    let mut state = node.state();
                    if attempt.settled(settled, &mut state.member, &guard, node.clock.now()) {
                        node.changed(&state);
                    }
                }
                AttemptOut::Rebuilt(report) => {
                    if report.held_back_ms > 0 {
                        let missing = report
                            .members_missing
                            .iter()
                            .filter(|&&id| id != node.id())
                            .map(|&id| {
                                let addr = roster.addr(id).or_else(|| attempt.departed_addr(id));
                                (id, addr.unwrap_or_default().to_string())
                            })
                            .collect();
                        late::start(&node, term, missing);
                    }
                    node.record_rebuild(report);
                }
                AttemptOut::TellLost { member, locks } => tell_lost(&node, member, locks).await,
                AttemptOut::Ended(outcome) => return outcome,
            }
        }
        // Reading: the next answer, or the time the reads stop.
        let now = node.clock.now();
        let Some(stop_at) = attempt.stop_at(now) else {
            return Attempt::Failed("the attempt stalled");
        };
        let stop_in = stop_at.saturating_duration_since(now);
        let next = if stop_in.is_zero() {
            None
        } else if reads.is_empty() {
            // No read out, yet not over (a sabotaged reading waits for its
            // deadline): wait for it.
            tokio::time::sleep(stop_in).await;
            None
        } else {
            // Time to stop, unless tokio's clock ran ahead of the lease
            // clock: asked again.
            tokio::time::timeout(stop_in, reads.next())
                .await
                .ok()
                .flatten()
        };
        let Some((id, took, report)) = next else {
            let guard = node.guard();
            let mut state = node.state();
            attempt.timeout(&mut state.member, &guard, node.clock.now());
            continue;
        };
        took_read(&node, &mut attempt, id, took, report);
    }
}

/// Feeds `attempt` the read of member `id` that took `took`: its report, or
/// why it failed.
fn took_read(
    node: &Arc<Node>,
    attempt: &mut Rebuilding,
    id: NodeId,
    took: Duration,
    report: Result<MemberReport, PeerError>,
) {
    let report = match report {
        Ok(report) => report,
        Err(e) => {
            let guard = node.guard();
            let mut state = node.state();
            let now = node.clock.now();
            attempt.failed(id, e.to_string(), &mut state.member, &guard, now);
            return;
        }
    };
    tracing::info!(
        member = id,
        locks = report.count,
        frames = report.frames,
        took_ms = took.as_millis() as u64,
        decoding_ms = report.decoding.as_millis() as u64,
        "member read"
    );
    let read = member_read(id, report);
    let guard = node.guard();
    let mut state = node.state();
    attempt.answered(read, &mut state.member, &guard, node.clock.now());
}

/// Member `id`'s report as the rebuild takes it.
fn member_read(id: NodeId, report: MemberReport) -> MemberRead {
    let header = report.header;
    MemberRead {
        member: id,
        max_lease: Duration::from_millis(header.max_lease_ms),
        copies: usize::try_from(header.copies).unwrap_or(usize::MAX),
        uptime: (!header.first_start).then(|| Duration::from_millis(header.uptime_ms)),
        // Already on this clock: each frame's leases were counted from its
        // arrival as it was read (`ReportReader::push`). None if they went
        // to the rebuild's feed as they came.
        locks: report.locks,
        departed: header
            .departed
            .into_iter()
            .map(|gone| Gone {
                member: gone.node,
                addr: gone.addr,
                left: Duration::from_millis(gone.left_ms),
            })
            .collect(),
    }
}

/// One read of member `id`'s report (after `delay`, if given), bounded by
/// `deadline`: the member, how long the read took, and the report.
/// Reads member `id` at `addr` for `term` until `deadline`, after `delay`;
/// its locks go to `frames` as they arrive, if given, rather than into the
/// report.
async fn read_member(
    node: Arc<Node>,
    id: NodeId,
    addr: String,
    term: u64,
    deadline: Instant,
    delay: Option<Duration>,
    frames: Option<Frames>,
) -> MemberReadDone {
    if let Some(delay) = delay {
        tokio::time::sleep(delay).await;
    }
    let started = Instant::now();
    let report = if id == node.id() {
        // Read by this term like any member: an answer from an older
        // speaker arriving after this is not recorded (`record_held`)
        // and a copy from one is refused (`take_copies`).
        node.deposed_by(term);
        let Some(frames) = frames else {
            return (id, started.elapsed(), Ok(node.own_report()));
        };
        match node.own_report_fed(frames.sink()).await {
            Ok(report) => Ok(report),
            // This node's own read does not fail: its records are taken
            // whole, as before frames (those fed already merge by id).
            Err(e) => {
                tracing::warn!(error = %e, "own report not read in frames: taken whole");
                let mut report = node.own_report();
                frames.add(std::mem::take(&mut report.locks), node.clock.now());
                Ok(report)
            }
        }
    } else {
        let timeout = deadline.saturating_duration_since(started);
        let report = node
            .peers
            .report(
                &addr,
                term,
                node.report_layout(),
                timeout,
                node.config.report_frame_bytes,
                node.clock,
                frames.map(|frames| (id, frames.sink())),
            )
            .await;
        // Another node at that address now (a member replaced under the
        // address of one that left) is not the member asked: unread. A
        // departed member's report is taken as the protocol says
        // (`DepartedRead`); the roster is read once the answer is in: a
        // member removed while it was read is departed.
        report.and_then(|mut r| {
            if r.header.node != id {
                return Err(PeerError::not_the_member(&addr, id, r.header.node));
            }
            if node.roster().addr(id).is_none() {
                let left_with = node.identity.recorded(id).map(|s| s.0);
                let answers_from = r.store.map(|s| s.0);
                let read = node.state().member.departed_read(left_with, answers_from);
                match read {
                    DepartedRead::Unread => {
                        return Err(PeerError::left_on_another_directory(&addr, id));
                    }
                    DepartedRead::Restarted => r.header.first_start = false,
                    DepartedRead::AsMember => {}
                }
            }
            Ok(r)
        })
    };
    (id, started.elapsed(), report)
}

/// Tells `member` that its clients lost `locks` to an older grant.
async fn tell_lost(node: &Arc<Node>, member: NodeId, locks: Vec<Lock>) {
    if member == node.id() {
        node.lost(locks.iter().map(|l| l.id));
    } else if let Some(addr) = node.roster().addr(member) {
        let now = node.clock.now();
        let locks = locks.iter().map(|l| PeerLock::from(l.in_transit(now)));
        node.peers.lost(addr, locks.collect()).await;
    }
}
