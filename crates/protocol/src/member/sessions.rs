//! Sessions as the speaker serves them, and as the renewing node records
//! their renewals: one renewal reaches every lock of a session where it is
//! kept, without a message per lock.

use std::collections::BTreeSet;
use std::time::Duration;

use locktable::{
    is_session_name, Lock, LockError, LockId, LockInTransit, MonoTime, NodeId, SessionRenewed,
};

use crate::guard::Guard;
use crate::members::Members;
use crate::refusal::Refusal;

use super::speaker::lock_error;
use super::{Forwarded, Made, Member};

/// A session's renewal as the speaker receives it.
#[derive(Debug, Clone, Copy)]
pub struct SessionRenewal {
    /// The session's id.
    pub id: LockId,
    /// The lease asked for.
    pub lease: Option<Duration>,
    /// The node whose client renews: it keeps the session's record, and
    /// every one of its locks', from now on.
    pub node: NodeId,
    /// The digest of the ids of the session's locks that node records
    /// ([`locktable::session::digest`]); `None` if it records none.
    pub digest: Option<u128>,
    /// The digest of the locks the client holds in the session, if it said.
    pub client_digest: Option<u128>,
    /// Whether the members copying the session's locks renew them by the
    /// session's copy (protocol 7, `SESSION_COPIES`):
    /// then the locks are not copied one by one, and their records are
    /// answered only where they differ.
    pub session_copies: bool,
    /// Whether the renewing node keeps a record of the session (it sent
    /// it, from protocol 7): if the table lacks the session, the node's
    /// records of it are asked for ([`Refusal::RecordsWanted`]) to take it
    /// back, as a plain lock's renewal takes back its record.
    pub reclaimable: bool,
}

/// What a node recorded of a session's locks when it sent the session's
/// renewal on to the speaker ([`Member::session_sent`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionSent {
    /// The digest it sent ([`Member::session_digest`]).
    pub digest: Option<u128>,
    /// The ids of the session's locks it recorded.
    pub locks: Vec<LockId>,
}

/// What the speaker answers a session's renewal.
#[derive(Debug, Clone)]
pub struct RenewedSession {
    /// The session's grant, renewed.
    pub session: Lock,
    /// How many locks hang off it.
    pub locks: usize,
    /// Every lock of the session as the table has it, renewed: given when
    /// the renewing node's records are not the table's (their digests
    /// differ: a lock taken through another node, or lost), or when the
    /// locks must be copied one by one (copies needed, and not renewed by
    /// the session's copy). `None` when the renewing node extends its own
    /// records.
    pub records: Option<Vec<Lock>>,
    /// Whether each lock in `records` is to be put on record again, as the
    /// session is (copies needed, and not renewed by the session's copy).
    pub copied: bool,
}

impl Member {
    /// Renews a session as the speaker: the session's grant and every lock
    /// hanging off it take its new end ([`locktable::Table::renew_session`]);
    /// the locks held through another node move to the renewing one, whose
    /// former nodes are noted to hear of their release. A session the table
    /// lacks is not reclaimed from one node's record (its locks may be
    /// anywhere): "not held", or, while new grants are held back after a
    /// rebuild that missed members, "may be on record elsewhere".
    pub fn renew_session(
        &mut self,
        renewal: SessionRenewal,
        guard: &Guard,
        now: MonoTime,
    ) -> Result<(RenewedSession, Made), Refusal> {
        let SessionRenewal {
            id,
            lease,
            node,
            digest,
            client_digest,
            session_copies,
            reclaimable,
        } = renewal;
        self.speaker(guard, now)?;
        if self.table.session_name_of(id).is_none() {
            if node == self.config.id {
                if let Some(session) = self.held_record(id) {
                    let locks = self.held_session_records(id);
                    // Lost if it cannot be taken back: answered below.
                    let _ = self.reclaim_session(session, locks, guard, now);
                }
            } else if reclaimable && !self.table.is_forgotten(id, now) {
                return Err(Refusal::RecordsWanted);
            }
        }
        let before = self
            .table
            .session_name_of(id)
            .and_then(|name| self.table.held_through(&name, id));
        let renewed = if self.config.sabotage.session_locks_unfollowed {
            self.renew_session_alone(id, lease, node, now)
        } else if self.config.sabotage.session_end_leaves_locks {
            self.renew_session_outlived(id, lease, node, now)
        } else {
            self.table.renew_session(id, lease, node, now)
        };
        let renewed = match renewed {
            Err(LockError::NotHeld)
                if self.table.new_grants_held_until(now).is_some()
                    && !self.table.is_forgotten(id, now) =>
            {
                return Err(Refusal::MayBeOnRecordElsewhere);
            }
            other => other.map_err(lock_error)?,
        };
        if let Some((from, until)) = before.filter(|(from, _)| *from != node) {
            self.note_other_record(id, from, until, now);
        }
        if self.table.new_grants_held_until(now).is_some() {
            self.renewed_in_hold.insert(id);
        }
        for &(lock, from, until) in &renewed.moved_from {
            self.note_other_record(lock, from, until, now);
        }
        let own = node == self.config.id;
        let differs = digest.unwrap_or(0) != renewed.digest
            || client_digest.is_some_and(|d| d != renewed.digest);
        let copied = self.copy_round(node).needed() > 0 && !session_copies;
        let own_differs = own
            && (self.held.session_count(id), self.held.session_digest(id))
                != (renewed.locks, renewed.digest);
        let records = (differs || copied || own_differs).then(|| self.table.session_locks(id));
        if own && !own_differs {
            self.held.record_session(renewed.session.clone());
        } else if own {
            self.held.record(renewed.session.clone());
            let mut gone: BTreeSet<LockId> = self.held.session_locks(id).into_iter().collect();
            for lock in records.iter().flatten() {
                gone.remove(&lock.id);
                self.held.record(lock.clone());
            }
            for lock in gone {
                self.held.remove(lock);
            }
        } else {
            self.held.remove(id);
            for lock in self.held.session_locks(id) {
                self.held.remove(lock);
            }
        }
        let answer = RenewedSession {
            session: renewed.session,
            locks: renewed.locks,
            records,
            copied,
        };
        Ok((answer, self.made()))
    }

    /// Takes back a session the table lacks (a rebuild missed the members
    /// keeping it) from the renewing node's records: the session's grant
    /// `session` and its records of the session's `locks`, each kept as a
    /// plain lock's record is ([`locktable::Table::reclaim`]: not released,
    /// its lease running, fitting beside the name's holders); a lock that
    /// cannot be kept is lost (the renewal's answer lists the locks kept).
    /// The session itself refused: "not held". Nothing to do if the table
    /// has the session.
    pub fn reclaim_session(
        &mut self,
        session: Lock,
        locks: Vec<Lock>,
        guard: &Guard,
        now: MonoTime,
    ) -> Result<(), Refusal> {
        self.speaker(guard, now)?;
        let id = session.id;
        if self.table.session_name_of(id).is_some() {
            return Ok(());
        }
        if !is_session_name(&session.name) {
            return Err(Refusal::NotHeld);
        }
        match self.table.reclaim(session, now) {
            // This record ended (its client moved on through another node,
            // say): while new grants are held back, a record the rebuild
            // missed may keep it still, as for a renewal that sends none.
            Err(LockError::NotHeld)
                if self.table.new_grants_held_until(now).is_some()
                    && !self.table.is_forgotten(id, now) =>
            {
                return Err(Refusal::MayBeOnRecordElsewhere);
            }
            other => other.map_err(lock_error)?,
        };
        let mut locks = locks;
        locks.sort_unstable_by_key(|l| l.id);
        for lock in locks.into_iter().filter(|l| l.session == Some(id)) {
            if let Err(e) = self.table.reclaim(lock, now) {
                tracing::info!("a lock of a session taken back was not kept: {e}");
            }
        }
        Ok(())
    }

    /// A session's renewal as the sabotage `session_locks_unfollowed` makes
    /// it: the session's grant alone is renewed, its locks keep the ends
    /// (and the nodes) they had, so they lapse while their session runs.
    fn renew_session_alone(
        &mut self,
        id: LockId,
        lease: Option<Duration>,
        node: NodeId,
        now: MonoTime,
    ) -> Result<SessionRenewed, LockError> {
        let name = self.table.session_name_of(id).ok_or(LockError::NotHeld)?;
        let session = self.table.renew(&name, id, lease, node, now)?;
        let ids: Vec<LockId> = self.table.session_locks(id).iter().map(|l| l.id).collect();
        Ok(SessionRenewed {
            session,
            locks: ids.len(),
            digest: locktable::session::digest(ids),
            moved_from: Vec::new(),
        })
    }

    /// A session's renewal as the sabotage `session_end_leaves_locks` makes
    /// it: the session's locks follow a renewal for twice the lease, then
    /// the session's own grant is renewed for the lease alone, so its locks
    /// outlast its lapse by a lease.
    fn renew_session_outlived(
        &mut self,
        id: LockId,
        lease: Option<Duration>,
        node: NodeId,
        now: MonoTime,
    ) -> Result<SessionRenewed, LockError> {
        let name = self.table.session_name_of(id).ok_or(LockError::NotHeld)?;
        let lease = match lease {
            Some(lease) => lease,
            None => {
                self.table
                    .grant_of(&name, id, now)
                    .ok_or(LockError::NotHeld)?
                    .lease
            }
        };
        let mut renewed = self.table.renew_session(id, Some(lease * 2), node, now)?;
        renewed.session = self.table.renew(&name, id, Some(lease), node, now)?;
        Ok(renewed)
    }

    /// Ends a session as the speaker: its grant and every lock hanging off
    /// it are released, each with the members to tell (the grant alone
    /// under the sabotage `session_end_leaves_locks`).
    pub fn release_session(
        &mut self,
        id: LockId,
        guard: &Guard,
        now: MonoTime,
    ) -> Result<Vec<(Lock, Members)>, Refusal> {
        self.speaker(guard, now)?;
        let released = match self.config.sabotage.session_end_leaves_locks {
            true => {
                let name = self.table.session_name_of(id).ok_or(Refusal::NotHeld)?;
                vec![self.table.release(&name, id, now).map_err(lock_error)?]
            }
            false => self.table.release_session(id, now).map_err(lock_error)?,
        };
        Ok(released
            .into_iter()
            .map(|lock| {
                self.held.remove(lock.id);
                self.copies.remove(lock.id);
                let to = self.forget_to(&lock, now);
                (lock, to)
            })
            .collect())
    }

    /// This member's records of the locks of the session `id` it keeps for
    /// its clients: what a renewal sends when the speaker wants them
    /// ([`Refusal::RecordsWanted`]).
    ///
    /// Its copies of them too: a member copying a session renews its copies
    /// of the locks with it, and its client may renew through it when the
    /// session's node is away; the session taken back without them could
    /// not take them back later (the table then has the session).
    pub fn held_session_records(&self, id: LockId) -> Vec<Lock> {
        let ids: BTreeSet<LockId> = self
            .held
            .session_locks(id)
            .into_iter()
            .chain(self.copies.session_locks(id))
            .collect();
        ids.into_iter()
            .filter_map(|l| self.held_record(l))
            .collect()
    }

    /// The ids of the locks of the session `id` this member records for its
    /// clients.
    pub fn held_session_locks(&self, id: LockId) -> Vec<LockId> {
        self.held.session_locks(id)
    }

    /// The digest of the locks of the session `id` this member records for
    /// its clients, if it records any: what a renewal through it sends.
    pub fn session_digest(&self, id: LockId) -> Option<u128> {
        (self.held.session_count(id) > 0).then(|| self.held.session_digest(id))
    }

    /// What this member records of the session `id`'s locks, as a renewal
    /// it forwards sends: kept with the call for its answer
    /// ([`Member::renewed_session_through_speaker`]).
    pub fn session_sent(&self, id: LockId) -> SessionSent {
        SessionSent {
            digest: self.session_digest(id),
            locks: self.held.session_locks(id),
        }
    }

    /// A session's renewal the speaker answered to a call this member
    /// forwarded, counted from the call's send: the session's record and
    /// every one of its locks' take the new end. With the speaker's records
    /// (`records`), those replace this member's records of the session's
    /// locks; a lock this member recorded at the send (`sent`) that the
    /// speaker's table lacks is answered as lost (its client must stop
    /// using it). A lock recorded since was granted after the speaker
    /// renewed (the two crossed): its record is kept, one of the two its
    /// grant's answer counted on.
    ///
    /// Recorded unless a newer speaker read this member meanwhile, or the
    /// session was released through it (the two crossed). Without records,
    /// `sent.digest` is the digest the call sent: a record of the session's locks that ended (or went)
    /// on the way is not extended, so the renewal is refused (to retry,
    /// which then brings the records).
    pub fn renewed_session_through_speaker(
        &mut self,
        call: Forwarded,
        session: LockInTransit,
        records: Option<Vec<LockInTransit>>,
        sent: &SessionSent,
        arrived: MonoTime,
    ) -> Result<(Lock, Vec<Lock>), Refusal> {
        let session = self.renewed_through_speaker(call, session, arrived)?;
        let mut lost = Vec::new();
        match records {
            None => {
                if self.session_digest(session.id) != sent.digest {
                    return Err(Refusal::NotRebuilt);
                }
                self.held
                    .renewed_session(session.id, session.lease, call.sent);
            }
            Some(records) => {
                let mut kept: BTreeSet<LockId> =
                    self.held.session_locks(session.id).into_iter().collect();
                for record in records {
                    let lock = record.arrive(call.sent);
                    kept.remove(&lock.id);
                    if !self.table.is_forgotten(lock.id, arrived) {
                        self.copies.remove(lock.id);
                        self.held.record(lock);
                    }
                }
                let sent_locks: BTreeSet<LockId> = sent.locks.iter().copied().collect();
                lost.extend(
                    kept.into_iter()
                        .filter(|id| sent_locks.contains(id))
                        .filter_map(|id| self.held.remove(id)),
                );
            }
        }
        Ok((session, lost))
    }

    /// The speaker ended a session this member forwarded the end of: its
    /// record and its locks' go.
    pub fn session_released_through_speaker(
        &mut self,
        session: &Lock,
        guard: &Guard,
        now: MonoTime,
    ) {
        for id in self.held.session_locks(session.id) {
            if let Some(lock) = self.held.get(id) {
                self.released_through_speaker(&lock, guard, now);
            }
        }
        self.released_through_speaker(session, guard, now);
    }
}
