//! The OpenAPI description (`GET /v1/openapi.json`, `crates/api/openapi.json`)
//! against a running cluster, so that it cannot drift: every path it names
//! is served with the methods it names, every route docs/api.md lists is in
//! it, and real answers, successes and errors, fit its schemas.

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};
use support::Cluster;

/// The schemas made strict: an object schema naming its properties
/// allows no others. The description leaves answers open to new fields
/// (a client must not break on them), so here a field the node sends that
/// the description does not name fails the test.
fn strict(schema: &Value) -> Value {
    match schema {
        Value::Object(map) => {
            let mut out: serde_json::Map<String, Value> =
                map.iter().map(|(k, v)| (k.clone(), strict(v))).collect();
            let composed = ["allOf", "oneOf", "anyOf"]
                .iter()
                .any(|k| map.contains_key(*k));
            if map.contains_key("properties") && !composed {
                out.entry("additionalProperties").or_insert(json!(false));
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(strict).collect()),
        other => other.clone(),
    }
}

/// A validator of the description's schema `name`: made [`strict`] for an
/// answer's schema, as the description has it for a request's (whose
/// unknown fields the node skips).
fn schema(spec: &Value, name: &str) -> jsonschema::Validator {
    let request = name.ends_with("Body") || name == "LockRef";
    let components = match request {
        true => spec["components"].clone(),
        false => strict(&spec["components"]),
    };
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": format!("#/components/schemas/{name}"),
        "components": components,
    });
    jsonschema::validator_for(&schema).unwrap_or_else(|e| panic!("schema {name}: {e}"))
}

/// The schema the description gives for `status` of `method path`.
fn documented(spec: &Value, method: &str, path: &str, status: u16) -> Option<String> {
    let answer = &spec["paths"][path][method]["responses"][status.to_string()];
    let reference = answer["content"]["application/json"]["schema"]["$ref"].as_str()?;
    Some(
        reference
            .trim_start_matches("#/components/schemas/")
            .to_string(),
    )
}

/// Checks `body`, answered `status` to `method path`, against the schema
/// the description gives for it (which it must give).
fn check(spec: &Value, method: &str, path: &str, status: u16, body: &Value) {
    let name = documented(spec, method, path, status)
        .unwrap_or_else(|| panic!("{method} {path}: {status} is not in the description ({body})"));
    let validator = schema(spec, &name);
    let errors: Vec<String> = validator.iter_errors(body).map(|e| e.to_string()).collect();
    assert!(
        errors.is_empty(),
        "{method} {path} {status} does not fit {name}: {errors:?}\n{body}"
    );
}

async fn call(
    cluster: &Cluster,
    via: u64,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let url = cluster.url(via, path);
    let request = match method {
        "get" => cluster.http.get(url),
        "post" => cluster.http.post(url).json(&body.unwrap_or(json!({}))),
        "delete" => cluster.http.delete(url),
        other => panic!("{other}"),
    };
    support::answer(
        request
            .header("x-leasehold-token", support::TOKEN)
            .timeout(Duration::from_secs(20)),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_description_fits_what_a_running_node_answers() {
    let cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    let follower = cluster.others(speaker)[0];
    let spec: Value = cluster
        .http
        .get(cluster.url(follower, "/v1/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(spec["openapi"], json!("3.1.0"));
    assert_eq!(
        spec,
        serde_json::from_str::<Value>(leasehold_api::OPENAPI_JSON).unwrap(),
        "the node serves the description in the repository"
    );

    // Every route docs/api.md lists is described.
    let api_md = include_str!("../docs/api.md");
    let described: BTreeSet<String> = spec["paths"]
        .as_object()
        .unwrap()
        .iter()
        .flat_map(|(path, ops)| {
            ops.as_object()
                .unwrap()
                .keys()
                .map(move |m| format!("{} {path}", m.to_uppercase()))
        })
        .collect();
    for line in api_md.lines().filter(|l| l.starts_with("| `")) {
        let route = line.trim_start_matches("| `").split('`').next().unwrap();
        if let Some((method, _)) = route.split_once(' ') {
            if ["GET", "POST", "DELETE"].contains(&method) {
                assert!(
                    described.contains(route),
                    "{route} (docs/api.md) is not described"
                );
            }
        }
    }
    // Every path described is served with its methods (no 404/405 of the
    // router's own).
    for route in &described {
        let (method, path) = route.split_once(' ').unwrap();
        let path = path.replace("{name}", "x").replace("{id}", "99");
        let (status, body) = call(&cluster, follower, &method.to_lowercase(), &path, None).await;
        assert!(
            body["error"] != json!("unknown_route") && body["error"] != json!("method_not_allowed"),
            "{route}: {status} {body}"
        );
    }

    // Real answers fit their schemas: successes and errors.
    let acquire = json!({"name": "api/a", "holder": "h", "lease_ms": 30000, "data": "d"});
    let (status, granted) = call(
        &cluster,
        follower,
        "post",
        "/v1/locks/acquire",
        Some(acquire.clone()),
    )
    .await;
    assert_eq!(status, 200, "{granted}");
    check(&spec, "post", "/v1/locks/acquire", status, &granted);
    let (status, held) = call(
        &cluster,
        speaker,
        "post",
        "/v1/locks/acquire",
        Some(acquire),
    )
    .await;
    assert_eq!(status, 409);
    check(&spec, "post", "/v1/locks/acquire", status, &held);
    // A set waits for the cluster to agree the protocol that has sets.
    cluster.wait_protocol(crate::support::SPEAKS).await;
    let set = json!({"names": ["api/s1", "api/s2"], "lease_ms": 30000});
    let (status, set) = call(&cluster, follower, "post", "/v1/locks/acquire", Some(set)).await;
    assert_eq!(status, 200, "{set}");
    assert_eq!(set["locks"].as_array().map(Vec::len), Some(2), "{set}");
    check(&spec, "post", "/v1/locks/acquire", status, &set);
    // A set's release with a lock not held among its locks: the body (the
    // grant's locks sent back as they came) fits the request's schema, and
    // the answer, with its `not_held`, the answer's.
    let mut locks = set["locks"].as_array().unwrap().clone();
    locks.push(json!({"name": "api/s0", "id": "01J0000000000000000000000A"}));
    let release = json!({"locks": locks});
    let bodies = schema(&spec, "ReleaseBody");
    for fits in [
        &release,
        &json!({"name": "api/s1", "id": "01J0000000000000000000000A"}),
    ] {
        assert!(bodies.is_valid(fits), "{fits}");
    }
    for unfit in [
        json!({"locks": []}),
        json!({"locks": [{"name": "a"}]}),
        json!({"name": "a", "id": "01J0000000000000000000000A", "locks": locks}),
        json!({"name": "a"}),
    ] {
        assert!(!bodies.is_valid(&unfit), "{unfit}");
    }
    let (status, released) = call(
        &cluster,
        follower,
        "post",
        "/v1/locks/release",
        Some(release),
    )
    .await;
    assert_eq!(status, 200, "{released}");
    assert_eq!(
        released["not_held"].as_array().map(Vec::len),
        Some(1),
        "{released}"
    );
    check(&spec, "post", "/v1/locks/release", status, &released);
    let empty = Some(json!({"locks": []}));
    let (status, bad) = call(&cluster, follower, "post", "/v1/locks/release", empty).await;
    assert_eq!(status, 400, "{bad}");
    check(&spec, "post", "/v1/locks/release", status, &bad);
    let (status, bad) = call(
        &cluster,
        speaker,
        "post",
        "/v1/locks/acquire",
        Some(json!({"name": ""})),
    )
    .await;
    assert_eq!(status, 400);
    check(&spec, "post", "/v1/locks/acquire", status, &bad);
    let lock = &granted["lock"];
    let id = json!({"name": "api/a", "id": lock["id"]});
    let (status, renewed) = call(
        &cluster,
        speaker,
        "post",
        "/v1/locks/renew",
        Some(id.clone()),
    )
    .await;
    assert_eq!(status, 200);
    check(&spec, "post", "/v1/locks/renew", status, &renewed);
    // A set waits for a lock held and a free name: listings show it in
    // the held name's queue, and the free name in `awaited`.
    let (status, _) = call(
        &cluster,
        speaker,
        "post",
        "/v1/locks/acquire",
        Some(json!({"name": "api/b", "holder": "holds-b", "lease_ms": 60000})),
    )
    .await;
    assert_eq!(status, 200);
    let waiting = {
        let (http, url) = (
            cluster.http.clone(),
            cluster.url(follower, "/v1/locks/acquire"),
        );
        tokio::spawn(async move {
            let body = json!({"names": ["api/b", "api/free"], "holder": "waits", "wait_ms": 60000});
            let _ = http.post(url).json(&body).send().await;
        })
    };
    let started = std::time::Instant::now();
    loop {
        let (_, body) = call(&cluster, speaker, "get", "/v1/locks?prefix=api/", None).await;
        if body["locks"][1]["queue"][0]["holder"] == json!("waits")
            && body["awaited"][0]["name"] == json!("api/free")
        {
            break;
        }
        assert!(
            started.elapsed() < support::PATIENCE,
            "never waited: {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for (method, path) in [
        ("get", "/v1/locks/api%2Fa"),
        ("get", "/v1/locks?prefix=api/"),
        ("get", "/v1/cluster"),
        ("get", "/v1/cluster/history"),
        ("get", "/readyz"),
    ] {
        for via in [speaker, follower] {
            let (status, body) = call(&cluster, via, method, path, None).await;
            assert_eq!(status, 200, "{path}: {body}");
            let described = if path.starts_with("/v1/locks/") {
                "/v1/locks/{name}"
            } else {
                path.split('?').next().unwrap()
            };
            check(&spec, method, described, status, &body);
        }
    }
    // A get of the free name a set waits for: `404 not_held`, with it.
    for via in [speaker, follower] {
        let (status, body) = call(&cluster, via, "get", "/v1/locks/api%2Ffree", None).await;
        assert_eq!(status, 404, "{body}");
        assert_eq!(body["awaited"]["queue"][0]["holder"], json!("waits"));
        check(&spec, "get", "/v1/locks/{name}", status, &body);
    }
    waiting.abort();
    let (status, released) = call(
        &cluster,
        follower,
        "post",
        "/v1/locks/release",
        Some(id.clone()),
    )
    .await;
    assert_eq!(status, 200);
    check(&spec, "post", "/v1/locks/release", status, &released);
    let (status, gone) = call(&cluster, follower, "post", "/v1/locks/release", Some(id)).await;
    assert_eq!(status, 404);
    check(&spec, "post", "/v1/locks/release", status, &gone);
    let (status, missing) = call(&cluster, speaker, "get", "/v1/locks/api%2Fa", None).await;
    assert_eq!(status, 404);
    check(&spec, "get", "/v1/locks/{name}", status, &missing);
    let (status, unknown) = call(&cluster, speaker, "delete", "/v1/cluster/members/99", None).await;
    assert_eq!(status, 404);
    check(
        &spec,
        "delete",
        "/v1/cluster/members/{id}",
        status,
        &unknown,
    );
}

/// Raft's timings for the node schemathesis calls: a leader lease of 3 s.
const SLOW_TIMINGS: &[&str] = &[
    "--heartbeat-interval",
    "100",
    "--election-timeout-min",
    "1500",
    "--election-timeout-max",
    "3000",
];

/// The schemathesis command: `$SCHEMATHESIS`, else `schemathesis` on the
/// path (`.ci/run` installs the version `scripts/schemathesis` pins).
fn schemathesis() -> String {
    std::env::var("SCHEMATHESIS").unwrap_or_else(|_| "schemathesis".to_string())
}

/// Runs schemathesis, every check and every phase (the stateful one
/// included), against one node started with `serve_args` (a `--max-wait`
/// of 2 s: the long-poll bound it is told of by its request timeout), with
/// `headers`: it must find no failure, for two seeds.
///
/// The node runs with a 3 s leader lease (`SLOW_TIMINGS`): with the
/// default 300 ms, a CI machine that starved the node that long made its
/// guard lapse, and the acquire in flight was answered `503 not_rebuilt`,
/// right for a lock service and a server error to schemathesis.
async fn schemathesis_finds_nothing(serve_args: &[&str], acl: Option<&str>, headers: &[&str]) {
    let serve_args: Vec<&str> = serve_args.iter().chain(SLOW_TIMINGS).copied().collect();
    let mut spec = json!({ "nodes": 1, "serve_args": serve_args });
    if let Some(acl) = acl {
        spec["acl"] = json!(acl);
    }
    let cluster = support::up::UpCluster::start(&spec).await;
    let url = format!("http://{}/v1/openapi.json", cluster.addrs[&1]);
    for seed in ["1", "2"] {
        let mut command = std::process::Command::new(schemathesis());
        command
            .args(["run", &url, "--checks", "all", "--max-examples", "50"])
            .args(["--request-timeout", "15", "--seed", seed, "--no-color"])
            .args([
                "--generation-database",
                "none",
                "--output-sanitize",
                "false",
            ])
            .current_dir(cluster.dir.path());
        for header in headers {
            command.args(["-H", header]);
        }
        let out = tokio::task::spawn_blocking(move || command.output())
            .await
            .unwrap()
            .unwrap_or_else(|e| {
                panic!(
                    "run {} (scripts/schemathesis installs it): {e}",
                    schemathesis()
                )
            });
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "schemathesis (seed {seed}) found failures:\n{text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains("Stateful"), "the stateful phase ran: {text}");
    }
}

/// What the description allows the node takes, and what it forbids the
/// node refuses, as schemathesis finds it: an open node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_mismatch_with_an_open_node() {
    schemathesis_finds_nothing(&["--max-wait", "2s"], None, &[]).await;
}

/// The same against a node with `--acl`, with a token that may lock and
/// read every name (membership calls are refused it: 403).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemathesis_finds_no_mismatch_with_a_node_under_acl() {
    let acl = "[[token]]\nname = \"tester\"\nsecret = \"schemathesis-secret-0123456789\"\nlock = [\"\"]\nread = [\"\"]\n";
    schemathesis_finds_nothing(
        &["--max-wait", "2s"],
        Some(acl),
        &["Authorization: Bearer schemathesis-secret-0123456789"],
    )
    .await;
}

/// What generators need of the description: every operation named by a
/// unique `operationId`; every integer with its width (`int64` or
/// `uint64`, `int32` only where the maximum is below 2^31), so that fences
/// (past 2^40) are not read into 32-bit or double types; and no schema
/// closed to properties a newer node may add.
#[test]
fn the_description_names_operations_integer_widths_and_stays_open() {
    let spec: Value = serde_json::from_str(leasehold_api::OPENAPI_JSON).unwrap();
    let mut ids = BTreeSet::new();
    for (path, ops) in spec["paths"].as_object().unwrap() {
        for (method, op) in ops.as_object().unwrap() {
            let id = op["operationId"].as_str();
            let id = id.unwrap_or_else(|| panic!("{method} {path} has no operationId"));
            assert!(ids.insert(id.to_string()), "operationId {id} twice");
        }
    }
    fn walk(v: &Value, at: &str) {
        match v {
            Value::Object(map) => {
                assert_ne!(
                    map.get("additionalProperties"),
                    Some(&json!(false)),
                    "{at} is closed"
                );
                let integer = match &map.get("type") {
                    Some(Value::String(t)) => t == "integer",
                    Some(Value::Array(ts)) => ts.contains(&json!("integer")),
                    _ => false,
                };
                // `not` and `if` hold type tests of other rules, not values.
                if integer && !at.contains("/not/") && !at.contains("/if/") {
                    let format = map.get("format").and_then(Value::as_str);
                    let max = map.get("maximum").and_then(Value::as_u64);
                    match format {
                        Some("int64" | "uint64") => {}
                        Some("int32") if max.is_some_and(|m| m < 1 << 31) => {}
                        other => panic!("{at}: integer with format {other:?}"),
                    }
                }
                for (k, v) in map {
                    walk(v, &format!("{at}/{k}"));
                }
            }
            Value::Array(items) => {
                for (i, v) in items.iter().enumerate() {
                    walk(v, &format!("{at}/{i}"));
                }
            }
            _ => {}
        }
    }
    walk(&spec, "");
    let fence = &spec["components"]["schemas"]["Lock"]["properties"]["fence"];
    assert_eq!(fence["format"], json!("int64"), "{fence}");
}
