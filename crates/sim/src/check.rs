//! The checker: the promises a run must keep, read from what it recorded
//! (`history`).
//!
//! - *Exclusion of holders*: no two clients hold one name at once unless
//!   both asked for kinds held together (two readers, two permits of one
//!   semaphore), never more than a semaphore's permits, and fences grow
//!   along each name's history; in proceed mode an overlap or an older
//!   fence is allowed within the longest lease after a rebuild that missed
//!   as many members as there are copies, or more (the documented cost of
//!   proceeding).
//! - *Sets whole*: a set of names is answered with a lock of every name
//!   asked, in order, with consecutive fences, or not at all.
//! - *A session's locks end with it*: no acquire sent once a session's
//!   close was answered, or once its lease ran out at the latest (its
//!   holder's latest answer plus the lease asked, when no renewal is in
//!   doubt) plus a margin, and plus the longest a copy of the lock or of
//!   its session waited at a paused member, is refused "held" by a lock of
//!   it; the close is excused by a rebuild since (the lapse still holds it
//!   to its end).
//!   The other half, its locks held while it is renewed, is the renewal
//!   property below.
//! - *Renewed locks kept*: no lock whose holder kept renewing is lost (a
//!   renewal answered "not held" while the holder's own count of the lease
//!   runs) while fewer members failed than there are copies. Failed is
//!   judged from the world, not from the protocol's count of missing
//!   members: a member failed if it was crashed, paused, stopping or at
//!   either end of a cut link at any time from the longest lease before
//!   the grant to the loss. The network losing a rebuild's read of a
//!   member, or its report, is no excuse: the rebuild reads a member again
//!   until its timeout while that member could make the difference
//!   (`Reads::failed`), so only a run of lost reads across the whole rebuild
//!   window could miss a member that did not fail. No seed needed such an
//!   excuse (10000 mixed seeds, 3000 of each scenario, strict and not),
//!   where the node that read each member once lost renewed locks to one
//!   crash and one lost read (seed 442 of speaker crashes, strict; the
//!   `read-once` sabotage).
//! - *Exclusion of speakers*: no node grants for a term once a leader of a
//!   later term has been elected, nor could (its table rebuilt and its
//!   guard open, looked at every tick): the guard's premise is that no
//!   other leader exists while it is open.
//! - *Liveness*: once the last fault healed, every node serves a grant to
//!   its probe within [`crate::liveness_bound_ms`].

use std::collections::{BTreeMap, BTreeSet};

use locktable::{Kind, NodeId};

use crate::config::timing::{MAX_LEASE_MS, POLL_MS};
use crate::history::Interval;
use crate::world::World;

/// How many violations of one kind a report spells out.
const SPELLED_OUT: usize = 5;

fn push_capped(list: &mut Vec<String>, count: &mut usize, line: impl FnOnce() -> String) {
    *count += 1;
    if list.len() < SPELLED_OUT {
        list.push(line());
    }
}

/// How long past the latest end of a session's lease (on its holder's
/// answers) its locks may still hold at the speaker, in a run whose
/// messages take at most `max_delay_ms`: a record that counts a lease from
/// its arrival (a copy, a report a rebuild read) lengthens it by a
/// message's delay, and a few may follow each other within one lease (a
/// copy read at a rebuild, copied again, read at the next); and the
/// expiry task frees a lapsed name at its next poll. A copy that waited at
/// a paused member is delayed by the wait as well: the checker adds the
/// longest such wait of a copy of the lock or of its session
/// (`History::copies_waited`), which no bound on the network covers. No mixed seed needed
/// any of it (500 of each rebuild mode and 100 of each targeted scenario,
/// with and without the session's copy and taking sessions back, when
/// written); the sabotage `session-end-leaves-locks` keeps them a lease
/// longer.
pub(crate) fn session_end_margin_ms(max_delay_ms: u64) -> u64 {
    POLL_MS + 4 * max_delay_ms
}

impl World {
    /// Every set of names answered whole: each name asked, in the order
    /// asked, with consecutive fences (granted in one step).
    fn check_sets(&mut self) {
        let report = &mut self.report;
        for broken in &self.history.broken_sets {
            push_capped(&mut report.unexplained, &mut report.violations, || {
                format!("a set not granted whole: {broken}")
            });
        }
    }

    pub(crate) fn check(&mut self, bound: u64) {
        self.check_holders();
        self.check_sets();
        self.check_lost();
        self.check_session_ends();
        self.check_liveness(bound);
        self.report.grants = self.history.intervals.len();
        self.report.session_grants = self.history.intervals.iter().filter(|i| i.session).count();
    }

    fn check_holders(&mut self) {
        let window = MAX_LEASE_MS + 1_000;
        let strict = self.config.strict;
        let missing = &self.history.missing_rebuilds;
        let explained_by = |start: u64| missing.iter().any(|&r| r <= start && r + window >= start);
        let mut by_name: BTreeMap<&str, Vec<&Interval>> = BTreeMap::new();
        for i in &self.history.intervals {
            by_name.entry(&i.name).or_default().push(i);
        }
        let report = &mut self.report;
        let mut violations = 0;
        for (name, mut list) in by_name {
            list.sort_by_key(|i| (i.start, i.fence));
            for (k, later) in list.iter().enumerate() {
                // Holders beside `later` when it began that may be: readers
                // beside a reader, permits beside a permit.
                let beside: Vec<&&Interval> = list[..k]
                    .iter()
                    .filter(|e| e.end > later.start && later.kind.compatible(e.kind))
                    .collect();
                if beside.len() >= later.kind.limit() as usize {
                    report.overlaps += 1;
                    if !strict && explained_by(later.start) {
                        report.explained += 1;
                    } else {
                        push_capped(&mut report.unexplained, &mut violations, || {
                            format!(
                                "{name}: fence {} from {} is holder {} of {}",
                                later.fence,
                                later.start,
                                beside.len() + 1,
                                later.kind
                            )
                        });
                    }
                }
                for earlier in &list[..k] {
                    // Two grants that may be held together are not ordered
                    // by fence: the speaker may answer them in either order
                    // and their answers arrive in either order.
                    if later.kind.compatible(earlier.kind) {
                        continue;
                    }
                    if earlier.closed_until > later.start {
                        report.overlaps += 1;
                        if !strict && explained_by(later.start) {
                            report.explained += 1;
                        } else {
                            push_capped(&mut report.unexplained, &mut violations, || {
                                let kinds = match (earlier.kind, later.kind) {
                                    (Kind::Exclusive, Kind::Exclusive) => String::new(),
                                    (a, b) => format!(" ({a} then {b})"),
                                };
                                let held = match earlier.session {
                                    true => "held in a session",
                                    false => "held",
                                };
                                format!(
                                    "{name}: fence {} {held} [{}, {}) overlaps fence {} from {}{kinds}",
                                    earlier.fence,
                                    earlier.start,
                                    earlier.closed_until,
                                    later.fence,
                                    later.start
                                )
                            });
                        }
                    } else if earlier.fence >= later.fence {
                        // In proceed mode an older grant whose holder's
                        // node was missing can surface after a newer one:
                        // the fence is what turns it away at the resource.
                        if !strict && (explained_by(earlier.start) || explained_by(later.start)) {
                            report.explained += 1;
                            continue;
                        }
                        push_capped(&mut report.fence_inversions, &mut violations, || {
                            format!("{name}: fence {} after {}", later.fence, earlier.fence)
                        });
                    }
                }
            }
        }
        report.violations += violations;
    }

    /// Every lock of a session is free once the session ended: no acquire
    /// sent after its close was answered, or after its lease ran out at
    /// the latest plus [`session_end_margin_ms`] and its lock-delay (and
    /// plus the longest a copy of the lock or its session waited at a
    /// paused member, which its member counts from when it took it), is
    /// refused "held" by it.
    /// The close is excused by a rebuild that finished from the longest
    /// lease before the close to the refusal: a rebuilt table may take back
    /// a lock whose release some member did not hear of (its forget lost,
    /// or a copy of a renewal crossing the close), until the lease it had
    /// ends; the lapse is not excused.
    fn check_session_ends(&mut self) {
        let margin = session_end_margin_ms(self.config.max_delay_ms);
        let mut ends: BTreeMap<(&str, u64), (&crate::history::SessionEnd, u64)> = BTreeMap::new();
        for end in &self.history.session_ends {
            for (name, fence, delay_ms) in &end.locks {
                ends.insert((name, *fence), (end, *delay_ms));
            }
        }
        let rebuilds = &self.history.rebuilds;
        let (by_fence, by_id) = (
            &self.history.copies_waited,
            &self.history.copies_waited_by_id,
        );
        let report = &mut self.report;
        let mut violations = 0;
        for refused in &self.history.held_refusals {
            let Some(&(end, delay_ms)) = ends.get(&(refused.name.as_str(), refused.fence)) else {
                continue;
            };
            let (sent, answered) = (refused.sent, refused.answered);
            let rebuilt = |from: u64| rebuilds.iter().any(|&r| r >= from && r <= answered);
            let closed = end
                .closed
                .filter(|&c| sent >= c && !rebuilt(c.saturating_sub(MAX_LEASE_MS)));
            // A copy of the lock, or of its session (which a rebuild gives
            // the lock's end), that waited at a paused member ends that
            // much later there: the member counts it from when it took it.
            // A lapse leaves the name closed for the lock's delay.
            let waited = by_fence
                .get(&(refused.name.clone(), refused.fence))
                .copied()
                .max(by_id.get(&end.id).copied())
                .unwrap_or(0);
            let lapsed = end
                .lapsed_by
                .filter(|&l| sent >= l + margin + waited + delay_ms);
            let why = match (closed, lapsed) {
                (_, Some(l)) => format!("its lease ran out by {l} at the latest"),
                (Some(c), None) => format!("its close was answered at {c}"),
                (None, None) => continue,
            };
            push_capped(&mut report.session_locks_kept, &mut violations, || {
                format!(
                    "{}: fence {} of session {} refused an acquire sent at {sent} as its \
                     holder, though {why}",
                    refused.name, refused.fence, end.id
                )
            });
        }
        report.violations += violations;
    }

    /// No lock whose holder kept renewing is lost while fewer than
    /// `copies` members failed. A member failed if, at any time from the
    /// longest lease before the grant (a rebuild then under way may miss
    /// it) to the loss, it was faulted: crashed, paused, stopping, or at
    /// either end of a cut link. Reads the network lost are no excuse: a
    /// rebuild reads again a member it could not read.
    fn check_lost(&mut self) {
        let copies = self.config.copies;
        let report = &mut self.report;
        let mut violations = 0;
        for lost in &self.history.lost {
            let from = lost.granted.saturating_sub(MAX_LEASE_MS);
            let during = |start: u64, end: u64| start <= lost.lost && end >= from;
            let failed: BTreeSet<NodeId> = self
                .history
                .faults
                .iter()
                .filter(|(_, start, end)| during(*start, *end))
                .map(|(n, _, _)| *n)
                .collect();
            if failed.len() >= copies {
                report.excused_losses += 1;
                continue;
            }
            push_capped(&mut report.lost_locks, &mut violations, || {
                format!(
                    "{}: fence {} granted at {} through {:?} lost at {}, with only {:?} failed \
                     since {from} ({copies} copies)",
                    lost.name, lost.fence, lost.granted, lost.via, lost.lost, failed
                )
            });
        }
        report.violations += violations;
    }

    /// A leader was elected: node `n`, in `term`.
    pub(crate) fn elected(&mut self, n: NodeId, term: u64) {
        self.report.elections += 1;
        if self
            .history
            .newest
            .is_none_or(|(newest, _, _)| term > newest)
        {
            self.history.newest = Some((term, self.t, n));
        }
    }

    /// Node `n` granted from its table for `term`: a leader of a later
    /// term must not have been elected yet.
    pub(crate) fn granted(&mut self, n: NodeId, term: u64) {
        let t = self.t;
        self.note(|| format!("node {n} grants for term {term}"));
        if let Some((newest, elected, leader)) =
            self.history.newest.filter(|(newest, _, _)| *newest > term)
        {
            let report = &mut self.report;
            push_capped(&mut report.deposed_grants, &mut report.violations, || {
                format!(
                    "node {n} granted at {t} for term {term}, but node {leader} was elected in term {newest} at {elected}"
                )
            });
        }
    }

    /// Node `n`, at its tick: if it may grant, no leader of a later term
    /// may have been elected (the guard's premise). Counted once per node
    /// and term.
    pub(crate) fn check_guard(&mut self, n: NodeId) {
        let t = self.t;
        let guard = self.guard(n);
        let node = &self.nodes[&n];
        let Some(term) = node.member.speaking() else {
            return;
        };
        let Some((newest, elected, leader)) =
            self.history.newest.filter(|(newest, _, _)| *newest > term)
        else {
            return;
        };
        let may_grant = node.member.is_rebuilt() && node.member.may_speak(&guard, node.mono(t));
        if !may_grant || !self.history.deposed.insert((n, term)) {
            return;
        }
        let acked = node.raft.last_quorum_acked();
        let report = &mut self.report;
        push_capped(&mut report.deposed_speakers, &mut report.violations, || {
            format!(
                "node {n} may grant at {t} for term {term} (quorum acked {acked:?}), but node {leader} was elected in term {newest} at {elected}"
            )
        });
    }

    fn check_liveness(&mut self, bound: u64) {
        let Some(quiet) = self.quiet_since else {
            self.report
                .liveness
                .push("the faults never healed within the run".to_string());
            self.report.violations += 1;
            return;
        };
        for client in self.clients.iter().filter(|c| c.probe) {
            let n = client.node;
            match client.granted_at {
                Some(at) if at <= quiet + bound => {
                    self.report.liveness_ms = self.report.liveness_ms.max(at - quiet);
                }
                _ => {
                    self.report.violations += 1;
                    let why = self.why_not_served(n);
                    self.report.liveness.push(format!(
                        "node {n} served no grant within {bound} ms of the last fault healing at {quiet}: {why}"
                    ));
                }
            }
        }
    }

    /// Why node `n`'s clients are not served: what its Raft and its
    /// leader's speaker task are doing.
    fn why_not_served(&self, n: NodeId) -> String {
        let t = self.t;
        let node = &self.nodes[&n];
        if !node.raft.running() {
            return "its Raft does not run".to_string();
        }
        let Some(leader) = node.raft.current_leader() else {
            return format!("it knows no leader (term {})", node.raft.term());
        };
        let speaker = &self.nodes[&leader];
        let role = if leader == n {
            "it".to_string()
        } else {
            format!("its leader is node {leader}, which")
        };
        let term = speaker.raft.term();
        if speaker.raft.leader_term().is_none() {
            return format!("{role} does not lead any more (term {term})");
        }
        if speaker.member.is_rebuilt() {
            let guard = speaker.guard();
            let guard = if speaker.member.may_speak(&guard, speaker.mono(t)) {
                "open"
            } else {
                "closed"
            };
            return format!("{role} leads term {term} with its table rebuilt, guard {guard}");
        }
        let next = match speaker.lead.next_due() {
            Some(due) => format!("next attempt at {}", speaker.sim_ms(due)),
            None if speaker.attempt.is_some() => "an attempt under way".to_string(),
            None => "no attempt under way or due".to_string(),
        };
        format!(
            "{role} leads term {term} without a rebuilt table ({} rebuild attempts failed), {next}",
            speaker.lead.failures()
        )
    }
}
