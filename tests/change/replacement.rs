//! Removals and replacements in place, each followed by a crash of the
//! speaker.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{kill_the_speaker, rival_until, settled_voters};
use crate::support::{self, Cluster, PATIENCE, TOKEN};

/// The member that holds a lock's copy dies, is removed, and its machine
/// is started again at once under its id and address on a wiped directory
/// (as replacing a dead node in place goes); then the speaker is killed. The next
/// rebuild reads the departed member at its old address, where the wiped
/// replacement now answers: it must not count as the member that left,
/// whose records it does not have. Counted missing with the speaker, the
/// rebuild has not seen every grant, and strict mode holds the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_holder_replaced_in_place_then_a_speaker_crash_grants_nothing_twice() {
    replace_the_copy_holder_then_kill_the_speaker(4, false).await;
}

/// `nodes` nodes in strict mode, a lock granted to the speaker's own
/// client; its copy holder is killed, removed and at once started again
/// under its id on a wiped directory (with `late_follower`, one follower
/// is paused through the removal and sees it only after the replacement
/// serves); then the speaker is killed. The next rebuild must not have
/// seen every grant, and no rival gets the name while the lock may run.
async fn replace_the_copy_holder_then_kill_the_speaker(nodes: u64, late_follower: bool) {
    const LEASE: Duration = Duration::from_secs(20);
    let mut cluster =
        Cluster::start_with(nodes, &["--rebuild-mode", "strict", "--max-lease", "20000"]).await;
    let (speaker, _) = cluster.speaker().await;
    let granted_at = Instant::now();
    let lock = cluster
        .must_acquire(
            speaker,
            "jobs/copied",
            json!({ "lease_ms": LEASE.as_millis() as u64, "holder": "w1" }),
        )
        .await;
    // A grant to the speaker's own client is copied to the next member
    // after it in id order.
    let copy_holder = speaker % nodes + 1;
    let late = (1..=nodes).find(|id| *id != speaker && *id != copy_holder);
    let late = late.filter(|_| late_follower);
    // Dead, it hands nothing over (a clean removal would: then it need
    // not be read at all).
    cluster.kill(copy_holder);
    if let Some(late) = late {
        cluster.pause(late);
    }
    let (status, body) = support::answer(
        cluster
            .http
            .delete(cluster.url(speaker, &format!("/v1/cluster/members/{copy_holder}")))
            .header("x-leasehold-token", TOKEN)
            .timeout(Duration::from_secs(40)),
    )
    .await;
    assert_eq!(status, 200, "remove {copy_holder}: {body}");
    let others: Vec<u64> = (1..=nodes).filter(|id| *id != copy_holder).collect();
    cluster.rejoin_wiped_through(copy_holder, &others);
    // The replacement serves at the old address (its join waits out the
    // removal's lease).
    let start = Instant::now();
    while cluster.get(copy_holder, "/healthz").await.0 != 200 {
        assert!(start.elapsed() < PATIENCE, "the replacement never served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some(late) = late {
        // Well after the replacement started, the paused follower resumes
        // and sees the removal.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        cluster.resume(late);
        let start = Instant::now();
        loop {
            let (_, view) = cluster.get(late, "/v1/cluster").await;
            let members = view["members"].as_array().cloned().unwrap_or_default();
            if !members.is_empty() && members.iter().all(|m| m["id"] != json!(copy_holder)) {
                break;
            }
            assert!(start.elapsed() < PATIENCE, "{late} never saw the removal");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let (next, report) = kill_the_speaker(&mut cluster, speaker).await;
    assert_eq!(
        report["all_seen"],
        json!(false),
        "the lock's copy left with member {copy_holder}: {report}"
    );
    let missing = report["members_missing"].as_array().unwrap();
    assert!(
        missing.contains(&json!(copy_holder)),
        "the replacement counts as missing for member {copy_holder}: {report}"
    );
    let granted = rival_until(
        &cluster,
        next,
        "jobs/copied",
        granted_at + LEASE - Duration::from_secs(2),
    )
    .await;
    assert!(
        granted.is_none(),
        "granted twice while {lock} may run: {granted:?}"
    );
}

/// A member removed cleanly hands its records over before it stops, and
/// the speaker tells every member it need not be read: a speaker kill a
/// while later names only the dead speaker missing (it named the removed
/// member too, and in strict mode held every new grant back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removal_then_a_speaker_kill_reports_nothing_else_missing() {
    let mut cluster =
        Cluster::start_with(4, &["--rebuild-mode", "strict", "--max-lease", "20000"]).await;
    let (speaker, _) = cluster.speaker().await;
    let removed = cluster.others(speaker)[0];
    let through_removed = cluster
        .must_acquire(removed, "clean/held-there", json!({"lease_ms": 20000}))
        .await;
    let (status, body) = support::answer(
        cluster
            .http
            .delete(cluster.url(speaker, &format!("/v1/cluster/members/{removed}")))
            .header("x-leasehold-token", TOKEN)
            .timeout(Duration::from_secs(40)),
    )
    .await;
    assert_eq!(status, 200, "remove {removed}: {body}");
    assert_eq!(cluster.wait_exit(removed, PATIENCE), Some(0));
    let left: Vec<u64> = (1..=4).filter(|id| *id != removed).collect();
    cluster.wait_for_voters(speaker, &left).await;
    let (next, report) = kill_the_speaker(&mut cluster, speaker).await;
    let report = &report;
    assert_eq!(report["members_missing"], json!([speaker]), "{report}");
    assert_eq!(report["all_seen"], json!(true), "{report}");
    // The lock held through the removed member was copied again: its
    // holder takes it over through another node.
    let renew = json!({"name": through_removed["name"], "id": through_removed["id"]});
    let (status, renewed) = cluster.post_settled(next, "/v1/locks/renew", renew).await;
    assert_eq!(status, 200, "{renewed}");
    assert_eq!(renewed["lock"]["fence"], through_removed["fence"]);
}

/// The copy holder is removed while one follower is paused, and its wiped
/// replacement starts at once under its id at its address; only then does
/// the paused follower resume and see the removal. The speaker is then
/// killed. The follower saw the member leave after its replacement
/// started: a rule comparing the replacement's uptime with the latest
/// departure any member saw read it as the member that left (all-seen,
/// and strict mode granted twice). A departed member's process up for
/// less than the longest lease counts as restarted. Found by the
/// simulation of change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_started_as_its_removal_is_answered_is_not_read_for_it() {
    replace_the_copy_holder_then_kill_the_speaker(5, true).await;
}

/// A member replaced in place while another member restarts: node 3 is
/// removed (the log had recorded its data directory), a remaining member
/// is killed and started again, and node 3's replacement (wiped, same id,
/// same address) asks that member to add it while it still waits out its
/// leader lease before running Raft. That member's log says node 3 left,
/// so the replacement is a newcomer asking to join, not a member whose
/// directory was wiped: it must not be refused, and it votes again once
/// the removal's lease has passed. Before, a restarting member took every
/// id for a member until Raft ran, refused the replacement as a wiped
/// member, and the replacement stopped for good. Found by the simulation
/// of change (`scripts/nodesim --change replace`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replacement_joining_through_a_restarting_member_is_not_refused() {
    // A long leader lease makes the restart's wait, the window, long.
    let slow = [
        "--heartbeat-interval",
        "100",
        "--election-timeout-min",
        "1500",
        "--election-timeout-max",
        "3000",
        "--max-lease",
        "12000",
    ];
    let mut cluster = Cluster::start_with(3, &slow).await;
    cluster.all_follow_one().await;
    // The speaker records every member's data directory in the log within
    // a few seconds of its start.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (speaker, _) = cluster.speaker().await;
    let replaced = cluster.others(speaker)[0];
    let (status, body) = support::answer(
        cluster
            .http
            .delete(cluster.url(speaker, &format!("/v1/cluster/members/{replaced}")))
            .header("x-leasehold-token", TOKEN)
            .timeout(Duration::from_secs(40)),
    )
    .await;
    assert_eq!(status, 200, "remove {replaced}: {body}");
    assert_eq!(cluster.wait_exit(replaced, PATIENCE), Some(0));
    let left: Vec<u64> = (1..=3).filter(|id| *id != replaced).collect();
    cluster.wait_for_voters(speaker, &left).await;
    let restarting = left[0];
    cluster.rejoin_wiped_through(replaced, &[restarting]);
    // Once the replacement asks (and is told to wait until the removal's
    // lease has passed), the member it asks restarts.
    let start = Instant::now();
    while !cluster.log(replaced).contains("joining: asking again") {
        assert!(start.elapsed() < PATIENCE, "{}", cluster.log(replaced));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.kill(restarting);
    cluster.spawn(restarting);
    let start = Instant::now();
    loop {
        let log = cluster.log(replaced);
        assert!(
            !log.contains("refuses this node"),
            "the replacement was refused: {log}"
        );
        let (_, view) = cluster.get(left[1], "/v1/cluster").await;
        if settled_voters(&view) == 3 {
            break;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "never voting again: {view}\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
