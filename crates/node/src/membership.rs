//! Membership changes at runtime: adding and removing members, made by the
//! speaker through openraft's joint consensus (docs/design.md,
//! "Membership changes"), asked of any node.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use leasehold_api::{
    routes, AddMemberBody, ClusterAnswer, ErrorCode, MemberChange, Removed, RetireAnswer,
};
use leasehold_raft::errors::{ChangeMembershipError, ClientWriteError, RaftError};
use leasehold_raft::identity::StoreId;
use leasehold_raft::types::Command;
use leasehold_raft::{acked_ago, BasicNode, ChangeMembers, LogId, RaftMetrics, WatchReceiver};
use locktable::NodeId;

use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::node::Node;

/// How long the speaker waits for a new member to catch up with the log
/// before answering `503 not_caught_up` (it stays a learner; the same
/// request again goes on from there).
const CATCH_UP_WAIT: Duration = Duration::from_secs(10);
/// How long a change may take to commit before the speaker stops waiting.
const COMMIT_WAIT: Duration = Duration::from_secs(20);
/// How long a forwarded change may take, end to end.
const FORWARD_WAIT: Duration = Duration::from_secs(40);
/// Attempts at telling a removed member, a second apart.
const TELL_REMOVED_ATTEMPTS: u32 = 5;

impl Node {
    /// Makes `change` on the speaker, forwarded to it from any other node
    /// (but not from one that `forwarded` it here), and answers the
    /// cluster as the speaker sees it after.
    pub async fn change_members(
        self: &Arc<Self>,
        change: MemberChange,
        forwarded: bool,
    ) -> Result<ClusterAnswer, ApiError> {
        if let MemberChange::Add(body) = &change {
            leasehold_api::Body::validate(body)?;
        }
        if !self.is_leader() || self.is_removed() {
            if forwarded || self.is_removed() {
                return Err(ApiError::no_leader());
            }
            return self.forward(routes::MEMBERS, &change, FORWARD_WAIT).await;
        }
        let _writing = self.membership_writes.lock().await;
        match change {
            MemberChange::Add(AddMemberBody { id, addr, store }) => {
                let store = store.as_deref().map(parse_store).transpose()?;
                self.add_member(id, addr, store).await?
            }
            MemberChange::Remove { id } => self.remove_member(id).await?,
            MemberChange::Retire { id, store } => {
                let store = parse_store(&store)?;
                self.retire_member(id, store).await?
            }
        }
        Ok(self.cluster())
    }

    /// As the speaker: removes `id` if it runs on another data directory
    /// than `store`, which asks to rejoin under it, and that directory's
    /// process has not answered this speaker lately ([`RETIRE_QUIET`]):
    /// two processes under one id would otherwise take the healthy one
    /// out. Nothing if the id runs on `store` already, or is no member.
    async fn retire_member(&self, id: NodeId, store: StoreId) -> Result<(), ApiError> {
        let metrics = self.settled_metrics().await?;
        if metrics
            .membership_config
            .membership()
            .get_node(&id)
            .is_none()
        {
            return Ok(());
        }
        let known = self
            .identity
            .pinned(id)
            .or_else(|| self.identity.recorded(id));
        if known == Some(store) {
            // It rejoined on `store` already: this retirement came late.
            return Ok(());
        }
        // (A speaker that knows no directory for the id yet, as one elected
        // after the member died in a log without pins, removes it: the
        // asked member knew another one, and the new directory has not
        // joined, or this speaker would know it.)
        let quiet = RETIRE_QUIET.max(3 * Duration::from_millis(self.config.timings.heartbeat_ms));
        // The last answer, whatever came since: one heartbeat slower than
        // its timeout (a pause, a busy machine) must not make a live member
        // look gone.
        let answered = if id == self.id() {
            Some(Duration::ZERO)
        } else {
            self.peers
                .reach()
                .of(id)
                .and_then(|reach| reach.last_contact)
        };
        if let Some(ago) = answered.filter(|ago| *ago < quiet) {
            return Err(ApiError::new(
                ErrorCode::MemberExists,
                format!(
                    "member {id} still answers on its data directory{} (last {} ms ago): \
                     stop that process before starting another under its id with --rejoin",
                    known.map_or(String::new(), |k| format!(" {k}")),
                    ago.as_millis()
                ),
            ));
        }
        self.remove_member(id).await
    }

    /// As the speaker: adds `id` at `addr` as a learner, waits until it
    /// has caught up, then makes it a voter. With the node's `store` (its
    /// own join), first writes to the log that the id runs on it
    /// ([`Command::MemberStore`]), so that every member admits that
    /// directory under the id and no other. Asked again for a learner
    /// already added, it goes on from there; for a voter at that address
    /// on that directory, it does nothing; on another, it refuses (`409
    /// member_exists`): the member was wiped, and must be removed first.
    async fn add_member(
        &self,
        id: NodeId,
        addr: String,
        store: Option<StoreId>,
    ) -> Result<(), ApiError> {
        let metrics = self.settled_metrics().await?;
        let membership = metrics.membership_config.membership();
        let member = membership.get_node(&id);
        if let (Some(_), Some(store)) = (member, store) {
            self.refuse_another_store(id, store)?;
        }
        match member {
            Some(node) if node.addr != addr => {
                return Err(ApiError::new(
                    ErrorCode::MemberExists,
                    format!("member {id} is at {}, not {addr}", node.addr),
                ))
            }
            Some(_) if membership.voter_ids().any(|v| v == id) => {
                self.pin_store(id, store).await?;
                return Ok(());
            }
            Some(_) => self.pin_store(id, store).await?,
            None => {
                self.refuse_departed(id)?;
                self.pin_store(id, store).await?;
                if let Some((other, _)) = membership.nodes().find(|(_, n)| n.addr == addr) {
                    return Err(ApiError::new(
                        ErrorCode::MemberExists,
                        format!("member {other} is at {addr} already"),
                    ));
                }
                tracing::info!(member = id, %addr, "adding a member as a learner");
                let added = self.raft.add_learner(id, BasicNode::new(addr), false);
                within(COMMIT_WAIT, added).await?;
            }
        }
        self.wait_caught_up(id).await?;
        tracing::info!(member = id, "the new member caught up: making it a voter");
        let promote = ChangeMembers::AddVoterIds(BTreeSet::from([id]));
        within(COMMIT_WAIT, self.raft.change_membership(promote, false)).await?;
        Ok(())
    }

    /// Refuses a join of member `id` on `store` when the log or this
    /// speaker knows it on another directory: a wiped member.
    fn refuse_another_store(&self, id: NodeId, store: StoreId) -> Result<(), ApiError> {
        let known = self
            .identity
            .pinned(id)
            .or_else(|| self.identity.recorded(id));
        match known {
            Some(known) if known != store => Err(ApiError::new(
                ErrorCode::MemberExists,
                format!(
                    "member {id} runs on data directory {known}, not {store}: this one was \
                     wiped or replaced; remove the member, then add it again"
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Writes to the log that `id` runs on `store`, unless the log says so
    /// already (or no store is known: an operator's request).
    pub(crate) async fn pin_store(
        &self,
        id: NodeId,
        store: Option<StoreId>,
    ) -> Result<(), ApiError> {
        let Some(store) = store else { return Ok(()) };
        if self.identity.pinned(id) == Some(store) {
            return Ok(());
        }
        tracing::info!(member = id, %store, "recording the member's data directory in the log");
        let pin = Command::MemberStore { member: id, store };
        within(COMMIT_WAIT, self.raft.client_write(pin)).await?;
        Ok(())
    }

    /// Refuses to add `id` again while it is departed: a rebuild still reads
    /// (or counts missing) its old incarnation, which may hold the only
    /// other record of a lock, and a new one under the same id would be
    /// read in its place, with nothing.
    fn refuse_departed(&self, id: NodeId) -> Result<(), ApiError> {
        let departed = self.departed_with_time_left();
        let Some(gone) = departed.iter().find(|d| d.node == id) else {
            return Ok(());
        };
        Err(ApiError::new(
            ErrorCode::ChangeInProgress,
            format!(
                "node {id} left the cluster lately, and a rebuild reads what it held for \
                 --max-lease after it left: it can be added again in {} ms",
                gone.left_ms
            ),
        ))
    }

    /// Raft's metrics once no change is under way: a joint configuration
    /// left committed by a change a leader change cut short (openraft
    /// leaves it so) is finished first, as openraft's own second step
    /// does, with an empty `AddVoterIds`; a change still committing is
    /// `409 change_in_progress`.
    async fn settled_metrics(&self) -> Result<RaftMetrics, ApiError> {
        let metrics = self.raft.metrics().borrow_watched().clone();
        if !left_joint(&metrics)? {
            return Ok(metrics);
        }
        tracing::info!("finishing a membership change left joint");
        let finish = ChangeMembers::AddVoterIds(BTreeSet::new());
        within(COMMIT_WAIT, self.raft.change_membership(finish, false)).await?;
        Ok(self.raft.metrics().borrow_watched().clone())
    }

    /// Waits until learner `id` has every log entry this speaker has, up to
    /// [`CATCH_UP_WAIT`].
    async fn wait_caught_up(&self, id: NodeId) -> Result<(), ApiError> {
        let mut metrics = self.raft.metrics();
        let caught_up = |m: &RaftMetrics| {
            let matched = m
                .replication
                .as_ref()
                .and_then(|r| r.get(&id).cloned().flatten());
            matched.map(|l| l.index) >= m.last_log_index
        };
        let waited = tokio::time::timeout(CATCH_UP_WAIT, async {
            loop {
                if caught_up(&metrics.borrow_watched()) {
                    return true;
                }
                if metrics.changed().await.is_err() {
                    return false;
                }
            }
        })
        .await;
        match waited {
            Ok(true) => Ok(()),
            _ => Err(ApiError::new(
                ErrorCode::NotCaughtUp,
                format!(
                    "member {id} has not caught up with the log within {CATCH_UP_WAIT:?}; it \
                     stays a learner: is it running and reachable? Send the same request again"
                ),
            )),
        }
    }

    /// As the speaker: removes `id` (this node too: it then stops granting,
    /// and hands leadership on as it shuts down), and tells it.
    async fn remove_member(&self, id: NodeId) -> Result<(), ApiError> {
        let metrics = self.settled_metrics().await?;
        let membership = metrics.membership_config.membership();
        let Some(node) = membership.get_node(&id) else {
            return Err(ApiError::new(
                ErrorCode::UnknownMember,
                format!("no member has id {id}"),
            ));
        };
        let addr = node.addr.clone();
        let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
        // Copies go to voters only (a learner may never have caught up).
        let copies = self.copies();
        let voters_left = voters.len() - usize::from(voters.contains(&id));
        if voters_left < copies {
            return Err(ApiError::new(
                ErrorCode::WouldLoseQuorum,
                format!(
                    "every grant is kept by {copies} members (--copies): the cluster cannot \
                     shrink below {copies} voters"
                ),
            ));
        }
        let change = if voters.contains(&id) {
            let remaining: BTreeSet<NodeId> = voters.iter().copied().filter(|v| *v != id).collect();
            self.refuse_losing_quorum(&metrics, &remaining)?;
            ChangeMembers::RemoveVoters(BTreeSet::from([id]))
        } else {
            ChangeMembers::RemoveNodes(BTreeSet::from([id]))
        };
        tracing::info!(member = id, "removing a member");
        let written = within(COMMIT_WAIT, self.raft.change_membership(change, false)).await?;
        if id == self.id() {
            // openraft leaves a removed leader leading (`removed_leader_step_down:
            // Never`): this node stops granting now, and whoever runs it
            // shuts it down, which hands leadership on and waits until the
            // next speaker has read this node's locks.
            self.removed_from_cluster();
        } else {
            let config = written.log_id;
            self.tell_removed(
                Removed {
                    id,
                    term: metrics.current_term,
                    config: config.index(),
                    config_term: config.committed_leader_id().term,
                },
                addr,
            );
        }
        Ok(())
    }

    /// Refuses a change that leaves `remaining` voters of which fewer than
    /// a quorum answered this speaker lately: the change could not commit,
    /// or the cluster could not go on after it.
    fn refuse_losing_quorum(
        &self,
        metrics: &RaftMetrics,
        remaining: &BTreeSet<NodeId>,
    ) -> Result<(), ApiError> {
        if remaining.is_empty() {
            return Err(ApiError::new(
                ErrorCode::WouldLoseQuorum,
                "the last voter cannot be removed",
            ));
        }
        let recent = 2 * self.config.timings.leader_lease();
        let answering = remaining
            .iter()
            .filter(|v| {
                **v == self.id() || acked_ago(metrics, **v).is_some_and(|ago| ago <= recent)
            })
            .count();
        let quorum = remaining.len() / 2 + 1;
        if answering < quorum {
            return Err(ApiError::new(
                ErrorCode::WouldLoseQuorum,
                format!(
                    "only {answering} of the {} voters left would be answering (a quorum is \
                     {quorum}): bring members back, or add one, first",
                    remaining.len()
                ),
            ));
        }
        Ok(())
    }

    /// Tells the member `id` at `addr` that it was removed, in the
    /// background, a few times: it may have missed the entry that says so.
    fn tell_removed(&self, notice: Removed, addr: String) {
        let peers = Arc::clone(&self.peers);
        let id = notice.id;
        self.tasks.spawn(async move {
            let body = serde_json::to_vec(&notice).unwrap_or_default();
            for _ in 0..TELL_REMOVED_ATTEMPTS {
                let told = peers
                    .post_json(&addr, routes::REMOVED, body.clone(), Duration::from_secs(1))
                    .await;
                match told {
                    Ok(()) => return,
                    Err(e) => tracing::debug!(member = id, %e, "telling a removed member"),
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        });
    }

    /// Takes the speaker's `notice` that this node was removed, unless it
    /// names another node, or is older than this node's membership: a node
    /// not yet named by any configuration (joining), or named by one later
    /// than the removal (added again since), serves on.
    pub(crate) fn removal_notice(&self, notice: &Removed) -> Result<(), ApiError> {
        if notice.id != self.id() {
            return Err(ApiError::new(
                ErrorCode::BadRequest,
                format!("this is node {}, not {}", self.id(), notice.id),
            ));
        }
        let named = self.roster().addr(self.id()).is_some();
        let latest = *self
            .raft
            .metrics()
            .borrow_watched()
            .membership_config
            .log_id();
        let removal = LogId::new_term_index(notice.config_term, notice.config);
        let later = notice.config > 0 && latest.is_some_and(|latest| latest > removal);
        if !self.was_named() || (named && later) {
            return Err(ApiError::new(
                ErrorCode::MemberExists,
                format!(
                    "node {} is a member by a configuration later than its removal at {removal}",
                    self.id(),
                ),
            ));
        }
        tracing::warn!(term = notice.term, "the speaker says this node was removed");
        self.removed_from_cluster();
        Ok(())
    }

    /// This node is no member any more: it stops speaking and serving its
    /// clients, and whoever runs it hears of it
    /// ([`crate::RunningNode::removed`]).
    pub(crate) fn removed_from_cluster(&self) {
        if self.removed.send_replace(true) {
            return;
        }
        self.stop_speaking();
        tracing::warn!("this node was removed from the cluster: it serves no more");
    }

    /// Whether this node was removed from the cluster.
    pub fn is_removed(&self) -> bool {
        *self.removed.borrow()
    }

    /// Waits until this node is removed from the cluster.
    pub async fn wait_removed(&self) {
        let mut removed = self.removed.subscribe();
        let _ = removed.wait_for(|r| *r).await;
    }
}

/// Asks the members at `node.config.join`, in turn, to add this node,
/// until one has, or `stop`; then it is a member
/// ([`Node::confirm_joined`]). A refusal that asking again cannot change
/// (its id taken at another address, say) stops the node, as a refused
/// identity does. A member restarted (its data directory records that a
/// configuration named it) asks nothing: its membership is in its log.
pub(crate) async fn join(node: Arc<Node>, stop: CancellationToken) {
    if node.identity.was_named() == Some(true) {
        return;
    }
    let Some(addr) = node.config.peers.get(&node.id()).cloned() else {
        return;
    };
    // The member it comes to puts this node's store in from its stamp.
    let change = MemberChange::Add(AddMemberBody {
        id: node.id(),
        addr,
        store: None,
    });
    let mut pause = Duration::from_millis(200);
    loop {
        for target in &node.join_targets() {
            let asked = node
                .peers
                .call::<_, ClusterAnswer>(target, routes::JOIN, &change, FORWARD_WAIT)
                .await;
            match asked {
                Ok(Ok(_)) => {
                    tracing::info!(through = %target, "joined the cluster");
                    node.confirm_joined();
                    node.identity.set_rejoining(false);
                    return;
                }
                Ok(Err(refused)) if !join_may_retry(refused.error) => {
                    let why = format!("the cluster refused to add this node: {refused}");
                    node.identity.refuse_self(why);
                    return;
                }
                Ok(Err(refused)) => {
                    tracing::info!(through = %target, %refused, "joining: asking again")
                }
                // Rejoining, and the members still know this id on its old
                // directory (a member that answered the retirement could not
                // tell): ask for the retirement again.
                Err(e)
                    if node.identity.is_rejoining()
                        && e.kind()
                            == crate::peers::PeerErrorKind::Refused(
                                leasehold_raft::identity::RefusedAs::StoreChanged,
                            ) =>
                {
                    tracing::info!(through = %target, "joining: the old directory is still known; asking for its removal again");
                    if !retire_old_self(&node, &stop).await {
                        return;
                    }
                }
                Err(e) => tracing::info!(through = %target, %e, "joining: no answer"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.cancelled() => return,
        }
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

/// On a new data directory with `--rejoin`, before Raft runs: asks the
/// members, in turn, to remove this id if they know it on another data
/// directory (the old one was lost), until one answers. Then this node
/// joins if the cluster was formed (under its id again, once the departed
/// wait of the removal has passed: the join is answered `409
/// change_in_progress` until then, and asks again), or forms it with its
/// peers if not. Whether to go on (`false`: stopping).
pub(crate) async fn retire_old_self(node: &Node, stop: &CancellationToken) -> bool {
    let targets = node.join_targets();
    if targets.is_empty() {
        // A single node, or a restart with neither --peers nor --join:
        // no one to ask, and no one that could know another directory.
        node.identity.set_rejoining(false);
        return true;
    }
    let mut pause = Duration::from_millis(200);
    loop {
        for target in &targets {
            let asked = node
                .peers
                .call::<_, RetireAnswer>(
                    target,
                    leasehold_raft::routes::RETIRE_SELF,
                    &(),
                    FORWARD_WAIT,
                )
                .await;
            match asked {
                Ok(Ok(answer)) => {
                    if answer.removed {
                        tracing::warn!(
                            through = %target,
                            "the cluster knew this node's id on another data directory, \
                             now removed: joining again under it"
                        );
                    }
                    if answer.cluster {
                        node.become_joiner();
                    } else {
                        node.identity.set_rejoining(false);
                    }
                    return true;
                }
                Ok(Err(refused)) => {
                    tracing::info!(through = %target, %refused, "rejoining: asking again")
                }
                Err(e) => tracing::info!(through = %target, %e, "rejoining: no answer"),
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.cancelled() => return false,
        }
        pause = (pause * 2).min(Duration::from_secs(5));
    }
}

impl Node {
    /// A node on a new data directory, stamped `stamp`, asks that its id's
    /// old directory be removed (`RETIRE_SELF`): removed (through
    /// the speaker) if a configuration names the id and this node knows it
    /// on another directory; answered with whether the cluster was formed.
    pub(crate) async fn retire_for(
        self: &Arc<Self>,
        stamp: leasehold_raft::identity::Stamp,
    ) -> Result<RetireAnswer, ApiError> {
        let id = stamp.from;
        if id == self.id() {
            return Err(ApiError::bad_request(
                "a node asks its own id's retirement of the others",
            ));
        }
        // Read without Raft's core, which may not run yet here (every
        // member of a cluster's first start, `--rejoin` among its flags,
        // asks the others before its Raft runs).
        let metrics = self.raft.metrics().borrow_watched().clone();
        let membership = metrics.membership_config.membership();
        if membership.nodes().next().is_none() {
            if self.identity.cluster().is_some() {
                // A member of a formed cluster whose Raft does not run yet
                // (restarting) does not know the members: ask another.
                return Err(ApiError::new(
                    ErrorCode::NoLeader,
                    "this member is starting and does not know the members yet: ask another",
                ));
            }
            return Ok(RetireAnswer {
                cluster: false,
                removed: false,
            });
        }
        let named = membership.get_node(&id).is_some();
        let known = self
            .identity
            .pinned(id)
            .or_else(|| self.identity.recorded(id));
        if !named || known.is_none_or(|known| known == stamp.store) {
            return Ok(RetireAnswer {
                cluster: true,
                removed: false,
            });
        }
        // From protocol 2 the speaker is told which directory asks, and
        // checks again under its membership lock: a retirement that
        // arrives after the rejoin removes nothing.
        let change = if self.data_revs() {
            MemberChange::Retire {
                id,
                store: stamp.store.to_string(),
            }
        } else {
            MemberChange::Remove { id }
        };
        let after = self.change_members(change, false).await?;
        Ok(RetireAnswer {
            cluster: true,
            removed: after.members.iter().all(|m| m.id != id),
        })
    }
}

/// How long a member's old data directory must have been silent (no
/// answer to the speaker's Raft messages) before a node on a new one may
/// retire it (at least three heartbeats).
const RETIRE_QUIET: Duration = Duration::from_secs(2);

/// How often the speaker looks for members whose data directory the log
/// does not say yet.
const PIN_EVERY: Duration = Duration::from_secs(2);

/// As long as this node runs: while it speaks, writes to the log which
/// data directory each member runs on, for those the log does not say yet
/// (the members a cluster was formed with, or added by an operator before
/// they joined), as this speaker knows them: it has exchanged messages
/// with each. Every member then refuses any other directory under those
/// ids, not only those that happened to hear from the member first.
pub(crate) async fn pin_members(node: Arc<Node>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(PIN_EVERY) => {}
            _ = stop.cancelled() => return,
        }
        if !node.is_leader() || node.is_removed() {
            continue;
        }
        let roster = node.roster();
        for id in roster.ids() {
            if node.identity.pinned(id).is_some() {
                continue;
            }
            let known = if id == node.id() {
                Some(node.identity.store())
            } else {
                node.identity.recorded(id)
            };
            if known.is_none() || !node.is_leader() {
                continue;
            }
            // Not for a member removed since the roster was read: no
            // membership change runs while the pin is written.
            let _writing = node.membership_writes.lock().await;
            let metrics = node.raft.metrics().borrow_watched().clone();
            if metrics
                .membership_config
                .membership()
                .get_node(&id)
                .is_none()
            {
                continue;
            }
            if let Err(e) = node.pin_store(id, known).await {
                tracing::debug!(member = id, e = %e.body.message, "recording a member's data directory");
                break;
            }
        }
        agree_protocol(&node).await;
    }
}

/// While this node speaks: once every member of the latest and the
/// committed configuration, and every member departed within a lease (a
/// rebuild still reads it), offered a protocol version above the
/// cluster's, each heard lately by this process, appends
/// [`Command::Protocol`], from which on the cluster speaks it
/// (`leasehold_raft::version`). No membership change runs meanwhile, and
/// the members are read from Raft itself, as appended.
async fn agree_protocol(node: &Node) {
    let _writing = node.membership_writes.lock().await;
    let metrics = node.raft.metrics().borrow_watched().clone();
    let mut members: BTreeSet<NodeId> = metrics
        .membership_config
        .membership()
        .nodes()
        .chain(metrics.committed_membership_config.membership().nodes())
        .map(|(id, _)| *id)
        .collect();
    members.extend(node.departed().into_iter().map(|(id, _)| id));
    if node.sabotage().agree_alone {
        members = BTreeSet::from([node.id()]);
    }
    // Heard within a few of the speaker's rounds: a member down, or heard
    // only before it restarted on another build, blocks the agreement.
    let lately = PIN_EVERY * 2;
    let Some(version) = node
        .identity
        .versions()
        .to_agree(node.id(), &members, lately)
    else {
        return;
    };
    if !node.is_leader() {
        return;
    }
    match within(
        COMMIT_WAIT,
        node.raft.client_write(Command::Protocol(version)),
    )
    .await
    {
        Ok(_) => tracing::info!(version, "every member speaks protocol {version}: agreed"),
        Err(e) => tracing::debug!(version, e = %e.body.message, "agreeing a protocol version"),
    }
}

/// Whether a join refused with `code` may succeed if asked again: a
/// refusal of this node's id or address (or of the request) cannot.
fn join_may_retry(code: ErrorCode) -> bool {
    !matches!(
        code,
        ErrorCode::MemberExists | ErrorCode::BadRequest | ErrorCode::Unauthorized
    )
}

/// Whether `metrics` show a joint configuration left committed (a change
/// a leader change cut short), to finish before the next change; `409
/// change_in_progress` while the latest configuration is not committed.
fn left_joint(metrics: &RaftMetrics) -> Result<bool, ApiError> {
    let uncommitted =
        metrics.membership_config.log_id() != metrics.committed_membership_config.log_id();
    if uncommitted {
        return Err(change_in_progress());
    }
    let halves = metrics.membership_config.membership().get_joint_config();
    Ok(halves.len() > 1)
}

/// A store id as an add's body carries it (32 hex digits).
fn parse_store(hex: &str) -> Result<StoreId, ApiError> {
    u128::from_str_radix(hex, 16)
        .ok()
        .filter(|_| hex.len() == 32)
        .map(StoreId)
        .ok_or_else(|| ApiError::bad_request(format!("{hex:?} is not a data directory's id")))
}

fn change_in_progress() -> ApiError {
    ApiError::new(
        ErrorCode::ChangeInProgress,
        "another membership change is under way; try again once it is done",
    )
}

/// Runs a membership write for at most `wait`, its errors as API errors.
async fn within<T>(
    wait: Duration,
    write: impl std::future::Future<Output = Result<T, RaftError<ClientWriteError>>>,
) -> Result<T, ApiError> {
    match tokio::time::timeout(wait, write).await {
        Ok(Ok(written)) => Ok(written),
        Ok(Err(RaftError::APIError(ClientWriteError::ChangeMembershipError(e)))) => Err(match e {
            ChangeMembershipError::InProgress(_) => change_in_progress(),
            other => ApiError::new(ErrorCode::BadRequest, other.to_string()),
        }),
        Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_)))) => {
            Err(ApiError::no_leader())
        }
        Ok(Err(e)) => Err(ApiError::internal(format!(
            "the membership change failed: {e}"
        ))),
        Err(_) => Err(ApiError::new(
            ErrorCode::ChangeInProgress,
            format!("the change did not commit within {wait:?}; it may still: see GET /v1/cluster"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use leasehold_raft::{LogId, StoredMembership};
    use openraft::Membership;

    use super::*;

    fn metrics(halves: Vec<BTreeSet<NodeId>>, at: u64, committed_at: u64) -> RaftMetrics {
        let nodes: BTreeMap<NodeId, BasicNode> = (1..=4)
            .map(|id| (id, BasicNode::new(format!("n{id}:1"))))
            .collect();
        let membership = Membership::new(halves, nodes).unwrap();
        let log_id = |index| Some(LogId::new_term_index(1, index));
        let mut metrics = RaftMetrics::new_initial(1);
        metrics.membership_config = Arc::new(StoredMembership::new(log_id(at), membership.clone()));
        metrics.committed_membership_config =
            Arc::new(StoredMembership::new(log_id(committed_at), membership));
        metrics
    }

    #[test]
    fn a_joint_configuration_left_committed_is_finished_first() {
        let old = BTreeSet::from([1, 2, 3]);
        let new = BTreeSet::from([1, 2, 4]);
        assert_eq!(
            left_joint(&metrics(vec![old.clone()], 5, 5)).ok(),
            Some(false)
        );
        assert_eq!(
            left_joint(&metrics(vec![old.clone(), new.clone()], 5, 5)).ok(),
            Some(true)
        );
        let uncommitted = left_joint(&metrics(vec![old, new], 6, 5)).unwrap_err();
        assert_eq!(uncommitted.body.error, ErrorCode::ChangeInProgress);
    }
}
