//! Sessions as a node serves them, as `crates/node/src/sessions.rs` drives
//! the protocol: a session is opened as any grant (the acquire of a fresh
//! session name) and its locks are asked with the session's id, through
//! the acquire path; its renewal is a call of its own. The speaker renews
//! it with `Member::renew_session` and puts the session on record, and,
//! when the answer says so (`copied`: its own client, or copies over two),
//! every lock of it, before it answers; a follower forwards the call with
//! the digest of the session's locks it records, and records the answer
//! with `Member::renewed_session_through_speaker` (a lock it recorded that
//! the speaker's records lack is lost). Closing releases the session and
//! every lock of it (`Member::release_session`), passed on as releases are.

use std::time::Duration;

use leasehold_protocol::SessionRenewal;
use locktable::{Lock, LockId, LockInTransit, NodeId};

use crate::msg::{Answer, ClientId, Msg, Refusal, ReqId, SessionCall, To};
use crate::node::{Origin, Pending, SessionAnswer};
use crate::serve::wire;
use crate::world::World;

fn ids<'a>(locks: impl IntoIterator<Item = &'a Lock>) -> Vec<LockId> {
    locks.into_iter().map(|l| l.id).collect()
}

impl World {
    /// A client's session renewal reaches node `n`: served here if it
    /// speaks, forwarded to the speaker otherwise, with the digest of the
    /// session's locks this node records.
    pub(crate) fn session_call(
        &mut self,
        n: NodeId,
        client: ClientId,
        req: ReqId,
        call: SessionCall,
    ) {
        let node = self.nodes.get_mut(&n).expect("member");
        let digest = node.member.session_digest(call.id);
        let leader = node.raft.current_leader();
        if leader == Some(n) {
            return self.speak_renew_session(n, n, (client, req), call, digest, None);
        }
        self.forward_session_renewal(n, client, req, call, false);
    }

    /// Passes a client's session renewal on to the speaker, with the
    /// digest of the session's locks this node records, its record of the
    /// session (`--session-reclaim`), and, `with_records` (the speaker
    /// wanted them), its records of the session's locks.
    fn forward_session_renewal(
        &mut self,
        n: NodeId,
        client: ClientId,
        req: ReqId,
        call: SessionCall,
        with_records: bool,
    ) {
        let t = self.t;
        let reclaim = self.config.session_reclaim;
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        let sent = node.member.session_sent(call.id);
        let digest = sent.digest;
        let leader = node.raft.current_leader();
        let Some(leader) = leader.filter(|&l| l != n) else {
            let msg = Msg::SessionReply {
                req,
                result: Err(Refusal::Unavailable),
                held: None,
            };
            return self.send(Some(n), To::Client(client), msg);
        };
        let forwarded = leasehold_protocol::Forwarded {
            sent: now,
            read_before: node.member.read_by(),
        };
        let record = reclaim.then(|| node.member.held_record(call.id)).flatten();
        let records = (with_records && record.is_some())
            .then(|| node.member.held_session_records(call.id))
            .map(|r| r.iter().map(|l| l.in_transit(now)).collect());
        let record = record.map(|l| l.in_transit(now));
        node.pending.insert(
            req,
            Pending {
                call: forwarded,
                sent: t,
                renewing: None,
                session: Some((call, sent)),
            },
        );
        let msg = Msg::ForwardRenewSession {
            from: n,
            client,
            req,
            call,
            node_digest: digest,
            record,
            records,
        };
        self.send(Some(n), To::Node(leader), msg);
    }

    /// A session's renewal as the speaker, for a client of `from` whose
    /// node records the session's locks with `digest`: the session and
    /// every lock of it renewed in the table, then put on record (the
    /// locks too when `copied`) before the answer. With the node's record
    /// of the session (`reclaim`), a session the table lacks is taken back
    /// from the node's records of its locks, or, with none yet, they are
    /// asked for ("records wanted").
    pub(crate) fn speak_renew_session(
        &mut self,
        n: NodeId,
        from: NodeId,
        (client, req): (ClientId, ReqId),
        call: SessionCall,
        digest: Option<u128>,
        reclaim: Option<(Lock, Option<Vec<Lock>>)>,
    ) {
        let t = self.t;
        let origin = Origin::of(n, from, client, req, t);
        let guard = self.guard(n);
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        let renewal = SessionRenewal {
            id: call.id,
            lease: Some(Duration::from_millis(call.lease_ms)),
            node: from,
            digest,
            client_digest: call.client_digest,
            session_copies: self.config.session_copies,
            reclaimable: matches!(reclaim, Some((_, None))),
        };
        let renewed = match reclaim {
            Some((session, Some(locks))) => {
                let mut locks = locks;
                locks.sort_by_key(|l| l.id);
                let sent = locks.len();
                let taken = node.member.reclaim_session(session, locks, &guard, now);
                let how = format!("{taken:?}");
                self.note(|| {
                    format!(
                        "node {n} takes session {} back from node {from}'s records \
                         ({sent} locks sent): {how}",
                        call.id
                    )
                });
                let node = self.nodes.get_mut(&n).expect("member");
                taken.and_then(|()| node.member.renew_session(renewal, &guard, now))
            }
            _ => node.member.renew_session(renewal, &guard, now),
        };
        self.handed_over(n);
        let (mut renewed, made) = match renewed {
            Ok(renewed) => renewed,
            Err(refusal) => {
                self.note(|| {
                    format!(
                        "node {n}: renewal of session {} refused: {refusal}",
                        call.id
                    )
                });
                let answer = SessionAnswer {
                    records: None,
                    client_digest: None,
                };
                return self.answer_session(n, origin, Err(wire(&refusal)), answer);
            }
        };
        // The table lists a session's locks in its hash maps' order, which
        // is seeded at random: sorted, a seed replays exactly.
        if let Some(records) = renewed.records.as_mut() {
            records.sort_by_key(|l| l.id);
        }
        let (locks, copied) = (renewed.locks, renewed.copied);
        self.note(|| {
            format!(
                "node {n} renews session {} ({locks} locks, copied {copied}) for node {from}",
                call.id
            )
        });
        let mut on_record = vec![renewed.session];
        if renewed.copied {
            on_record.extend(renewed.records.iter().flatten().cloned());
        }
        let answer = SessionAnswer {
            records: renewed.records,
            client_digest: call.client_digest,
        };
        self.answer_session_on_record(n, on_record, (origin, made), answer);
    }

    /// Sends a session renewal's answer to whoever asked: the client, with
    /// the ids of every lock of it if its digest differed from the
    /// speaker's; or the forwarding node, with the records.
    pub(crate) fn answer_session(
        &mut self,
        n: NodeId,
        origin: Origin,
        result: Answer,
        answer: SessionAnswer,
    ) {
        if !self.nodes[&n].alive {
            return;
        }
        let SessionAnswer {
            records,
            client_digest,
        } = answer;
        match origin {
            Origin::Local { client, req, .. } => {
                let held = records.filter(|r| {
                    client_digest.is_some_and(|d| d != locktable::session::digest(ids(r)))
                });
                let held = held.map(|r| ids(&r));
                let msg = Msg::SessionReply { req, result, held };
                self.send(Some(n), To::Client(client), msg);
            }
            Origin::Forwarded {
                node, client, req, ..
            } => {
                let now = self.nodes[&n].mono(self.t);
                let records = records.map(|r| r.iter().map(|l| l.in_transit(now)).collect());
                let msg = Msg::ForwardSessionReply {
                    client,
                    req,
                    result,
                    records,
                };
                self.send(Some(n), To::Node(node), msg);
            }
        }
    }

    /// The speaker's answer to a session's renewal node `n` forwarded:
    /// recorded (counted from the call's send) before the client hears;
    /// "not held" ends this node's records of the session and its locks.
    pub(crate) fn session_forward_answered(
        &mut self,
        n: NodeId,
        client: ClientId,
        (req, result): (ReqId, Answer),
        records: Option<Vec<LockInTransit>>,
    ) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        let Some(pending) = node.pending.remove(&req) else {
            return;
        };
        let Some((call, sent)) = pending.session else {
            return;
        };
        let now = node.mono(t);
        let member = &mut node.member;
        let held = records
            .as_ref()
            .filter(|_| call.client_digest.is_some())
            .map(|r| r.iter().map(|l| l.id).collect());
        let (result, held) = match result {
            Ok((session, _)) => {
                match member.renewed_session_through_speaker(
                    pending.call,
                    session,
                    records,
                    &sent,
                    now,
                ) {
                    Ok((session, mut lost)) => {
                        lost.sort_by_key(|l| l.id);
                        for lock in lost {
                            self.note(|| format!("node {n}: {} of a session lost", lock.name));
                        }
                        (Ok((session.in_transit(now), t - pending.sent)), held)
                    }
                    Err(refusal) => (Err(wire(&refusal)), None),
                }
            }
            Err(Refusal::RecordsWanted) => {
                // The speaker's table lacks the session: send it again at
                // once with this node's records of its locks.
                self.note(|| format!("node {n}: session {} wanted from its records", call.id));
                return self.forward_session_renewal(n, client, req, call, true);
            }
            Err(e) => {
                if matches!(e, Refusal::NotHeld) {
                    let refused = leasehold_protocol::Refusal::NotHeld;
                    let locks = member.held_session_locks(call.id);
                    for lock in locks.into_iter().chain([call.id]) {
                        member.renewal_refused(lock, &refused, now);
                    }
                }
                (Err(e), None)
            }
        };
        let msg = Msg::SessionReply { req, result, held };
        self.send(Some(n), To::Client(client), msg);
    }

    /// A client closes its session through node `n`: the node forgets its
    /// records of it and of its locks, and the speaker releases them all,
    /// then answers.
    ///
    /// The node keeps its records of the session and its locks until the
    /// speaker answers (as a node does: a close that never reaches the
    /// speaker leaves them for the next rebuild, until they lapse).
    pub(crate) fn close_session(&mut self, n: NodeId, client: ClientId, id: LockId) {
        let node = &self.nodes[&n];
        match node.raft.current_leader() {
            Some(l) if l == n => self.speak_close_session(n, n, client, id),
            Some(l) => {
                let msg = Msg::ForwardCloseSession {
                    from: n,
                    client,
                    id,
                };
                self.send(Some(n), To::Node(l), msg)
            }
            None => {}
        }
    }

    /// The speaker answered the close of session `id` that node `n`
    /// forwarded: its records of the session and its locks go, and the
    /// client is answered.
    pub(crate) fn session_closed_through_speaker(
        &mut self,
        n: NodeId,
        client: ClientId,
        id: LockId,
        session: LockInTransit,
    ) {
        let guard = self.guard(n);
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(self.t);
        node.member
            .session_released_through_speaker(&session.arrive(now), &guard, now);
        self.send(Some(n), To::Client(client), Msg::SessionClosed { id });
    }

    /// Closes a session as the speaker, for a client of `from`: it and
    /// every lock of it released, each passed on to the members that may
    /// keep a record of it, and the client answered (through `from`).
    pub(crate) fn speak_close_session(
        &mut self,
        n: NodeId,
        from: NodeId,
        client: ClientId,
        id: LockId,
    ) {
        let guard = self.guard(n);
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(self.t);
        if let Ok(released) = node.member.release_session(id, &guard, now) {
            let session = released
                .iter()
                .find(|(lock, _)| lock.id == id)
                .map(|(lock, _)| lock.in_transit(now));
            let count = released.len();
            self.note(|| format!("node {n} closes session {id} ({count} with its locks)"));
            for (lock, to) in released {
                self.send_forgets(n, &lock, to);
            }
            match (from == n, session) {
                (true, _) | (false, None) => {
                    self.send(Some(n), To::Client(client), Msg::SessionClosed { id })
                }
                (false, Some(session)) => {
                    let msg = Msg::ForwardSessionClosed {
                        client,
                        id,
                        session,
                    };
                    self.send(Some(n), To::Node(from), msg)
                }
            }
        }
        self.dispatch(n);
    }
}
