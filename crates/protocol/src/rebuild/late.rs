//! Reading again, during the strict hold, the members a rebuild missed: a
//! member whose reads were lost but that runs may keep the only live
//! record of a lock (a copy, a lock of a session its client renews through
//! another node), and the hold would otherwise let that lock run out
//! unrenewed, or answer it lost to a session's renewal.
//!
//! New grants are held back for the whole hold, so the table changes only
//! by renewals, releases, lapses and records taken back: a late report's
//! records are taken back one by one as a renewal takes back its node's
//! record ([`locktable::Table::reclaim`]: not released, lease running,
//! fitting beside the name's holders, a lock of a session only beside its
//! session). Nothing is granted or released for it, and the hold keeps
//! its end: the members still missing may hold records too.

use locktable::{is_session_name, Lock, MonoTime, NodeId};

use super::MemberRead;
use crate::guard::Guard;
use crate::member::Member;
use crate::refusal::Refusal;

/// What [`Member::late_read`] did with a late report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LateRead {
    /// Records the table lacked and took back.
    pub taken_back: usize,
    /// Records of grants the table had, now at the later of the two ends.
    pub merged: usize,
    /// Records not kept: ended, released, or not fitting.
    pub refused: usize,
}

impl Member {
    /// Whether the member `member`, missed by the rebuild of `term`, is
    /// worth reading again now: this member speaks for `term`, new grants
    /// are held back, and that rebuild counted `member` missing.
    pub fn late_read_wanted(
        &self,
        term: u64,
        member: NodeId,
        guard: &Guard,
        now: MonoTime,
    ) -> bool {
        self.speaking == Some(term)
            && guard.leader_term() == Some(term)
            && self.table.new_grants_held_until(now).is_some()
            && self.last_rebuild.as_ref().is_some_and(|r| {
                r.term == term && r.members_missing.contains(&member) && member != self.config().id
            })
    }

    /// Takes back the records of a report read, by the speaker of `term`,
    /// from a member its rebuild missed ([`Member::late_read_wanted`]):
    /// sessions first, each lock of a session after them (it is kept only
    /// beside its session), then the rest, each in id order so that a
    /// seed replays. Refused if the report is no longer wanted, or holds a
    /// grant of a later term (this member was deposed).
    pub fn late_read(
        &mut self,
        term: u64,
        read: MemberRead,
        guard: &Guard,
        now: MonoTime,
    ) -> Result<LateRead, Refusal> {
        if !self.late_read_wanted(term, read.member, guard, now) {
            return Err(Refusal::NotRebuilt);
        }
        if read.locks.iter().any(|l| l.fence.epoch() > term) {
            tracing::info!(
                member = read.member,
                term,
                "a late report holds a grant of a later term: not taken"
            );
            return Err(Refusal::NotRebuilt);
        }
        let mut locks = read.locks;
        locks.sort_unstable_by_key(|l| (!is_session_name(&l.name), l.session.is_some(), l.id));
        let mut done = LateRead::default();
        for lock in locks {
            if !self.late_record_wanted(&lock) {
                done.refused += 1;
                continue;
            }
            let had = self.table.grant_of(&lock.name, lock.id, now).is_some();
            match self.table.reclaim(lock, now) {
                Ok(_) if had => done.merged += 1,
                Ok(_) => done.taken_back += 1,
                Err(_) => done.refused += 1,
            }
        }
        tracing::info!(
            member = read.member,
            term,
            taken_back = done.taken_back,
            merged = done.merged,
            refused = done.refused,
            "a member the rebuild missed was read during the hold"
        );
        Ok(done)
    }

    /// Whether a late report's record of `lock` may be taken back. Not a
    /// session the table lacks: taken back without every one of its locks
    /// (one not fitting yet), its renewal would answer them lost, where the
    /// renewing node's records, asked for when the table lacks the
    /// session, take them back with it, or are refused `503` while the
    /// hold lasts. Not a lock of a session renewed during the hold: its
    /// client was answered the session's locks, and one it was told it
    /// lost, or never counted, would be held by nobody while the session
    /// runs.
    fn late_record_wanted(&self, lock: &Lock) -> bool {
        if is_session_name(&lock.name) {
            return self.table.session_name_of(lock.id).is_some();
        }
        lock.session
            .is_none_or(|session| !self.renewed_in_hold.contains(&session))
    }
}
