//! The seed's rule for locks two speakers granted apart: the one held the
//! longest is kept, the other is returned so its node can tell its client;
//! and the same rule for names held shared or as permits, where holders
//! that can be held together are all kept.

use std::collections::BTreeMap;

use hashbrown::hash_map::Entry;
use hashbrown::HashMap;

use crate::holders::Holders;
use crate::lock::{newer_data, Fence, Kind, Lock, LockId};
use crate::slots::Slot;
use crate::time::MonoTime;

/// Whether a lock acquired at `a` has been held longer than one acquired at
/// `b` (each with its fence and id): acquired earlier, and on a tie granted
/// first (lower fence), and on a tie the lower id, so every node settles the
/// same reports the same way.
fn held_longer(a: (MonoTime, Fence, LockId), b: (MonoTime, Fence, LockId)) -> bool {
    a < b
}

/// Which of two grants of one name a rebuild keeps (whether `a` is kept
/// over `b`).
///
/// - Of one term: the later (higher fence). One speaker's table grants a
///   name again only once its last grant ended; the earlier is a stale
///   record (a copy, or a `Held` a release has not reached yet).
/// - Of two terms, the later of which rebuilt having seen every grant
///   answered before it ([`Fence::seen_all`]): the later. That speaker
///   granted the name knowing every live lock of earlier terms, so the
///   earlier grant was never answered to its client (or had ended).
/// - Otherwise, two speakers granted apart: the seed's rule, the one held
///   longest.
fn kept_over(a: (MonoTime, Fence, LockId), b: (MonoTime, Fence, LockId)) -> bool {
    let (fa, fb) = (a.1, b.1);
    if fa.epoch() == fb.epoch() {
        return fa > fb;
    }
    let later = fa.max(fb);
    if later.seen_all() {
        return fa == later;
    }
    held_longer(a, b)
}

/// [`kept_over`], except that of two grants made apart, a live one is
/// kept over one whose lease lapsed (only its lock-delay left): nobody
/// holds the lapsed one, and the name was granted again meanwhile.
fn kept_over_live(
    a: ((MonoTime, Fence, LockId), bool),
    b: ((MonoTime, Fence, LockId), bool),
) -> bool {
    let ((a, a_lapsed), (b, b_lapsed)) = (a, b);
    let apart = a.1.epoch() != b.1.epoch() && !a.1.max(b.1).seen_all();
    if apart && a_lapsed != b_lapsed {
        return !a_lapsed;
    }
    kept_over(a, b)
}

fn age(lock: &Lock) -> (MonoTime, Fence, LockId) {
    (lock.acquired, lock.fence, lock.id)
}

/// Two reports of one grant (a renew moved its record, or the speaker and
/// the holder's node both report it): the latest lease counts, through the
/// node that renewed it last.
fn merge_report(into: &mut Lock, other: Lock) {
    into.acquired = into.acquired.min(other.acquired);
    if newer_data(
        (other.data_rev, other.expires),
        (into.data_rev, into.expires),
    ) {
        into.data = other.data;
        into.data_rev = other.data_rev;
    }
    if other.expires > into.expires {
        into.expires = other.expires;
        into.lease = other.lease;
        into.node = other.node;
    }
}

/// The locks the nodes report, taken in one report after another as they
/// arrive, into holders of their own.
///
/// Reports whose lease ended by the time they arrived, or whose id the
/// rebuild's `forgotten` names, are left out; a lease claimed longer than
/// the longest lease from its arrival is cut to it. A name only one grant
/// holds so far is settled at once (its reports merged); a name two grants
/// or more hold waits for [`Settler::finish`], at the end of the reads,
/// with every grant's reports merged by id: which of them is kept depends
/// on which leases are still live, or lapsed, then (a grant held the
/// longest whose lease ended before the reads did holds nothing, and must
/// not make a live one lose). Exclusively held names settle by
/// [`kept_over_live`], one grant after another in the order they came;
/// names some report holds shared or as permits by [`settle_name`].
#[derive(Debug, Default)]
pub(crate) struct Settler {
    holders: Holders,
    /// The names some report holds shared or as permits, with their
    /// reports. Ordered: the same reports settle alike in every process.
    shared: BTreeMap<String, Vec<Lock>>,
    /// The names held exclusively by two grants or more, with each grant's
    /// reports merged, in the order the grants came.
    contested: BTreeMap<String, Vec<Lock>>,
}

impl Settler {
    /// Room for about `more` reports beyond those taken in, taken at once
    /// rather than by growing.
    pub(crate) fn reserve(&mut self, more: usize) {
        self.holders.reserve(more);
    }

    #[cfg(test)]
    pub(crate) fn allocation(&self) -> usize {
        self.holders.allocation()
    }

    /// Takes in reports that arrived by `now`; a lease is cut to end by
    /// `latest_end`.
    pub(crate) fn add(
        &mut self,
        reports: impl IntoIterator<Item = Lock>,
        now: MonoTime,
        latest_end: MonoTime,
        forgotten: impl Fn(LockId) -> bool,
    ) {
        for mut report in reports {
            if !report.is_live(now) || forgotten(report.id) {
                continue;
            }
            report.expires = report.expires.min(latest_end);
            self.add_live(report);
        }
    }

    fn add_live(&mut self, report: Lock) {
        if !self.shared.is_empty() {
            if let Some(reports) = self.shared.get_mut(&report.name) {
                reports.push(report);
                return;
            }
        }
        if report.kind != Kind::Exclusive {
            let mut reports = self.contested.remove(&report.name).unwrap_or_default();
            if let Some(at) = self.holders.first(&report.name) {
                reports.push(self.holders.remove(at).expect("found").to_lock());
            }
            reports.push(report);
            self.shared.insert(reports[0].name.clone(), reports);
            return;
        }
        if !self.contested.is_empty() {
            if let Some(grants) = self.contested.get_mut(&report.name) {
                match grants.iter_mut().find(|g| g.id == report.id) {
                    Some(earlier) => merge_report(earlier, report),
                    None => grants.push(report),
                }
                return;
            }
        }
        let Some(at) = self.holders.first(&report.name) else {
            self.holders.insert(Slot::new(&report));
            return;
        };
        let slot = self.holders.get_mut(at).expect("found");
        if slot.id == report.id {
            slot.merge(&report);
            return;
        }
        let first = self.holders.remove(at).expect("found").to_lock();
        self.contested
            .insert(report.name.clone(), vec![first, report]);
    }

    /// Settles the names two grants or more hold, as of `now`, the end of
    /// the reads, and answers the holders kept and the locks that lost to
    /// one held longer, in id order.
    pub(crate) fn finish(self, now: MonoTime) -> (Holders, Vec<Lock>) {
        let Settler {
            mut holders,
            shared,
            contested,
        } = self;
        let mut lost: Vec<Lock> = Vec::new();
        let names = contested.into_values().chain(shared.into_values());
        for reports in names {
            let live = reports.into_iter().filter(|r| r.is_live(now)).collect();
            let (kept, lost_here) = settle_again(live, now);
            for lock in &kept {
                holders.insert(Slot::new(lock));
            }
            lost.extend(lost_here);
        }
        // In id order, not the map's: the same reports settle alike in
        // every process (a simulation's seed replays).
        lost.sort_unstable_by_key(|l| l.id);
        (holders, lost)
    }
}

/// Settles the live reports of one name as of `now`: held shared or as
/// permits by some, by [`settle_name`]; else one grant after another (the
/// reports of one merged) by [`kept_over_live`]. Answers the grants kept,
/// oldest first, and the ones lost.
pub(crate) fn settle_again(reports: Vec<Lock>, now: MonoTime) -> (Vec<Lock>, Vec<Lock>) {
    if reports.iter().any(|r| r.kind != Kind::Exclusive) {
        // The latest term that granted this name knowing every live grant
        // of it: a mark on another name says nothing of this one's
        // records (a rebuild that marked later grants may have missed a
        // record of this name left behind, which the next rebuild reads).
        let seen_all_term = reports
            .iter()
            .filter(|r| r.fence.seen_all())
            .map(|r| r.fence.epoch())
            .max()
            .unwrap_or(0);
        return settle_name(reports, seen_all_term);
    }
    let mut kept: Option<Lock> = None;
    let mut lost: Vec<Lock> = Vec::new();
    for report in reports {
        let Some(k) = kept.as_mut() else {
            kept = Some(report);
            continue;
        };
        if k.id == report.id {
            merge_report(k, report);
        } else if kept_over_live(
            (age(&report), report.is_lapsed(now)),
            (age(k), k.is_lapsed(now)),
        ) {
            lost.push(std::mem::replace(k, report));
        } else {
            lost.push(report);
        }
    }
    // A grant's reports merged into one lost record.
    let mut by_id: HashMap<LockId, Lock> = HashMap::new();
    for lock in lost {
        if kept.as_ref().is_some_and(|k| k.id == lock.id) {
            continue;
        }
        match by_id.entry(lock.id) {
            Entry::Occupied(mut e) => merge_report(e.get_mut(), lock),
            Entry::Vacant(e) => {
                e.insert(lock);
            }
        }
    }
    (kept.into_iter().collect(), by_id.into_values().collect())
}

/// The fences of one kind's grants of a name, as far as they make other
/// grants stale.
#[derive(Default)]
struct Superseding {
    /// The highest fence in each term.
    highest_in_term: HashMap<u64, Fence>,
    /// The latest term of a grant made having seen every earlier grant.
    seen_all_term: Option<u64>,
}

impl Superseding {
    fn add(&mut self, fence: Fence) {
        let highest = self.highest_in_term.entry(fence.epoch()).or_default();
        *highest = (*highest).max(fence);
        if fence.seen_all() {
            self.seen_all_term = self.seen_all_term.max(Some(fence.epoch()));
        }
    }

    /// Whether one of these grants was made after `fence`'s ended: later in
    /// its term (one table never holds two grants that cannot be held
    /// together), or in a later term that saw every grant before it.
    fn supersedes(&self, fence: Fence) -> bool {
        self.highest_in_term
            .get(&fence.epoch())
            .is_some_and(|&h| h > fence)
            || self.seen_all_term.is_some_and(|t| t > fence.epoch())
    }
}

/// Settles the reports of one name some of which hold it shared or as
/// permits; returns the grants kept, oldest first, and the ones lost.
///
/// - The reports of one grant are merged into one.
/// - A grant is stale, and lost, if a grant it cannot be held beside
///   supersedes it ([`Superseding::supersedes`]). Two grants that can be
///   held together make neither stale, whatever their count: nothing tells
///   a live one from a record left behind, and dropping a live one could
///   let the name be granted past its permits.
/// - The rest are kept in the order held longest first, each if it can be
///   held beside the ones kept, and within the name's count of permits
///   unless it is of `seen_all_term` (the latest term that saw every
///   earlier grant, which granted knowing the others) or every one kept is
///   of its own term (one table never held more than the permits, so
///   records of one term past the count hold a record left behind, a
///   release a copy missed, which nothing tells from the live ones). An
///   over-full name grants nothing until enough leases end, at most a
///   lease. A grant of a term before `seen_all_term` is counted as that
///   term's rebuild counted it, so a later rebuild settles it alike.
pub(crate) fn settle_name(reports: Vec<Lock>, seen_all_term: u64) -> (Vec<Lock>, Vec<Lock>) {
    let mut grants: Vec<Lock> = Vec::with_capacity(reports.len());
    let mut index: HashMap<LockId, usize> = HashMap::new();
    for report in reports {
        match index.entry(report.id) {
            Entry::Occupied(e) => merge_report(&mut grants[*e.get()], report),
            Entry::Vacant(e) => {
                e.insert(grants.len());
                grants.push(report);
            }
        }
    }
    let mut by_kind: HashMap<Kind, Superseding> = HashMap::new();
    for g in &grants {
        by_kind.entry(g.kind).or_default().add(g.fence);
    }
    let (mut live, mut lost): (Vec<Lock>, Vec<Lock>) = grants.into_iter().partition(|g| {
        !by_kind
            .iter()
            .any(|(&kind, later)| !g.kind.compatible(kind) && later.supersedes(g.fence))
    });
    live.sort_unstable_by_key(age);
    let mut kept: Vec<Lock> = Vec::with_capacity(live.len());
    for g in live {
        let beside = kept.first().is_none_or(|k| g.kind.compatible(k.kind));
        let term = g.fence.epoch();
        let counted = (seen_all_term > 0 && term == seen_all_term)
            || kept.len() < g.kind.limit() as usize
            || kept.iter().all(|k| k.fence.epoch() == term);
        if beside && counted {
            kept.push(g);
        } else {
            lost.push(g);
        }
    }
    (kept, lost)
}
