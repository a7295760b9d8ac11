//! Clients: each talks to one node, asks for a name, and holds it within
//! its own count of the lease. Half the holders let the lease run out
//! unrenewed; the rest renew every third of it, counting the lease
//! from each renewal's send plus the time it was served, move to the next
//! node when theirs does not answer, and let go when they choose or when
//! their own count runs out. A renewal answered "not held" while the
//! holder's own count runs is a lost lock. In the quiet tail a probe per
//! node asks for a fresh name until it is granted: the liveness check.

use locktable::{Kind, LockId, LockInTransit};
use rand::Rng;

use crate::client_state::{ClientState, HeldSet, Holding};
use crate::config::timing::{
    CLIENT_MARGIN_MS, LEASE_MS, MAX_LEASE_MS, PROBE_EVERY_MS, RENEW_ATTEMPT_MS, RENEW_DIVISOR,
};
use crate::history::{HeldRefusal, Interval, LostLock};
use crate::msg::{Answer, Ask, ClientId, Event, Msg, Refusal, ReqId, To};
use crate::world::World;

/// How a holding ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The holder let go and sent a release.
    Released,
    /// The lease ran out on the holder's count, unrenewed or unanswered.
    RanOut,
    /// A renewal was answered "not held".
    Lost,
}

impl World {
    pub(crate) fn client_wake(&mut self, c: ClientId) {
        if !matches!(self.clients[c].state, ClientState::Idle) {
            return;
        }
        if self.config.sets && self.config.names >= 2 && self.rng.gen_bool(0.25) {
            return self.ask_set(c);
        }
        if self.config.sessions && self.rng.gen_bool(0.25) {
            return self.open_session(c);
        }
        // With kinds, a name of each at least (a run of fewer names would
        // never hold a semaphore).
        let names = match self.config.kinds {
            true => self.config.names.max(3),
            false => self.config.names,
        };
        let index = self.rng.gen_range(0..names);
        let name = format!("n{index}");
        let kind = match index % 3 {
            _ if !self.config.kinds => Kind::Exclusive,
            1 if self.rng.gen_bool(0.7) => Kind::Shared,
            2 => Kind::Permit(2),
            _ => Kind::Exclusive,
        };
        let wait_ms = if self.rng.gen_bool(0.5) {
            0
        } else {
            self.rng.gen_range(10..800)
        };
        let lease_ms = if self.rng.gen_bool(0.7) {
            LEASE_MS
        } else {
            MAX_LEASE_MS
        };
        let delay_ms = if self.config.delays && self.rng.gen_bool(0.5) {
            self.rng.gen_range(200..800)
        } else {
            0
        };
        let ask = Ask {
            name,
            wait_ms,
            lease_ms,
            kind,
            delay_ms,
            also: Vec::new(),
            session: None,
        };
        self.ask(c, ask);
    }

    /// Asks for two names at once, in a random order, to hold together.
    fn ask_set(&mut self, c: ClientId) {
        let mut names = vec!["n0".to_string(), "n1".to_string()];
        if self.rng.gen_bool(0.5) {
            names.reverse();
        }
        let wait_ms = self.rng.gen_range(0..800);
        let name = names.remove(0);
        let ask = Ask {
            name,
            wait_ms,
            lease_ms: LEASE_MS,
            kind: Kind::Exclusive,
            delay_ms: 0,
            also: names,
            session: None,
        };
        self.ask(c, ask);
    }

    /// Client `c` sends `ask` through its node, and waits for the answer
    /// (giving up on one that never comes).
    fn ask(&mut self, c: ClientId, ask: Ask) {
        self.next_req += 1;
        let req = self.next_req;
        let until = self.t + ask.wait_ms + 500;
        self.clients[c].state = ClientState::Asking {
            req,
            sent: self.t,
            name: ask.name.clone(),
            kind: ask.kind,
            delay_ms: ask.delay_ms,
            also: ask.also.clone(),
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
        self.at(until, Event::ClientGiveUp(c, req));
    }

    /// The answer to client `c`'s acquire of the set `asked`, sent at
    /// `sent`: a set answered otherwise than whole (each name asked, in
    /// order, with consecutive fences) is noted for the checker; what came
    /// is held unrenewed, and released together.
    fn set_granted(
        &mut self,
        c: ClientId,
        (req, sent): (ReqId, u64),
        asked: Vec<String>,
        result: Answer,
        also: Vec<LockInTransit>,
    ) {
        let t = self.t;
        let Ok((first, served)) = result else {
            self.clients[c].state = ClientState::Idle;
            let backoff = self.rng.gen_range(5..100);
            self.at(t + backoff, Event::ClientWake(c));
            return;
        };
        let locks: Vec<LockInTransit> = std::iter::once(first).chain(also).collect();
        let names: Vec<&str> = locks.iter().map(|l| l.name.as_str()).collect();
        let fences: Vec<u64> = locks.iter().map(|l| l.fence.0).collect();
        if names != asked || fences.windows(2).any(|w| w[1] != w[0] + 1) {
            self.history.broken_sets.push(format!(
                "asked {asked:?} at {sent}, answered {names:?} with fences {fences:?}"
            ));
        }
        let held: Vec<(String, LockId, u64, u64)> = locks
            .into_iter()
            .map(|l| {
                let lease_left = l.ttl.saturating_sub(l.delay).as_millis() as u64;
                let ends = (sent + served + lease_left).saturating_sub(CLIENT_MARGIN_MS);
                (l.name, l.id, l.fence.0, ends)
            })
            .collect();
        let node = self.clients[c].node;
        let soonest = held.iter().map(|h| h.3).min().unwrap_or(t);
        if soonest <= t {
            for (name, id, ..) in held {
                self.send(None, To::Node(node), Msg::Release { name, id });
            }
            self.clients[c].state = ClientState::Idle;
            self.at(t + 10, Event::ClientWake(c));
            return;
        }
        let hold = self.rng.gen_range(1..=soonest - t);
        self.note(|| format!("client {c} holds the set {asked:?}"));
        self.clients[c].state = ClientState::HoldingSet(HeldSet {
            req,
            start: t,
            locks: held,
        });
        self.at(t + hold, Event::ClientRelease(c, req));
    }

    /// A probe asks for a fresh name (no one else wants it) until granted.
    pub(crate) fn probe(&mut self, c: ClientId) {
        let client = &mut self.clients[c];
        if client.granted_at.is_some() {
            return;
        }
        client.asked += 1;
        let name = format!("probe-{}-{}", client.node, client.asked);
        let node = client.node;
        self.next_req += 1;
        let req = self.next_req;
        self.send(
            None,
            To::Node(node),
            Msg::Acquire {
                client: c,
                req,
                ask: Ask {
                    name,
                    wait_ms: 0,
                    lease_ms: LEASE_MS,
                    kind: Kind::Exclusive,
                    delay_ms: 0,
                    also: Vec::new(),
                    session: None,
                },
            },
        );
        self.at(self.t + PROBE_EVERY_MS, Event::Probe(c));
    }

    pub(crate) fn client_message(&mut self, c: ClientId, msg: Msg) {
        let (req, result, also) = match msg {
            Msg::Reply { req, result, also } => (req, result, also),
            Msg::SessionReply { req, result, held } => {
                return self.session_renewed(c, req, result, held)
            }
            Msg::SessionClosed { id } => return self.session_closed(id),
            _ => return,
        };
        let t = self.t;
        if self.clients[c].probe {
            if let Ok((transit, _)) = result {
                let client = &mut self.clients[c];
                client.granted_at.get_or_insert(t);
                let node = client.node;
                self.send(
                    None,
                    To::Node(node),
                    Msg::Release {
                        name: transit.name,
                        id: transit.id,
                    },
                );
            }
            return;
        }
        match self.clients[c].state.clone() {
            ClientState::Asking {
                req: asked,
                sent,
                name,
                kind,
                delay_ms,
                also: names,
            } if asked == req => {
                if names.is_empty() {
                    self.granted_to(c, req, sent, (name, kind, delay_ms), result)
                } else {
                    let asked = std::iter::once(name).chain(names).collect();
                    self.set_granted(c, (req, sent), asked, result, also)
                }
            }
            ClientState::Holding(h) if h.renewing.is_some_and(|(r, _)| r == req) => {
                self.renewed(c, h, result)
            }
            ClientState::OpeningSession {
                req: asked,
                sent,
                lease_ms,
            } if asked == req => self.session_opened(c, (req, sent, lease_ms), result),
            ClientState::InSession(s) if s.asking.as_ref().is_some_and(|a| a.0 == req) => {
                self.session_lock_answered(c, s, result)
            }
            _ => {}
        }
    }

    /// The answer to client `c`'s acquire `req`, sent at `sent`.
    fn granted_to(
        &mut self,
        c: ClientId,
        req: ReqId,
        sent: u64,
        (name, kind, delay_ms): (String, Kind, u64),
        result: Answer,
    ) {
        let t = self.t;
        let (transit, served) = match result {
            Ok(granted) => granted,
            Err(refusal) => {
                if let Refusal::Held(fence) = refusal {
                    let refused = HeldRefusal {
                        name,
                        fence,
                        sent,
                        answered: t,
                    };
                    self.history.held_refusals.push(refused);
                }
                self.clients[c].state = ClientState::Idle;
                let backoff = self.rng.gen_range(5..100);
                self.at(t + backoff, Event::ClientWake(c));
                return;
            }
        };
        // The holder counts its lease alone: the record's time left less
        // the lock-delay after it.
        let ends = sent + served + transit.ttl.saturating_sub(transit.delay).as_millis() as u64;
        let node = self.clients[c].node;
        if t + CLIENT_MARGIN_MS >= ends {
            // Arrived after its lease: not held; give it back.
            let id = transit.id;
            self.send(None, To::Node(node), Msg::Release { name, id });
            self.clients[c].state = ClientState::Idle;
            self.at(t + 10, Event::ClientWake(c));
            return;
        }
        let ends = ends - CLIENT_MARGIN_MS;
        let lease_ms = transit.lease.as_millis() as u64;
        let longest = ends - t;
        // A quarter keep the lock to the end of their own count, a quarter
        // let go sooner, both unrenewed; half renew, and hold up to two of
        // the clients' leases.
        let (hold, renews) = match self.rng.gen_range(0..4) {
            0 => (longest, false),
            1 => (self.rng.gen_range(1..=longest), false),
            _ => (self.rng.gen_range(1..=2 * LEASE_MS), true),
        };
        let next_renew = if renews {
            t + lease_ms / RENEW_DIVISOR
        } else {
            u64::MAX
        };
        let fence = transit.fence.0;
        self.note(|| format!("client {c} holds {name} (fence {fence}) until {ends}"));
        self.clients[c].state = ClientState::Holding(Holding {
            req,
            name,
            kind,
            id: transit.id,
            fence: transit.fence.0,
            start: t,
            ends,
            lease_ms,
            delay_ms,
            next_renew,
            renewing: None,
            attempts: 0,
            via: vec![node],
        });
        if renews {
            self.at(next_renew, Event::ClientRenew(c, req));
        }
        self.at(t + hold, Event::ClientRelease(c, req));
    }

    /// The holder renews through its node, if a renewal is due; a holder
    /// whose own count ran out has lost the lock.
    pub(crate) fn client_renew(&mut self, c: ClientId, req: ReqId) {
        let t = self.t;
        let ClientState::Holding(mut h) = self.clients[c].state.clone() else {
            return;
        };
        if h.req != req || h.next_renew != t || h.renewing.is_some() {
            return;
        }
        if t >= h.ends {
            self.end_holding(c, &h, h.ends, End::RanOut);
            return;
        }
        self.next_req += 1;
        let attempt = self.next_req;
        let node = self.clients[c].node;
        h.renewing = Some((attempt, t));
        if !h.via.contains(&node) {
            h.via.push(node);
        }
        self.note(|| format!("client {c} renews {} through node {node}", h.name));
        let msg = Msg::Renew {
            client: c,
            req: attempt,
            name: h.name.clone(),
            id: h.id,
            lease_ms: h.lease_ms,
        };
        let give_up = (t + RENEW_ATTEMPT_MS).min(h.ends);
        self.clients[c].state = ClientState::Holding(h);
        self.send(None, To::Node(node), msg);
        self.at(give_up, Event::RenewGiveUp(c, attempt));
    }

    /// A renewal attempt got no answer in time: the holder tries the next
    /// node.
    pub(crate) fn renew_give_up(&mut self, c: ClientId, attempt: ReqId) {
        let ClientState::Holding(h) = self.clients[c].state.clone() else {
            return;
        };
        if h.renewing.is_some_and(|(r, _)| r == attempt) {
            self.renew_failed(c, h);
        }
    }

    fn renew_failed(&mut self, c: ClientId, mut h: Holding) {
        let t = self.t;
        h.renewing = None;
        h.attempts += 1;
        let client = &mut self.clients[c];
        client.node = client.node % self.config.nodes + 1;
        let pause = (25u64 << h.attempts.min(3)).min(200);
        self.schedule_renew(c, h, t + pause);
    }

    fn schedule_renew(&mut self, c: ClientId, mut h: Holding, at: u64) {
        h.next_renew = at.min(h.ends);
        let req = h.req;
        let at = h.next_renew;
        self.clients[c].state = ClientState::Holding(h);
        self.at(at, Event::ClientRenew(c, req));
    }

    /// The answer to the holder's renewal attempt.
    fn renewed(&mut self, c: ClientId, mut h: Holding, result: Answer) {
        let t = self.t;
        let Some((_, sent)) = h.renewing else {
            return;
        };
        if t >= h.ends {
            self.end_holding(c, &h, h.ends, End::RanOut);
            return;
        }
        match result {
            Ok((transit, served)) => {
                let lease_left = transit.ttl.saturating_sub(transit.delay).as_millis() as u64;
                h.ends = (sent + served + lease_left).saturating_sub(CLIENT_MARGIN_MS);
                h.renewing = None;
                h.attempts = 0;
                let every = h.lease_ms / RENEW_DIVISOR;
                self.schedule_renew(c, h, t + every);
            }
            Err(Refusal::NotHeld) => {
                self.note(|| format!("client {c} lost {} (fence {})", h.name, h.fence));
                self.end_holding(c, &h, t, End::Lost);
            }
            Err(_) => self.renew_failed(c, h),
        }
    }

    /// The holding ends at `end`, as `how` says.
    fn end_holding(&mut self, c: ClientId, h: &Holding, end: u64, how: End) {
        let t = self.t;
        let lost = how == End::Lost;
        // Run out unreleased: closed for the delay after the lease's end on
        // the holder's count, its margin put back (the speaker's ends no
        // earlier). A release, sent within the holder's count, may reach
        // the speaker inside its lease and free the name at once.
        let closed_until = if how == End::RanOut && h.delay_ms > 0 {
            h.ends + CLIENT_MARGIN_MS + h.delay_ms
        } else {
            end
        };
        self.history.intervals.push(Interval {
            name: h.name.clone(),
            kind: h.kind,
            fence: h.fence,
            start: h.start,
            end,
            closed_until,
            session: false,
        });
        if lost {
            self.history.lost.push(LostLock {
                name: h.name.clone(),
                fence: h.fence,
                granted: h.start,
                lost: t,
                via: h.via.clone(),
            });
        }
        self.clients[c].state = ClientState::Idle;
        let pause = self.rng.gen_range(1..50);
        self.at(t + pause, Event::ClientWake(c));
    }

    /// The client releases what it holds (`release`), or stops waiting for
    /// an answer (`!release`).
    pub(crate) fn client_give_up(&mut self, c: ClientId, req: ReqId, release: bool) {
        let t = self.t;
        match self.clients[c].state.clone() {
            ClientState::Holding(h) if h.req == req && release => {
                let node = self.clients[c].node;
                let (name, id) = (h.name.clone(), h.id);
                self.end_holding(c, &h, t.min(h.ends), End::Released);
                self.send(None, To::Node(node), Msg::Release { name, id });
            }
            ClientState::HoldingSet(set) if set.req == req && release => {
                let node = self.clients[c].node;
                for (name, id, fence, ends) in set.locks {
                    let end = t.min(ends);
                    self.history.intervals.push(Interval {
                        name: name.clone(),
                        kind: Kind::Exclusive,
                        fence,
                        start: set.start,
                        end,
                        closed_until: end,
                        session: false,
                    });
                    self.send(None, To::Node(node), Msg::Release { name, id });
                }
                self.clients[c].state = ClientState::Idle;
                let pause = self.rng.gen_range(1..50);
                self.at(t + pause, Event::ClientWake(c));
            }
            ClientState::Asking { req: asked, .. } if asked == req && !release => {
                self.clients[c].state = ClientState::Idle;
                let pause = self.rng.gen_range(1..50);
                self.at(t + pause, Event::ClientWake(c));
            }
            ClientState::OpeningSession { .. } | ClientState::InSession(_) => {
                self.session_give_up(c, req, release)
            }
            _ => {}
        }
    }
}
