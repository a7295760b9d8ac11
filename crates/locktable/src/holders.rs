//! The table's grants: each found by its id, and the holders of each name
//! in a ring, in the order they were put in (the oldest grant first).
//!
//! A name has one holder unless it is held shared or as permits; the ring
//! costs two slot numbers in each slot and a count per name, so finding,
//! adding and removing a holder stay O(1) however many share a name.

use std::hash::BuildHasher;

use hashbrown::DefaultHashBuilder;

use crate::lock::LockId;
use crate::sharded::Sharded;
use crate::slots::{ById, Slot, Slots};

/// The holders of one name: where its ring starts and how many are in it.
#[derive(Debug, Clone, Copy)]
struct NameEntry {
    head: u32,
    count: u32,
}

/// Grants kept in slots, found by id and by name.
#[derive(Debug, Clone, Default)]
pub(crate) struct Holders {
    slots: Slots<ById>,
    names: Sharded<NameEntry>,
    hasher: DefaultHashBuilder,
}

fn name_at(slots: &Slots<ById>, at: u32) -> &str {
    slots.get(at).expect("a named slot is occupied").name()
}

impl Holders {
    /// Room for `more` grants of as many names beyond those kept, taken at
    /// once rather than by growing.
    pub(crate) fn reserve(&mut self, more: usize) {
        self.slots.reserve(more);
        let Holders {
            slots,
            names,
            hasher,
        } = self;
        names.reserve(more, |e| hasher.hash_one(name_at(slots, e.head)));
    }

    /// Gives back room made far beyond the grants kept (more than four
    /// times as many, and more than a few thousand): room made for a count
    /// a member got wrong. Twice the grants kept are left room for.
    pub(crate) fn shrink_if_far_beyond(&mut self) {
        let kept = self.len();
        let over = kept.saturating_mul(4).max(1 << 12);
        let keep = kept.saturating_mul(2);
        self.slots.shrink_if_over(over, keep);
        let Holders {
            slots,
            names,
            hasher,
        } = self;
        if names.capacity() > over {
            names.shrink_to(keep, |e| hasher.hash_one(name_at(slots, e.head)));
        }
    }

    /// How many grants are kept.
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The bytes the grants' tables and slot vector take (their strings
    /// aside), room made included.
    #[cfg(test)]
    pub(crate) fn allocation(&self) -> usize {
        self.slots.allocation() + self.names.allocation_size()
    }

    /// How many names have a holder.
    #[cfg(test)]
    fn names(&self) -> usize {
        self.names.len()
    }

    /// The slot of the grant `id`.
    pub(crate) fn find(&self, id: &LockId) -> Option<u32> {
        self.slots.find(id)
    }

    pub(crate) fn get(&self, at: u32) -> Option<&Slot> {
        self.slots.get(at)
    }

    /// The slot at `at`, to change anything but its name and kind.
    pub(crate) fn get_mut(&mut self, at: u32) -> Option<&mut Slot> {
        self.slots.get_mut(at)
    }

    fn entry(&self, name: &str) -> Option<&NameEntry> {
        let slots = &self.slots;
        self.names.find(self.hasher.hash_one(name), |e| {
            name_at(slots, e.head) == name
        })
    }

    /// The oldest holder of `name` still kept.
    pub(crate) fn first(&self, name: &str) -> Option<u32> {
        self.entry(name).map(|e| e.head)
    }

    /// The oldest holder of `name` and how many hold it, in one lookup.
    pub(crate) fn held(&self, name: &str) -> Option<(u32, u32)> {
        self.entry(name).map(|e| (e.head, e.count))
    }

    /// The holders of `name`, oldest first.
    pub(crate) fn of_name(&self, name: &str) -> impl Iterator<Item = u32> + '_ {
        self.ring(self.first(name))
    }

    /// The holders of a name from its oldest, `head` (none: no holder).
    pub(crate) fn ring(&self, head: Option<u32>) -> impl Iterator<Item = u32> + '_ {
        let mut at = head;
        std::iter::from_fn(move || {
            let here = at?;
            let next = self.slots.get(here).expect("in a ring").next;
            at = (Some(next) != head).then_some(next);
            Some(here)
        })
    }

    /// Keeps `slot`, whose id is not kept yet, as the newest holder of its
    /// name, and says where.
    pub(crate) fn insert(&mut self, slot: Slot) -> u32 {
        let hash = self.hasher.hash_one(slot.name());
        let at = self.slots.insert(slot);
        let Holders {
            slots,
            names,
            hasher,
        } = self;
        let name = name_at(slots, at);
        let found = names.find_mut(hash, |e| name_at(slots, e.head) == name);
        match found {
            Some(entry) => {
                entry.count += 1;
                let head = entry.head;
                let tail = slots.get(head).expect("head").prev;
                slots.get_mut(tail).expect("tail").next = at;
                slots.get_mut(head).expect("head").prev = at;
                let new = slots.get_mut(at).expect("inserted");
                new.prev = tail;
                new.next = head;
            }
            None => {
                names.insert_unique(hash, NameEntry { head: at, count: 1 }, |e| {
                    hasher.hash_one(name_at(slots, e.head))
                });
                let new = slots.get_mut(at).expect("inserted");
                new.prev = at;
                new.next = at;
            }
        }
        at
    }

    /// Takes the grant at `at` out.
    pub(crate) fn remove(&mut self, at: u32) -> Option<Slot> {
        let Holders {
            slots,
            names,
            hasher,
        } = self;
        let slot = slots.get(at)?;
        let (prev, next) = (slot.prev, slot.next);
        let hash = hasher.hash_one(slot.name());
        if next == at {
            names
                .remove(hash, |e| e.head == at)
                .expect("a kept grant's name is indexed");
        } else {
            let name = slot.name();
            let entry = names
                .find_mut(hash, |e| name_at(slots, e.head) == name)
                .expect("a kept grant's name is indexed");
            entry.count -= 1;
            if entry.head == at {
                entry.head = next;
            }
            slots.get_mut(prev).expect("in a ring").next = next;
            slots.get_mut(next).expect("in a ring").prev = prev;
        }
        slots.remove(at)
    }

    /// The oldest holder of each name, in no order.
    pub(crate) fn heads(&self) -> impl Iterator<Item = u32> + '_ {
        self.names.iter().map(|e| e.head)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Slot> {
        self.slots.iter()
    }

    /// The kept grants with their slot numbers.
    pub(crate) fn numbered(&self) -> impl Iterator<Item = (u32, &Slot)> {
        self.slots.numbered()
    }

    pub(crate) fn clear(&mut self) {
        self.slots.clear();
        self.names.clear();
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::lock::{Fence, Kind, Lock};
    use crate::time::MonoTime;

    fn slot(name: &str, id: u128) -> Slot {
        Slot::new(&Lock {
            session: Default::default(),
            delay: Default::default(),
            name: name.into(),
            id: LockId::from_u128(id),
            node: 1,
            holder: String::new(),
            fence: Fence::new(1, id as u64),
            kind: Kind::Shared,
            lease: Duration::from_secs(1),
            acquired: MonoTime::from_nanos(1),
            expires: MonoTime::from_nanos(2),
            data: None,
            data_rev: 0,
        })
    }

    fn ids(h: &Holders, name: &str) -> Vec<u128> {
        h.of_name(name)
            .map(|at| h.get(at).unwrap().id.as_u128())
            .collect()
    }

    /// Past the size where the indexes split into shards and the slots
    /// fill several chunks, every grant is still found by id and by name,
    /// through removals, reuse of freed slots, and a shrink.
    #[test]
    fn grants_stay_found_past_the_split_and_across_chunks() {
        let n: u128 = 3 * crate::sharded::SPLIT_AT as u128;
        let mut h = Holders::default();
        for id in 1..=n {
            h.insert(slot(&format!("n{}", id % (n / 2)), id));
        }
        let removed = |id: u128| id % 3 == 0;
        for id in (1..=n).filter(|&id| removed(id)) {
            let at = h.find(&LockId::from_u128(id)).expect("kept");
            assert_eq!(h.remove(at).unwrap().id.as_u128(), id);
        }
        h.shrink_if_far_beyond();
        for id in n + 1..=n + n / 3 {
            h.insert(slot(&format!("m{id}"), id));
        }
        for id in 1..=n + n / 3 {
            let at = h.find(&LockId::from_u128(id));
            assert_eq!(at.is_none(), id <= n && removed(id), "{id}");
            if let Some(at) = at {
                let name = h.get(at).unwrap().name().to_string();
                assert!(ids(&h, &name).contains(&id), "{id} found by {name}");
            }
        }
        let by_name: usize = (0..n / 2).map(|k| ids(&h, &format!("n{k}")).len()).sum();
        assert_eq!(by_name as u128, n - n / 3);
        assert_eq!(h.names(), h.heads().count());
    }

    #[test]
    fn holders_of_a_name_keep_their_order_through_removals() {
        let mut h = Holders::default();
        let a1 = h.insert(slot("a", 1));
        let _b = h.insert(slot("b", 2));
        let a3 = h.insert(slot("a", 3));
        let _a4 = h.insert(slot("a", 4));
        assert_eq!(ids(&h, "a"), [1, 3, 4]);
        let count = |name| h.held(name).map_or(0, |(_, n)| n);
        assert_eq!((count("a"), count("b"), count("c")), (3, 1, 0));
        assert_eq!(h.names(), 2);
        h.remove(a3).unwrap();
        assert_eq!(ids(&h, "a"), [1, 4]);
        h.remove(a1).unwrap();
        assert_eq!(ids(&h, "a"), [4]);
        assert_eq!(h.find(&LockId::from_u128(4)), h.first("a"));
        let a5 = h.insert(slot("a", 5));
        assert_eq!(ids(&h, "a"), [4, 5]);
        h.remove(h.first("a").unwrap()).unwrap();
        h.remove(a5).unwrap();
        assert_eq!(ids(&h, "a"), Vec::<u128>::new());
        assert_eq!((h.names(), h.len()), (1, 1));
        assert!(h.find(&LockId::from_u128(1)).is_none());
        assert_eq!(ids(&h, "b"), [2]);
    }

    /// Room made between inserts and removals (the free list partly used,
    /// tombstones in both tables, rehashes over occupied slots) leaves
    /// every grant found by id and by name, each name's ring in order, and
    /// takes no growth for the room asked.
    #[test]
    fn room_made_between_inserts_and_removals_keeps_every_grant_found() {
        let mut h = Holders::default();
        let mut model: Vec<(u128, String)> = Vec::new();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut id = 0u128;
        for step in 0..20_000 {
            match next() % 10 {
                0 => {
                    let more = (next() % 3000) as usize;
                    h.reserve(more);
                    // Room for `more` new grants of new names: none of
                    // them moves a slot or the vector.
                    let before = h.slots.slots_ptr();
                    let cap = h.slots.slots_capacity();
                    let tables = (h.slots.index_allocation(), h.names.allocation_size());
                    let mut added = Vec::new();
                    for _ in 0..more.min(50) {
                        id += 1;
                        let name = format!("n{id}");
                        h.insert(slot(&name, id));
                        added.push((id, name));
                    }
                    if more >= 50 {
                        assert_eq!(h.slots.slots_ptr(), before, "step {step}");
                        assert_eq!(h.slots.slots_capacity(), cap, "step {step}");
                        let now = (h.slots.index_allocation(), h.names.allocation_size());
                        assert_eq!(now, tables, "step {step}");
                    }
                    model.extend(added);
                }
                1..=5 => {
                    id += 1;
                    // A few names held by many.
                    let name = format!("n{}", next() % 400);
                    h.insert(slot(&name, id));
                    model.push((id, name));
                }
                _ => {
                    if model.is_empty() {
                        continue;
                    }
                    let k = (next() as usize) % model.len();
                    let (gone, _) = model.swap_remove(k);
                    let at = h.find(&LockId::from_u128(gone)).expect("kept");
                    assert_eq!(h.remove(at).unwrap().id.as_u128(), gone);
                }
            }
        }
        assert_eq!(h.len(), model.len());
        let mut by_name: std::collections::BTreeMap<&str, Vec<u128>> = Default::default();
        for (id, name) in &model {
            let at = h.find(&LockId::from_u128(*id)).expect("found by id");
            assert_eq!(h.get(at).unwrap().name(), name);
            by_name.entry(name).or_default().push(*id);
        }
        for (name, mut ids_of) in by_name {
            let mut found = ids(&h, name);
            assert_eq!(h.held(name).unwrap().1 as usize, found.len());
            found.sort_unstable();
            ids_of.sort_unstable();
            assert_eq!(found, ids_of, "{name}");
        }
        assert_eq!(h.names(), h.heads().count());
    }
}
