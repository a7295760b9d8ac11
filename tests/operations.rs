//! What an operator reads off a running cluster, over real processes:
//! `/readyz` says whether a node can serve locks (a speaker known, rebuilt
//! and reachable), `/v1/cluster` says which members answer and the
//! version, `/v1/cluster/history` keeps each rebuild with its wall-clock
//! time, and a rebuild's report names a member that restarted as such.

use crate::support;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use support::{Cluster, PATIENCE};

/// Waits until `check` holds for node `id`'s answer to `path`; answers it.
async fn wait_for(
    cluster: &Cluster,
    id: u64,
    path: &str,
    what: &str,
    check: impl Fn(u16, &Value) -> bool,
) -> Value {
    let start = Instant::now();
    loop {
        let (status, body) = cluster.get(id, path).await;
        if check(status, &body) {
            return body;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "node {id} {path}: never {what}; last {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_reachability_history_and_restarted_members_are_shown() {
    let mut cluster = Cluster::start(3).await;
    for id in 1..=3 {
        wait_for(&cluster, id, "/readyz", "ready", |s, b| {
            s == 200 && b["ready"] == json!(true)
        })
        .await;
    }
    let (speaker, _) = cluster.speaker().await;
    let (_, view) = cluster.get(speaker, "/v1/cluster").await;
    assert_eq!(view["version"], json!(env!("CARGO_PKG_VERSION")), "{view}");
    for member in view["members"].as_array().unwrap() {
        assert_eq!(member["reachable"], json!(true), "{view}");
        assert!(member["last_contact_ms"].as_u64().is_some(), "{view}");
    }

    // A follower restarts; then the speaker dies.
    let restarted = cluster.others(speaker)[0];
    cluster.kill(restarted);
    cluster.spawn(restarted);
    wait_for(&cluster, restarted, "/readyz", "ready again", |s, _| {
        s == 200
    })
    .await;
    cluster.kill(speaker);
    let (next, next_term) = cluster.speaker_other_than(Some(speaker)).await;

    // The new speaker sees the dead one as unreachable.
    wait_for(
        &cluster,
        next,
        "/v1/cluster",
        "the dead speaker unreachable",
        |s, b| {
            s == 200
                && b["members"].as_array().is_some_and(|ms| {
                    ms.iter().any(|m| {
                        m["id"] == json!(speaker)
                            && m["state"] == json!("unreachable")
                            && m["reachable"] == json!(false)
                    })
                })
        },
    )
    .await;

    // Its history: the rebuild of its term, with when, the dead speaker
    // missing, the restarted follower missing as restarted (not read).
    let history = wait_for(
        &cluster,
        next,
        "/v1/cluster/history",
        "a rebuild",
        |s, b| {
            s == 200
                && b["rebuilds"]
                    .as_array()
                    .is_some_and(|r| r.iter().any(|e| e["term"] == json!(next_term)))
        },
    )
    .await;
    assert_eq!(history["node"], json!(next));
    let entry = history["rebuilds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["term"] == json!(next_term))
        .unwrap();
    let missing: Vec<u64> = serde_json::from_value(entry["members_missing"].clone()).unwrap();
    let read: Vec<u64> = serde_json::from_value(entry["members_read"].clone()).unwrap();
    assert!(missing.contains(&speaker), "{entry}");
    assert_eq!(entry["members_restarted"], json!([restarted]), "{entry}");
    assert!(missing.contains(&restarted), "{entry}");
    assert!(
        !read.contains(&restarted),
        "a member is read or missing, not both: {entry}"
    );
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let at = entry["at_unix_ms"].as_u64().unwrap();
    assert!(at <= now_ms && now_ms - at < 120_000, "{entry}");
    assert!(entry["at"].as_str().unwrap().ends_with('Z'), "{entry}");

    // Ready again on both survivors; a node left alone is not.
    for id in [next, restarted] {
        wait_for(
            &cluster,
            id,
            "/readyz",
            "ready after the failover",
            |s, _| s == 200,
        )
        .await;
    }
    // (The restarted follower may have become the speaker itself: the one
    // left is whichever still runs.)
    cluster.kill(next);
    let left = cluster.live();
    assert_eq!(left.len(), 1, "{left:?}");
    let alone = wait_for(&cluster, left[0], "/readyz", "unready alone", |s, _| {
        s == 503
    })
    .await;
    assert!(alone["error"].is_string(), "{alone}");
}

/// `GET /metrics` of node `id`, as text.
async fn metrics(cluster: &Cluster, id: u64) -> String {
    let response = cluster
        .http
        .get(cluster.url(id, "/metrics"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .expect("metrics answer");
    assert_eq!(response.status(), 200);
    response.text().await.unwrap()
}

/// The value of the series `name` (with its labels, as written) in `text`.
fn value(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("{name} not in:\n{text}"))
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_what_the_nodes_do() {
    let cluster = Cluster::start(3).await;
    let (speaker, term) = cluster.speaker().await;
    let follower = cluster.others(speaker)[0];
    let held = cluster.must_acquire(speaker, "m/a", json!({})).await;
    let (status, _) = cluster
        .post(
            speaker,
            "/v1/locks/release",
            json!({"name": "m/a", "id": held["id"]}),
        )
        .await;
    assert_eq!(status, 200);
    cluster.must_acquire(follower, "m/b", json!({})).await;
    let (status, _) = cluster.acquire(follower, "m/b", json!({})).await;
    assert_eq!(status, 409);

    let text = metrics(&cluster, speaker).await;
    assert!(value(&text, "leasehold_grants_total") >= 2.0, "{text}");
    assert!(value(&text, "leasehold_releases_total") >= 1.0, "{text}");
    assert!(value(&text, "leasehold_conflicts_total") >= 1.0, "{text}");
    assert_eq!(value(&text, "leasehold_is_speaker"), 1.0);
    assert_eq!(value(&text, "leasehold_raft_term"), term as f64);
    assert!(value(&text, "leasehold_locks_held") >= 1.0, "{text}");
    assert_eq!(value(&text, "leasehold_waiters"), 0.0);
    assert!(value(&text, "leasehold_rebuilds_total") >= 1.0, "{text}");
    assert!(value(&text, "leasehold_rebuild_duration_seconds_count") >= 1.0);
    assert_eq!(value(&text, "leasehold_members_missing_at_rebuild"), 0.0);
    assert!(
        value(
            &text,
            "leasehold_http_request_duration_seconds_count{route=\"/v1/locks/acquire\",status=\"2xx\"}"
        ) >= 1.0,
        "{text}"
    );

    // A lease that runs out is counted as an expiry.
    cluster
        .must_acquire(speaker, "m/short", json!({"lease_ms": 300}))
        .await;
    let start = Instant::now();
    while value(
        &metrics(&cluster, speaker).await,
        "leasehold_expiries_total",
    ) < 1.0
    {
        assert!(start.elapsed() < PATIENCE, "no expiry counted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // By name prefix (`--metrics-prefix-depth`, 1 by default): how locks
    // ended, how long they were held, how long acquires took, who waits.
    let waiting = {
        let (http, url) = (
            cluster.http.clone(),
            cluster.url(follower, "/v1/locks/acquire"),
        );
        tokio::spawn(async move {
            let body = json!({"name": "m/b", "wait_ms": 60000});
            let _ = http.post(url).json(&body).send().await;
        })
    };
    let lapsed = "leasehold_lock_ends_total{prefix=\"m/\",how=\"lapsed\"}";
    let queued = "leasehold_queue_length{prefix=\"m/\"}";
    let start = Instant::now();
    let text = loop {
        let text = metrics(&cluster, speaker).await;
        if text.contains(lapsed) && text.contains(&format!("{queued} 1\n")) {
            break text;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "no lapse or queue by prefix:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    waiting.abort();
    assert!(value(&text, lapsed) >= 1.0, "{text}");
    let released = "leasehold_lock_ends_total{prefix=\"m/\",how=\"released\"}";
    assert_eq!(value(&text, released), 1.0, "{text}");
    let held = "leasehold_lock_hold_seconds_count{prefix=\"m/\"}";
    assert!(value(&text, held) >= 2.0, "{text}");
    let granted = "leasehold_lock_wait_seconds_count{prefix=\"m/\"}";
    assert!(value(&text, granted) >= 3.0, "{text}");
    assert_eq!(value(&text, "leasehold_longest_queue"), 1.0, "{text}");

    let text = metrics(&cluster, follower).await;
    assert_eq!(value(&text, "leasehold_is_speaker"), 0.0);
    assert!(value(&text, "leasehold_forwarded_total") >= 2.0, "{text}");
    assert_eq!(value(&text, "leasehold_grants_total"), 0.0, "{text}");
    // Every node says whether it knows a speaker; only the speaker says
    // which members answer it.
    assert_eq!(value(&text, "leasehold_has_speaker"), 1.0);
    assert!(!text.contains("leasehold_member_reachable{"), "{text}");
    let text = metrics(&cluster, speaker).await;
    for member in 1..=3 {
        let series = format!("leasehold_member_reachable{{member=\"{member}\"}}");
        assert_eq!(value(&text, &series), 1.0, "{text}");
    }
    assert!(value(&text, "leasehold_renewals_total") >= 0.0);
    assert!(text.contains("leasehold_build_info{version=\""), "{text}");
    assert!(value(&text, "process_resident_memory_bytes") > 0.0);
    assert!(value(&text, "process_open_fds") > 0.0);
    assert!(
        !text.contains("# EOF"),
        "the Prometheus text format: {text}"
    );
}

/// `promtool check metrics` (Debian's `prometheus` package) accepts every
/// node's `/metrics`: counters' metadata on their sampled names, help on
/// every family; and a scraper asking for OpenMetrics gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn promtool_accepts_the_metrics() {
    let cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    cluster.must_acquire(speaker, "m/p", json!({})).await;
    // A watch that waits is timed apart from the fast calls.
    let (status, _) = cluster
        .get(speaker, "/v1/locks/m%2Ffree?wait_ms=200&after_fence=0")
        .await;
    assert_eq!(status, 404);
    let text = metrics(&cluster, speaker).await;
    let waited = "leasehold_http_waiting_request_duration_seconds_count{route=\"/v1/locks/{name}\",status=\"4xx\"}";
    assert_eq!(value(&text, waited), 1.0, "{text}");
    assert!(
        !text.contains("leasehold_http_request_duration_seconds_count{route=\"/v1/locks/{name}\",status=\"4xx\"}"),
        "{text}"
    );
    for node in 1..=3 {
        let text = metrics(&cluster, node).await;
        let mut promtool = std::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("promtool (Debian's prometheus package; .ci/run installs it)");
        std::io::Write::write_all(&mut promtool.stdin.take().unwrap(), text.as_bytes()).unwrap();
        let out = promtool.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "promtool check metrics on node {node}: {}{}\n{text}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let response = cluster
        .http
        .get(cluster.url(speaker, "/metrics"))
        .header("accept", "application/openmetrics-text; version=1.0.0")
        .send()
        .await
        .unwrap();
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    assert!(response.text().await.unwrap().ends_with("# EOF\n"));
}

/// The alert rules docs/operations.md gives (docs/alerts.yml) are valid,
/// stay quiet through an ordinary failover and fire for a member down for
/// good and for no speaker (tests/alerts_test.yml, `promtool test rules`).
#[test]
fn the_alert_rules_stay_quiet_through_a_failover() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for args in [
        ["check", "rules", "docs/alerts.yml"],
        ["test", "rules", "tests/alerts_test.yml"],
    ] {
        let out = std::process::Command::new("promtool")
            .args(args)
            .current_dir(&root)
            .output()
            .expect("promtool (Debian's prometheus package; .ci/run installs it)");
        assert!(
            out.status.success(),
            "promtool {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A listing and a get show the requests waiting for each lock in the
/// order they will be served (who, through which node, for how long, for
/// what lease), read at the speaker and through a follower alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_and_a_get_show_who_waits_for_each_lock_in_order() {
    let cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    let follower = cluster.others(speaker)[0];
    cluster
        .must_acquire(
            speaker,
            "queue/a",
            json!({"holder": "the-holder", "lease_ms": 60000}),
        )
        .await;
    let path = "/v1/locks?prefix=queue/";
    let mut waiting = Vec::new();
    for (n, (via, who, lease)) in [(follower, "second", 7000), (speaker, "third", 9000)]
        .into_iter()
        .enumerate()
    {
        let (http, url) = (cluster.http.clone(), cluster.url(via, "/v1/locks/acquire"));
        let body = json!({"name": "queue/a", "holder": who, "lease_ms": lease, "wait_ms": 60000});
        waiting.push(tokio::spawn(async move {
            let _ = http.post(url).json(&body).send().await;
        }));
        // One after the other: the second asks once the first waits.
        wait_for(&cluster, speaker, path, "waited for", |_, body| {
            body["locks"][0]["waiters"] == json!(n + 1)
        })
        .await;
    }
    let got = "/v1/locks/queue%2Fa";
    for (via, path, at) in [
        (speaker, path, "/locks/0"),
        (follower, path, "/locks/0"),
        (speaker, got, "/lock"),
        (follower, got, "/lock"),
    ] {
        let body = wait_for(&cluster, via, path, "shown its queue", |status, body| {
            status == 200
                && body
                    .pointer(at)
                    .and_then(|l| l["queue"].as_array())
                    .map(Vec::len)
                    == Some(2)
        })
        .await;
        let lock = body.pointer(at).unwrap();
        assert_eq!(lock["holder"], json!("the-holder"), "{body}");
        assert_eq!(lock["waiters"], json!(2), "{body}");
        let queue = lock["queue"].as_array().unwrap();
        let expected = [("second", follower, 7000), ("third", speaker, 9000)];
        for (q, (who, node, lease)) in queue.iter().zip(expected) {
            assert_eq!(q["holder"], json!(who), "node {via}: {body}");
            assert_eq!(q["node"], json!(node), "node {via}: {body}");
            assert_eq!(q["lease_ms"], json!(lease), "node {via}: {body}");
            let left = q["wait_left_ms"].as_u64().unwrap();
            assert!(left > 0 && left <= 60_000, "node {via}: {body}");
            assert!(q["since"].as_str().unwrap().ends_with('Z'), "{body}");
        }
        assert!(
            queue[0]["waited_ms"].as_u64() >= queue[1]["waited_ms"].as_u64(),
            "the first waited longest: {body}"
        );
    }
    // A watch answers the lock as it changes, without its queue.
    let (status, body) = cluster
        .get(follower, "/v1/locks/queue%2Fa?after_fence=1&wait_ms=0")
        .await;
    assert_eq!(status, 200, "{body}");
    assert!(body["lock"].get("queue").is_none(), "{body}");

    // A set waits for queue/a and for queue/free, which no one holds: a
    // get of queue/free is not_held, and says who waits for it.
    let (http, url) = (
        cluster.http.clone(),
        cluster.url(follower, "/v1/locks/acquire"),
    );
    let body = json!({"names": ["queue/a", "queue/free"], "holder": "the-set", "wait_ms": 60000});
    waiting.push(tokio::spawn(async move {
        let _ = http.post(url).json(&body).send().await;
    }));
    wait_for(
        &cluster,
        speaker,
        path,
        "waited for by the set",
        |_, body| body["locks"][0]["waiters"] == json!(3),
    )
    .await;
    for via in [speaker, follower] {
        let (status, body) = cluster.get(via, "/v1/locks/queue%2Ffree").await;
        assert_eq!(status, 404, "node {via}: {body}");
        assert_eq!(body["error"], json!("not_held"), "node {via}: {body}");
        let message = body["message"].as_str().unwrap();
        assert!(
            message.starts_with("queue/free is not held, but 1 request waits for it")
                && message.contains(&format!("the-set (node {follower}, together with queue/a)")),
            "node {via}: {body}"
        );
        // And shows them as a listing's `awaited` does.
        let awaited = &body["awaited"];
        assert_eq!(awaited["name"], json!("queue/free"), "node {via}: {body}");
        assert_eq!(awaited["waiters"], json!(1), "node {via}: {body}");
        let queued = &awaited["queue"][0];
        assert_eq!(queued["holder"], json!("the-set"), "node {via}: {body}");
        assert_eq!(queued["node"], json!(follower), "node {via}: {body}");
        assert_eq!(queued["with"], json!(["queue/a"]), "node {via}: {body}");
    }
    let (status, body) = cluster.get(follower, "/v1/locks/queue%2Fnobody").await;
    assert_eq!(
        (status, &body["message"]),
        (404, &json!("queue/nobody is not held")),
        "{body}"
    );
    assert!(body.get("awaited").is_none(), "nobody waits: {body}");
    // A listing shows it too, in `awaited`, with its queue, after the held
    // names; through the speaker and through a follower alike.
    for via in [speaker, follower] {
        let (status, body) = cluster.get(via, path).await;
        assert_eq!(status, 200, "node {via}: {body}");
        let awaited = body["awaited"].as_array().expect("awaited names");
        assert_eq!(awaited.len(), 1, "node {via}: {body}");
        assert_eq!(
            awaited[0]["name"],
            json!("queue/free"),
            "node {via}: {body}"
        );
        assert_eq!(awaited[0]["waiters"], json!(1), "node {via}: {body}");
        let queued = &awaited[0]["queue"][0];
        assert_eq!(queued["holder"], json!("the-set"), "node {via}: {body}");
        assert_eq!(queued["node"], json!(follower), "node {via}: {body}");
        assert_eq!(queued["with"], json!(["queue/a"]), "node {via}: {body}");
        assert!(queued["wait_left_ms"].as_u64().unwrap() <= 60_000, "{body}");
        assert_eq!(
            body["locks"].as_array().unwrap().len(),
            1,
            "held names only: {body}"
        );
    }
    let (_, body) = cluster.get(follower, "/v1/locks?prefix=queue/a").await;
    assert!(
        body.get("awaited").is_none(),
        "none under another prefix: {body}"
    );
    for w in waiting {
        w.abort();
    }
}

/// `--max-wait`: a waiting acquire and a watch are answered by then (the
/// acquire `409 held`, the watch with the lock as it is), not after the
/// wait they asked for, so that a proxy's idle timeout never cuts them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_wait_answers_a_waiting_acquire_and_a_watch_by_then() {
    let cluster = crate::support::up::UpCluster::start(
        &serde_json::json!({ "nodes": 1, "serve_args": ["--max-wait", "1s"] }),
    )
    .await;
    let url = |path: &str| format!("http://{}{path}", cluster.addrs[&1]);
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let acquire = |wait_ms: u64| {
        http.post(url("/v1/locks/acquire"))
            .json(&serde_json::json!({"name": "w", "wait_ms": wait_ms, "lease_ms": 60000}))
            .timeout(std::time::Duration::from_secs(30))
            .send()
    };
    let first = acquire(0).await.unwrap();
    assert_eq!(first.status(), 200);
    let fence = first.json::<Value>().await.unwrap()["lock"]["fence"].clone();
    let asked = std::time::Instant::now();
    let held = acquire(60_000).await.unwrap();
    let waited = asked.elapsed();
    assert_eq!(held.status(), 409);
    assert!(
        waited >= std::time::Duration::from_millis(900)
            && waited < std::time::Duration::from_secs(10),
        "answered after {waited:?}"
    );
    let asked = std::time::Instant::now();
    let watched = http
        .get(url(&format!(
            "/v1/locks/w?wait_ms=60000&after_fence={fence}"
        )))
        .timeout(std::time::Duration::from_secs(30))
        .send()
        .await
        .unwrap();
    let waited = asked.elapsed();
    assert_eq!(watched.status(), 200);
    assert!(
        waited >= std::time::Duration::from_millis(900)
            && waited < std::time::Duration::from_secs(10),
        "answered after {waited:?}"
    );
}
