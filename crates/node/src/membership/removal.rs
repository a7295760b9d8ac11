//! This node's own removal from the cluster: told by the speaker, or seen
//! in a configuration, and waited on by whoever runs the node.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use leasehold_api::{ErrorCode, Removed};
use leasehold_raft::{LogId, WatchReceiver};

use super::commit::COMMIT_WAIT;
use crate::error::ApiError;
use crate::node::Node;

impl Node {
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

    /// This node, the speaker, appended the configuration that removes it:
    /// it stops granting now, as a removed node does, and is removed once
    /// that configuration commits (the roster follower sees it), or
    /// [`COMMIT_WAIT`] later at the latest (a partition may keep the
    /// commit from it for good: another member commits it, and no member
    /// sends this one anything any more). Whoever runs it stops it then;
    /// stopping it sooner would cut its own change short.
    pub(crate) fn removing_self(self: &Arc<Self>) {
        if self.removing_self.swap(true, Ordering::Relaxed) {
            return;
        }
        self.stop_speaking();
        tracing::warn!("this node's removal is appended: it stops granting, and once it commits");
        let (node, stop) = (Arc::clone(self), self.stop.clone());
        self.tasks.spawn(async move {
            tokio::select! {
                _ = tokio::time::sleep(COMMIT_WAIT) => node.removed_from_cluster(),
                _ = stop.cancelled() => {}
            }
        });
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
