//! Sessions: one lease that many locks hang off.
//!
//! A session is itself a grant, exclusive, under a name of its own that no
//! client can ask for ([`session_name`]: it starts with a control
//! character). Its locks carry its id ([`crate::Lock::session`]) and its
//! lease: they are granted with the session's end, renewed when it is, and
//! end when it ends. So every record that keeps a lock (the table, a `Held`,
//! a copy, a report) keeps a session's lock as it keeps any other, and a
//! session's renewal is one renewal of the session plus a change of the
//! end of each of its locks where they are kept.

use hashbrown::{HashMap, HashSet};

use crate::lock::LockId;

/// What every session's name starts with: no name a client may ask for
/// does (a control character).
pub const SESSION_PREFIX: &str = "\u{1}session/";

/// A name a session may be granted under, made of `nonce` (unique: the
/// opening node makes it of the time and random bits). A session is found
/// by its grant's id, not its name.
pub fn session_name(nonce: LockId) -> String {
    format!("{SESSION_PREFIX}{nonce}")
}

/// Whether `name` is a session's.
pub fn is_session_name(name: &str) -> bool {
    name.starts_with(SESSION_PREFIX)
}

/// The locks of each session, by the session's id, with the digest of
/// their ids kept as they come and go: where a store finds what a
/// session's renewal or end reaches.
#[derive(Debug, Default, Clone)]
pub(crate) struct SessionIndex {
    locks: HashMap<LockId, (HashSet<LockId>, u128)>,
}

impl SessionIndex {
    /// Notes that `lock` hangs off `session`.
    pub(crate) fn add(&mut self, session: LockId, lock: LockId) {
        let (locks, digest) = self.locks.entry(session).or_default();
        if locks.insert(lock) {
            *digest ^= lock.as_u128();
        }
    }

    /// Notes that `lock` no longer hangs off `session`.
    pub(crate) fn remove(&mut self, session: LockId, lock: LockId) {
        if let Some((locks, digest)) = self.locks.get_mut(&session) {
            if locks.remove(&lock) {
                *digest ^= lock.as_u128();
            }
            if locks.is_empty() {
                self.locks.remove(&session);
            }
        }
    }

    /// The ids of the locks hanging off `session`, in no order.
    pub(crate) fn of(&self, session: LockId) -> impl Iterator<Item = LockId> + '_ {
        self.locks
            .get(&session)
            .into_iter()
            .flat_map(|(locks, _)| locks)
            .copied()
    }

    /// How many locks hang off `session`, and the digest of their ids
    /// ([`digest`]).
    pub(crate) fn summary(&self, session: LockId) -> (usize, u128) {
        self.locks
            .get(&session)
            .map_or((0, 0), |(locks, digest)| (locks.len(), *digest))
    }

    pub(crate) fn clear(&mut self) {
        self.locks.clear();
    }
}

/// A digest of a set of lock ids (their exclusive or): two stores that
/// keep the same locks of a session have the same digest, and a renewal
/// sends the full records only when they differ.
pub fn digest(ids: impl IntoIterator<Item = LockId>) -> u128 {
    ids.into_iter().fold(0, |d, id| d ^ id.as_u128())
}
