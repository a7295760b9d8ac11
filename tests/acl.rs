//! Tokens on the public API (`serve --acl FILE`), over real processes:
//! `401` without a known token, `403` outside a token's rights (to lock and
//! to read, apart), listings filtered and ids shown only to tokens that may
//! lock the name, membership only for admin tokens, and the CLI's
//! `--token` / `LEASEHOLD_TOKEN`.

use crate::support;

use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};
use support::{Cluster, TOKEN};

pub(crate) const DEPLOY: &str = "deploy-secret";
const READ: &str = "read-secret";
const OPS: &str = "ops-secret";

/// An ACL file: `deployer` locks and reads `jobs/`, `reader` reads
/// everything, `ops` administers.
pub(crate) fn acl_file(dir: &std::path::Path) -> std::path::PathBuf {
    let path = dir.join("acl.toml");
    let text = format!(
        r#"
[[token]]
name = "deployer"
secret_sha256 = "{}"
lock = ["jobs/"]
read = ["jobs/"]

[[token]]
name = "reader"
secret_sha256 = "{}"
read = [""]

[[token]]
name = "ops"
secret_sha256 = "{}"
admin = true
"#,
        leasehold_acl::sha256_hex(DEPLOY.as_bytes()),
        leasehold_acl::sha256_hex(READ.as_bytes()),
        leasehold_acl::sha256_hex(OPS.as_bytes()),
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// Calls through one node, as a given bearer (or none).
struct Through<'a> {
    cluster: &'a Cluster,
    via: u64,
}

impl Through<'_> {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
        bearer: Option<&str>,
    ) -> (u16, Value) {
        let mut request = self
            .cluster
            .http
            .request(method, self.cluster.url(self.via, path))
            .timeout(Duration::from_secs(30));
        if let Some(body) = body {
            request = request.json(&body);
        }
        if let Some(secret) = bearer {
            request = request.bearer_auth(secret);
        }
        support::answer(request).await
    }

    async fn post(&self, path: &str, body: Value, bearer: Option<&str>) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(body), bearer)
            .await
    }

    async fn get(&self, path: &str, bearer: Option<&str>) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, None, bearer).await
    }
}

/// Asserts `answer` is `code` with its JSON error.
fn assert_refused(answer: (u16, Value), code: (u16, &str)) {
    let (status, body) = answer;
    assert_eq!(
        (status, body["error"].clone()),
        (code.0, json!(code.1)),
        "{body}"
    );
}

const FORBIDDEN: (u16, &str) = (403, "forbidden");

fn names(listing: &Value) -> Vec<(String, bool)> {
    listing["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            let name = l["name"].as_str().unwrap().to_string();
            (name, l.get("id").is_some())
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_say_who_may_lock_read_and_administer_what() {
    let dir = tempfile::tempdir().unwrap();
    let acl = acl_file(dir.path());
    let cluster = Cluster::start_with(3, &["--acl", acl.to_str().unwrap()]).await;
    let (speaker, _) = cluster.speaker().await;
    let via = cluster.others(speaker)[0];
    let api = Through {
        cluster: &cluster,
        via,
    };
    let acquire = |name: &str| json!({ "name": name, "lease_ms": 30_000 });

    // No token, or an unknown one: 401, but /healthz stays open.
    assert_eq!(api.get("/healthz", None).await.0, 200);
    for bearer in [None, Some("not-a-token")] {
        let refused = api.post("/v1/locks/acquire", acquire("jobs/1"), bearer);
        assert_refused(refused.await, (401, "unauthorized"));
        assert_eq!(api.get("/v1/cluster", bearer).await.0, 401);
    }

    // Locking: inside the token's prefixes only.
    let (status, taken) = api
        .post("/v1/locks/acquire", acquire("jobs/1"), Some(DEPLOY))
        .await;
    assert_eq!(status, 200, "{taken}");
    let id = taken["lock"]["id"].as_str().unwrap().to_string();
    let outside = api.post("/v1/locks/acquire", acquire("other/1"), Some(DEPLOY));
    assert_refused(outside.await, FORBIDDEN);
    let reading = api.post("/v1/locks/acquire", acquire("jobs/2"), Some(READ));
    assert_refused(reading.await, FORBIDDEN);
    let lock = json!({ "name": "jobs/1", "id": id });
    let release = api.post("/v1/locks/release", lock.clone(), Some(READ));
    assert_refused(release.await, FORBIDDEN);
    let (status, body) = api.post("/v1/locks/renew", lock, Some(DEPLOY)).await;
    assert_eq!(status, 200, "{body}");
    // The cluster token may do anything.
    let with_cluster_token = cluster
        .http
        .post(cluster.url(via, "/v1/locks/acquire"))
        .header("x-leasehold-token", TOKEN)
        .json(&acquire("other/1"))
        .timeout(Duration::from_secs(30));
    let (status, body) = support::answer(with_cluster_token).await;
    assert_eq!(status, 200, "{body}");
    // A set's release needs the right to lock every name of it: one name
    // outside the token's prefixes refuses the whole set, and nothing is
    // released.
    let set = json!({ "locks": [
        { "name": "jobs/1", "id": id },
        { "name": "other/1", "id": body["lock"]["id"] },
    ] });
    let release = api.post("/v1/locks/release", set, Some(DEPLOY));
    assert_refused(release.await, FORBIDDEN);
    let kept = json!({ "name": "jobs/1", "id": id });
    let (status, body) = api.post("/v1/locks/renew", kept, Some(DEPLOY)).await;
    assert_eq!(status, 200, "jobs/1 is still held: {body}");

    // Reading: a reader sees every name and no id; the deployer sees its
    // prefix only, with ids.
    let (status, seen) = api.get("/v1/locks/jobs%2F1", Some(READ)).await;
    assert_eq!(status, 200, "{seen}");
    assert!(seen["lock"].get("id").is_none(), "an id shown: {seen}");
    let (_, listing) = api.get("/v1/locks", Some(READ)).await;
    let both = [("jobs/1".into(), false), ("other/1".into(), false)];
    assert_eq!(names(&listing), both);
    let (_, listing) = api.get("/v1/locks", Some(DEPLOY)).await;
    assert_eq!(names(&listing), [("jobs/1".to_string(), true)]);
    assert_refused(
        api.get("/v1/locks/other%2F1", Some(DEPLOY)).await,
        FORBIDDEN,
    );
    // An admin token without read rights reads nothing.
    assert_refused(api.get("/v1/locks/other%2F1", Some(OPS)).await, FORBIDDEN);

    // Administering: admin tokens (and the cluster token) only.
    let add = json!({ "id": 9, "addr": "127.0.0.1:9" });
    let adding = api.post("/v1/cluster/members", add, Some(DEPLOY));
    assert_refused(adding.await, FORBIDDEN);
    let delete = reqwest::Method::DELETE;
    let removing = api.call(delete, "/v1/cluster/members/9", None, Some(OPS));
    assert_refused(removing.await, (404, "unknown_member"));

    // The CLI takes the token from LEASEHOLD_TOKEN (or --token).
    let endpoints = cluster.addrs[&via].clone();
    let locks = |token: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_leasehold"));
        command.args(["locks", "--endpoints", &endpoints]);
        command.env_remove("LEASEHOLD_TOKEN");
        if let Some(token) = token {
            command.env("LEASEHOLD_TOKEN", token);
        }
        command.output().unwrap()
    };
    let out = locks(Some(READ));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}");
    assert!(
        shown.contains("jobs/1") && shown.contains("other/1"),
        "{shown}"
    );
    let out = locks(None);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unauthorized"));
}

#[test]
fn a_wrong_acl_file_is_refused_at_start_with_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("acl.toml");
    std::fs::write(
        &path,
        "[[token]]\nname = \"a\"\nsecret = \"s\"\nlokc = [\"jobs/\"]\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "serve",
            "--id",
            "1",
            "--listen",
            "127.0.0.1:0",
            "--peers",
            "1=127.0.0.1:1",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--cluster-token", TOKEN, "--acl"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("--acl") && said.contains("lokc"), "{said}");
}

/// With `--peer-token`, the members speak with a credential of their own:
/// the operators' cluster token no longer opens the peer routes (where a
/// forged leadership transfer or report would be sent), and the peer token
/// is no admin credential. It rotates one member at a time, in three
/// rolling restarts (accept the new one; send it, accepting the old; drop
/// the old), while a held lock stays its holder's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_token_keeps_the_operators_token_off_the_peer_routes_and_rotates() {
    const OLD: &str = "peer-old-0123456789";
    const NEW: &str = "peer-new-0123456789";
    let flags = |token: &str, accept: Option<&str>| {
        let mut flags = vec!["--peer-token".to_string(), token.to_string()];
        if let Some(accept) = accept {
            flags.extend(["--peer-token-accept".to_string(), accept.to_string()]);
        }
        flags
    };
    let mut cluster = Cluster::start_each(3, &[], |_| flags(OLD, None)).await;
    let internal = |cluster: &Cluster, token: &str| {
        cluster
            .http
            .post(cluster.url(1, "/internal/forget"))
            .header("x-leasehold-token", token.to_string())
            .json(&json!({"forgets": []}))
            .timeout(Duration::from_secs(5))
    };
    let (status, _) = support::answer(internal(&cluster, TOKEN)).await;
    assert_eq!(status, 401, "the operators' token opens no peer route");
    let (status, body) = support::answer(internal(&cluster, OLD)).await;
    assert_eq!(
        status, 400,
        "past the token, a request without a stamp: {body}"
    );
    let (status, body) = support::answer(
        cluster
            .http
            .post(cluster.url(1, "/v1/cluster/members"))
            .header("x-leasehold-token", OLD)
            .json(&json!({"id": 9, "addr": "127.0.0.1:9"}))
            .timeout(Duration::from_secs(5)),
    )
    .await;
    assert_eq!(status, 401, "the peer token is no admin credential: {body}");

    let lock = cluster
        .must_acquire(1, "rotate/x", json!({"lease_ms": 60000}))
        .await;
    let renew = json!({"name": lock["name"], "id": lock["id"]});
    for phase in [
        flags(OLD, Some(NEW)),
        flags(NEW, Some(OLD)),
        flags(NEW, None),
    ] {
        for id in 1..=3 {
            cluster.kill(id);
            cluster.set_node_args(id, phase.clone());
            cluster.spawn(id);
            cluster.all_follow_one().await;
            let via = id % 3 + 1;
            let (status, renewed) = cluster
                .post_settled(via, "/v1/locks/renew", renew.clone())
                .await;
            assert_eq!(
                status, 200,
                "renewal after restarting {id} with {phase:?}: {renewed}"
            );
            assert_eq!(renewed["lock"]["fence"], lock["fence"]);
        }
    }
    let (status, _) = support::answer(internal(&cluster, OLD)).await;
    assert_eq!(
        status, 401,
        "the old peer token is refused once rotated out"
    );
    let (status, _) = support::answer(internal(&cluster, NEW)).await;
    assert_eq!(status, 400);
}

/// A waiting set's other names (`with` in a queue, and in the message of a
/// get of a free name it waits for) and the free names it waits for (a
/// listing's `awaited`) are shown to a token only where it may read them:
/// a token reading `jobs/` alone is not told of `other/secret`, as a
/// listing does not show it that name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_sets_names_a_token_may_not_read_are_not_shown() {
    let dir = tempfile::tempdir().unwrap();
    let acl = acl_file(dir.path());
    let cluster = Cluster::start_with(3, &["--acl", acl.to_str().unwrap()]).await;
    cluster.wait_protocol(support::SPEAKS).await;
    let (speaker, _) = cluster.speaker().await;
    let via = cluster.others(speaker)[0];
    let api = Through {
        cluster: &cluster,
        via,
    };
    let as_cluster = |body: Value| {
        cluster
            .http
            .post(cluster.url(via, "/v1/locks/acquire"))
            .header("x-leasehold-token", TOKEN)
            .json(&body)
            .timeout(Duration::from_secs(70))
    };
    let (status, body) =
        support::answer(as_cluster(json!({"name": "jobs/held", "lease_ms": 60_000}))).await;
    assert_eq!(status, 200, "{body}");
    // A set waits for jobs/held, keeping jobs/free and other/secret for it.
    let set = as_cluster(json!({
        "names": ["jobs/held", "jobs/free", "other/secret"],
        "holder": "the-set",
        "wait_ms": 60_000,
    }));
    let waiting = tokio::spawn(async move {
        let _ = support::answer(set).await;
    });
    let start = std::time::Instant::now();
    loop {
        let (_, seen) = api.get("/v1/locks/jobs%2Fheld", Some(READ)).await;
        if seen["lock"]["waiters"] == json!(1) {
            // A token that reads every name sees them all.
            assert_eq!(
                seen["lock"]["queue"][0]["with"],
                json!(["jobs/free", "other/secret"]),
                "{seen}"
            );
            break;
        }
        assert!(
            start.elapsed() < support::PATIENCE,
            "the set never waited: {seen}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let (status, seen) = api.get("/v1/locks/jobs%2Fheld", Some(DEPLOY)).await;
    assert_eq!(status, 200, "{seen}");
    assert_eq!(
        seen["lock"]["queue"][0]["with"],
        json!(["jobs/free"]),
        "{seen}"
    );
    let (_, listing) = api.get("/v1/locks", Some(DEPLOY)).await;
    assert_eq!(
        listing["locks"][0]["queue"][0]["with"],
        json!(["jobs/free"]),
        "{listing}"
    );
    // The free names it waits for are listed as awaited, each only to a
    // token that may read it, and their queues' `with` likewise.
    let awaited = |listing: &Value| -> Vec<(Value, Value)> {
        listing["awaited"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|n| (n["name"].clone(), n["queue"][0]["with"].clone()))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(
        awaited(&listing),
        [(json!("jobs/free"), json!(["jobs/held"]))],
        "{listing}"
    );
    let (_, listing) = api.get("/v1/locks", Some(READ)).await;
    assert_eq!(
        awaited(&listing),
        [
            (json!("jobs/free"), json!(["jobs/held", "other/secret"])),
            (json!("other/secret"), json!(["jobs/held", "jobs/free"]))
        ],
        "{listing}"
    );
    let (status, free) = api.get("/v1/locks/jobs%2Ffree", Some(DEPLOY)).await;
    assert_eq!(status, 404, "{free}");
    let message = free["message"].as_str().unwrap();
    assert!(
        message.contains("the-set (node ") && !message.contains("other/secret"),
        "{free}"
    );
    assert_eq!(
        free["awaited"]["queue"][0]["with"],
        json!(["jobs/held"]),
        "{free}"
    );
    waiting.abort();
}
