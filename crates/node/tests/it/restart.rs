//! A (re)started member takes part in no election until the longest leader
//! lease it may have backed has passed: openraft reloads a vote with a zero
//! lease on restart and would grant a vote at once, while an old speaker's
//! guard still counts on this member's last acknowledgement.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use leasehold_node::NodeConfig;
use leasehold_raft::{LogId, RaftTimings, Vote, WatchReceiver};
use openraft::raft::VoteRequest;
use tokio::net::TcpListener;

fn config(id: u64, peers: &BTreeMap<u64, String>, dir: &std::path::Path) -> NodeConfig {
    NodeConfig::new(
        id,
        peers.clone(),
        dir.join(format!("node-{id}")),
        "restart-test",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_member_answers_no_vote_before_a_leader_lease_has_passed() {
    let timings = RaftTimings::default();
    let answered_after = vote_answered_after_restart(timings, timings).await;
    let lease = timings.leader_lease();
    assert!(
        answered_after >= lease,
        "a restarted member answered a vote {answered_after:?} after it started, before a \
         leader lease of {lease:?}"
    );
}

/// Timings lowered by a restart (a rolling change, followers first): the
/// member may have acknowledged a heartbeat under its old, longer lease,
/// which the speaker's guard counts on. Its data directory records the
/// lease it ran with, and it waits the longer one out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_restarted_with_a_shorter_lease_waits_out_the_one_it_ran_with() {
    let long = RaftTimings {
        heartbeat_ms: 50,
        election_min_ms: 600,
        election_max_ms: 1_500,
    };
    let answered_after = vote_answered_after_restart(long, RaftTimings::default()).await;
    assert!(
        answered_after >= long.leader_lease(),
        "a member restarted with a {:?} lease answered a vote {answered_after:?} after it \
         started, before the {:?} it ran with",
        RaftTimings::default().leader_lease(),
        long.leader_lease()
    );
}

/// Three members run with `before`; a follower is restarted with `after`
/// and asked for a vote at once: how long after its start it answered.
async fn vote_answered_after_restart(before: RaftTimings, after: RaftTimings) -> Duration {
    let config = |id: u64, peers: &BTreeMap<u64, String>, dir: &std::path::Path| {
        config(id, peers, dir).with_timings(before)
    };
    let dir = tempfile::tempdir().unwrap();
    let (listeners, peers) = crate::common::listeners(3).await;
    let mut nodes = BTreeMap::new();
    for (listener, id) in listeners.into_iter().zip(1..) {
        let node = leasehold_node::start(config(id, &peers, dir.path()), listener)
            .await
            .unwrap();
        nodes.insert(id, node);
    }
    // Wait until every member follows one leader (each has a vote on disk).
    let start = Instant::now();
    let leader = loop {
        let seen: Vec<Option<u64>> = nodes
            .values()
            .map(|n| n.node().raft().metrics().borrow_watched().current_leader)
            .collect();
        if let Some(Some(leader)) = seen.first() {
            if seen.iter().all(|l| *l == Some(*leader)) {
                break *leader;
            }
        }
        assert!(start.elapsed() < Duration::from_secs(30), "no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let follower = *nodes.keys().find(|&&id| id != leader).unwrap();
    let term = nodes[&follower]
        .node()
        .raft()
        .metrics()
        .borrow_watched()
        .current_term;

    let stopped = nodes.remove(&follower).unwrap();
    let addr = stopped.addr();
    stopped.shutdown().await;
    let listener = TcpListener::bind(addr).await.unwrap();
    let restarted_at = Instant::now();
    let restarted = leasehold_node::start(
        config(follower, &peers, dir.path()).with_timings(after),
        listener,
    )
    .await
    .expect("a stopped node's data directory can be opened again");
    eprintln!("reopened after {:?}", restarted_at.elapsed());

    // A candidate with a newer term and a longer log asks at once.
    let candidate = *nodes.keys().find(|&&id| id != leader).unwrap();
    let request = VoteRequest::new(
        Vote::new(term + 10, candidate),
        Some(LogId::new_term_index(term + 10, 1_000_000)),
    );
    let answer = restarted.node().raft().vote(request).await.unwrap();
    let answered_after = restarted_at.elapsed();
    eprintln!(
        "answered after {answered_after:?}, granted: {}",
        answer.is_granted_to(&Vote::new(term + 10, candidate))
    );
    restarted.shutdown().await;
    for (_, node) in nodes {
        node.shutdown().await;
    }
    answered_after
}

/// A node whose Raft core stops while it runs says so (`serve` then exits
/// non-zero for its supervisor to restart it) instead of answering 503
/// for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_whose_raft_core_stops_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let peers = BTreeMap::from([(1, listener.local_addr().unwrap().to_string())]);
    let running = leasehold_node::start(config(1, &peers, dir.path()), listener)
        .await
        .unwrap();
    let failed = tokio::time::timeout(Duration::from_millis(500), running.failed()).await;
    assert!(failed.is_err(), "a healthy node does not report a failure");
    running.node().raft().shutdown().await.unwrap();
    let why = tokio::time::timeout(Duration::from_secs(10), running.failed())
        .await
        .expect("the stop is noticed");
    assert!(!why.is_empty());
    running.shutdown().await;
}
