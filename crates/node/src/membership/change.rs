//! The changes themselves, made by the speaker (forwarded to it from any
//! other node): adding a member, removing one, and retiring a member's
//! lost data directory.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use leasehold_api::{routes, AddMemberBody, ClusterAnswer, ErrorCode, MemberChange, Removed};
use leasehold_raft::identity::StoreId;
use leasehold_raft::{acked_ago, BasicNode, ChangeMembers, RaftMetrics, WatchReceiver};
use locktable::NodeId;

use crate::error::ApiError;
use crate::node::Node;

use super::commit::{within, COMMIT_WAIT};

/// How long the speaker waits for a new member to catch up with the log
/// before answering `503 not_caught_up` (it stays a learner; the same
/// request again goes on from there).
const CATCH_UP_WAIT: Duration = Duration::from_secs(10);

/// How long a forwarded change may take, end to end.
pub(super) const FORWARD_WAIT: Duration = Duration::from_secs(40);

/// Attempts at telling a removed member, a second apart.
const TELL_REMOVED_ATTEMPTS: u32 = 5;

/// How long a member's old data directory must have been silent (no
/// answer to the speaker's Raft messages) before a node on a new one may
/// retire it (at least three heartbeats).
const RETIRE_QUIET: Duration = Duration::from_secs(2);

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
    ///
    /// [`Command::MemberStore`]: leasehold_raft::types::Command::MemberStore
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

    /// Refuses to add `id` again while it is departed: a rebuild still reads
    /// (or counts missing) its old incarnation, which may hold the only
    /// other record of a lock, and a new one under the same id would be
    /// read in its place, with nothing.
    fn refuse_departed(&self, id: NodeId) -> Result<(), ApiError> {
        let Some(wait) = self.added_again_in(id) else {
            return Ok(());
        };
        Err(ApiError::new(
            ErrorCode::ChangeInProgress,
            format!(
                "node {id} left the cluster lately, and a rebuild reads what it held for \
                 --max-lease after it left: it can be added again in {} ms",
                leasehold_api::millis_ceil(wait)
            ),
        ))
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
        let written = within(COMMIT_WAIT, self.raft.change_membership(change, false)).await;
        if id == self.id() && written.is_err() && self.removal_committed() {
            // Its runner stopped this node once the change committed,
            // before openraft answered it.
            return Ok(());
        }
        let written = written?;
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

    /// Whether a committed configuration no longer names this node.
    fn removal_committed(&self) -> bool {
        let metrics = self.raft.metrics();
        let committed = metrics.borrow_watched().committed_membership_config.clone();
        committed.membership().get_node(&self.id()).is_none()
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
}

/// A store id as an add's body carries it (32 hex digits).
fn parse_store(hex: &str) -> Result<StoreId, ApiError> {
    u128::from_str_radix(hex, 16)
        .ok()
        .filter(|_| hex.len() == 32)
        .map(StoreId)
        .ok_or_else(|| ApiError::bad_request(format!("{hex:?} is not a data directory's id")))
}
