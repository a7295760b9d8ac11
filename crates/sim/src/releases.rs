//! Releases passed on to the members that may keep a record of a lock, as
//! the node passes them (`crates/node/src/forgets.rs`): one
//! `leasehold_protocol::ReleaseSender` per member says when to send, try
//! again and give a late or failed batch to every other member; the sim
//! carries the batches and their acknowledgements as messages.

use std::time::Duration;

use leasehold_protocol::{Members, Release, ReleaseSender};
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
        let others: Vec<NodeId> = self.nodes[&n].member.others_in(to).collect();
        for member in others {
            let release = Release {
                name: lock.name.clone(),
                id: lock.id,
                ends: lock.expires,
                spread: false,
            };
            self.queue_release(n, member, release);
        }
    }

    /// Queues `release` for `member`, spreading it if that member is down,
    /// and sends what may go now.
    fn queue_release(&mut self, n: NodeId, member: NodeId, release: Release) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        let spread = node
            .releases
            .entry(member)
            .or_default()
            .sender
            .push(release, now);
        if let Some(release) = spread {
            self.spread(n, member, release);
        }
        self.send_releases(n, member);
    }

    /// Gives every member but `failed` (and `n`) a release `failed` did
    /// not acknowledge in time.
    fn spread(&mut self, n: NodeId, failed: NodeId, release: Release) {
        for member in 1..=self.config.nodes {
            if member != n && member != failed {
                self.queue_release(n, member, release.clone());
            }
        }
    }

    /// Sends `member` the releases queued for it, if no batch is under way
    /// and no wait after a failure is running.
    fn send_releases(&mut self, n: NodeId, member: NodeId) {
        let t = self.t;
        let key = self.next_copy + 1;
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        let incarnation = node.incarnation;
        let Some(out) = node.releases.get_mut(&member) else {
            return;
        };
        if out.in_flight.is_some() || out.paused || out.sender.pending().is_empty() {
            return;
        }
        let taken = out.sender.pending().len();
        let forgets: Vec<(String, locktable::LockId, Duration)> = out
            .sender
            .pending()
            .iter()
            .filter(|r| !r.ended(now))
            .map(|r| (r.name.clone(), r.id, r.ends.saturating_duration_since(now)))
            .collect();
        if forgets.is_empty() {
            out.sender.skip(taken);
            return;
        }
        out.sender.sending(taken, now);
        out.in_flight = Some(key);
        self.next_copy = key;
        let late = ms(ReleaseSender::SPREAD_AFTER);
        self.send(
            Some(n),
            To::Node(member),
            Msg::Forgets {
                from: n,
                key,
                forgets,
            },
        );
        self.at(t + late, Event::ForgetLate(n, incarnation, member, key));
        self.at(
            t + SEND_TIMEOUT_MS,
            Event::ForgetTimeout(n, incarnation, member, key),
        );
    }

    /// The batch `key` to `member` is late: every other member is given it.
    pub(crate) fn forgets_late(&mut self, n: NodeId, member: NodeId, key: u64) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        let Some(out) = node.releases.get_mut(&member) else {
            return;
        };
        if out.in_flight != Some(key) {
            return;
        }
        for release in out.sender.late(now) {
            self.spread(n, member, release);
        }
    }

    /// `member` acknowledged the batch `key` (`acked`), or it timed out.
    pub(crate) fn forgets_answered(&mut self, n: NodeId, member: NodeId, key: u64, acked: bool) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        let incarnation = node.incarnation;
        let Some(out) = node.releases.get_mut(&member) else {
            return;
        };
        if out.in_flight != Some(key) {
            return;
        }
        out.in_flight = None;
        let (spread, pause) = out.sender.sent(acked, now);
        if let Some(pause) = pause {
            out.paused = true;
            self.at(t + ms(pause), Event::ForgetRetry(n, incarnation, member));
        }
        for release in spread {
            self.spread(n, member, release);
        }
        self.send_releases(n, member);
    }

    /// The wait after a failed batch to `member` is over.
    pub(crate) fn forgets_retry(&mut self, n: NodeId, member: NodeId) {
        let node = self.nodes.get_mut(&n).expect("member");
        if let Some(out) = node.releases.get_mut(&member) {
            out.paused = false;
        }
        self.send_releases(n, member);
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
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        for (name, id, left) in forgets {
            node.member.forget(&name, id, Some(left), now);
        }
        self.dispatch(n);
        self.send(Some(n), To::Node(from), Msg::ForgetAck { from: n, key });
    }
}
