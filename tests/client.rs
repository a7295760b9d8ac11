//! The Rust client against a real 3-node cluster: guards, try_acquire,
//! with_lock, moving to another node, and leader election.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use leasehold_client::{AcquireOptions, CampaignOptions, Client, Error, Loss};
use support::Cluster;

fn client(cluster: &Cluster, nodes: &[u64]) -> Client {
    Client::http(nodes.iter().map(|id| cluster.addrs[id].clone())).unwrap()
}

fn all(cluster: &Cluster) -> Client {
    client(cluster, &cluster.live())
}

const SEC: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_keeps_its_lock_past_several_leases_and_releases_on_drop() {
    let cluster = Cluster::start(3).await;
    let mine = all(&cluster);
    let theirs = client(&cluster, &[3]);
    let guard = mine
        .acquire("g/1", AcquireOptions::default().lease(SEC).holder("me"))
        .await
        .unwrap();
    let fence = guard.fence();
    tokio::time::sleep(3 * SEC + SEC / 2).await;
    assert!(!guard.is_lost());
    match theirs.try_acquire("g/1", AcquireOptions::default()).await {
        Err(Error::Held(holder)) => {
            assert_eq!(holder.holder, "me", "try_acquire reports the holder");
            assert_eq!(holder.fence, fence);
        }
        other => panic!("expected held, got {:?}", other.map(|g| g.lock())),
    }
    drop(guard);
    // Released in the background: free long before its lease would end.
    let start = Instant::now();
    let next = theirs
        .acquire("g/1", AcquireOptions::default().wait(10 * SEC))
        .await
        .unwrap();
    assert!(start.elapsed() < 10 * SEC);
    assert!(next.fence() > fence);
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewals_a_guard_cannot_make_are_refused_up_front() {
    let cluster = Cluster::start(3).await;
    let c = all(&cluster);
    let options = AcquireOptions {
        lease: Some(SEC),
        renew_every: Some(SEC),
        ..AcquireOptions::default()
    };
    assert!(matches!(
        c.acquire("slow", options).await,
        Err(Error::BadRequest(_))
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_moves_to_a_surviving_node_when_its_node_dies() {
    let mut cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    let f: Vec<u64> = cluster
        .live()
        .into_iter()
        .filter(|&i| i != speaker)
        .collect();
    let c = client(&cluster, &[f[0], f[1]]);
    let guard = c
        .acquire("move", AcquireOptions::default().lease(2 * SEC))
        .await
        .unwrap();
    // The client starts at a random endpoint of its two.
    let first = guard.lock().node;
    assert!(f.contains(&first), "{first}");
    let other = if first == f[0] { f[1] } else { f[0] };
    cluster.kill(first);
    tokio::time::sleep(5 * SEC).await;
    assert!(!guard.is_lost(), "renewed through the other node");
    assert_eq!(
        guard.lock().node,
        other,
        "the surviving node took the lock over"
    );
    let (status, body) = cluster.get(speaker, "/v1/locks/move").await;
    assert_eq!(status, 200);
    assert_eq!(body["lock"]["node"], serde_json::json!(other));
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_is_cancelled_when_the_lock_is_lost_before_another_gets_it() {
    let mut cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    let f: Vec<u64> = cluster
        .live()
        .into_iter()
        .filter(|&i| i != speaker)
        .collect();
    // This client can reach only one node, which then dies: no renewal gets
    // through, and the client must stop on its own clock.
    let lonely = client(&cluster, &[f[0]]);
    let other = client(&cluster, &[speaker, f[1]]);
    let cancelled_at = Arc::new(Mutex::new(None));
    let seen = cancelled_at.clone();
    let work = tokio::spawn(async move {
        lonely
            .with_lock(
                "work",
                AcquireOptions::default().lease(2 * SEC),
                |cancel| async move {
                    cancel.cancelled().await;
                    *seen.lock().unwrap() = Some(Instant::now());
                    "stopped"
                },
            )
            .await
    });
    tokio::time::sleep(SEC / 2).await;
    cluster.kill(f[0]);
    let taken = other
        .acquire("work", AcquireOptions::default().wait(20 * SEC))
        .await
        .unwrap();
    let taken_at = Instant::now();
    let outcome = work.await.unwrap();
    assert!(matches!(outcome, Err(Error::Lost)), "{outcome:?}");
    let cancelled = cancelled_at
        .lock()
        .unwrap()
        .expect("the work saw the cancellation");
    assert!(
        cancelled < taken_at,
        "the holder stopped before another got the lock"
    );
    taken.release().await.unwrap();
}

/// A guard says why it lost its lock: a renewal refused (here, an
/// operator released the lock) is `Refused`; no renewal getting through
/// before the lease ends on the client's clock (its only node died) is
/// `Lapsed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guard_tells_a_refused_renewal_from_a_lapse() {
    let mut cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    let follower = cluster.others(speaker)[0];
    let options = || AcquireOptions::default().lease(2 * SEC);

    let refused = all(&cluster)
        .acquire("loss/refused", options())
        .await
        .unwrap();
    assert_eq!(refused.loss(), None);
    let (status, body) = cluster
        .post(
            speaker,
            "/v1/locks/release",
            serde_json::json!({"name": "loss/refused", "id": refused.id()}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    tokio::time::timeout(10 * SEC, refused.lost())
        .await
        .unwrap();
    assert_eq!(refused.loss(), Some(Loss::Refused));

    let lapsed = client(&cluster, &[follower])
        .acquire("loss/lapsed", options())
        .await
        .unwrap();
    cluster.kill(follower);
    tokio::time::timeout(10 * SEC, lapsed.lost()).await.unwrap();
    assert_eq!(lapsed.loss(), Some(Loss::Lapsed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_runs_the_work_and_releases() {
    let cluster = Cluster::start(3).await;
    let c = all(&cluster);
    let out = c
        .with_lock("done", AcquireOptions::default(), |_cancel| async { 42 })
        .await
        .unwrap();
    assert_eq!(out, 42);
    assert!(
        c.get("done").await.unwrap().is_none(),
        "released after the work"
    );
}

/// `with_lock` holds each kind as its options ask: two readers' work runs
/// at once and a writer is refused meanwhile; two permits' work runs at
/// once and a third holder is refused; a session's lock is held in the
/// session while its work runs, released after it, the session still
/// open. Each lock is free once its work is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_holds_each_kind_for_the_work_then_releases() {
    let cluster = Cluster::start(3).await;
    let c = all(&cluster);
    for (name, kind) in [
        ("kind/shared", AcquireOptions::default().shared()),
        ("kind/permits", AcquireOptions::default().permits(2)),
    ] {
        let both_in = Arc::new(tokio::sync::Barrier::new(3));
        let work = |both_in: Arc<tokio::sync::Barrier>| {
            move |_lost| async move {
                both_in.wait().await;
                // Held here until the outsider has been refused.
                both_in.wait().await;
            }
        };
        let first = tokio::spawn({
            let (c, kind, w) = (c.clone(), kind.clone(), work(both_in.clone()));
            async move { c.with_lock(name, kind, w).await }
        });
        let second = tokio::spawn({
            let (c, kind, w) = (c.clone(), kind.clone(), work(both_in.clone()));
            async move { c.with_lock(name, kind, w).await }
        });
        tokio::time::timeout(Duration::from_secs(20), both_in.wait())
            .await
            .unwrap_or_else(|_| panic!("{name}: both holders' work did not run at once"));
        let outsider = match name {
            "kind/shared" => AcquireOptions::default(),
            _ => kind.clone(),
        };
        match c.try_acquire(name, outsider).await {
            Err(Error::Held(_)) => {}
            other => panic!(
                "{name}: a third holder beside the two was not refused: {:?}",
                other.map(|guard| guard.lock())
            ),
        }
        both_in.wait().await;
        first.await.unwrap().unwrap();
        second.await.unwrap().unwrap();
        assert!(
            c.get(name).await.unwrap().is_none(),
            "{name}: released after the work"
        );
    }

    let session = c.open_session(Default::default()).await.unwrap();
    let id = session.id().to_string();
    let seen = session
        .with_lock("kind/session", AcquireOptions::default(), |_lost| {
            let c = c.clone();
            async move { c.get("kind/session").await.unwrap() }
        })
        .await
        .unwrap();
    let seen = seen.expect("the lock is held while its work runs");
    assert_eq!(
        seen.session.as_deref(),
        Some(id.as_str()),
        "held in the session"
    );
    assert!(
        c.get("kind/session").await.unwrap().is_none(),
        "released after the work"
    );
    assert!(!session.is_lost(), "the session stays open");
    assert_eq!(
        session.close().await.unwrap(),
        0,
        "no lock was left in the session"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_leader_at_a_time_among_five_and_observers_see_every_change_in_order() {
    let cluster = Cluster::start(3).await;
    let nodes = cluster.live();
    let observer = all(&cluster);
    let observed = Arc::new(Mutex::new(Vec::<(String, u64)>::new()));
    let log = observed.clone();
    let watcher = tokio::spawn(async move {
        let mut stream = Box::pin(observer.observe("leader"));
        while let Some(item) = stream.next().await {
            if let Ok(Some(lock)) = item {
                log.lock()
                    .unwrap()
                    .push((lock.data.unwrap_or_default(), lock.fence));
            }
        }
    });

    // Five candidates, each leading a little while then resigning.
    let terms = Arc::new(Mutex::new(Vec::<(Instant, Instant, String, u64)>::new()));
    let mut candidates = Vec::new();
    for i in 0..5u64 {
        let c = client(
            &cluster,
            &[nodes[(i as usize) % 3], nodes[(i as usize + 1) % 3]],
        );
        let terms = terms.clone();
        candidates.push(tokio::spawn(async move {
            for _round in 0..2 {
                let name = format!("candidate-{i}");
                let leadership = c
                    .campaign(
                        "leader",
                        &name,
                        CampaignOptions {
                            lease: Some(2 * SEC),
                            ..Default::default()
                        },
                    )
                    .await
                    .unwrap();
                let start = Instant::now();
                tokio::time::sleep(Duration::from_millis(300)).await;
                assert!(!leadership.lost_token().is_cancelled());
                let fence = leadership.fence();
                let end = Instant::now();
                leadership.resign().await.unwrap();
                terms.lock().unwrap().push((start, end, name, fence));
            }
        }));
    }
    for c in candidates {
        c.await.unwrap();
    }
    tokio::time::sleep(SEC).await;
    watcher.abort();

    let mut terms = terms.lock().unwrap().clone();
    assert_eq!(terms.len(), 10);
    terms.sort_by_key(|t| t.0);
    for pair in terms.windows(2) {
        assert!(
            pair[0].1 <= pair[1].0,
            "two leaders at once: {:?} and {:?}",
            pair[0].2,
            pair[1].2
        );
        assert!(pair[0].3 < pair[1].3, "fences grow with each leadership");
    }
    let observed = observed.lock().unwrap().clone();
    let expected: Vec<(String, u64)> = terms.iter().map(|t| (t.2.clone(), t.3)).collect();
    assert_eq!(
        observed, expected,
        "the observer saw every leader, in order"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_campaign_gives_up_when_its_own_deadline_passes() {
    let cluster = Cluster::start(3).await;
    let a = all(&cluster);
    let leader = a
        .campaign("busy", "a", CampaignOptions::default())
        .await
        .unwrap();
    let start = Instant::now();
    let lost = a
        .campaign(
            "busy",
            "b",
            CampaignOptions {
                give_up_after: Some(SEC),
                ..Default::default()
            },
        )
        .await;
    assert!(
        matches!(lost, Err(Error::Held(_))),
        "{:?}",
        lost.map(|l| l.lock())
    );
    assert!(start.elapsed() < 5 * SEC);
    assert_eq!(
        a.leader("busy").await.unwrap().unwrap().data.as_deref(),
        Some("a")
    );
    leader.resign().await.unwrap();
}

/// A leader proclaims a new value: an observer through a follower sees it
/// at once (its long poll ends, it does not wait out a poll), the fence
/// stays, and the value survives a kill -9 of the speaker, read back
/// from the next speaker's rebuilt table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proclaimed_value_is_seen_at_once_and_survives_a_speaker_crash() {
    let mut cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    let followers = cluster.others(speaker);
    // The leader reaches the cluster through a follower (its renewals and
    // the proclaim are forwarded), and so does the observer.
    let leader_client = client(&cluster, &[followers[0]]);
    let observer = client(&cluster, &[followers[1]]);
    let leadership = leader_client
        .campaign(
            "svc/leader",
            "v1",
            CampaignOptions {
                lease: Some(3 * SEC),
                ..CampaignOptions::default()
            },
        )
        .await
        .unwrap();
    let mut seen = Box::pin(observer.observe("svc/leader"));
    let first = seen.next().await.unwrap().unwrap().unwrap();
    assert_eq!(first.data.as_deref(), Some("v1"));
    let proclaimed_at = Instant::now();
    let view = leadership.proclaim("v2").await.unwrap();
    assert_eq!(view.data.as_deref(), Some("v2"));
    assert_eq!(view.fence, first.fence, "a proclaim keeps the term");
    let next = tokio::time::timeout(10 * SEC, seen.next())
        .await
        .expect("the observer never saw the new value")
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(
        (next.data.as_deref(), next.fence),
        (Some("v2"), first.fence)
    );
    // Well inside the observer's 30 s poll: the change ended it.
    assert!(proclaimed_at.elapsed() < 10 * SEC);
    cluster.kill(speaker);
    let start = Instant::now();
    let after = loop {
        if let Ok(Some(lock)) = observer.leader("svc/leader").await {
            break lock;
        }
        assert!(
            start.elapsed() < support::PATIENCE,
            "no leader after the crash"
        );
        tokio::time::sleep(SEC / 5).await;
    };
    assert_eq!(
        (after.data.as_deref(), after.fence),
        (Some("v2"), first.fence)
    );
    assert!(
        !leadership.is_lost(),
        "the leader kept its term through the crash"
    );
}

/// A cluster held below the protocol that lets data change (a member
/// started with a lower `--protocol`: the downgrade window): a change of
/// data gives up with `Unavailable` and costs nothing else: the lock is
/// kept, renewed, with its data as granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_of_data_the_cluster_cannot_take_yet_keeps_the_lock() {
    let cluster = Cluster::start_with(1, &["--protocol", "1"]).await;
    let mine = all(&cluster);
    let guard = mine
        .acquire("d/1", AcquireOptions::default().lease(2 * SEC).data("v1"))
        .await
        .unwrap();
    match guard.set_data("v2").await {
        Err(Error::Unavailable(why)) => assert!(why.contains("protocol 2"), "{why}"),
        other => panic!("expected unavailable, got {other:?}"),
    }
    // Longer than the lease: renewals went on beside the refused change.
    tokio::time::sleep(3 * SEC).await;
    assert!(!guard.is_lost(), "{:?}", guard.loss());
    let now = mine.get("d/1").await.unwrap().expect("still held");
    assert_eq!(
        (now.fence, now.data.as_deref()),
        (guard.fence(), Some("v1"))
    );
    guard.release().await.unwrap();
}

/// `acquire_all` holds every name with consecutive fences, renews them all
/// past several leases, counts the set lost when one of its locks is (an
/// operator released it), and releases the rest with the set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_set_is_held_renewed_and_lost_as_one() {
    let cluster = Cluster::start(3).await;
    cluster.wait_protocol(support::SPEAKS).await;
    let (speaker, _) = cluster.speaker().await;
    let c = all(&cluster);
    let options = || AcquireOptions::default().lease(2 * SEC);
    let set = c
        .acquire_all(&["set/a", "set/b", "set/c"], options())
        .await
        .unwrap();
    let fences = set.fences();
    assert_eq!(fences, [fences[0], fences[0] + 1, fences[0] + 2]);
    // Past three leases: every lock renewed, none lost.
    tokio::time::sleep(6 * SEC).await;
    assert!(!set.is_lost());
    for lock in set.locks() {
        let held = c.get(&lock.name).await.unwrap().expect("held");
        assert_eq!(held.id, lock.id);
    }
    // A set that cannot be had whole takes nothing.
    let refused = c
        .acquire_all(&["set/free", "set/b"], AcquireOptions::default())
        .await;
    assert!(matches!(refused, Err(Error::Held(_))), "{refused:?}");
    assert!(c.get("set/free").await.unwrap().is_none());

    let b = &set.locks()[1];
    let (status, body) = cluster
        .post(
            speaker,
            "/v1/locks/release",
            serde_json::json!({"name": "set/b", "id": b.id}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    tokio::time::timeout(10 * SEC, set.lost()).await.unwrap();
    assert!(set.check().is_err());
    let _ = set.release().await;
    for name in ["set/a", "set/c"] {
        assert!(
            c.get(name).await.unwrap().is_none(),
            "{name} released with the set"
        );
    }
    // with_locks runs the work under the set and releases it.
    let out = c
        .with_locks(&["set/x", "set/y"], options(), |_lost| async { 7 })
        .await
        .unwrap();
    assert_eq!(out, 7);
    assert!(c.get("set/x").await.unwrap().is_none());
}

/// Successful releases node `id` has answered, by its `/metrics` (0
/// before its first).
async fn releases_answered(cluster: &Cluster, id: u64) -> u64 {
    let series =
        r#"leasehold_http_request_duration_seconds_count{route="/v1/locks/release",status="2xx"}"#;
    cluster.metric(id, series).await.map_or(0, |v| v as u64)
}

/// A `LockSet` through a follower is released in one call (one request
/// at the node, not one per lock), and every name is free at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_set_is_released_in_one_call() {
    let cluster = Cluster::start(3).await;
    cluster.wait_protocol(support::SPEAKS).await;
    let (speaker, _) = cluster.speaker().await;
    let via = cluster.others(speaker)[0];
    let c = client(&cluster, &[via]);
    let names = ["one/a", "one/b", "one/c", "one/d"];
    let set = c
        .acquire_all(&names, AcquireOptions::default().lease(30 * SEC))
        .await
        .unwrap();
    let before = releases_answered(&cluster, via).await;
    set.release().await.unwrap();
    assert_eq!(releases_answered(&cluster, via).await, before + 1);
    let rival = client(&cluster, &[speaker]);
    let taken = rival
        .acquire_all(&names, AcquireOptions::default())
        .await
        .unwrap();
    taken.release().await.unwrap();
}

/// A session keeps its locks with one renewal past several leases, moves
/// to a surviving node when its node dies, tells of a lock released behind
/// its back, and frees every lock when closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_keeps_its_locks_across_its_node_dying_and_frees_them_when_closed() {
    let mut cluster = Cluster::start(3).await;
    cluster.wait_protocol(support::SPEAKS).await;
    let (speaker, _) = cluster.speaker().await;
    let near = cluster.others(speaker)[0];
    // The client tries its node first, then the speaker.
    let mine = client(&cluster, &[near, speaker]);
    let theirs = client(&cluster, &[speaker]);
    let session = mine
        .open_session(leasehold_client::SessionOptions {
            ttl: Some(4 * SEC),
            holder: Some("me".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let names = ["ss/a", "ss/b", "ss/c"];
    let mut locks = Vec::new();
    for name in names {
        locks.push(
            session
                .acquire(name, AcquireOptions::default())
                .await
                .unwrap(),
        );
    }
    assert!(locks
        .iter()
        .all(|l| l.lock().session.as_deref() == Some(session.id())));
    cluster.kill(near);
    tokio::time::sleep(10 * SEC).await;
    assert!(!session.is_lost(), "renewed through the speaker since");
    for (name, lock) in names.iter().zip(&locks) {
        assert!(!lock.is_lost());
        match theirs.try_acquire(name, AcquireOptions::default()).await {
            Err(Error::Held(holder)) => assert_eq!(holder.fence, lock.fence()),
            other => panic!("expected held, got {:?}", other.map(|g| g.lock())),
        }
    }
    // A lock released behind the session's back: its next renewal says so.
    let gone = locks.pop().unwrap();
    theirs
        .release(&gone.lock().name, &gone.lock().id)
        .await
        .unwrap();
    tokio::time::timeout(10 * SEC, gone.lost_token().cancelled())
        .await
        .expect("the released lock is told lost");
    assert!(!session.is_lost() && !locks[0].is_lost());
    assert_eq!(session.close().await.unwrap(), 2);
    for name in names {
        theirs
            .acquire(name, AcquireOptions::default().lease(SEC))
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
}
