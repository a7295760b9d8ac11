//! Writing to the log as the speaker: a membership change, or a member's
//! data directory, within its wait, its errors as API errors.

use std::collections::BTreeSet;
use std::time::Duration;

use leasehold_api::ErrorCode;
use leasehold_raft::errors::{ChangeMembershipError, ClientWriteError, RaftError};
use leasehold_raft::identity::StoreId;
use leasehold_raft::types::Command;
use leasehold_raft::{ChangeMembers, RaftMetrics, WatchReceiver};
use locktable::NodeId;

use crate::error::ApiError;
use crate::node::Node;

/// How long a change may take to commit before the speaker stops waiting.
pub(crate) const COMMIT_WAIT: Duration = Duration::from_secs(20);

impl Node {
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

    /// Raft's metrics once no change is under way: a joint configuration
    /// left committed by a change a leader change cut short (openraft
    /// leaves it so) is finished first, as openraft's own second step
    /// does, with an empty `AddVoterIds`; a change still committing is
    /// `409 change_in_progress`.
    pub(super) async fn settled_metrics(&self) -> Result<RaftMetrics, ApiError> {
        let metrics = self.raft.metrics().borrow_watched().clone();
        if !left_joint(&metrics)? {
            return Ok(metrics);
        }
        tracing::info!("finishing a membership change left joint");
        let finish = ChangeMembers::AddVoterIds(BTreeSet::new());
        within(COMMIT_WAIT, self.raft.change_membership(finish, false)).await?;
        Ok(self.raft.metrics().borrow_watched().clone())
    }
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

/// `409 change_in_progress`: another change is under way.
pub(super) fn change_in_progress() -> ApiError {
    ApiError::new(
        ErrorCode::ChangeInProgress,
        "another membership change is under way; try again once it is done",
    )
}

/// Runs a membership write for at most `wait`, its errors as API errors.
pub(super) async fn within<T>(
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
    use std::sync::Arc;

    use leasehold_raft::{BasicNode, LogId, StoredMembership};
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
