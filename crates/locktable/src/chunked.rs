//! A vector kept in chunks of [`CHUNK`] items: growing it adds a chunk and
//! moves nothing. One vector of a million slots that doubles copies 100 MB
//! at once (0.25 to 0.32 s on the node's worker under its allocator,
//! docs/benchmarks.md, "The table's growth"); a chunk is 400 KB.

use std::ops::{Index, IndexMut};

/// Items a chunk holds.
pub(crate) const CHUNK: usize = 1 << 12;

/// Items in order, numbered from 0, in chunks of [`CHUNK`]: every chunk
/// before the one the next item goes to is full, and those after it, if
/// any, are room made and empty.
#[derive(Debug, Clone)]
pub(crate) struct Chunked<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Chunked<T> {
    /// Items kept.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Items the chunks hold room for, together.
    pub(crate) fn capacity(&self) -> usize {
        self.chunks.iter().map(Vec::capacity).sum()
    }

    /// Appends `item`.
    pub(crate) fn push(&mut self, item: T) {
        let at = self.len / CHUNK;
        if at == self.chunks.len() {
            self.chunks.push(Vec::new());
        }
        let chunk = &mut self.chunks[at];
        if chunk.len() == chunk.capacity() {
            // Doubling, but never past a chunk (room made may have left an
            // odd capacity).
            let more = chunk.len().max(4).min(CHUNK - chunk.len());
            chunk.reserve_exact(more);
        }
        chunk.push(item);
        self.len += 1;
    }

    /// The item numbered `at`, if there is one.
    pub(crate) fn get(&self, at: usize) -> Option<&T> {
        self.chunks.get(at / CHUNK)?.get(at % CHUNK)
    }

    /// The item numbered `at`, to change, if there is one.
    pub(crate) fn get_mut(&mut self, at: usize) -> Option<&mut T> {
        self.chunks.get_mut(at / CHUNK)?.get_mut(at % CHUNK)
    }

    /// Room for `more` items beyond those kept, made now.
    pub(crate) fn reserve(&mut self, more: usize) {
        let want = self.len.saturating_add(more);
        let mut at = self.len / CHUNK;
        while at * CHUNK < want {
            if at == self.chunks.len() {
                self.chunks.push(Vec::new());
            }
            let chunk = &mut self.chunks[at];
            let fill = (want - at * CHUNK).min(CHUNK);
            chunk.reserve_exact(fill.saturating_sub(chunk.len()));
            at += 1;
        }
    }

    /// Gives back the room beyond `keep` items (at least those kept).
    pub(crate) fn shrink_to(&mut self, keep: usize) {
        let need = keep.max(self.len);
        let chunks = need.div_ceil(CHUNK);
        if chunks > self.chunks.len() {
            return;
        }
        self.chunks.truncate(chunks);
        if let Some(last) = self.chunks.last_mut() {
            last.shrink_to(need - (chunks - 1) * CHUNK);
        }
    }

    /// Every item, in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &T> {
        self.chunks.iter().flatten()
    }

    /// Drops every item, keeping the room.
    pub(crate) fn clear(&mut self) {
        for chunk in &mut self.chunks {
            chunk.clear();
        }
        self.len = 0;
    }

    /// Where the first chunk's items are.
    #[cfg(test)]
    pub(crate) fn as_ptr(&self) -> *const T {
        self.chunks.first().map_or(std::ptr::null(), |c| c.as_ptr())
    }
}

impl<T> Index<usize> for Chunked<T> {
    type Output = T;

    fn index(&self, at: usize) -> &T {
        self.get(at).expect("an item numbered below the length")
    }
}

impl<T> IndexMut<usize> for Chunked<T> {
    fn index_mut(&mut self, at: usize) -> &mut T {
        self.get_mut(at).expect("an item numbered below the length")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_keep_their_numbers_and_places_as_it_grows() {
        let mut v = Chunked::default();
        for i in 0..3 * CHUNK + 5 {
            v.push(i);
        }
        let first = v.as_ptr();
        for i in 3 * CHUNK + 5..5 * CHUNK {
            v.push(i);
        }
        assert_eq!(v.as_ptr(), first, "nothing moved");
        assert_eq!(v.len(), 5 * CHUNK);
        assert!((0..5 * CHUNK).all(|i| v[i] == i && v.get(i) == Some(&i)));
        assert_eq!(v.get(5 * CHUNK), None);
        v[7] = 70;
        assert_eq!(v.iter().copied().nth(7), Some(70));
        assert_eq!(v.iter().count(), 5 * CHUNK);
    }

    #[test]
    fn room_made_is_taken_without_growing_and_given_back() {
        let mut v = Chunked::default();
        for i in 0..10 {
            v.push(i);
        }
        v.reserve(2 * CHUNK + 100);
        let room = v.capacity();
        assert!(room >= 2 * CHUNK + 110);
        for i in 10..2 * CHUNK + 110 {
            v.push(i);
        }
        assert_eq!(v.capacity(), room, "no chunk grew");
        v.shrink_to(0);
        assert_eq!(v.capacity(), 2 * CHUNK + 110, "only what is kept");
        v.clear();
        assert_eq!((v.len(), v.iter().count()), (0, 0));
        assert_eq!(v.capacity(), 2 * CHUNK + 110, "the room stays");
        v.shrink_to(CHUNK / 2);
        assert_eq!(v.capacity(), CHUNK / 2);
        v.push(1);
        assert_eq!(v[0], 1);
        v.shrink_to(3 * CHUNK);
        assert_eq!(v.capacity(), CHUNK / 2, "no room made, none taken");
    }

    #[test]
    fn a_chunk_never_grows_past_its_size() {
        let mut v = Chunked::default();
        v.reserve(3000);
        for i in 0..2 * CHUNK {
            v.push(i);
        }
        assert_eq!(v.capacity(), 2 * CHUNK);
    }
}
