//! The Rust client over the binary transport, without the fallback to
//! HTTP (`TransportKind::Binary`: a call a node did not take as frames
//! fails), against real clusters: locks, renewals, a watch, a listing and
//! a session; tokens under `--acl`; TLS with ALPN `leasehold`.

use crate::support;

use std::time::Duration;

use leasehold_client::{AcquireOptions, Client, Error, SessionOptions, TransportKind};
use support::{make_certs, Cluster};

const SEC: Duration = Duration::from_secs(1);

/// A client of every node of `cluster` over frames only.
fn binary(cluster: &Cluster) -> leasehold_client::ClientBuilder {
    let endpoints = cluster
        .live()
        .into_iter()
        .map(|id| cluster.addrs[&id].clone());
    Client::builder(endpoints).transport(TransportKind::Binary)
}

/// The connections of the binary transport open on every node, summed.
async fn binary_connections(cluster: &Cluster) -> f64 {
    let mut open = 0.0;
    for id in cluster.live() {
        let series = "leasehold_binary_connections";
        open += cluster.metric(id, series).await.unwrap_or(0.0);
    }
    open
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_over_frames_locks_renews_watches_and_keeps_a_session() {
    let cluster = Cluster::start(3).await;
    cluster.wait_protocol(support::SPEAKS).await;
    let client = binary(&cluster).build().unwrap();
    let other = binary(&cluster).build().unwrap();

    let options = AcquireOptions::default().lease(SEC).holder("frames");
    let guard = client.acquire("f/1", options).await.unwrap();
    assert!(
        binary_connections(&cluster).await >= 1.0,
        "no binary connection"
    );
    // Several leases long: the guard's renewals go over frames.
    tokio::time::sleep(3 * SEC).await;
    assert!(!guard.is_lost());
    let seen = other.get("f/1").await.unwrap().expect("held");
    assert_eq!(
        (seen.holder.as_str(), seen.fence),
        ("frames", guard.fence())
    );
    match other.try_acquire("f/1", AcquireOptions::default()).await {
        Err(Error::Held(holder)) => assert_eq!(holder.fence, guard.fence()),
        other => panic!("expected held, got {:?}", other.map(|g| g.lock())),
    }
    let listed = other.list("f/", 10).await.unwrap();
    assert_eq!(listed.len(), 1);

    // A watch waits on its connection while the release goes on another.
    let fence = guard.fence();
    let watching = {
        let other = other.clone();
        tokio::spawn(async move { other.watch("f/1", fence, 10 * SEC).await })
    };
    tokio::time::sleep(SEC / 2).await;
    guard.release().await.unwrap();
    let changed = tokio::time::timeout(5 * SEC, watching)
        .await
        .expect("the watch ended at the release")
        .unwrap()
        .unwrap();
    assert!(changed.is_none(), "released: {changed:?}");

    let session = client
        .open_session(SessionOptions {
            ttl: Some(2 * SEC),
            holder: Some("frames".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let a = session
        .acquire("f/s1", AcquireOptions::default())
        .await
        .unwrap();
    let b = session
        .acquire("f/s2", AcquireOptions::default())
        .await
        .unwrap();
    tokio::time::sleep(5 * SEC).await;
    assert!(!session.is_lost() && !a.is_lost() && !b.is_lost());
    assert_eq!(session.close().await.unwrap(), 2);
    assert!(other.get("f/s1").await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_over_frames_are_checked_as_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let acl = crate::acl::acl_file(dir.path());
    let cluster = Cluster::start_with(3, &["--acl", acl.to_str().unwrap()]).await;

    let deployer = binary(&cluster).token(crate::acl::DEPLOY).build().unwrap();
    let guard = deployer
        .acquire("jobs/1", AcquireOptions::default())
        .await
        .unwrap();
    match deployer
        .try_acquire("other/1", AcquireOptions::default())
        .await
    {
        Err(Error::Forbidden(_)) => {}
        other => panic!("expected forbidden, got {:?}", other.map(|g| g.lock())),
    }
    guard.release().await.unwrap();

    let stranger = binary(&cluster).token("not-a-token").build().unwrap();
    match stranger.get("jobs/1").await {
        Err(Error::Unauthorized(_)) => {}
        other => panic!("expected unauthorized, got {other:?}"),
    }
    let anonymous = binary(&cluster).build().unwrap();
    match anonymous.get("jobs/1").await {
        Err(Error::Unauthorized(_)) => {}
        other => panic!("expected unauthorized, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_is_called_over_frames() {
    let certs = tempfile::tempdir().unwrap();
    make_certs(certs.path(), &["node-1", "node-2", "node-3"]);
    let cluster = Cluster::start_tls(3, certs.path(), &[]).await;
    let client = binary(&cluster)
        .tls_ca_file(certs.path().join("ca.pem"))
        .unwrap()
        .build()
        .unwrap();
    let guard = client
        .acquire("f/tls", AcquireOptions::default())
        .await
        .unwrap();
    assert_eq!(
        client.get("f/tls").await.unwrap().unwrap().fence,
        guard.fence()
    );
    guard.release().await.unwrap();
    // The members speak mutual TLS: their calls over frames carry the
    // certificate's check to the peer routes, as over HTTP.
    let options = || AcquireOptions::default().lease(60 * SEC);
    let mut n = 0;
    while crate::peer_frames::peer_calls(&cluster, &cluster.live()).await == 0.0 {
        assert!(n < 200, "no member's call went over frames");
        let guard = client
            .acquire(&format!("f/tls/{n}"), options())
            .await
            .unwrap();
        guard.release().await.unwrap();
        n += 1;
    }
}
