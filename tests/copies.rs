//! Copies over real processes, in both rebuild modes: a lock is on record
//! with two members before its client hears of it, so a single crash, of
//! the speaker or of the holder's node, loses no lock, lets nobody else
//! take it, and holds back no new grant; two crashes at once (five nodes,
//! two copies) fall back to the documented rules.

use crate::support;

use serde_json::{json, Value};
use support::{fence, Cluster};

const MODES: [&str; 2] = ["proceed", "strict"];

fn renew(lock: &Value) -> Value {
    json!({"name": lock["name"], "id": lock["id"]})
}

/// The lock is the holder's still: renewed through `via` with its id and
/// fence, and refused to another client.
async fn still_held(cluster: &Cluster, via: u64, lock: &Value, mode: &str) {
    let (status, body) = cluster
        .post_settled(via, "/v1/locks/renew", renew(lock))
        .await;
    assert_eq!(
        status, 200,
        "{mode}: the holder's renewal through node {via}: {body}"
    );
    assert_eq!(body["lock"]["id"], lock["id"], "{mode}");
    assert_eq!(fence(&body["lock"]), fence(lock), "{mode}");
    let (status, body) = cluster
        .acquire(
            via,
            lock["name"].as_str().unwrap(),
            json!({"holder": "other"}),
        )
        .await;
    assert_eq!(status, 409, "{mode}: another client took it: {body}");
    assert_eq!(body["lock"]["id"], lock["id"], "{mode}");
}

/// The new speaker's last rebuild.
async fn last_rebuild(cluster: &Cluster, speaker: u64) -> Value {
    let (_, info) = cluster.get(speaker, "/v1/cluster").await;
    info["last_rebuild"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_taken_through_the_speaker_survives_its_crash() {
    for mode in MODES {
        let mut cluster = Cluster::start_with(3, &["--rebuild-mode", mode]).await;
        let (speaker, _) = cluster.speaker().await;
        let lock = cluster
            .must_acquire(
                speaker,
                "jobs/42",
                json!({"holder": "w", "lease_ms": 20000}),
            )
            .await;
        cluster.kill(speaker);
        let (new, _) = cluster.speaker_other_than(Some(speaker)).await;
        let report = last_rebuild(&cluster, new).await;
        assert_eq!(report["all_seen"], json!(true), "{mode}: {report}");
        assert_eq!(report["held_back_ms"], json!(0), "{mode}: {report}");
        for via in cluster.live() {
            still_held(&cluster, via, &lock, mode).await;
        }
        // A single crash holds no new grant back.
        let (status, body) = cluster
            .post(new, "/v1/locks/acquire", json!({"name": "jobs/new"}))
            .await;
        assert_eq!(status, 200, "{mode}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_taken_through_a_follower_survives_its_crash() {
    for mode in MODES {
        let mut cluster = Cluster::start_with(3, &["--rebuild-mode", mode]).await;
        let (speaker, _) = cluster.speaker().await;
        let follower = cluster
            .live()
            .into_iter()
            .find(|&id| id != speaker)
            .unwrap();
        let lock = cluster
            .must_acquire(
                follower,
                "jobs/7",
                json!({"holder": "w", "lease_ms": 20000}),
            )
            .await;
        cluster.kill(follower);
        for via in cluster.live() {
            still_held(&cluster, via, &lock, mode).await;
        }
        // The follower comes back (empty) and then the speaker dies: the
        // renewal through the survivor has moved the lock there, and the
        // holder keeps it. (Two members lost their records within a lease,
        // as many as there are copies: strict mode holds new grants back.)
        let survivor = cluster
            .live()
            .into_iter()
            .find(|&id| id != speaker)
            .unwrap();
        cluster.spawn(follower);
        cluster.kill(speaker);
        cluster.speaker_other_than(Some(speaker)).await;
        let (status, body) = cluster
            .post_settled(survivor, "/v1/locks/renew", renew(&lock))
            .await;
        assert_eq!(status, 200, "{mode}: {body}");
        assert_eq!(fence(&body["lock"]), fence(&lock), "{mode}");
        let (status, body) = cluster
            .post(
                survivor,
                "/v1/locks/acquire",
                json!({"name": "jobs/7", "holder": "other"}),
            )
            .await;
        assert_ne!(status, 200, "{mode}: another client took it: {body}");
    }
}

/// Five nodes, two copies: the speaker and the member holding the copy of
/// a lock its client took die together. The rebuild misses two members, as
/// many as there are copies: it says so, and the documented rules apply
/// (proceed grants the name again; strict holds every new grant back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_crashes_at_once_fall_back_to_the_documented_rules() {
    for mode in MODES {
        let mut cluster = Cluster::start_with(5, &["--rebuild-mode", mode]).await;
        let (speaker, _) = cluster.speaker().await;
        let lock = cluster
            .must_acquire(speaker, "jobs/9", json!({"holder": "w", "lease_ms": 20000}))
            .await;
        // The copy goes to the member after the speaker in id order.
        let copy_holder = speaker % 5 + 1;
        cluster.kill(speaker);
        cluster.kill(copy_holder);
        let (new, _) = cluster.speaker_other_than(Some(speaker)).await;
        let report = last_rebuild(&cluster, new).await;
        assert_eq!(report["all_seen"], json!(false), "{mode}: {report}");
        let (status, body) = cluster
            .post(
                new,
                "/v1/locks/acquire",
                json!({"name": "jobs/9", "holder": "other"}),
            )
            .await;
        match mode {
            "proceed" => {
                assert_eq!(report["held_back_ms"], json!(0), "{report}");
                assert_eq!(status, 200, "proceed grants the unknown name again: {body}");
                assert_ne!(body["lock"]["id"], lock["id"]);
            }
            _ => {
                assert!(report["held_back_ms"].as_u64() > Some(0), "{report}");
                assert_eq!(status, 503, "strict holds new grants back: {body}");
            }
        }
    }
}

/// A follower's second record of a grant is written when the answer
/// arrives. If a newer speaker read the follower meanwhile, that rebuild
/// did not see it (and, missing only the old speaker, serves at once): the
/// follower must not answer the grant. Here the old speaker is cut off
/// right after granting, and its answer comes back 3 s later, long after
/// another member took over and granted the name to someone else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_answered_after_a_newer_speaker_read_the_follower_is_refused() {
    let cluster = Cluster::start_with(3, &["--chaos", "--rebuild-mode", "strict"]).await;
    let (speaker, _) = cluster.speaker().await;
    let followers: Vec<u64> = cluster.others(speaker);
    let (via, other) = (followers[0], followers[1]);
    cluster
        .set_plan(
            speaker,
            json!({"answer_delay_ms": 3000, "drop_to": followers}),
        )
        .await;
    let first = {
        let request = cluster
            .http
            .post(cluster.url(via, "/v1/locks/acquire"))
            .json(&json!({"name": "late/x", "holder": "b", "lease_ms": 20000}))
            .timeout(std::time::Duration::from_secs(30));
        tokio::spawn(support::answer(request))
    };
    // Once the call has reached the speaker, the followers cannot reach
    // it either: the next rebuild misses it (one member, fewer than the
    // copies: nothing held back).
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    for id in &followers {
        cluster.set_plan(*id, json!({"drop_to": [speaker]})).await;
    }
    let (new, _) = cluster.speaker_other_than(Some(speaker)).await;
    let (second, body) = cluster
        .acquire(other, "late/x", json!({"holder": "d", "lease_ms": 20000}))
        .await;
    let (first, first_body) = first.await.unwrap();
    assert!(
        !(first == 200 && second == 200),
        "two holders: b through node {via} ({first_body}) and d through node {other} \
         under speaker {new} ({body})"
    );
}

/// Cuts `member` off from every other running node, both ways (or heals
/// it, with `cut` false).
async fn isolate(cluster: &Cluster, member: u64, cut: bool) {
    let others = cluster.others(member);
    let plan = |to: Vec<u64>| {
        if cut {
            json!({"drop_to": to})
        } else {
            json!({})
        }
    };
    cluster.set_plan(member, plan(others.clone())).await;
    for id in others {
        cluster.set_plan(id, plan(vec![member])).await;
    }
}

/// One crash and one member that cannot be read for a moment: the new
/// speaker tries that member again within its rebuild timeout, rather than
/// count it missing at the first failed read, so the rebuild misses only
/// the dead speaker (fewer members than copies) and keeps the lock whose
/// copy that member holds. (The simulation found it: one crash plus one
/// report lost made a rebuild miss as many members as there are copies.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_unreachable_for_a_moment_is_read_again_within_the_rebuild_timeout() {
    for mode in MODES {
        let mut cluster = Cluster::start_with(
            5,
            &[
                "--chaos",
                "--rebuild-mode",
                mode,
                "--rebuild-timeout",
                "4000",
            ],
        )
        .await;
        let (speaker, _) = cluster.speaker().await;
        let lock = cluster
            .must_acquire(
                speaker,
                "jobs/11",
                json!({"holder": "w", "lease_ms": 30000}),
            )
            .await;
        // The copy is on the member after the speaker in id order.
        let copy_holder = speaker % 5 + 1;
        isolate(&cluster, copy_holder, true).await;
        cluster.kill(speaker);
        // A new leader's rebuild reads the copy holder, fails, and is still
        // trying (for up to 4 s) when the cut heals.
        let witness = cluster.others(speaker)[0];
        let witness = if witness == copy_holder {
            cluster.others(speaker)[1]
        } else {
            witness
        };
        let start = std::time::Instant::now();
        loop {
            let (_, info) = cluster.get(witness, "/v1/cluster").await;
            let leader = info["leader"].as_u64();
            if leader.is_some() && leader != Some(speaker) {
                break;
            }
            assert!(start.elapsed().as_secs() < 30, "no new leader: {info}");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        isolate(&cluster, copy_holder, false).await;
        let (new, _) = cluster.speaker_other_than(Some(speaker)).await;
        let report = last_rebuild(&cluster, new).await;
        assert_eq!(
            report["members_missing"],
            json!([speaker]),
            "{mode}: {report}"
        );
        assert_eq!(report["all_seen"], json!(true), "{mode}: {report}");
        for via in cluster.live() {
            still_held(&cluster, via, &lock, mode).await;
        }
    }
}

/// Strict mode, a rebuild that missed as many members as there are
/// copies: a renewal of a lock the new table lacks is answered "retry"
/// (503) while new grants are held back, not "not held" (404), since a
/// missing member may have it on record. Once that member is back, the
/// renewal through it reclaims the lock, with its id and fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_during_the_strict_hold_is_retried_not_refused() {
    let mut cluster = Cluster::start_with(
        5,
        &[
            "--chaos",
            "--rebuild-mode",
            "strict",
            "--rebuild-timeout",
            "500",
        ],
    )
    .await;
    let (speaker, _) = cluster.speaker().await;
    let holder = speaker % 5 + 1;
    let lock = cluster
        .must_acquire(holder, "jobs/12", json!({"holder": "w", "lease_ms": 30000}))
        .await;
    // The lock is on record with its node and the speaker: cut one off,
    // kill the other.
    isolate(&cluster, holder, true).await;
    cluster.kill(speaker);
    let (new, _) = cluster.speaker_other_than(Some(speaker)).await;
    let report = last_rebuild(&cluster, new).await;
    assert_eq!(report["all_seen"], json!(false), "{report}");
    assert!(report["held_back_ms"].as_u64() > Some(0), "{report}");
    let (status, body) = cluster.post(new, "/v1/locks/renew", renew(&lock)).await;
    assert_eq!(
        status, 503,
        "during the hold the renewal is retried: {body}"
    );
    isolate(&cluster, holder, false).await;
    let (status, body) = cluster
        .post_settled(holder, "/v1/locks/renew", renew(&lock))
        .await;
    assert_eq!(status, 200, "reclaimed through its node: {body}");
    assert_eq!(body["lock"]["id"], lock["id"]);
    assert_eq!(fence(&body["lock"]), fence(&lock));
}

/// An acquire named by its caller (`request_id`) and retried, because its
/// answer was lost or late, is answered with the caller's own grant (same
/// id, same fence), through any node and after a speaker change, instead
/// of `409 held` against itself. Another holder, or another acquisition,
/// is refused as ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_acquire_gets_its_own_grant_back() {
    let mut cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    let via = cluster.others(speaker)[0];
    let ask = |holder: &str, request: &str| json!({"holder": holder, "request_id": request, "lease_ms": 20000});
    let first = cluster.must_acquire(via, "retry/x", ask("w1", "r-1")).await;
    for node in [via, speaker] {
        let again = cluster
            .must_acquire(node, "retry/x", ask("w1", "r-1"))
            .await;
        assert_eq!(
            (&again["id"], &again["fence"]),
            (&first["id"], &first["fence"])
        );
        assert_eq!(
            again["node"],
            json!(node),
            "the record moves to the node asked"
        );
    }
    for (holder, request) in [("w2", "r-1"), ("w1", "r-2")] {
        let (status, body) = cluster.acquire(via, "retry/x", ask(holder, request)).await;
        assert_eq!(status, 409, "{holder} {request}: {body}");
    }
    // A retry that would wait finds its own grant at once, rather than
    // queueing behind it (for a minute: past the test client's patience).
    for node in [via, speaker] {
        let mut waiting = ask("w1", "r-1");
        waiting["wait_ms"] = json!(60000);
        let (status, again) = cluster.acquire(node, "retry/x", waiting).await;
        assert_eq!(status, 200, "a waiting retry through {node}: {again}");
        assert_eq!(again["lock"]["id"], first["id"]);
    }
    let (status, body) = cluster
        .acquire(via, "retry/y", json!({"request_id": "has space"}))
        .await;
    assert_eq!(
        (status, &body["error"]),
        (400, &json!("bad_request")),
        "{body}"
    );
    // After the speaker's crash, the next speaker knows it from the
    // records: the mark is in the grant's id.
    cluster.kill(speaker);
    let survivor = cluster.others(speaker)[0];
    let again = cluster
        .must_acquire(survivor, "retry/x", ask("w1", "r-1"))
        .await;
    assert_eq!(
        (&again["id"], &again["fence"]),
        (&first["id"], &first["fence"])
    );
}

/// A grant through a follower whose caller went away before the answer
/// came (its client timed out) is a ghost: nobody will renew or release
/// it. The follower takes it back at once, so the name is free again long
/// before the lease would have ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_whose_caller_went_away_is_taken_back() {
    let cluster = Cluster::start_with(3, &["--chaos"]).await;
    let (speaker, _) = cluster.speaker().await;
    let via = cluster.others(speaker)[0];
    cluster
        .set_plan(speaker, json!({"answer_delay_ms": 1500}))
        .await;
    let gone = support::answer(
        cluster
            .http
            .post(cluster.url(via, "/v1/locks/acquire"))
            .json(&json!({"name": "ghost/x", "holder": "gone", "lease_ms": 60000}))
            .timeout(std::time::Duration::from_millis(300)),
    )
    .await;
    assert_eq!(gone.0, 0, "the caller gave up before the answer: {gone:?}");
    tokio::time::sleep(std::time::Duration::from_millis(2000)).await;
    cluster.set_plan(speaker, json!({})).await;
    let start = std::time::Instant::now();
    loop {
        let (status, body) = cluster
            .post(
                speaker,
                "/v1/locks/acquire",
                json!({"name": "ghost/x", "holder": "next"}),
            )
            .await;
        if status == 200 {
            break;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(15),
            "the ghost still holds the name: {status} {body}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
