//! What the speaker keeps up while it speaks: each member's data directory
//! in the log, and the protocol version every member offers.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use leasehold_raft::types::Command;
use leasehold_raft::WatchReceiver;
use locktable::NodeId;
use tokio_util::sync::CancellationToken;

use crate::node::Node;

use super::commit::{within, COMMIT_WAIT};

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
    members.extend(node.departed());
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
