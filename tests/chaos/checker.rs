//! The checker: every client's holding intervals, the sets it was granted
//! and its probes after its sessions ended, all on this process's monotonic
//! clock, held against the promises (main.rs lists them); and the run's
//! report.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use leasehold_client::{Kind, Loss};
use serde_json::json;

use crate::{Fault, Interval, Run, COPIES, LEASE, MAX_LEASE_MS, SERVES_AGAIN_WITHIN};

/// What the clients saw, for the checker.
#[derive(Default)]
pub(crate) struct History {
    /// Every holding interval.
    pub(crate) intervals: Vec<Interval>,
    /// Sets granted otherwise than whole and in one step, as their holders
    /// saw them.
    pub(crate) sets_broken: Vec<String>,
    /// Locks of sessions, probed once their session ended.
    pub(crate) session_ends: Vec<SessionEnd>,
    /// Each change of speaker seen: after the first instant, by the second
    /// ([`crate::sessions::watch_terms`]).
    pub(crate) speaker_changes: Vec<(Instant, Instant)>,
    /// The probes still under way, awaited before the check.
    pub(crate) probes: Vec<tokio::task::JoinHandle<()>>,
}

/// A lock of a session, probed once the session ended: its name must be
/// free of it from then on.
#[derive(Debug, Clone)]
pub(crate) struct SessionEnd {
    /// The name the lock held.
    pub(crate) name: usize,
    /// The lock's fence.
    pub(crate) fence: u64,
    /// How the session ended: `closed` (its close answered) or `lapsed`
    /// (not renewed, its lease run out on the holder's count).
    pub(crate) how: &'static str,
    /// From when the lock must be free: the close's answer, or the lease's
    /// end on the holder's count plus [`crate::sessions::LAPSE_MARGIN`].
    pub(crate) due_free: Instant,
    /// When a probe sent at or after `due_free` was answered with the lock
    /// among the name's holders, if one was.
    pub(crate) seen_held: Option<Instant>,
}

/// The distinct members a fault struck while `interval` was held, or a
/// longest lease (and a second) before: a member that restarted, or was
/// unreachable, within a longest lease of a rebuild counts as missed there.
/// Wall-clock steps and slow links take no member out.
fn failed_during(interval: &Interval, faults: &[Fault]) -> BTreeSet<u64> {
    let reach = Duration::from_millis(MAX_LEASE_MS) + Duration::from_secs(1);
    faults
        .iter()
        .filter(|f| f.kind != "wall-clock-step" && f.kind != "slow-link")
        .filter(|f| f.at <= interval.end && f.until + reach >= interval.start)
        .flat_map(|f| f.nodes.iter().copied())
        .collect()
}

/// Whether a fault (other than a wall-clock step) was in force, or the
/// cluster not yet serving again after it, at some time in `[from, to]`.
fn disturbed(from: Instant, to: Instant, faults: &[Fault]) -> bool {
    faults
        .iter()
        .filter(|f| f.kind != "wall-clock-step")
        .any(|f| {
            let served = f.until + f.served_again.unwrap_or(SERVES_AGAIN_WITHIN);
            f.at <= to && served >= from
        })
}

/// What the overlap check found along each name's history.
#[derive(Default)]
struct Overlaps {
    /// Every overlap, explained or not.
    count: usize,
    /// Overlaps and fence inversions the seed's documented case explains.
    explained: usize,
    /// The overlaps nothing explains.
    unexplained: Vec<String>,
    /// How many of those began inside a lock of a session.
    after_session: usize,
    /// How many of those had a writer (an exclusive grant) beside another
    /// holder while both held.
    writer_beside: usize,
    /// How many of those had a permit beside as many others as the count
    /// while all held.
    permits_overfull: usize,
    /// Fences out of order nothing explains.
    fence_inversions: Vec<String>,
}

/// Strict mode: no two intervals of one name overlap but readers' or
/// permits' (never more than the permits); proceed mode: only near a
/// fault. Along each name, fences increase.
fn overlaps(mode: &str, intervals: &[Interval], faults: &[Fault]) -> Overlaps {
    let mut by_name: BTreeMap<usize, Vec<&Interval>> = BTreeMap::new();
    for i in intervals {
        by_name.entry(i.name).or_default().push(i);
    }
    let max_lease = Duration::from_millis(MAX_LEASE_MS);
    let mut found = Overlaps::default();
    for (name, mut list) in by_name {
        list.sort_by_key(|i| i.start);
        for (k, later) in list.iter().enumerate() {
            // Holders beside `later` when it began that may be: readers
            // beside a reader, permits beside a permit, up to the permits.
            let beside = list[..k]
                .iter()
                .filter(|e| e.end > later.start && later.kind.compatible(e.kind))
                .count();
            let overfull = beside >= later.kind.limit() as usize;
            for earlier in &list[..k] {
                // Two that may be held together are not ordered by fence
                // either: their answers come in either order.
                let compatible = later.kind.compatible(earlier.kind);
                if compatible && (earlier.end <= later.start || !overfull) {
                    continue;
                }
                if earlier.closed_until > later.start {
                    found.count += 1;
                    let cause = faults.iter().find(|f| {
                        f.kind != "wall-clock-step"
                            && f.kind != "slow-link"
                            && f.at <= later.start
                            && f.until + max_lease + Duration::from_secs(1) >= later.start
                    });
                    match cause {
                        Some(f) if mode == "proceed" => {
                            found.explained += 1;
                            eprintln!("overlap on chaos/{name} (fences {} and {}), explained by {} of {:?}", earlier.fence, later.fence, f.kind, f.nodes);
                        }
                        _ => {
                            let both_held = earlier.end > later.start;
                            let writer = [earlier.kind, later.kind].contains(&Kind::Exclusive);
                            found.writer_beside += usize::from(both_held && writer);
                            found.permits_overfull += usize::from(both_held && compatible);
                            found.after_session += usize::from(earlier.session);
                            found.unexplained.push(format!(
                                "chaos/{name}: fence {} ({}{}) held until {:?} after fence {} \
                                 ({}) began, beside {beside} of its kind",
                                earlier.fence,
                                earlier.kind,
                                if earlier.session {
                                    ", in a session"
                                } else {
                                    ""
                                },
                                earlier.closed_until - later.start,
                                later.fence,
                                later.kind
                            ))
                        }
                    }
                } else if earlier.fence >= later.fence {
                    // In proceed mode an older grant through a node missing
                    // at a rebuild can surface after a newer one; the fence
                    // is what turns it away at the resource.
                    let near_fault = faults.iter().any(|f| {
                        f.kind != "wall-clock-step"
                            && f.kind != "slow-link"
                            && f.at <= later.start
                            && f.until + max_lease + Duration::from_secs(1) >= earlier.start
                    });
                    if mode == "proceed" && near_fault {
                        found.explained += 1;
                    } else {
                        found.fence_inversions.push(format!(
                            "chaos/{name}: fence {} after {}",
                            later.fence, earlier.fence
                        ));
                    }
                }
            }
        }
    }
    found
}

/// Copies: a renewal refused while fewer members than there are copies
/// failed means the cluster forgot a lock it had promised to keep. (A
/// lapse, no renewal getting through in time, is counted apart: the
/// second number.)
fn lost_with_copies(intervals: &[Interval], faults: &[Fault]) -> (Vec<String>, usize) {
    let mut lost = Vec::new();
    let mut lapsed = 0;
    for i in intervals.iter().filter(|i| i.lost) {
        let failed = failed_during(i, faults);
        if failed.len() >= COPIES {
            continue;
        }
        let why = match i.loss {
            Some(Loss::Refused) => "refused",
            // A lapse while every fault had healed and the cluster served
            // again for the whole last lease is a lock the cluster forgot
            // too (in strict mode it answers a lock it lacks "retry", not
            // "not held", while it holds new grants back).
            _ if !disturbed(i.end.checked_sub(LEASE).unwrap_or(i.start), i.end, faults) => {
                "lapsed while the cluster served"
            }
            _ => {
                lapsed += 1;
                continue;
            }
        };
        lost.push(format!(
            "chaos/{}: fence {} {why} after {:?} held, members failed meanwhile: {failed:?}",
            i.name,
            i.fence,
            i.end - i.start
        ));
    }
    (lost, lapsed)
}

/// A session's locks end with it: no probe sent once a lock was due free
/// may find it held, unless the speaker changed between a lease (and a
/// second) before that and the sighting (a rebuild may have read the lock
/// from a copy holder its end had not reached; it then runs out on its
/// own). Answers what was left held, and how many sightings a change of
/// speaker explains.
fn left_after_end(ends: &[SessionEnd], changes: &[(Instant, Instant)]) -> (Vec<String>, usize) {
    let mut left = Vec::new();
    let mut near_change = 0;
    for end in ends {
        let Some(seen) = end.seen_held else {
            continue;
        };
        let since = end.due_free.checked_sub(LEASE + Duration::from_secs(1));
        let since = since.unwrap_or(end.due_free);
        if changes
            .iter()
            .any(|&(after, by)| after <= seen && by >= since)
        {
            near_change += 1;
            continue;
        }
        left.push(format!(
            "chaos/{}: fence {} still held {:?} after its session {}",
            end.name,
            end.fence,
            seen - end.due_free,
            end.how
        ));
    }
    (left, near_change)
}

/// Checks the history of `run` and reports on it (printed, and appended
/// to `CHAOS_REPORT`'s file when set).
pub(crate) fn check(run: &Run, history: History, faults: &[Fault], errors: u64) -> Checked {
    let (mode, seconds, seed) = (run.mode, run.seconds, run.seed);
    let intervals = history.intervals;
    let found = overlaps(mode, &intervals, faults);
    let faulted: BTreeSet<u64> = faults
        .iter()
        .filter(|f| f.kind != "wall-clock-step")
        .flat_map(|f| f.nodes.iter().copied())
        .collect();
    let lost_unfaulted: Vec<String> = intervals
        .iter()
        .filter(|i| i.lost && i.endpoints.iter().all(|n| !faulted.contains(n)))
        .map(|i| {
            format!(
                "chaos/{}: fence {} ({}{}{}) lost ({:?}) after {:?} held through nodes {:?}",
                i.name,
                i.fence,
                i.kind,
                if i.session { ", in a session" } else { "" },
                if i.in_set { ", in a set" } else { "" },
                i.loss,
                i.end - i.start,
                i.endpoints
            )
        })
        .collect();
    let (lost_with_copies, lapsed_with_copies) = lost_with_copies(&intervals, faults);
    let (left_after_end, left_near_change) =
        left_after_end(&history.session_ends, &history.speaker_changes);
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    let mut worst_serve_again_ms: BTreeMap<&str, u64> = BTreeMap::new();
    let mut never_served_again = Vec::new();
    for f in faults {
        *kinds.entry(f.kind).or_default() += 1;
        match f.served_again {
            Some(took) => {
                let worst = worst_serve_again_ms.entry(f.kind).or_default();
                *worst = (*worst).max(took.as_millis() as u64);
            }
            None => never_served_again.push(format!("{} of {:?}", f.kind, f.nodes)),
        }
    }
    let probed = |how| {
        let ends = history.session_ends.iter();
        ends.filter(|e| e.how == how).count()
    };
    let after_lapse = left_after_end.iter().filter(|l| l.ends_with("lapsed"));
    let after_lapse = after_lapse.count();
    let report = json!({
        "mode": mode,
        "seconds": seconds,
        "seed": seed,
        "sabotage": run.base,
        "faults": kinds,
        "worst_serve_again_ms": worst_serve_again_ms,
        "not_serving_again": never_served_again.len(),
        "grants": intervals.len(),
        "grants_by_kind": {
            "exclusive": intervals.iter().filter(|i| i.kind == Kind::Exclusive).count(),
            "shared": intervals.iter().filter(|i| i.kind == Kind::Shared).count(),
            "permit": intervals.iter().filter(|i| matches!(i.kind, Kind::Permit(_))).count(),
            "in_set": intervals.iter().filter(|i| i.in_set).count(),
            "in_session": intervals.iter().filter(|i| i.session).count(),
            "delayed_abandoned": intervals.iter().filter(|i| i.closed_until > i.end).count(),
        },
        "acquires_refused_or_failed": errors,
        "lost_while_held": intervals.iter().filter(|i| i.lost).count(),
        "lost_through_unfaulted_nodes": lost_unfaulted.len(),
        "lost_while_fewer_than_copies_failed": lost_with_copies.len(),
        "lapsed_near_a_fault_while_fewer_than_copies_failed": lapsed_with_copies,
        "overlaps": found.count,
        "overlaps_or_inversions_explained": found.explained,
        "overlaps_unexplained": found.unexplained.len(),
        "writer_beside_another_holder": found.writer_beside,
        "permits_over_the_count": found.permits_overfull,
        "fence_inversions": found.fence_inversions.len(),
        "sets_broken": history.sets_broken.len(),
        "session_locks_probed_after_close": probed("closed"),
        "session_locks_probed_after_lapse": probed("lapsed"),
        "session_locks_held_after_end": left_after_end.len(),
        "session_locks_held_after_lapse": after_lapse,
        "session_locks_held_after_end_near_a_speaker_change": left_near_change,
        "speaker_changes": history.speaker_changes.len(),
    });
    println!("chaos report: {report}");
    if let Ok(path) = std::env::var("CHAOS_REPORT") {
        use std::io::Write;
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
        {
            let _ = writeln!(f, "{report}");
        }
    }
    assert!(
        intervals.len() > 10,
        "the workload made too few grants to judge: {report}"
    );
    Checked {
        report,
        unexplained: found.unexplained,
        unexplained_after_session: found.after_session,
        writer_beside: found.writer_beside,
        permits_overfull: found.permits_overfull,
        inversions: found.fence_inversions,
        never_served_again,
        lost_unfaulted,
        lost_with_copies,
        sets_broken: history.sets_broken,
        left_after_end,
    }
}

/// A run's report, and what broke a promise.
pub(crate) struct Checked {
    /// The report, as printed.
    pub(crate) report: serde_json::Value,
    /// The overlaps nothing explains.
    pub(crate) unexplained: Vec<String>,
    /// How many of those began inside a lock of a session.
    pub(crate) unexplained_after_session: usize,
    /// How many of those had a writer beside another holder.
    pub(crate) writer_beside: usize,
    /// How many of those had more holders than permits.
    pub(crate) permits_overfull: usize,
    /// Fences out of order nothing explains.
    pub(crate) inversions: Vec<String>,
    /// Faults after which some node did not serve within the bound.
    pub(crate) never_served_again: Vec<String>,
    /// Locks lost though held through nodes never faulted.
    pub(crate) lost_unfaulted: Vec<String>,
    /// Locks lost while fewer members than copies failed.
    pub(crate) lost_with_copies: Vec<String>,
    /// Sets granted otherwise than whole, in one step.
    pub(crate) sets_broken: Vec<String>,
    /// Locks of sessions still held once their session ended.
    pub(crate) left_after_end: Vec<String>,
}

impl Checked {
    /// [`Checked::assert_kept`], and readers, permits, sets and locks of
    /// sessions were granted (the contended workload's names of those
    /// kinds were served).
    pub(crate) fn assert_kept_with_kinds(&self) {
        self.assert_kept();
        let kinds = &self.report["grants_by_kind"];
        for kind in ["shared", "permit", "in_set", "in_session"] {
            assert!(
                kinds[kind].as_u64().unwrap_or(0) > 0,
                "no {kind} grant to judge: {}",
                self.report
            );
        }
    }

    /// Every promise kept.
    pub(crate) fn assert_kept(&self) {
        let (report, mode, seed) = (&self.report, &self.report["mode"], &self.report["seed"]);
        assert!(
            self.unexplained.is_empty(),
            "overlaps the promises do not allow ({mode}, seed {seed}): {:#?}",
            self.unexplained
        );
        assert!(
            self.inversions.is_empty(),
            "fences went backwards (seed {seed}): {:#?}",
            self.inversions
        );
        assert!(
            self.never_served_again.is_empty(),
            "nodes did not serve within {SERVES_AGAIN_WITHIN:?} after a fault healed \
             ({mode}, seed {seed}): {:?}",
            self.never_served_again
        );
        assert!(
            self.lost_unfaulted.is_empty(),
            "locks held through nodes never faulted were lost (seed {seed}): {:#?} {report}",
            self.lost_unfaulted
        );
        assert!(
            self.lost_with_copies.is_empty(),
            "locks lost while fewer than {COPIES} members failed ({mode}, seed {seed}): {:#?}",
            self.lost_with_copies
        );
        assert!(
            self.sets_broken.is_empty(),
            "sets granted otherwise than whole ({mode}, seed {seed}): {:#?}",
            self.sets_broken
        );
        assert!(
            self.left_after_end.is_empty(),
            "locks of sessions held after their session ended ({mode}, seed {seed}): {:#?}",
            self.left_after_end
        );
    }
}
