//! Every member's releases from this one: a lane per member that may keep
//! a record of a lock, each with its [`ReleaseSender`], one batch under
//! way at a time, the wait after a failed one, and a slow or failing
//! member's releases given to every other member.
//!
//! The driver sends each batch [`Outbox::poll_batch`] answers, reports
//! how it went ([`Outbox::answered`]), and starts the two timers a batch
//! may need: [`ReleaseSender::SPREAD_AFTER`] after it left
//! ([`Outbox::late`]), and the wait `answered` returns after a failure
//! ([`Outbox::resume`]). It decides nothing itself.

use std::collections::BTreeSet;
use std::time::Duration;

use locktable::{LockId, MonoTime, NodeId};

use super::{Release, ReleaseSender};
use crate::members::Members;

/// Releases to send one member in one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// The member.
    pub member: NodeId,
    /// Where its lane sends (the address it was opened with).
    pub addr: String,
    /// The batch's key, which its answer and timers name.
    pub key: u64,
    /// The releases, none ended yet, oldest first.
    pub releases: Vec<Release>,
}

/// One member's lane, at one address.
#[derive(Debug)]
struct Lane {
    member: NodeId,
    addr: String,
    /// Whether it takes new releases (a lane closed, or replaced by one to
    /// the member's new address, drains what it holds, then goes).
    open: bool,
    sender: ReleaseSender,
    /// The batch under way.
    batch: Option<u64>,
    /// The failed batch whose wait runs: nothing is sent meanwhile.
    paused: Option<u64>,
}

impl Lane {
    fn idle(&self) -> bool {
        self.batch.is_none() && self.paused.is_none()
    }
}

/// Every lane from this member.
#[derive(Debug)]
pub struct Outbox {
    me: NodeId,
    lanes: Vec<Lane>,
    next_key: u64,
    /// The members of the latest configuration the driver told of: their
    /// lanes are never closed.
    configuration: BTreeSet<NodeId>,
}

impl Outbox {
    /// No lane yet, as seen by member `me`.
    pub fn new(me: NodeId) -> Self {
        Outbox {
            me,
            lanes: Vec::new(),
            next_key: 0,
            configuration: BTreeSet::new(),
        }
    }

    /// Numbers the batches from here on from `first`: for a driver whose
    /// answers name a batch by its key and may come from an earlier
    /// process's batches.
    pub fn number_from(&mut self, first: u64) {
        self.next_key = self.next_key.max(first);
    }

    /// The members of the latest configuration, with their addresses: each
    /// gets a lane (a member now at another address, removed and added
    /// again elsewhere, a new one: the old one takes no more and goes once
    /// what it holds is sent or ended), and none of them has it closed until
    /// a configuration without it: a member removed and added again keeps
    /// the lane of its new membership when the end of its old one closes
    /// lanes ([`Outbox::close`]).
    pub fn set_members<'a>(&mut self, members: impl IntoIterator<Item = (NodeId, &'a str)>) {
        self.configuration.clear();
        for (member, addr) in members {
            self.open(member, addr);
        }
    }

    /// Opens a lane to `member` at `addr`, of the latest configuration;
    /// false for this member, or one whose lane is open to that address
    /// already. A member now at another address (removed, and added again
    /// elsewhere) gets a new lane: the old one takes no more and goes once
    /// what it holds is sent or ended.
    fn open(&mut self, member: NodeId, addr: &str) -> bool {
        self.configuration.insert(member);
        if member == self.me {
            return false;
        }
        let open = self.lanes.iter_mut().find(|l| l.member == member && l.open);
        if let Some(lane) = open {
            if lane.addr == addr {
                return false;
            }
            lane.open = false;
        }
        self.lanes.push(Lane {
            member,
            addr: addr.to_string(),
            open: true,
            sender: ReleaseSender::new(),
            batch: None,
            paused: None,
        });
        self.tidy();
        true
    }

    /// Closes `member`'s lane (it left the cluster, and no rebuild reads
    /// it any more): it takes no more and goes once what it holds is sent
    /// or ended. Nothing for a member of the latest configuration (added
    /// again since it left).
    pub fn close(&mut self, member: NodeId) {
        if self.configuration.contains(&member) {
            return;
        }
        for lane in self.lanes.iter_mut().filter(|l| l.member == member) {
            lane.open = false;
        }
        self.tidy();
    }

    /// Whether no lane holds a release (none queued, none under way).
    pub fn is_empty(&self) -> bool {
        self.lanes
            .iter()
            .all(|l| l.idle() && l.sender.pending().is_empty())
    }

    /// The members with an open lane.
    pub fn members(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.lanes.iter().filter(|l| l.open).map(|l| l.member)
    }

    /// Queues, at `now`, the release of `name` held under `id`, whose lease
    /// ends at `ends`, for every member of `to` with an open lane; a member
    /// slow or failing has it given to every other member at once.
    pub fn push(&mut self, to: Members, name: &str, id: LockId, ends: MonoTime, now: MonoTime) {
        let mut spread = Vec::new();
        for lane in self.lanes.iter_mut().filter(|l| l.open) {
            if !to.contains(lane.member) {
                continue;
            }
            let release = Release {
                name: name.to_string(),
                id,
                ends,
                spread: false,
            };
            if let Some(release) = lane.sender.push(release, now) {
                spread.push((lane.member, release));
            }
        }
        self.spread(spread, now);
    }

    /// The next batch to send, if a lane has releases and neither a batch
    /// under way nor a wait running: the releases at its front not ended
    /// by `now`, as many as `fits` takes (the first always goes); ended
    /// ones on the way are dropped.
    pub fn poll_batch(
        &mut self,
        now: MonoTime,
        mut fits: impl FnMut(&Release) -> bool,
    ) -> Option<Batch> {
        let mut found = None;
        for lane in self.lanes.iter_mut().filter(|l| l.idle()) {
            let mut taken = 0;
            let mut releases = Vec::new();
            for release in lane.sender.pending() {
                if release.ended(now) {
                    taken += 1;
                    continue;
                }
                if !releases.is_empty() && !fits(release) {
                    break;
                }
                if releases.is_empty() {
                    fits(release);
                }
                taken += 1;
                releases.push(release.clone());
            }
            if releases.is_empty() {
                lane.sender.skip(taken);
                continue;
            }
            lane.sender.sending(taken);
            self.next_key += 1;
            lane.batch = Some(self.next_key);
            found = Some(Batch {
                member: lane.member,
                addr: lane.addr.clone(),
                key: self.next_key,
                releases,
            });
            break;
        }
        self.tidy();
        found
    }

    /// Batch `key` has not been answered by `now`, [`ReleaseSender::SPREAD_AFTER`]
    /// after it left: its member is slow, and its releases go to every
    /// other member too. Nothing if it was answered.
    pub fn late(&mut self, key: u64, now: MonoTime) {
        let Some(lane) = self.lanes.iter_mut().find(|l| l.batch == Some(key)) else {
            return;
        };
        let member = lane.member;
        let late = lane.sender.late(now);
        self.spread(late.into_iter().map(|r| (member, r)).collect(), now);
    }

    /// Batch `key` was acknowledged (`acked`), or failed or timed out, at
    /// `now`. After a failure its releases go to every other member too,
    /// and the lane waits the returned time before it sends again
    /// ([`Outbox::resume`]).
    pub fn answered(&mut self, key: u64, acked: bool, now: MonoTime) -> Option<Duration> {
        let lane = self.lanes.iter_mut().find(|l| l.batch == Some(key))?;
        lane.batch = None;
        let member = lane.member;
        let (spread, pause) = lane.sender.sent(acked, now);
        if pause.is_some() {
            lane.paused = Some(key);
        }
        self.spread(spread.into_iter().map(|r| (member, r)).collect(), now);
        self.tidy();
        pause
    }

    /// The wait after the failed batch `key` is over: its lane sends again.
    pub fn resume(&mut self, key: u64) {
        for lane in self.lanes.iter_mut().filter(|l| l.paused == Some(key)) {
            lane.paused = None;
        }
        self.tidy();
    }

    /// Gives each release a member did not take in time to every other
    /// member with an open lane (marked spread: never given on again).
    fn spread(&mut self, releases: Vec<(NodeId, Release)>, now: MonoTime) {
        for (failed, release) in releases {
            for lane in self.lanes.iter_mut() {
                if lane.open && lane.member != failed {
                    lane.sender.push(release.clone(), now);
                }
            }
        }
    }

    /// Drops closed lanes with nothing left to do.
    fn tidy(&mut self) {
        self.lanes
            .retain(|l| l.open || !l.idle() || !l.sender.pending().is_empty());
    }
}

#[cfg(test)]
mod tests;
