//! Routine change followed by a fault, over real `leasehold serve`
//! processes: growth from one node then a crash, and an operator adding a
//! member that is not running yet. Each checks that nothing is granted
//! twice and that a lock its holder renews is not lost.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{Cluster, PATIENCE, TOKEN};

async fn wait_for_voters(cluster: &Cluster, via: u64, voters: &[u64]) {
    cluster.wait_for_voters(via, voters).await;
}

/// How many voters a cluster view names, 0 while a change is under way.
fn settled_voters(view: &Value) -> usize {
    if view["changing"] != json!(false) {
        return 0;
    }
    view["members"].as_array().map_or(0, |members| {
        members
            .iter()
            .filter(|m| m["role"] == json!("voter"))
            .count()
    })
}

/// Kills `speaker` and answers the next speaker and its rebuild's report.
async fn kill_the_speaker(cluster: &mut Cluster, speaker: u64) -> (u64, Value) {
    cluster.kill(speaker);
    let (next, _) = cluster.speaker_other_than(Some(speaker)).await;
    let (_, view) = cluster.get(next, "/v1/cluster").await;
    (next, view["last_rebuild"].clone())
}

/// Asks `via` for `name` for holder `w2` every 200 ms until `until`:
/// answers whether it was ever granted, and the last answer.
async fn rival_until(cluster: &Cluster, via: u64, name: &str, until: Instant) -> Option<Value> {
    let body = json!({ "name": name, "holder": "w2", "lease_ms": 1000 });
    while Instant::now() < until {
        let (status, answer) = cluster.post(via, "/v1/locks/acquire", body.clone()).await;
        if status == 200 {
            return Some(answer);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    None
}

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

/// Strict mode with the short leases it advises (`--max-lease 2000`): a
/// member restarts (a rolling restart, say), then the speaker is killed
/// while a holder renews every 300 ms through a survivor. The restarted
/// member has every record it took since it started, so the next speaker
/// neither waits out its whole rebuild timeout for the dead speaker (the
/// lease would run out meanwhile) nor holds new grants back for a whole
/// lease: the holder keeps its lock, and the hold covers only leases from
/// before the restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_then_a_speaker_crash_keeps_a_renewing_holders_lock() {
    let mut cluster =
        Cluster::start_with(3, &["--rebuild-mode", "strict", "--max-lease", "2000"]).await;
    let (speaker, _) = cluster.speaker().await;
    let others = cluster.others(speaker);
    let (via, restarted) = (others[0], others[1]);
    let lock = cluster
        .must_acquire(via, "short/x", json!({ "lease_ms": 2000, "holder": "w1" }))
        .await;
    let renew = json!({ "name": lock["name"], "id": lock["id"], "lease_ms": 2000 });
    cluster.kill(restarted);
    cluster.spawn(restarted);
    // Renew through `via` every 300 ms from here on, noting every answer.
    let cluster = std::sync::Arc::new(tokio::sync::Mutex::new(cluster));
    let renewing = {
        let cluster = std::sync::Arc::clone(&cluster);
        let renew = renew.clone();
        tokio::spawn(async move {
            let mut answers = Vec::new();
            let until = Instant::now() + Duration::from_secs(8);
            while Instant::now() < until {
                let (status, body) = {
                    let cluster = cluster.lock().await;
                    let request = cluster
                        .http
                        .post(cluster.url(via, "/v1/locks/renew"))
                        .json(&renew)
                        .timeout(Duration::from_millis(1500));
                    support::answer(request).await
                };
                answers.push((status, body));
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            answers
        })
    };
    tokio::time::sleep(Duration::from_millis(900)).await;
    cluster.lock().await.kill(speaker);
    let answers = renewing.await.unwrap();
    let cluster = cluster.lock().await;
    for (status, body) in &answers {
        assert!(
            *status == 200 || *status == 503 || *status == 0,
            "a renewal refused for good: {status} {body}"
        );
        if *status == 200 {
            assert_eq!(body["lock"]["fence"], lock["fence"], "{body}");
        }
    }
    let last = answers.last().unwrap();
    assert_eq!(last.0, 200, "the holder lost its lock: {answers:?}");
    let (next, _) = cluster.speaker_other_than(Some(speaker)).await;
    let (_, view) = cluster.get(next, "/v1/cluster").await;
    let report = &view["last_rebuild"];
    assert!(
        report["took_ms"].as_u64().unwrap() < 1500,
        "the rebuild waited for the dead speaker: {report}"
    );
    assert!(
        report["held_back_ms"].as_u64().unwrap() < 2000,
        "only leases from before the restart are held back: {report}"
    );
}

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

/// Timings lowered by a rolling restart (followers first, as the docs
/// say), then the old speaker and one follower are cut off from the three
/// that run the shorter timings. Those three may elect a speaker as soon as
/// their own short lease allows; the old speaker's guard counts on the
/// shortest lease any member runs with, and the successor's strict hold on
/// the longest, so a grant the old speaker makes after the cut cannot
/// overlap one of its successor's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timings_lowered_by_a_rolling_restart_then_a_partition_grant_nothing_twice() {
    const MAX_LEASE: u64 = 2000;
    let long = |_| {
        [
            "--heartbeat-interval",
            "50",
            "--election-timeout-min",
            "1000",
            "--election-timeout-max",
            "2000",
        ]
        .map(String::from)
        .to_vec()
    };
    let mut cluster = Cluster::start_each(
        5,
        &["--chaos", "--rebuild-mode", "strict", "--max-lease", "2000"],
        long,
    )
    .await;
    let (speaker, _) = cluster.speaker().await;
    let others = cluster.others(speaker);
    let (minority, majority) = (others[0], others[1..].to_vec());
    for id in &majority {
        cluster.kill(*id);
        cluster.set_node_args(*id, Vec::new());
        cluster.spawn(*id);
        cluster.all_follow_one().await;
    }
    let (still, _) = cluster.speaker().await;
    assert_eq!(still, speaker, "restarting followers moved no leadership");
    // A lock that ends 1.8 s into the cut, after the majority can elect:
    // the old speaker could grant the name again then only if its guard
    // still ran.
    cluster
        .must_acquire(speaker, "part/x", json!({"holder": "c", "lease_ms": 1800}))
        .await;
    for id in [speaker, minority] {
        cluster.set_plan(id, json!({"drop_to": majority})).await;
    }
    for id in &majority {
        cluster
            .set_plan(*id, json!({"drop_to": [speaker, minority]}))
            .await;
    }
    let cluster = std::sync::Arc::new(cluster);
    let ask = |via: u64, holder: &'static str, for_ms: u64| {
        let cluster = std::sync::Arc::clone(&cluster);
        tokio::spawn(async move {
            let until = Instant::now() + Duration::from_millis(for_ms);
            let body = json!({"name": "part/x", "holder": holder, "lease_ms": MAX_LEASE});
            while Instant::now() < until {
                let sent = Instant::now();
                let (status, _) = cluster.post(via, "/v1/locks/acquire", body.clone()).await;
                if status == 200 {
                    return Some((sent, Instant::now()));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            None
        })
    };
    let old_side = ask(speaker, "a", 4_000);
    let new_side = ask(majority[0], "b", 12_000);
    let (a, b) = (old_side.await.unwrap(), new_side.await.unwrap());
    eprintln!("old side {a:?}, new side {b:?}");
    if let (Some((a_sent, _)), Some((_, b_answered))) = (a, b) {
        assert!(
            b_answered >= a_sent + Duration::from_millis(MAX_LEASE),
            "two holders: a through the old speaker (asked {:?} before b was answered), \
             b through the new one",
            b_answered.saturating_duration_since(a_sent)
        );
    }
    assert!(b.is_some(), "the majority never granted the name again");
}

/// A follower stopped with SIGTERM hands its records over before it goes
/// (the speaker copies them again to members that stay), so its restart
/// forgot nothing that counts: a speaker crash right after is a single
/// crash, not two. The rebuild reads every member that runs, names only
/// the dead speaker missing, holds nothing back in strict mode, and the
/// lock held through the restarted follower stays its holder's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_restart_then_a_speaker_crash_costs_nothing() {
    let mut cluster =
        Cluster::start_with(3, &["--rebuild-mode", "strict", "--max-lease", "20000"]).await;
    let (speaker, _) = cluster.speaker().await;
    let follower = cluster.others(speaker)[0];
    let lock = cluster
        .must_acquire(
            follower,
            "clean/x",
            json!({"lease_ms": 20000, "holder": "w1"}),
        )
        .await;
    assert_eq!(cluster.terminate(follower, PATIENCE), Some(0));
    assert!(
        cluster.log(follower).contains("records handed over"),
        "{}",
        cluster.log(follower)
    );
    cluster.spawn(follower);
    cluster.all_follow_one().await;
    let (_, report) = kill_the_speaker(&mut cluster, speaker).await;
    let report = &report;
    assert_eq!(report["members_missing"], json!([speaker]), "{report}");
    assert_eq!(report["all_seen"], json!(true), "{report}");
    assert_eq!(report["held_back_ms"], json!(0), "{report}");
    let renew = json!({"name": lock["name"], "id": lock["id"]});
    let (status, renewed) = cluster
        .post_settled(follower, "/v1/locks/renew", renew)
        .await;
    assert_eq!(status, 200, "{renewed}");
    assert_eq!(renewed["lock"]["fence"], lock["fence"]);
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

/// Two followers stopped cleanly one after the other, then the speaker
/// killed: the first handed a lock held through it over (copied to the
/// second), and the second handed that copy over in turn. The copy must
/// go to a member that keeps it, not be counted on the first follower,
/// whose memory is empty since its restart: the lock stays its holder's
/// through the speaker's crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clean_restarts_then_a_speaker_crash_keep_the_lock() {
    let mut cluster =
        Cluster::start_with(3, &["--rebuild-mode", "strict", "--max-lease", "20000"]).await;
    let (speaker, _) = cluster.speaker().await;
    let others = cluster.others(speaker);
    let (holder, other) = (others[0], others[1]);
    let lock = cluster
        .must_acquire(
            holder,
            "clean/twice",
            json!({"lease_ms": 20000, "holder": "w1"}),
        )
        .await;
    for id in [holder, other] {
        assert_eq!(cluster.terminate(id, PATIENCE), Some(0));
        cluster.spawn(id);
        cluster.all_follow_one().await;
    }
    let (next, report) = kill_the_speaker(&mut cluster, speaker).await;
    let report = &report;
    assert_eq!(report["locks"], json!(1), "the lock was lost: {report}");
    let (status, rival) = cluster
        .post(
            next,
            "/v1/locks/acquire",
            json!({"name": "clean/twice", "holder": "w2"}),
        )
        .await;
    assert_ne!(status, 200, "granted twice: {rival}");
    let renew = json!({"name": lock["name"], "id": lock["id"]});
    let (status, renewed) = cluster.post_settled(holder, "/v1/locks/renew", renew).await;
    assert_eq!(status, 200, "{renewed}");
    assert_eq!(renewed["lock"]["fence"], lock["fence"]);
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

/// Every node runs with `--rejoin` in its fixed flags (beside `--peers`),
/// the cluster's first start included, which it does not hinder. A member
/// loses its disk: killed, its data directory wiped, and started again
/// with the same flags. It asks the cluster to remove
/// its id's old directory, joins again under its id once the removal's
/// lease has passed, and votes; meanwhile a holder renews through a
/// survivor. Then the speaker is killed: the holder keeps its lock and no
/// rival is granted the name. Without `--rejoin` the same start is refused
/// (tests/identity.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_that_lost_its_disk_rejoins_by_itself_then_a_speaker_crash_keeps_the_lock() {
    let flags = [
        "--rebuild-mode",
        "strict",
        "--max-lease",
        "3000",
        "--rejoin",
    ];
    let mut cluster = Cluster::start_with(3, &flags).await;
    cluster.all_follow_one().await;
    // The speaker records every member's data directory in the log within
    // a few seconds of its start.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (speaker, _) = cluster.speaker().await;
    let others = cluster.others(speaker);
    let (via, lost) = (others[0], others[1]);
    let lock = cluster
        .must_acquire(via, "disk/x", json!({ "lease_ms": 3000, "holder": "w1" }))
        .await;
    let renew = json!({ "name": lock["name"], "id": lock["id"], "lease_ms": 3000 });
    let renewing = {
        let http = cluster.http.clone();
        let url = cluster.url(via, "/v1/locks/renew");
        tokio::spawn(async move {
            let mut answers = Vec::new();
            let until = Instant::now() + PATIENCE;
            while Instant::now() < until {
                let request = http
                    .post(&url)
                    .json(&renew)
                    .timeout(Duration::from_millis(1500));
                let (status, body) = support::answer(request).await;
                let lost = status == 409;
                answers.push((status, body));
                if lost {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            answers
        })
    };
    cluster.kill(lost);
    let _ = std::fs::remove_dir_all(cluster.data_dir(lost));
    cluster.spawn(lost);
    let start = Instant::now();
    loop {
        let log = cluster.log(lost);
        assert!(
            !log.contains("refuses this node"),
            "the node that lost its disk was refused: {log}"
        );
        let (_, view) = cluster.get(speaker, "/v1/cluster").await;
        if settled_voters(&view) == 3 && log.contains("joined the cluster") {
            assert!(log.contains("joining again under it"), "{log}");
            break;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "never voting again: {view}\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (next, _) = kill_the_speaker(&mut cluster, speaker).await;
    let rival = rival_until(
        &cluster,
        next,
        "disk/x",
        Instant::now() + Duration::from_secs(4),
    )
    .await;
    assert!(
        rival.is_none(),
        "granted twice while {lock} is renewed: {rival:?}"
    );
    renewing.abort();
    let renewed = support::answer(
        cluster
            .http
            .post(cluster.url(via, "/v1/locks/renew"))
            .json(&json!({ "name": lock["name"], "id": lock["id"], "lease_ms": 3000 }))
            .timeout(Duration::from_secs(5)),
    )
    .await;
    assert_eq!(renewed.0, 200, "the holder lost its lock: {renewed:?}");
    assert_eq!(renewed.1["lock"]["fence"], lock["fence"]);
}

/// A node rejoining with `--rejoin` is killed after the cluster removed its
/// id's old directory and before its join is answered (the join waits out
/// the removal's lease), then started again with the same flags: its
/// directory was never named by a configuration, so it rejoins still, and
/// votes. Before, only a first start rejoined: the restarted node took
/// itself for a member of the cluster's first start and never joined
/// (found by a second reader).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejoin_cut_short_by_a_restart_still_joins() {
    let flags = ["--max-lease", "6000", "--rejoin"];
    let mut cluster = Cluster::start_with(3, &flags).await;
    cluster.all_follow_one().await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (speaker, _) = cluster.speaker().await;
    let lost = cluster.others(speaker)[1];
    cluster.kill(lost);
    let _ = std::fs::remove_dir_all(cluster.data_dir(lost));
    cluster.spawn(lost);
    let start = Instant::now();
    while !cluster.log(lost).contains("joining again under it") {
        assert!(start.elapsed() < PATIENCE, "{}", cluster.log(lost));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!cluster.log(lost).contains("joined the cluster"));
    // Killed while its join waits; started again as it was.
    cluster.kill(lost);
    cluster.spawn(lost);
    let start = Instant::now();
    loop {
        let log = cluster.log(lost);
        let (_, view) = cluster.get(speaker, "/v1/cluster").await;
        if settled_voters(&view) == 3 && log.contains("joined the cluster") {
            break;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "never voting again: {view}\n{log}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A retirement (what `serve --rejoin` asks, sent here as a member would
/// forward it) as the speaker takes it: refused while the id's process
/// still answers on its directory (two processes under one id must not
/// take the healthy one out), nothing when it comes from the directory
/// the id runs on already (a retirement arriving after the rejoin must not
/// undo it), and a removal once the old directory is silent; a lock held
/// through another member is kept through all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retirement_removes_only_a_silent_old_directory() {
    let mut cluster = Cluster::start(3).await;
    cluster.all_follow_one().await;
    let (speaker, _) = cluster.speaker().await;
    let others = cluster.others(speaker);
    let (via, old) = (others[0], others[1]);
    cluster.wait_protocol(2).await;
    let lock = cluster
        .must_acquire(via, "retire/x", json!({ "lease_ms": 60000 }))
        .await;
    let log = cluster.log(old);
    let store = log
        .split("store=")
        .nth(1)
        .map(|rest| rest[..32].to_string())
        .unwrap_or_else(|| panic!("no store in the log: {log}"));
    let retire = |store: &str| json!({ "retire": { "id": old, "store": store } });
    let (http, url) = (
        cluster.http.clone(),
        cluster.url(speaker, "/internal/members"),
    );
    let send = |body: Value| {
        let request = http
            .post(&url)
            .header("x-leasehold-token", TOKEN)
            .header("x-leasehold-from", "99")
            .header("x-leasehold-store", format!("{:032x}", 99))
            .header("x-leasehold-protocol", support::PROTOCOL_STAMP)
            .json(&body)
            .timeout(Duration::from_secs(30));
        support::answer(request)
    };
    let members = |view: &Value| view["members"].as_array().map_or(0, Vec::len);
    let other_store = format!("{:032x}", 0xfeed_u128);

    let (status, body) = send(retire(&other_store)).await;
    assert_eq!(status, 409, "a live member retired: {body}");
    assert_eq!(body["error"], json!("member_exists"), "{body}");
    assert!(
        body["message"].as_str().unwrap().contains("still answers"),
        "{body}"
    );
    // A pause longer than a heartbeat's timeout, shorter than the quiet
    // window: still a live member (found by a second reader: one slow
    // heartbeat let it be removed).
    cluster.pause(old);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (status, body) = send(retire(&other_store)).await;
    cluster.resume(old);
    assert_eq!(status, 409, "a paused live member retired: {body}");
    let (status, body) = send(retire(&store)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(members(&body), 3, "the id runs on that directory: {body}");

    cluster.kill(old);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (status, body) = send(retire(&store)).await;
    assert_eq!((status, members(&body)), (200, 3), "{body}");
    let (status, body) = send(retire(&other_store)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(members(&body), 2, "the silent old directory stays: {body}");

    let (status, body) = cluster
        .post(
            via,
            "/v1/locks/renew",
            json!({ "name": "retire/x", "id": lock["id"] }),
        )
        .await;
    assert_eq!(status, 200, "the lock was lost: {body}");
    assert_eq!(body["lock"]["fence"], lock["fence"]);
}
