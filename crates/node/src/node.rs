//! The node: its lock table and held record, and the speaker's operations.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use leasehold_api::{ErrorCode, LockView, RebuildReport};
use leasehold_raft::{leader_state, Identity, Raft, WatchReceiver};
use locktable::{
    AcquireError, Acquired, Held, Lock, LockError, LockId, MonoTime, NodeId, Request, Table,
    WaiterId,
};
use tokio::sync::{oneshot, watch, Notify};

use crate::batch::{Pending, Queue};
use crate::clock::{Clock, SuspendWatch};
use crate::config::NodeConfig;
use crate::copies::Copier;
use crate::error::ApiError;
use crate::forgets::{Members, Outbox};
use crate::peers::Peers;

/// How much of the leader lease the speaker leaves unused: it stops granting
/// this long before a new leader could exist.
const LEASE_MARGIN: Duration = Duration::from_millis(75);

/// What a node keeps behind its one lock.
pub(crate) struct State {
    pub(crate) table: Table,
    pub(crate) held: Held,
    /// Copies of locks held through other nodes, sent by a speaker so
    /// that a grant outlives one crash (see `copies`).
    pub(crate) copies: Held,
    waiters: HashMap<WaiterId, oneshot::Sender<Result<Lock, AcquireError>>>,
    /// The term whose speaker this table is (or is being rebuilt for).
    pub(crate) speaking: Option<u64>,
    /// Locks granted this term that other members than the lock's node
    /// may keep a record of: the nodes a renewal moved them from, and the
    /// members sent a copy (see `copies`).
    moved: HashMap<LockId, Moved>,
    /// `moved` is pruned of ended records when it grows to this size.
    moved_prune_at: usize,
    pub(crate) last_rebuild: Option<RebuildReport>,
    /// Set when the node starts to shut down: it speaks no more, whatever
    /// Raft's metrics still say.
    stopping: bool,
}

/// The nodes a lock moved from, whose records of it end by `until`.
#[derive(Debug, Clone, Copy)]
struct Moved {
    from: Members,
    until: MonoTime,
}

/// The size at which `State::moved` is first pruned.
const MOVED_PRUNE_AT: usize = 4096;

/// A running node's shared parts.
pub struct Node {
    pub(crate) config: NodeConfig,
    pub(crate) raft: Raft,
    pub(crate) clock: Clock,
    /// Notices suspends, which Raft's acknowledgement times cannot show.
    suspends: SuspendWatch,
    pub(crate) peers: Peers,
    /// This node's data directory's identity and what it knows of the others'.
    pub(crate) identity: Arc<Identity>,
    /// Whether this process is the node's first (a new data directory).
    pub(crate) first_start: bool,
    state: Mutex<State>,
    /// Rung when the table changes, so the expiry task re-arms its timer.
    pub(crate) table_changed: Notify,
    /// Counts changes of the table's locks, for gets that watch a lock.
    changes: watch::Sender<u64>,
    /// When the expiry task next wakes (table clock, ns); 0 while it works.
    pub(crate) expiry_armed: AtomicU64,
    /// The highest term whose speaker has read this node's report.
    read_by: watch::Sender<u64>,
    /// Releases to pass on to the members that may keep a record of them.
    pub(crate) forgets: Outbox,
    /// Calls to forward to the speaker in the next batch.
    pub(crate) batches: Queue<Pending>,
    /// Copies on their way to the other members.
    pub(crate) copier: Copier,
}

/// A lock request as the node receives it, validated.
#[derive(Debug, Clone)]
pub struct AcquireRequest {
    /// The name.
    pub name: String,
    /// Who asks.
    pub holder: String,
    /// The lease asked for.
    pub lease: Option<Duration>,
    /// How long to wait.
    pub wait: Duration,
    /// Data to keep with the lock.
    pub data: Option<String>,
}

impl Node {
    pub(crate) fn new(
        config: NodeConfig,
        raft: Raft,
        peers: Peers,
        identity: Arc<Identity>,
        first_start: bool,
    ) -> Arc<Self> {
        Arc::new(Node {
            state: Mutex::new(State {
                table: Table::new(config.lease),
                held: Held::new(),
                copies: Held::new(),
                waiters: HashMap::new(),
                speaking: None,
                moved: HashMap::new(),
                moved_prune_at: MOVED_PRUNE_AT,
                last_rebuild: None,
                stopping: false,
            }),
            forgets: Outbox::new(&config.peers, config.id),
            copier: Copier::new(&config.peers, config.id),
            config,
            raft,
            clock: Clock::new(),
            suspends: SuspendWatch::new(),
            peers,
            identity,
            first_start,
            table_changed: Notify::new(),
            changes: watch::Sender::new(0),
            expiry_armed: AtomicU64::new(0),
            read_by: watch::Sender::new(0),
            batches: Queue::new(),
        })
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.config.id
    }

    /// The Raft handle.
    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; carry on.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A lock as this node shows it to a client.
    pub(crate) fn view(&self, lock: &Lock) -> LockView {
        let step = self.peers.faults().wall_step_ms();
        let wall = Clock::wall_ms().saturating_add_signed(step);
        LockView::from_lock(lock, self.clock.now(), wall)
    }

    /// Whether this node is the leader of `term` and a quorum acknowledged
    /// it recently enough that no other leader can exist yet.
    fn may_speak(&self, state: &State) -> bool {
        if state.stopping {
            return false;
        }
        let Some(leader) = leader_state(&self.raft) else {
            return false;
        };
        if state.speaking != Some(leader.term()) {
            return false;
        }
        // An acknowledgement from before a suspend says nothing about now:
        // the monotonic clock it is stamped on stood still meanwhile.
        if let Some(resumed) = self.suspends.last_resume() {
            if leader.quorum_acked_at.is_none_or(|acked| acked <= resumed) {
                return false;
            }
        }
        leader
            .lease_deadline(self.config.timings.leader_lease(), LEASE_MARGIN)
            .is_some_and(|deadline| Instant::now() < deadline)
    }

    /// Whether this node may grant now (its guard passes), rebuilt or not.
    pub(crate) fn may_speak_now(&self) -> bool {
        let state = self.state();
        self.may_speak(&state)
    }

    /// The state, if this node may grant from its table now.
    fn speaker(&self) -> Result<MutexGuard<'_, State>, ApiError> {
        let state = self.state();
        if !state.table.is_rebuilt() || !self.may_speak(&state) {
            return Err(ApiError::not_rebuilt());
        }
        Ok(state)
    }

    /// Says the table changed: the expiry task re-arms, watchers look again.
    ///
    /// The expiry task is woken only when the table's next deadline is now
    /// earlier than the one it sleeps until: a grant on the hot path with a
    /// lease longer than that wakes nobody.
    pub(crate) fn changed(&self, state: &State) {
        if self.changes.receiver_count() > 0 {
            self.changes.send_modify(|v| *v = v.wrapping_add(1));
        }
        let next = state
            .table
            .next_deadline()
            .map_or(u64::MAX, MonoTime::as_nanos);
        if next < self.expiry_armed.load(Ordering::Acquire) {
            self.table_changed.notify_one();
        }
    }

    /// A receiver that wakes when the table's locks change.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Hands the table's answers to the requests waiting for them. It does
    /// not ring `table_changed`: the expiry task calls it, and ringing
    /// itself would keep it from ever yielding.
    fn dispatch(&self, state: &mut State) {
        for answer in state.table.take_answers() {
            if let Ok(lock) = &answer.result {
                if lock.node == self.config.id {
                    state.held.record(lock.clone());
                }
            }
            if let Some(tx) = state.waiters.remove(&answer.waiter) {
                let _ = tx.send(answer.result);
            }
        }
    }

    /// Ends the leases and waits due by now, if this node may speak.
    pub(crate) fn poll(&self) -> Option<locktable::MonoTime> {
        let mut state = self.state();
        let mut speaking = false;
        if state.table.is_rebuilt() {
            if self.may_speak(&state) {
                speaking = true;
                let before = (state.table.len(), state.table.waiting());
                state.table.poll(self.clock.now());
                if (state.table.len(), state.table.waiting()) != before {
                    // Not `changed()`: the expiry task must not wake itself.
                    self.changes.send_modify(|v| *v = v.wrapping_add(1));
                }
            } else if state.table.waiting() > 0 {
                // Deposed, or its lease lapsed: grant nothing, and tell the
                // waiters to retry.
                state.table.turn_away_waiters();
            }
            self.dispatch(&mut state);
        }
        let now = self.clock.now();
        state.held.expire(now);
        state.copies.expire(now);
        // A table that cannot grant has no deadline to keep (its due
        // entries would wake the task at once, again and again).
        if speaking {
            state.table.next_deadline()
        } else {
            None
        }
    }

    /// Drops the table (this node stopped speaking, or starts again):
    /// waiting requests are answered `not_rebuilt`.
    pub(crate) fn drop_table(&self, speaking: Option<u64>) -> u64 {
        let mut state = self.state();
        self.drop_locked(&mut state, speaking);
        state.table.generation()
    }

    /// [`Node::drop_table`] under the state's lock. What a renewal moved is
    /// kept while the term stays the same (a rebuild retried in it brings
    /// the same locks back).
    fn drop_locked(&self, state: &mut State, speaking: Option<u64>) {
        state.table.drop_table(self.clock.now());
        if state.speaking != speaking {
            state.moved.clear();
            state.moved_prune_at = MOVED_PRUNE_AT;
        }
        state.speaking = speaking;
        self.dispatch(state);
        self.changed(state);
    }

    /// Whether the table is rebuilt (it may still be barred from granting
    /// by the guard).
    pub(crate) fn is_rebuilt(&self) -> bool {
        self.state().table.is_rebuilt()
    }

    /// The table's generation: it moves on at every drop.
    pub(crate) fn generation(&self) -> u64 {
        self.state().table.generation()
    }

    /// Whether the node is shutting down.
    pub(crate) fn is_stopping(&self) -> bool {
        self.state().stopping
    }

    /// Stops speaking for good: the table is dropped and no rebuild starts
    /// again. The first step of a shutdown, before leadership is handed on.
    pub(crate) fn stop_speaking(&self) {
        self.state().stopping = true;
        self.drop_table(None);
    }

    /// A speaker of `term` read this node's report: if this node still
    /// speaks for an older term, it has been deposed (the reader's blank
    /// entry is committed) and must grant nothing more, even before Raft
    /// tells it so. Its table is dropped; its grants stay in `Granted`.
    pub(crate) fn deposed_by(&self, term: u64) {
        let mut state = self.state();
        self.read_by.send_if_modified(|highest| {
            let newer = term > *highest;
            *highest = (*highest).max(term);
            newer
        });
        if let Some(own) = state.speaking.filter(|own| *own < term) {
            tracing::info!(own, term, "a newer speaker read this node: table dropped");
            self.drop_locked(&mut state, Some(own));
        }
    }

    /// The highest term whose speaker has read this node's report.
    pub(crate) fn read_by_term(&self) -> u64 {
        *self.read_by.borrow()
    }

    /// Hands Raft leadership to another voter, if this node leads; the
    /// table must already be dropped (the transfer lets the target win at
    /// once). Answers the member it was handed to.
    pub(crate) async fn transfer_leadership(&self) -> Option<NodeId> {
        if !self.is_leader() {
            return None;
        }
        let next = self.transfer_target()?;
        match self.raft.trigger().transfer_leader(next).await {
            Ok(()) => Some(next),
            Err(e) => {
                tracing::warn!(%e, to = next, "leadership transfer failed");
                None
            }
        }
    }

    /// Waits until Raft names a leader other than this node; answers it,
    /// or `None` after `patience`.
    pub(crate) async fn wait_for_other_leader(&self, patience: Duration) -> Option<NodeId> {
        let mut metrics = self.raft.metrics();
        let other = |m: &leasehold_raft::RaftMetrics| {
            m.current_leader.filter(|leader| *leader != self.config.id)
        };
        tokio::time::timeout(patience, async {
            loop {
                if let Some(leader) = other(&metrics.borrow_watched()) {
                    return Some(leader);
                }
                if metrics.changed().await.is_err() {
                    return None;
                }
            }
        })
        .await
        .ok()
        .flatten()
    }

    /// Waits until a speaker of a term above `term` has read this node's
    /// report; answers whether one did within `patience`.
    pub(crate) async fn wait_read_above(&self, term: u64, patience: Duration) -> bool {
        let mut read_by = self.read_by.subscribe();
        tokio::time::timeout(patience, read_by.wait_for(|read| *read > term))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// The term this node leads, if it does (rebuilt or not).
    pub(crate) fn leading_term(&self) -> Option<u64> {
        leader_state(&self.raft).map(|l| l.term())
    }

    /// The voter most caught up with this leader's log, other than itself.
    fn transfer_target(&self) -> Option<NodeId> {
        let metrics = self.raft.metrics().borrow_watched().clone();
        let voters: Vec<NodeId> = metrics
            .membership_config
            .membership()
            .voter_ids()
            .filter(|id| *id != self.config.id)
            .collect();
        let progress = metrics.replication.unwrap_or_default();
        voters
            .into_iter()
            .max_by_key(|id| progress.get(id).cloned().flatten().map(|l| l.index()))
    }

    /// Grants a lock as the speaker, for a client of `node`.
    pub(crate) async fn speak_acquire(
        &self,
        request: AcquireRequest,
        node: NodeId,
    ) -> Result<Lock, ApiError> {
        let id = LockId::from_parts(Clock::wall_ms(), rand::random::<u128>());
        let wait = request.wait;
        let name = request.name.clone();
        let waiting = {
            let mut state = self.speaker()?;
            let outcome = state.table.acquire(
                Request {
                    name: request.name,
                    id,
                    node,
                    holder: request.holder,
                    lease: request.lease,
                    wait,
                    data: request.data,
                },
                self.clock.now(),
            );
            let made = Made::now(&state);
            match outcome {
                Ok(Acquired::Granted(lock)) => {
                    if node == self.config.id {
                        state.held.record(lock.clone());
                    }
                    self.changed(&state);
                    Err((lock, made))
                }
                Ok(Acquired::Waiting(waiter)) => {
                    let (tx, rx) = oneshot::channel();
                    state.waiters.insert(waiter, tx);
                    self.changed(&state);
                    Ok((rx, waiter, made))
                }
                Err(e) => return Err(self.acquire_error(e)),
            }
        };
        let (rx, waiter, made) = match waiting {
            Ok(waiting) => waiting,
            Err((granted, made)) => return self.copied_grant(granted, node, made).await,
        };
        // If the client goes away, stop waiting for it (and take back a
        // grant that came meanwhile).
        let mut cancel = CancelOnDrop {
            node: self,
            name: &name,
            waiter: Some(waiter),
            answer: Some(rx),
        };
        let answer = tokio::time::timeout(
            wait + Duration::from_secs(5),
            cancel.answer.as_mut().expect("just set"),
        )
        .await;
        let Ok(answer) = answer else {
            return Err(ApiError::not_rebuilt());
        };
        cancel.waiter = None;
        cancel.answer = None;
        match answer {
            Ok(Ok(lock)) => self.copied_grant(lock, node, made).await,
            Ok(Err(e)) => Err(self.acquire_error(e)),
            Err(_) => Err(ApiError::not_rebuilt()),
        }
    }

    /// `lock`, once it is on record with enough members; a grant that
    /// could not be, or whose caller went away meanwhile, is taken back
    /// (its client never hears of it).
    async fn copied_grant(&self, lock: Lock, node: NodeId, made: Made) -> Result<Lock, ApiError> {
        let mut take_back = TakeBackOnDrop {
            node: self,
            lock: Some(lock),
        };
        let lock = take_back.lock.as_ref().expect("just set");
        self.ensure_on_record(lock, node, made).await?;
        Ok(take_back.lock.take().expect("still set"))
    }

    /// Releases a grant its client never heard of, and tells the members
    /// that took a copy. A table dropped meanwhile forgets it (it may be in
    /// `Granted`), and every member is told.
    pub(crate) fn take_back(&self, lock: &Lock) {
        let to = {
            let mut state = self.state();
            state.held.remove(lock.id);
            state.copies.remove(lock.id);
            let now = self.clock.now();
            let to = match state.table.release(&lock.name, lock.id, now) {
                Ok(_) => self.forget_to(&mut state, lock, now),
                Err(_) => {
                    state.table.forget(&lock.name, lock.id, lock.ttl(now), now);
                    Members::ALL
                }
            };
            self.dispatch(&mut state);
            self.changed(&state);
            to
        };
        self.forgets.push(to, &lock.name, lock.id, lock.expires);
    }

    /// Notes that `member` may keep a record of `lock` until `until`: a
    /// release of it is passed on there too.
    pub(crate) fn note_record_on(&self, member: NodeId, lock: &Lock, until: MonoTime) {
        let mut state = self.state();
        let now = self.clock.now();
        self.note_other_record(&mut state, lock.id, member, until, now);
    }

    /// Whether the table that made a grant still speaks, rebuilt and
    /// within its guard: same term, same generation (a table dropped and
    /// rebuilt again may have settled the grant as lost).
    pub(crate) fn still_speaks_for(&self, made: Made) -> bool {
        let state = self.state();
        made == Made::now(&state) && state.table.is_rebuilt() && self.may_speak(&state)
    }

    fn acquire_error(&self, e: AcquireError) -> ApiError {
        match e {
            AcquireError::Held(lock) => ApiError::held(self.view(&lock)),
            AcquireError::NotRebuilt(_)
            | AcquireError::HeldBack { .. }
            | AcquireError::FencesExhausted => ApiError::not_rebuilt(),
        }
    }

    /// Releases a lock as the speaker, and tells the members that may keep
    /// a record of it to forget it.
    pub(crate) fn speak_release(
        self: &Arc<Self>,
        name: &str,
        id: LockId,
    ) -> Result<Lock, ApiError> {
        let (lock, to) = {
            let mut state = self.speaker()?;
            let now = self.clock.now();
            let lock = state.table.release(name, id, now).map_err(lock_error)?;
            state.held.remove(id);
            state.copies.remove(id);
            let to = self.forget_to(&mut state, &lock, now);
            self.dispatch(&mut state);
            self.changed(&state);
            (lock, to)
        };
        // Passed on in batches by one sender per member (`pass_on_releases`).
        self.forgets.push(to, name, id, lock.expires);
        Ok(lock)
    }

    /// The members that may keep a record of `lock`, released now (this
    /// node among them is left out when the release is passed on).
    ///
    /// A member keeps a record of a lock its client holds (`Held`: the
    /// lock's node, and a node a renewal moved it from, until the lease it
    /// knew ends) and of what it granted while it spoke (`Granted`). A
    /// lock granted in this term was granted here: only the nodes it was
    /// held through, all known here, have a record of it (a rebuild for an
    /// earlier term that reads it is refused, see `Table::rebuild`). A lock
    /// from an earlier term may be in any member's record: every member.
    fn forget_to(&self, state: &mut State, lock: &Lock, now: MonoTime) -> Members {
        let moved = if state.moved.is_empty() {
            None
        } else {
            state.moved.remove(&lock.id)
        };
        if Some(lock.fence.epoch()) != state.speaking {
            return Members::ALL;
        }
        let to = self.forgets.member(lock.node);
        match moved {
            Some(moved) if moved.until > now => to.with(moved.from),
            _ => to,
        }
    }

    /// Renews a lock as the speaker, and answers once the renewal is on
    /// record with enough members; a lock this table lacks is reclaimed
    /// from `record`, the renewing node's view of it.
    pub(crate) async fn speak_renew(
        &self,
        name: &str,
        id: LockId,
        lease: Option<Duration>,
        node: NodeId,
        record: Option<Lock>,
    ) -> Result<Lock, ApiError> {
        let (renewed, made) = self.renew_in_table(name, id, lease, node, record)?;
        self.ensure_on_record(&renewed, node, made).await?;
        Ok(renewed)
    }

    /// The table's part of [`Node::speak_renew`]: the lock renewed, and
    /// the table that renewed it.
    fn renew_in_table(
        &self,
        name: &str,
        id: LockId,
        lease: Option<Duration>,
        node: NodeId,
        record: Option<Lock>,
    ) -> Result<(Lock, Made), ApiError> {
        let mut state = self.speaker()?;
        let now = self.clock.now();
        let before = state.table.held_through(name, id);
        let renewed = match state.table.renew(name, id, lease, node, now) {
            Err(LockError::NotHeld) if record.is_some() => {
                let record = record.expect("checked");
                state.table.reclaim(record, now).map_err(lock_error)?;
                state.table.renew(name, id, lease, node, now)
            }
            Err(LockError::NotHeld)
                if state.table.new_grants_held_until(now).is_some()
                    && !state.table.is_forgotten(id, now) =>
            {
                // The last rebuild missed as many members as there are
                // copies: one of them may have this lock on record, and a
                // renewal through it reclaims it. Not "not held" yet,
                // unless it was released or settled as lost.
                return Err(ApiError::new(
                    ErrorCode::NotRebuilt,
                    "this lock is not in the table rebuilt without some members, which may \
                     have it on record; new grants are held back meanwhile: retry (through \
                     another node)",
                ));
            }
            other => other,
        }
        .map_err(lock_error)?;
        if let Some((from, until)) = before.filter(|(from, _)| *from != node) {
            self.note_other_record(&mut state, id, from, until, now);
        }
        if node == self.config.id {
            state.held.record(renewed.clone());
        } else {
            state.held.remove(id);
        }
        self.changed(&state);
        Ok((renewed, Made::now(&state)))
    }

    /// The lock `name`, as the speaker has it.
    pub(crate) fn speak_get(&self, name: &str) -> Result<Option<Lock>, ApiError> {
        let state = self.speaker()?;
        state
            .table
            .get(name, self.clock.now())
            .map_err(|_| ApiError::not_rebuilt())
    }

    /// The locks under `prefix`, as the speaker has them.
    pub(crate) fn speak_list(&self, prefix: &str, limit: usize) -> Result<Vec<Lock>, ApiError> {
        let state = self.speaker()?;
        state
            .table
            .list(prefix, limit, self.clock.now())
            .map_err(|_| ApiError::not_rebuilt())
    }

    /// Notes that node `from` keeps a record of lock `id` until `until`
    /// besides the lock's node: a renewal moved the lock away from it, or
    /// it took a copy. Entries whose records have all ended are pruned when
    /// the map has doubled since it was last pruned, so locks that end
    /// without a release do not pile up.
    fn note_other_record(
        &self,
        state: &mut State,
        id: LockId,
        from: NodeId,
        until: MonoTime,
        now: MonoTime,
    ) {
        if state.moved.len() >= state.moved_prune_at {
            state.moved.retain(|_, m| m.until > now);
            state.moved_prune_at = (2 * state.moved.len()).max(MOVED_PRUNE_AT);
        }
        let from = self.forgets.member(from);
        let entry = state.moved.entry(id).or_insert(Moved { from, until });
        entry.from = entry.from.with(from);
        entry.until = entry.until.max(until);
    }

    /// A release heard of from the speaker, with the time the released
    /// lease had left when it was sent: the lock is gone everywhere.
    pub(crate) fn forget(&self, name: &str, id: LockId, left: Duration) {
        let mut state = self.state();
        state.held.remove(id);
        state.copies.remove(id);
        state.table.forget(name, id, left, self.clock.now());
        self.dispatch(&mut state);
        self.changed(&state);
    }

    /// Locks a rebuild found another grant held longer: their clients lost them.
    pub(crate) fn lost(&self, ids: impl IntoIterator<Item = LockId>) {
        let mut state = self.state();
        for id in ids {
            state.copies.remove(id);
            if let Some(lock) = state.held.remove(id) {
                tracing::warn!(name = %lock.name, id = %lock.id, "lock lost to an older grant at a rebuild");
            }
        }
    }

    /// The current leader and its address, as Raft knows it.
    pub(crate) fn leader(&self) -> Option<(NodeId, String)> {
        // Read in place (cloning the metrics costs more than a forward's
        // own work), and keep the borrow short: it blocks the Raft core.
        let (leader, addr) = {
            let metrics = self.raft.metrics();
            let metrics = metrics.borrow_watched();
            let leader = metrics.current_leader?;
            let addr = metrics
                .membership_config
                .membership()
                .get_node(&leader)
                .map(|n| n.addr.clone());
            (leader, addr)
        };
        let addr = addr.or_else(|| self.config.peers.get(&leader).cloned())?;
        Some((leader, addr))
    }

    /// Whether this node is the Raft leader (rebuilt or not).
    pub(crate) fn is_leader(&self) -> bool {
        self.raft.as_leader().is_ok()
    }

    /// Records in this node's `Held` a lock its client was granted (or
    /// renewed) through the speaker, unless a newer speaker read this node
    /// since `read_before` (the term that had read it when the call left):
    /// that rebuild did not see this record, so its client must not hear
    /// of the grant (a newer speaker may grant the name again). The check
    /// and the record are under the lock a report read takes.
    pub(crate) fn record_held(&self, lock: Lock, read_before: u64) -> Result<(), ApiError> {
        let mut state = self.state();
        let read = self.read_by_term();
        if read > read_before {
            return Err(ApiError::new(
                ErrorCode::NotRebuilt,
                format!(
                    "the speaker of term {read} read this node while the answer was on its \
                     way; retry"
                ),
            ));
        }
        state.copies.remove(lock.id);
        state.held.record(lock);
        Ok(())
    }

    /// This node's record of `id`: its client's, or a copy.
    pub(crate) fn held_record(&self, id: LockId) -> Option<Lock> {
        let state = self.state();
        // A node may keep both (a `Held` from before the lock moved away,
        // a copy of a later renewal): the one whose lease ends last.
        match (state.held.get(id), state.copies.get(id)) {
            (Some(held), Some(copy)) if copy.expires > held.expires => Some(copy),
            (held, copy) => held.or(copy),
        }
    }

    /// Drops this node's record of `id`.
    pub(crate) fn drop_held(&self, id: LockId) {
        let mut state = self.state();
        state.held.remove(id);
        state.copies.remove(id);
    }
}

fn lock_error(e: LockError) -> ApiError {
    match e {
        LockError::NotHeld => ApiError::not_held(),
        LockError::NotRebuilt(_) => ApiError::not_rebuilt(),
    }
}

/// Takes a grant back unless it was handed to its client: the grant could
/// not be put on record with enough members, or whoever waited for it went
/// away meanwhile.
struct TakeBackOnDrop<'a> {
    node: &'a Node,
    lock: Option<Lock>,
}

impl Drop for TakeBackOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(lock) = self.lock.take() {
            self.node.take_back(&lock);
        }
    }
}

/// Cancels a waiting request whose client went away, and takes back a
/// grant that reached it too late to be handed on.
struct CancelOnDrop<'a> {
    node: &'a Node,
    name: &'a str,
    waiter: Option<WaiterId>,
    answer: Option<oneshot::Receiver<Result<Lock, AcquireError>>>,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(waiter) = self.waiter.take() {
            let mut state = self.node.state();
            state.table.cancel(self.name, waiter);
            state.waiters.remove(&waiter);
        }
        if let Some(Ok(Ok(lock))) = self.answer.as_mut().map(|rx| rx.try_recv()) {
            self.node.take_back(&lock);
        }
    }
}

/// The table a grant or renewal was made by: its term and generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Made {
    /// The term the table speaks for (`None` while it speaks for none).
    pub(crate) term: Option<u64>,
    /// The table's generation.
    pub(crate) generation: u64,
}

impl Made {
    /// The table as it is now.
    fn now(state: &State) -> Made {
        Made {
            term: state.speaking,
            generation: state.table.generation(),
        }
    }
}
