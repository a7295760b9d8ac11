//! A hash table kept as [`SHARDS`] tables once it is large, each entry in
//! the one its hash picks: a table that grows rehashes every entry it holds
//! at once, and at a million locks that took the node's worker 0.23 s
//! (docs/benchmarks.md, "The table's growth"), past the grant guard's
//! window, while Raft's heartbeats waited. Split, a growth rehashes one
//! shard, a sixty-fourth of the entries. A small table stays one table (its
//! growth costs little), so it takes no more room than before.

use hashbrown::HashTable;

/// How many tables the entries of a large table are spread over.
pub(crate) const SHARDS: usize = 64;

/// Entries at which one table splits into [`SHARDS`]: growing one table of
/// that many takes about a millisecond.
pub(crate) const SPLIT_AT: usize = 1 << 14;

/// Room in one shard for its part of `more` entries: its even share and
/// enough beyond it that a uniform hash seldom leaves any shard short
/// (four standard deviations, and a few).
fn share(more: usize) -> usize {
    let even = more.div_ceil(SHARDS);
    even + 4 * even.isqrt() + 4
}

/// Entries of `T` found by their hash, in [`SHARDS`] tables.
#[derive(Debug, Clone)]
pub(crate) struct Sharded<T> {
    /// One table, or [`SHARDS`].
    shards: Vec<HashTable<T>>,
    len: usize,
}

impl<T> Default for Sharded<T> {
    fn default() -> Self {
        Sharded {
            shards: vec![HashTable::new()],
            len: 0,
        }
    }
}

impl<T> Sharded<T> {
    /// Entries kept.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Entries the tables hold room for, together.
    pub(crate) fn capacity(&self) -> usize {
        self.shards.iter().map(HashTable::capacity).sum()
    }

    /// Bytes the tables allocated.
    #[cfg(test)]
    pub(crate) fn allocation_size(&self) -> usize {
        self.shards.iter().map(HashTable::allocation_size).sum()
    }

    /// Whether the entries are spread over [`SHARDS`] tables.
    fn is_split(&self) -> bool {
        self.shards.len() > 1
    }

    /// The table `hash` belongs in: the only one, or the shard picked by
    /// bits the tables themselves do not place by (they use the low bits
    /// for the bucket and the top seven as the tag).
    fn shard(&self, hash: u64) -> usize {
        match self.is_split() {
            true => (hash >> 32) as usize % SHARDS,
            false => 0,
        }
    }

    /// Spreads the one table's entries over [`SHARDS`], each with room for
    /// its share of `room` entries.
    fn split(&mut self, room: usize, hasher: &impl Fn(&T) -> u64) {
        let one = std::mem::take(&mut self.shards);
        self.shards = (0..SHARDS)
            .map(|_| HashTable::with_capacity(share(room)))
            .collect();
        for value in one.into_iter().flatten() {
            let hash = hasher(&value);
            let at = self.shard(hash);
            self.shards[at].insert_unique(hash, value, hasher);
        }
    }

    /// Room for `more` entries beyond those kept (spread as a uniform hash
    /// spreads them, once split).
    pub(crate) fn reserve(&mut self, more: usize, hasher: impl Fn(&T) -> u64) {
        let room = self.len.saturating_add(more);
        if !self.is_split() && room <= SPLIT_AT {
            self.shards[0].reserve(more, hasher);
            return;
        }
        if !self.is_split() {
            self.split(room, &hasher);
        }
        let each = share(more);
        for table in self.shards.iter_mut() {
            table.reserve(each, &hasher);
        }
    }

    /// Gives back the room beyond `keep` entries (at least those kept).
    pub(crate) fn shrink_to(&mut self, keep: usize, hasher: impl Fn(&T) -> u64) {
        let each = match self.is_split() {
            true => share(keep),
            false => keep,
        };
        for table in self.shards.iter_mut() {
            table.shrink_to(each, &hasher);
        }
    }

    /// The entry of `hash` that `eq` takes.
    pub(crate) fn find(&self, hash: u64, eq: impl FnMut(&T) -> bool) -> Option<&T> {
        self.shards[self.shard(hash)].find(hash, eq)
    }

    /// The entry of `hash` that `eq` takes, to change.
    pub(crate) fn find_mut(&mut self, hash: u64, eq: impl FnMut(&T) -> bool) -> Option<&mut T> {
        let at = self.shard(hash);
        self.shards[at].find_mut(hash, eq)
    }

    /// Keeps `value`, which no entry equals, under `hash`.
    pub(crate) fn insert_unique(&mut self, hash: u64, value: T, hasher: impl Fn(&T) -> u64) {
        if !self.is_split() && self.len >= SPLIT_AT {
            self.split(self.len + 1, &hasher);
        }
        let at = self.shard(hash);
        self.shards[at].insert_unique(hash, value, hasher);
        self.len += 1;
    }

    /// Takes out the entry of `hash` that `eq` takes.
    pub(crate) fn remove(&mut self, hash: u64, eq: impl FnMut(&T) -> bool) -> Option<T> {
        let at = self.shard(hash);
        let (value, _) = self.shards[at].find_entry(hash, eq).ok()?.remove();
        self.len -= 1;
        Some(value)
    }

    /// Every entry, in no order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.shards.iter().flat_map(HashTable::iter)
    }

    /// Drops every entry, keeping the room.
    pub(crate) fn clear(&mut self) {
        for table in self.shards.iter_mut() {
            table.clear();
        }
        self.len = 0;
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use hashbrown::DefaultHashBuilder;

    use super::*;

    #[test]
    fn entries_are_found_where_they_were_put_and_spread_over_every_shard() {
        let hasher = DefaultHashBuilder::default();
        let hash = |v: &u64| hasher.hash_one(v);
        let mut t = Sharded::default();
        for v in 0..10_000u64 {
            t.insert_unique(hash(&v), v, hash);
        }
        assert!(!t.is_split(), "a small table is one");
        for v in 10_000..40_000u64 {
            t.insert_unique(hash(&v), v, hash);
        }
        assert_eq!(t.len(), 40_000);
        assert!(t.shards.len() == SHARDS, "split");
        assert!(t.shards.iter().all(|s| s.len() > 400), "spread");
        for v in (0..40_000u64).step_by(2) {
            assert_eq!(t.remove(hash(&v), |&e| e == v), Some(v));
        }
        assert_eq!(t.remove(hash(&0), |&e| e == 0), None);
        assert_eq!(t.len(), 20_000);
        assert_eq!(t.iter().count(), 20_000);
        assert!((1..40_000u64)
            .step_by(2)
            .all(|v| t.find(hash(&v), |&e| e == v) == Some(&v)));
        *t.find_mut(hash(&1), |&e| e == 1).unwrap() = 1;
        t.clear();
        assert_eq!((t.len(), t.iter().count()), (0, 0));
    }

    #[test]
    fn room_made_for_a_million_takes_them_without_growing() {
        let hasher = DefaultHashBuilder::default();
        let hash = |v: &u64| hasher.hash_one(v);
        let mut t = Sharded::default();
        t.reserve(1_000_000, hash);
        let room = t.allocation_size();
        for v in 0..1_000_000u64 {
            t.insert_unique(hash(&v), v, hash);
        }
        assert_eq!(t.allocation_size(), room);
        t.shrink_to(0, hash);
        assert_eq!(t.allocation_size(), room, "all kept still need it");
    }
}
