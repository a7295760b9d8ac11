//! Copies, as `crates/node/src/copies.rs` makes them: a grant or renewal
//! is answered only once `copies` members hold a record of it. A grant
//! through a follower has two (the speaker's table, the follower's `Held`
//! once the answer reaches it); a client of the speaker itself needs a
//! copy on another member, tried after the speaker in id order, suspects
//! last. Copies leave in a queue flushed a moment later (a crash loses what
//! is queued). Once enough members acknowledged, the table that made the
//! grant must still speak; otherwise the grant is taken back and refused (a
//! renewal is refused only). A member refuses copies from a speaker of a
//! term older than it has seen or been read by.

use std::collections::{BTreeSet, VecDeque};

use locktable::{Lock, LockInTransit, NodeId};

use crate::config::timing::{COPY_QUEUE_MS, COPY_TIMEOUT_MS};
use crate::config::Sabotage;
use crate::node::{Made, Origin};
use crate::world::{Answer, Event, Msg, Refusal, To, World};

/// A grant or renewal waiting for its copies' acknowledgements.
pub(crate) struct CopyWait {
    lock: Lock,
    origin: Origin,
    made: Made,
    term: u64,
    grant: bool,
    needed: usize,
    acked: Vec<NodeId>,
    untried: VecDeque<NodeId>,
    in_flight: BTreeSet<NodeId>,
}

/// How many members beyond the speaker and the holder's node (one member
/// when they are the same) must acknowledge a copy.
fn copies_needed(copies: usize, speaker: NodeId, holder: NodeId) -> usize {
    let records = if holder == speaker { 1 } else { 2 };
    copies.saturating_sub(records)
}

impl World {
    /// `ensure_on_record`: answers `origin` with `lock`, just granted
    /// (`grant`) or renewed by node `n`'s table `made`, once it is on
    /// record with enough members and that table still speaks.
    pub(crate) fn answer_on_record(
        &mut self,
        n: NodeId,
        lock: Lock,
        origin: Origin,
        made: Made,
        grant: bool,
    ) {
        let needed = copies_needed(self.config.copies, n, origin.node(n));
        let Some(term) = made.term.filter(|_| needed > 0) else {
            let acked = needed == 0;
            self.on_record(n, lock, origin, made, grant, acked);
            return;
        };
        self.next_copy += 1;
        let key = self.next_copy;
        let unacked = self.config.sabotaged(Sabotage::UnackedCopies);
        let mut wait = CopyWait {
            untried: self.candidates(n, origin.node(n)).into(),
            lock,
            origin,
            made,
            term,
            grant,
            needed,
            acked: Vec::new(),
            in_flight: BTreeSet::new(),
        };
        while wait.in_flight.len() < needed {
            let Some(member) = wait.untried.pop_front() else {
                break;
            };
            wait.in_flight.insert(member);
            self.send_copy(n, key, term, &wait.lock, member, !unacked);
        }
        if unacked {
            self.on_record(n, wait.lock, origin, made, grant, true);
        } else if wait.in_flight.is_empty() {
            self.on_record(n, wait.lock, origin, made, grant, false);
        } else {
            let node = self.nodes.get_mut(&n).expect("member");
            node.copying.insert(key, wait);
        }
    }

    /// The members that may take a copy of a lock held through `holder`,
    /// in the order to try them: after `n` in id order, suspects last.
    fn candidates(&self, n: NodeId, holder: NodeId) -> Vec<NodeId> {
        let node = &self.nodes[&n];
        let mut order: Vec<NodeId> = (1..=self.config.nodes)
            .filter(|&m| m != n && m != holder)
            .collect();
        let before = order.iter().take_while(|&&m| m < n).count();
        order.rotate_left(before);
        order.sort_by_key(|m| node.suspects.contains(m));
        order
    }

    /// Queues a copy of `lock` for `member`, noted first as a member that
    /// may keep it; if `wait`, gives the member a while to acknowledge.
    fn send_copy(
        &mut self,
        n: NodeId,
        key: u64,
        term: u64,
        lock: &Lock,
        member: NodeId,
        wait: bool,
    ) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        node.moved.entry(lock.id).or_default().insert(member);
        if node.copy_queue.is_empty() {
            let incarnation = node.incarnation;
            self.at(t + COPY_QUEUE_MS, Event::CopyFlush(n, incarnation));
        }
        let node = self.nodes.get_mut(&n).expect("member");
        node.copy_queue.push((member, key, term, lock.clone()));
        if wait {
            let incarnation = node.incarnation;
            self.at(
                t + COPY_TIMEOUT_MS,
                Event::CopyTimeout(n, incarnation, key, member),
            );
        }
    }

    /// Sends the copies node `n` queued, each lease as it is now.
    pub(crate) fn flush_copies(&mut self, n: NodeId) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        for (member, key, term, lock) in std::mem::take(&mut node.copy_queue) {
            let lock = lock.in_transit(now);
            let msg = Msg::Copy {
                from: n,
                key,
                term,
                lock,
            };
            self.send(Some(n), To::Node(member), msg);
        }
    }

    /// `member` acknowledged the copy `key` (`ok`), refused it, or let it
    /// time out: try the next candidate, or answer.
    pub(crate) fn copy_answered(&mut self, n: NodeId, key: u64, member: NodeId, ok: bool) {
        let node = self.nodes.get_mut(&n).expect("member");
        let Some(wait) = node.copying.get_mut(&key) else {
            return;
        };
        if !wait.in_flight.remove(&member) {
            return;
        }
        let done = if ok {
            node.suspects.remove(&member);
            wait.acked.push(member);
            (wait.acked.len() == wait.needed).then_some(true)
        } else {
            node.suspects.insert(member);
            match wait.untried.pop_front() {
                Some(next) => {
                    wait.in_flight.insert(next);
                    let (term, lock) = (wait.term, wait.lock.clone());
                    self.send_copy(n, key, term, &lock, next, true);
                    None
                }
                None => wait.in_flight.is_empty().then_some(false),
            }
        };
        if let Some(acked) = done {
            let node = self.nodes.get_mut(&n).expect("member");
            let wait = node.copying.remove(&key).expect("waiting");
            let (name, on) = (&wait.lock.name, &wait.acked);
            self.note(|| format!("node {n}: {name} copied to {on:?}"));
            self.on_record(n, wait.lock, wait.origin, wait.made, wait.grant, acked);
        }
    }

    /// The copies are acknowledged (`acked`) or cannot be: answer the
    /// client if the table that made the lock still speaks; otherwise take
    /// a grant back, and refuse.
    fn on_record(
        &mut self,
        n: NodeId,
        lock: Lock,
        origin: Origin,
        made: Made,
        grant: bool,
        acked: bool,
    ) {
        let t = self.t;
        let ignore = self.config.sabotaged(Sabotage::IgnoreLeaderLease);
        let node = &self.nodes[&n];
        if acked && node.still_speaks_for(made, t, ignore) {
            let transit = node.lock_view(&lock, t);
            let lease = lock.lease;
            self.answer(n, origin, Ok((transit, t - origin.arrived())));
            if grant && matches!(origin, Origin::Local { .. }) {
                self.on_local_answer(n, lease);
            }
            return;
        }
        self.note(|| format!("node {n}: {} not on record, refused", lock.name));
        if grant {
            self.take_back(n, &lock);
        }
        self.answer(n, origin, Err(Refusal::Unavailable));
    }

    /// Sends `result` to whoever asked: the client, or the forwarding node.
    pub(crate) fn answer(&mut self, n: NodeId, origin: Origin, result: Answer) {
        if !self.nodes[&n].alive {
            return;
        }
        match origin {
            Origin::Local { client, req, .. } => {
                self.send(Some(n), To::Client(client), Msg::Reply { req, result })
            }
            Origin::Forwarded {
                node, client, req, ..
            } => self.send(
                Some(n),
                To::Node(node),
                Msg::ForwardReply {
                    client,
                    req,
                    result,
                },
            ),
        }
    }

    /// Releases a grant its client never heard of, and tells the members
    /// that may keep a record of it; a table dropped meanwhile forgets it,
    /// and every member is told.
    fn take_back(&mut self, n: NodeId, lock: &Lock) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        node.held.remove(lock.id);
        node.copies.remove(lock.id);
        let released = node.table.release(&lock.name, lock.id, now);
        let to = match released {
            Ok(released) => self.forget_to(n, &released),
            Err(_) => {
                let node = self.nodes.get_mut(&n).expect("member");
                node.table.forget(&lock.name, lock.id, lock.ttl(now), now);
                node.moved.remove(&lock.id);
                (1..=self.config.nodes).filter(|&m| m != n).collect()
            }
        };
        self.send_forgets(n, &lock.name, lock, to);
        self.dispatch(n);
    }

    /// The members other than `n` that may keep a record of `lock`,
    /// released now: a lock of this term was granted here, and only the
    /// nodes it was held through and the members sent a copy have a record
    /// of it; one from an earlier term may be in any member's.
    pub(crate) fn forget_to(&mut self, n: NodeId, lock: &Lock) -> Vec<NodeId> {
        let node = self.nodes.get_mut(&n).expect("member");
        let moved = node.moved.remove(&lock.id).unwrap_or_default();
        let mut to: BTreeSet<NodeId> = if Some(lock.fence.epoch()) == node.speaking {
            moved.into_iter().chain([lock.node]).collect()
        } else {
            (1..=self.config.nodes).collect()
        };
        to.remove(&n);
        to.into_iter().collect()
    }

    /// Tells `to` that `lock` was released, with the time its lease had
    /// left at the send.
    pub(crate) fn send_forgets(&mut self, n: NodeId, name: &str, lock: &Lock, to: Vec<NodeId>) {
        let now = self.nodes[&n].mono(self.t);
        let left = lock.expires.saturating_duration_since(now);
        for member in to {
            let msg = Msg::Forget {
                name: name.to_string(),
                id: lock.id,
                left,
            };
            self.send(Some(n), To::Node(member), msg);
        }
    }

    /// As a member: keeps a copy sent by the speaker of `term`, unless this
    /// node has seen a newer term or been read by one.
    pub(crate) fn take_copy(
        &mut self,
        n: NodeId,
        from: NodeId,
        key: u64,
        term: u64,
        lock: LockInTransit,
    ) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        let seen = node.read_by.max(node.raft.term());
        let ok = term >= seen;
        if ok {
            let now = node.mono(t);
            let lock = lock.arrive(now);
            if !node.table.is_forgotten(lock.id, now) {
                node.copies.record(lock);
            }
        }
        self.send(Some(n), To::Node(from), Msg::CopyAck { from: n, key, ok });
    }
}
