//! A binary heap kept as heaps of at most [`PART`] entries: one heap of a
//! million lease ends that doubles copies all of it at once (about 65 ms on
//! the node's worker, docs/benchmarks.md, "The table's growth"); a part
//! grows by at most 1.5 MB. The greatest entry is the greatest of the
//! parts' tops, a few dozen at a million entries.

use std::collections::BinaryHeap;

/// Entries a part holds at most.
pub(crate) const PART: usize = 1 << 16;

/// Entries of `T`, the greatest first out, as [`BinaryHeap`] gives them.
#[derive(Debug, Clone)]
pub(crate) struct PartedHeap<T> {
    /// No part is empty; new entries go to the last one until it is full.
    parts: Vec<BinaryHeap<T>>,
    part: usize,
    len: usize,
}

impl<T: Ord> Default for PartedHeap<T> {
    fn default() -> Self {
        Self::with_part(PART)
    }
}

impl<T: Ord> PartedHeap<T> {
    /// An empty heap whose parts hold at most `part` entries (at least 1).
    pub(crate) fn with_part(part: usize) -> Self {
        PartedHeap {
            parts: Vec::new(),
            part: part.max(1),
            len: 0,
        }
    }

    /// Entries kept.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Adds `entry`.
    pub(crate) fn push(&mut self, entry: T) {
        self.len += 1;
        if let Some(last) = self.parts.last_mut().filter(|l| l.len() < self.part) {
            last.push(entry);
            return;
        }
        // Parts emptied only in part (long leases among short ones) are
        // joined once they are twice as many as needed, so that finding
        // the top stays cheap.
        if self.parts.len() > 2 * (self.len / self.part) + 4 {
            self.join_parts();
        }
        let mut part = BinaryHeap::new();
        part.push(entry);
        self.parts.push(part);
    }

    /// The entries put into as few parts as hold them.
    fn join_parts(&mut self) {
        let entries: Vec<T> = std::mem::take(&mut self.parts)
            .into_iter()
            .flat_map(BinaryHeap::into_vec)
            .collect();
        let part = self.part;
        *self = PartedHeap::from_vec(entries, part);
    }

    /// The part whose top is the greatest entry, if any.
    fn top_part(&self) -> Option<usize> {
        (0..self.parts.len()).max_by(|&a, &b| self.parts[a].peek().cmp(&self.parts[b].peek()))
    }

    /// The greatest entry.
    pub(crate) fn peek(&self) -> Option<&T> {
        self.parts[self.top_part()?].peek()
    }

    /// Takes the greatest entry out.
    pub(crate) fn pop(&mut self) -> Option<T> {
        let at = self.top_part()?;
        let entry = self.parts[at].pop();
        if self.parts[at].is_empty() {
            self.parts.remove(at);
        }
        self.len -= 1;
        entry
    }

    /// Drops every entry.
    pub(crate) fn clear(&mut self) {
        self.parts.clear();
        self.len = 0;
    }

    /// The entries of `entries` in parts of at most `part`, each made at
    /// once (in linear time).
    fn from_vec(mut entries: Vec<T>, part: usize) -> Self {
        let mut heap = PartedHeap::with_part(part);
        heap.len = entries.len();
        while entries.len() > heap.part {
            let rest = entries.split_off(heap.part);
            heap.parts.push(BinaryHeap::from(entries));
            entries = rest;
        }
        if !entries.is_empty() {
            heap.parts.push(BinaryHeap::from(entries));
        }
        heap
    }
}

impl<T: Ord> Extend<T> for PartedHeap<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, entries: I) {
        for entry in entries {
            self.push(entry);
        }
    }
}

impl<T: Ord> From<Vec<T>> for PartedHeap<T> {
    /// The entries of `entries`, each part made at once (in linear time).
    fn from(entries: Vec<T>) -> Self {
        PartedHeap::from_vec(entries, PART)
    }
}

#[cfg(test)]
mod tests {
    use std::cmp::Reverse;

    use super::*;

    /// A few thousand entries in parts of 7, in a scrambled order, come
    /// out as a binary heap gives them, through pushes between pops.
    #[test]
    fn entries_come_out_greatest_first_across_parts() {
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % 1000
        };
        let mut parted = PartedHeap::with_part(7);
        let mut plain = BinaryHeap::new();
        for step in 0..5000 {
            if next() < 600 {
                let entry = Reverse((next(), step));
                parted.push(entry);
                plain.push(entry);
            } else {
                assert_eq!(parted.pop(), plain.pop(), "step {step}");
            }
            assert_eq!(parted.peek(), plain.peek());
            assert_eq!(parted.len(), plain.len());
            assert!(parted.parts.iter().all(|p| !p.is_empty() && p.len() <= 7));
        }
        while let Some(entry) = plain.pop() {
            assert_eq!(parted.pop(), Some(entry));
        }
        assert_eq!((parted.pop(), parted.len()), (None, 0));
    }

    /// Parts kept alive by one entry each are joined, not left to pile up.
    #[test]
    fn parts_emptied_in_part_are_joined() {
        let mut heap = PartedHeap::with_part(4);
        for round in 0..100u32 {
            // One long-lived entry (small: it comes out last), then three
            // short ones that come out at once.
            heap.push(Reverse(1_000_000 + round));
            for k in 0..3 {
                heap.push(Reverse(round * 10 + k));
            }
            for _ in 0..3 {
                heap.pop();
            }
            assert!(heap.parts.len() <= 2 * heap.len() / 4 + 5, "round {round}");
        }
        assert_eq!(heap.len(), 100);
        assert_eq!(heap.pop(), Some(Reverse(1_000_000)));
    }

    #[test]
    fn a_heap_made_from_a_vector_is_cut_into_parts() {
        let entries: Vec<u32> = (0..(2 * PART as u32 + 5)).rev().collect();
        let mut heap = PartedHeap::from(entries);
        assert_eq!(heap.parts.len(), 3);
        assert_eq!(heap.len(), 2 * PART + 5);
        assert_eq!(heap.pop(), Some(2 * PART as u32 + 4));
        heap.extend([u32::MAX, 0]);
        assert_eq!(heap.peek(), Some(&u32::MAX));
        heap.clear();
        assert_eq!(heap.peek(), None);
        assert!(PartedHeap::<u32>::from(Vec::new()).parts.is_empty());
    }
}
