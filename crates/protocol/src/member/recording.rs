//! One grant or renewal put on record, start to end, as its driver
//! carries it out: the copies to send, the next member after each answer,
//! and the decision whether its client may hear of the lock.
//!
//! The driver sends each [`RecordOut::Copy`] (timing it out after
//! [`crate::COPY_TIMEOUT`]), feeds every answer or timeout back
//! ([`Recording::answered`]), says which copies went unanswered for
//! [`crate::COPY_HEDGE`] ([`Recording::hedge`]), and carries out the one
//! [`RecordOut::Decided`] that ends it: answer the client, or refuse it and
//! take a grant back.

use std::collections::VecDeque;

use locktable::{Lock, MonoTime, NodeId};

use crate::guard::Guard;
use crate::refusal::Refusal;

use super::{Copying, Made, Member, OnRecord};

/// What a driver does for a lock being put on record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordOut {
    /// Send a copy of the lock, its lease as it is at the send, to this
    /// member (noted already as one that may keep it), for
    /// [`Recording::term`]; report its answer, or its absence within
    /// [`crate::COPY_TIMEOUT`], and, if it is still unanswered after
    /// [`crate::COPY_HEDGE`], say so ([`Recording::hedge`]).
    Copy(NodeId),
    /// Decided, once: the client may hear of the lock (`Ok`), or not (a
    /// grant is to be taken back, [`Member::take_back`]).
    Decided(Result<(), Refusal>),
}

/// A grant or renewal being put on record.
#[derive(Debug)]
pub struct Recording {
    job: OnRecord,
    out: VecDeque<RecordOut>,
    decided: bool,
}

impl Member {
    /// Starts putting `lock`, just granted or renewed by the table `made`
    /// for a client of `holder`, on record with `--copies` members at
    /// `now`: the first copies to send, or, when none is needed (the
    /// speaker and the holder's node are records enough, or the table
    /// spoke for no term), the decision at once.
    pub fn start_on_record(
        &mut self,
        lock: &Lock,
        holder: NodeId,
        made: Made,
        guard: &Guard,
        now: MonoTime,
    ) -> Recording {
        let (job, first) = self.begin_on_record(lock, holder, made, now);
        let mut recording = Recording {
            job,
            out: VecDeque::new(),
            decided: false,
        };
        recording.next(self, first, guard, now);
        recording
    }
}

impl Recording {
    /// The term the copies carry.
    pub fn term(&self) -> u64 {
        self.job.term()
    }

    /// The members that acknowledged a copy.
    pub fn acked(&self) -> &[NodeId] {
        self.job.acked()
    }

    /// For a session's grant, its locks as noted with the copies last sent
    /// ([`OnRecord::session_locks`]).
    pub fn session_locks(&self) -> Option<super::SessionLocks> {
        self.job.session_locks()
    }

    /// The next thing to do, if any.
    pub fn poll(&mut self) -> Option<RecordOut> {
        self.out.pop_front()
    }

    /// Whether it is decided: [`RecordOut::Decided`] was queued.
    pub fn is_decided(&self) -> bool {
        self.decided
    }

    /// `who` acknowledged the copy of `lock` (`acked`), refused it, or let
    /// it time out, at `now` (an answer after its timeout, or a timeout
    /// after its answer, counts once; nothing once decided).
    pub fn answered(
        &mut self,
        member: &mut Member,
        lock: &Lock,
        who: NodeId,
        acked: bool,
        guard: &Guard,
        now: MonoTime,
    ) {
        if self.decided {
            return;
        }
        let next = member.copy_answered(&mut self.job, lock, who, acked, now);
        self.next(member, next, guard, now);
    }

    /// The copy of `lock` sent to `who` is still unanswered
    /// [`crate::COPY_HEDGE`] after it was sent, at `now`: another member
    /// may be sent one as well ([`Member::copy_hedged`]).
    pub fn hedge(
        &mut self,
        member: &mut Member,
        lock: &Lock,
        who: NodeId,
        guard: &Guard,
        now: MonoTime,
    ) {
        if self.decided {
            return;
        }
        let next = member.copy_hedged(&mut self.job, lock, who, now);
        self.next(member, next, guard, now);
    }

    /// No answer can come any more (none is out): decide on what was
    /// acknowledged.
    pub fn decide(&mut self, member: &Member, guard: &Guard, now: MonoTime) {
        if !self.decided {
            self.next(member, Copying::Decide, guard, now);
        }
    }

    fn next(&mut self, member: &Member, copying: Copying, guard: &Guard, now: MonoTime) {
        match copying {
            Copying::Send(members) => self.out.extend(members.into_iter().map(RecordOut::Copy)),
            Copying::Wait => {}
            Copying::Decide => {
                self.decided = true;
                let decided = member.on_record(&self.job, guard, now);
                self.out.push_back(RecordOut::Decided(decided));
            }
        }
    }
}
