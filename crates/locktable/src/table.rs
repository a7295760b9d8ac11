//! The speaker's table: the locks the node speaking for the cluster grants.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use hashbrown::HashMap;

use crate::error::{AcquireError, LockError, NotRebuilt, RebuildError, StaleGeneration};
use crate::forgotten::Forgotten;
use crate::listing::{Lapsed, Listing, Queued, Waiting, LAPSED_KEPT, QUEUE_SHOWN};
use crate::lock::{Fence, Lock, LockId, NodeId, Request};
use crate::rebuild::{RebuildBasis, RebuildFrom, Settled};
use crate::slots::{Slot, Slots};
use crate::time::{LeaseRule, MonoTime};

/// A request waiting for a lock held by another, as the table numbers it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WaiterId(pub u64);

/// What [`Table::acquire`] did with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// The lock is granted.
    Granted(Lock),
    /// The lock is held by another and the request waits; its answer comes
    /// later as an [`Answer`] from [`Table::take_answers`].
    Waiting(WaiterId),
}

/// The answer to a waiting request, given when the lock is granted to it,
/// when its wait ends with the lock still held, or when the table is dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The waiting request answered.
    pub waiter: WaiterId,
    /// The lock granted, or why not.
    pub result: Result<Lock, AcquireError>,
}

/// What a rebuild did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rebuilt {
    /// Locks in the table after the rebuild.
    pub locks: usize,
    /// Locks still held by their clients that lost to another grant of the
    /// same name held longer; each is to be reported back to its node.
    pub lost: Vec<Lock>,
}

struct Waiter {
    id: WaiterId,
    request: Request,
    until: MonoTime,
}

/// Hands out fences: the term in the high bits, a counter in the low.
#[derive(Debug, Default)]
struct FenceCounter {
    next: u64,
    end: u64,
}

impl FenceCounter {
    fn take(&mut self) -> Result<Fence, AcquireError> {
        if self.next >= self.end {
            return Err(AcquireError::FencesExhausted);
        }
        self.next += 1;
        Ok(Fence(self.next - 1))
    }
}

/// The locks the node speaking for the cluster granted.
///
/// It reads no clock and starts no task: every call is given the time, and
/// answers to waiting requests are collected with [`Table::take_answers`].
/// The caller calls [`Table::poll`] at [`Table::next_deadline`] so leases
/// end and waits time out on time.
pub struct Table {
    rule: LeaseRule,
    generation: u64,
    rebuilt: bool,
    fences: FenceCounter,
    hold_new_grants_until: Option<MonoTime>,
    slots: Slots,
    /// (lease end, fence, slot): one entry per grant; a renewal leaves its
    /// entry in place to be pushed back when it comes up.
    expiries: BinaryHeap<Reverse<(MonoTime, Fence, u32)>>,
    waiters: HashMap<Box<str>, VecDeque<Waiter>>,
    wait_ends: BinaryHeap<Reverse<(MonoTime, WaiterId, Box<str>)>>,
    next_waiter: u64,
    answers: Vec<Answer>,
    /// What this node granted and held when it was last dropped.
    retained: HashMap<LockId, Lock>,
    /// Released ids, each kept until no report of it can still be live.
    forgotten: Forgotten,
    /// Leases [`Table::poll`] has ended since the table was made.
    expired: u64,
    /// Leases that ran out since the last [`Table::take_lapsed`].
    lapsed: Vec<Lapsed>,
    /// The releases heard since a rebuild's basis was taken
    /// ([`Table::begin_rebuild`]), for its install to apply.
    forgets_since_basis: Option<Vec<(Box<str>, LockId)>>,
}

impl Table {
    /// An empty table, not rebuilt, at generation 0.
    pub fn new(rule: LeaseRule) -> Self {
        Table {
            rule,
            generation: 0,
            rebuilt: false,
            fences: FenceCounter::default(),
            hold_new_grants_until: None,
            slots: Slots::default(),
            expiries: BinaryHeap::new(),
            waiters: HashMap::new(),
            wait_ends: BinaryHeap::new(),
            next_waiter: 0,
            answers: Vec::new(),
            retained: HashMap::new(),
            forgotten: Forgotten::default(),
            expired: 0,
            lapsed: Vec::new(),
            forgets_since_basis: None,
        }
    }

    /// How many leases [`Table::poll`] has ended (run out) since the table
    /// was made; drops and rebuilds keep the count.
    pub fn expired(&self) -> u64 {
        self.expired
    }

    /// The leases that ran out (found by [`Table::poll`], or by a call on
    /// their name) since the last call, at most [`LAPSED_KEPT`] of them.
    pub fn take_lapsed(&mut self) -> Vec<Lapsed> {
        std::mem::take(&mut self.lapsed)
    }

    /// The generation a rebuild is for: the nodes are read after it is, and
    /// the table is rebuilt from them only if it was not dropped meanwhile.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether the table was rebuilt since it was last dropped.
    pub fn is_rebuilt(&self) -> bool {
        self.rebuilt
    }

    /// How many locks the table holds (some may have expired unnoticed
    /// until the next [`Table::poll`]).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the table holds no lock.
    pub fn is_empty(&self) -> bool {
        self.slots.len() == 0
    }

    /// How many requests are waiting.
    pub fn waiting(&self) -> usize {
        self.waiters.values().map(VecDeque::len).sum()
    }

    /// How many requests wait for each name that has any, in no order.
    pub fn queue_lengths(&self) -> impl Iterator<Item = (&str, usize)> {
        self.waiters.iter().map(|(name, q)| (&**name, q.len()))
    }

    /// When new grants resume after a strict rebuild that missed members.
    pub fn new_grants_held_until(&self, now: MonoTime) -> Option<MonoTime> {
        self.hold_new_grants_until.filter(|&t| now < t)
    }

    /// Grants the lock `request` names, or queues the request when another
    /// holds it and the request may wait, or says who holds it.
    pub fn acquire(&mut self, request: Request, now: MonoTime) -> Result<Acquired, AcquireError> {
        if !self.rebuilt {
            return Err(NotRebuilt.into());
        }
        if let Some(until) = self.new_grants_held_until(now) {
            return Err(AcquireError::HeldBack { until });
        }
        self.expire_name(&request.name, now);
        let Some(at) = self.slots.find(&request.name) else {
            return self.grant(request, now).map(Acquired::Granted);
        };
        if request.wait.is_zero() {
            let held = self.slots.get(at).expect("found").to_lock();
            return Err(AcquireError::Held(Box::new(held)));
        }
        let id = WaiterId(self.next_waiter);
        self.next_waiter += 1;
        let until = now + request.wait;
        let name: Box<str> = request.name.as_str().into();
        self.wait_ends.push(Reverse((until, id, name.clone())));
        self.waiters
            .entry(name)
            .or_default()
            .push_back(Waiter { id, request, until });
        Ok(Acquired::Waiting(id))
    }

    /// Stops waiting for `waiter` (its client went away). Says whether it
    /// was still waiting.
    pub fn cancel(&mut self, name: &str, waiter: WaiterId) -> bool {
        let Some(queue) = self.waiters.get_mut(name) else {
            return false;
        };
        let Some(pos) = queue.iter().position(|w| w.id == waiter) else {
            return false;
        };
        queue.remove(pos);
        if queue.is_empty() {
            self.waiters.remove(name);
        }
        true
    }

    /// Releases the lock `name` held under `id`, hands it to the first
    /// request waiting, and forgets the id.
    pub fn release(&mut self, name: &str, id: LockId, now: MonoTime) -> Result<Lock, LockError> {
        if !self.rebuilt {
            return Err(NotRebuilt.into());
        }
        self.expire_name(name, now);
        let at = self.find_held(name, id)?;
        let lock = self.remove(at);
        self.forgotten
            .insert(id, lock.expires + Self::FORGET_MARGIN, now);
        self.hand_over(name, &lock, now);
        Ok(lock)
    }

    /// Restarts the lease of the lock `name` held under `id`, for `lease`
    /// or, with none, for the lease it had. `node` is the node the renewal
    /// came through, which keeps the lock's record from now on.
    pub fn renew(
        &mut self,
        name: &str,
        id: LockId,
        lease: Option<Duration>,
        node: NodeId,
        now: MonoTime,
    ) -> Result<Lock, LockError> {
        let at = self.held_at(name, id, now)?;
        let rule = self.rule;
        let slot = self.slots.get_mut(at).expect("found");
        let before = slot.expires;
        slot.restart(rule.lease(Some(lease.unwrap_or(slot.lease()))), now);
        slot.node = node;
        let lock = slot.to_lock();
        if lock.expires < before {
            // The entry already queued comes up too late for a shorter lease.
            self.expiries.push(Reverse((lock.expires, lock.fence, at)));
        }
        Ok(lock)
    }

    /// Keeps `data` with the lock `name` held under `id`, in place of what
    /// it kept (a renewal that changes it, just renewed): the lock as it
    /// is now.
    pub fn set_data(
        &mut self,
        name: &str,
        id: LockId,
        data: &str,
        now: MonoTime,
    ) -> Result<Lock, LockError> {
        let at = self.held_at(name, id, now)?;
        let slot = self.slots.get_mut(at).expect("found");
        slot.set_data(Some(data));
        Ok(slot.to_lock())
    }

    /// Where the lock `name` held under `id` is, its lease judged at `now`.
    fn held_at(&mut self, name: &str, id: LockId, now: MonoTime) -> Result<u32, LockError> {
        if !self.rebuilt {
            return Err(NotRebuilt.into());
        }
        self.expire_name(name, now);
        self.find_held(name, id)
    }

    /// Takes back into the table a lock its holder's node still has but
    /// this table lacks (the node was missing at the rebuild). The lock is
    /// kept with its id, fence and lease if the name is free, the id was
    /// not released and the lease still runs; if another lock holds the
    /// name, the reclaimed lock is lost.
    pub fn reclaim(&mut self, lock: Lock, now: MonoTime) -> Result<Lock, LockError> {
        if !self.rebuilt {
            return Err(NotRebuilt.into());
        }
        self.expire_name(&lock.name, now);
        if self.forgotten.contains(lock.id, now) || !lock.is_live(now) {
            return Err(LockError::NotHeld);
        }
        if let Some(at) = self.slots.find(&lock.name) {
            let slot = self.slots.get(at).expect("found");
            return if slot.id == lock.id {
                Ok(slot.to_lock())
            } else {
                Err(LockError::NotHeld)
            };
        }
        let mut lock = lock;
        lock.expires = lock.expires.min(now + LeaseRule::LONGEST);
        self.insert(&lock);
        Ok(lock)
    }

    /// The node the lock `name` held under `id` is held through, and when
    /// its lease ends (ended or not): what a renewal through another node
    /// is about to move.
    pub fn held_through(&self, name: &str, id: LockId) -> Option<(NodeId, MonoTime)> {
        let at = self.find_held(name, id).ok()?;
        self.slots.get(at).map(|s| (s.node, s.expires))
    }

    /// The lock `name`, if held.
    pub fn get(&self, name: &str, now: MonoTime) -> Result<Option<Lock>, NotRebuilt> {
        if !self.rebuilt {
            return Err(NotRebuilt);
        }
        Ok(self
            .slots
            .find(name)
            .and_then(|at| self.slots.get(at))
            .filter(|s| s.is_live(now))
            .map(Slot::to_lock))
    }

    /// The locks held whose names start with `prefix`, in name order, at
    /// most `limit` of them.
    pub fn list(&self, prefix: &str, limit: usize, now: MonoTime) -> Result<Vec<Lock>, NotRebuilt> {
        self.listing(prefix, limit, now)
            .map(|listing| listing.locks)
    }

    /// As [`Table::list`], with how many locks are held under `prefix` in
    /// all and how many requests wait for each lock listed.
    pub fn listing(
        &self,
        prefix: &str,
        limit: usize,
        now: MonoTime,
    ) -> Result<Listing, NotRebuilt> {
        if !self.rebuilt {
            return Err(NotRebuilt);
        }
        let mut found: Vec<&Slot> = self
            .slots
            .iter()
            .filter(|s| s.is_live(now) && s.name().starts_with(prefix))
            .collect();
        let total = found.len();
        if found.len() > limit {
            found.select_nth_unstable_by(limit, |a, b| a.name().cmp(b.name()));
            found.truncate(limit);
        }
        found.sort_unstable_by(|a, b| a.name().cmp(b.name()));
        let queues: Vec<Option<&VecDeque<Waiter>>> =
            found.iter().map(|s| self.waiters.get(s.name())).collect();
        let waiters = queues.iter().map(|q| q.map_or(0, VecDeque::len)).collect();
        let queues = queues
            .into_iter()
            .map(|q| q.map_or_else(Vec::new, |q| self.queued(q)))
            .collect();
        Ok(Listing {
            locks: found.into_iter().map(Slot::to_lock).collect(),
            total: Some(total),
            waiters,
            queues,
        })
    }

    /// The requests waiting for `name`.
    pub fn waiting_for(&self, name: &str) -> Waiting {
        self.waiters
            .get(name)
            .map_or_else(Waiting::default, |queue| Waiting {
                count: queue.len(),
                first: self.queued(queue),
            })
    }

    /// The first [`QUEUE_SHOWN`] requests of `queue`, as a listing shows them.
    fn queued(&self, queue: &VecDeque<Waiter>) -> Vec<Queued> {
        queue
            .iter()
            .take(QUEUE_SHOWN)
            .map(|w| Queued {
                holder: w.request.holder.clone(),
                node: w.request.node,
                since: w.until - w.request.wait,
                until: w.until,
                lease: self.rule.lease(w.request.lease),
            })
            .collect()
    }

    /// Ends the leases run out by `now`, handing each lock to its first
    /// waiting request, and ends the waits run out.
    pub fn poll(&mut self, now: MonoTime) {
        while let Some(&Reverse((at, fence, slot))) = self.expiries.peek() {
            if at > now {
                break;
            }
            self.expiries.pop();
            let Some(s) = self.slots.get(slot).filter(|s| s.fence == fence) else {
                continue;
            };
            if s.is_live(now) {
                self.expiries.push(Reverse((s.expires, fence, slot)));
                continue;
            }
            let lock = self.remove(slot);
            self.expired += 1;
            self.hand_over(&lock.name, &lock, now);
            self.note_lapsed(lock);
        }
        while let Some(Reverse((until, _, _))) = self.wait_ends.peek() {
            if *until > now {
                break;
            }
            let Reverse((_, waiter, name)) = self.wait_ends.pop().expect("peeked");
            if !self.cancel(&name, waiter) {
                continue;
            }
            let result = match self.slots.find(&name).and_then(|at| self.slots.get(at)) {
                Some(held) => Err(AcquireError::Held(Box::new(held.to_lock()))),
                None => Err(NotRebuilt.into()),
            };
            self.answers.push(Answer { waiter, result });
        }
        self.retained.retain(|_, l| l.is_live(now));
        self.forgotten.prune(now, usize::MAX);
    }

    /// The next instant [`Table::poll`] has work: a lease or a wait ends.
    pub fn next_deadline(&self) -> Option<MonoTime> {
        let lease = self.expiries.peek().map(|Reverse((t, _, _))| *t);
        let wait = self.wait_ends.peek().map(|Reverse((t, _, _))| *t);
        match (lease, wait) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The answers to waiting requests given since the last call.
    pub fn take_answers(&mut self) -> Vec<Answer> {
        std::mem::take(&mut self.answers)
    }

    /// Forgets the table, which is no longer this node's to keep, or is
    /// about to be again: the generation moves on, the requests waiting are
    /// answered [`NotRebuilt`], and the locks granted are kept aside, to be
    /// read by the next speaker through [`Table::granted`] until their
    /// leases end.
    pub fn drop_table(&mut self, now: MonoTime) {
        self.generation += 1;
        self.forgets_since_basis = None;
        self.rebuilt = false;
        self.hold_new_grants_until = None;
        for slot in self.slots.iter().filter(|s| s.is_live(now)) {
            self.retained.insert(slot.id, slot.to_lock());
        }
        self.retained.retain(|_, l| l.is_live(now));
        self.slots.clear();
        self.expiries.clear();
        self.lapsed.clear();
        self.turn_away_waiters();
    }

    /// Answers every waiting request [`NotRebuilt`] and keeps the table: for
    /// a speaker that cannot show its leadership for now (its leader lease
    /// lapsed) but may again in the same term.
    pub fn turn_away_waiters(&mut self) {
        self.wait_ends.clear();
        let first = self.answers.len();
        for (_, queue) in self.waiters.drain() {
            self.answers.extend(queue.into_iter().map(|w| Answer {
                waiter: w.id,
                result: Err(NotRebuilt.into()),
            }));
        }
        // In the order the waiters came, not the map's.
        self.answers[first..].sort_unstable_by_key(|a| a.waiter);
    }

    /// The locks this node granted whose lease has not ended: the ones of
    /// its table, and the ones it held when it was last dropped. It is what
    /// a node rebuilding its table reads of this one, besides the locks its
    /// clients hold.
    pub fn granted(&self, now: MonoTime) -> Vec<Lock> {
        let mut out: Vec<Lock> = self
            .slots
            .iter()
            .filter(|s| s.is_live(now))
            .map(Slot::to_lock)
            .collect();
        let live = out.len();
        out.extend(
            self.retained
                .values()
                .filter(|l| l.is_live(now) && !self.forgotten.contains(l.id, now))
                .filter(|l| {
                    self.slots
                        .find(&l.name)
                        .and_then(|at| self.slots.get(at))
                        .is_none_or(|s| s.id != l.id)
                })
                .cloned(),
        );
        // The retained ones in id order, not the map's: a report reads alike
        // in every process (a simulation's seed replays).
        out[live..].sort_unstable_by_key(|l| l.id);
        out
    }

    /// Says a lock was released: it is dropped from the locks this node
    /// granted before its table was dropped, from its table, where a rebuild
    /// may have brought it back from a node that had not heard of the
    /// release yet, and its id is kept from the rebuilds to come.
    ///
    /// `left` is the time the released lease had left when the release was
    /// sent, which the caller counts from its receipt (`now` or earlier):
    /// every record of the lease ends no later than that, so the id is kept
    /// that long (at most the longest lease), plus a second for the
    /// difference in clock rates, and no longer.
    ///
    /// A release heard of from elsewhere means another node speaks: the
    /// name is freed but not handed to a waiting request, which is answered
    /// [`NotRebuilt`] (to retry at the speaker).
    pub fn forget(&mut self, name: &str, id: LockId, left: Duration, now: MonoTime) {
        self.retained.remove(&id);
        let until = now + left.min(LeaseRule::LONGEST) + Self::FORGET_MARGIN;
        self.forgotten.insert(id, until, now);
        if let Some(since) = &mut self.forgets_since_basis {
            since.push((name.into(), id));
        }
        if let Ok(at) = self.find_held(name, id) {
            self.remove(at);
            if let Some(queue) = self.waiters.remove(name) {
                self.answers.extend(queue.into_iter().map(|w| Answer {
                    waiter: w.id,
                    result: Err(NotRebuilt.into()),
                }));
            }
        }
    }

    /// How many released ids the table keeps from rebuilds: the ones whose
    /// lease may still be on record somewhere (and, until the next
    /// [`Table::poll`], some that just became due).
    pub fn forgotten_ids(&self) -> usize {
        self.forgotten.len()
    }

    /// Whether `id` was released (or taken back) and its lease may still be
    /// on record somewhere: a record of it that arrives now is stale.
    pub fn is_forgotten(&self, id: LockId, now: MonoTime) -> bool {
        self.forgotten.contains(id, now)
    }

    /// Replaces the locks of the table with the ones the nodes say their
    /// clients hold and the ones they granted, and marks it rebuilt. Changes
    /// nothing when the table was dropped since `from.generation`.
    ///
    /// Two nodes saying they hold the same lock is a lock two speakers
    /// granted apart, which only the end of one of the leases settles: the
    /// one held the longest is kept, and the other is still held by its
    /// client, which is returned.
    pub fn rebuild(&mut self, from: RebuildFrom, now: MonoTime) -> Result<Rebuilt, RebuildError> {
        let settled = self.begin_rebuild().settle(from, now)?;
        self.install(settled, now)
    }

    /// What a rebuild settled apart from the table needs of it
    /// ([`RebuildBasis::settle`]); the releases heard from now on are kept
    /// for [`Table::install`] to apply.
    pub fn begin_rebuild(&mut self) -> RebuildBasis {
        self.forgets_since_basis = Some(Vec::new());
        RebuildBasis {
            generation: self.generation,
            forgotten: self.forgotten.until().clone(),
        }
    }

    /// Puts a rebuild settled apart in place, as [`Table::rebuild`] would
    /// have rebuilt the table from its reports: unless the table was dropped
    /// since the basis was taken, or the term's fences already say a
    /// rebuild saw every grant and this one did not. A lock released since
    /// the basis was taken is left out.
    pub fn install(&mut self, settled: Settled, now: MonoTime) -> Result<Rebuilt, RebuildError> {
        let Settled {
            from_generation,
            epoch,
            highest,
            slots,
            expiries,
            lost,
            hold_new_grants_until,
            seen_all,
        } = settled;
        if from_generation != self.generation {
            return Err(StaleGeneration {
                asked: from_generation,
                current: self.generation,
            }
            .into());
        }
        // A term's later fences carry the bit once one did: a rebuild that
        // missed grants cannot go on counting in it.
        let issued = Fence(highest.0.max(self.fences.next));
        if !seen_all && issued.epoch() == epoch && issued.seen_all() {
            return Err(RebuildError::SeenAllSpent(epoch));
        }
        self.slots = slots;
        self.expiries = expiries;
        for (name, id) in self.forgets_since_basis.take().unwrap_or_default() {
            if let Ok(at) = self.find_held(&name, id) {
                self.remove(at);
            }
        }
        // A loser's other records (copies, a `Held` not dropped yet) must
        // not bring it back once the name is free again.
        for lock in &lost {
            self.forgotten
                .insert(lock.id, lock.expires + Self::FORGET_MARGIN, now);
        }
        let slots = &self.slots;
        self.retained.retain(|id, l| {
            slots
                .find(&l.name)
                .and_then(|at| slots.get(at))
                .is_none_or(|s| s.id != *id)
        });
        // Above every fence this table issued too: a table dropped and
        // rebuilt again in the same term (a rebuild retried after a drop)
        // must not hand out a released lock's fence a second time.
        let first = if seen_all { Fence::SEEN_ALL | 1 } else { 1 };
        let base = Fence::new(epoch, first)
            .0
            .max(highest.0.saturating_add(1))
            .max(self.fences.next);
        // Never into the next term's fences: a term that used all of its
        // own answers `FencesExhausted` and hands over.
        self.fences = FenceCounter {
            next: base,
            end: Fence::new(epoch + 1, 0).0,
        };
        self.hold_new_grants_until = hold_new_grants_until;
        self.rebuilt = true;
        Ok(Rebuilt {
            locks: self.slots.len(),
            lost,
        })
    }

    /// How long past a released lease its id is still kept from rebuilds:
    /// every other record of the lease ends no later than the speaker's
    /// (holders count from the send, old speakers granted it earlier), give
    /// or take the difference in clock rates over one lease.
    pub const FORGET_MARGIN: Duration = Duration::from_secs(1);

    fn find_held(&self, name: &str, id: LockId) -> Result<u32, LockError> {
        self.slots
            .find(name)
            .filter(|&at| self.slots.get(at).is_some_and(|s| s.id == id))
            .ok_or(LockError::NotHeld)
    }

    /// Takes the lock at `at` out of the table.
    fn remove(&mut self, at: u32) -> Lock {
        let lock = self.slots.remove(at).expect("occupied").to_lock();
        // A released lock leaves its expiry entry behind; rebuild the heap
        // before the stale entries outnumber the live ones.
        if self.expiries.len() > 2 * self.slots.len() + 1024 {
            self.reindex_expiries();
        }
        lock
    }

    fn reindex_expiries(&mut self) {
        let entries: Vec<_> = self
            .slots
            .numbered()
            .map(|(at, s)| Reverse((s.expires, s.fence, at)))
            .collect();
        self.expiries = BinaryHeap::from(entries);
    }

    /// Frees `name` if its lease ended by `now`, handing it on.
    fn expire_name(&mut self, name: &str, now: MonoTime) {
        let Some(at) = self.slots.find(name) else {
            return;
        };
        if self.slots.get(at).is_some_and(|s| !s.is_live(now)) {
            let lock = self.remove(at);
            self.hand_over(name, &lock, now);
            self.note_lapsed(lock);
        }
    }

    fn note_lapsed(&mut self, lock: Lock) {
        if self.lapsed.len() < LAPSED_KEPT {
            let held = lock.expires.saturating_duration_since(lock.acquired);
            self.lapsed.push(Lapsed {
                name: lock.name,
                held,
            });
        }
    }

    fn insert(&mut self, lock: &Lock) {
        let at = self.slots.insert(Slot::new(lock));
        self.expiries.push(Reverse((lock.expires, lock.fence, at)));
    }

    fn grant(&mut self, request: Request, now: MonoTime) -> Result<Lock, AcquireError> {
        let fence = self.fences.take()?;
        let lease = self.rule.lease(request.lease);
        let lock = Lock {
            name: request.name,
            id: request.id,
            node: request.node,
            holder: request.holder,
            fence,
            lease,
            acquired: now,
            expires: now + lease,
            data: request.data,
            data_rev: 0,
        };
        self.insert(&lock);
        Ok(lock)
    }

    /// `name` was freed (by `freed`'s release or expiry): the first request
    /// still waiting gets it; those whose wait ended are told it was held.
    fn hand_over(&mut self, name: &str, freed: &Lock, now: MonoTime) {
        if self.waiters.is_empty() {
            return;
        }
        let Some(mut queue) = self.waiters.remove(name) else {
            return;
        };
        while let Some(waiter) = queue.pop_front() {
            if waiter.until < now {
                self.answers.push(Answer {
                    waiter: waiter.id,
                    result: Err(AcquireError::Held(Box::new(freed.clone()))),
                });
                continue;
            }
            let result = self.grant(waiter.request, now);
            let granted = result.is_ok();
            self.answers.push(Answer {
                waiter: waiter.id,
                result,
            });
            if granted {
                break;
            }
        }
        if !queue.is_empty() {
            self.waiters.insert(name.into(), queue);
        }
    }
}
