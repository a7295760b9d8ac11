//! Compact storage of locks: the table's, indexed by name, and a node's
//! `Held`, indexed by id.
//!
//! A million held locks must fit in a couple of hundred megabytes, so a lock
//! is kept as one 96-byte slot whose strings (name, holder, data) share one
//! allocation, in a vector (in chunks) indexed by a hash table of slot
//! numbers (in shards).

use std::fmt::Debug;
use std::hash::{BuildHasher, Hash};
use std::marker::PhantomData;
use std::time::Duration;

use hashbrown::DefaultHashBuilder;

use crate::chunked::Chunked;
use crate::lock::{newer_data, Fence, Kind, Lock, LockId, NodeId};
use crate::sharded::Sharded;
use crate::time::MonoTime;

/// One lock as the table (or a `Held`) keeps it.
#[derive(Debug, Clone)]
pub(crate) struct Slot {
    /// The name, then the holder, then the session's id (26 characters, if
    /// the lock hangs off one), then the data, end to end.
    text: Box<str>,
    name_len: u16,
    holder_len: u16,
    /// The data's revision, shifted left by two; bit 1 says whether there
    /// is a session, bit 0 whether there is data (one field keeps the slot
    /// small).
    data_bits: u32,
    /// The grant's kind ([`Kind::to_bits`]).
    kind_bits: u32,
    /// The grant's lock-delay in milliseconds (at most a minute).
    delay_ms: u32,
    /// The slots before and after this one among the holders of its name,
    /// in a ring ([`crate::holders::Holders`]); unused elsewhere.
    pub(crate) prev: u32,
    pub(crate) next: u32,
    pub(crate) id: LockId,
    pub(crate) node: NodeId,
    pub(crate) fence: Fence,
    /// The lease in nanoseconds (a `Duration` would take twice the room).
    lease_nanos: u64,
    pub(crate) acquired: MonoTime,
    pub(crate) expires: MonoTime,
}

/// Longest name, holder or data a slot can keep (the API allows less).
pub(crate) const MAX_FIELD: usize = u16::MAX as usize;

impl Slot {
    /// The slot of `lock`. Fields longer than [`MAX_FIELD`] are cut at a
    /// character boundary; callers validate lengths before.
    pub(crate) fn new(lock: &Lock) -> Slot {
        let name = clip(&lock.name);
        let holder = clip(&lock.holder);
        let data = lock.data.as_deref().map(clip);
        let session = lock.session.map(|s| s.to_string());
        let session = session.as_deref().unwrap_or("");
        let mut text = String::with_capacity(
            name.len() + holder.len() + session.len() + data.map_or(0, str::len),
        );
        text.push_str(name);
        text.push_str(holder);
        text.push_str(session);
        text.push_str(data.unwrap_or(""));
        Slot {
            text: text.into_boxed_str(),
            name_len: name.len() as u16,
            holder_len: holder.len() as u16,
            data_bits: data_bits(lock.data_rev, lock.session.is_some(), data.is_some()),
            kind_bits: lock.kind.to_bits(),
            delay_ms: u32::try_from(lock.delay.as_millis()).unwrap_or(u32::MAX),
            prev: u32::MAX,
            next: u32::MAX,
            id: lock.id,
            node: lock.node,
            fence: lock.fence,
            lease_nanos: nanos(lock.lease),
            acquired: lock.acquired,
            expires: lock.expires,
        }
    }

    pub(crate) fn lease(&self) -> Duration {
        Duration::from_nanos(self.lease_nanos)
    }

    /// The grant's lock-delay.
    pub(crate) fn delay(&self) -> Duration {
        Duration::from_millis(u64::from(self.delay_ms))
    }

    /// When the holder's lease ends ([`Lock::lease_ends`]).
    pub(crate) fn lease_ends(&self) -> MonoTime {
        self.expires - self.delay()
    }

    /// Whether the holder's lease ran out at `now` ([`Lock::is_lapsed`]).
    pub(crate) fn is_lapsed(&self, now: MonoTime) -> bool {
        now >= self.lease_ends()
    }

    /// Restarts the lease: `lease` long from `now`, the lock-delay after it.
    pub(crate) fn restart(&mut self, lease: Duration, now: MonoTime) {
        self.lease_nanos = nanos(lease);
        self.expires = now + lease + self.delay();
    }

    /// Takes the lease of `session`, the session the lock hangs off, just
    /// renewed: the lock's lease ends with the session's, and its own
    /// lock-delay follows (the session's record may carry another).
    pub(crate) fn follow(&mut self, session: &Lock) {
        self.lease_nanos = nanos(session.lease);
        self.expires = session.lease_ends() + self.delay();
    }

    /// [`Slot::follow`]s `session` if the lock's lease ends before the
    /// session's: says whether it did.
    pub(crate) fn follow_if_later(&mut self, session: &Lock) -> bool {
        if self.lease_ends() >= session.lease_ends() {
            return false;
        }
        self.follow(session);
        true
    }

    /// Takes in another report of the same grant: the earliest start, the
    /// latest lease end through the node that reported it, and the newer
    /// data ([`newer_data`]).
    pub(crate) fn merge(&mut self, other: &Lock) {
        debug_assert_eq!(self.id, other.id);
        self.acquired = self.acquired.min(other.acquired);
        let newer = newer_data(
            (other.data_rev, other.expires),
            (self.data_rev(), self.expires),
        );
        if newer && (other.data_rev, other.data.as_deref()) != (self.data_rev(), self.data()) {
            self.put_data(other.data.as_deref(), other.data_rev);
        }
        if other.expires > self.expires {
            self.lease_nanos = nanos(other.lease);
            self.expires = other.expires;
            self.node = other.node;
        }
    }

    /// Keeps `data` in place of the data kept so far, one revision on.
    pub(crate) fn set_data(&mut self, data: Option<&str>) {
        self.put_data(data, self.data_rev().saturating_add(1));
    }

    fn put_data(&mut self, data: Option<&str>, rev: u32) {
        let data = data.map(clip);
        let kept = self.data_start();
        let mut text = String::with_capacity(kept + data.map_or(0, str::len));
        text.push_str(&self.text[..kept]);
        text.push_str(data.unwrap_or(""));
        self.text = text.into_boxed_str();
        self.data_bits = data_bits(rev, self.has_session(), data.is_some());
    }

    /// The data's revision.
    pub(crate) fn data_rev(&self) -> u32 {
        self.data_bits >> 2
    }

    fn has_session(&self) -> bool {
        self.data_bits & 2 != 0
    }

    /// Where the data starts in the text: after the name, the holder and
    /// the session.
    fn data_start(&self) -> usize {
        let session = if self.has_session() { SESSION_LEN } else { 0 };
        self.name_len as usize + self.holder_len as usize + session
    }

    /// The session the lock hangs off ([`Lock::session`]).
    pub(crate) fn session(&self) -> Option<LockId> {
        if !self.has_session() {
            return None;
        }
        let start = self.name_len as usize + self.holder_len as usize;
        self.text[start..start + SESSION_LEN].parse().ok()
    }

    pub(crate) fn name(&self) -> &str {
        &self.text[..self.name_len as usize]
    }

    pub(crate) fn holder(&self) -> &str {
        let start = self.name_len as usize;
        &self.text[start..start + self.holder_len as usize]
    }

    pub(crate) fn data(&self) -> Option<&str> {
        (self.data_bits & 1 == 1).then(|| &self.text[self.data_start()..])
    }

    /// What the grant holds of its name.
    pub(crate) fn kind(&self) -> Kind {
        Kind::from_bits(self.kind_bits)
    }

    pub(crate) fn is_live(&self, now: MonoTime) -> bool {
        now < self.expires
    }

    pub(crate) fn to_lock(&self) -> Lock {
        Lock {
            name: self.name().to_owned(),
            id: self.id,
            node: self.node,
            holder: self.holder().to_owned(),
            fence: self.fence,
            kind: self.kind(),
            lease: self.lease(),
            delay: self.delay(),
            acquired: self.acquired,
            expires: self.expires,
            data: self.data().map(str::to_owned),
            data_rev: self.data_rev(),
            session: self.session(),
        }
    }
}

/// The length of a lock id as text.
const SESSION_LEN: usize = 26;

/// A revision (at most `u32::MAX >> 2`), whether there is a session and
/// whether there is data, in one field.
fn data_bits(rev: u32, has_session: bool, has_data: bool) -> u32 {
    (rev.min(u32::MAX >> 2) << 2) | (u32::from(has_session) << 1) | u32::from(has_data)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn clip(s: &str) -> &str {
    if s.len() <= MAX_FIELD {
        return s;
    }
    let mut end = MAX_FIELD;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// What a set of slots is found by: at most one slot per key.
pub(crate) trait SlotKey: Debug + Clone + Default {
    /// The key, as borrowed from a slot.
    type Key: ?Sized + Hash + Eq;
    /// The key of `slot`.
    fn key(slot: &Slot) -> &Self::Key;
}

/// Slots found by name: the table's (one lock per name).
#[derive(Debug, Clone, Default)]
pub(crate) struct ByName;

impl SlotKey for ByName {
    type Key = str;
    fn key(slot: &Slot) -> &str {
        slot.name()
    }
}

/// Slots found by lock id: a node's `Held` (which may briefly keep two
/// grants of one name).
#[derive(Debug, Clone, Default)]
pub(crate) struct ById;

impl SlotKey for ById {
    type Key = LockId;
    fn key(slot: &Slot) -> &LockId {
        &slot.id
    }
}

/// Locks kept in slots, found by their key `K` (by name unless said).
#[derive(Debug, Clone, Default)]
pub(crate) struct Slots<K: SlotKey = ByName> {
    slots: Chunked<Option<Slot>>,
    free: Vec<u32>,
    index: Sharded<u32>,
    hasher: DefaultHashBuilder,
    by: PhantomData<K>,
}

impl<K: SlotKey> Slots<K> {
    pub(crate) fn len(&self) -> usize {
        self.index.len()
    }

    /// Room for `more` locks beyond those kept, taken at once rather than
    /// by growing.
    pub(crate) fn reserve(&mut self, more: usize) {
        self.slots.reserve(more.saturating_sub(self.free.len()));
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.index
            .reserve(more, |&i| hasher.hash_one(indexed_key::<K>(slots, i)));
    }

    /// Gives back the room beyond `keep` locks (at least those kept), if
    /// more than `over` was made.
    pub(crate) fn shrink_if_over(&mut self, over: usize, keep: usize) {
        if self.slots.capacity() > over {
            self.slots.shrink_to(keep);
        }
        if self.index.capacity() > over {
            let (slots, hasher) = (&self.slots, &self.hasher);
            self.index
                .shrink_to(keep, |&i| hasher.hash_one(indexed_key::<K>(slots, i)));
        }
    }

    #[cfg(test)]
    pub(crate) fn slots_ptr(&self) -> *const Option<Slot> {
        self.slots.as_ptr()
    }

    #[cfg(test)]
    pub(crate) fn slots_capacity(&self) -> usize {
        self.slots.capacity()
    }

    #[cfg(test)]
    pub(crate) fn allocation(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Option<Slot>>()
            + self.free.capacity() * 4
            + self.index.allocation_size()
    }

    #[cfg(test)]
    pub(crate) fn index_allocation(&self) -> usize {
        self.index.allocation_size()
    }

    fn hash(&self, key: &K::Key) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The slot number of the lock whose key is `key`.
    pub(crate) fn find(&self, key: &K::Key) -> Option<u32> {
        let slots = &self.slots;
        self.index
            .find(self.hash(key), |&i| slot_key::<K>(slots, i) == Some(key))
            .copied()
    }

    pub(crate) fn get(&self, at: u32) -> Option<&Slot> {
        self.slots.get(at as usize).and_then(Option::as_ref)
    }

    pub(crate) fn get_mut(&mut self, at: u32) -> Option<&mut Slot> {
        self.slots.get_mut(at as usize).and_then(Option::as_mut)
    }

    /// Keeps `slot`, whose key no slot holds yet, and says where.
    pub(crate) fn insert(&mut self, slot: Slot) -> u32 {
        debug_assert!(self.find(K::key(&slot)).is_none());
        let hash = self.hash(K::key(&slot));
        let at = match self.free.pop() {
            Some(at) => {
                self.slots[at as usize] = Some(slot);
                at
            }
            None => {
                self.slots.push(Some(slot));
                u32::try_from(self.slots.len() - 1).expect("fewer than 2^32 locks")
            }
        };
        let (slots, hasher) = (&self.slots, &self.hasher);
        self.index
            .insert_unique(hash, at, |&i| hasher.hash_one(indexed_key::<K>(slots, i)));
        at
    }

    /// Takes the slot at `at` out.
    pub(crate) fn remove(&mut self, at: u32) -> Option<Slot> {
        let key_hash = self.hash(K::key(self.get(at)?));
        self.index
            .remove(key_hash, |&i| i == at)
            .expect("an occupied slot is indexed");
        self.free.push(at);
        self.slots[at as usize].take()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Slot> {
        self.slots.iter().flatten()
    }

    /// The occupied slots with their numbers.
    pub(crate) fn numbered(&self) -> impl Iterator<Item = (u32, &Slot)> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(at, s)| s.as_ref().map(|s| (at as u32, s)))
    }

    pub(crate) fn clear(&mut self) {
        self.slots.clear();
        self.free.clear();
        self.index.clear();
    }
}

/// The key of the slot at `at`, if occupied.
fn slot_key<K: SlotKey>(slots: &Chunked<Option<Slot>>, at: u32) -> Option<&K::Key> {
    slots[at as usize].as_ref().map(K::key)
}

/// The key of the slot at `at`, which the index names (so it is occupied:
/// a slot leaves the index before it is emptied).
fn indexed_key<K: SlotKey>(slots: &Chunked<Option<Slot>>, at: u32) -> &K::Key {
    slot_key::<K>(slots, at).expect("an indexed slot is occupied")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(name: &str, holder: &str, data: Option<&str>) -> Lock {
        Lock {
            session: Default::default(),
            delay: Default::default(),
            name: name.into(),
            id: LockId::from_u128(7),
            node: 2,
            holder: holder.into(),
            fence: Fence::new(1, 1),
            kind: Kind::Exclusive,
            lease: Duration::from_secs(1),
            acquired: MonoTime::from_nanos(1),
            expires: MonoTime::from_nanos(2),
            data: data.map(Into::into),
            data_rev: 0,
        }
    }

    #[test]
    fn a_slot_gives_back_the_lock_it_was_made_of() {
        for l in [
            lock("jobs/42", "worker-7", Some("x")),
            lock("é", "", None),
            lock("n", "", Some("")),
        ] {
            assert_eq!(Slot::new(&l).to_lock(), l);
        }
        let shared = Lock {
            kind: Kind::Shared,
            ..lock("s", "", None)
        };
        let permit = Lock {
            kind: Kind::Permit(3),
            ..lock("p", "", None)
        };
        assert_eq!(Slot::new(&shared).to_lock(), shared);
        assert_eq!(Slot::new(&permit).to_lock(), permit);
        let in_session = Lock {
            session: Some(LockId::from_u128(u128::MAX >> 1)),
            ..lock("t", "h", Some("d"))
        };
        let mut slot = Slot::new(&in_session);
        assert_eq!(slot.to_lock(), in_session);
        slot.set_data(Some("e"));
        assert_eq!(slot.session(), in_session.session);
        assert_eq!((slot.data(), slot.data_rev()), (Some("e"), 1));
        assert_eq!(std::mem::size_of::<Slot>(), 96);
    }

    #[test]
    fn slots_are_found_by_name_and_reused() {
        let mut slots: Slots = Slots::default();
        let a = slots.insert(Slot::new(&lock("a", "", None)));
        let b = slots.insert(Slot::new(&lock("b", "", None)));
        assert_eq!(slots.find("a"), Some(a));
        assert_eq!(slots.find("b"), Some(b));
        assert_eq!(slots.remove(a).unwrap().name(), "a");
        assert_eq!(slots.find("a"), None);
        assert_eq!(slots.len(), 1);
        let c = slots.insert(Slot::new(&lock("c", "", None)));
        assert_eq!(c, a, "the freed slot is reused");
        assert_eq!(slots.find("c"), Some(c));
        assert_eq!(slots.find("b"), Some(b));
        assert!(slots.remove(a).is_some());
        assert!(slots.remove(a).is_none());
    }
}
