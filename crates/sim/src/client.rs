//! Clients: each talks to one node, asks for a name, holds it for a while
//! within its own count of the lease, and releases it. In the quiet tail a
//! probe per node asks for a fresh name until it is granted: the liveness
//! check.

use locktable::LockId;
use rand::Rng;

use crate::check::Interval;
use crate::config::timing::{CLIENT_MARGIN_MS, LEASE_MS, MAX_LEASE_MS, PROBE_EVERY_MS};
use crate::world::{Ask, ClientId, Event, Msg, ReqId, To, World};

#[derive(Debug, Clone)]
pub(crate) enum ClientState {
    Idle,
    Asking {
        req: ReqId,
        sent: u64,
        name: String,
    },
    Holding {
        req: ReqId,
        name: String,
        id: LockId,
        fence: u64,
        start: u64,
        ends: u64,
    },
}

pub(crate) struct Client {
    pub(crate) node: locktable::NodeId,
    pub(crate) state: ClientState,
    /// A liveness probe (asks for fresh names in the quiet tail).
    pub(crate) probe: bool,
    /// When a probe was first granted.
    pub(crate) granted_at: Option<u64>,
    asked: u64,
}

impl Client {
    pub(crate) fn new(node: locktable::NodeId, probe: bool) -> Client {
        Client {
            node,
            state: ClientState::Idle,
            probe,
            granted_at: None,
            asked: 0,
        }
    }
}

impl World {
    pub(crate) fn client_wake(&mut self, c: ClientId) {
        if !matches!(self.clients[c].state, ClientState::Idle) {
            return;
        }
        let name = format!("n{}", self.rng.gen_range(0..self.config.names));
        let wait_ms = if self.rng.gen_bool(0.5) {
            0
        } else {
            self.rng.gen_range(10..800)
        };
        self.next_req += 1;
        let req = self.next_req;
        let lease_ms = if self.rng.gen_bool(0.7) {
            LEASE_MS
        } else {
            MAX_LEASE_MS
        };
        let until = self.t + wait_ms + 500;
        self.clients[c].state = ClientState::Asking {
            req,
            sent: self.t,
            name: name.clone(),
        };
        let node = self.clients[c].node;
        self.send(
            None,
            To::Node(node),
            Msg::Acquire {
                client: c,
                req,
                ask: Ask {
                    name,
                    wait_ms,
                    lease_ms,
                },
            },
        );
        // Give up on an answer that never comes.
        self.at(until, Event::ClientGiveUp(c, req));
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
                },
            },
        );
        self.at(self.t + PROBE_EVERY_MS, Event::Probe(c));
    }

    pub(crate) fn client_message(&mut self, c: ClientId, msg: Msg) {
        let Msg::Reply { req, result } = msg else {
            return;
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
        let ClientState::Asking {
            req: asked,
            sent,
            name,
            ..
        } = self.clients[c].state.clone()
        else {
            return;
        };
        if asked != req {
            return;
        }
        match result {
            Ok((transit, served)) => {
                let ends = sent + served + transit.ttl.as_millis() as u64;
                if t + CLIENT_MARGIN_MS >= ends {
                    // Arrived after its lease: not held; give it back.
                    let node = self.clients[c].node;
                    self.send(
                        None,
                        To::Node(node),
                        Msg::Release {
                            name,
                            id: transit.id,
                        },
                    );
                    self.clients[c].state = ClientState::Idle;
                    self.at(t + 10, Event::ClientWake(c));
                    return;
                }
                self.clients[c].state = ClientState::Holding {
                    req,
                    name,
                    id: transit.id,
                    fence: transit.fence.0,
                    start: t,
                    ends: ends - CLIENT_MARGIN_MS,
                };
                // Half the holders keep the lock to the end of their own
                // count of the lease, half let go sooner.
                let longest = ends - CLIENT_MARGIN_MS - t;
                let hold = if self.rng.gen_bool(0.5) {
                    longest
                } else {
                    self.rng.gen_range(1..=longest)
                };
                self.at(t + hold, Event::ClientRelease(c, req));
            }
            Err(_) => {
                self.clients[c].state = ClientState::Idle;
                let backoff = self.rng.gen_range(5..100);
                self.at(t + backoff, Event::ClientWake(c));
            }
        }
    }

    /// The client releases what it holds (`release`), or stops waiting for
    /// an answer (`!release`).
    pub(crate) fn client_give_up(&mut self, c: ClientId, req: ReqId, release: bool) {
        let t = self.t;
        match self.clients[c].state.clone() {
            ClientState::Holding {
                req: held,
                name,
                id,
                fence,
                start,
                ends,
            } if held == req && release => {
                self.history.intervals.push(Interval {
                    name: name.clone(),
                    fence,
                    start,
                    end: t.min(ends),
                });
                let node = self.clients[c].node;
                self.send(None, To::Node(node), Msg::Release { name, id });
            }
            ClientState::Asking { req: asked, .. } if asked == req && !release => {}
            _ => return,
        }
        self.clients[c].state = ClientState::Idle;
        let pause = self.rng.gen_range(1..50);
        self.at(t + pause, Event::ClientWake(c));
    }
}
