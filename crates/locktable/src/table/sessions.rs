//! Sessions in the table: renewing one renews every lock hanging off it,
//! ending one ends them all, and a rebuild gives each lock at least its
//! session's end.

use std::cmp::Reverse;
use std::time::Duration;

use crate::error::{AcquireError, LockError};
use crate::lock::{Lock, LockId, NodeId};
use crate::session::is_session_name;
use crate::slots::Slot;
use crate::time::MonoTime;

use super::Table;

/// What [`Table::renew_session`] did: the session renewed, and each of its
/// locks given the session's new end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRenewed {
    /// The session's grant, renewed.
    pub session: Lock,
    /// How many locks hang off it.
    pub locks: usize,
    /// The digest of their ids ([`crate::session::digest`]).
    pub digest: u128,
    /// The locks that were held through another node than the renewing
    /// one: that node, and when its record of the lock ends (ended or not).
    pub moved_from: Vec<(LockId, NodeId, MonoTime)>,
}

impl Table {
    /// Renews the session `id`, for `lease` or, with none, for the lease it
    /// had, and gives each lock hanging off it the session's new end. `node`
    /// is the node the renewal came through, which keeps the session's and
    /// every one of its locks' records from now on.
    pub fn renew_session(
        &mut self,
        id: LockId,
        lease: Option<Duration>,
        node: NodeId,
        now: MonoTime,
    ) -> Result<SessionRenewed, LockError> {
        let name = self.session_name_of(id).ok_or(LockError::NotHeld)?;
        let renewed = self.renew_beside(&name, id, lease, node, self.longest_delay(id), now)?;
        let mut moved_from = Vec::new();
        let mut pushed = Vec::new();
        for lock in self.sessions.of(id) {
            let Some(at) = self.slots.find(&lock) else {
                continue;
            };
            let slot = self.slots.get_mut(at).expect("found");
            if slot.node != node {
                moved_from.push((lock, slot.node, slot.expires));
                slot.node = node;
            }
            let before = slot.expires;
            slot.follow(&renewed);
            if slot.expires < before {
                pushed.push(Reverse((slot.expires, slot.fence, at)));
            }
        }
        self.expiries.extend(pushed);
        // In id order, not the index's: the same in every process.
        moved_from.sort_unstable();
        let (locks, digest) = self.sessions.summary(id);
        Ok(SessionRenewed {
            session: renewed,
            locks,
            digest,
            moved_from,
        })
    }

    /// The longest lock-delay of the locks hanging off the session `id`:
    /// its renewed lease leaves room for it under the longest lease.
    pub fn longest_delay(&self, id: LockId) -> Duration {
        self.sessions
            .of(id)
            .filter_map(|lock| self.slots.find(&lock))
            .filter_map(|at| self.slots.get(at))
            .map(Slot::delay)
            .max()
            .unwrap_or_default()
    }

    /// The name the session `id` is held under, if the table holds it.
    pub fn session_name_of(&self, id: LockId) -> Option<String> {
        self.slots
            .find(&id)
            .and_then(|at| self.slots.get(at))
            .filter(|s| is_session_name(s.name()))
            .map(|s| s.name().to_owned())
    }

    /// How many locks hang off the session `id`, and the digest of their
    /// ids ([`crate::session::digest`]).
    pub fn session_summary(&self, id: LockId) -> (usize, u128) {
        self.sessions.summary(id)
    }

    /// The locks hanging off the session `id`, as the table has them, in id
    /// order (the same in every process: a simulation's seed replays).
    pub fn session_locks(&self, id: LockId) -> Vec<Lock> {
        let mut locks: Vec<Lock> = self
            .sessions
            .of(id)
            .filter_map(|lock| self.slots.find(&lock))
            .filter_map(|at| self.slots.get(at))
            .map(Slot::to_lock)
            .collect();
        locks.sort_unstable_by_key(|l| l.id);
        locks
    }

    /// Ends the session `id` and every lock hanging off it, handing each
    /// name on: the session's grant first, then its locks in the order of
    /// their ids (not the index's hash order, which is seeded at random: the
    /// fences the names are handed on with do not depend on it, and a
    /// simulated seed replays).
    pub fn release_session(&mut self, id: LockId, now: MonoTime) -> Result<Vec<Lock>, LockError> {
        let name = self.session_name_of(id).ok_or(LockError::NotHeld)?;
        let session = self.release(&name, id, now)?;
        let mut ids: Vec<LockId> = self.sessions.of(id).collect();
        ids.sort_unstable();
        let mut released = vec![session];
        for lock in ids {
            let Some(name) = self
                .slots
                .find(&lock)
                .and_then(|at| self.slots.get(at))
                .map(|s| s.name().to_owned())
            else {
                continue;
            };
            if let Ok(lock) = self.release(&name, lock, now) {
                released.push(lock);
            }
        }
        Ok(released)
    }

    /// Indexes the locks of every session after a rebuild, and gives each
    /// lock at least its session's end: some record of the session saw a
    /// renewal that some record of the lock may have missed, and a lock of a
    /// session is held as long as its session.
    pub(super) fn index_sessions(&mut self) {
        self.sessions.clear();
        let mut pushed = Vec::new();
        let numbered: Vec<(u32, LockId, LockId)> = self
            .slots
            .numbered()
            .filter_map(|(at, s)| s.session().map(|session| (at, s.id, session)))
            .collect();
        for (at, id, session) in numbered {
            self.sessions.add(session, id);
            let Some(session) = self
                .slots
                .find(&session)
                .and_then(|s| self.slots.get(s))
                .filter(|s| is_session_name(s.name()))
                .map(Slot::to_lock)
            else {
                continue;
            };
            let slot = self.slots.get_mut(at).expect("numbered");
            if slot.follow_if_later(&session) {
                pushed.push(Reverse((slot.expires, slot.fence, at)));
            }
        }
        self.expiries.extend(pushed);
    }

    /// The session `id`'s grant, if its lease runs at `now`: what a lock
    /// asked to hang off it takes its lease from.
    pub(super) fn live_session(&self, id: LockId, now: MonoTime) -> Result<Lock, AcquireError> {
        self.slots
            .find(&id)
            .and_then(|at| self.slots.get(at))
            .filter(|s| is_session_name(s.name()) && !s.is_lapsed(now))
            .map(Slot::to_lock)
            .ok_or(AcquireError::NoSession)
    }

    /// Refuses a request for a lock of a session that is not held.
    pub(crate) fn check_session(
        &self,
        session: Option<LockId>,
        now: MonoTime,
    ) -> Result<(), AcquireError> {
        match session {
            Some(id) => self.live_session(id, now).map(drop),
            None => Ok(()),
        }
    }
}
