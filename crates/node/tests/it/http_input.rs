//! Property test over the HTTP API of a running node: random bodies, sizes,
//! encodings, paths and queries, and (on a node run with `--acl`) random
//! `Authorization` headers. Bad input is answered 4xx with a JSON error;
//! nothing is answered 5xx, no connection is dropped, and the lock held
//! before is intact after. With tokens, a call without the one known
//! secret is always `401`, and a call with it never is.

use std::time::Duration;

use leasehold_node::NodeConfig;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

struct Node {
    base: String,
    http: reqwest::Client,
    runtime: tokio::runtime::Runtime,
    _dir: tempfile::TempDir,
}

/// The secret of the one token of [`acl`]: it may lock and read anything.
const SECRET: &str = "the-one-token-0123";

fn acl() -> leasehold_acl::Acl {
    let text = format!(
        "[[token]]\nname = \"all\"\nsecret_sha256 = \"{}\"\nlock = [\"\"]\nread = [\"\"]\n",
        leasehold_acl::sha256_hex(SECRET.as_bytes())
    );
    leasehold_acl::Acl::parse(&text).unwrap()
}

fn start(acl: Option<leasehold_acl::Acl>) -> Node {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let base = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let mut config = NodeConfig::new(1, [(1, addr.clone())], dir.path().join("node-1"), "prop")
            .with_rebuild_timeout(Duration::from_secs(1));
        if let Some(acl) = acl {
            config = config.with_acl(acl);
        }
        let running = leasehold_node::start(config, listener).await.unwrap();
        std::mem::forget(running); // runs until the runtime stops
        format!("http://{addr}")
    });
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    Node {
        base,
        http,
        runtime,
        _dir: dir,
    }
}

/// Any JSON value, with the odd shapes that break decoders.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| json!(f)),
        Just(json!(u64::MAX)),
        ".{0,40}".prop_map(Value::String),
        (0usize..6000).prop_map(|n| Value::String("é".repeat(n / 2))),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map(".{0,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// A request body: an object with the API's fields (any types), or
/// anything at all.
fn body() -> impl Strategy<Value = Vec<u8>> {
    let field = prop_oneof![
        Just("name"),
        Just("holder"),
        Just("lease_ms"),
        Just("wait_ms"),
        Just("data"),
        Just("id"),
        Just("extra")
    ];
    let small_wait = (0u64..50).prop_map(|n| json!(n));
    let object =
        proptest::collection::vec((field, prop_oneof![3 => any_json(), 1 => small_wait]), 0..6)
            .prop_map(|fields| {
                let mut map = Map::new();
                for (k, v) in fields {
                    // A waiting request for a held name would block the test; keep
                    // waits that decode short.
                    let v = if k == "wait_ms" && v.as_u64().is_some_and(|w| w > 50) {
                        json!(10)
                    } else {
                        v
                    };
                    map.insert(k.to_string(), v);
                }
                serde_json::to_vec(&Value::Object(map)).unwrap()
            });
    prop_oneof![
        4 => object,
        1 => proptest::collection::vec(any::<u8>(), 0..2000),
        1 => (0usize..200_000).prop_map(|n| vec![b'{'; n]),
    ]
}

#[derive(Debug, Clone)]
enum Call {
    Post(&'static str, Vec<u8>, &'static str),
    Get(String),
}

fn call() -> impl Strategy<Value = Call> {
    let path = prop_oneof![
        Just("/v1/locks/acquire"),
        Just("/v1/locks/release"),
        Just("/v1/locks/renew")
    ];
    let content_type = prop_oneof![
        Just("application/json"),
        Just("text/plain"),
        Just(""),
        Just("application/x-www-form-urlencoded")
    ];
    let query = "[a-z_=&%0-9.-]{0,40}";
    prop_oneof![
        3 => (path, body(), content_type).prop_map(|(p, b, c)| Call::Post(p, b, c)),
        1 => "[^/?#]{0,600}".prop_map(|name| {
            let encoded: String = name.bytes().map(|b| format!("%{b:02X}")).collect();
            Call::Get(format!("/v1/locks/{encoded}"))
        }),
        1 => query.prop_map(|q| Call::Get(format!("/v1/locks?{q}"))),
        1 => ("[a-z%0-9]{0,20}", query).prop_map(|(n, q)| Call::Get(format!("/v1/locks/{n}?{q}"))),
    ]
}

/// An `Authorization` header: the known secret, or something else.
fn authorization() -> impl Strategy<Value = Option<Vec<u8>>> {
    prop_oneof![
        2 => Just(Some(format!("Bearer {SECRET}").into_bytes())),
        1 => Just(Some(format!("bearer {SECRET}").into_bytes())),
        1 => Just(None),
        1 => ".{0,60}".prop_map(|s| Some(format!("Bearer {s}").into_bytes())),
        1 => proptest::collection::vec(any::<u8>(), 0..300).prop_map(Some),
        1 => (0usize..20_000).prop_map(|n| Some(format!("Bearer {}", "x".repeat(n)).into_bytes())),
        1 => Just(Some(format!("Basic {SECRET}").into_bytes())),
        1 => Just(Some(format!("Bearer  {SECRET} ").into_bytes())),
    ]
}

/// Whether `header` carries the known secret, as the node reads it.
fn carries_secret(header: &Option<Vec<u8>>) -> bool {
    let Some(value) = header else { return false };
    value.len() > 7
        && value[..7].eq_ignore_ascii_case(b"bearer ")
        && value[7..].trim_ascii() == SECRET.as_bytes()
}

fn check(node: &Node, call: &Call) -> Result<(), TestCaseError> {
    check_as(node, call, &None).map(|_| ())
}

/// Sends `call` with `authorization`; its status.
fn check_as(
    node: &Node,
    call: &Call,
    authorization: &Option<Vec<u8>>,
) -> Result<u16, TestCaseError> {
    let (status, text) = node.runtime.block_on(async {
        let request = match call {
            Call::Post(path, body, content_type) => {
                let mut r = node
                    .http
                    .post(format!("{}{path}", node.base))
                    .body(body.clone());
                if !content_type.is_empty() {
                    r = r.header("content-type", *content_type);
                }
                r
            }
            Call::Get(path) => node.http.get(format!("{}{path}", node.base)),
        };
        let request = match authorization
            .as_ref()
            .and_then(|v| reqwest::header::HeaderValue::from_bytes(v).ok())
        {
            Some(value) => request.header(reqwest::header::AUTHORIZATION, value),
            None => request,
        };
        let response = request
            .send()
            .await
            .map_err(|e| TestCaseError::fail(format!("no answer: {e}")))?;
        let status = response.status().as_u16();
        let text = response
            .text()
            .await
            .map_err(|e| TestCaseError::fail(format!("body lost: {e}")))?;
        Ok::<_, TestCaseError>((status, text))
    })?;
    prop_assert!(status < 500, "{call:?} answered {status}: {text}");
    if status >= 400 {
        let body: Value = serde_json::from_str(&text)
            .map_err(|_| TestCaseError::fail(format!("not JSON: {text}")))?;
        prop_assert!(
            body["error"].is_string() && body["message"].is_string(),
            "{text}"
        );
    }
    Ok(status)
}

/// Acquires `precious` for ten minutes (as `secret`, if given); the answer.
fn hold_precious(node: &Node, secret: Option<&str>) -> Value {
    node.runtime.block_on(async {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        loop {
            let mut request = node
                .http
                .post(format!("{}/v1/locks/acquire", node.base))
                .json(&json!({"name": "precious", "lease_ms": 600000}));
            if let Some(secret) = secret {
                request = request.bearer_auth(secret);
            }
            if let Ok(r) = request.send().await {
                if r.status() == 200 {
                    return r.json::<Value>().await.unwrap();
                }
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the node never served"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
}

/// `precious` as the node shows it now (as `secret`, if given).
fn precious_now(node: &Node, secret: Option<&str>) -> Value {
    node.runtime.block_on(async {
        let mut request = node.http.get(format!("{}/v1/locks/precious", node.base));
        if let Some(secret) = secret {
            request = request.bearer_auth(secret);
        }
        request.send().await.unwrap().json().await.unwrap()
    })
}

#[test]
fn random_input_gets_4xx_json_and_never_touches_held_locks() {
    let node = start(None);
    let held = hold_precious(&node, None);
    let config = ProptestConfig {
        cases: 300,
        ..ProptestConfig::default()
    };
    proptest!(config, |(c in call())| { check(&node, &c)?; });
    let now = precious_now(&node, None);
    assert_eq!(
        now["lock"]["id"], held["lock"]["id"],
        "the held lock survived every input"
    );
}

#[test]
fn random_authorization_headers_get_401_unless_they_carry_the_token() {
    let node = start(Some(acl()));
    let held = hold_precious(&node, Some(SECRET));
    let config = ProptestConfig {
        cases: 200,
        ..ProptestConfig::default()
    };
    proptest!(config, |(c in call(), auth in authorization())| {
        let status = check_as(&node, &c, &auth)?;
        let sendable = auth
            .as_ref()
            .is_none_or(|v| reqwest::header::HeaderValue::from_bytes(v).is_ok());
        if sendable {
            prop_assert_eq!(status == 401, !carries_secret(&auth), "{:?} with {:?}", c, auth);
        }
    });
    let now = precious_now(&node, Some(SECRET));
    assert_eq!(
        now["lock"]["id"], held["lock"]["id"],
        "the held lock survived every input"
    );
}

/// Found by the property test: a name that percent-decodes to invalid UTF-8
/// was refused in plain text, not JSON.
#[test]
fn a_name_that_is_not_utf8_gets_a_json_400() {
    let node = start(None);
    let (status, body) = node.runtime.block_on(async {
        let r = node
            .http
            .get(format!("{}/v1/locks/%aa", node.base))
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json::<Value>().await.unwrap())
    });
    assert_eq!(status, 400);
    assert_eq!(body["error"], json!("bad_request"));
}

/// Found by the property test: with `--acl`, a path no route takes
/// (`/v1/locks/`, an empty name) was answered `404` to a caller without a
/// token, showing which routes exist; it is `401` like every other route,
/// and `404` once the caller shows a token.
#[test]
fn an_unknown_route_asks_for_a_token_first() {
    let node = start(Some(acl()));
    let status_as = |secret: Option<&str>, path: &str| {
        node.runtime.block_on(async {
            let mut request = node.http.get(format!("{}{path}", node.base));
            if let Some(secret) = secret {
                request = request.bearer_auth(secret);
            }
            let r = request.send().await.unwrap();
            let status = r.status().as_u16();
            let body: Value = r.json().await.unwrap();
            (status, body["error"].clone())
        })
    };
    for path in ["/v1/locks/", "/v1/nothing", "/nothing"] {
        assert_eq!(
            status_as(None, path),
            (401, json!("unauthorized")),
            "{path} without a token"
        );
        assert_eq!(
            status_as(Some("not-the-secret"), path),
            (401, json!("unauthorized")),
            "{path} with an unknown token"
        );
        assert_eq!(
            status_as(Some(SECRET), path),
            (404, json!("unknown_route")),
            "{path} with the token"
        );
    }
    let healthz = node.runtime.block_on(async {
        let r = node.http.get(format!("{}/healthz", node.base)).send();
        r.await.unwrap().status().as_u16()
    });
    assert_eq!(healthz, 200, "/healthz stays open");
}

/// Found by the property test: with `--acl`, a body sent without the token
/// was answered 401 unread, so the connection could not be used again and
/// was closed; the client's next request, sent on it as it closed, got no
/// answer ("error sending request").
#[test]
fn a_refused_body_leaves_the_connection_usable() {
    let node = start(Some(acl()));
    hold_precious(&node, Some(SECRET));
    node.runtime.block_on(async {
        for round in 0..50 {
            let refused = node
                .http
                .post(format!("{}/v1/locks/release", node.base))
                .header("content-type", "application/json")
                .body(vec![b'{'; 66_000])
                .send()
                .await
                .unwrap_or_else(|e| panic!("round {round}: no 401: {e}"));
            assert_eq!(refused.status(), 401);
            let _ = refused.bytes().await;
            let next = node
                .http
                .get(format!("{}/v1/locks/precious", node.base))
                .bearer_auth(SECRET)
                .send()
                .await
                .unwrap_or_else(|e| panic!("round {round}: the next call got no answer: {e}"));
            assert_eq!(next.status(), 200);
        }
    });
}
