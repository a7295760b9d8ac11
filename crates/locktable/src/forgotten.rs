//! Released ids the speaker's table keeps from rebuilds ([`Forgotten`]).

use std::collections::VecDeque;

use hashbrown::HashMap;

use crate::lock::LockId;
use crate::time::MonoTime;

const NANOS_PER_SEC: u64 = 1_000_000_000;

/// Released ids and until when each is kept from rebuilds: until no node's
/// record of the released lease can still be live.
///
/// Ids are filed by the second their time is up in (a wheel of one-second
/// slots), so each is dropped within a second of its time whatever order
/// the ids came in: an id kept for a short lease is not held up behind one
/// kept for a long lease. Filing an id and pruning the ids due cost the same
/// however many are kept: each insert prunes a few due ids, and a poll
/// prunes what is left.
#[derive(Default)]
pub(crate) struct Forgotten {
    until: HashMap<LockId, MonoTime>,
    /// `slots[i]` holds ids whose time is up by the end of second
    /// `first + i` of the table's clock. An id kept longer since it was
    /// filed, or due past the last slot, is filed again when its slot comes
    /// up.
    slots: VecDeque<Vec<LockId>>,
    first: u64,
}

impl Forgotten {
    /// How many due ids an insert prunes: more than one, so pruning keeps up
    /// with inserts.
    const PRUNE_PER_INSERT: usize = 4;
    /// The most slots (seconds ahead) the wheel keeps: 68 minutes. An id
    /// due later waits in the last slot and is filed again from there.
    const MAX_SLOTS: u64 = 4096;

    /// Keeps `id` from rebuilds until `until` (or longer, if it was kept
    /// longer already).
    pub(crate) fn insert(&mut self, id: LockId, until: MonoTime, now: MonoTime) {
        self.prune(now, Self::PRUNE_PER_INSERT);
        if until <= now {
            return;
        }
        match self.until.entry(id) {
            hashbrown::hash_map::Entry::Occupied(mut e) => {
                // Filed already: its slot files it again when it comes up.
                if *e.get() < until {
                    e.insert(until);
                }
            }
            hashbrown::hash_map::Entry::Vacant(e) => {
                e.insert(until);
                self.file(id, until, now);
            }
        }
    }

    /// Files `id`, kept until `until` (later than `now`), in the slot of the
    /// second it is due in.
    fn file(&mut self, id: LockId, until: MonoTime, now: MonoTime) {
        if self.slots.is_empty() {
            self.first = now.as_nanos() / NANOS_PER_SEC + 1;
        }
        // `first` is at most the second after `now`'s, and `until` is later
        // than `now`: the id is due in `first` or after.
        let second = until.as_nanos().div_ceil(NANOS_PER_SEC).max(self.first);
        let at = (second - self.first).min(Self::MAX_SLOTS - 1) as usize;
        if at >= self.slots.len() {
            self.slots.resize_with(at + 1, Vec::new);
        }
        self.slots[at].push(id);
    }

    /// Whether `id` is kept from rebuilds at `now`.
    pub(crate) fn contains(&self, id: LockId, now: MonoTime) -> bool {
        self.until.get(&id).is_some_and(|&until| until > now)
    }

    /// How many ids are kept (some may be due, until pruned).
    pub(crate) fn len(&self) -> usize {
        self.until.len()
    }

    /// Every id kept and until when (some may be due, until pruned).
    pub(crate) fn until(&self) -> &HashMap<LockId, MonoTime> {
        &self.until
    }

    /// Drops up to `budget` ids whose time is up by `now`, oldest second
    /// first.
    pub(crate) fn prune(&mut self, now: MonoTime, budget: usize) {
        let due = now.as_nanos() / NANOS_PER_SEC;
        let mut left = budget;
        let mut later = Vec::new();
        while left > 0 && self.first <= due {
            let Some(slot) = self.slots.front_mut() else {
                break;
            };
            while left > 0 {
                let Some(id) = slot.pop() else {
                    break;
                };
                left -= 1;
                match self.until.get(&id) {
                    Some(&until) if until <= now => {
                        self.until.remove(&id);
                    }
                    Some(&until) => later.push((id, until)),
                    None => {}
                }
            }
            if slot.is_empty() {
                self.slots.pop_front();
                self.first += 1;
            }
        }
        for (id, until) in later {
            self.file(id, until, now);
        }
    }
}
