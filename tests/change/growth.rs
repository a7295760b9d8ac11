//! Growth: from one node to three, then a crash; a single node beside an
//! absent learner.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{rival_until, wait_for_voters};
use crate::support::{self, Cluster, PATIENCE, TOKEN};

/// A lock granted by a single node with one record (copies 1), then two
/// nodes join and the cluster's copies become two, then the first node is
/// killed before the holder renews. The lock's only record died with it:
/// the next speaker must count the grant's one copy, not the cluster's two
/// of now, and hold new grants back in strict mode until its lease ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn growth_from_one_node_then_a_crash_grants_nothing_twice() {
    const LEASE: Duration = Duration::from_secs(20);
    let mut cluster =
        Cluster::start_with(1, &["--rebuild-mode", "strict", "--max-lease", "20000"]).await;
    let granted_at = Instant::now();
    let lock = cluster
        .must_acquire(
            1,
            "jobs/grown",
            json!({ "lease_ms": LEASE.as_millis() as u64, "holder": "w1" }),
        )
        .await;
    cluster.spawn_joining(2);
    wait_for_voters(&cluster, 1, &[1, 2]).await;
    cluster.spawn_joining(3);
    wait_for_voters(&cluster, 1, &[1, 2, 3]).await;
    assert!(
        granted_at.elapsed() < LEASE - Duration::from_secs(5),
        "the growth took too long for the test to mean anything"
    );
    cluster.kill(1);

    let (speaker, _) = cluster.speaker_other_than(Some(1)).await;
    let (_, view) = cluster.get(speaker, "/v1/cluster").await;
    let report = &view["last_rebuild"];
    assert_eq!(
        report["all_seen"],
        json!(false),
        "node 1 made the grant with one copy: missing it, the rebuild has not seen every grant: {report}"
    );
    assert!(
        report["held_back_ms"].as_u64().unwrap_or(0) >= LEASE.as_millis() as u64,
        "{report}"
    );
    // Nobody else holds the name while w1's lease may run.
    let other = cluster.others(speaker);
    for via in [speaker, other[0]] {
        let granted = rival_until(
            &cluster,
            via,
            "jobs/grown",
            granted_at + LEASE - Duration::from_secs(2),
        )
        .await;
        assert!(
            granted.is_none(),
            "granted twice through {via} while {lock} may run: {granted:?}"
        );
    }
    // Once the hold is over, the name is granted again.
    let start = Instant::now();
    loop {
        let (status, body) = cluster
            .post(
                speaker,
                "/v1/locks/acquire",
                json!({ "name": "jobs/grown", "holder": "w2" }),
            )
            .await;
        if status == 200 {
            break;
        }
        assert!(start.elapsed() < PATIENCE, "never granted again: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// An operator adds a member before starting it (documented as allowed):
/// the single node goes on granting and renewing with its one record,
/// since a learner that never ran can hold no copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_with_an_absent_learner_keeps_granting() {
    let cluster = Cluster::start(1).await;
    let lock = cluster
        .must_acquire(1, "jobs/before", json!({ "lease_ms": 30_000 }))
        .await;
    let absent = support::free_addr();
    let (status, body) = support::answer(
        cluster
            .http
            .post(cluster.url(1, "/v1/cluster/members"))
            .header("x-leasehold-token", TOKEN)
            .json(&json!({ "id": 2, "addr": absent }))
            .timeout(Duration::from_secs(40)),
    )
    .await;
    assert!(
        status == 503 || status == 200,
        "adding a member not running yet leaves it a learner: {status} {body}"
    );
    let (_, view) = cluster.get(1, "/v1/cluster").await;
    assert!(
        view["members"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == json!(2) && m["role"] == json!("learner")),
        "{view}"
    );
    let fresh = cluster
        .must_acquire(1, "jobs/after", json!({ "lease_ms": 30_000 }))
        .await;
    assert_eq!(fresh["node"], json!(1));
    for held in [&lock, &fresh] {
        let (status, renewed) = cluster
            .post(
                1,
                "/v1/locks/renew",
                json!({ "name": held["name"], "id": held["id"] }),
            )
            .await;
        assert_eq!(status, 200, "renewal with an absent learner: {renewed}");
        assert_eq!(renewed["lock"]["fence"], held["fence"]);
    }
}
