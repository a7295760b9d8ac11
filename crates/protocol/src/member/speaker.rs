//! The speaker's operations on its table: grants, releases, renewals, reads
//! and the expiry of leases, and when its table is dropped.

use locktable::{
    is_session_name, Acquired, AcquiredSet, Answer, Lock, LockError, LockId, MonoTime, NodeId,
    Request, WaiterId,
};

use crate::guard::Guard;
use crate::members::Members;
use crate::refusal::Refusal;
use crate::retry::Named;

use super::{Acquisition, Made, Member, Moved, Polled, Renewal, SetAcquisition, MOVED_PRUNE_AT};

impl Member {
    /// A request as the switched-off rules of a self-test take it: an
    /// exclusive one as shared (`writers_shared`), one of N permits as one
    /// of N+1 (`permits_overfull`), a lock-delay dropped (`delay_ignored`).
    fn sabotage_request(&self, request: &mut Request) {
        let sabotage = &self.config.sabotage;
        if sabotage.writers_shared && request.kind == locktable::Kind::Exclusive {
            request.kind = locktable::Kind::Shared;
        }
        if let (true, locktable::Kind::Permit(n)) = (sabotage.permits_overfull, request.kind) {
            request.kind = locktable::Kind::Permit((n + 1).min(locktable::Kind::MAX_PERMITS));
        }
        if sabotage.delay_ignored {
            request.delay = std::time::Duration::ZERO;
        }
    }

    /// Grants (or queues) `request` as the speaker; a lock of this
    /// member's own client goes into its `Held` at once. Answers the
    /// outcome and the table that made it.
    pub fn acquire(
        &mut self,
        request: Request,
        guard: &Guard,
        now: MonoTime,
    ) -> Result<(Acquired, Made), Refusal> {
        self.speaker(guard, now)?;
        let node = request.node;
        let mut request = request;
        self.sabotage_request(&mut request);
        let acquired = self.table.acquire(request, now).map_err(Refusal::from)?;
        if let Acquired::Granted(lock) = &acquired {
            if node == self.config.id {
                self.held.record(lock.clone());
            }
        }
        Ok((acquired, self.made()))
    }

    /// Grants (or queues) `request` as [`Member::acquire`] does, for an
    /// acquisition its caller may have `named`. A named one's grant gets the
    /// id made from its name ([`Named::lock_id`]) unless that id was
    /// released lately (an id is never handed out twice); a named one that
    /// finds its own earlier grant holding the name, whether it would wait
    /// or not, is answered [`Acquisition::Own`]: renew that grant.
    pub fn acquire_named(
        &mut self,
        mut request: Request,
        named: Option<Named<'_>>,
        guard: &Guard,
        now: MonoTime,
    ) -> Result<Acquisition, Refusal> {
        let Some(named) = named else {
            return self
                .acquire(request, guard, now)
                .map(|(acquired, made)| Acquisition::Table(acquired, made));
        };
        // Found also when it would wait: its first try's answer was lost,
        // or dropped by a follower that asked the next speaker.
        // Whatever the wait: a refusal names one holder, which of a name
        // held shared or as permits need not be this caller's.
        let own = self
            .holders(&request.name, guard, now)
            .ok()
            .and_then(|holders| holders.into_iter().find(|lock| named.owns(lock)));
        // A lapsed own grant (its lease ran out, its lock-delay closes the
        // name) is not renewed: the retry waits for the name like any
        // other, under an id of its own.
        let lapsed_own = match own {
            Some(lock) if !lock.is_lapsed(now) => {
                self.claim(&lock);
                return Ok(Acquisition::Own(lock));
            }
            Some(_) => true,
            None => false,
        };
        let id = named.lock_id(&request.name);
        if !lapsed_own && !self.table.is_forgotten(id, now) {
            request.id = id;
        }
        match self.acquire(request, guard, now) {
            Ok((acquired, made)) => Ok(Acquisition::Table(acquired, made)),
            Err(Refusal::Held(lock)) if named.owns(&lock) && !lock.is_lapsed(now) => {
                self.claim(&lock);
                Ok(Acquisition::Own(*lock))
            }
            Err(refusal) => Err(refusal),
        }
    }

    /// Grants (or queues) a set of names as the speaker, all or none
    /// (`Table::acquire_set`); the grants to this member's own client go
    /// into its `Held` at once. A `named` set gets the ids made from its
    /// name, as [`Member::acquire_named`] does; one that finds its own
    /// earlier grants holding every name is answered
    /// [`SetAcquisition::Own`]: renew them.
    pub fn acquire_set(
        &mut self,
        mut requests: Vec<Request>,
        named: Option<Named<'_>>,
        guard: &Guard,
        now: MonoTime,
    ) -> Result<SetAcquisition, Refusal> {
        self.speaker(guard, now)?;
        if let Some(named) = named {
            let own: Vec<Lock> = requests
                .iter()
                .filter_map(|r| {
                    let holders = self.table.holders(&r.name, now).ok()?;
                    holders.into_iter().find(|lock| named.owns(lock))
                })
                .collect();
            // A lapsed own grant (only its lock-delay left) is not the
            // caller's to renew: the set waits for its name under an id of
            // its own, as `acquire_named` does.
            let lapsed: Vec<&str> = own
                .iter()
                .filter(|l| l.is_lapsed(now))
                .map(|l| l.name.as_str())
                .collect();
            if !requests.is_empty() && own.len() == requests.len() && lapsed.is_empty() {
                own.iter().for_each(|lock| self.claim(lock));
                return Ok(SetAcquisition::Own(own));
            }
            for r in &mut requests {
                let id = named.lock_id(&r.name);
                if !lapsed.contains(&r.name.as_str()) && !self.table.is_forgotten(id, now) {
                    r.id = id;
                }
            }
        }
        for r in &mut requests {
            self.sabotage_request(r);
        }
        let acquired = if self.config.sabotage.sets_partial {
            self.acquire_free_ones(requests, now)?
        } else {
            self.table
                .acquire_set(requests, now)
                .map_err(Refusal::from)?
        };
        if let AcquiredSet::Granted(locks) = &acquired {
            for lock in locks.iter().filter(|l| l.node == self.config.id) {
                self.held.record(lock.clone());
            }
        }
        Ok(SetAcquisition::Table(acquired, self.made()))
    }

    /// The sabotage `sets-partial`: the names of a set free now, granted
    /// one by one and answered as the set.
    fn acquire_free_ones(
        &mut self,
        requests: Vec<Request>,
        now: MonoTime,
    ) -> Result<AcquiredSet, Refusal> {
        let mut granted = Vec::new();
        let mut refused = None;
        for mut request in requests {
            request.wait = std::time::Duration::ZERO;
            match self.table.acquire(request, now) {
                Ok(Acquired::Granted(lock)) => granted.push(lock),
                Ok(Acquired::Waiting(_)) => {}
                Err(e) => refused = refused.or(Some(e)),
            }
        }
        match (granted.is_empty(), refused) {
            (true, Some(e)) => Err(Refusal::from(e)),
            _ => Ok(AcquiredSet::Granted(granted)),
        }
    }

    /// Stops waiting for `waiter` (its client went away); the requests
    /// behind it that now fit are granted, their answers to be taken with
    /// [`Member::take_answers`]. A member that may not speak at `now`
    /// grants none: every waiter is told to retry.
    pub fn cancel(&mut self, name: &str, waiter: WaiterId, guard: &Guard, now: MonoTime) {
        self.grant_nothing_unless_speaking(guard, now);
        self.table.cancel(name, waiter, now);
    }

    /// The table's answers to waiting requests since the last call; a
    /// grant to this member's own client goes into its `Held`.
    pub fn take_answers(&mut self) -> Vec<Answer> {
        let answers = self.table.take_answers();
        for answer in &answers {
            let granted = answer.result.iter().chain(&answer.also);
            for lock in granted.filter(|l| l.node == self.config.id) {
                self.held.record(lock.clone());
            }
        }
        answers
    }

    /// Releases a lock as the speaker, for its holder; answers it and the
    /// members that may keep a record of it, to be told to forget it.
    pub fn release(
        &mut self,
        name: &str,
        id: LockId,
        guard: &Guard,
        now: MonoTime,
    ) -> Result<(Lock, Members), Refusal> {
        self.speaker(guard, now)?;
        match self.release_granted(name, id, now) {
            Err(Refusal::NotHeld) => {
                self.forget_unknown_in_hold(name, id, now);
                Err(Refusal::NotHeld)
            }
            other => other,
        }
    }

    /// Releases the grant of `name` under `id` the table has.
    fn release_granted(
        &mut self,
        name: &str,
        id: LockId,
        now: MonoTime,
    ) -> Result<(Lock, Members), Refusal> {
        let lock = self.table.release(name, id, now).map_err(lock_error)?;
        self.claimed.remove(&id);
        self.held.remove(id);
        self.copies.remove(id);
        let to = self.forget_to(&lock, now);
        Ok((lock, to))
    }

    /// A release of a lock the table lacks while new grants are held back
    /// after a rebuild that missed members: one of them may keep a record
    /// of it, which a late read or a renewal's take-back must not bring
    /// back (its name would stay closed, held by nobody). The id is kept
    /// from them until the hold ends, when every such record has ended.
    fn forget_unknown_in_hold(&mut self, name: &str, id: LockId, now: MonoTime) {
        let Some(until) = self.table.new_grants_held_until(now) else {
            return;
        };
        // A grant the table has, lapsed (its lock-delay running), keeps
        // its delay: not taken out here.
        if self.table.held_through(name, id).is_none() && !self.table.is_forgotten(id, now) {
            let left = until.saturating_duration_since(now);
            self.table.forget(name, id, left, now);
        }
    }

    /// Takes back, as the speaker, a grant a follower's caller never heard
    /// of (the caller went away): released as [`Member::release`] does,
    /// unless it was renewed since it was granted, which only a client
    /// holding it does (a retry of the same request, answered with this
    /// grant): then it is that client's, and kept ([`Refusal::Claimed`]).
    /// A grant the table lacks (a strict rebuild missed it) is not kept
    /// from later take-backs, as a holder's release keeps it: a retry
    /// answered with it may hold it, which only its records can show.
    pub fn take_back_unrenewed(
        &mut self,
        name: &str,
        id: LockId,
        guard: &Guard,
        now: MonoTime,
    ) -> Result<(Lock, Members), Refusal> {
        self.speaker(guard, now)?;
        let current = self.table.grant_of(name, id, now);
        if current.is_some_and(|lock| self.is_claimed(&lock)) {
            return Err(Refusal::Claimed);
        }
        self.release_granted(name, id, now)
    }

    /// Releases a grant its client never heard of (it could not be put on
    /// record with enough members, or its caller went away); answers the
    /// members to tell. A table dropped meanwhile forgets it (it may be in
    /// `Granted`), and every member is told. A grant renewed since it was
    /// granted is kept (no member told): only a client holding it renews
    /// it, a retry of the same named request answered with it
    /// ([`Member::acquire_named`]'s `Own`), as [`Member::take_back_unrenewed`]
    /// keeps it for a follower.
    ///
    /// A member that may no longer speak at `now` ([`Member::may_speak`]:
    /// deposed, or its guard ran out, as when a copy round fails because
    /// the member was cut off) hands the name to no waiter: that grant
    /// would be a deposed speaker's. Its waiters are told to retry.
    pub fn take_back(&mut self, lock: &Lock, guard: &Guard, now: MonoTime) -> Members {
        let current = self.table.grant_of(&lock.name, lock.id, now);
        if current.is_some_and(|held| self.is_claimed(&held)) {
            return Members::NONE;
        }
        self.held.remove(lock.id);
        self.copies.remove(lock.id);
        if !self.may_speak(guard, now) {
            self.table.turn_away_waiters();
            self.table.forget(&lock.name, lock.id, lock.ttl(now), now);
            return Members::ALL;
        }
        match self.table.release(&lock.name, lock.id, now) {
            Ok(_) => self.forget_to(lock, now),
            Err(_) => {
                self.table.forget(&lock.name, lock.id, lock.ttl(now), now);
                Members::ALL
            }
        }
    }

    /// Notes that `lock`, a retry's own grant, is answered to its client:
    /// a lock of a session, which no renewal of its own will show as held
    /// by a client, is kept from a take-back of the first try.
    pub fn claim(&mut self, lock: &Lock) {
        if let Some(session) = lock.session {
            self.claimed.insert(lock.id, session);
        }
    }

    /// Whether a client holds `lock`, granted in this table: renewed since
    /// it was granted, or (a lock of a session, whose session's renewals
    /// move its end without a client of its own) answered to a retry.
    fn is_claimed(&self, lock: &Lock) -> bool {
        match lock.session {
            Some(_) => self.claimed.contains_key(&lock.id),
            None => lock.renewed_since_granted(),
        }
    }

    /// The members that may keep a record of `lock`, released now (this
    /// member among them is left out when the release is passed on).
    ///
    /// A member keeps a record of a lock its client holds (`Held`: the
    /// lock's node, and a node a renewal moved it from, until the lease it
    /// knew ends), of a copy it was sent, and of what it granted while it
    /// spoke (`Granted`). A lock granted in this term was granted here:
    /// only the members noted with it have a record of it (a rebuild for an
    /// earlier term that reads it is refused, see `Table::rebuild`). A lock
    /// from an earlier term may be in any member's record: every member.
    ///
    /// A lock of a session is also noted with its session: a member sent a
    /// copy of the session's grant may have renewed its copy of every lock
    /// of it ([`Member::copy_sent`]). A session's own note stays until its
    /// time passes, for the locks released after it.
    pub(super) fn forget_to(&mut self, lock: &Lock, now: MonoTime) -> Members {
        let moved = match self.moved.is_empty() {
            true => None,
            false if is_session_name(&lock.name) => self.moved.get(&lock.id).copied(),
            false => self.moved.remove(&lock.id),
        };
        let by_session = lock
            .session
            .and_then(|session| self.moved.get(&session))
            .filter(|noted| noted.until > now)
            .map(|noted| noted.from);
        if Some(lock.fence.epoch()) != self.speaking {
            return Members::ALL;
        }
        let to = self.member(lock.node).with(by_session.unwrap_or_default());
        match moved {
            Some(moved) if moved.until > now => to.with(moved.from),
            _ => to,
        }
    }

    /// Renews a lock as the speaker; a lock this table lacks is reclaimed
    /// from the renewing node's record of it. The renewing node keeps the
    /// record from now on. Answers the renewed lock and the table that
    /// renewed it.
    pub fn renew(
        &mut self,
        renewal: Renewal<'_>,
        guard: &Guard,
        now: MonoTime,
    ) -> Result<(Lock, Made), Refusal> {
        let Renewal {
            name,
            id,
            lease,
            node,
            record,
            data,
        } = renewal;
        self.speaker(guard, now)?;
        let before = self.table.held_through(name, id);
        let renewed = match self.table.renew(name, id, lease, node, now) {
            Err(LockError::NotHeld) if record.is_some() => {
                let record = record.expect("checked");
                self.table.reclaim(record, now).map_err(lock_error)?;
                match self.table.renew(name, id, lease, node, now) {
                    // The table holds this grant, its lease run out (only
                    // its lock-delay left), and the record sent is no
                    // later: a member the rebuild missed may keep a later
                    // renewal of it (a late read brings it). Not "not
                    // held" while the hold lasts.
                    Err(LockError::NotHeld)
                        if self.table.new_grants_held_until(now).is_some()
                            && !self.table.is_forgotten(id, now) =>
                    {
                        return Err(Refusal::MayBeOnRecordElsewhere);
                    }
                    other => other,
                }
            }
            Err(LockError::NotHeld)
                if self.table.new_grants_held_until(now).is_some()
                    && !self.table.is_forgotten(id, now) =>
            {
                // The last rebuild missed as many members as there are
                // copies: one of them may have this lock on record, and a
                // renewal through it reclaims it. Not "not held" yet,
                // unless it was released or settled as lost.
                return Err(match self.config.sabotage.not_held_in_hold {
                    true => Refusal::NotHeld,
                    false => Refusal::MayBeOnRecordElsewhere,
                });
            }
            other => other,
        }
        .map_err(lock_error)?;
        let renewed = match data {
            Some(data) => self
                .table
                .set_data(name, id, &data, now)
                .map_err(lock_error)?,
            None => renewed,
        };
        if let Some((from, until)) = before.filter(|(from, _)| *from != node) {
            self.note_other_record(id, from, until, now);
        }
        if node == self.config.id {
            self.held.record(renewed.clone());
        } else {
            self.held.remove(id);
        }
        Ok((renewed, self.made()))
    }

    /// The lock `name`, as the speaker has it.
    pub fn get(&self, name: &str, guard: &Guard, now: MonoTime) -> Result<Option<Lock>, Refusal> {
        self.speaker(guard, now)?;
        self.table.get(name, now).map_err(|_| Refusal::NotRebuilt)
    }

    /// Every holder of `name` as the speaker has them, oldest first.
    pub fn holders(&self, name: &str, guard: &Guard, now: MonoTime) -> Result<Vec<Lock>, Refusal> {
        self.speaker(guard, now)?;
        self.table
            .holders(name, now)
            .map_err(|_| Refusal::NotRebuilt)
    }

    /// The lock `name`, as the speaker has it (if held), with the requests
    /// waiting for it: a name no one holds may have some (a set waiting
    /// for its other names).
    pub fn get_waiting(
        &self,
        name: &str,
        guard: &Guard,
        now: MonoTime,
    ) -> Result<(Option<Lock>, locktable::Waiting), Refusal> {
        let lock = self.get(name, guard, now)?;
        Ok((lock, self.table.waiting_for(name, now)))
    }

    /// The locks under `prefix`, at most `limit`, as the speaker has them,
    /// with how many there are and how many requests wait for each.
    pub fn list(
        &self,
        prefix: &str,
        limit: usize,
        guard: &Guard,
        now: MonoTime,
    ) -> Result<locktable::Listing, Refusal> {
        self.speaker(guard, now)?;
        self.table
            .listing(prefix, limit, now)
            .map_err(|_| Refusal::NotRebuilt)
    }

    /// Ends the leases and waits due by `now` if this member may speak,
    /// turns waiters away if it may not, and ends `Held` records and copies
    /// whose leases ended. Answers for waiting requests are then in
    /// [`Member::take_answers`].
    pub fn poll(&mut self, guard: &Guard, now: MonoTime) -> Polled {
        let mut speaking = false;
        let mut changed = false;
        if self.table.is_rebuilt() {
            if self.may_speak(guard, now) {
                speaking = true;
                let before = self.table_size();
                self.table.poll(now);
                changed = self.table_size() != before;
                if changed && !self.claimed.is_empty() {
                    let table = &self.table;
                    self.claimed
                        .retain(|_, session| table.session_name_of(*session).is_some());
                }
            } else if self.table.waiting() > 0 {
                // Deposed, or its lease lapsed: grant nothing, and tell the
                // waiters to retry.
                self.table.turn_away_waiters();
            }
        }
        self.held.expire(now);
        self.copies.expire(now);
        // A table that cannot grant has no deadline to keep (its due
        // entries would wake the driver at once, again and again).
        Polled {
            next: if speaking {
                self.table.next_deadline()
            } else {
                None
            },
            changed,
        }
    }

    /// Drops the table (this member stopped speaking, or starts again):
    /// waiting requests are answered `not_rebuilt`. What a renewal moved is
    /// kept while the term stays the same (a rebuild retried in it brings
    /// the same locks back).
    pub fn drop_table(&mut self, speaking: Option<u64>, now: MonoTime) {
        if self.table.is_rebuilt() {
            // Its grants run on after it stops speaking.
            self.note_own_copies(self.config.copies, now);
        }
        self.table.drop_table(now);
        if self.speaking != speaking {
            self.moved.clear();
            self.claimed.clear();
            self.moved_prune_at = MOVED_PRUNE_AT;
        }
        self.speaking = speaking;
    }

    /// Stops speaking for good: the table is dropped and no rebuild
    /// succeeds again, and no new record (a copy, a forwarded grant or
    /// renewal) is taken: it would leave with this member, and cost the
    /// cluster a record that a member staying would have kept. The first
    /// step of a shutdown or a removal.
    pub fn stop_speaking(&mut self, now: MonoTime) {
        self.stopping = true;
        self.drop_table(None, now);
    }

    /// A speaker of `term` read this member's report: if this member still
    /// speaks for an older term, it has been deposed (the reader's blank
    /// entry is committed) and must grant nothing more, even before Raft
    /// tells it so. Its table is dropped; its grants stay in `Granted`.
    /// Answers whether `term` is newer than any that read it before.
    pub fn deposed_by(&mut self, term: u64, now: MonoTime) -> bool {
        if self.config.sabotage.no_term_fence {
            return false;
        }
        let newer = term > self.read_by;
        self.read_by = self.read_by.max(term);
        if let Some(own) = self.speaking.filter(|own| *own < term) {
            tracing::info!(own, term, "a newer speaker read this node: table dropped");
            self.drop_table(Some(own), now);
        }
        newer
    }

    /// Notes that node `from` keeps a record of lock `id` until `until`
    /// besides the lock's node: a renewal moved the lock away from it, or
    /// it took a copy. Entries whose records have all ended are pruned when
    /// the map has doubled since it was last pruned, so locks that end
    /// without a release do not pile up.
    pub(super) fn note_other_record(
        &mut self,
        id: LockId,
        from: NodeId,
        until: MonoTime,
        now: MonoTime,
    ) {
        if self.moved.len() >= self.moved_prune_at {
            self.moved.retain(|_, m| m.until > now);
            self.moved_prune_at = (2 * self.moved.len()).max(MOVED_PRUNE_AT);
        }
        let from = self.member(from);
        let entry = self.moved.entry(id).or_insert(Moved { from, until });
        entry.from = entry.from.with(from);
        entry.until = entry.until.max(until);
    }
}

/// A refusal of the table's to renew or release, as the protocol answers it.
pub(super) fn lock_error(e: LockError) -> Refusal {
    match e {
        LockError::NotHeld => Refusal::NotHeld,
        LockError::InSession => Refusal::InSession,
        LockError::NotRebuilt(_) => Refusal::NotRebuilt,
    }
}
