//! Requests and their queues: who gets a name at once, who waits, and who
//! is served when a holder leaves.
//!
//! A queue is served first in, first out, and nobody overtakes it: a
//! request is granted at once only if it fits beside the name's holders and
//! nobody waits for the name. When a holder leaves, the queue is granted
//! from its head while the head fits, so several readers may go together,
//! and a writer waiting stops the readers behind it (no writer starves).

use std::cmp::Reverse;
use std::collections::VecDeque;

use super::{Acquired, Answer, Table, WaiterId};
use crate::error::{AcquireError, NotRebuilt};
use crate::listing::{Queued, Waiting, QUEUE_SHOWN};
use crate::lock::{Kind, Lock, Request};
use crate::slots::Slot;
use crate::time::MonoTime;

/// A request waiting in a name's queue.
pub(super) struct Waiter {
    pub(super) id: WaiterId,
    pub(super) request: Request,
    pub(super) until: MonoTime,
}

impl Table {
    /// How many requests are waiting.
    pub fn waiting(&self) -> usize {
        self.waiters.values().map(VecDeque::len).sum()
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
        if let Some(until) = self.new_grants_held_until(now) {
            return Err(AcquireError::HeldBack { until });
        }
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
        if first.is_none()
            || (!self.waiters.contains_key(request.name.as_str())
                && self.fits_beside(held, request.kind))
        {
            return self.grant(request, now).map(Acquired::Granted);
        }
        if request.wait.is_zero() {
            let at = first.expect("a name not free has a holder");
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

    /// Stops waiting for `waiter` (its client went away), and serves the
    /// requests it stood before that now fit. Says whether it was still
    /// waiting.
    pub fn cancel(&mut self, name: &str, waiter: WaiterId, now: MonoTime) -> bool {
        match self.unqueue(name, waiter) {
            Some(was_first) => {
                if was_first {
                    self.hand_over(name, None, now);
                }
                true
            }
            None => false,
        }
    }

    /// Takes `waiter` out of `name`'s queue; says whether it was there and
    /// whether it was first.
    fn unqueue(&mut self, name: &str, waiter: WaiterId) -> Option<bool> {
        let queue = self.waiters.get_mut(name)?;
        let pos = queue.iter().position(|w| w.id == waiter)?;
        queue.remove(pos);
        if queue.is_empty() {
            self.waiters.remove(name);
        }
        Some(pos == 0)
    }

    /// Answers the waits run out by `now`: the name was held all along.
    pub(super) fn end_waits(&mut self, now: MonoTime) {
        while let Some(Reverse((until, _, _))) = self.wait_ends.peek() {
            if *until > now {
                break;
            }
            let Reverse((_, waiter, name)) = self.wait_ends.pop().expect("peeked");
            let Some(was_first) = self.unqueue(&name, waiter) else {
                continue;
            };
            let result = match self.slots.first(&name).and_then(|at| self.slots.get(at)) {
                Some(held) => Err(AcquireError::Held(Box::new(held.to_lock()))),
                None => Err(NotRebuilt.into()),
            };
            self.answers.push(Answer { waiter, result });
            if was_first {
                self.hand_over(&name, None, now);
            }
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
            })
            .collect()
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
        let Some(mut queue) = self.waiters.remove(name) else {
            return;
        };
        while let Some(head) = queue.front() {
            if !self.fits(name, head.request.kind) || self.slots.find(&head.request.id).is_some() {
                break;
            }
            let waiter = queue.pop_front().expect("a head");
            if let Some(freed) = freed.filter(|_| waiter.until < now) {
                self.answers.push(Answer {
                    waiter: waiter.id,
                    result: Err(AcquireError::Held(Box::new(freed.clone()))),
                });
                continue;
            }
            let result = self.grant(waiter.request, now);
            self.answers.push(Answer {
                waiter: waiter.id,
                result,
            });
        }
        if !queue.is_empty() {
            self.waiters.insert(name.into(), queue);
        }
    }
}
