//! The node: its lock table and held record, and the speaker's operations.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use leasehold_api::{Forget, LockView, RebuildReport};
use leasehold_raft::{leader_state, Raft, WatchReceiver};
use locktable::{
    AcquireError, Acquired, Held, Lock, LockError, LockId, MonoTime, NodeId, Request, Table,
    WaiterId,
};
use tokio::sync::{oneshot, watch, Notify};

use crate::batch::{next_batch, Pending, Queue};
use crate::clock::Clock;
use crate::config::NodeConfig;
use crate::error::ApiError;
use crate::peers::Peers;

/// How much of the leader lease the speaker leaves unused: it stops granting
/// this long before a new leader could exist.
const LEASE_MARGIN: Duration = Duration::from_millis(75);

/// What a node keeps behind its one lock.
pub(crate) struct State {
    pub(crate) table: Table,
    pub(crate) held: Held,
    waiters: HashMap<WaiterId, oneshot::Sender<Result<Lock, AcquireError>>>,
    /// The term whose speaker this table is (or is being rebuilt for).
    pub(crate) speaking: Option<u64>,
    /// Locks granted this term to this node's clients and renewed since
    /// through another node, which may still keep a record of them.
    renewed_elsewhere: HashSet<LockId>,
    pub(crate) last_rebuild: Option<RebuildReport>,
}

/// A running node's shared parts.
pub struct Node {
    pub(crate) config: NodeConfig,
    pub(crate) raft: Raft,
    pub(crate) clock: Clock,
    pub(crate) peers: Peers,
    /// Whether this process is the node's first (a new data directory).
    pub(crate) first_start: bool,
    state: Mutex<State>,
    /// Rung when the table changes, so the expiry task re-arms its timer.
    pub(crate) table_changed: Notify,
    /// Counts changes of the table's locks, for gets that watch a lock.
    changes: watch::Sender<u64>,
    /// When the expiry task next wakes (table clock, ns); 0 while it works.
    pub(crate) expiry_armed: AtomicU64,
    /// Releases to pass on to the other members.
    releases: Queue<Forget>,
    /// Calls to forward to the speaker in the next batch.
    pub(crate) batches: Queue<Pending>,
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
        first_start: bool,
    ) -> Arc<Self> {
        Arc::new(Node {
            state: Mutex::new(State {
                table: Table::new(config.lease),
                held: Held::new(),
                waiters: HashMap::new(),
                speaking: None,
                renewed_elsewhere: HashSet::new(),
                last_rebuild: None,
            }),
            config,
            raft,
            clock: Clock::new(),
            peers,
            first_start,
            table_changed: Notify::new(),
            changes: watch::Sender::new(0),
            expiry_armed: AtomicU64::new(0),
            releases: Queue::new(),
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
        let Some(leader) = leader_state(&self.raft) else {
            return false;
        };
        if state.speaking != Some(leader.term()) {
            return false;
        }
        leader
            .lease_deadline(self.config.timings.leader_lease(), LEASE_MARGIN)
            .is_some_and(|deadline| Instant::now() < deadline)
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
        state.table.drop_table(self.clock.now());
        state.speaking = speaking;
        state.renewed_elsewhere.clear();
        self.dispatch(&mut state);
        self.changed(&state);
        state.table.generation()
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
        let (rx, waiter) = {
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
            let waiter = match outcome {
                Ok(Acquired::Granted(lock)) => {
                    if node == self.config.id {
                        state.held.record(lock.clone());
                    }
                    self.changed(&state);
                    return Ok(lock);
                }
                Ok(Acquired::Waiting(waiter)) => waiter,
                Err(e) => return Err(self.acquire_error(e)),
            };
            let (tx, rx) = oneshot::channel();
            state.waiters.insert(waiter, tx);
            self.changed(&state);
            (rx, waiter)
        };
        // If the client goes away, stop waiting for it.
        let cancel = CancelOnDrop {
            node: self,
            name: &name,
            waiter: Some(waiter),
        };
        let answer = tokio::time::timeout(wait + Duration::from_secs(5), rx).await;
        let mut cancel = cancel;
        cancel.waiter = None;
        match answer {
            Ok(Ok(Ok(lock))) => Ok(lock),
            Ok(Ok(Err(e))) => Err(self.acquire_error(e)),
            Ok(Err(_)) | Err(_) => Err(ApiError::not_rebuilt()),
        }
    }

    fn acquire_error(&self, e: AcquireError) -> ApiError {
        match e {
            AcquireError::Held(lock) => ApiError::held(self.view(&lock)),
            AcquireError::NotRebuilt(_)
            | AcquireError::HeldBack { .. }
            | AcquireError::FencesExhausted => ApiError::not_rebuilt(),
        }
    }

    /// Releases a lock as the speaker, and tells the other members to
    /// forget it unless none of them can know of it.
    pub(crate) fn speak_release(
        self: &Arc<Self>,
        name: &str,
        id: LockId,
    ) -> Result<Lock, ApiError> {
        let (lock, known_elsewhere) = {
            let mut state = self.speaker()?;
            let lock = state
                .table
                .release(name, id, self.clock.now())
                .map_err(lock_error)?;
            state.held.remove(id);
            let known_elsewhere = self.known_elsewhere(&mut state, &lock);
            self.dispatch(&mut state);
            self.changed(&state);
            (lock, known_elsewhere)
        };
        if known_elsewhere {
            // Passed on in batches by the forget task (`pass_on_releases`).
            self.releases.push(Forget {
                name: name.to_string(),
                id: id.to_string(),
            });
        }
        Ok(lock)
    }

    /// Whether another member may keep a record of `lock`, released now.
    ///
    /// Members keep their own clients' locks and what they granted while
    /// they spoke. A lock this speaker granted in its term to its own
    /// client, and never renewed through another node, is in no other
    /// member's record: its release need not be passed on (on a busy
    /// speaker, that is most releases).
    fn known_elsewhere(&self, state: &mut State, lock: &Lock) -> bool {
        let renewed_elsewhere =
            !state.renewed_elsewhere.is_empty() && state.renewed_elsewhere.remove(&lock.id);
        renewed_elsewhere
            || lock.node != self.config.id
            || Some(lock.fence.epoch()) != state.speaking
    }

    /// Renews a lock as the speaker; a lock this table lacks is reclaimed
    /// from `record`, the renewing node's view of it.
    pub(crate) fn speak_renew(
        &self,
        name: &str,
        id: LockId,
        lease: Option<Duration>,
        node: NodeId,
        record: Option<Lock>,
    ) -> Result<Lock, ApiError> {
        let mut state = self.speaker()?;
        let now = self.clock.now();
        let renewed = match state.table.renew(name, id, lease, node, now) {
            Err(LockError::NotHeld) if record.is_some() => {
                let record = record.expect("checked");
                state.table.reclaim(record, now).map_err(lock_error)?;
                state.table.renew(name, id, lease, node, now)
            }
            other => other,
        }
        .map_err(lock_error)?;
        if node == self.config.id {
            if !state.held.contains(id) {
                note_renewed_elsewhere(&mut state, id);
            }
            state.held.record(renewed.clone());
        } else {
            state.held.remove(id);
        }
        self.changed(&state);
        Ok(renewed)
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

    /// A release heard of from the speaker: the lock is gone everywhere.
    pub(crate) fn forget(&self, name: &str, id: LockId) {
        let mut state = self.state();
        state.held.remove(id);
        state.table.forget(name, id, self.clock.now());
        self.dispatch(&mut state);
        self.changed(&state);
    }

    /// Locks a rebuild found another grant held longer: their clients lost them.
    pub(crate) fn lost(&self, ids: impl IntoIterator<Item = LockId>) {
        let mut state = self.state();
        for id in ids {
            if let Some(lock) = state.held.remove(id) {
                tracing::warn!(name = %lock.name, id = %lock.id, "lock lost to an older grant at a rebuild");
            }
        }
    }

    /// Passes releases on to the other members, batching those that come
    /// in while a batch is on its way: a busy speaker sends one request per
    /// member per batch, not per release.
    pub(crate) async fn pass_on_releases(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let Some(mut rx) = self.releases.take_receiver() else {
            return;
        };
        let members = self.other_members();
        while let Some(batch) = next_batch(&mut rx, 1024, &mut stop).await {
            self.peers.forget(&members, batch).await;
        }
    }

    /// Every member but this node, with its address.
    pub(crate) fn other_members(&self) -> Vec<(NodeId, String)> {
        self.config
            .peers
            .iter()
            .filter(|(id, _)| **id != self.config.id)
            .map(|(id, addr)| (*id, addr.clone()))
            .collect()
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

    /// Records in this node's `Held` a lock its client was granted through
    /// the speaker.
    pub(crate) fn record_held(&self, lock: Lock) {
        self.state().held.record(lock);
    }

    /// This node's record of `id`.
    pub(crate) fn held_record(&self, id: LockId) -> Option<Lock> {
        self.state().held.get(id)
    }

    /// Drops this node's record of `id`.
    pub(crate) fn drop_held(&self, id: LockId) {
        self.state().held.remove(id);
    }
}

fn lock_error(e: LockError) -> ApiError {
    match e {
        LockError::NotHeld => ApiError::not_held(),
        LockError::NotRebuilt(_) => ApiError::not_rebuilt(),
    }
}

/// Cancels a waiting request whose client went away.
struct CancelOnDrop<'a> {
    node: &'a Node,
    name: &'a str,
    waiter: Option<WaiterId>,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(waiter) = self.waiter.take() {
            let mut state = self.node.state();
            state.table.cancel(self.name, waiter);
            state.waiters.remove(&waiter);
        }
    }
}

/// Notes that `id`, now renewed through this node, was held through another
/// node (this node keeps no record of it). The set is pruned of locks this
/// node no longer holds when it grows, so locks that end without a release
/// do not pile up.
fn note_renewed_elsewhere(state: &mut State, id: LockId) {
    const PRUNE_AT: usize = 4096;
    if state.renewed_elsewhere.len() >= PRUNE_AT {
        let State {
            renewed_elsewhere,
            held,
            ..
        } = state;
        renewed_elsewhere.retain(|id| held.contains(*id));
    }
    state.renewed_elsewhere.insert(id);
}
