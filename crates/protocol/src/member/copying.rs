//! Copies as the speaker makes them, and the records a leaving member hands
//! over.

use locktable::{Lock, LockId, MonoTime, NodeId, Table};

use crate::copies::{CopyRound, COPY_TIMEOUT};
use crate::guard::Guard;
use crate::refusal::Refusal;

use super::{Made, Member};

impl Member {
    /// The copies a grant or renewal for a client of `holder` needs, and
    /// the members to try, in order.
    pub fn copy_round(&self, holder: NodeId) -> CopyRound {
        CopyRound::new(&self.config, holder, &self.suspects)
    }

    /// Notes, before a copy of `lock` is sent to `member`, that it may keep
    /// one: a release of it is passed on there too. Its lease there is
    /// counted from its arrival, at most a copy's timeout after it is
    /// sent, and it is sent within that of `now`.
    pub fn copy_sent(&mut self, member: NodeId, lock: &Lock, now: MonoTime) {
        let until = lock.expires + Table::FORGET_MARGIN + 2 * COPY_TIMEOUT;
        self.note_other_record(lock.id, member, until, now);
    }

    /// Notes whether `member` acknowledged a copy: a member that failed
    /// one is tried last until it acknowledges one again.
    pub fn copy_answered(&mut self, member: NodeId, acked: bool) {
        if acked {
            self.suspects.remove(&member);
        } else {
            self.suspects.insert(member);
        }
    }

    /// Whether a grant of the table `made`, copied as `round` says, may be
    /// answered to its client now.
    pub fn on_record(
        &self,
        round: &CopyRound,
        made: Made,
        guard: &Guard,
        now: MonoTime,
    ) -> Result<(), Refusal> {
        round.outcome(self.config.copies)?;
        if !self.still_speaks_for(made, guard, now) {
            return Err(Refusal::NotRebuilt);
        }
        Ok(())
    }

    /// A record a leaving member handed over, its lease ending at
    /// `expires`: the lock as this speaker's table has it, if it is live
    /// there under that id. It is to be copied again as for a grant to the
    /// speaker's own client (`copies - 1` members beside the speaker), so
    /// that it keeps `--copies` records among the members that stay: the
    /// holder's node is not counted on, since it may itself have left
    /// cleanly since the lock was last renewed through it, its records
    /// handed over and its memory empty (an adversarial review found two
    /// clean restarts in a row leaving a lock on the speaker alone). `None`: nothing to keep (released, lost, ended). A record
    /// still running that the table does not know (a rebuild missed its
    /// other records) is refused: the member's leaving may cost it, so the
    /// member must not count as having forgotten nothing.
    pub fn handed_over(
        &self,
        name: &str,
        id: LockId,
        expires: MonoTime,
        guard: &Guard,
        now: MonoTime,
    ) -> Result<Option<Lock>, Refusal> {
        self.speaker(guard, now)?;
        let found = self.table.get(name, now).map_err(|_| Refusal::NotRebuilt)?;
        let Some(lock) = found.filter(|l| l.id == id) else {
            if expires > now && !self.table.is_forgotten(id, now) {
                return Err(Refusal::MayBeOnRecordElsewhere);
            }
            return Ok(None);
        };
        Ok(Some(lock))
    }

    /// Every record this member keeps at `now` (its clients' locks and the
    /// copies it holds): what it hands over when it leaves.
    pub fn records(&self, now: MonoTime) -> Vec<Lock> {
        let mut locks: Vec<Lock> = self.held.live(now);
        locks.extend(self.copies.live(now));
        locks
    }
}
