//! Sessions over a real cluster: one renewal keeps every lock of a
//! session, through any node; a close frees them all, a lapse too; and a
//! crash of the speaker, or of the node the session is held through, loses
//! none of them.

use std::time::Duration;

use serde_json::json;

use super::followers;
use crate::support::sessions::{digest, holds_all, open, renew, still_held, take};
use crate::support::{Cluster, SPEAKS};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_renewal_keeps_every_lock_of_a_session_and_a_close_frees_them() {
    let cluster = Cluster::start(3).await;
    cluster.wait_protocol(SPEAKS).await;
    let (speaker, _) = cluster.speaker().await;
    let f = followers(&cluster, speaker);
    let session = open(&cluster, f[0], 3000).await;
    assert_eq!(session["lease_ms"], json!(3000), "{session}");
    // Taken through the session's node, another follower and the speaker.
    let mut locks = take(&cluster, f[0], &session, &["s/a", "s/b"]).await;
    locks.extend(take(&cluster, f[1], &session, &["s/c"]).await);
    locks.extend(take(&cluster, speaker, &session, &["s/d"]).await);
    for lock in &locks {
        assert_eq!(lock["session"], session["id"], "{lock}");
        assert!(lock["ttl_ms"].as_u64().unwrap() <= 3000, "{lock}");
    }
    let names = ["s/a", "s/b", "s/c", "s/d"];

    // A lock of a session is renewed with it, not on its own, and takes
    // no lease of its own.
    // It is no malformed request (the same body renews a lock of its
    // own): `409 in_session`, through a follower and the speaker.
    let own = json!({ "name": "s/a", "id": locks[0]["id"] });
    for via in [f[0], speaker] {
        let (status, body) = cluster.post(via, "/v1/locks/renew", own.clone()).await;
        assert_eq!(
            (status, &body["error"]),
            (409, &json!("in_session")),
            "{body}"
        );
    }
    for bad in [
        json!({ "name": "x", "session": session["id"], "lease_ms": 1000 }),
        json!({ "name": "x", "session": "not-a-session" }),
    ] {
        let (status, body) = cluster.post(f[0], "/v1/locks/acquire", bad.clone()).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }

    // Renewed every second for three leases: every lock stays held.
    for _ in 0..9 {
        tokio::time::sleep(Duration::from_millis(1000)).await;
        let renewed = renew(&cluster, f[0], &session).await;
        assert_eq!(renewed["session"]["locks"], json!(4), "{renewed}");
    }
    still_held(&cluster, f[1], &names, &locks).await;
    // Sessions are not listed among locks.
    let (_, listed) = cluster.get(f[1], "/v1/locks").await;
    assert_eq!(listed["locks"].as_array().unwrap().len(), 4, "{listed}");

    // A lock of the session released alone; then the close takes the rest.
    let release = json!({ "name": "s/d", "id": locks[3]["id"] });
    let (status, body) = cluster.post(f[0], "/v1/locks/release", release).await;
    assert_eq!(status, 200, "{body}");
    let close = json!({ "id": session["id"] });
    let (status, body) = cluster
        .post(f[1], "/v1/sessions/close", close.clone())
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["released"], json!(3), "{body}");
    for name in names {
        cluster
            .must_acquire(f[1], name, json!({ "lease_ms": 1000 }))
            .await;
    }
    let (status, body) = cluster.post(f[0], "/v1/sessions/renew", close).await;
    assert_eq!(
        (status, &body["error"]),
        (404, &json!("not_held")),
        "{body}"
    );
    let late = json!({ "name": "late", "session": session["id"] });
    let (status, body) = cluster.post(f[0], "/v1/locks/acquire", late).await;
    assert_eq!(
        (status, &body["error"]),
        (404, &json!("not_held")),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unrenewed_session_lapses_with_all_its_locks() {
    let cluster = Cluster::start(3).await;
    cluster.wait_protocol(SPEAKS).await;
    let (speaker, _) = cluster.speaker().await;
    let f = followers(&cluster, speaker);
    let session = open(&cluster, f[0], 1500).await;
    take(&cluster, f[0], &session, &["l/a", "l/b"]).await;
    let (status, body) = cluster
        .acquire(f[1], "l/a", json!({ "wait_ms": 20000 }))
        .await;
    assert_eq!(status, 200, "granted once the session lapsed: {body}");
    cluster.must_acquire(f[1], "l/b", json!({})).await;
}

/// Routine renewal, then a fault: sessions renewed past their first lease
/// (so every lock's record holds only by the session's renewals), one held
/// through a follower and one through the speaker, then the speaker killed.
/// The next speaker keeps every lock, and the sessions renew on.
///
/// From protocol 7 the speaker's own session's locks are renewed at their
/// copy holder by the session's copy; below, copied again one by one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_speaker_crash_loses_no_lock_of_a_renewed_session() {
    speaker_crash_after_renewals(SPEAKS).await;
}

/// As [`a_speaker_crash_loses_no_lock_of_a_renewed_session`], the cluster
/// held at protocol 6 (sessions, without renewals by the session's copy).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_speaker_crash_loses_no_lock_of_a_renewed_session_at_protocol_6() {
    speaker_crash_after_renewals(6).await;
}

async fn speaker_crash_after_renewals(protocol: u64) {
    let args = if protocol == SPEAKS {
        Vec::new()
    } else {
        vec!["--protocol".to_owned(), protocol.to_string()]
    };
    let mut cluster = Cluster::start_each(3, &[], |_| args.clone()).await;
    cluster.wait_protocol(protocol).await;
    let (speaker, _) = cluster.speaker().await;
    let f = followers(&cluster, speaker);
    let far = open(&cluster, f[0], 8000).await;
    let near = open(&cluster, speaker, 8000).await;
    let far_names = ["c/f1", "c/f2", "c/f3"];
    let near_names = ["c/n1", "c/n2"];
    let far_locks = take(&cluster, f[0], &far, &far_names).await;
    let near_locks = take(&cluster, speaker, &near, &near_names).await;
    // Past the first lease: the locks' own records of their grant ended.
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(2000)).await;
        renew(&cluster, f[0], &far).await;
        renew(&cluster, speaker, &near).await;
    }
    cluster.kill(speaker);
    let (next, _) = cluster.speaker_other_than(Some(speaker)).await;
    let other = f.iter().copied().find(|&n| n != next).unwrap_or(next);
    still_held(&cluster, other, &far_names, &far_locks).await;
    still_held(&cluster, other, &near_names, &near_locks).await;
    // Both renew on, the speaker's through a follower now: its locks move.
    let renewed = renew(&cluster, f[0], &far).await;
    assert_eq!(renewed["session"]["locks"], json!(3), "{renewed}");
    let renewed = renew(&cluster, other, &near).await;
    assert_eq!(renewed["session"]["locks"], json!(2), "{renewed}");
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(2000)).await;
        renew(&cluster, f[0], &far).await;
        renew(&cluster, other, &near).await;
    }
    still_held(&cluster, other, &far_names, &far_locks).await;
    still_held(&cluster, other, &near_names, &near_locks).await;
}

/// A fault, then routine renewal, then a fault: the node a session is held
/// through killed, the session renewed through another (its locks' records
/// move there), then the speaker killed: nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_renewed_through_another_node_after_a_crash_then_a_speaker_crash_keeps_its_locks()
{
    let mut cluster = Cluster::start(3).await;
    cluster.wait_protocol(SPEAKS).await;
    let (speaker, _) = cluster.speaker().await;
    let f = followers(&cluster, speaker);
    let session = open(&cluster, f[0], 8000).await;
    let names = ["m/a", "m/b", "m/c"];
    let locks = take(&cluster, f[0], &session, &names).await;
    cluster.kill(f[0]);
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(2000)).await;
        let renewed = renew(&cluster, f[1], &session).await;
        assert_eq!(renewed["session"]["locks"], json!(3), "{renewed}");
    }
    cluster.kill(speaker);
    // Only f[1] is left of three: no quorum. Bring the first follower back
    // (its records are gone: it restarted), and let a speaker be elected.
    cluster.spawn(f[0]);
    let (next, _) = cluster.speaker_other_than(Some(speaker)).await;
    let via = if next == f[1] { f[0] } else { f[1] };
    still_held(&cluster, via, &names, &locks).await;
    let renewed = renew(&cluster, f[1], &session).await;
    assert_eq!(renewed["session"]["locks"], json!(3), "{renewed}");
}

/// A lapse, then a fault: a session renewed through a follower, then left
/// to lapse, then the speaker killed. No member's record outlives the
/// session: the next speaker grants its names at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_session_stays_ended_across_a_speaker_crash() {
    let mut cluster = Cluster::start(3).await;
    cluster.wait_protocol(SPEAKS).await;
    let (speaker, _) = cluster.speaker().await;
    let f = followers(&cluster, speaker);
    let session = open(&cluster, f[0], 4000).await;
    take(&cluster, f[0], &session, &["e/a", "e/b"]).await;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        renew(&cluster, f[0], &session).await;
    }
    tokio::time::sleep(Duration::from_millis(5000)).await;
    cluster.kill(speaker);
    let (next, _) = cluster.speaker_other_than(Some(speaker)).await;
    for name in ["e/a", "e/b"] {
        let (status, body) = cluster.acquire(next, name, json!({})).await;
        assert_eq!(status, 200, "{name} is free: {body}");
    }
}

/// Routine change, then a fault: the node a session is held through is
/// stopped with SIGTERM (it hands its records over), the session renewed
/// through another node, then the speaker killed: every lock is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_of_the_sessions_node_then_a_speaker_crash_keeps_its_locks() {
    let mut cluster = Cluster::start(3).await;
    cluster.wait_protocol(SPEAKS).await;
    let (speaker, _) = cluster.speaker().await;
    let f = followers(&cluster, speaker);
    let session = open(&cluster, f[0], 10000).await;
    let names = ["t/a", "t/b"];
    let locks = take(&cluster, f[0], &session, &names).await;
    assert_eq!(
        cluster.terminate(f[0], crate::support::PATIENCE),
        Some(0),
        "stopped"
    );
    still_held(&cluster, f[1], &names, &locks).await;
    for _ in 0..4 {
        tokio::time::sleep(Duration::from_millis(3000)).await;
        let renewed = renew(&cluster, f[1], &session).await;
        assert_eq!(renewed["session"]["locks"], json!(2), "{renewed}");
    }
    cluster.spawn(f[0]);
    cluster.kill(speaker);
    let (next, _) = cluster.speaker_other_than(Some(speaker)).await;
    let via = if next == f[1] { f[0] } else { f[1] };
    still_held(&cluster, via, &names, &locks).await;
}

/// A renewal lists the session's locks (`held`) only when the client's
/// digest differs from the speaker's: through a follower that was sent the
/// records (the locks were taken through other nodes) as through the
/// speaker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_lists_the_locks_only_when_the_clients_digest_differs() {
    let cluster = Cluster::start(3).await;
    cluster.wait_protocol(SPEAKS).await;
    let (speaker, _) = cluster.speaker().await;
    let f = followers(&cluster, speaker);
    let session = open(&cluster, f[0], 10000).await;
    let locks = take(&cluster, f[1], &session, &["listed/1", "listed/2"]).await;
    for via in [f[0], speaker, f[1]] {
        let same = json!({ "id": session["id"], "digest": digest(&locks) });
        let (status, body) = cluster.post_settled(via, "/v1/sessions/renew", same).await;
        assert_eq!(status, 200, "via {via}: {body}");
        assert_eq!(body["session"]["locks"], json!(2), "via {via}: {body}");
        assert!(body.get("held").is_none(), "via {via}: {body}");
        let other = json!({ "id": session["id"], "digest": digest(&locks[..1]) });
        let (status, body) = cluster.post_settled(via, "/v1/sessions/renew", other).await;
        assert_eq!(status, 200, "via {via}: {body}");
        assert!(holds_all(&body, &locks), "via {via}: {body}");
        assert_eq!(
            body["held"].as_array().map(Vec::len),
            Some(2),
            "via {via}: {body}"
        );
    }
}

/// A member that stalls (SIGSTOP: it neither answers nor refuses) while
/// it is the first the speaker copies to does not hold back a renewal
/// through the speaker for a copy's whole timeout (1 s, more than the
/// slack a 2 s session renewed every third of its lease has): another
/// member is sent the copy once it has been unanswered for 200 ms, and its
/// acknowledgement answers the client. Then the stalled member wakes and
/// the speaker is killed: the session and its lock are kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_copy_holder_does_not_hold_a_renewal_through_the_speaker_back() {
    let mut cluster = Cluster::start(3).await;
    cluster.wait_protocol(SPEAKS).await;
    let (speaker, _) = cluster.speaker().await;
    let session = open(&cluster, speaker, 2000).await;
    let locks = take(&cluster, speaker, &session, &["stall/a"]).await;
    let first = cluster.first_copy_holder(speaker);
    cluster.pause(first);
    let started = std::time::Instant::now();
    let (status, body) = cluster
        .post(
            speaker,
            "/v1/sessions/renew",
            json!({ "id": session["id"] }),
        )
        .await;
    let took = started.elapsed();
    assert_eq!(status, 200, "{body}");
    assert!(
        took < Duration::from_millis(1000),
        "the renewal waited {took:?}, a copy's whole timeout, for the stalled member {first}"
    );
    // Renewed on while the member stays stalled: nothing lapses.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(500)).await;
        renew(&cluster, speaker, &session).await;
    }
    cluster.resume(first);
    renew(&cluster, speaker, &session).await;
    cluster.kill(speaker);
    let (next, _) = cluster.speaker_other_than(Some(speaker)).await;
    let renewed = renew(&cluster, next, &session).await;
    assert_eq!(renewed["session"]["locks"], json!(1), "{renewed}");
    still_held(&cluster, next, &["stall/a"], &locks).await;
}
