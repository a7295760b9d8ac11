//! Releases passed on to the members that may keep a record of a lock, as
//! the node passes them (`crates/node/src/forgets.rs`): the node's
//! `leasehold_protocol::Outbox` says which batch to send to which member,
//! when one is late and how long to wait after a failure; the sim carries
//! the batches and their acknowledgements as messages, and runs the
//! timers.

use std::time::Duration;

use leasehold_protocol::{Members, ReleaseSender};
use locktable::{Lock, NodeId};

use crate::msg::{Event, Msg, To};
use crate::world::World;

/// How long a member has to acknowledge a batch (the node's `SEND_TIMEOUT`).
const SEND_TIMEOUT_MS: u64 = 2_000;

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl World {
    /// Passes the release of `lock` on from node `n` to the members of `to`
    /// other than itself.
    pub(crate) fn send_forgets(&mut self, n: NodeId, lock: &Lock, to: Members) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        node.outbox.push(to, &lock.name, lock.id, lock.expires, now);
        self.send_batches(n);
    }

    /// Sends every batch node `n`'s outbox has ready, each with its late
    /// and its timeout events.
    fn send_batches(&mut self, n: NodeId) {
        let t = self.t;
        loop {
            let node = self.nodes.get_mut(&n).expect("member");
            let now = node.mono(t);
            let incarnation = node.incarnation;
            let Some(batch) = node.outbox.poll_batch(now, |_| true) else {
                return;
            };
            let forgets = batch
                .releases
                .iter()
                .map(|r| (r.name.clone(), r.id, r.ends.saturating_duration_since(now)))
                .collect();
            let (member, key) = (batch.member, batch.key);
            self.send(
                Some(n),
                To::Node(member),
                Msg::Forgets {
                    from: n,
                    key,
                    forgets,
                },
            );
            let late = ms(ReleaseSender::SPREAD_AFTER);
            self.at(t + late, Event::ForgetLate(n, incarnation, member, key));
            self.at(
                t + SEND_TIMEOUT_MS,
                Event::ForgetTimeout(n, incarnation, member, key),
            );
        }
    }

    /// The batch `key` is late, if not answered yet: every other member is
    /// given it, and every release waiting behind it.
    pub(crate) fn forgets_late(&mut self, n: NodeId, key: u64) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        node.outbox.late(key, now);
        self.send_batches(n);
    }

    /// The batch `key` was acknowledged (`acked`), or timed out.
    pub(crate) fn forgets_answered(&mut self, n: NodeId, key: u64, acked: bool) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        let incarnation = node.incarnation;
        if let Some(pause) = node.outbox.answered(key, acked, now) {
            self.at(t + ms(pause), Event::ForgetRetry(n, incarnation, key));
        }
        self.send_batches(n);
    }

    /// The wait after the failed batch `key` is over.
    pub(crate) fn forgets_retry(&mut self, n: NodeId, key: u64) {
        let node = self.nodes.get_mut(&n).expect("member");
        node.outbox.resume(key);
        self.send_batches(n);
    }

    /// As a member: releases heard of from `from`, each with the time its
    /// lease had left at the send; acknowledged.
    pub(crate) fn take_forgets(
        &mut self,
        n: NodeId,
        from: NodeId,
        key: u64,
        forgets: Vec<(String, locktable::LockId, Duration)>,
    ) {
        let t = self.t;
        let guard = self.guard(n);
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        for (name, id, left) in forgets {
            node.member.forget(&name, id, Some(left), &guard, now);
        }
        self.dispatch(n);
        self.send(Some(n), To::Node(from), Msg::ForgetAck { key });
    }
}
