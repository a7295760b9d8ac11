//! A node's record of the locks its own clients hold.

use std::collections::HashMap;
use std::time::Duration;

use crate::lock::{Lock, LockId};
use crate::time::MonoTime;

/// The locks the clients of a node hold, which is what a node taking the
/// speaking over rebuilds its table from.
///
/// Each lease is counted on this node's clock from the moment the node sent
/// the request that won or renewed it, so this record ends no later than the
/// speaker's.
#[derive(Debug, Default, Clone)]
pub struct Held {
    locks: HashMap<LockId, Lock>,
}

impl Held {
    /// An empty record.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a lock a client of this node was granted (or keeps a newer
    /// view of one already recorded).
    pub fn record(&mut self, lock: Lock) {
        self.locks.insert(lock.id, lock);
    }

    /// Restarts the record of `id`'s lease: `lease` long, counted from
    /// `sent`, the instant the renewal was sent. Says whether it was held.
    pub fn renewed(&mut self, id: LockId, lease: Duration, sent: MonoTime) -> bool {
        match self.locks.get_mut(&id) {
            Some(lock) => {
                lock.lease = lease;
                lock.expires = sent + lease;
                true
            }
            None => false,
        }
    }

    /// Drops the record of `id` (released, or lost to a conflict).
    pub fn remove(&mut self, id: LockId) -> Option<Lock> {
        self.locks.remove(&id)
    }

    /// The record of `id`.
    pub fn get(&self, id: LockId) -> Option<&Lock> {
        self.locks.get(&id)
    }

    /// The records of locks named `name` (more than one only while a
    /// conflict between speakers is unsettled).
    pub fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Lock> + 'a {
        self.locks.values().filter(move |l| l.name == name)
    }

    /// The locks whose lease still runs at `now`: this node's report to a
    /// rebuild.
    pub fn live(&self, now: MonoTime) -> Vec<Lock> {
        self.locks
            .values()
            .filter(|l| l.is_live(now))
            .cloned()
            .collect()
    }

    /// Drops the records whose lease ended by `now`, and returns them.
    pub fn expire(&mut self, now: MonoTime) -> Vec<Lock> {
        let ended: Vec<LockId> = self
            .locks
            .values()
            .filter(|l| !l.is_live(now))
            .map(|l| l.id)
            .collect();
        ended
            .into_iter()
            .filter_map(|id| self.locks.remove(&id))
            .collect()
    }

    /// How many locks are recorded.
    pub fn len(&self) -> usize {
        self.locks.len()
    }

    /// Whether no lock is recorded.
    pub fn is_empty(&self) -> bool {
        self.locks.is_empty()
    }
}
