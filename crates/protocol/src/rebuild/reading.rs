//! One rebuild attempt's reads as a driver carries them out: which member
//! to read now, which to read again later, which reads are still out,
//! when to stop, and what the rebuild is handed at the end.
//!
//! The driver sends what [`Reading::poll_read`] says, feeds each answer
//! ([`Reading::answered`]) and failure ([`Reading::failed`]) back in, and
//! stops once [`Reading::stop_at`] is past; [`Reading::finish`] gives the
//! rebuild its input. It decides nothing itself.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use locktable::{MonoTime, NodeId};

use super::{MemberRead, Reads, RebuildInput, READ_AGAIN_AFTER};
use crate::member::Member;
use crate::Sabotage;

/// What a driver does for a rebuild's reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOut {
    /// Read this member now (this member itself too: its own report, read
    /// by the attempt's term like any member's).
    Read(NodeId),
    /// Read this member again once `after` has passed: its last read
    /// failed, and reading it may still change the rebuild.
    ReadAgain {
        /// The member.
        member: NodeId,
        /// How long to wait first.
        after: Duration,
    },
}

/// A rebuild attempt's reads of every member, under way.
#[derive(Debug)]
pub struct Reading {
    term: u64,
    generation: u64,
    began: MonoTime,
    reads: Reads,
    got: Vec<MemberRead>,
    /// Members whose read is on its way, or waits to be sent again.
    outstanding: BTreeSet<NodeId>,
    out: VecDeque<ReadOut>,
    sabotage: Sabotage,
}

impl Member {
    /// The reads of a rebuild attempt for `term`, begun at `now` with the
    /// table at `generation`: every one of `members` (the latest
    /// configuration, learners, this member and those that left lately)
    /// to read, this member first, until [`Member::start_reads`]'s
    /// deadline.
    pub fn start_reading(
        &mut self,
        term: u64,
        generation: u64,
        members: &[NodeId],
        now: MonoTime,
    ) -> Reading {
        let mut unique: Vec<NodeId> = Vec::with_capacity(members.len());
        for member in members {
            if !unique.contains(member) {
                unique.push(*member);
            }
        }
        let reads = self.start_reads(&unique, now);
        let own = self.id();
        let mut order: Vec<NodeId> = unique.iter().copied().filter(|m| *m == own).collect();
        order.extend(unique.iter().copied().filter(|m| *m != own));
        Reading {
            term,
            generation,
            began: now,
            reads,
            got: Vec::new(),
            outstanding: order.iter().copied().collect(),
            out: order.into_iter().map(ReadOut::Read).collect(),
            sabotage: self.config().sabotage,
        }
    }
}

impl Reading {
    /// The term the attempt rebuilds for.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// When the reads were sent, on the reader's clock.
    pub fn began(&self) -> MonoTime {
        self.began
    }

    /// When every read ends at the latest: each read's own timeout.
    pub fn deadline(&self) -> MonoTime {
        self.reads.deadline()
    }

    /// The next read to send or to time, if any.
    pub fn poll_read(&mut self) -> Option<ReadOut> {
        self.out.pop_front()
    }

    /// Reads `member` too: another member reported it left the cluster
    /// lately (it may hold the only other record of a lock). Nothing if it
    /// is read already (false).
    pub fn add(&mut self, member: NodeId) -> bool {
        if self.reads.members().contains(&member) {
            return false;
        }
        self.reads.add(member);
        self.outstanding.insert(member);
        self.out.push_back(ReadOut::Read(member));
        true
    }

    /// `read.member` answered, its leases already on the reader's clock.
    /// An answer to no read still out is not taken (false).
    pub fn answered(&mut self, read: MemberRead) -> bool {
        if !self.outstanding.remove(&read.member) {
            return false;
        }
        self.reads.answered(
            read.member,
            read.uptime.unwrap_or(Duration::MAX),
            read.uptime.is_none(),
            read.max_lease,
            read.copies,
        );
        self.got.push(read);
        true
    }

    /// A read of `member` failed at `now` (`why`): it is read again after
    /// [`READ_AGAIN_AFTER`] while that may still change the rebuild
    /// ([`Reads::failed`]); otherwise its read is over (sabotaged with
    /// `read_once`: never read again, yet still out, its late answer
    /// taken, until the deadline). Answers whether it is read again;
    /// `None` for a member with no read out (not taken).
    pub fn failed(&mut self, member: NodeId, why: String, now: MonoTime) -> Option<bool> {
        if !self.outstanding.contains(&member) {
            return None;
        }
        let again = self.reads.failed(member, why, now);
        if self.sabotage.read_once {
            // Never read again, and waited for until the deadline.
            return Some(false);
        }
        if again && !self.sabotage.no_reread {
            self.out.push_back(ReadOut::ReadAgain {
                member,
                after: READ_AGAIN_AFTER,
            });
            Some(true)
        } else {
            self.outstanding.remove(&member);
            Some(false)
        }
    }

    /// Whether no read is out: every member answered, or failed and is not
    /// read again (sabotaged with `read_once`, a failed member stays out).
    pub fn none_out(&self) -> bool {
        self.outstanding.is_empty()
    }

    /// When the reads stop, as of `now`: at once when none is out, else
    /// as [`Reads::stop_at`] says.
    pub fn stop_at(&mut self, now: MonoTime) -> MonoTime {
        if self.outstanding.is_empty() {
            return now;
        }
        if self.sabotage.read_once {
            return self.reads.deadline();
        }
        self.reads.stop_at(now)
    }

    /// The reads end, `took` after the attempt began: the rebuild's input
    /// (the reports read, the members missing), and each member not read
    /// with why.
    pub fn finish(self, took: Duration) -> (RebuildInput, Vec<(NodeId, String)>) {
        let (_, missing, unread) = self.reads.finish();
        let input = RebuildInput {
            term: self.term,
            generation: self.generation,
            reads: self.got,
            missing,
            took,
        };
        (input, unread)
    }
}
