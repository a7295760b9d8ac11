//! Three real nodes over loopback HTTP: they elect one leader, and after it
//! stops the other two elect a new one in a higher term.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;
use tokio::time::Instant;

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::response::Response;
use leasehold_raft::*;
use tokio::task::JoinHandle;

const TOKEN: &str = "test-cluster-token";

struct TestNode {
    id: u64,
    raft: Raft,
    server: JoinHandle<()>,
    stop_server: tokio::sync::oneshot::Sender<()>,
    addr: SocketAddr,
}

impl TestNode {
    /// Stops Raft, then the HTTP server and its open connections.
    async fn stop(self) {
        self.raft.shutdown().await.unwrap();
        let _ = self.stop_server.send(());
        tokio::time::timeout(Duration::from_secs(5), self.server)
            .await
            .expect("server stops")
            .unwrap();
    }
}

async fn require_token(req: Request, next: Next) -> Response {
    let given = req
        .headers()
        .get(TOKEN_HEADER)
        .map(|v| v.as_bytes())
        .unwrap_or(b"");
    if token_matches(TOKEN, given) {
        next.run(req).await
    } else {
        StatusCode::UNAUTHORIZED.into_response()
    }
}

async fn start_node(id: u64, dir: &Path, addr: SocketAddr) -> TestNode {
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let Built { raft, identity, .. } =
        build(id, dir, &RaftTimings::default(), TOKEN, Faults::default())
            .await
            .unwrap();
    let app = raft_router(raft.clone())
        .layer(axum::middleware::from_fn_with_state(
            identity,
            identity::guard,
        ))
        .layer(axum::middleware::from_fn(require_token));
    let (stop_server, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await
            .unwrap();
    });
    raft.run();
    TestNode {
        id,
        raft,
        server,
        stop_server,
        addr,
    }
}

/// The leader every given node agrees on, once they all do and it says it leads.
fn agreed_leader(nodes: &[&TestNode]) -> Option<(u64, u64)> {
    let first = nodes[0].raft.metrics().borrow_watched().clone();
    let leader = first.current_leader?;
    for n in nodes {
        let m = n.raft.metrics().borrow_watched().clone();
        if m.current_leader != Some(leader) || m.current_term != first.current_term {
            return None;
        }
        if n.id == leader && m.state != ServerState::Leader {
            return None;
        }
    }
    nodes
        .iter()
        .any(|n| n.id == leader)
        .then_some((leader, first.current_term))
}

async fn wait_for_leader(nodes: &[&TestNode], min_term: u64) -> (u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match agreed_leader(nodes) {
            Some((leader, term)) if term >= min_term => return (leader, term),
            _ => {}
        }
        assert!(Instant::now() < deadline, "no agreed leader within 10 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_elect_and_fail_over() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut nodes = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        let any_port: SocketAddr = "127.0.0.1:0".parse().unwrap();
        nodes.push(start_node(i as u64 + 1, dir.path(), any_port).await);
    }

    // A request without the token is turned away by the test's middleware,
    // so the election below proves the client sends it.
    let status = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(format!("http://{}{}", nodes[0].addr, routes::VOTE))
        .body(Vec::<u8>::new())
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, reqwest::StatusCode::UNAUTHORIZED);
    // With the token, an undecodable body is a 400, not a panic.
    let status = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(format!("http://{}{}", nodes[0].addr, routes::APPEND))
        .header(TOKEN_HEADER, TOKEN)
        .body(vec![0xff_u8; 7])
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(status, reqwest::StatusCode::BAD_REQUEST);

    let members: BTreeMap<u64, BasicNode> = nodes
        .iter()
        .map(|n| {
            (
                n.id,
                BasicNode {
                    addr: n.addr.to_string(),
                },
            )
        })
        .collect();
    assert!(!nodes[0].raft.is_initialized().await.unwrap());
    nodes[0].raft.initialize(members.clone()).await.unwrap();
    // A second initialize is refused with NotAllowed, which a node may ignore.
    let again = nodes[0].raft.initialize(members).await.unwrap_err();
    assert!(matches!(
        again.api_error(),
        Some(errors::InitializeError::NotAllowed(_))
    ));

    let all: Vec<&TestNode> = nodes.iter().collect();
    let (leader, term) = wait_for_leader(&all, 1).await;
    let leader_idx = nodes.iter().position(|n| n.id == leader).unwrap();

    // The leader reports its lease; the followers are not leaders.
    let deadline = Instant::now() + Duration::from_secs(5);
    let state = loop {
        let s = leader_state(&nodes[leader_idx].raft).expect("leader_state on the leader");
        if s.quorum_acked_at.is_some() {
            break s;
        }
        assert!(
            Instant::now() < deadline,
            "leader never acknowledged by a quorum"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert_eq!(state.term(), term);
    let lease = RaftTimings::default().leader_lease();
    let until = state
        .lease_deadline(lease, Duration::from_millis(50))
        .unwrap();
    assert!(until > Instant::now() - Duration::from_millis(1));
    for n in nodes.iter().filter(|n| n.id != leader) {
        assert!(leader_state(&n.raft).is_none());
    }

    // Stop the leader: the other two elect a new one in a higher term.
    let old = nodes.remove(leader_idx);
    let old_addr = old.addr;
    old.stop().await;
    let rest: Vec<&TestNode> = nodes.iter().collect();
    let (new_leader, new_term) = wait_for_leader(&rest, term + 1).await;
    assert_ne!(new_leader, leader);
    assert!(new_term > term);

    // Restart the old leader from its data dir at its address: it keeps its
    // identity and membership (no initialize) and follows the new leader.
    let back = start_node(leader, dirs[leader_idx].path(), old_addr).await;
    assert!(back.raft.is_initialized().await.unwrap());
    nodes.push(back);
    let all: Vec<&TestNode> = nodes.iter().collect();
    let (after, after_term) = wait_for_leader(&all, new_term).await;
    assert_eq!(
        after, new_leader,
        "a restarted node must not depose a healthy leader"
    );
    assert_eq!(after_term, new_term);

    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sole_voter_keeps_its_lease() {
    let dir = tempfile::tempdir().unwrap();
    let node = start_node(1, dir.path(), "127.0.0.1:0".parse().unwrap()).await;
    let members: BTreeMap<u64, BasicNode> = [(
        1,
        BasicNode {
            addr: node.addr.to_string(),
        },
    )]
    .into();
    node.raft.initialize(members).await.unwrap();
    let (leader, _) = wait_for_leader(&[&node], 1).await;
    assert_eq!(leader, 1);
    tokio::time::sleep(RaftTimings::default().leader_lease() * 2).await;
    let state = leader_state(&node.raft).expect("still leader");
    let until = state
        .lease_deadline(
            RaftTimings::default().leader_lease(),
            Duration::from_millis(50),
        )
        .unwrap();
    assert!(until > Instant::now());
    node.stop().await;
}

/// A leader that removes itself from the voters is not replaced by
/// openraft on its own: a transfer would let the next leader win while the
/// speaker's guard still lets it grant (docs/design.md, "Membership
/// changes"); leasehold steps such a speaker down itself. So until it does,
/// no other member leads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_removes_itself_is_not_stepped_down_by_openraft() {
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut nodes = Vec::new();
    for (i, dir) in dirs.iter().enumerate() {
        let any_port: SocketAddr = "127.0.0.1:0".parse().unwrap();
        nodes.push(start_node(i as u64 + 1, dir.path(), any_port).await);
    }
    let members: BTreeMap<u64, BasicNode> = nodes
        .iter()
        .map(|n| {
            let addr = n.addr.to_string();
            (n.id, BasicNode { addr })
        })
        .collect();
    nodes[0].raft.initialize(members).await.unwrap();
    let all: Vec<&TestNode> = nodes.iter().collect();
    let (leader, term) = wait_for_leader(&all, 1).await;
    let leader_node = nodes.iter().find(|n| n.id == leader).unwrap();
    let others: std::collections::BTreeSet<u64> = nodes
        .iter()
        .map(|n| n.id)
        .filter(|id| *id != leader)
        .collect();
    // The new leader may not have committed the first configuration yet
    // (openraft answers InProgress until it has): ask again until it has.
    let asked = Instant::now();
    loop {
        match leader_node
            .raft
            .change_membership(others.clone(), false)
            .await
        {
            Ok(_) => break,
            Err(e) if format!("{e:?}").contains("InProgress") => {
                assert!(asked.elapsed() < Duration::from_secs(10), "{e:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("change_membership: {e:?}"),
        }
    }
    // openraft's own step-down would transfer 150 ms after the change
    // committed; wait well past it.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for n in nodes.iter().filter(|n| n.id != leader) {
        let m = n.raft.metrics().borrow_watched().clone();
        assert_eq!(
            (m.current_term, m.current_leader),
            (term, Some(leader)),
            "node {} moved on by itself",
            n.id
        );
    }
    for n in nodes {
        n.stop().await;
    }
}
