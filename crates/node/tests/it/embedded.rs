//! Nodes embedded in this process, used through the same client types as
//! over HTTP, without HTTP to themselves.

use std::time::Duration;

use leasehold_client::{AcquireOptions, CampaignOptions, Error};
use leasehold_node::RunningNode;

async fn three_nodes(dir: &std::path::Path) -> Vec<RunningNode> {
    crate::common::start_nodes(3, dir, "embedded-test").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_nodes_lock_and_elect_through_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = three_nodes(dir.path()).await;
    let clients: Vec<_> = nodes.iter().map(|n| n.node().client()).collect();

    let guard = clients[0]
        .acquire(
            "embedded/a",
            AcquireOptions::default()
                .holder("app-1")
                .wait(Duration::from_secs(20)),
        )
        .await
        .unwrap();
    match clients[1]
        .try_acquire("embedded/a", AcquireOptions::default())
        .await
    {
        Err(Error::Held(holder)) => assert_eq!(holder.holder, "app-1"),
        other => panic!("{:?}", other.map(|g| g.lock())),
    }
    assert_eq!(
        clients[2].get("embedded/a").await.unwrap().unwrap().id,
        guard.id()
    );
    guard.release().await.unwrap();
    assert!(clients[2].get("embedded/a").await.unwrap().is_none());

    let long_name = "x".repeat(600);
    assert!(matches!(
        clients[0]
            .try_acquire(&long_name, AcquireOptions::default())
            .await,
        Err(Error::BadRequest(_))
    ));

    let leader = clients[1]
        .campaign("embedded/leader", "app-2", CampaignOptions::default())
        .await
        .unwrap();
    assert_eq!(
        clients[0]
            .leader("embedded/leader")
            .await
            .unwrap()
            .unwrap()
            .data
            .as_deref(),
        Some("app-2")
    );
    leader.resign().await.unwrap();
    let next = clients[2]
        .campaign(
            "embedded/leader",
            "app-3",
            CampaignOptions {
                give_up_after: Some(Duration::from_secs(20)),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(next.lock().data.as_deref(), Some("app-3"));
    next.resign().await.unwrap();

    for node in nodes {
        node.shutdown().await;
    }
}

/// A shutdown ends every task the node started: once it returns, nothing
/// of the node is left running (every task holds the node, so a task that
/// outlived the shutdown would keep it alive).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_leaves_no_task_of_the_node_running() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = three_nodes(dir.path()).await;
    {
        let client = nodes[1].node().client();
        let lock = client
            .acquire(
                "embedded/tasks",
                AcquireOptions {
                    wait: Duration::from_secs(20),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        lock.release().await.unwrap();
    }
    let nodes_left: Vec<_> = nodes
        .iter()
        .map(|n| std::sync::Arc::downgrade(n.node()))
        .collect();
    for node in nodes {
        node.shutdown().await;
    }
    for (i, node) in nodes_left.iter().enumerate() {
        assert!(
            node.upgrade().is_none(),
            "node {} is still held by a task after its shutdown",
            i + 1
        );
    }
}

/// A session through an embedded node: its locks are held, and the node's
/// shutdown closes it, freeing them long before the session's lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_session_holds_its_locks_and_a_shutdown_frees_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = three_nodes(dir.path()).await;
    let clients: Vec<_> = nodes.iter().map(|n| n.node().client()).collect();
    let session = loop {
        match clients[0]
            .open_session(leasehold_client::SessionOptions {
                ttl: Some(Duration::from_secs(30)),
                holder: Some("app-1".into()),
                ..Default::default()
            })
            .await
        {
            Ok(session) => break session,
            // The members agree on the protocol a moment after they start.
            Err(Error::Unavailable(_)) => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(e) => panic!("{e}"),
        }
    };
    for name in ["emb/s1", "emb/s2"] {
        session
            .acquire(name, AcquireOptions::default())
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!session.is_lost());
    assert!(matches!(
        clients[1]
            .try_acquire("emb/s1", AcquireOptions::default())
            .await,
        Err(Error::Held(_))
    ));
    let first = nodes.remove(0);
    first.shutdown().await;
    let started = std::time::Instant::now();
    for name in ["emb/s1", "emb/s2"] {
        clients[1]
            .acquire(
                name,
                AcquireOptions::default().wait(Duration::from_secs(20)),
            )
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    // Within a third of the session's lease: only its close frees them so
    // soon (its lease ends 30 s after its last renewal).
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "freed by the shutdown, not by the lease: {:?}",
        started.elapsed()
    );
    drop(session);
    for node in nodes {
        node.shutdown().await;
    }
}

/// A set through an embedded node is released in one call (the embedded
/// transport's `release_set`): the release reports no loss, and every name
/// is free for another client at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_lock_set_is_released_whole() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = three_nodes(dir.path()).await;
    let clients: Vec<_> = nodes.iter().map(|n| n.node().client()).collect();
    let names = ["emb/x", "emb/y", "emb/z"];
    let set = loop {
        match clients[0]
            .acquire_all(&names, AcquireOptions::default())
            .await
        {
            Ok(set) => break set,
            // The members agree on the protocol a moment after they start.
            Err(Error::Unavailable(_)) => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(e) => panic!("{e}"),
        }
    };
    set.release().await.unwrap();
    clients[1]
        .acquire_all(&names, AcquireOptions::default())
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    for node in nodes {
        node.shutdown().await;
    }
}
