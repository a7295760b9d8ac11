//! The seed's rule for locks two speakers granted apart: the one held the
//! longest is kept, the other is returned so its node can tell its client.

use std::time::Duration;

use hashbrown::hash_map::Entry;
use hashbrown::HashMap;

use crate::lock::{newer_data, Fence, Lock, LockId};
use crate::slots::{Slot, Slots};
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

/// Settles the locks the nodes report into `slots`, which start empty, and
/// returns the locks that lost to one held longer.
///
/// Reports whose lease ended by `now`, or whose id `forgotten` names, are
/// left out; a lease claimed longer than `max_lease` from now is cut to it.
pub(crate) fn settle_into(
    slots: &mut Slots,
    reports: Vec<Lock>,
    now: MonoTime,
    max_lease: Duration,
    forgotten: impl Fn(LockId) -> bool,
) -> Vec<Lock> {
    let latest_end = now + max_lease;
    let mut lost: HashMap<LockId, Lock> = HashMap::new();
    let mut lose = |lock: Lock| match lost.entry(lock.id) {
        Entry::Occupied(mut e) => merge_report(e.get_mut(), lock),
        Entry::Vacant(e) => {
            e.insert(lock);
        }
    };
    for mut report in reports {
        if !report.is_live(now) || forgotten(report.id) {
            continue;
        }
        report.expires = report.expires.min(latest_end);
        let Some(at) = slots.find(&report.name) else {
            slots.insert(Slot::new(&report));
            continue;
        };
        let slot = slots.get_mut(at).expect("found");
        if slot.id == report.id {
            slot.merge(&report);
        } else if kept_over(age(&report), (slot.acquired, slot.fence, slot.id)) {
            let kept_before = slot.to_lock();
            *slot = Slot::new(&report);
            lose(kept_before);
        } else {
            lose(report);
        }
    }
    let mut lost: Vec<Lock> = lost
        .into_values()
        .filter(|l| {
            slots
                .find(&l.name)
                .and_then(|at| slots.get(at))
                .is_none_or(|s| s.id != l.id)
        })
        .collect();
    // In id order, not the map's: the same reports settle alike in every
    // process (a simulation's seed replays).
    lost.sort_unstable_by_key(|l| l.id);
    lost
}
