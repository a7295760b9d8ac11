//! The leader elector over nodes embedded in this process: it leads and
//! calls back, campaigns again after a loss, hands leadership over when
//! stopped or when its work ends, and an embedded node's shutdown resigns
//! the elections its own process leads, so another instance leads at once
//! rather than a lease later.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold_node::client::{Client, Elector, Lock};
use leasehold_node::RunningNode;
use tokio_util::sync::CancellationToken;

const PATIENCE: Duration = Duration::from_secs(30);

async fn nodes(n: u64, dir: &std::path::Path) -> Vec<RunningNode> {
    crate::common::start_nodes(n, dir, "elector-test").await
}

/// What an elector's callbacks saw.
#[derive(Default)]
struct Seen {
    started: Vec<u64>,
    stopped: usize,
    leaders: Vec<Option<String>>,
}

/// An elector for `app/leader` as `value`, lease `lease`, whose work runs
/// until its token is cancelled (or, with `work_for`, returns after that
/// long), recording what its callbacks saw.
fn elector(
    client: &Client,
    value: &str,
    lease: Duration,
    work_for: Option<Duration>,
) -> (Elector, Arc<Mutex<Seen>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let (started, stopped, leaders) = (seen.clone(), seen.clone(), seen.clone());
    let elector = client
        .elector("app/leader", value)
        .lease(lease)
        .on_started_leading(move |leading| {
            started.lock().unwrap().started.push(leading.fence());
            async move {
                match work_for {
                    Some(d) => tokio::time::sleep(d).await,
                    None => leading.token().cancelled().await,
                }
            }
        })
        .on_stopped_leading(move || stopped.lock().unwrap().stopped += 1)
        .on_new_leader(move |leader: Option<&Lock>| {
            let value = leader.and_then(|l| l.data.clone());
            leaders.lock().unwrap().leaders.push(value);
        })
        .build();
    (elector, seen)
}

async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < PATIENCE, "never: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_elector_leads_calls_back_and_campaigns_again_after_a_loss() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = nodes(1, dir.path()).await;
    let client = nodes[0].node().client();
    let (a, seen) = elector(&client, "a", Duration::from_secs(5), None);
    let stop = CancellationToken::new();
    let running = tokio::spawn({
        let (a, stop) = (a.clone(), stop.clone());
        async move { a.run(stop).await }
    });
    until("a leads", || a.is_leader()).await;
    let first = a.leading().unwrap().fence();
    assert_eq!(seen.lock().unwrap().started, vec![first]);
    until("a is seen leading", || {
        seen.lock().unwrap().leaders.last() == Some(&Some("a".to_string()))
    })
    .await;
    assert_eq!(a.leader().unwrap().data.as_deref(), Some("a"));

    // An operator releases the election's lock: a's next renewal is
    // refused, its term ends, and it campaigns and leads again.
    let lock = client.get("app/leader").await.unwrap().unwrap();
    client.release("app/leader", &lock.id).await.unwrap();
    until("a stopped leading", || seen.lock().unwrap().stopped == 1).await;
    until("a leads again", || seen.lock().unwrap().started.len() == 2).await;
    let second = seen.lock().unwrap().started[1];
    assert!(
        second > first,
        "a new term of leadership: {second} > {first}"
    );
    assert!(a.is_leader());
    let stats = a.stats();
    assert_eq!(stats.leader.as_deref(), Some("a"));
    assert_eq!(stats.terms_led, 2);
    assert!(stats.leading);
    assert!(stats.changes >= 1, "{stats:?}");

    // The leader proclaims a new value: every observer (this elector's
    // on_new_leader included) sees it; it is no change of leader.
    a.leading().unwrap().proclaim("a2").await.unwrap();
    until("a2 is observed", || {
        seen.lock().unwrap().leaders.last() == Some(&Some("a2".to_string()))
    })
    .await;
    let after = a.stats();
    assert_eq!(after.changes, stats.changes, "{after:?}");
    assert_eq!(after.leader.as_deref(), Some("a2"));

    // The embedded node exports the elector's counts on its /metrics.
    nodes[0].node().export_election(&a);
    let url = format!("http://{}/metrics", nodes[0].addr());
    let text = reqwest::get(&url).await.unwrap().text().await.unwrap();
    for series in [
        "leasehold_election_leading{election=\"app/leader\"} 1",
        "leasehold_election_has_leader{election=\"app/leader\"} 1",
        "leasehold_election_terms_led_total{election=\"app/leader\"} 2",
        "leasehold_election_leader_changes_total{election=\"app/leader\"}",
        "leasehold_election_leaderless_seconds_total{election=\"app/leader\"}",
    ] {
        assert!(text.contains(series), "{series} missing from:\n{text}");
    }
    let fence = format!("leasehold_election_leader_fence{{election=\"app/leader\"}} {second}");
    assert!(text.contains(&fence), "{fence} missing from:\n{text}");

    // Stopped: the term ends, and leadership is resigned.
    stop.cancel();
    running.await.unwrap().unwrap();
    assert!(!a.is_leader());
    assert_eq!(seen.lock().unwrap().stopped, 2);
    assert!(
        client.get("app/leader").await.unwrap().is_none(),
        "resigned"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_whose_work_ends_hands_over_to_the_next_candidate() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = nodes(1, dir.path()).await;
    let client = nodes[0].node().client();
    let lease = Duration::from_secs(20);
    let (a, seen_a) = elector(&client, "a", lease, Some(Duration::from_millis(300)));
    let stop = CancellationToken::new();
    tokio::spawn({
        let (a, stop) = (a.clone(), stop.clone());
        async move { a.run(stop).await }
    });
    until("a leads", || a.is_leader()).await;
    let (b, seen_b) = elector(&client, "b", lease, None);
    tokio::spawn({
        let (b, stop) = (b.clone(), stop.clone());
        async move { b.run(stop).await }
    });
    // a's work ends after 300 ms: it resigns, and b leads long before a's
    // 20 s lease would have run out.
    let start = Instant::now();
    until("b leads", || b.is_leader()).await;
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    assert!(seen_a.lock().unwrap().stopped >= 1);
    until("b sees itself lead", || {
        seen_b.lock().unwrap().leaders.last() == Some(&Some("b".to_string()))
    })
    .await;
    stop.cancel();
}

/// An instance whose process embeds a node and leads an election shuts
/// its node down without resigning first: the shutdown releases the
/// process's own locks through the speaker, so another instance leads at
/// once, not a lease later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_nodes_shutdown_resigns_the_elections_its_process_leads() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = nodes(3, dir.path()).await;
    let lease = Duration::from_secs(30);
    let clients: Vec<Client> = nodes.iter().map(|n| n.node().client()).collect();
    let (first, _) = elector(&clients[0], "one", lease, None);
    let stop_first = CancellationToken::new();
    tokio::spawn({
        let (first, stop) = (first.clone(), stop_first.clone());
        async move { first.run(stop).await }
    });
    until("one leads", || first.is_leader()).await;
    let (second, _) = elector(&clients[1], "two", lease, None);
    let stop = CancellationToken::new();
    tokio::spawn({
        let (second, stop) = (second.clone(), stop.clone());
        async move { second.run(stop).await }
    });
    let start = Instant::now();
    nodes.remove(0).shutdown().await;
    until("two leads", || second.is_leader()).await;
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "two led {:?} after the shutdown, with a {lease:?} lease",
        start.elapsed()
    );
    until("one no longer leads", || !first.is_leader()).await;
    stop.cancel();
    stop_first.cancel();
    for node in nodes {
        node.shutdown().await;
    }
}

/// An elector for `app/leader` as `n{id}` on `node`, standing by while
/// its own node speaks.
fn deferring(node: &Arc<leasehold_node::Node>, lease: Duration) -> Elector {
    let own = Arc::clone(node);
    node.client()
        .elector("app/leader", &format!("n{}", node.id()))
        .lease(lease)
        .defer_while(move || own.speaker() == Some(own.id()))
        .build()
}

/// Electors on every node that defer while their own node speaks: the
/// election's leader is an instance whose node does not speak, though the
/// speaker's instance campaigned first. Alone, the speaker's instance
/// leads anyway once no one has led for a lease (a stand-by, not a
/// non-candidate).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn electors_that_defer_to_the_speaker_keep_the_leader_apart_from_it() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = nodes(3, dir.path()).await;
    let lease = Duration::from_secs(2);
    until("every node names one speaker", || {
        let first = nodes[0].node().speaker();
        first.is_some() && nodes.iter().all(|n| n.node().speaker() == first)
    })
    .await;
    let speaker = nodes[0].node().speaker().unwrap();
    let stop = CancellationToken::new();
    let mut electors = Vec::new();
    // The speaker's instance first, then the others.
    let mut order: Vec<&RunningNode> = nodes.iter().collect();
    order.sort_by_key(|n| n.node().id() != speaker);
    for running in order {
        let e = deferring(running.node(), lease);
        tokio::spawn({
            let (e, stop) = (e.clone(), stop.clone());
            async move { e.run(stop).await }
        });
        electors.push((running.node().id(), e));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    until("someone leads", || {
        electors.iter().any(|(_, e)| e.is_leader())
    })
    .await;
    let (leader, _) = electors.iter().find(|(_, e)| e.is_leader()).unwrap();
    assert_ne!(*leader, speaker, "the leader's node speaks");
    stop.cancel();

    // Alone, the speaker's instance stands by for a lease, then leads.
    let dir = tempfile::tempdir().unwrap();
    let alone_nodes = nodes_alone(dir.path()).await;
    let node = alone_nodes.node();
    until("the single node speaks", || {
        node.speaker() == Some(node.id())
    })
    .await;
    let alone = deferring(node, lease);
    let stop = CancellationToken::new();
    let start = Instant::now();
    tokio::spawn({
        let (alone, stop) = (alone.clone(), stop.clone());
        async move { alone.run(stop).await }
    });
    until("the stand-by leads", || alone.is_leader()).await;
    assert!(
        start.elapsed() >= lease,
        "it stood by for a lease first: {:?}",
        start.elapsed()
    );
    stop.cancel();
}

async fn nodes_alone(dir: &std::path::Path) -> RunningNode {
    nodes(1, dir).await.remove(0)
}
