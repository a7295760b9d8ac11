//! Copies as the speaker makes them, and the records a leaving member hands
//! over.

use std::collections::{BTreeMap, BTreeSet};

use locktable::{is_session_name, Lock, LockId, MonoTime, NodeId, Table};

use crate::copies::{CopyRound, CopyStep, COPY_TIMEOUT};
use crate::guard::Guard;
use crate::refusal::Refusal;

use super::{Made, Member};

/// One grant or renewal being put on record before its client hears of
/// it: the table that made it, its [`CopyRound`] and the copies out (the
/// lock itself stays with the driver, which passes it in: a grant that
/// needs no copy is not cloned for it). Begun by [`crate::Member::begin_on_record`], moved on by
/// [`crate::Member::copy_answered`], decided by
/// [`crate::Member::on_record`].
#[derive(Debug, Clone)]
pub struct OnRecord {
    pub(crate) made: Made,
    pub(crate) round: CopyRound,
    /// Members a copy was sent to that have not answered.
    pub(crate) out: BTreeSet<NodeId>,
    /// Members whose copy went unanswered long enough that another member
    /// was sent one as well: each copy is hedged once.
    pub(crate) hedged: BTreeSet<NodeId>,
    /// Whether copies were skipped (sabotaged) when it began: read once,
    /// so a switch flipped meanwhile changes nothing of this grant.
    pub(crate) skip_copies: bool,
    /// For a session's grant: how many locks hang off the session, and
    /// the digest of their ids, as the table had them when the last copies
    /// were noted as sent (every one of those locks noted with them).
    pub(crate) session_locks: Option<SessionLocks>,
}

/// How many locks hang off a session, and the digest of their ids
/// ([`locktable::session::digest`]): what a copy holder compares with its
/// own copies of them before it renews them in memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionLocks {
    /// How many locks.
    pub count: usize,
    /// The digest of their ids.
    pub digest: u128,
}

impl OnRecord {
    /// The term the copies carry: the one the table that made the lock
    /// spoke for (0 if none, when no copy is sent).
    pub fn term(&self) -> u64 {
        self.made.term.unwrap_or(0)
    }

    /// The members that acknowledged a copy.
    pub fn acked(&self) -> &[NodeId] {
        self.round.acked()
    }

    /// For a session's grant, its locks as noted with the last copies sent
    /// ([`Member::copy_sent`]): what a copy of the session renews in place.
    pub fn session_locks(&self) -> Option<SessionLocks> {
        self.session_locks
    }
}

/// What the driver does next for an [`OnRecord`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Copying {
    /// Send a copy of the lock to each of these members (each already
    /// noted as one that may keep it), and report each answer, or its
    /// absence within [`COPY_TIMEOUT`], as an answer.
    Send(Vec<NodeId>),
    /// Wait for the copies out.
    Wait,
    /// No answer is waited for any more: ask [`crate::Member::on_record`]
    /// whether the client may hear of the lock.
    Decide,
}

impl Member {
    /// The copies a grant or renewal for a client of `holder` needs, and
    /// the members to try, in order (a member that failed a copy last).
    pub fn copy_round(&self, holder: NodeId) -> CopyRound {
        CopyRound::new(&self.config, holder, &self.suspects)
    }

    /// Begins putting `lock`, just granted or renewed by the table `made`
    /// for a client of `holder`, on record with `--copies` members: the
    /// members to send the first copies to, each noted as one that may
    /// keep it. Nothing to send (the speaker and the holder's node are
    /// records enough, or the table spoke for no term): decide at once.
    pub fn begin_on_record(
        &mut self,
        lock: &Lock,
        holder: NodeId,
        made: Made,
        now: MonoTime,
    ) -> (OnRecord, Copying) {
        let mut job = OnRecord {
            round: self.copy_round(holder),
            made,
            out: BTreeSet::new(),
            hedged: BTreeSet::new(),
            skip_copies: self.config.sabotage.skip_copies,
            session_locks: None,
        };
        let first = match made.term {
            Some(_) if !job.skip_copies => job.round.start(),
            _ => Vec::new(),
        };
        if first.is_empty() {
            return (job, Copying::Decide);
        }
        for &member in &first {
            job.session_locks = self.copy_sent(member, lock, now);
            job.out.insert(member);
        }
        (job, Copying::Send(first))
    }

    /// `member` acknowledged the copy of `job`'s `lock` (`acked`), refused
    /// it, or let it time out (an answer after its timeout, or a timeout
    /// after its answer, counts once). A member that failed a copy is
    /// tried last until it acknowledges one again.
    pub fn copy_answered(
        &mut self,
        job: &mut OnRecord,
        lock: &Lock,
        member: NodeId,
        acked: bool,
        now: MonoTime,
    ) -> Copying {
        if !job.out.remove(&member) {
            return Copying::Wait;
        }
        if acked {
            self.suspects.remove(&member);
        } else {
            self.suspects.insert(member);
        }
        match job.round.answered(member, acked) {
            CopyStep::Wait => Copying::Wait,
            CopyStep::SendTo(next) => {
                job.session_locks = self.copy_sent(next, lock, now);
                job.out.insert(next);
                Copying::Send(vec![next])
            }
            CopyStep::Done | CopyStep::GiveUp => Copying::Decide,
        }
    }

    /// `member` has not answered the copy of `job`'s `lock` for
    /// [`COPY_HEDGE`] at `now`: it is tried last from now on (until it
    /// acknowledges one), and the next member is sent a copy as well, noted
    /// before it leaves as every copy is. Whichever acknowledges counts; the
    /// copy out is still waited for. Nothing if `member` answered already,
    /// or its copy was hedged once, or no more acknowledgements are needed.
    ///
    /// [`COPY_HEDGE`]: crate::COPY_HEDGE
    pub fn copy_hedged(
        &mut self,
        job: &mut OnRecord,
        lock: &Lock,
        member: NodeId,
        now: MonoTime,
    ) -> Copying {
        if !job.out.contains(&member) || !job.hedged.insert(member) {
            return Copying::Wait;
        }
        self.suspects.insert(member);
        match job.round.hedge() {
            Some(next) => {
                job.session_locks = self.copy_sent(next, lock, now);
                job.out.insert(next);
                Copying::Send(vec![next])
            }
            None => Copying::Wait,
        }
    }

    /// Notes, before a copy of `lock` is sent to `member`, that it may keep
    /// one: a release of it is passed on there too. Its lease there is
    /// counted from its arrival, at most a copy's timeout after it is
    /// sent, and it is sent within that of `now`.
    ///
    /// A copy of a session's grant may renew the member's copies of every
    /// lock of the session ([`Member::take_session_copy`]): the note of the
    /// session's grant stands for every lock of it, to the session's end (a
    /// release of any is passed on to the members noted with its session),
    /// and the count and digest of the locks the table has in the session
    /// are answered, to be sent with the copy (the member renews its copies
    /// only if it keeps exactly those locks, so none it renews goes
    /// unnoted).
    pub fn copy_sent(
        &mut self,
        member: NodeId,
        lock: &Lock,
        now: MonoTime,
    ) -> Option<SessionLocks> {
        let until = lock.expires + Table::FORGET_MARGIN + 2 * COPY_TIMEOUT;
        self.note_other_record(lock.id, member, until, now);
        if !is_session_name(&lock.name) {
            return None;
        }
        let (count, digest) = self.table.session_summary(lock.id);
        Some(SessionLocks { count, digest })
    }

    /// The session `id`'s grant and every lock of it as the table has them
    /// at `now`, to be sent to `member` as copies (its copies of the
    /// session's locks were not the table's: [`Member::take_session_copy`]),
    /// each noted as sent ([`Member::copy_sent`]) before it leaves. Empty
    /// if the table no longer holds the session.
    pub fn session_copies(&mut self, id: LockId, member: NodeId, now: MonoTime) -> Vec<Lock> {
        let session = self
            .table
            .session_name_of(id)
            .and_then(|name| self.table.grant_of(&name, id, now));
        let Some(session) = session else {
            return Vec::new();
        };
        let mut locks = self.table.session_locks(id);
        self.copy_sent(member, &session, now);
        for lock in &locks {
            self.copy_sent(member, lock, now);
        }
        locks.insert(0, session);
        locks
    }

    /// Whether the lock of `job` may be answered to its client now: enough
    /// members acknowledged a copy, and the table that made it still
    /// speaks. If not, a grant is to be taken back ([`Member::take_back`]).
    pub fn on_record(&self, job: &OnRecord, guard: &Guard, now: MonoTime) -> Result<(), Refusal> {
        if !job.skip_copies {
            job.round.outcome(self.config.copies)?;
        }
        self.speaks_for(job.made, guard, now)
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
        if !self.table.is_rebuilt() {
            return Err(Refusal::NotRebuilt);
        }
        let Some(lock) = self.table.grant_of(name, id, now) else {
            if expires > now && !self.table.is_forgotten(id, now) {
                return Err(Refusal::MayBeOnRecordElsewhere);
            }
            return Ok(None);
        };
        Ok(Some(lock))
    }

    /// Every record this member keeps at `now`, one per lock: its clients'
    /// locks, the copies it holds, and what it granted while it spoke (a
    /// grant to another node's client is on record with the speaker and
    /// the holder's node only, with two copies): what it hands over when
    /// it leaves.
    pub fn records(&self, now: MonoTime) -> Vec<Lock> {
        let mut by_id: BTreeMap<LockId, Lock> = BTreeMap::new();
        let all = self.held.live(now).into_iter();
        let all = all
            .chain(self.copies.live(now))
            .chain(self.table.granted(now));
        for lock in all {
            match by_id.get(&lock.id) {
                Some(known) if known.expires >= lock.expires => {}
                _ => {
                    by_id.insert(lock.id, lock);
                }
            }
        }
        by_id.into_values().collect()
    }
}
