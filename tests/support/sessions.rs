//! A client's session over a real cluster, for tests: open one, take names
//! in it, renew it (once, or in the background while the cluster is
//! changed), and check that every lock of it is still held and refused to
//! a rival.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::Cluster;

/// Opens a session through `via` with a lease of `ttl_ms`; answers it.
pub async fn open(cluster: &Cluster, via: u64, ttl_ms: u64) -> Value {
    let (status, body) = cluster
        .post_settled(via, "/v1/sessions/open", json!({ "ttl_ms": ttl_ms }))
        .await;
    assert_eq!(status, 200, "{body}");
    body["session"].clone()
}

/// Renews `session` through `via` (retried while the cluster answers 503);
/// answers the whole answer.
pub async fn renew(cluster: &Cluster, via: u64, session: &Value) -> Value {
    let body = json!({ "id": session["id"] });
    let (status, body) = cluster.post_settled(via, "/v1/sessions/renew", body).await;
    assert_eq!(status, 200, "renew through {via}: {body}");
    body
}

/// Renews `session` through `via` as a client that holds `locks` in it
/// (it sends their digest): the session still counts every one of them,
/// and where the answer lists the session's locks (`held`), every one is
/// there.
pub async fn renew_holding(cluster: &Cluster, via: u64, session: &Value, locks: &[Value]) {
    let body = json!({ "id": session["id"], "digest": digest(locks) });
    let (status, body) = cluster.post_settled(via, "/v1/sessions/renew", body).await;
    assert_eq!(status, 200, "renew through {via}: {body}");
    assert!(
        holds_all(&body, locks),
        "renew through {via}: the session's locks are not the client's: {body}"
    );
}

/// Whether a renewal's answer `body` counts every one of `locks`, and, if
/// it lists the session's locks (the client's digest differed), lists
/// them.
pub fn holds_all(body: &Value, locks: &[Value]) -> bool {
    let listed = match body.get("held") {
        None => true,
        Some(held) => {
            let mut held: Vec<&Value> = held.as_array().into_iter().flatten().collect();
            let mut ids: Vec<&Value> = locks.iter().map(|lock| &lock["id"]).collect();
            held.sort_by_key(|id| id.as_str());
            ids.sort_by_key(|id| id.as_str());
            held == ids
        }
    };
    listed && body["session"]["locks"] == json!(locks.len())
}

/// The digest of `locks`' ids, as a renewal sends it.
pub fn digest(locks: &[Value]) -> String {
    let ids = locks.iter().map(|lock| {
        lock["id"]
            .as_str()
            .and_then(|id| id.parse::<locktable::LockId>().ok())
            .unwrap_or_else(|| panic!("a lock's id: {lock}"))
    });
    leasehold_api::format_digest(locktable::session::digest(ids))
}

/// Takes `names` in `session` through `via`.
pub async fn take(cluster: &Cluster, via: u64, session: &Value, names: &[&str]) -> Vec<Value> {
    let mut locks = Vec::new();
    for name in names {
        locks.push(
            cluster
                .must_acquire(via, name, json!({ "session": session["id"] }))
                .await,
        );
    }
    locks
}

/// Each of `names` is held by the lock of the same fence in `locks`: a
/// request of another client is refused with it.
pub async fn still_held(cluster: &Cluster, via: u64, names: &[&str], locks: &[Value]) {
    for (name, lock) in names.iter().zip(locks) {
        let (status, body) = cluster.acquire(via, name, json!({})).await;
        assert_eq!(
            (status, &body["error"]),
            (409, &json!("held")),
            "{name}: {body}"
        );
        assert_eq!(body["lock"]["fence"], lock["fence"], "{name}: {body}");
        assert_eq!(body["lock"]["session"], lock["session"], "{name}: {body}");
    }
}

/// Every one of `locks` is held as it was granted, through every running
/// node: a rival's request is refused with it (`409 held`, the same
/// fence and session), and the name's view shows the same id and fence.
pub async fn held_everywhere(cluster: &Cluster, locks: &[Value]) {
    for via in cluster.live() {
        for lock in locks {
            let name = lock["name"].as_str().expect("a lock's name");
            let rival = json!({ "holder": "rival", "lease_ms": 1000 });
            let (status, body) = cluster.acquire(via, name, rival).await;
            assert_eq!(
                (status, &body["error"]),
                (409, &json!("held")),
                "{name} asked by a rival through {via}: {body}"
            );
            assert_eq!(body["lock"]["fence"], lock["fence"], "{name}: {body}");
            assert_eq!(body["lock"]["session"], lock["session"], "{name}: {body}");
            let path = format!("/v1/locks/{}", name.replace('/', "%2F"));
            let (status, view) = cluster.get(via, &path).await;
            assert_eq!(status, 200, "{name} through {via}: {view}");
            assert_eq!(view["lock"]["id"], lock["id"], "{name}: {view}");
            assert_eq!(view["lock"]["fence"], lock["fence"], "{name}: {view}");
        }
    }
}

/// What a [`Keeper`] saw.
#[derive(Debug, Default)]
pub struct Kept {
    /// Renewals that went through.
    pub renewed: usize,
    /// Renewals refused for good, or that no longer counted every lock.
    pub lost: Vec<String>,
    /// Grants to a rival of a name the session held.
    pub twice: Vec<String>,
}

/// A client renewing its session in the background every `every`, through
/// the nodes it is told in turn (a node that does not answer, or answers
/// `503`, is passed over until its next turn), while a rival asks for each
/// name of the session through every node it is told, in turn.
pub struct Keeper {
    through: Arc<Mutex<Vec<String>>>,
    rivals: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Kept>,
}

impl Keeper {
    /// Starts renewing `session`, whose locks are `locks`, through the
    /// nodes at `through`, and asking for its names through `rivals`.
    pub fn start(
        session: &Value,
        locks: &[Value],
        every: Duration,
        through: Vec<String>,
        rivals: Vec<String>,
    ) -> Keeper {
        let through = Arc::new(Mutex::new(through));
        let rivals = Arc::new(Mutex::new(rivals));
        let stop = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(keep(
            json!({ "id": session["id"], "digest": digest(locks) }),
            locks.to_vec(),
            every,
            Arc::clone(&through),
            Arc::clone(&rivals),
            Arc::clone(&stop),
        ));
        Keeper {
            through,
            rivals,
            stop,
            task,
        }
    }

    /// Renews through the nodes at `addrs` from now on (none: renews no
    /// more until told a node again).
    pub fn renew_through(&self, addrs: Vec<String>) {
        *self.through.lock().unwrap() = addrs;
    }

    /// Asks as a rival through the nodes at `addrs` from now on.
    pub fn rivals_through(&self, addrs: Vec<String>) {
        *self.rivals.lock().unwrap() = addrs;
    }

    /// Stops, and answers what it saw.
    pub async fn stop(self) -> Kept {
        self.stop.store(true, Ordering::Relaxed);
        self.task.await.unwrap()
    }
}

async fn keep(
    renewal: Value,
    locks: Vec<Value>,
    every: Duration,
    through: Arc<Mutex<Vec<String>>>,
    rivals: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
) -> Kept {
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut kept = Kept::default();
    let (mut turn, mut rival_turn) = (0usize, 0usize);
    let mut last_renewal = Instant::now() - every;
    while !stop.load(Ordering::Relaxed) {
        if last_renewal.elapsed() >= every {
            last_renewal = Instant::now();
            turn += 1;
            // Told no node, the client waits (for its node, say).
            if let Some(addr) = in_turn(&through, turn) {
                let (status, body) = post(&http, &addr, "/v1/sessions/renew", &renewal).await;
                match status {
                    200 => {
                        kept.renewed += 1;
                        if !holds_all(&body, &locks) {
                            kept.lost.push(format!("renewed via {addr}: {body}"));
                        }
                    }
                    0 | 503 => {}
                    _ => kept.lost.push(format!("renew via {addr}: {status} {body}")),
                }
            }
        }
        rival_turn += 1;
        if let Some(addr) = in_turn(&rivals, rival_turn) {
            for lock in &locks {
                let rival = json!({ "name": lock["name"], "holder": "rival", "lease_ms": 1000 });
                let (status, body) = post(&http, &addr, "/v1/locks/acquire", &rival).await;
                if status == 200 {
                    kept.twice
                        .push(format!("{} via {addr}: {body}", lock["name"]));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    kept
}

/// The address whose turn `turn` is, if any.
fn in_turn(addrs: &Mutex<Vec<String>>, turn: usize) -> Option<String> {
    let addrs = addrs.lock().unwrap();
    (!addrs.is_empty()).then(|| addrs[turn % addrs.len()].clone())
}

async fn post(http: &reqwest::Client, addr: &str, path: &str, body: &Value) -> (u16, Value) {
    let request = http
        .post(format!("http://{addr}{path}"))
        .json(body)
        .timeout(Duration::from_millis(1500));
    super::answer(request).await
}
