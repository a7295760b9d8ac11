//! A member's state above the lock table: the table it speaks from, its
//! clients' locks (`Held`), copies of other members' grants, and who else
//! may keep a record of each lock; with the speaker's operations and a
//! follower's.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use leasehold_api::RebuildReport;
use locktable::{
    AcquireError, Acquired, Answer, Held, HeldLock, LeaseRule, Lock, LockError, LockId,
    LockInTransit, MonoTime, NodeId, Request, Table, WaiterId,
};

use crate::config::MemberConfig;
use crate::copies::{CopyRound, COPY_TIMEOUT};
use crate::floor::{CopiesFloor, FLOOR_MARGIN};
use crate::guard::Guard;
use crate::members::Members;
use crate::refusal::Refusal;

/// The nodes a lock moved from (or was copied to), whose records of it
/// end by `until`.
#[derive(Debug, Clone, Copy)]
struct Moved {
    from: Members,
    until: MonoTime,
}

/// The fewer of two counts, either of which may be unknown.
fn fewer(a: Option<usize>, b: Option<usize>) -> Option<usize> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// The size at which `Member::moved` is first pruned.
const MOVED_PRUNE_AT: usize = 4096;

/// The table a grant or renewal was made by: its term and generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Made {
    /// The term the table speaks for (`None` while it speaks for none).
    pub term: Option<u64>,
    /// The table's generation.
    pub generation: u64,
}

/// A renewal as the speaker receives it.
#[derive(Debug, Clone)]
pub struct Renewal<'a> {
    /// The lock's name.
    pub name: &'a str,
    /// The lock's id.
    pub id: LockId,
    /// The lease asked for.
    pub lease: Option<Duration>,
    /// The node whose client renews: it keeps the record from now on.
    pub node: NodeId,
    /// That node's record of the lock, if it has one.
    pub record: Option<Lock>,
    /// New data for the lock, if the renewal changes it.
    pub data: Option<String>,
}

/// A call this member forwarded to the speaker, as it left: when, and the
/// highest term that had read this member then (read from
/// [`Member::read_by`], or a mirror of it, before the call is sent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Forwarded {
    /// When the call was sent.
    pub sent: MonoTime,
    /// The highest term whose speaker had read this member when it was.
    pub read_before: u64,
}

/// What [`Member::poll`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Polled {
    /// When the table next has something to end (only while it may grant).
    pub next: Option<MonoTime>,
    /// Whether the table's locks or waits changed.
    pub changed: bool,
}

/// One member's protocol state.
pub struct Member {
    config: MemberConfig,
    pub(crate) table: Table,
    held: Held,
    /// Copies of locks held through other nodes, sent by a speaker so
    /// that a grant outlives one crash.
    copies: Held,
    /// The term whose speaker this table is (or is being rebuilt for).
    pub(crate) speaking: Option<u64>,
    /// Locks granted this term that other members than the lock's node
    /// may keep a record of: the nodes a renewal moved them from, and the
    /// members sent a copy.
    moved: HashMap<LockId, Moved>,
    /// `moved` is pruned of ended records when it grows to this size.
    moved_prune_at: usize,
    pub(crate) last_rebuild: Option<RebuildReport>,
    /// Set when the member starts to shut down: it speaks no more,
    /// whatever Raft still says.
    stopping: bool,
    /// The highest term whose speaker has read this member's report.
    read_by: u64,
    /// Members that failed a copy and have not acknowledged one since.
    suspects: BTreeSet<NodeId>,
    /// The lower copies this member made before its count last rose, while
    /// a grant made with them may run.
    own_floor: CopiesFloor,
    /// The copies other members said they make (their own floor), while a
    /// grant they made with them may run.
    heard_floor: CopiesFloor,
    /// The leader lease each other member last said it runs with.
    leader_leases: BTreeMap<NodeId, Duration>,
}

/// What another member says it runs with (stamped on its messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerTerms {
    /// The fewest copies a grant of its may still have (`None`: it has
    /// made none that may run).
    pub copies: Option<usize>,
    /// Its longest lease.
    pub max_lease: Duration,
    /// Its leader lease: how long after a heartbeat it took it refuses to
    /// vote for another (`None`: not said, as on a request, which may have
    /// waited since its member restarted with other timings).
    pub leader_lease: Option<Duration>,
}

impl Member {
    /// A member with an empty table that speaks for no term.
    pub fn new(config: MemberConfig) -> Self {
        let config = config.sorted();
        Member {
            table: Table::new(config.lease),
            config,
            held: Held::new(),
            copies: Held::new(),
            speaking: None,
            moved: HashMap::new(),
            moved_prune_at: MOVED_PRUNE_AT,
            last_rebuild: None,
            stopping: false,
            read_by: 0,
            suspects: BTreeSet::new(),
            own_floor: CopiesFloor::default(),
            heard_floor: CopiesFloor::default(),
            leader_leases: BTreeMap::new(),
        }
    }

    /// Whether `id` was released (or lost) lately: a grant must not reuse
    /// it, or a rebuild would leave it out.
    pub fn is_forgotten(&self, id: LockId, now: MonoTime) -> bool {
        self.table.is_forgotten(id, now)
    }

    /// The settings.
    pub fn config(&self) -> &MemberConfig {
        &self.config
    }

    /// This member's id.
    pub fn id(&self) -> NodeId {
        self.config.id
    }

    /// The members are now `members` (a membership change, `now`), copies
    /// go to `copy_to` (the voters of the committed configuration), and
    /// every grant is kept by `copies` of them: copies and releases go to
    /// them from now on. A rise of `copies` while this member may grant
    /// leaves the grants it made with fewer running for up to a lease: the
    /// fewer count is kept that long ([`Member::copies_floor`]).
    pub fn set_members(
        &mut self,
        members: Vec<NodeId>,
        copy_to: Vec<NodeId>,
        copies: usize,
        now: MonoTime,
    ) {
        let before = self.config.copies;
        if copies > before && self.table.is_rebuilt() {
            self.note_own_copies(before, now);
        }
        // A member gone no longer bounds the guard or the hold.
        self.leader_leases.retain(|id, _| members.contains(id));
        self.config.members = members;
        self.config.copy_to = copy_to;
        self.config.copies = copies;
        self.config = self.config.clone().sorted();
    }

    /// Grants made at `now` with `copies` may run a longest lease, and
    /// their speaker may grant until its guard runs out.
    fn note_own_copies(&mut self, copies: usize, now: MonoTime) {
        if self.config.sabotage.copies_of_now {
            return;
        }
        let until = now + self.config.lease.max + self.longest_leader_lease() + FLOOR_MARGIN;
        self.own_floor.note(copies, until);
    }

    /// The fewest copies a grant this member made may still have at `now`:
    /// what it makes now while its table may grant, or fewer while a grant
    /// made before the count rose may run; `None` when no grant of its may
    /// run (it has not spoken for a lease). What this member tells the
    /// others it makes: a member that does not speak says nothing, so the
    /// passing counts of a node that is joining or forming do not count.
    pub fn copies_floor(&mut self, now: MonoTime) -> Option<usize> {
        let own = self.own_floor.lowest(now);
        let speaking = self.table.is_rebuilt().then_some(self.config.copies);
        fewer(own, speaking)
    }

    /// Member `from` said at `now` what it runs with: its grants may have
    /// as few as `terms.copies` copies, counted for its longest lease and a
    /// leader lease (it may grant until its guard runs out); and it refuses
    /// votes for `terms.leader_lease` after a heartbeat.
    pub fn heard(&mut self, from: NodeId, terms: PeerTerms, now: MonoTime) {
        // No member may run leases longer than a day: a stamp that says so
        // is cut, so it cannot pin a count for longer.
        let longest = LeaseRule::LONGEST;
        let terms = PeerTerms {
            max_lease: terms.max_lease.min(longest),
            leader_lease: terms.leader_lease.map(|l| l.min(longest)),
            ..terms
        };
        let member = from != self.config.id && self.config.members.binary_search(&from).is_ok();
        if let Some(lease) = terms.leader_lease.filter(|_| member) {
            self.leader_leases.insert(from, lease);
        }
        let Some(copies) = terms.copies else {
            return;
        };
        if self.config.sabotage.copies_of_now {
            return;
        }
        let lease = terms.max_lease.max(self.config.lease.max);
        let until = now + lease + self.longest_leader_lease() + FLOOR_MARGIN;
        self.heard_floor.note(copies, until);
    }

    /// The leader lease the grant guard counts on: the shortest of this
    /// member's and every member's it heard from. A member that took a
    /// heartbeat refuses to vote for its own lease after it, so the
    /// speaker may grant only until the shortest of them has run.
    pub fn guard_lease(&self) -> Duration {
        let own = self.config.leader_lease;
        if self.config.sabotage.own_timings {
            return own;
        }
        self.leader_leases
            .values()
            .copied()
            .fold(own, Duration::min)
    }

    /// The longest leader lease of this member and every member it heard
    /// from: an old speaker may have granted that long after a quorum
    /// last acknowledged it (the strict hold covers it).
    pub fn longest_leader_lease(&self) -> Duration {
        let own = self.config.leader_lease;
        if self.config.sabotage.own_timings {
            return own;
        }
        self.leader_leases
            .values()
            .copied()
            .fold(own, Duration::max)
    }

    /// The fewest copies a grant still running may have, as far as this
    /// member knows at `now`: its own [`copies_floor`](Member::copies_floor)
    /// and what other members said of theirs (`None`: nothing known). What
    /// its report tells a rebuilding speaker; its own rebuild counts on it
    /// and on the copies it makes now.
    pub fn fewest_copies(&mut self, now: MonoTime) -> Option<usize> {
        let own = self.copies_floor(now);
        fewer(own, self.heard_floor.lowest(now))
    }

    /// What a rebuild by this member counts on at `now`: the fewest copies
    /// a running grant may have, and never more than it makes now.
    pub fn counted_copies(&mut self, now: MonoTime) -> usize {
        let ours = self.config.copies;
        self.fewest_copies(now).map_or(ours, |f| f.min(ours))
    }

    /// The members a release of a lock held through `node` goes to.
    pub fn member(&self, node: NodeId) -> Members {
        match self.config.members.binary_search(&node) {
            Ok(_) => Members::only(node),
            Err(_) => Members::ALL,
        }
    }

    /// The members of `to` other than this one, in id order: where a
    /// release this member passes on goes.
    pub fn others_in(&self, to: Members) -> impl Iterator<Item = NodeId> + '_ {
        let me = self.config.id;
        self.config
            .members
            .iter()
            .copied()
            .filter(move |id| to.contains(*id) && *id != me)
    }

    /// Whether the table is rebuilt (it may still be barred from granting
    /// by the guard).
    pub fn is_rebuilt(&self) -> bool {
        self.table.is_rebuilt()
    }

    /// The table's generation: it moves on at every drop.
    pub fn generation(&self) -> u64 {
        self.table.generation()
    }

    /// The term whose speaker this table is, or is being rebuilt for.
    pub fn speaking(&self) -> Option<u64> {
        self.speaking
    }

    /// When the table next has a lease or wait to end.
    pub fn next_deadline(&self) -> Option<MonoTime> {
        self.table.next_deadline()
    }

    /// Locks and waiting requests in the table.
    pub fn table_size(&self) -> (usize, usize) {
        (self.table.len(), self.table.waiting())
    }

    /// How many leases the table has ended as they ran out, so far.
    pub fn expired(&self) -> u64 {
        self.table.expired()
    }

    /// What the last rebuild did.
    pub fn last_rebuild(&self) -> Option<&RebuildReport> {
        self.last_rebuild.as_ref()
    }

    /// The highest term whose speaker has read this member's report.
    pub fn read_by(&self) -> u64 {
        self.read_by
    }

    /// Whether the member is shutting down.
    pub fn is_stopping(&self) -> bool {
        self.stopping
    }

    /// The table as it is now.
    pub fn made(&self) -> Made {
        Made {
            term: self.speaking,
            generation: self.table.generation(),
        }
    }

    /// Whether this member leads the term its table speaks for and its
    /// guard lets it grant at `now`, rebuilt or not.
    pub fn may_speak(&self, guard: &Guard, now: MonoTime) -> bool {
        !self.stopping
            && self.speaking.is_some_and(|term| {
                guard.allows(term, self.guard_lease(), now)
                    || (self.config.sabotage.no_grant_guard && guard.leader_term() == Some(term))
            })
    }

    /// `Ok` if this member may grant from its table at `now`.
    fn speaker(&self, guard: &Guard, now: MonoTime) -> Result<(), Refusal> {
        if self.table.is_rebuilt() && self.may_speak(guard, now) {
            Ok(())
        } else {
            Err(Refusal::NotRebuilt)
        }
    }

    /// Whether the table that made a grant still speaks, rebuilt and
    /// within its guard: same term, same generation (a table dropped and
    /// rebuilt again may have settled the grant as lost).
    pub fn still_speaks_for(&self, made: Made, guard: &Guard, now: MonoTime) -> bool {
        made == self.made() && self.speaker(guard, now).is_ok()
    }

    // ---- the speaker ----

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
        let acquired = self.table.acquire(request, now).map_err(|e| match e {
            AcquireError::Held(lock) => Refusal::Held(lock),
            AcquireError::NotRebuilt(_)
            | AcquireError::HeldBack { .. }
            | AcquireError::FencesExhausted => Refusal::NotRebuilt,
        })?;
        if let Acquired::Granted(lock) = &acquired {
            if node == self.config.id {
                self.held.record(lock.clone());
            }
        }
        Ok((acquired, self.made()))
    }

    /// Stops waiting for `waiter` (its client went away).
    pub fn cancel(&mut self, name: &str, waiter: WaiterId) {
        self.table.cancel(name, waiter);
    }

    /// The table's answers to waiting requests since the last call; a
    /// grant to this member's own client goes into its `Held`.
    pub fn take_answers(&mut self) -> Vec<Answer> {
        let answers = self.table.take_answers();
        for answer in &answers {
            if let Ok(lock) = &answer.result {
                if lock.node == self.config.id {
                    self.held.record(lock.clone());
                }
            }
        }
        answers
    }

    /// Releases a lock as the speaker; answers it and the members that may
    /// keep a record of it, to be told to forget it.
    pub fn release(
        &mut self,
        name: &str,
        id: LockId,
        guard: &Guard,
        now: MonoTime,
    ) -> Result<(Lock, Members), Refusal> {
        self.speaker(guard, now)?;
        let lock = self.table.release(name, id, now).map_err(lock_error)?;
        self.held.remove(id);
        self.copies.remove(id);
        let to = self.forget_to(&lock, now);
        Ok((lock, to))
    }

    /// Takes back, as the speaker, a grant a follower's caller never heard
    /// of (the caller went away): released as [`Member::release`] does,
    /// unless it was renewed since it was granted, which only a client
    /// holding it does (a retry of the same request, answered with this
    /// grant): then it is that client's, and kept ([`Refusal::Claimed`]).
    pub fn take_back_unrenewed(
        &mut self,
        name: &str,
        id: LockId,
        guard: &Guard,
        now: MonoTime,
    ) -> Result<(Lock, Members), Refusal> {
        self.speaker(guard, now)?;
        let current = self.table.get(name, now).ok().flatten();
        if current.is_some_and(|lock| lock.id == id && lock.renewed_since_granted()) {
            return Err(Refusal::Claimed);
        }
        self.release(name, id, guard, now)
    }

    /// Releases a grant its client never heard of (it could not be put on
    /// record with enough members, or its caller went away); answers the
    /// members to tell. A table dropped meanwhile forgets it (it may be in
    /// `Granted`), and every member is told.
    pub fn take_back(&mut self, lock: &Lock, now: MonoTime) -> Members {
        self.held.remove(lock.id);
        self.copies.remove(lock.id);
        match self.table.release(&lock.name, lock.id, now) {
            Ok(_) => self.forget_to(lock, now),
            Err(_) => {
                self.table.forget(&lock.name, lock.id, lock.ttl(now), now);
                Members::ALL
            }
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
    fn forget_to(&mut self, lock: &Lock, now: MonoTime) -> Members {
        let moved = if self.moved.is_empty() {
            None
        } else {
            self.moved.remove(&lock.id)
        };
        if Some(lock.fence.epoch()) != self.speaking {
            return Members::ALL;
        }
        let to = self.member(lock.node);
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
                self.table.renew(name, id, lease, node, now)
            }
            Err(LockError::NotHeld)
                if self.table.new_grants_held_until(now).is_some()
                    && !self.table.is_forgotten(id, now) =>
            {
                // The last rebuild missed as many members as there are
                // copies: one of them may have this lock on record, and a
                // renewal through it reclaims it. Not "not held" yet,
                // unless it was released or settled as lost.
                return Err(Refusal::MayBeOnRecordElsewhere);
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
    fn note_other_record(&mut self, id: LockId, from: NodeId, until: MonoTime, now: MonoTime) {
        if self.moved.len() >= self.moved_prune_at {
            self.moved.retain(|_, m| m.until > now);
            self.moved_prune_at = (2 * self.moved.len()).max(MOVED_PRUNE_AT);
        }
        let from = self.member(from);
        let entry = self.moved.entry(id).or_insert(Moved { from, until });
        entry.from = entry.from.with(from);
        entry.until = entry.until.max(until);
    }

    // ---- copies, as the speaker ----

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

    // ---- a member's records ----

    /// Records in this member's `Held` a lock its client was granted (or
    /// renewed) through the speaker, unless a newer speaker read this
    /// member since `read_before` (the term that had read it when the call
    /// left): that rebuild did not see this record, so its client must not
    /// hear of the grant (a newer speaker may grant the name again).
    fn record_held(&mut self, lock: Lock, read_before: u64) -> Result<(), Refusal> {
        if self.stopping {
            return Err(Refusal::Stopping);
        }
        if self.read_by > read_before {
            return Err(Refusal::ReadMeanwhile { read: self.read_by });
        }
        self.copies.remove(lock.id);
        self.held.record(lock);
        Ok(())
    }

    /// A grant the speaker answered to a call this member forwarded: its
    /// lease counted from the call's send plus the time the speaker says
    /// it held the request (`served`, a wait; the speaker received it no
    /// earlier than it was sent), never from the answer's arrival at
    /// `_arrived`. Recorded in `Held` unless a newer speaker read this
    /// member meanwhile; a grant's fence names the term that made it, and a
    /// read by that term (the speaker's own rebuild) came before the grant.
    pub fn granted_through_speaker(
        &mut self,
        call: Forwarded,
        lock: LockInTransit,
        served: Duration,
        _arrived: MonoTime,
    ) -> Result<Lock, Refusal> {
        let lock = lock.arrive(call.sent + served);
        let read_before = call.read_before.max(lock.fence.epoch());
        self.record_held(lock.clone(), read_before)?;
        Ok(lock)
    }

    /// A renewal the speaker answered to a call this member forwarded: its
    /// lease counted from the call's send, never from the answer's arrival
    /// at `_arrived` (the speaker renewed it no earlier than it was sent).
    /// Recorded in `Held` unless a newer speaker read this member meanwhile.
    ///
    /// A renewal answered after the lock's release through this member
    /// (the two crossed) is not recorded: the record would outlive the
    /// release and bring the lock back at the next rebuild.
    pub fn renewed_through_speaker(
        &mut self,
        call: Forwarded,
        lock: LockInTransit,
        arrived: MonoTime,
    ) -> Result<Lock, Refusal> {
        if self.table.is_forgotten(lock.id, arrived) {
            return Err(Refusal::NotHeld);
        }
        let lock = lock.arrive(call.sent);
        self.record_held(lock.clone(), call.read_before)?;
        Ok(lock)
    }

    /// The speaker released a lock this member forwarded the release of:
    /// its record goes, and a renewal of it answered later is not
    /// recorded ([`Member::renewed_through_speaker`]).
    pub fn released_through_speaker(&mut self, lock: &Lock, now: MonoTime) {
        self.forget(&lock.name, lock.id, lock.lease, now);
    }

    /// The speaker refused a renewal this member forwarded: a lock "not
    /// held" there is held nowhere, and this member's record of it goes.
    pub fn renewal_refused(&mut self, id: LockId, refusal: &Refusal) {
        if *refusal == Refusal::NotHeld {
            self.drop_held(id);
        }
    }

    /// This member's record of `id`: its client's, or a copy.
    pub fn held_record(&self, id: LockId) -> Option<Lock> {
        // A member may keep both (a `Held` from before the lock moved away,
        // a copy of a later renewal): the one whose lease ends last, with
        // the newer data of the two.
        match (self.held.get(id), self.copies.get(id)) {
            (Some(held), Some(copy)) => {
                let (mut record, other) = match copy.expires > held.expires {
                    true => (copy, held),
                    false => (held, copy),
                };
                if locktable::newer_data(
                    (other.data_rev, other.expires),
                    (record.data_rev, record.expires),
                ) {
                    record.data = other.data;
                    record.data_rev = other.data_rev;
                }
                Some(record)
            }
            (held, copy) => held.or(copy),
        }
    }

    /// Drops this member's record of `id`.
    pub fn drop_held(&mut self, id: LockId) {
        self.held.remove(id);
        self.copies.remove(id);
    }

    /// A release heard of from the speaker, with the time the released
    /// lease had left when it was sent: the lock is gone everywhere.
    pub fn forget(&mut self, name: &str, id: LockId, left: Duration, now: MonoTime) {
        self.held.remove(id);
        self.copies.remove(id);
        self.table.forget(name, id, left, now);
    }

    /// Locks a rebuild found another grant held longer: their clients lost
    /// them. Answers the ones this member's clients held.
    pub fn lost(&mut self, ids: impl IntoIterator<Item = LockId>) -> Vec<Lock> {
        ids.into_iter()
            .filter_map(|id| {
                self.copies.remove(id);
                self.held.remove(id)
            })
            .collect()
    }

    /// Keeps copies sent by the speaker of `term` (leases counted from
    /// their arrival), unless this member has seen a newer term (`seen`,
    /// Raft's) or been read by one: a copy is either in the report a newer
    /// speaker reads, or refused. A copy that arrives after its release was
    /// heard of stays released. A member that is stopping takes none (the
    /// speaker copies to another).
    pub fn take_copies(
        &mut self,
        term: u64,
        locks: Vec<Lock>,
        seen: u64,
        now: MonoTime,
    ) -> Result<(), Refusal> {
        if self.stopping {
            return Err(Refusal::Stopping);
        }
        let seen = seen.max(self.read_by);
        if term < seen {
            return Err(Refusal::StaleCopies { term, seen });
        }
        for lock in locks {
            if !self.table.is_forgotten(lock.id, now) {
                self.copies.record(lock);
            }
        }
        Ok(())
    }

    /// This member's report, as a rebuilding speaker reads it: its clients'
    /// locks and copies live at `now`, and what it granted.
    pub fn report(&self, now: MonoTime) -> (impl Iterator<Item = HeldLock<'_>>, Vec<Lock>) {
        let held = self.held.iter_live(now).chain(self.copies.iter_live(now));
        (held, self.table.granted(now))
    }

    /// [`Member::report`] as locks, for a speaker reading itself.
    pub fn own_report(&self, now: MonoTime) -> Vec<Lock> {
        let mut locks = self.held.live(now);
        locks.extend(self.copies.live(now));
        locks.extend(self.table.granted(now));
        locks
    }
}

fn lock_error(e: LockError) -> Refusal {
    match e {
        LockError::NotHeld => Refusal::NotHeld,
        LockError::NotRebuilt(_) => Refusal::NotRebuilt,
    }
}
