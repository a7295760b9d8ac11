//! Copies, as `crates/node/src/copies.rs` drives the protocol: the
//! member's `OnRecord` says which members to send a copy to, next after
//! each answer, and whether the grant may then be answered. The driver
//! queues copies for a flush a moment later (a crash loses what is
//! queued), times out members that do not acknowledge (and sends one more
//! copy when one goes unanswered a while), takes back a grant
//! that was not put on record, and passes releases on.

use leasehold_protocol::{Guard, Made, Member, RecordOut, Recording, Refusal};
use locktable::{Lock, LockInTransit, MonoTime, NodeId};

use crate::config::timing::{COPY_HEDGE_MS, COPY_QUEUE_MS, COPY_TIMEOUT_MS};
use crate::msg::{Answer, Event, Msg, To};
use crate::node::{CopyWait, Origin};
use crate::serve::wire;
use crate::world::World;

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
        self.put_on_record(n, lock, origin, made, grant, None);
    }

    /// Puts every lock of a set granted on record, and answers the set once
    /// each concluded: whole, or refused with all of it taken back.
    pub(crate) fn answer_set_on_record(
        &mut self,
        n: NodeId,
        locks: Vec<Lock>,
        origin: Origin,
        made: Made,
    ) {
        self.next_copy += 1;
        let key = self.next_copy;
        let wait = crate::node::SetWait {
            node: n,
            origin,
            locks: locks.clone(),
            left: locks.len(),
            failed: None,
            session: None,
        };
        self.sets_on_record.insert(key, wait);
        for lock in locks {
            self.put_on_record(n, lock, origin, made, true, Some(key));
        }
    }

    /// Puts a session renewed on record, with its locks when they are to be
    /// copied again (`locks` after the session), as the set path does; the
    /// renewal is answered once each concluded, or refused (nothing is
    /// taken back: a renewal grants nothing new).
    pub(crate) fn answer_session_on_record(
        &mut self,
        n: NodeId,
        locks: Vec<Lock>,
        (origin, made): (Origin, Made),
        answer: crate::node::SessionAnswer,
    ) {
        self.next_copy += 1;
        let key = self.next_copy;
        let wait = crate::node::SetWait {
            node: n,
            origin,
            locks: locks.clone(),
            left: locks.len(),
            failed: None,
            session: Some(answer),
        };
        self.sets_on_record.insert(key, wait);
        for lock in locks {
            self.put_on_record(n, lock, origin, made, false, Some(key));
        }
    }

    fn put_on_record(
        &mut self,
        n: NodeId,
        lock: Lock,
        origin: Origin,
        made: Made,
        grant: bool,
        set: Option<u64>,
    ) {
        let guard = self.guard(n);
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(self.t);
        let holder = origin.node(n);
        let recording = node
            .member
            .start_on_record(&lock, holder, made, &guard, now);
        self.next_copy += 1;
        let key = self.next_copy;
        let mut wait = CopyWait {
            recording,
            lock,
            origin,
            grant,
            set,
        };
        if self.config.sabotage.unacked_copies {
            // A node that answers before the copies are acknowledged sends
            // them all the same, and waits for none.
            while let Some(RecordOut::Copy(member)) = wait.recording.poll() {
                self.send_copy(n, key, &wait, member, false);
            }
            let node = &self.nodes[&n];
            let speaks = node.member.still_speaks_for(made, &guard, now);
            let result = speaks.then_some(()).ok_or(Refusal::NotRebuilt);
            self.conclude(n, wait, result);
            return;
        }
        self.drive_record(n, key, wait);
    }

    /// Does what `wait`'s recording says: sends its copies (each timed),
    /// or concludes once it is decided; until then keeps it under `key`.
    fn drive_record(&mut self, n: NodeId, key: u64, mut wait: CopyWait) {
        while let Some(out) = wait.recording.poll() {
            match out {
                RecordOut::Copy(member) => self.send_copy(n, key, &wait, member, true),
                RecordOut::Decided(result) => {
                    let (name, on) = (&wait.lock.name, wait.recording.acked());
                    self.note(|| format!("node {n}: {name} copied to {on:?}"));
                    self.conclude(n, wait, result);
                    return;
                }
            }
        }
        let node = self.nodes.get_mut(&n).expect("member");
        node.copying.insert(key, wait);
    }

    /// Queues a copy of `wait`'s lock for `member` (noted already as a
    /// member that may keep it); if `timed`, gives the member a while to
    /// acknowledge, and says when it was slow to.
    fn send_copy(&mut self, n: NodeId, key: u64, wait: &CopyWait, member: NodeId, timed: bool) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        if node.copy_queue.is_empty() {
            let incarnation = node.incarnation;
            self.at(t + COPY_QUEUE_MS, Event::CopyFlush(n, incarnation));
        }
        let by_session = wait
            .recording
            .session_locks()
            .filter(|_| self.config.session_copies);
        let node = self.nodes.get_mut(&n).expect("member");
        node.copy_queue.push((
            member,
            key,
            wait.recording.term(),
            wait.lock.clone(),
            by_session,
        ));
        if timed {
            let incarnation = node.incarnation;
            self.at(
                t + COPY_TIMEOUT_MS,
                Event::CopyTimeout(n, incarnation, key, member),
            );
            self.at(
                t + COPY_HEDGE_MS,
                Event::CopyHedge(n, incarnation, key, member),
            );
        }
    }

    /// Sends the copies node `n` queued, each lease as it is now.
    pub(crate) fn flush_copies(&mut self, n: NodeId) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        for (member, key, term, lock, by_session) in std::mem::take(&mut node.copy_queue) {
            let lock = lock.in_transit(now);
            let msg = match by_session {
                Some(locks) => Msg::SessionCopy {
                    from: n,
                    key,
                    term,
                    lock,
                    locks,
                },
                None => Msg::Copy {
                    from: n,
                    key,
                    term,
                    lock,
                },
            };
            self.send(Some(n), To::Node(member), msg);
        }
    }

    /// `member` acknowledged the copy `key` (`ok`), refused it, or let it
    /// time out: the recording says whether to try another member, wait,
    /// or answer.
    pub(crate) fn copy_answered(&mut self, n: NodeId, key: u64, member: NodeId, ok: bool) {
        self.move_record(n, key, |r, m, lock, guard, now| {
            r.answered(m, lock, member, ok, guard, now)
        });
    }

    /// `member` has not answered the copy `key` a while after it was sent:
    /// the recording may send another member one as well.
    pub(crate) fn copy_unanswered(&mut self, n: NodeId, key: u64, member: NodeId) {
        self.move_record(n, key, |r, m, lock, guard, now| {
            r.hedge(m, lock, member, guard, now)
        });
    }

    /// Tells node `n`'s recording `key` (if it still waits) what happened,
    /// with `step`, and does what it says next.
    fn move_record(
        &mut self,
        n: NodeId,
        key: u64,
        step: impl FnOnce(&mut Recording, &mut Member, &Lock, &Guard, MonoTime),
    ) {
        let guard = self.guard(n);
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(self.t);
        let Some(mut wait) = node.copying.remove(&key) else {
            return;
        };
        step(
            &mut wait.recording,
            &mut node.member,
            &wait.lock,
            &guard,
            now,
        );
        self.drive_record(n, key, wait);
    }

    /// Answers the client if the lock is on record (`result`); otherwise
    /// takes a grant back, and refuses.
    fn conclude(&mut self, n: NodeId, wait: CopyWait, result: Result<(), Refusal>) {
        let t = self.t;
        let CopyWait {
            lock,
            origin,
            grant,
            set,
            ..
        } = wait;
        if let Some(key) = set {
            return self.set_lock_concluded(key, result);
        }
        match result {
            Ok(()) => {
                let transit = lock.in_transit(self.nodes[&n].mono(t));
                self.answer(n, origin, Ok((transit, t - origin.arrived())));
                if grant && matches!(origin, Origin::Local { .. }) {
                    self.on_local_answer(n, lock.lease);
                }
            }
            Err(refusal) => {
                self.note(|| format!("node {n}: {} not on record ({refusal}), refused", lock.name));
                if grant {
                    self.take_back(n, &lock);
                }
                self.answer(n, origin, Err(wire(&refusal)));
            }
        }
    }

    /// One lock of a set concluded: once every lock of it has, the set is
    /// answered whole, or, if one was not put on record, every lock of it
    /// is taken back and the set refused.
    fn set_lock_concluded(&mut self, key: u64, result: Result<(), Refusal>) {
        let Some(wait) = self.sets_on_record.get_mut(&key) else {
            return;
        };
        wait.left -= 1;
        if let Err(refusal) = result {
            wait.failed.get_or_insert(wire(&refusal));
        }
        if wait.left > 0 {
            return;
        }
        let mut wait = self.sets_on_record.remove(&key).expect("found");
        let (n, t) = (wait.node, self.t);
        if let Some(answer) = wait.session.take() {
            let served = t - wait.origin.arrived();
            let result = match wait.failed {
                None => {
                    let now = self.nodes[&n].mono(t);
                    Ok((wait.locks[0].in_transit(now), served))
                }
                Some(refusal) => Err(refusal),
            };
            return self.answer_session(n, wait.origin, result, answer);
        }
        match wait.failed {
            None => {
                let now = self.nodes[&n].mono(t);
                let mut transits = wait.locks.iter().map(|l| l.in_transit(now));
                let first = transits.next().expect("a set has a lock");
                let also = transits.collect();
                let served = t - wait.origin.arrived();
                self.answer_with(n, wait.origin, Ok((first, served)), also);
                if matches!(wait.origin, Origin::Local { .. }) {
                    self.on_local_answer(n, wait.locks[0].lease);
                }
            }
            Some(refusal) => {
                for lock in &wait.locks {
                    self.take_back(n, lock);
                }
                self.answer(n, wait.origin, Err(refusal));
            }
        }
    }

    /// Sends `result` to whoever asked: the client, or the forwarding node.
    pub(crate) fn answer(&mut self, n: NodeId, origin: Origin, result: Answer) {
        self.answer_with(n, origin, result, Vec::new());
    }

    /// Sends `result`, with a set's other locks `also`, to whoever asked.
    pub(crate) fn answer_with(
        &mut self,
        n: NodeId,
        origin: Origin,
        result: Answer,
        also: Vec<LockInTransit>,
    ) {
        if !self.nodes[&n].alive {
            return;
        }
        match origin {
            Origin::Local { client, req, .. } => self.send(
                Some(n),
                To::Client(client),
                Msg::Reply { req, result, also },
            ),
            Origin::Forwarded {
                node, client, req, ..
            } => self.send(
                Some(n),
                To::Node(node),
                Msg::ForwardReply {
                    client,
                    req,
                    result,
                    also,
                },
            ),
        }
    }

    /// Releases a grant its client never heard of, and tells the members
    /// the member names.
    fn take_back(&mut self, n: NodeId, lock: &Lock) {
        let guard = self.guard(n);
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(self.t);
        let to = node.member.take_back(lock, &guard, now);
        self.send_forgets(n, lock, to);
        self.dispatch(n);
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
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(self.t);
        let seen = node.raft.term();
        let ok = node
            .member
            .take_copies(term, vec![lock.arrive(now)], seen, now)
            .is_ok();
        self.send(Some(n), To::Node(from), Msg::CopyAck { from: n, key, ok });
    }

    /// As a member: keeps the copy of a session's grant, renewing its copies
    /// of the session's locks if it keeps exactly those noted; if not, asks
    /// the speaker for every lock of it.
    pub(crate) fn take_session_copy(
        &mut self,
        n: NodeId,
        from: NodeId,
        key: u64,
        term: u64,
        (lock, locks): (LockInTransit, leasehold_protocol::SessionLocks),
    ) {
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(self.t);
        let seen = node.raft.term();
        let session = lock.id;
        let taken = node
            .member
            .take_session_copy(term, lock.arrive(now), locks, seen, now);
        let count = locks.count;
        self.note(|| format!("node {n}: session copy of {session} ({count} locks): {taken:?}"));
        let msg = match taken {
            Ok(true) => Msg::CopyAck {
                from: n,
                key,
                ok: true,
            },
            Ok(false) => Msg::SessionUnfollowed {
                from: n,
                key,
                term,
                session,
            },
            Err(_) => Msg::CopyAck {
                from: n,
                key,
                ok: false,
            },
        };
        self.send(Some(n), To::Node(from), msg);
    }

    /// As the speaker: `member` did not follow the session's copy `key`;
    /// the session and every lock of it go to it as copies, each noted.
    pub(crate) fn session_unfollowed(
        &mut self,
        n: NodeId,
        member: NodeId,
        key: u64,
        term: u64,
        session: locktable::LockId,
    ) {
        let node = self.nodes.get_mut(&n).expect("member");
        if !node.copying.contains_key(&key) {
            return;
        }
        let now = node.mono(self.t);
        let records = node.member.session_copies(session, member, now);
        if records.is_empty() {
            return self.copy_answered(n, key, member, false);
        }
        let locks = records.iter().map(|l| l.in_transit(now)).collect();
        let msg = Msg::Copies {
            from: n,
            key,
            term,
            locks,
        };
        self.send(Some(n), To::Node(member), msg);
    }

    /// As a member: keeps copies of a session and its locks, acknowledged
    /// as copy `key`.
    pub(crate) fn take_session_copies(
        &mut self,
        n: NodeId,
        from: NodeId,
        key: u64,
        term: u64,
        locks: Vec<LockInTransit>,
    ) {
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(self.t);
        let seen = node.raft.term();
        let locks = locks.into_iter().map(|l| l.arrive(now)).collect();
        let ok = node.member.take_copies(term, locks, seen, now).is_ok();
        self.send(Some(n), To::Node(from), Msg::CopyAck { from: n, key, ok });
    }
}
