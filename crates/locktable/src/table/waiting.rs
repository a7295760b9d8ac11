//! Requests and their queues: who gets a name at once, who waits, and who
//! is served when a holder leaves.
//!
//! A queue is served first in, first out, and nobody overtakes it: a
//! request is granted at once only if it fits beside the name's holders and
//! nobody waits for the name. When a holder leaves, the queue is granted
//! from its head while the head fits, so several readers may go together,
//! and a writer waiting stops the readers behind it (no writer starves).
//!
//! A set of names waits in every name's queue under one id, and is granted
//! in one step once it heads every one of them and fits in each. Every
//! queue holds the sets in the order they came, so the oldest request
//! waiting heads each of its queues: no two sets wait for each other.

use std::cmp::Reverse;
use std::collections::VecDeque;
use std::time::Duration;

use super::{Acquired, AcquiredSet, Answer, Table, WaiterId};
use crate::error::{AcquireError, NotRebuilt};
use crate::listing::{Awaited, Queued, Waiting, QUEUE_SHOWN};
use crate::lock::{Kind, Lock, Request};
use crate::session::is_session_name;
use crate::slots::Slot;
use crate::time::MonoTime;

/// A request waiting in a name's queue.
pub(super) struct Waiter {
    pub(super) id: WaiterId,
    pub(super) request: Request,
    pub(super) until: MonoTime,
    /// Whether it is one name of a set, which waits in each name's queue
    /// under one id ([`Table::sets`]).
    pub(super) in_set: bool,
}

impl Table {
    /// How many requests are waiting: a set waiting in several queues
    /// counts once.
    pub fn waiting(&self) -> usize {
        let entries: usize = self.waiters.values().map(VecDeque::len).sum();
        let extra: usize = self.sets.values().map(|names| names.len() - 1).sum();
        entries.saturating_sub(extra)
    }

    /// How many requests wait for each name that has any, in no order.
    pub fn queue_lengths(&self) -> impl Iterator<Item = (&str, usize)> {
        self.waiters.iter().map(|(name, q)| (&**name, q.len()))
    }

    /// Grants the lock `request` names, or queues the request when the name
    /// is held by others it cannot be held beside (or others wait for it)
    /// and the request may wait, or says who holds it.
    ///
    /// A request of another family than the name's holders and waiters
    /// (permits on a lock, a lock on a semaphore, or another permit count)
    /// is refused at once ([`AcquireError::KindMismatch`]).
    pub fn acquire(&mut self, request: Request, now: MonoTime) -> Result<Acquired, AcquireError> {
        if !self.rebuilt {
            return Err(NotRebuilt.into());
        }
        self.hold_back_new_grants(now)?;
        self.check_delay(request.delay)?;
        self.check_session(request.session, now)?;
        self.expire_name(&request.name, now);
        let held = self.slots.held(&request.name);
        let first = held.map(|(head, _)| head);
        let name_kind = first
            .and_then(|at| self.slots.get(at))
            .map(|s| s.kind())
            .or_else(|| self.queue_kind(&request.name));
        if let Some(kind) = name_kind.filter(|k| !request.kind.same_family(*k)) {
            return Err(AcquireError::KindMismatch(kind));
        }
        if let Some(at) = self.slots.find(&request.id) {
            // The id holds already (a retry): refused, whatever its wait. A
            // grant under it once it ends would carry an id its release
            // made forgotten, which the next rebuild leaves out.
            let held = self.slots.get(at).expect("found").to_lock();
            return Err(AcquireError::Held(Box::new(held)));
        }
        if !self.waiters.contains_key(request.name.as_str()) && self.fits_beside(held, request.kind)
        {
            return self.grant(request, now).map(Acquired::Granted);
        }
        if request.wait.is_zero() {
            return Err(self.refusal(&request.name));
        }
        let id = self.next_waiter_id();
        let until = now + request.wait;
        let name: Box<str> = request.name.as_str().into();
        self.wait_ends.push(Reverse((until, id, name.clone())));
        self.waiters.entry(name).or_default().push_back(Waiter {
            id,
            request,
            until,
            in_set: false,
        });
        Ok(Acquired::Waiting(id))
    }

    /// Grants every name of a set at once, or none: `requests` name each
    /// name once, with the grant's id, kind and data for each; the first
    /// one's lease, wait, holder and node count for all. The set is granted
    /// at once if every name is free for it (it fits beside each name's
    /// holders, and nobody waits for any); otherwise it waits in every
    /// name's queue, and is granted in one step, with consecutive fences,
    /// once it heads each queue and fits beside each name's holders.
    ///
    /// A name of another family than asked is refused at once, as in
    /// [`Table::acquire`].
    pub fn acquire_set(
        &mut self,
        requests: Vec<Request>,
        now: MonoTime,
    ) -> Result<AcquiredSet, AcquireError> {
        if !self.rebuilt {
            return Err(NotRebuilt.into());
        }
        self.hold_back_new_grants(now)?;
        let Some(first) = requests.first() else {
            return Err(AcquireError::BadSet);
        };
        let (holder, node, lease, wait, session) = (
            first.holder.clone(),
            first.node,
            first.lease,
            first.wait,
            first.session,
        );
        self.check_session(session, now)?;
        let mut names = hashbrown::HashSet::with_capacity(requests.len());
        let mut ids = hashbrown::HashSet::with_capacity(requests.len());
        if !requests
            .iter()
            .all(|r| names.insert(r.name.as_str()) && ids.insert(r.id))
        {
            return Err(AcquireError::BadSet);
        }
        drop((names, ids));
        for r in &requests {
            self.check_delay(r.delay)?;
        }
        let requests: Vec<Request> = requests
            .into_iter()
            .map(|r| Request {
                holder: holder.clone(),
                node,
                lease,
                wait,
                session,
                ..r
            })
            .collect();
        for r in &requests {
            self.expire_name(&r.name, now);
        }
        for r in &requests {
            let name_kind = self
                .slots
                .first(&r.name)
                .and_then(|at| self.slots.get(at))
                .map(|s| s.kind())
                .or_else(|| self.queue_kind(&r.name));
            if let Some(kind) = name_kind.filter(|k| !r.kind.same_family(*k)) {
                return Err(AcquireError::KindMismatch(kind));
            }
            if let Some(at) = self.slots.find(&r.id) {
                let held = self.slots.get(at).expect("found").to_lock();
                return Err(AcquireError::Held(Box::new(held)));
            }
        }
        let free = requests
            .iter()
            .all(|r| !self.waiters.contains_key(r.name.as_str()) && self.fits(&r.name, r.kind));
        if free {
            return self.grant_set(requests, now).map(AcquiredSet::Granted);
        }
        if wait.is_zero() {
            return Err(self.set_refusal(requests.iter().map(|r| r.name.as_str())));
        }
        let id = self.next_waiter_id();
        let until = now + wait;
        let names: Box<[Box<str>]> = requests.iter().map(|r| r.name.as_str().into()).collect();
        self.wait_ends.push(Reverse((until, id, names[0].clone())));
        for (request, name) in requests.into_iter().zip(names.iter()) {
            self.waiters
                .entry(name.clone())
                .or_default()
                .push_back(Waiter {
                    id,
                    request,
                    until,
                    in_set: true,
                });
        }
        self.sets.insert(id, names);
        Ok(AcquiredSet::Waiting(id))
    }

    /// Refuses a lock-delay over [`Lock::MAX_DELAY`], or one that leaves
    /// no lease under the longest.
    fn check_delay(&self, delay: Duration) -> Result<(), AcquireError> {
        if delay > Lock::MAX_DELAY || delay >= self.rule.max {
            return Err(AcquireError::BadDelay { max: self.rule.max });
        }
        Ok(())
    }

    fn next_waiter_id(&mut self) -> WaiterId {
        let id = WaiterId(self.next_waiter);
        self.next_waiter += 1;
        id
    }

    /// Why `name` is not granted now: its oldest holder holds it, or, free,
    /// earlier requests wait for it.
    fn refusal(&self, name: &str) -> AcquireError {
        match self.slots.first(name).and_then(|at| self.slots.get(at)) {
            Some(held) => AcquireError::Held(Box::new(held.to_lock())),
            None => AcquireError::Awaited(name.to_owned()),
        }
    }

    /// Why a set of `names` is not granted now: the first of them held by
    /// another, or else the first awaited.
    fn set_refusal<'a>(&self, mut names: impl Iterator<Item = &'a str> + Clone) -> AcquireError {
        let held = names
            .clone()
            .find_map(|name| self.slots.first(name).and_then(|at| self.slots.get(at)));
        match held {
            Some(held) => AcquireError::Held(Box::new(held.to_lock())),
            None => AcquireError::Awaited(names.next().unwrap_or_default().to_owned()),
        }
    }

    /// Grants every one of `requests` in one step, with consecutive fences.
    fn grant_set(
        &mut self,
        requests: Vec<Request>,
        now: MonoTime,
    ) -> Result<Vec<Lock>, AcquireError> {
        if !self.fences.has(requests.len()) {
            return Err(AcquireError::FencesExhausted);
        }
        if let Some(first) = requests.first() {
            self.check_session(first.session, now)?;
        }
        requests.into_iter().map(|r| self.grant(r, now)).collect()
    }

    /// Stops waiting for `waiter` (its client went away) in `name`'s queue,
    /// and in every other name's of its set, and serves the requests it
    /// stood before that now fit. Says whether it was still waiting.
    pub fn cancel(&mut self, name: &str, waiter: WaiterId, now: MonoTime) -> bool {
        match self.unqueue(name, waiter) {
            Some(firsts) => {
                self.serve(firsts, None, now);
                true
            }
            None => false,
        }
    }

    /// Takes `waiter` out of `name`'s queue and, of a set, out of its other
    /// names' queues; answers the names where it was first, or `None` if
    /// it was not waiting in `name`'s queue.
    fn unqueue(&mut self, name: &str, waiter: WaiterId) -> Option<Vec<Box<str>>> {
        let names = match self.sets.remove(&waiter) {
            Some(names) => names,
            None => Box::new([name.into()]),
        };
        let mut found = false;
        let mut firsts = Vec::new();
        for name in names.iter() {
            if let Some(was_first) = self.unqueue_one(name, waiter) {
                found = true;
                if was_first {
                    firsts.push(name.clone());
                }
            }
        }
        found.then_some(firsts)
    }

    fn unqueue_one(&mut self, name: &str, waiter: WaiterId) -> Option<bool> {
        let queue = self.waiters.get_mut(name)?;
        let pos = queue.iter().position(|w| w.id == waiter)?;
        queue.remove(pos);
        if queue.is_empty() {
            self.waiters.remove(name);
        }
        Some(pos == 0)
    }

    /// Answers the waits run out by `now`: the name (of a set, the first
    /// one held) was held all along.
    pub(super) fn end_waits(&mut self, now: MonoTime) {
        while let Some(Reverse((until, _, _))) = self.wait_ends.peek() {
            if *until > now {
                break;
            }
            let Reverse((_, waiter, name)) = self.wait_ends.pop().expect("peeked");
            let names = self.sets.get(&waiter).cloned();
            let Some(firsts) = self.unqueue(&name, waiter) else {
                continue;
            };
            let result = match &names {
                Some(names) => Err(self.set_refusal(names.iter().map(|n| &**n))),
                None => Err(self.refusal(&name)),
            };
            self.answers.push(Answer::one(waiter, result));
            self.serve(firsts, None, now);
        }
    }

    /// The requests waiting for `name`, and its holders whose lease runs
    /// after the oldest.
    pub fn waiting_for(&self, name: &str, now: MonoTime) -> Waiting {
        let others = self
            .live_holders(name, now)
            .skip(1)
            .map(Slot::to_lock)
            .collect();
        match self.waiters.get(name) {
            Some(queue) => Waiting {
                count: queue.len(),
                first: self.queued(queue),
                others,
            },
            None => Waiting {
                others,
                ..Waiting::default()
            },
        }
    }

    /// The names starting with `prefix` that nobody holds at `now` but
    /// requests wait for, in name order, at most `limit` (a session's
    /// name only under a session's prefix, as a listing shows them).
    pub(super) fn awaited_under(&self, prefix: &str, limit: usize, now: MonoTime) -> Vec<Awaited> {
        let mut names: Vec<&str> = self
            .waiters
            .iter()
            .filter(|(name, queue)| {
                !queue.is_empty()
                    && name.starts_with(prefix)
                    && (!is_session_name(name) || is_session_name(prefix))
                    && self.live_holders(name, now).next().is_none()
            })
            .map(|(name, _)| &**name)
            .collect();
        names.sort_unstable();
        names.truncate(limit);
        names
            .into_iter()
            .map(|name| {
                let queue = &self.waiters[name];
                Awaited {
                    name: name.to_owned(),
                    count: queue.len(),
                    first: self.queued(queue),
                }
            })
            .collect()
    }

    /// The first [`QUEUE_SHOWN`] requests of `queue`, as a listing shows them.
    pub(super) fn queued(&self, queue: &VecDeque<Waiter>) -> Vec<Queued> {
        queue
            .iter()
            .take(QUEUE_SHOWN)
            .map(|w| Queued {
                holder: w.request.holder.clone(),
                node: w.request.node,
                since: w.until - w.request.wait,
                until: w.until,
                lease: self.rule.lease(w.request.lease),
                kind: w.request.kind,
                with: self.set_names_besides(w),
            })
            .collect()
    }

    /// The other names of `w`'s set, in the order asked (none for one name).
    fn set_names_besides(&self, w: &Waiter) -> Vec<String> {
        match self.sets.get(&w.id).filter(|_| w.in_set) {
            Some(names) => names
                .iter()
                .filter(|n| ***n != *w.request.name)
                .map(|n| n.to_string())
                .collect(),
            None => Vec::new(),
        }
    }

    /// Answers every waiting request [`NotRebuilt`] and keeps the table: for
    /// a speaker that cannot show its leadership for now (its leader lease
    /// lapsed) but may again in the same term.
    pub fn turn_away_waiters(&mut self) {
        self.wait_ends.clear();
        self.sets.clear();
        let first = self.answers.len();
        for (_, queue) in self.waiters.drain() {
            self.answers.extend(
                queue
                    .into_iter()
                    .map(|w| Answer::one(w.id, Err(NotRebuilt.into()))),
            );
        }
        // In the order the waiters came, not the map's; a set once.
        self.answers[first..].sort_unstable_by_key(|a| a.waiter);
        let mut seen = first;
        for i in first..self.answers.len() {
            if seen == first || self.answers[seen - 1].waiter != self.answers[i].waiter {
                self.answers.swap(seen, i);
                seen += 1;
            }
        }
        self.answers.truncate(seen);
    }

    /// Answers every request waiting for `name` [`NotRebuilt`] (a release
    /// heard from elsewhere: another node may speak). A set among them
    /// leaves its other names' queues too, and each of those it headed is
    /// served: the requests behind it there wait for names this table
    /// still grants.
    pub(super) fn turn_away_queue(&mut self, name: &str, now: MonoTime) {
        let Some(queue) = self.waiters.remove(name) else {
            return;
        };
        let mut headed = Vec::new();
        for w in queue {
            if w.in_set {
                if let Some(names) = self.sets.remove(&w.id) {
                    for other in names.iter().filter(|n| ***n != *name) {
                        if self.unqueue_one(other, w.id) == Some(true) {
                            headed.push(other.clone());
                        }
                    }
                }
            }
            self.answers.push(Answer::one(w.id, Err(NotRebuilt.into())));
        }
        self.serve(headed, None, now);
    }

    /// Whether a grant of `kind` fits beside the holders of `name` now.
    pub(super) fn fits(&self, name: &str, kind: Kind) -> bool {
        self.fits_beside(self.slots.held(name), kind)
    }

    /// Whether a grant of `kind` fits beside `held`, a name's oldest
    /// holder and how many hold it.
    fn fits_beside(&self, held: Option<(u32, u32)>, kind: Kind) -> bool {
        let Some((first, count)) = held else {
            return true;
        };
        let held_as = self.slots.get(first).expect("a holder").kind();
        kind.compatible(held_as) && count < kind.limit()
    }

    /// What the first request waiting for `name` asks for.
    fn queue_kind(&self, name: &str) -> Option<Kind> {
        self.waiters
            .get(name)
            .and_then(VecDeque::front)
            .map(|w| w.request.kind)
    }

    /// Whether a holder of `kind` may join `name` beside its waiters: none
    /// waits, or they wait as the same family.
    pub(super) fn queue_admits(&self, name: &str, kind: Kind) -> bool {
        self.queue_kind(name).is_none_or(|k| kind.same_family(k))
    }

    /// A holder of `name` left (by `freed`'s release or expiry, or none: a
    /// waiter ahead went away): the queue is granted from its head while
    /// the head fits; heads whose wait ended before are told `freed` held
    /// the name.
    pub(super) fn hand_over(&mut self, name: &str, freed: Option<&Lock>, now: MonoTime) {
        if self.waiters.is_empty() {
            return;
        }
        self.serve(vec![name.into()], freed, now);
    }

    /// Serves the queues of `names` from their heads, and of every name a
    /// set granted or taken out meanwhile left with a new head.
    fn serve(&mut self, mut names: Vec<Box<str>>, freed: Option<&Lock>, now: MonoTime) {
        let mut freed = freed;
        while let Some(name) = names.pop() {
            self.serve_one(&name, freed, now, &mut names);
            freed = None;
        }
    }

    /// Serves `name`'s queue from its head while the head fits; names whose
    /// queue a set left with a new head go into `next`.
    fn serve_one(
        &mut self,
        name: &str,
        freed: Option<&Lock>,
        now: MonoTime,
        next: &mut Vec<Box<str>>,
    ) {
        while let Some(head) = self.waiters.get(name).and_then(VecDeque::front) {
            if !self.fits(name, head.request.kind) || self.slots.find(&head.request.id).is_some() {
                break;
            }
            let (id, until, in_set) = (head.id, head.until, head.in_set);
            if let Some(freed) = freed.filter(|_| until < now) {
                let firsts = self.unqueue(name, id).unwrap_or_default();
                next.extend(firsts.into_iter().filter(|n| **n != *name));
                self.answers.push(Answer::one(
                    id,
                    Err(AcquireError::Held(Box::new(freed.clone()))),
                ));
                continue;
            }
            if in_set {
                if !self.set_ready(id) {
                    break;
                }
                let names = self.sets.remove(&id).expect("a waiting set");
                let requests: Vec<Request> =
                    names.iter().map(|n| self.pop_head(n).request).collect();
                next.extend(names.iter().filter(|n| ***n != *name).cloned());
                let answer = match self.grant_set(requests, now) {
                    Ok(mut locks) => {
                        let first = locks.remove(0);
                        Answer {
                            waiter: id,
                            result: Ok(first),
                            also: locks,
                        }
                    }
                    Err(e) => Answer::one(id, Err(e)),
                };
                self.answers.push(answer);
                continue;
            }
            let waiter = self.pop_head(name);
            let result = self.grant(waiter.request, now);
            self.answers.push(Answer::one(waiter.id, result));
        }
    }

    /// Takes the head of `name`'s queue, which has one.
    fn pop_head(&mut self, name: &str) -> Waiter {
        let queue = self.waiters.get_mut(name).expect("a queue");
        let head = queue.pop_front().expect("a head");
        if queue.is_empty() {
            self.waiters.remove(name);
        }
        head
    }

    /// Whether the set waiting as `id` heads the queue of every one of its
    /// names and fits beside each name's holders.
    fn set_ready(&self, id: WaiterId) -> bool {
        let Some(names) = self.sets.get(&id) else {
            return false;
        };
        names.iter().all(|name| {
            self.waiters
                .get(&**name)
                .and_then(VecDeque::front)
                .is_some_and(|w| {
                    w.id == id
                        && self.fits(name, w.request.kind)
                        && self.slots.find(&w.request.id).is_none()
                })
        })
    }
}
