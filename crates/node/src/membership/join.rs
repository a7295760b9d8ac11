//! A node joining the cluster: asking the members to add it, and, on a new
//! data directory with `--rejoin`, asking them first to retire its id's
//! lost one.

use std::sync::Arc;
use std::time::Duration;

use leasehold_api::{routes, AddMemberBody, ClusterAnswer, ErrorCode, MemberChange, RetireAnswer};
use leasehold_raft::WatchReceiver;
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::node::Node;

use super::change::FORWARD_WAIT;

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

/// Whether a join refused with `code` may succeed if asked again: a
/// refusal of this node's id or address (or of the request) cannot.
fn join_may_retry(code: ErrorCode) -> bool {
    !matches!(
        code,
        ErrorCode::MemberExists | ErrorCode::BadRequest | ErrorCode::Unauthorized
    )
}
