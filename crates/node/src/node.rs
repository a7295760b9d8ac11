//! The node: the member protocol's state behind one lock, Raft, and the
//! signals the driver's tasks wait on.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use leasehold_api::{ForwardAnswer, ForwardCall, LockView};
use leasehold_protocol::{Guard, Leader, Member, MemberConfig, Sabotage};
use leasehold_raft::{leader_state, Identity, PeerHttp, Raft, WatchReceiver};
use locktable::{AcquireError, Lock, MonoTime, NodeId, WaiterId};
use tokio::sync::{oneshot, watch, Notify};
use tokio_util::sync::CancellationToken;

use crate::clock::{Clock, SuspendWatch};
use crate::config::NodeConfig;
use crate::copier::Copier;
use crate::error::ApiError;
use crate::forgets::Outbox;
use crate::peers::Peers;
use crate::queue::Queue;
use crate::roster::Roster;
use crate::tasks::Tasks;

/// The copies a grant needs in the cluster `roster` shows: as many as the
/// voters a copy may go to allow, and no fewer than the committed
/// configuration asks while a smaller one is not committed (a grant made
/// with fewer could be missed by a leader elected under the committed one).
fn copies_of(config: &NodeConfig, roster: &Roster) -> usize {
    let targets = roster.copy_to().len();
    let committed = config.copies_for(roster.committed_voter_count());
    config
        .copies_for(targets)
        .max(committed)
        .min(targets.max(1))
}

/// A forwarded call waiting for a batch, and where its answer goes.
pub(crate) type Pending = (
    ForwardCall,
    oneshot::Sender<Result<ForwardAnswer, ApiError>>,
);

/// What a node keeps behind its one lock: the protocol's state, and where
/// the answers to waiting requests go.
pub(crate) struct State {
    pub(crate) member: Member,
    pub(crate) waiters: HashMap<WaiterId, oneshot::Sender<Result<Lock, AcquireError>>>,
}

/// A running node's shared parts.
pub struct Node {
    pub(crate) config: NodeConfig,
    pub(crate) raft: Raft,
    pub(crate) clock: Clock,
    /// Notices suspends, which Raft's acknowledgement times cannot show
    /// (none on a clock that counts no suspends).
    suspends: Option<SuspendWatch>,
    pub(crate) peers: Arc<Peers>,
    /// The members now, as Raft's latest membership says.
    roster: watch::Sender<Arc<Roster>>,
    /// Members gone from the roster lately, each with its address and
    /// until when a rebuild still reads it (see [`Node::departed`]).
    departed: Mutex<BTreeMap<NodeId, (String, MonoTime)>>,
    /// Whether a roster from Raft ever named this node.
    was_member: std::sync::atomic::AtomicBool,
    /// Whether this node joins rather than forms the cluster
    /// ([`Node::is_joiner`]).
    joining: std::sync::atomic::AtomicBool,
    /// Whether a roster from Raft was seen at all.
    saw_roster: std::sync::atomic::AtomicBool,
    /// Held across a membership change on the speaker and across the
    /// agreement of a protocol version, so that no member is added between
    /// the check that every member offers a version and its entry.
    pub(crate) membership_writes: tokio::sync::Mutex<()>,
    /// Whether this node was removed from the cluster.
    pub(crate) removed: watch::Sender<bool>,
    /// This node's data directory's identity and what it knows of the others'.
    pub(crate) identity: Arc<Identity>,
    /// Whether this process forgot nothing a rebuild counts on: the node's
    /// first (a new data directory), or one whose last process handed
    /// every record over as it stopped.
    pub(crate) first_start: bool,
    /// Members that left and handed every record over, each until when
    /// another member's report would still name it departed.
    handed: Mutex<BTreeMap<NodeId, MonoTime>>,
    /// Locks this process's own clients took through the in-process client
    /// ([`crate::Embedded`]), by id, with their names: they end with the
    /// process, and a shutdown releases them first.
    pub(crate) local_locks: Mutex<BTreeMap<String, String>>,
    state: Mutex<State>,
    /// Rung when the table changes, so the expiry task re-arms its timer.
    pub(crate) table_changed: Notify,
    /// Counts changes of the table's locks, for gets that watch a lock.
    changes: watch::Sender<u64>,
    /// When the expiry task next wakes (table clock, ns); 0 while it works.
    pub(crate) expiry_armed: AtomicU64,
    /// The highest term whose speaker has read this node's report (the
    /// member's, mirrored for those who wait on it).
    read_by: watch::Sender<u64>,
    /// The node's Prometheus series.
    pub(crate) metrics: crate::metrics::Metrics,
    /// The last rebuilds of this node's, with when each ended.
    history: Mutex<std::collections::VecDeque<leasehold_api::HistoryEntry>>,
    /// Releases to pass on to the members that may keep a record of them.
    pub(crate) forgets: Outbox,
    /// Calls to forward to the speaker in the next batch.
    pub(crate) batches: Queue<Pending>,
    /// Copies on their way to the other members.
    pub(crate) copier: Copier,
    /// Every task the node started, so that a shutdown waits for them.
    pub(crate) tasks: Tasks,
    /// Members whose timings were logged as leaving the guard no room.
    warned_timings: Mutex<std::collections::BTreeSet<NodeId>>,
    /// Cancelled when the node stops: every task it started ends on it.
    pub(crate) stop: CancellationToken,
}

impl Node {
    pub(crate) fn new(
        config: NodeConfig,
        raft: Raft,
        http: PeerHttp,
        identity: Arc<Identity>,
        first_start: bool,
        clock: Clock,
        sabotage: Sabotage,
    ) -> Arc<Self> {
        let roster = Roster::current(&raft.metrics().borrow_watched(), &config.peers);
        let roster = watch::Sender::new(Arc::new(roster));
        let peers = Peers::new(roster.subscribe(), http);
        let member = Member::new(MemberConfig {
            id: config.id,
            members: roster.borrow().ids().collect(),
            copy_to: roster.borrow().copy_to(),
            copies: copies_of(&config, &roster.borrow()),
            lease: config.lease,
            rebuild_mode: config.rebuild_mode,
            leader_lease: config.timings.leader_lease(),
            sabotage,
        });
        let node = Arc::new(Node {
            state: Mutex::new(State {
                member,
                waiters: HashMap::new(),
            }),
            forgets: Outbox::new(config.id),
            copier: Copier::default(),
            roster,
            departed: Mutex::new(BTreeMap::new()),
            handed: Mutex::new(BTreeMap::new()),
            local_locks: Mutex::new(BTreeMap::new()),
            was_member: std::sync::atomic::AtomicBool::new(false),
            joining: std::sync::atomic::AtomicBool::new(!config.join.is_empty()),
            saw_roster: std::sync::atomic::AtomicBool::new(false),
            membership_writes: tokio::sync::Mutex::new(()),
            removed: watch::Sender::new(false),
            config,
            raft,
            clock,
            suspends: clock.counts_suspends().then(SuspendWatch::new),
            peers: Arc::new(peers),
            identity,
            first_start,
            table_changed: Notify::new(),
            changes: watch::Sender::new(0),
            expiry_armed: AtomicU64::new(0),
            read_by: watch::Sender::new(0),
            history: Mutex::default(),
            metrics: crate::metrics::Metrics::new(),
            batches: Queue::new(),
            tasks: Tasks::default(),
            warned_timings: Mutex::default(),
            stop: CancellationToken::new(),
        });
        let copies = node.state().member.copies_floor(node.clock.now());
        node.identity.terms().set(leasehold_raft::Terms {
            copies,
            max_lease: node.config.lease.max,
            leader_lease: node.config.timings.leader_lease(),
        });
        let heard = Arc::downgrade(&node);
        node.identity
            .terms()
            .on_heard(Box::new(move |from, terms, answer| {
                if let Some(node) = heard.upgrade() {
                    node.heard_terms(from, terms, answer);
                }
            }));
        node
    }

    /// This node's id.
    pub fn id(&self) -> NodeId {
        self.config.id
    }

    /// The Raft handle.
    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    /// The members now.
    pub fn roster(&self) -> Arc<Roster> {
        Arc::clone(&self.roster.borrow())
    }

    /// Takes `latest`, read from Raft, as the members, if they changed:
    /// the protocol's member list follows, each new member gets its sender
    /// of releases before anything may be sent to it, and members gone are
    /// kept as departed. A node named by an earlier roster and not by
    /// `latest` was removed.
    pub(crate) fn roster_changed(self: &Arc<Self>, latest: Roster) {
        let named = latest.addr(self.id()).is_some();
        self.identity.set_members(latest.ids());
        let first = !self.saw_roster.swap(true, Ordering::Relaxed);
        // A node joining replays configurations from before it was added;
        // a member finds its latest one first, and is removed if that does
        // not name it (restarted after its removal). The data directory
        // records whether a configuration ever named this node, so that a
        // joiner restarted before its addition reached it is no member
        // yet; a directory from before that record counts a node started
        // without --join as a member.
        let recorded = self.identity.was_named().unwrap_or(!self.is_joiner());
        let was_member = self.was_member.load(Ordering::Relaxed) || (first && recorded);
        // A joining node replaying the log may find its id named by a
        // configuration of an earlier member under that id: it is a member
        // once the cluster answers its join (`confirm_joined`).
        let confirmed = !self.is_joiner() || self.identity.was_named() == Some(true);
        if named {
            if confirmed {
                self.confirm_joined();
            }
        } else if was_member {
            self.removed_from_cluster();
        }
        let before = self.roster();
        if *before == latest {
            return;
        }
        for (member, addr) in latest.members() {
            crate::forgets::start_sender(self, member, addr.to_string());
        }
        // A member that left may hold the only other record of a lock for
        // as long as a lease runs: rebuilds read it, or count it missing,
        // until then.
        let until = self.clock.now() + self.config.lease.max + self.config.rebuild_timeout;
        {
            let mut departed = self.departed.lock().unwrap_or_else(|p| p.into_inner());
            for (member, addr) in before.members() {
                if latest.addr(member).is_none() {
                    departed.insert(member, (addr.to_string(), until));
                }
            }
            departed.retain(|member, _| latest.addr(*member).is_none());
        }
        // A member added again is no longer one that handed over.
        self.handed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|member, _| latest.addr(*member).is_none());
        let copy_to = latest.copy_to();
        let copies = copies_of(&self.config, &latest);
        let now = self.clock.now();
        {
            let mut state = self.state();
            state
                .member
                .set_members(latest.ids().collect(), copy_to, copies, now);
            // Under the lock, so no refresh stamps an older count after it.
            self.identity
                .terms()
                .set_copies(state.member.copies_floor(now));
        }
        tracing::info!(
            members = ?latest.ids().collect::<Vec<_>>(),
            "the members changed"
        );
        self.roster.send_replace(Arc::new(latest));
    }

    /// Whether this node asks the cluster to add it (`--join`, or
    /// `--rejoin` once the cluster removed its id's old data directory)
    /// rather than forming the cluster of its peers.
    pub(crate) fn is_joiner(&self) -> bool {
        self.joining.load(Ordering::Relaxed)
    }

    /// From now on this node joins the cluster rather than forming it.
    pub(crate) fn become_joiner(&self) {
        self.joining.store(true, Ordering::Relaxed);
    }

    /// The members to ask to add this node: `--join`, or else the other
    /// peers.
    pub(crate) fn join_targets(&self) -> Vec<String> {
        if !self.config.join.is_empty() {
            return self.config.join.clone();
        }
        self.config
            .peers
            .iter()
            .filter(|(id, _)| **id != self.id())
            .map(|(_, addr)| addr.clone())
            .collect()
    }

    /// Whether a configuration from Raft named this node (a node still
    /// joining was never named).
    pub(crate) fn was_named(&self) -> bool {
        self.was_member.load(Ordering::Relaxed)
    }

    /// This node is a member (a configuration named it, or the cluster
    /// answered its join): from now on a configuration that does not name
    /// it removed it. Recorded durably.
    pub(crate) fn confirm_joined(&self) {
        if self.was_member.swap(true, Ordering::Relaxed) {
            return;
        }
        let identity = Arc::clone(&self.identity);
        self.tasks.spawn(async move {
            if let Err(e) = identity.named().await {
                tracing::warn!(%e, "could not record that this node is a member");
            }
        });
    }

    /// How many members hold a record of every grant, in the cluster as it
    /// is now.
    pub(crate) fn copies(&self) -> usize {
        self.state().member.config().copies
    }

    /// The fewest copies a grant still running may have, as far as this
    /// node knows, and the copies it makes now: what its rebuild counts on.
    pub(crate) fn fewest_copies(&self) -> usize {
        let now = self.clock.now();
        self.state().member.counted_copies(now)
    }

    /// What this node's report says of copies: the fewest a running grant
    /// may have as far as it knows (`u64::MAX`: nothing known, so the
    /// reader counts on its own).
    pub(crate) fn reported_copies(&self) -> u64 {
        let now = self.clock.now();
        let fewest = self.state().member.fewest_copies(now);
        fewest.map_or(u64::MAX, |f| f as u64)
    }

    /// Member `from` said what it runs with: the fewest copies its grants
    /// may have are counted for a lease from now, and the guard counts on
    /// its leader lease if it is shorter than this node's.
    pub(crate) fn heard_terms(&self, from: NodeId, terms: leasehold_raft::Terms, answer: bool) {
        let now = self.clock.now();
        if answer {
            if let Err(why) = self.config.honours_leader_lease(terms.leader_lease) {
                self.warn_timings_once(from, &why);
            }
        }
        let terms = leasehold_protocol::PeerTerms {
            copies: terms.copies,
            max_lease: terms.max_lease,
            // A request may have waited since its member restarted with
            // other timings: only an answer says what it runs with now.
            leader_lease: answer.then_some(terms.leader_lease),
        };
        self.state().member.heard(from, terms, now);
    }

    /// Logs, once per member, that its leader lease is one this node's
    /// heartbeats cannot renew twice: the guard counts on it all the same
    /// (the member votes that soon), so grants stall.
    fn warn_timings_once(&self, from: NodeId, why: &str) {
        let first = self
            .warned_timings
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(from);
        if first {
            tracing::error!(
                member = from,
                %why,
                "a member's timings leave the speaker's guard no room: grants and renewals may \
                 stall; give every member the same timings"
            );
        }
    }

    /// What this node tells the other members it runs with, as of now.
    pub(crate) fn refresh_terms(&self) {
        let now = self.clock.now();
        let mut state = self.state();
        let floor = state.member.copies_floor(now);
        self.identity.terms().set_copies(floor);
    }

    /// The members gone from the roster lately, each with how long it
    /// stays departed: what this node's report tells a rebuilding speaker.
    pub(crate) fn departed_with_time_left(&self) -> Vec<crate::report::Departed> {
        let now = self.clock.now();
        let departed = self.departed.lock().unwrap_or_else(|p| p.into_inner());
        departed
            .iter()
            .filter(|(_, (_, until))| *until > now)
            .map(|(id, (addr, until))| crate::report::Departed {
                node: *id,
                addr: addr.clone(),
                left_ms: leasehold_api::millis_ceil(until.saturating_duration_since(now)),
            })
            .collect()
    }

    /// Takes `member` at `addr`, which another member saw leave the
    /// cluster, as departed for `left` more (or longer, if this node knew
    /// so already); answers whether it did not know it as departed.
    pub(crate) fn adopt_departed(&self, member: NodeId, addr: &str, left: Duration) -> bool {
        let now = self.clock.now();
        let until = now + left;
        {
            let mut handed = self.handed.lock().unwrap_or_else(|p| p.into_inner());
            handed.retain(|_, until| *until > now);
            if handed.contains_key(&member) {
                return false;
            }
        }
        let mut departed = self.departed.lock().unwrap_or_else(|p| p.into_inner());
        match departed.get_mut(&member) {
            Some((_, known)) => {
                *known = (*known).max(until);
                false
            }
            None => {
                departed.insert(member, (addr.to_string(), until));
                true
            }
        }
    }

    /// `member`, gone from the roster, handed every record it kept over
    /// before it left: no rebuild needs to read it (nor take it as
    /// departed from another member's report, for as long as that could
    /// name it).
    pub(crate) fn handed_over(&self, member: NodeId) {
        if self.roster().addr(member).is_some() {
            return;
        }
        let until = self.clock.now() + self.config.lease.max + self.config.rebuild_timeout;
        self.handed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(member, until);
        let was = self
            .departed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&member);
        if was.is_some() {
            self.forgets.close(member);
            tracing::info!(
                member,
                "a member that left handed its records over: not read again"
            );
        }
    }

    /// The members gone from the roster within the longest lease (plus a
    /// rebuild's time), with their addresses: a rebuild reads them too.
    pub(crate) fn departed(&self) -> Vec<(NodeId, String)> {
        let now = self.clock.now();
        let roster = self.roster();
        let mut departed = self.departed.lock().unwrap_or_else(|p| p.into_inner());
        departed.retain(|member, (_, until)| {
            let reads = *until > now;
            if !reads && roster.addr(*member).is_none() {
                // No rebuild reads it any more: its releases may stop.
                self.forgets.close(*member);
            }
            reads
        });
        // A member added again since is read as a member, once.
        departed
            .iter()
            .filter(|(id, _)| roster.addr(**id).is_none())
            .map(|(id, (addr, _))| (*id, addr.clone()))
            .collect()
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain data behind; carry on.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The guard's facts as of now: Raft's view of this node's leadership
    /// and the last resume, on the lease clock.
    pub(crate) fn guard(&self) -> Guard {
        Guard {
            leader: leader_state(&self.raft).map(|l| Leader {
                term: l.term(),
                quorum_acked_at: l.quorum_acked_at.map(|at| self.clock.at_or_before(at)),
            }),
            resumed_at: self
                .suspends
                .as_ref()
                .and_then(SuspendWatch::last_resume)
                .map(|at| self.clock.at_or_after(at)),
        }
    }

    /// A lock as this node shows it to a client.
    pub(crate) fn view(&self, lock: &Lock) -> LockView {
        let step = self.peers.faults().wall_step_ms();
        let wall = self.clock.wall_ms().saturating_add_signed(step);
        LockView::from_lock(lock, self.clock.now(), wall)
    }

    /// The term this node may grant for now, if its guard lets it (rebuilt
    /// or not). No two nodes may answer with different terms at one
    /// instant: the whole-node simulation checks it.
    pub fn may_grant_for(&self) -> Option<u64> {
        let guard = self.guard();
        let state = self.state();
        if state.member.may_speak(&guard, self.clock.now()) {
            state.member.speaking()
        } else {
            None
        }
    }

    /// Safety mechanisms switched off (a simulation's self-test only).
    pub(crate) fn sabotage(&self) -> Sabotage {
        self.state().member.config().sabotage
    }

    /// Whether this node may grant now (its guard passes), rebuilt or not.
    pub(crate) fn may_speak_now(&self) -> bool {
        let guard = self.guard();
        self.state().member.may_speak(&guard, self.clock.now())
    }

    /// Says the table changed: the expiry task re-arms, watchers look again.
    ///
    /// The expiry task is woken only when the table's next deadline is now
    /// earlier than the one it sleeps until: a grant on the hot path with a
    /// lease longer than that wakes nobody.
    /// Keeps `report` in this node's failover history, stamped with the
    /// wall clock now.
    pub(crate) fn record_rebuild(&self, report: leasehold_api::RebuildReport) {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let at_unix_ms = u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX);
        self.metrics.rebuilds.inc();
        self.metrics
            .rebuild_duration
            .observe(report.took_ms as f64 / 1000.0);
        self.metrics
            .members_missing_at_rebuild
            .set(i64::try_from(report.members_missing.len()).unwrap_or(i64::MAX));
        let entry = leasehold_api::HistoryEntry {
            at: leasehold_api::format_rfc3339_ms(at_unix_ms),
            at_unix_ms,
            report,
        };
        let mut history = self.history.lock().unwrap_or_else(|e| e.into_inner());
        if history.len() == leasehold_api::HISTORY_LEN {
            history.pop_front();
        }
        history.push_back(entry);
    }

    /// Every metric, in the Prometheus text format (`openmetrics`: in
    /// OpenMetrics text), the gauges read now: each describes this moment.
    pub fn metrics_text(&self, openmetrics: bool) -> String {
        let (locks, waiting) = self.state().member.table_size();
        let speaks = self.is_leader() && self.is_rebuilt();
        let m = &self.metrics;
        let as_gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        m.locks_held.set(if speaks { as_gauge(locks) } else { 0 });
        m.waiters.set(if speaks { as_gauge(waiting) } else { 0 });
        m.is_speaker.set(i64::from(speaks));
        if !speaks {
            m.members_missing_at_rebuild.set(0);
        }
        let raft = self.raft.metrics().borrow_watched().clone();
        m.raft_term
            .set(i64::try_from(raft.current_term).unwrap_or(i64::MAX));
        m.has_speaker.set(i64::from(raft.current_leader.is_some()));
        let members = match speaks {
            true => self.cluster().members,
            false => Vec::new(),
        };
        m.set_reachable(
            members
                .iter()
                .map(|member| (member.id, member.reachable != Some(false))),
        );
        match openmetrics {
            true => m.encode(),
            false => m.encode_prometheus(),
        }
    }

    /// This node's failover history, oldest first.
    pub fn history(&self) -> leasehold_api::HistoryAnswer {
        let speaks = self.is_leader() && self.state().member.is_rebuilt();
        let history = self.history.lock().unwrap_or_else(|e| e.into_inner());
        leasehold_api::HistoryAnswer {
            node: self.id(),
            rebuilds: history.iter().cloned().collect(),
            view: if speaks { "speaker" } else { "own" }.into(),
        }
    }

    pub(crate) fn changed(&self, state: &State) {
        if self.changes.receiver_count() > 0 {
            self.changes.send_modify(|v| *v = v.wrapping_add(1));
        }
        let next = state
            .member
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
    pub(crate) fn dispatch(&self, state: &mut State) {
        for answer in state.member.take_answers() {
            if let Some(tx) = state.waiters.remove(&answer.waiter) {
                let _ = tx.send(answer.result);
            }
        }
    }

    /// Ends the leases and waits due by now, if this node may speak; when
    /// the table next has something to end.
    pub(crate) fn poll(&self) -> Option<MonoTime> {
        let guard = self.guard();
        let mut state = self.state();
        let before = state.member.expired();
        let polled = state.member.poll(&guard, self.clock.now());
        self.metrics
            .expiries
            .inc_by(state.member.expired().saturating_sub(before));
        if polled.changed {
            // Not `changed()`: the expiry task must not wake itself.
            self.changes.send_modify(|v| *v = v.wrapping_add(1));
        }
        self.dispatch(&mut state);
        polled.next
    }

    /// Drops the table (this node stopped speaking, or starts again):
    /// waiting requests are answered `not_rebuilt`. Answers the table's
    /// new generation.
    pub(crate) fn drop_table(&self, speaking: Option<u64>) -> u64 {
        let mut state = self.state();
        state.member.drop_table(speaking, self.clock.now());
        self.dispatch(&mut state);
        self.changed(&state);
        state.member.generation()
    }

    /// Whether the table is rebuilt (it may still be barred from granting
    /// by the guard).
    pub fn is_rebuilt(&self) -> bool {
        self.state().member.is_rebuilt()
    }

    /// The table's generation: it moves on at every drop.
    pub(crate) fn generation(&self) -> u64 {
        self.state().member.generation()
    }

    /// Whether the node is shutting down.
    pub(crate) fn is_stopping(&self) -> bool {
        self.state().member.is_stopping()
    }

    /// Stops speaking for good: the table is dropped and no rebuild starts
    /// again. The first step of a shutdown, before leadership is handed on.
    pub(crate) fn stop_speaking(&self) {
        let mut state = self.state();
        state.member.stop_speaking(self.clock.now());
        self.dispatch(&mut state);
        self.changed(&state);
    }

    /// A speaker of `term` read this node's report (see
    /// [`Member::deposed_by`]).
    pub(crate) fn deposed_by(&self, term: u64) {
        let mut state = self.state();
        if state.member.deposed_by(term, self.clock.now()) {
            self.read_by.send_replace(term);
        }
        self.dispatch(&mut state);
        self.changed(&state);
    }

    /// The highest term whose speaker has read this node's report.
    pub(crate) fn read_by_term(&self) -> u64 {
        *self.read_by.borrow()
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
        let addr = addr.or_else(|| self.roster().addr(leader).map(str::to_string))?;
        Some((leader, addr))
    }

    /// Whether this node's cluster speaks data revisions (protocol
    /// [`leasehold_raft::version::DATA_REVS`], as applied here): reports
    /// carry them, and a lock's data may change after its grant.
    pub(crate) fn data_revs(&self) -> bool {
        self.identity.versions().cluster() >= leasehold_raft::version::DATA_REVS
    }

    /// Whether this node is the Raft leader (rebuilt or not).
    pub(crate) fn is_leader(&self) -> bool {
        self.raft.as_leader().is_ok()
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
    pub fn leading_term(&self) -> Option<u64> {
        leader_state(&self.raft).map(|l| l.term())
    }

    /// Exports `elector`'s counts on this node's `/metrics`, labelled by
    /// election (`leasehold_election_leading`, `_has_leader`,
    /// `_leader_fence`, `_leader_changes_total`, `_terms_led_total`,
    /// `_leaderless_seconds_total`), read off [`Elector::stats`] when
    /// scraped.
    ///
    /// [`Elector::stats`]: leasehold_client::Elector::stats
    pub fn export_election(&self, elector: &leasehold_client::Elector) {
        self.metrics.elections.add(elector);
    }

    /// The member that speaks (Raft's leader), as this node knows it: an
    /// embedding application sees whether its own node speaks (`Some(id)`
    /// with [`Node::id`]) beside which instance leads its election.
    pub fn speaker(&self) -> Option<NodeId> {
        self.raft.metrics().borrow_watched().current_leader
    }

    /// The voter most caught up with this leader's log, other than itself.
    pub(crate) fn transfer_target(&self) -> Option<NodeId> {
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
}
