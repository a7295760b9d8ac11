//! The speaker's calls, as `crates/node/src/speak.rs` drives the protocol:
//! acquire, release and renew ask the node's `Member` with the guard and
//! the node's clock, and the driver carries out what it answers (answers
//! to clients, copies, releases passed on). Also the expiry task and where
//! every message a node receives goes.

use std::time::Duration;

use leasehold_protocol::{Renewal, SetAcquisition};
use locktable::{
    AcquireError, Acquired, AcquiredSet, Lock, LockId, LockInTransit, NodeId, Request,
};

use crate::msg::{Ask, ClientId, Msg, Refusal, ReqId, To};
use crate::node::{Origin, Pending};
use crate::world::World;

/// A refusal as the node answers it on the wire: `409 held`, `404
/// not_held`, or `503` (retry).
pub(crate) fn wire(refusal: &leasehold_protocol::Refusal) -> Refusal {
    match refusal {
        leasehold_protocol::Refusal::Held(lock) => Refusal::Held(lock.fence.0),
        leasehold_protocol::Refusal::NotHeld => Refusal::NotHeld,
        leasehold_protocol::Refusal::RecordsWanted => Refusal::RecordsWanted,
        _ => Refusal::Unavailable,
    }
}

impl World {
    /// The expiry task: ends leases and waits while this node may speak;
    /// turns waiters away when it may not.
    pub(crate) fn poll(&mut self, n: NodeId) {
        let guard = self.guard(n);
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(self.t);
        node.member.poll(&guard, now);
        self.dispatch(n);
    }

    /// Hands the table's answers to whoever waits for them: a grant once
    /// it is on record with enough members.
    pub(crate) fn dispatch(&mut self, n: NodeId) {
        let node = self.nodes.get_mut(&n).expect("member");
        let term = node.member.speaking().unwrap_or(0);
        let fresh = node.member.take_answers();
        let granted = fresh.iter().filter(|a| a.result.is_ok()).count();
        let mut answers = std::mem::take(&mut node.undelivered);
        answers.extend(fresh);
        // The table hands out some answers in its hash maps' order, which
        // is seeded at random: sorted, a seed replays exactly.
        answers.sort_by_key(|a| a.waiter);
        let mut out = Vec::new();
        for answer in answers {
            if let Some((origin, made)) = node.waiters.remove(&answer.waiter) {
                out.push((origin, made, answer.result, answer.also));
            }
        }
        for _ in 0..granted {
            self.note(|| format!("node {n} hands a waiting request its lock"));
            self.granted(n, term);
        }
        for (origin, made, result, also) in out {
            match result {
                Ok(lock) if !also.is_empty() => {
                    let locks = std::iter::once(lock).chain(also).collect();
                    self.answer_set_on_record(n, locks, origin, made);
                }
                Ok(lock) => self.answer_on_record(n, lock, origin, made, true),
                Err(AcquireError::Held(lock)) => {
                    self.answer(n, origin, Err(Refusal::Held(lock.fence.0)))
                }
                Err(_) => self.answer(n, origin, Err(Refusal::Unavailable)),
            }
        }
    }

    /// A lease of the name asked for that ran out is handed to a waiting
    /// request inside `acquire` and `renew`, whatever they answer: granted
    /// now (the checker counts it at once), told at the next dispatch, as
    /// the node does.
    pub(crate) fn handed_over(&mut self, n: NodeId) {
        let node = self.nodes.get_mut(&n).expect("member");
        let term = node.member.speaking().unwrap_or(0);
        let handed = node.member.take_answers();
        let granted = handed.iter().filter(|a| a.result.is_ok()).count();
        node.undelivered.extend(handed);
        for _ in 0..granted {
            self.granted(n, term);
        }
    }

    /// A grant or refusal as the speaker, for a client of `from`.
    fn speak_acquire(&mut self, n: NodeId, from: NodeId, client: ClientId, req: ReqId, ask: Ask) {
        if !ask.also.is_empty() {
            return self.speak_acquire_set(n, from, (client, req), ask);
        }
        let t = self.t;
        self.next_lock += 1;
        let id = LockId::from_u128(self.next_lock);
        let origin = Origin::of(n, from, client, req, t);
        let guard = self.guard(n);
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        let request = Request {
            session: ask.session,
            delay: Duration::from_millis(ask.delay_ms),
            kind: ask.kind,
            name: ask.name,
            id,
            node: from,
            holder: String::new(),
            lease: Some(Duration::from_millis(ask.lease_ms)),
            wait: Duration::from_millis(ask.wait_ms),
            data: None,
        };
        let acquired = node.member.acquire(request, &guard, now);
        self.handed_over(n);
        let (acquired, made) = match acquired {
            Ok(outcome) => outcome,
            Err(refusal) => return self.answer(n, origin, Err(wire(&refusal))),
        };
        let term = made.term.unwrap_or(0);
        match acquired {
            Acquired::Granted(lock) => {
                self.granted(n, term);
                self.answer_on_record(n, lock, origin, made, true);
            }
            Acquired::Waiting(w) => {
                let node = self.nodes.get_mut(&n).expect("member");
                node.waiters.insert(w, (origin, made));
            }
        }
    }

    /// A set of names granted all at once, or refused whole, or queued, as
    /// the speaker, for a client of `from`.
    fn speak_acquire_set(
        &mut self,
        n: NodeId,
        from: NodeId,
        (client, req): (ClientId, ReqId),
        ask: Ask,
    ) {
        let t = self.t;
        let origin = Origin::of(n, from, client, req, t);
        let names: Vec<String> = std::iter::once(ask.name.clone())
            .chain(ask.also.iter().cloned())
            .collect();
        let requests: Vec<Request> = names
            .into_iter()
            .map(|name| {
                self.next_lock += 1;
                Request {
                    session: Default::default(),
                    delay: Duration::from_millis(ask.delay_ms),
                    kind: ask.kind,
                    name,
                    id: LockId::from_u128(self.next_lock),
                    node: from,
                    holder: String::new(),
                    lease: Some(Duration::from_millis(ask.lease_ms)),
                    wait: Duration::from_millis(ask.wait_ms),
                    data: None,
                }
            })
            .collect();
        let guard = self.guard(n);
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        let acquired = node.member.acquire_set(requests, None, &guard, now);
        self.handed_over(n);
        match acquired {
            Ok(SetAcquisition::Table(AcquiredSet::Granted(locks), made)) => {
                self.granted(n, made.term.unwrap_or(0));
                self.answer_set_on_record(n, locks, origin, made);
            }
            Ok(SetAcquisition::Table(AcquiredSet::Waiting(w), made)) => {
                let node = self.nodes.get_mut(&n).expect("member");
                node.waiters.insert(w, (origin, made));
            }
            Ok(SetAcquisition::Own(_)) => self.answer(n, origin, Err(Refusal::Unavailable)),
            Err(refusal) => self.answer(n, origin, Err(wire(&refusal))),
        }
    }

    fn speak_release(&mut self, n: NodeId, name: &str, id: LockId) {
        let guard = self.guard(n);
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(self.t);
        if let Ok((lock, to)) = node.member.release(name, id, &guard, now) {
            self.send_forgets(n, &lock, to);
        }
        self.dispatch(n);
    }

    /// A renewal as the speaker, for a client of `from`: a lock the table
    /// lacks is reclaimed from `record`, the renewing node's view of it.
    pub(crate) fn speak_renew(
        &mut self,
        n: NodeId,
        from: NodeId,
        (client, req): (ClientId, ReqId),
        (name, id, lease_ms): (String, LockId, u64),
        record: Option<Lock>,
    ) {
        let t = self.t;
        let origin = Origin::of(n, from, client, req, t);
        let guard = self.guard(n);
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        let renewal = Renewal {
            name: &name,
            id,
            lease: Some(Duration::from_millis(lease_ms)),
            node: from,
            record,
            data: None,
        };
        let renewed = node.member.renew(renewal, &guard, now);
        self.handed_over(n);
        match renewed {
            Ok((renewed, made)) => {
                let fence = renewed.fence.0;
                self.note(|| format!("node {n} renews {name} (fence {fence}) for node {from}"));
                self.answer_on_record(n, renewed, origin, made, false);
            }
            Err(refusal) => {
                self.note(|| format!("node {n}: renewal of {name} refused: {refusal}"));
                self.answer(n, origin, Err(wire(&refusal)));
            }
        }
    }

    /// A client's call reaches node `n`: served here if it speaks,
    /// forwarded to the speaker otherwise (a renewal with this node's
    /// record of the lock). A forwarded call is noted with when it left
    /// and the highest term that had read this node then.
    fn client_call(&mut self, n: NodeId, client: ClientId, req: ReqId, call: Call) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        let record = match &call {
            Call::Renew(_, id, _) => node.member.held_record(*id),
            Call::Acquire(_) => None,
        };
        let leader = node.raft.current_leader();
        if leader == Some(n) {
            return match call {
                Call::Acquire(ask) => self.speak_acquire(n, n, client, req, ask),
                Call::Renew(name, id, lease_ms) => {
                    self.speak_renew(n, n, (client, req), (name, id, lease_ms), record)
                }
            };
        }
        let Some(leader) = leader else {
            let result = Err(Refusal::Unavailable);
            let also = Vec::new();
            return self.send(
                Some(n),
                To::Client(client),
                Msg::Reply { req, result, also },
            );
        };
        let call_sent = leasehold_protocol::Forwarded {
            sent: now,
            read_before: node.member.read_by(),
        };
        let renewing = match &call {
            Call::Renew(_, id, _) => Some(*id),
            Call::Acquire(_) => None,
        };
        node.pending.insert(
            req,
            Pending {
                call: call_sent,
                sent: t,
                renewing,
                session: None,
            },
        );
        let msg = match call {
            Call::Acquire(ask) => Msg::Forward {
                from: n,
                client,
                req,
                ask,
            },
            Call::Renew(name, id, lease_ms) => Msg::ForwardRenew {
                from: n,
                client,
                req,
                name,
                id,
                lease_ms,
                record: record.map(|r| r.in_transit(now)),
            },
        };
        self.send(Some(n), To::Node(leader), msg);
    }

    /// The speaker's answer to a call node `n` forwarded: the protocol
    /// records the lock in `Held` (counted from the call's send, unless a
    /// newer speaker read this node meanwhile) before the client hears.
    ///
    /// A set's locks (`also` beside the first) are all recorded, or, if one
    /// cannot be, the set is refused: its grants then lapse at the speaker
    /// unheld (the node takes them back; here they run out).
    fn forward_answered(
        &mut self,
        n: NodeId,
        client: ClientId,
        (req, result, also): (ReqId, crate::msg::Answer, Vec<LockInTransit>),
    ) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        let Some(pending) = node.pending.remove(&req) else {
            return;
        };
        let now = node.mono(t);
        let member = &mut node.member;
        let recorded: Result<Vec<Lock>, Refusal> = match (result, pending.renewing) {
            (Ok((lock, _)), Some(_)) => member
                .renewed_through_speaker(pending.call, lock, now)
                .map(|lock| vec![lock])
                .map_err(|refusal| wire(&refusal)),
            (Ok((lock, served)), None) => {
                let served = Duration::from_millis(served);
                std::iter::once(lock)
                    .chain(also)
                    .map(|lock| member.granted_through_speaker(pending.call, lock, served, now))
                    .collect::<Result<_, _>>()
                    .map_err(|refusal| wire(&refusal))
            }
            (Err(e), renewing) => {
                if let (Refusal::NotHeld, Some(id)) = (&e, renewing) {
                    member.renewal_refused(id, &leasehold_protocol::Refusal::NotHeld, now);
                }
                Err(e)
            }
        };
        let (result, also) = match recorded {
            Ok(locks) => {
                let mut transits = locks.iter().map(|l| l.in_transit(now));
                let first = transits.next().expect("a lock");
                (Ok((first, t - pending.sent)), transits.collect())
            }
            Err(refusal) => (Err(refusal), Vec::new()),
        };
        self.send(
            Some(n),
            To::Client(client),
            Msg::Reply { req, result, also },
        );
    }

    /// A message arrives at node `n`, which runs.
    pub(crate) fn node_message(&mut self, n: NodeId, msg: Msg) {
        let t = self.t;
        match msg {
            Msg::Raft { from, msg } => {
                self.nodes
                    .get_mut(&n)
                    .expect("member")
                    .raft
                    .handle(from, msg, t);
                self.flush_raft(n);
            }
            Msg::Acquire { client, req, ask } => {
                self.client_call(n, client, req, Call::Acquire(ask))
            }
            Msg::Forward {
                from,
                client,
                req,
                ask,
            } => self.speak_acquire(n, from, client, req, ask),
            Msg::ForwardReply {
                client,
                req,
                result,
                also,
            } => self.forward_answered(n, client, (req, result, also)),
            Msg::Renew {
                client,
                req,
                name,
                id,
                lease_ms,
            } => self.client_call(n, client, req, Call::Renew(name, id, lease_ms)),
            Msg::ForwardRenew {
                from,
                client,
                req,
                name,
                id,
                lease_ms,
                record,
            } => {
                let now = self.nodes[&n].mono(t);
                let record = record.map(|r| r.arrive(now));
                self.speak_renew(n, from, (client, req), (name, id, lease_ms), record);
            }
            Msg::Copy {
                from,
                key,
                term,
                lock,
            } => self.take_copy(n, from, key, term, lock),
            Msg::CopyAck { from, key, ok } => self.copy_answered(n, key, from, ok),
            Msg::SessionCopy {
                from,
                key,
                term,
                lock,
                locks,
            } => self.take_session_copy(n, from, key, term, (lock, locks)),
            Msg::SessionUnfollowed {
                from,
                key,
                term,
                session,
            } => self.session_unfollowed(n, from, key, term, session),
            Msg::Copies {
                from,
                key,
                term,
                locks,
            } => self.take_session_copies(n, from, key, term, locks),
            Msg::Release { name, id } => {
                let node = self.nodes.get_mut(&n).expect("member");
                node.member.drop_held(id);
                match node.raft.current_leader() {
                    Some(l) if l == n => self.speak_release(n, &name, id),
                    Some(l) => self.send(Some(n), To::Node(l), Msg::ForwardRelease { name, id }),
                    None => {}
                }
            }
            Msg::ForwardRelease { name, id } => self.speak_release(n, &name, id),
            Msg::RenewSession { client, req, call } => self.session_call(n, client, req, call),
            Msg::ForwardRenewSession {
                from,
                client,
                req,
                call,
                node_digest,
                record,
                records,
            } => {
                let now = self.nodes[&n].mono(self.t);
                let reclaim = record.map(|record| {
                    let arrive = |l: LockInTransit| l.arrive(now);
                    (
                        arrive(record),
                        records.map(|r| r.into_iter().map(arrive).collect()),
                    )
                });
                self.speak_renew_session(n, from, (client, req), call, node_digest, reclaim)
            }
            Msg::ForwardSessionReply {
                client,
                req,
                result,
                records,
            } => self.session_forward_answered(n, client, (req, result), records),
            Msg::CloseSession { client, id } => self.close_session(n, client, id),
            Msg::ForwardCloseSession { from, client, id } => {
                self.speak_close_session(n, from, client, id)
            }
            Msg::ForwardSessionClosed {
                client,
                id,
                session,
            } => self.session_closed_through_speaker(n, client, id, session),
            Msg::Forgets { from, key, forgets } => self.take_forgets(n, from, key, forgets),
            Msg::ForgetAck { key } => self.forgets_answered(n, key, true),
            Msg::ReadReport {
                leader,
                term,
                attempt,
            } => self.read_report(n, leader, term, attempt),
            Msg::Report {
                from,
                attempt,
                header,
                locks,
            } => self.report_arrived(n, from, attempt, header, locks),
            Msg::Lost { ids } => {
                self.nodes.get_mut(&n).expect("member").member.lost(ids);
            }
            Msg::Reply { .. } | Msg::SessionReply { .. } | Msg::SessionClosed { .. } => {}
        }
    }
}

/// A client's call a node serves or forwards.
enum Call {
    Acquire(Ask),
    /// A renewal of the lock of this name and id, for this lease (ms).
    Renew(String, LockId, u64),
}
