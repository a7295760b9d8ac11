//! Clients' sessions: now and then a client opens a session (an acquire of
//! a fresh session name), takes one or two of the names in it (acquires
//! with the session's id), renews the session, never the locks, every
//! third of its lease through its node (moving to the next node when its
//! node does not answer), and at the end closes it (the close answered once
//! the speaker released it) or lets it lapse. Its end is noted for the
//! checker, with every lock granted in it: none may be named a holder
//! after it.
//!
//! Each lock of it is held from its grant to the end of its lease on the
//! holder's count: from the grant's send plus served, then from each
//! renewal's send plus served that counted it (the client's digest was of
//! it). A renewal answered "not held" loses every lock of it; one whose
//! answer lists the session's locks loses each lock it counted that the
//! list lacks. Each lock is judged as any lock.

use locktable::{session_name, Kind, LockId};
use rand::Rng;

use crate::client_state::{ClientState, SessionHolding, SessionLock};
use crate::config::timing::{
    CLIENT_MARGIN_MS, LEASE_MS, MAX_LEASE_MS, RENEW_ATTEMPT_MS, RENEW_DIVISOR,
};
use crate::history::{HeldRefusal, Interval, LostLock, SessionEnd};
use crate::msg::{Answer, Ask, ClientId, Event, Msg, Refusal, ReqId, SessionCall, To};
use crate::world::World;

impl World {
    /// Client `c` opens a session: the acquire of a name of its own.
    pub(crate) fn open_session(&mut self, c: ClientId) {
        let t = self.t;
        let lease_ms = if self.rng.gen_bool(0.7) {
            LEASE_MS
        } else {
            MAX_LEASE_MS
        };
        self.next_req += 1;
        let req = self.next_req;
        // Request numbers are unique in a run: so is the nonce.
        let name = session_name(LockId::from_u128(u128::from(req)));
        let ask = Ask {
            name,
            wait_ms: 0,
            lease_ms,
            kind: Kind::Exclusive,
            delay_ms: 0,
            also: Vec::new(),
            session: None,
        };
        self.clients[c].state = ClientState::OpeningSession {
            req,
            sent: t,
            lease_ms,
        };
        let node = self.clients[c].node;
        self.send(
            None,
            To::Node(node),
            Msg::Acquire {
                client: c,
                req,
                ask,
            },
        );
        self.at(t + 500, Event::ClientGiveUp(c, req));
    }

    /// The answer to client `c`'s opening of a session: held, it takes its
    /// names in it and renews it; refused, the client tries again later.
    pub(crate) fn session_opened(
        &mut self,
        c: ClientId,
        (req, sent, lease_ms): (ReqId, u64, u64),
        result: Answer,
    ) {
        let t = self.t;
        let Ok((session, served)) = result else {
            return self.idle_a_while(c, 5..100);
        };
        let ends = sent + served + session.ttl.as_millis() as u64;
        let node = self.clients[c].node;
        if t + CLIENT_MARGIN_MS >= ends {
            let msg = Msg::CloseSession {
                client: c,
                id: session.id,
            };
            self.send(None, To::Node(node), msg);
            return self.idle(c, 10);
        }
        let names = self.config.names;
        let first = self.rng.gen_range(0..names);
        let mut to_take = vec![format!("n{first}")];
        if names >= 2 && self.rng.gen_bool(0.5) {
            let second = (first + self.rng.gen_range(1..names)) % names;
            to_take.push(format!("n{second}"));
        }
        let hold = self.rng.gen_range(lease_ms / 2..=3 * lease_ms);
        let close = self.rng.gen_bool(0.7);
        let next_renew = t + lease_ms / RENEW_DIVISOR;
        let id = session.id;
        self.note(|| format!("client {c} opens session {id}, to take {to_take:?}"));
        self.clients[c].state = ClientState::InSession(SessionHolding {
            req,
            id,
            lease_ms,
            ends: ends - CLIENT_MARGIN_MS,
            to_take,
            asking: None,
            locks: Vec::new(),
            renewing: None,
            next_renew,
            attempts: 0,
            via: vec![node],
            close,
            granted: Vec::new(),
            answered_until: t + lease_ms,
            in_doubt: false,
        });
        self.at(next_renew, Event::SessionRenew(c, req));
        self.at(t + hold, Event::ClientRelease(c, req));
        self.take_next(c);
    }

    /// Asks for the next name to take in the session, if none is asked.
    fn take_next(&mut self, c: ClientId) {
        let t = self.t;
        let ClientState::InSession(mut s) = self.clients[c].state.clone() else {
            return;
        };
        if s.asking.is_some() || s.to_take.is_empty() {
            return;
        }
        let name = s.to_take.remove(0);
        let wait_ms = self.rng.gen_range(0..300);
        let delay_ms = if self.config.delays && self.rng.gen_bool(0.5) {
            self.rng.gen_range(200..800)
        } else {
            0
        };
        self.next_req += 1;
        let req = self.next_req;
        let ask = Ask {
            name: name.clone(),
            wait_ms,
            lease_ms: s.lease_ms,
            kind: Kind::Exclusive,
            delay_ms,
            also: Vec::new(),
            session: Some(s.id),
        };
        s.asking = Some((req, t, name, delay_ms));
        self.clients[c].state = ClientState::InSession(s);
        let node = self.clients[c].node;
        self.send(
            None,
            To::Node(node),
            Msg::Acquire {
                client: c,
                req,
                ask,
            },
        );
        self.at(t + wait_ms + 500, Event::ClientGiveUp(c, req));
    }

    /// The answer to an acquire of a name in the session.
    pub(crate) fn session_lock_answered(
        &mut self,
        c: ClientId,
        mut s: SessionHolding,
        result: Answer,
    ) {
        let t = self.t;
        let Some((_, sent, name, asked_delay_ms)) = s.asking.take() else {
            return;
        };
        if let Err(Refusal::Held(fence)) = result {
            let refused = HeldRefusal {
                name,
                fence,
                sent,
                answered: t,
            };
            self.history.held_refusals.push(refused);
        } else if let Ok((lock, served)) = result {
            // The delay the rule grants beside the session's lease, from
            // what was asked: not the answer's (a speaker that drops it
            // must be caught).
            let delay_ms = asked_delay_ms.min(MAX_LEASE_MS.saturating_sub(s.lease_ms));
            s.granted.push((name.clone(), lock.fence.0, delay_ms));
            let lease_left = lock.ttl.saturating_sub(lock.delay).as_millis() as u64;
            let ends = (sent + served + lease_left).saturating_sub(CLIENT_MARGIN_MS);
            if ends <= t {
                // Arrived after its lease: not held; give it back.
                let node = self.clients[c].node;
                self.send(None, To::Node(node), Msg::Release { name, id: lock.id });
            } else {
                let fence = lock.fence.0;
                self.note(|| format!("client {c} holds {name} (fence {fence}) in its session"));
                s.locks.push(SessionLock {
                    name,
                    id: lock.id,
                    fence,
                    start: t,
                    ends,
                    delay_ms,
                });
            }
        }
        self.clients[c].state = ClientState::InSession(s);
        self.take_next(c);
    }

    /// The session's renewal is due: sent through the client's node, with
    /// the digest of the locks it holds in it.
    pub(crate) fn session_renew(&mut self, c: ClientId, req: ReqId) {
        let t = self.t;
        let ClientState::InSession(mut s) = self.clients[c].state.clone() else {
            return;
        };
        if s.req != req || s.next_renew != t || s.renewing.is_some() {
            return;
        }
        if t >= s.ends {
            return self.session_ran_out(c, s);
        }
        self.locks_ran_out(c, &mut s);
        let counted: Vec<LockId> = s.locks.iter().map(|l| l.id).collect();
        let call = SessionCall {
            id: s.id,
            lease_ms: s.lease_ms,
            client_digest: Some(locktable::session::digest(counted.iter().copied())),
        };
        self.next_req += 1;
        let attempt = self.next_req;
        let node = self.clients[c].node;
        if !s.via.contains(&node) {
            s.via.push(node);
        }
        s.renewing = Some((attempt, t, counted));
        let give_up = (t + RENEW_ATTEMPT_MS).min(s.ends);
        self.note(|| format!("client {c} renews session {} through node {node}", s.id));
        self.clients[c].state = ClientState::InSession(s);
        let msg = Msg::RenewSession {
            client: c,
            req: attempt,
            call,
        };
        self.send(None, To::Node(node), msg);
        self.at(give_up, Event::SessionRenewGiveUp(c, attempt));
    }

    /// A renewal attempt got no answer in time: the holder tries the next
    /// node.
    pub(crate) fn session_renew_give_up(&mut self, c: ClientId, attempt: ReqId) {
        let ClientState::InSession(s) = self.clients[c].state.clone() else {
            return;
        };
        if s.renewing.as_ref().is_some_and(|r| r.0 == attempt) {
            self.session_renew_failed(c, s);
        }
    }

    /// A renewal attempt got no answer, or a refusal that may hide a
    /// renewal: the session is in doubt, and the holder tries the next
    /// node.
    fn session_renew_failed(&mut self, c: ClientId, mut s: SessionHolding) {
        let t = self.t;
        s.renewing = None;
        s.in_doubt = true;
        s.attempts += 1;
        let client = &mut self.clients[c];
        client.node = client.node % self.config.nodes + 1;
        let pause = (25u64 << s.attempts.min(3)).min(200);
        self.schedule_session_renew(c, s, t + pause);
    }

    fn schedule_session_renew(&mut self, c: ClientId, mut s: SessionHolding, at: u64) {
        s.next_renew = at.min(s.ends);
        let (req, at) = (s.req, s.next_renew);
        self.clients[c].state = ClientState::InSession(s);
        self.at(at, Event::SessionRenew(c, req));
    }

    /// The answer to a renewal of the session: each lock the renewal
    /// counted takes the session's new end, unless the answer's list lacks
    /// it (lost); "not held" loses every lock of it.
    pub(crate) fn session_renewed(
        &mut self,
        c: ClientId,
        req: ReqId,
        result: Answer,
        held: Option<Vec<LockId>>,
    ) {
        let t = self.t;
        let ClientState::InSession(mut s) = self.clients[c].state.clone() else {
            return;
        };
        let Some((_, sent, counted)) = s.renewing.take_if(|r| r.0 == req) else {
            return;
        };
        match &result {
            Ok(_) => s.answered_until = s.answered_until.max(t + s.lease_ms),
            Err(Refusal::NotHeld) => {}
            Err(_) => s.in_doubt = true,
        }
        if t >= s.ends {
            return self.session_ran_out(c, s);
        }
        self.locks_ran_out(c, &mut s);
        match result {
            Ok((session, served)) => {
                let ends = (sent + served + session.ttl.as_millis() as u64)
                    .saturating_sub(CLIENT_MARGIN_MS);
                let lost = |l: &SessionLock| {
                    counted.contains(&l.id) && held.as_ref().is_some_and(|h| !h.contains(&l.id))
                };
                let (gone, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut s.locks)
                    .into_iter()
                    .partition(|l| lost(l));
                for lock in gone {
                    self.note(|| format!("client {c} lost {} (fence {})", lock.name, lock.fence));
                    self.session_lock_lost(&lock, &s.via);
                }
                s.locks = kept;
                for lock in s.locks.iter_mut().filter(|l| counted.contains(&l.id)) {
                    lock.ends = lock.ends.max(ends);
                }
                s.ends = s.ends.max(ends);
                s.attempts = 0;
                let every = s.lease_ms / RENEW_DIVISOR;
                self.schedule_session_renew(c, s, t + every);
            }
            Err(Refusal::NotHeld) => {
                self.note(|| format!("client {c} lost session {}", s.id));
                self.session_ended(&s);
                for lock in std::mem::take(&mut s.locks) {
                    self.session_lock_lost(&lock, &s.via);
                }
                self.idle_a_while(c, 1..50);
            }
            Err(_) => self.session_renew_failed(c, s),
        }
    }

    /// The client stops waiting for an open or an acquire in its session
    /// (`!release`), or ends its session (`release`): closed, or left to
    /// lapse.
    pub(crate) fn session_give_up(&mut self, c: ClientId, req: ReqId, release: bool) {
        let t = self.t;
        match self.clients[c].state.clone() {
            ClientState::OpeningSession { req: asked, .. } if asked == req && !release => {
                self.idle_a_while(c, 1..50);
            }
            ClientState::InSession(mut s)
                if !release && s.asking.as_ref().is_some_and(|a| a.0 == req) =>
            {
                s.asking = None;
                self.clients[c].state = ClientState::InSession(s);
                self.take_next(c);
            }
            ClientState::InSession(s) if release && s.req == req && s.close => {
                let node = self.clients[c].node;
                for lock in &s.locks {
                    self.session_interval(lock, t.min(lock.ends), false);
                }
                self.note(|| format!("client {c} closes session {}", s.id));
                self.session_ended(&s);
                let msg = Msg::CloseSession {
                    client: c,
                    id: s.id,
                };
                self.send(None, To::Node(node), msg);
                self.idle_a_while(c, 1..50);
            }
            ClientState::InSession(s) if release && s.req == req => {
                self.note(|| format!("client {c} lets session {} lapse", s.id));
                self.session_ran_out(c, s);
            }
            _ => {}
        }
    }

    /// The session is left to run out, or ran out on the holder's count:
    /// each lock is held to its own count's end. The client is idle after
    /// the last.
    fn session_ran_out(&mut self, c: ClientId, s: SessionHolding) {
        let t = self.t;
        self.session_ended(&s);
        let last = s.locks.iter().map(|l| l.ends).max().unwrap_or(t).max(t);
        for lock in &s.locks {
            self.session_interval(lock, lock.ends, true);
        }
        let pause = self.rng.gen_range(1..50);
        self.idle(c, last - t + pause);
    }

    /// The session `s` ends on its holder's sight (closed, lapsed, or
    /// answered "not held"): noted for the checker, which holds its locks
    /// free once the close is answered ([`World::session_closed`]) or its
    /// lease has run out at the latest.
    fn session_ended(&mut self, s: &SessionHolding) {
        let sure = !s.in_doubt && s.renewing.is_none();
        self.history.session_ends.push(SessionEnd {
            id: s.id,
            locks: s.granted.clone(),
            closed: None,
            lapsed_by: sure.then_some(s.answered_until),
        });
    }

    /// The close of session `id` was answered: the speaker released it and
    /// every lock of it.
    pub(crate) fn session_closed(&mut self, id: LockId) {
        let t = self.t;
        if let Some(end) = self.history.session_ends.iter_mut().find(|e| e.id == id) {
            end.closed.get_or_insert(t);
        }
    }

    /// Locks whose own count ran out (granted after a renewal's send, and
    /// no later renewal counted them in time) are no longer held. Their
    /// names are not promised closed for a delay: the speaker's record
    /// follows the session, whose close may still release them.
    fn locks_ran_out(&mut self, _c: ClientId, s: &mut SessionHolding) {
        let t = self.t;
        let (over, live): (Vec<_>, Vec<_>) = std::mem::take(&mut s.locks)
            .into_iter()
            .partition(|l| l.ends <= t);
        for lock in over {
            self.session_interval(&lock, lock.ends, false);
        }
        s.locks = live;
    }

    /// A lock of the session lost while its holder's count ran.
    fn session_lock_lost(&mut self, lock: &SessionLock, via: &[locktable::NodeId]) {
        let t = self.t;
        self.session_interval(lock, t, false);
        self.history.lost.push(LostLock {
            name: lock.name.clone(),
            fence: lock.fence,
            granted: lock.start,
            lost: t,
            via: via.to_vec(),
        });
    }

    /// The holding of a lock of a session, from its grant to `end`. One
    /// that `lapsed` unreleased (its count ran out, or its session was left
    /// to lapse) keeps its name closed for its lock-delay after the lease's
    /// end on the holder's count, its margin put back (the speaker's ends
    /// no earlier).
    fn session_interval(&mut self, lock: &SessionLock, end: u64, lapsed: bool) {
        let closed_until = if lapsed && lock.delay_ms > 0 {
            lock.ends + CLIENT_MARGIN_MS + lock.delay_ms
        } else {
            end
        };
        self.history.intervals.push(Interval {
            name: lock.name.clone(),
            kind: Kind::Exclusive,
            fence: lock.fence,
            start: lock.start,
            end,
            closed_until,
            session: true,
        });
    }

    /// Client `c` is idle, and wakes a while from now, drawn from `ms`.
    fn idle_a_while(&mut self, c: ClientId, ms: std::ops::Range<u64>) {
        let after = self.rng.gen_range(ms);
        self.idle(c, after);
    }

    /// Client `c` is idle, and wakes `after` ms from now.
    fn idle(&mut self, c: ClientId, after: u64) {
        self.clients[c].state = ClientState::Idle;
        self.at(self.t + after, Event::ClientWake(c));
    }
}
