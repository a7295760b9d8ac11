//! The OpenAPI description (`GET /v1/openapi.json`, `crates/api/openapi.json`)
//! against a running cluster, so that it cannot drift: every path it names
//! is served with the methods it names, every route docs/api.md lists is in
//! it, and real answers, successes and errors, fit its schemas.

use crate::support;

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{json, Value};
use support::Cluster;

/// A validator of the description's schema `name`.
fn schema(spec: &Value, name: &str) -> jsonschema::Validator {
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": format!("#/components/schemas/{name}"),
        "components": spec["components"],
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
    // A request waits for another lock: listings show it in its queue.
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
            let body = json!({"name": "api/b", "holder": "waits", "wait_ms": 60000});
            let _ = http.post(url).json(&body).send().await;
        })
    };
    let started = std::time::Instant::now();
    loop {
        let (_, body) = call(&cluster, speaker, "get", "/v1/locks?prefix=api/", None).await;
        if body["locks"][1]["queue"][0]["holder"] == json!("waits") {
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
