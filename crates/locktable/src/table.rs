//! The speaker's table: the locks the node speaking for the cluster grants.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use hashbrown::HashMap;

use crate::error::{AcquireError, LockError, NotRebuilt};
use crate::forgotten::Forgotten;
use crate::holders::Holders;
use crate::listing::{Lapsed, Listing, LAPSED_KEPT};
use crate::lock::{Fence, Lock, LockId, NodeId, Request};
use crate::session::{is_session_name, SessionIndex};
use crate::slots::Slot;
use crate::time::{LeaseRule, MonoTime};

mod fences;
mod install;
mod reclaim;
mod sessions;
mod waiting;

use fences::FenceCounter;

pub use sessions::SessionRenewed;
use waiting::Waiter;

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

/// What [`Table::acquire_set`] did with a set of requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcquiredSet {
    /// Every name is granted, in the order asked, with consecutive fences.
    Granted(Vec<Lock>),
    /// Some name is held by another (or awaited) and the set waits in every
    /// name's queue; its answer comes later as one [`Answer`].
    Waiting(WaiterId),
}

/// The answer to a waiting request, given when the lock is granted to it,
/// when its wait ends with the lock still held, or when the table is dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The waiting request answered.
    pub waiter: WaiterId,
    /// The lock granted (a set's first name), or why not.
    pub result: Result<Lock, AcquireError>,
    /// A set's other grants, in the order asked (empty for one name).
    pub also: Vec<Lock>,
}

impl Answer {
    /// The answer `result` to the request `waiter`, of one name.
    pub fn one(waiter: WaiterId, result: Result<Lock, AcquireError>) -> Self {
        Answer {
            waiter,
            result,
            also: Vec::new(),
        }
    }
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
    slots: Holders,
    /// (lease end, fence, slot): one entry per grant; a renewal leaves its
    /// entry in place to be pushed back when it comes up.
    expiries: BinaryHeap<Reverse<(MonoTime, Fence, u32)>>,
    waiters: HashMap<Box<str>, VecDeque<Waiter>>,
    /// The names each waiting set waits in, in the order asked.
    sets: HashMap<WaiterId, Box<[Box<str>]>>,
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
    /// The locks of each session held.
    sessions: SessionIndex,
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
            slots: Holders::default(),
            expiries: BinaryHeap::new(),
            waiters: HashMap::new(),
            sets: HashMap::new(),
            wait_ends: BinaryHeap::new(),
            next_waiter: 0,
            answers: Vec::new(),
            retained: HashMap::new(),
            forgotten: Forgotten::default(),
            expired: 0,
            lapsed: Vec::new(),
            forgets_since_basis: None,
            sessions: SessionIndex::default(),
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

    /// How many grants the table holds (some may have expired unnoticed
    /// until the next [`Table::poll`]); a name held shared or as permits
    /// counts each holder.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the table holds no lock.
    pub fn is_empty(&self) -> bool {
        self.slots.len() == 0
    }

    /// When new grants resume after a strict rebuild that missed members.
    pub fn new_grants_held_until(&self, now: MonoTime) -> Option<MonoTime> {
        self.hold_new_grants_until.filter(|&t| now < t)
    }

    /// Releases the lock `name` held under `id`, hands it to the first
    /// request waiting, and forgets the id.
    pub fn release(&mut self, name: &str, id: LockId, now: MonoTime) -> Result<Lock, LockError> {
        if !self.rebuilt {
            return Err(NotRebuilt.into());
        }
        self.expire_name(name, now);
        let at = self.find_held(name, id)?;
        if self.is_lapsed(at, now) {
            return Err(LockError::NotHeld);
        }
        let lock = self.remove(at);
        self.forgotten
            .insert(id, lock.expires + Self::FORGET_MARGIN, now);
        self.hand_over(name, Some(&lock), now);
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
        self.renew_beside(name, id, lease, node, Duration::ZERO, now)
    }

    /// [`Table::renew`], the lease cut as beside a lock-delay of `beside`
    /// if that is longer than the grant's own (a session's renewal: the
    /// longest lock-delay of its locks).
    pub(crate) fn renew_beside(
        &mut self,
        name: &str,
        id: LockId,
        lease: Option<Duration>,
        node: NodeId,
        beside: Duration,
        now: MonoTime,
    ) -> Result<Lock, LockError> {
        let at = self.held_at(name, id, now)?;
        let rule = self.rule;
        let slot = self.slots.get_mut(at).expect("found");
        if slot.session().is_some() {
            return Err(LockError::InSession);
        }
        let before = slot.expires;
        let delay = slot.delay().max(beside);
        let lease = rule.lease_beside(Some(lease.unwrap_or(slot.lease())), delay);
        slot.restart(lease, now);
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
        let at = self.find_held(name, id)?;
        if self.is_lapsed(at, now) {
            return Err(LockError::NotHeld);
        }
        Ok(at)
    }

    /// Whether the grant at `at` outlived its holder's lease and only its
    /// lock-delay keeps the name closed: its holder holds nothing.
    fn is_lapsed(&self, at: u32, now: MonoTime) -> bool {
        self.slots.get(at).is_some_and(|s| s.is_lapsed(now))
    }

    /// The node the lock `name` held under `id` is held through, and when
    /// its lease ends (ended or not): what a renewal through another node
    /// is about to move.
    pub fn held_through(&self, name: &str, id: LockId) -> Option<(NodeId, MonoTime)> {
        let at = self.find_held(name, id).ok()?;
        self.slots.get(at).map(|s| (s.node, s.expires))
    }

    /// The lock `name`, if held: of a name held shared or as permits, its
    /// oldest holder.
    pub fn get(&self, name: &str, now: MonoTime) -> Result<Option<Lock>, NotRebuilt> {
        if !self.rebuilt {
            return Err(NotRebuilt);
        }
        Ok(self.live_holders(name, now).next().map(Slot::to_lock))
    }

    /// The grant of `name` under `id`, if its lease runs (of a name held
    /// shared or as permits, whichever holder it is).
    pub fn grant_of(&self, name: &str, id: LockId, now: MonoTime) -> Option<Lock> {
        let at = self.find_held(name, id).ok()?;
        self.slots
            .get(at)
            .filter(|s| s.is_live(now))
            .map(Slot::to_lock)
    }

    /// Every holder of `name`, oldest first.
    pub fn holders(&self, name: &str, now: MonoTime) -> Result<Vec<Lock>, NotRebuilt> {
        if !self.rebuilt {
            return Err(NotRebuilt);
        }
        Ok(self.live_holders(name, now).map(Slot::to_lock).collect())
    }

    fn live_holders(&self, name: &str, now: MonoTime) -> impl Iterator<Item = &Slot> {
        self.live_from(self.slots.first(name), now)
    }

    /// The holders whose lease runs of the name whose oldest holder is
    /// `head`, oldest first.
    fn live_from(&self, head: Option<u32>, now: MonoTime) -> impl Iterator<Item = &Slot> {
        self.slots
            .ring(head)
            .map(|at| self.slots.get(at).expect("a holder"))
            .filter(move |s| s.is_live(now))
    }

    /// The locks held whose names start with `prefix`, in name order, at
    /// most `limit` of them.
    pub fn list(&self, prefix: &str, limit: usize, now: MonoTime) -> Result<Vec<Lock>, NotRebuilt> {
        self.listing(prefix, limit, now)
            .map(|listing| listing.locks)
    }

    /// As [`Table::list`], with how many names are held under `prefix` in
    /// all, each name's other holders, who waits for each, in order, and
    /// the free names under `prefix` that requests wait for.
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
            .heads()
            .filter(|&at| {
                self.slots.get(at).is_some_and(|s| {
                    s.name().starts_with(prefix)
                        && (!is_session_name(s.name()) || is_session_name(prefix))
                })
            })
            .filter_map(|at| self.live_from(Some(at), now).next())
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
        let also = found
            .iter()
            .map(|s| {
                self.live_holders(s.name(), now)
                    .skip(1)
                    .map(Slot::to_lock)
                    .collect()
            })
            .collect();
        Ok(Listing {
            locks: found.into_iter().map(Slot::to_lock).collect(),
            also,
            total: Some(total),
            waiters,
            queues,
            awaited: self.awaited_under(prefix, limit, now),
        })
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
            self.hand_over(&lock.name, Some(&lock), now);
            self.note_lapsed(lock);
        }
        self.end_waits(now);
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
        self.sessions.clear();
        self.expiries.clear();
        self.lapsed.clear();
        self.turn_away_waiters();
    }

    /// How many locks [`Table::granted`] answers at most: the table's and
    /// the ones kept aside, ended leases included.
    pub fn granted_len(&self) -> usize {
        self.slots.len() + self.retained.len()
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
                .filter(|l| self.slots.find(&l.id).is_none())
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
            self.turn_away_queue(name, now);
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

    /// How long past a released lease its id is still kept from rebuilds:
    /// every other record of the lease ends no later than the speaker's
    /// (holders count from the send, old speakers granted it earlier), give
    /// or take the difference in clock rates over one lease.
    pub const FORGET_MARGIN: Duration = Duration::from_secs(1);

    fn find_held(&self, name: &str, id: LockId) -> Result<u32, LockError> {
        self.slots
            .find(&id)
            .filter(|&at| self.slots.get(at).is_some_and(|s| s.name() == name))
            .ok_or(LockError::NotHeld)
    }

    /// Takes the lock at `at` out of the table.
    fn remove(&mut self, at: u32) -> Lock {
        let lock = self.slots.remove(at).expect("occupied").to_lock();
        if let Some(session) = lock.session {
            self.sessions.remove(session, lock.id);
        }
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

    /// Ends the holds of `name` whose lease ended by `now`, handing the
    /// name on.
    fn expire_name(&mut self, name: &str, now: MonoTime) {
        let ended: Vec<u32> = self
            .slots
            .of_name(name)
            .filter(|&at| self.slots.get(at).is_some_and(|s| !s.is_live(now)))
            .collect();
        let Some(&last) = ended.last() else {
            return;
        };
        let mut freed = None;
        for at in ended {
            let lock = self.remove(at);
            if at == last {
                freed = Some(lock.clone());
            }
            self.note_lapsed(lock);
        }
        self.hand_over(name, freed.as_ref(), now);
    }

    fn note_lapsed(&mut self, lock: Lock) {
        if self.lapsed.len() < LAPSED_KEPT {
            let held = lock.lease_ends().saturating_duration_since(lock.acquired);
            self.lapsed.push(Lapsed {
                name: lock.name,
                held,
            });
        }
    }

    fn insert(&mut self, lock: &Lock) {
        if let Some(session) = lock.session {
            self.sessions.add(session, lock.id);
        }
        let at = self.slots.insert(Slot::new(lock));
        self.expiries.push(Reverse((lock.expires, lock.fence, at)));
    }

    /// Refuses a new grant while a strict hold lasts, and ends the hold
    /// once it has run its length. Every lease granted before the rebuild
    /// that the rebuild did not see has ended by then, so the term's grants
    /// from here on are made knowing every live lock of earlier terms, as
    /// after a rebuild that saw every grant: their fences carry
    /// [`Fence::SEEN_ALL`] (above every fence before them). Every grant
    /// passes here first: a waiter served later was queued by an acquire
    /// made after the hold.
    fn hold_back_new_grants(&mut self, now: MonoTime) -> Result<(), AcquireError> {
        let Some(until) = self.hold_new_grants_until else {
            return Ok(());
        };
        if now < until {
            return Err(AcquireError::HeldBack { until });
        }
        self.hold_new_grants_until = None;
        self.fences.mark_seen_all();
        Ok(())
    }

    fn grant(&mut self, request: Request, now: MonoTime) -> Result<Lock, AcquireError> {
        if let Some(id) = request.session {
            let session = self.live_session(id, now)?;
            let fence = self.fences.take()?;
            let delay = self.rule.delay_beside(request.delay, session.lease);
            let lock = Lock {
                name: request.name,
                id: request.id,
                node: request.node,
                holder: request.holder,
                fence,
                kind: request.kind,
                lease: session.lease,
                delay,
                acquired: now,
                expires: session.lease_ends() + delay,
                data: request.data,
                data_rev: 0,
                session: Some(id),
            };
            self.insert(&lock);
            return Ok(lock);
        }
        let fence = self.fences.take()?;
        let lease = self.rule.lease_beside(request.lease, request.delay);
        let lock = Lock {
            name: request.name,
            id: request.id,
            node: request.node,
            holder: request.holder,
            fence,
            kind: request.kind,
            lease,
            delay: request.delay,
            acquired: now,
            expires: now + lease + request.delay,
            data: request.data,
            data_rev: 0,
            session: None,
        };
        self.insert(&lock);
        Ok(lock)
    }
}
