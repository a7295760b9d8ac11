//! Renewals, as the node serves them: through the speaker, which renews
//! the lock in its table (moving it to the renewing node, or reclaiming it
//! from that node's record when the table lacks it; without a record,
//! during a strict hold, it answers "unavailable", as the node's 503
//! `not_rebuilt`, for a missed member may have the lock) and answers once the
//! renewal is on record with enough members; through a follower, which
//! forwards its record of the lock and keeps the renewed lock in `Held`
//! unless a newer speaker read it meanwhile. The forwarding node's side of
//! an acquire is here too.

use std::time::Duration;

use locktable::{Lock, LockError, LockId, NodeId};

use crate::config::Sabotage;
use crate::node::{Forwarded, Origin};
use crate::world::{Answer, ClientId, Msg, Refusal, ReqId, To, World};

impl World {
    /// A renewal as the speaker, for a client of `from`: a lock the table
    /// lacks is reclaimed from `record`, the renewing node's view of it; a
    /// renewal through another node than the lock's moves it there.
    pub(crate) fn speak_renew(
        &mut self,
        n: NodeId,
        from: NodeId,
        client: ClientId,
        req: ReqId,
        (name, id, lease_ms): (String, LockId, u64),
        record: Option<Lock>,
    ) {
        let t = self.t;
        let ignore = self.ignores_lease();
        let origin = if from == n {
            Origin::Local {
                client,
                req,
                arrived: t,
            }
        } else {
            Origin::Forwarded {
                node: from,
                client,
                req,
                arrived: t,
            }
        };
        let node = self.nodes.get_mut(&n).expect("member");
        if !node.may_speak(t, ignore) {
            self.answer(n, origin, Err(Refusal::Unavailable));
            return;
        }
        let now = node.mono(t);
        let lease = Some(Duration::from_millis(lease_ms));
        let before = node.table.held_through(&name, id);
        let not_held_in_hold = self.config.sabotaged(Sabotage::NotHeldInHold);
        let renewed = match node.table.renew(&name, id, lease, from, now) {
            Err(LockError::NotHeld) if record.is_some() => {
                let record = record.expect("checked");
                node.table
                    .reclaim(record, now)
                    .and_then(|_| node.table.renew(&name, id, lease, from, now))
            }
            Err(LockError::NotHeld)
                if !not_held_in_hold
                    && node.table.new_grants_held_until(now).is_some()
                    && !node.table.is_forgotten(id, now) =>
            {
                // The last rebuild missed as many members as there are
                // copies: one of them may have this lock on record, and a
                // renewal through it reclaims it. The node answers 503
                // `not_rebuilt`: the holder tries another node.
                self.note(|| format!("node {n}: renewal of {name} not in the held-back table"));
                self.answer(n, origin, Err(Refusal::Unavailable));
                return;
            }
            other => other,
        };
        let renewed = match renewed {
            Ok(renewed) => renewed,
            Err(LockError::NotHeld) => {
                self.note(|| format!("node {n}: renewal of {name} refused, not held"));
                self.answer(n, origin, Err(Refusal::NotHeld));
                return;
            }
            Err(_) => {
                self.answer(n, origin, Err(Refusal::Unavailable));
                return;
            }
        };
        if let Some((moved_from, _)) = before.filter(|(m, _)| *m != from) {
            node.moved.entry(id).or_default().insert(moved_from);
        }
        if from == n {
            node.held.record(renewed.clone());
        } else {
            node.held.remove(id);
        }
        let made = node.made();
        let fence = renewed.fence.0;
        self.note(|| format!("node {n} renews {name} (fence {fence}) for node {from}"));
        self.answer_on_record(n, renewed, origin, made, false);
    }

    /// A client's renewal reaches node `n`: served here if it speaks,
    /// forwarded with this node's record of the lock otherwise.
    pub(crate) fn renew(
        &mut self,
        n: NodeId,
        client: ClientId,
        req: ReqId,
        lock: (String, LockId, u64),
    ) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        let record = node.held_record(lock.1);
        match node.raft.current_leader() {
            Some(l) if l == n => self.speak_renew(n, n, client, req, lock, record),
            Some(l) => {
                let read_before = node.read_by;
                node.pending.insert(
                    req,
                    Forwarded {
                        sent: t,
                        read_before,
                        renewing: Some(lock.1),
                    },
                );
                let record = record.map(|r| node.lock_view(&r, t));
                let (name, id, lease_ms) = lock;
                let msg = Msg::ForwardRenew {
                    from: n,
                    client,
                    req,
                    name,
                    id,
                    lease_ms,
                    record,
                };
                self.send(Some(n), To::Node(l), msg);
            }
            None => self.send(
                Some(n),
                To::Client(client),
                Msg::Reply {
                    req,
                    result: Err(Refusal::Unavailable),
                },
            ),
        }
    }

    /// The speaker's answer to a call node `n` forwarded: a lock is
    /// recorded in `Held` (unless a newer speaker read this node since the
    /// call left) and handed to the client.
    pub(crate) fn forward_answered(
        &mut self,
        n: NodeId,
        client: ClientId,
        req: ReqId,
        result: Answer,
    ) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        let Some(call) = node.pending.remove(&req) else {
            return;
        };
        let result = match result {
            Ok((transit, served)) => {
                // An acquire counts from the send plus the speaker's wait;
                // a renewal from the send.
                let renew = call.renewing.is_some();
                let from = if renew { call.sent } else { call.sent + served };
                let lock = transit.arrive(node.mono(from));
                let epoch = if renew { 0 } else { lock.fence.epoch() };
                if node.read_by > call.read_before.max(epoch) {
                    Err(Refusal::Unavailable)
                } else {
                    let view = node.lock_view(&lock, t);
                    node.copies.remove(lock.id);
                    node.held.record(lock);
                    Ok((view, t - call.sent))
                }
            }
            Err(e) => {
                if let (Refusal::NotHeld, Some(id)) = (&e, call.renewing) {
                    node.held.remove(id);
                    node.copies.remove(id);
                }
                Err(e)
            }
        };
        self.send(Some(n), To::Client(client), Msg::Reply { req, result });
    }
}
