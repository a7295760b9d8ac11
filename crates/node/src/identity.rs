//! The node's side of data directory identity (see
//! [`leasehold_raft::identity`]): asking the members at start whether they
//! know this directory, and bootstrapping the cluster only among members
//! that have none yet.

use std::sync::Arc;
use std::time::Duration;

use leasehold_raft::identity::{ClusterId, RefusedAs};

use crate::node::Node;
use crate::peers::Probe;
use tokio_util::sync::CancellationToken;

/// How long each member has to answer a probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Asks every other member whether it knows this data directory; an error
/// says why this node must not start. Members that do not answer (a cold
/// start of the whole cluster) do not stop it: their refusal comes with
/// their first answer, and stops it then (see [`crate::RunningNode::failed`]).
///
/// Answers whether any member answered; if none did, run
/// [`probe_until_answered`] so that a refusal still stops the node even if
/// this node never sends the members anything itself (a follower only
/// answers).
pub(crate) async fn check_at_start(node: &Node) -> Result<bool, String> {
    let probes = probe_all(node).await;
    verdict(&probes, node.roster().len(), node.identity.is_rejoining())?;
    if node.identity.is_refused() {
        return Err(node.identity.refused().await);
    }
    Ok(probes.is_empty() || probes.iter().any(|p| *p != Probe::Silent))
}

/// Probes the members every second until one answers; a refusal marks this
/// node refused (see [`crate::RunningNode::failed`]).
pub(crate) async fn probe_until_answered(node: Arc<Node>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.cancelled() => return,
        }
        let probes = probe_all(&node).await;
        if let Err(why) = verdict(&probes, node.roster().len(), node.identity.is_rejoining()) {
            node.identity.refuse_self(why);
            return;
        }
        if probes.iter().any(|p| *p != Probe::Silent) {
            return;
        }
    }
}

/// Whether the answers to this node's probes let it start, in a cluster of
/// `members`: no member may know it on another data directory, and fewer
/// than a quorum may say it belongs to another cluster (either side of a
/// cluster mismatch may be the stray one; a quorum decides). A node
/// `rejoining` (`--rejoin`) expects the first refusal: it asks for its old
/// directory's removal before Raft runs.
pub(crate) fn verdict(probes: &[Probe], members: usize, rejoining: bool) -> Result<(), String> {
    if !rejoining && probes.contains(&Probe::Refused(RefusedAs::StoreChanged)) {
        return Err(
            "a member knew this node on another data directory: this one was wiped or replaced, \
             and has forgotten its votes; restore the old directory, or remove this member \
             and add it again"
                .to_string(),
        );
    }
    let foreign = probes
        .iter()
        .filter(|p| **p == Probe::Refused(RefusedAs::ForeignCluster))
        .count();
    if foreign >= quorum(members) {
        return Err(format!(
            "{foreign} of {members} members belong to another cluster than this data directory"
        ));
    }
    Ok(())
}

fn quorum(members: usize) -> usize {
    members / 2 + 1
}

async fn probe_all(node: &Node) -> Vec<Probe> {
    let roster = node.roster();
    let calls = roster
        .members()
        .filter(|(id, _)| *id != node.id())
        .map(|(_, addr)| node.peers.probe(addr, PROBE_TIMEOUT));
    futures::future::join_all(calls).await
}

/// Whether the bootstrapping member may form the cluster now: no member
/// belongs to a cluster other than `ours`, and a quorum (this node counted)
/// answered. A member that already belongs to another cluster means it
/// formed without this node: never form a second one.
pub(crate) fn may_bootstrap(
    ours: Option<ClusterId>,
    probes: &[Probe],
    members: usize,
) -> Option<bool> {
    let mut answered = 1;
    for probe in probes {
        match probe {
            Probe::Admitted { cluster: Some(c) } if Some(*c) != ours => return None,
            Probe::Admitted { .. } => answered += 1,
            Probe::Refused(_) => return None,
            Probe::Silent => {}
        }
    }
    Some(answered >= quorum(members))
}

/// Waits until this node (the lowest id) may bootstrap the cluster, and
/// names it; `None` if the cluster exists already, this node is refused,
/// or it is stopping.
pub(crate) async fn await_bootstrap(node: &Node, stop: CancellationToken) -> Option<ClusterId> {
    let mut pause = Duration::from_millis(100);
    loop {
        if node.raft.is_initialized().await.unwrap_or(true) || node.identity.is_refused() {
            return None;
        }
        let ours = node.identity.cluster();
        let probes = probe_all(node).await;
        match may_bootstrap(ours, &probes, node.roster().len()) {
            None => {
                tracing::info!("not bootstrapping: another member belongs to a cluster already");
                return None;
            }
            Some(true) => match node.identity.bootstrap().await {
                Ok(cluster) => return Some(cluster),
                Err(e) => tracing::error!(%e, "could not record the cluster's id"),
            },
            Some(false) => {
                tracing::info!("waiting for a quorum of members to bootstrap the cluster");
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = stop.cancelled() => return None,
        }
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STORE: Probe = Probe::Refused(RefusedAs::StoreChanged);
    const FOREIGN: Probe = Probe::Refused(RefusedAs::ForeignCluster);
    const BLANK: Probe = Probe::Admitted { cluster: None };

    #[test]
    fn one_member_that_knew_another_directory_stops_a_start() {
        assert!(verdict(&[BLANK, STORE], 3, false).is_err());
        assert!(verdict(&[Probe::Silent, STORE], 3, false).is_err());
        // Replacing its lost directory (`--rejoin`), it asks for the old
        // one's removal instead.
        assert!(verdict(&[BLANK, STORE], 3, true).is_ok());
    }

    #[test]
    fn a_quorum_saying_another_cluster_stops_a_start_a_minority_does_not() {
        assert!(verdict(&[FOREIGN, FOREIGN], 3, false).is_err());
        assert!(verdict(&[FOREIGN, BLANK], 3, false).is_ok());
        assert!(verdict(&[FOREIGN, Probe::Silent], 3, false).is_ok());
        assert!(verdict(&[FOREIGN, FOREIGN, BLANK, BLANK], 5, false).is_ok());
        assert!(verdict(&[FOREIGN, FOREIGN, FOREIGN, BLANK], 5, false).is_err());
        assert!(verdict(&[Probe::Silent, Probe::Silent], 3, false).is_ok());
    }

    #[test]
    fn bootstrap_waits_for_a_quorum_and_never_forms_a_second_cluster() {
        let c = ClusterId(1);
        assert_eq!(
            may_bootstrap(None, &[Probe::Silent, Probe::Silent], 3),
            Some(false)
        );
        assert_eq!(may_bootstrap(None, &[BLANK, Probe::Silent], 3), Some(true));
        assert_eq!(may_bootstrap(None, &[], 1), Some(true));
        let member_of = |c| Probe::Admitted { cluster: Some(c) };
        assert_eq!(may_bootstrap(None, &[BLANK, member_of(c)], 3), None);
        // A member that learned this node's own name from its probe.
        assert_eq!(
            may_bootstrap(Some(c), &[member_of(c), Probe::Silent], 3),
            Some(true)
        );
        assert_eq!(
            may_bootstrap(Some(c), &[member_of(ClusterId(2)), BLANK], 3),
            None
        );
        assert_eq!(may_bootstrap(None, &[BLANK, FOREIGN], 3), None);
    }
}
