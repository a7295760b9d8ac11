//! The answers of a running node to requests no route takes: an unknown
//! route, a name with an unencoded slash, a wrong method, the chaos route
//! on a node without `--chaos`; a free lock's answer; and what the client
//! makes of an unknown route; and connections that send nothing, or a
//! request head or body a byte at a time, cut off after the idle timeout
//! with nothing held lost.

use std::time::{Duration, Instant};

use leasehold_client::{AcquireOptions, Client, Error};
use leasehold_node::{NodeConfig, RunningNode};
use serde_json::{json, Value};

const TOKEN: &str = "errors";

struct Node {
    base: String,
    addr: String,
    http: reqwest::Client,
    _running: RunningNode,
    _dir: tempfile::TempDir,
}

/// A one-node cluster on loopback.
async fn start() -> Node {
    start_with(|config| config).await
}

/// A one-node cluster on loopback, configured by `configure`.
async fn start_with(configure: impl FnOnce(NodeConfig) -> NodeConfig) -> Node {
    let (running, addr, dir) = crate::common::start_one(TOKEN, configure).await;
    Node {
        base: format!("http://{addr}"),
        addr,
        http: reqwest::Client::builder().no_proxy().build().unwrap(),
        _running: running,
        _dir: dir,
    }
}

impl Node {
    /// Sends `method path` (with the cluster token if `token`); the status,
    /// the headers and the body as JSON.
    async fn call(
        &self,
        method: &str,
        path: &str,
        token: bool,
    ) -> (u16, reqwest::header::HeaderMap, Value) {
        let mut request = self
            .http
            .request(method.parse().unwrap(), format!("{}{path}", self.base))
            .timeout(Duration::from_secs(10));
        if token {
            request = request.header("x-leasehold-token", TOKEN);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap();
        let body = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{method} {path}: not JSON: {text:?}"));
        (status, headers, body)
    }

    /// Waits until the node grants (it speaks, rebuilt).
    async fn serving(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let answer = self
                .http
                .post(format!("{}/v1/locks/acquire", self.base))
                .json(&json!({"name": "warm-up"}))
                .send()
                .await;
            if answer.is_ok_and(|r| r.status() == 200) {
                return;
            }
            assert!(Instant::now() < deadline, "the node never served");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_route_is_a_404_of_its_own() {
    let node = start().await;
    for (method, path) in [
        ("GET", "/nothing/here"),
        ("POST", "/v1/lock/acquire"),
        ("GET", "/v1/locks/"),
        ("GET", "/v2/locks/a"),
    ] {
        let (status, _, body) = node.call(method, path, false).await;
        assert_eq!(status, 404, "{method} {path}: {body}");
        assert_eq!(body["error"], json!("unknown_route"), "{method} {path}");
        assert!(body["message"].is_string(), "{body}");
    }
    // Under /internal with the token, the same: no route, not no lock.
    let (status, _, body) = node.call("POST", "/internal/no/such", true).await;
    assert_eq!((status, &body["error"]), (404, &json!("unknown_route")));
}

/// A name with a slash must be percent-encoded as one segment; unencoded,
/// the path names no route, and is not answered as a free lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_with_an_unencoded_slash_is_not_read_as_a_free_lock() {
    let node = start().await;
    node.serving().await;
    let (status, _, body) = node.call("GET", "/v1/locks/jobs/42", false).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"], json!("unknown_route"), "{body}");
    assert_ne!(body["error"], json!("not_held"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_method_is_a_json_405() {
    let node = start().await;
    for (method, path, token) in [
        ("GET", "/v1/locks/acquire", false),
        ("DELETE", "/v1/locks/a", false),
        ("POST", "/v1/cluster", false),
        ("PUT", "/v1/locks", false),
        ("GET", "/internal/chaos", true),
    ] {
        let (status, headers, body) = node.call(method, path, token).await;
        assert_eq!(status, 405, "{method} {path}: {body}");
        assert_eq!(
            body["error"],
            json!("method_not_allowed"),
            "{method} {path}"
        );
        assert!(body["message"].as_str().unwrap().contains(method), "{body}");
        assert!(
            headers.contains_key("allow"),
            "{method} {path}: {headers:?}"
        );
    }
    // The peer routes still show nothing without the token.
    let (status, _, body) = node.call("GET", "/internal/held", false).await;
    assert_eq!((status, &body["error"]), (401, &json!("unauthorized")));
}

/// A get of a free lock is `404 not_held`, as clients expect, with a
/// message about the name, not about an id the caller never gave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_lock_is_not_held_by_its_name() {
    let node = start().await;
    node.serving().await;
    let (status, _, body) = node.call("GET", "/v1/locks/jobs%2F42", false).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"], json!("not_held"));
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("jobs/42"), "{message}");
    assert!(!message.contains(" id"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chaos_route_of_a_node_without_chaos_says_it_is_disabled() {
    let node = start().await;
    let response = node
        .http
        .post(format!("{}/internal/chaos", node.base))
        .header("x-leasehold-token", TOKEN)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 403);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"], json!("disabled"), "{body}");
    assert!(body["message"].as_str().unwrap().contains("--chaos"));
}

/// A client given a wrong URL (a path after host:port) hears that the node
/// has no such route: not that the lock is free, nor that it is not held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_at_a_wrong_url_is_told_so() {
    let node = start().await;
    node.serving().await;
    let client = Client::http([format!("{}/leasehold", node.base)]).unwrap();
    match client.get("jobs/42").await {
        Err(Error::UnknownRoute(message)) => assert!(!message.is_empty()),
        other => panic!("a get at a wrong URL answered {other:?}"),
    }
    match client
        .try_acquire("jobs/42", AcquireOptions::default())
        .await
    {
        Err(Error::UnknownRoute(_)) => {}
        other => panic!("an acquire at a wrong URL answered {:?}", other.err()),
    }
    match client
        .release("jobs/42", "01JD0000000000000000000000")
        .await
    {
        Err(Error::UnknownRoute(_)) => {}
        other => panic!("a release at a wrong URL answered {other:?}"),
    }
}

mod idle {
    //! Connections closed after the idle timeout.

    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWrite, AsyncWriteExt};
    use tokio::net::TcpStream;

    const IDLE: Duration = Duration::from_secs(2);

    /// A whole `POST path` with a JSON `body` on a kept-alive connection.
    fn post(path: &str, body: &str) -> String {
        format!(
            "POST {path} HTTP/1.1\r\nhost: node\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
    }

    /// Reads one answer's head and body from `stream` (the body by its
    /// content length); `None` if the connection closed first.
    async fn answer(stream: &mut TcpStream) -> Option<(u16, String)> {
        let mut bytes = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&bytes).to_string();
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .lines()
                    .find_map(|l| {
                        l.to_ascii_lowercase()
                            .strip_prefix("content-length: ")
                            .map(str::to_string)
                    })
                    .and_then(|n| n.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                if bytes.len() >= end + 4 + length {
                    let status = text[9..12].parse().unwrap();
                    return Some((status, text[end + 4..end + 4 + length].to_string()));
                }
            }
            match tokio::time::timeout(Duration::from_secs(30), stream.read(&mut chunk)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return None,
                Ok(Ok(n)) => bytes.extend_from_slice(&chunk[..n]),
                Err(_) => panic!("no answer and no close within 30 s"),
            }
        }
    }

    /// How long until the node closes `stream` (reads nothing more from it
    /// but its end), at most `within`.
    async fn closed_within(stream: &mut TcpStream, within: Duration) -> Option<Duration> {
        let start = Instant::now();
        let mut sink = [0u8; 1024];
        loop {
            match tokio::time::timeout_at((start + within).into(), stream.read(&mut sink)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return Some(start.elapsed()),
                Ok(Ok(_)) => {}
                Err(_) => return None,
            }
        }
    }

    /// Writes `bytes` to `writer` one every 100 ms; how long until a write
    /// failed (the node closed the connection), `None` if none did.
    async fn dribble(mut writer: impl AsyncWrite + Unpin, bytes: Vec<u8>) -> Option<Duration> {
        let started = Instant::now();
        for byte in bytes {
            if writer.write_all(&[byte]).await.is_err() {
                return Some(started.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        None
    }

    /// Asks to take `name` on a connection of its own; the answer, if any.
    async fn try_take(node: &Node, name: &str) -> Option<(u16, String)> {
        let mut stream = TcpStream::connect(&node.addr).await.unwrap();
        let body = format!(r#"{{"name":"{name}","holder":"h","lease_ms":60000}}"#);
        stream
            .write_all(post("/v1/locks/acquire", &body).as_bytes())
            .await
            .unwrap();
        answer(&mut stream).await
    }

    /// Takes `name`, retrying until the new node serves; the lock's JSON.
    async fn take_when_serving(node: &Node, name: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some((200, body)) = try_take(node, name).await {
                return body;
            }
            assert!(Instant::now() < deadline, "the node never served");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    #[tokio::test]
    async fn a_connection_that_never_finishes_its_head_is_closed_and_nothing_held_is_lost() {
        let node = start_with(|c| c.with_idle_timeout(IDLE)).await;
        let held = take_when_serving(&node, "kept").await;

        let mut silent = TcpStream::connect(&node.addr).await.unwrap();
        let mut half = TcpStream::connect(&node.addr).await.unwrap();
        half.write_all(b"POST /v1/locks/acquire HTTP/1.1\r\nhost: no")
            .await
            .unwrap();
        // One that sends its head a byte at a time, each well within the
        // timeout: the timeout counts the whole head, not the gaps.
        // It stops when a write fails, the node having closed the
        // connection; its head takes about 18 s to send.
        let dribbling = TcpStream::connect(&node.addr).await.unwrap();
        let head = b"GET /v1/cluster HTTP/1.1\r\nhost: node\r\nx-slow: ".repeat(4);
        let dribbled = tokio::spawn(dribble(dribbling, head));

        let generous = IDLE * 10;
        let silent_closed = closed_within(&mut silent, generous).await;
        assert!(silent_closed.is_some(), "a silent connection stayed open");
        assert!(
            silent_closed.unwrap() >= IDLE - Duration::from_millis(200),
            "closed before the idle timeout: {silent_closed:?}"
        );
        assert!(
            closed_within(&mut half, generous).await.is_some(),
            "a half-sent head kept its connection open"
        );
        let cut_after = dribbled.await.unwrap();
        assert!(
            cut_after.is_some(),
            "a head sent a byte at a time was taken to its end: each byte reset the timeout"
        );
        let cut_after = cut_after.unwrap();
        assert!(
            cut_after < IDLE * 4,
            "a head sent a byte at a time was cut only after {cut_after:?}"
        );

        // The node still serves, and the lock taken before is still held.
        let mut stream = TcpStream::connect(&node.addr).await.unwrap();
        stream
            .write_all(post("/v1/locks/acquire", r#"{"name":"kept","holder":"other"}"#).as_bytes())
            .await
            .unwrap();
        let (status, body) = answer(&mut stream).await.expect("an answer");
        assert_eq!(status, 409, "{body} (held before: {held})");
        let (status, body) = try_take(&node, "another").await.expect("an answer");
        assert_eq!(status, 200, "{body}");
    }

    #[tokio::test]
    async fn a_body_sent_a_byte_at_a_time_is_cut_off_with_a_400_and_takes_nothing() {
        let node = start_with(|c| c.with_idle_timeout(IDLE)).await;
        take_when_serving(&node, "warm").await;
        let body = format!(
            r#"{{"name":"slow","holder":"h","data":"{}"}}"#,
            "x".repeat(300)
        );
        let request = post("/v1/locks/acquire", &body);
        let (head, body) = request.split_at(request.find("\r\n\r\n").unwrap() + 4);
        let (head, body) = (head.to_string(), body.as_bytes().to_vec());
        let stream = TcpStream::connect(&node.addr).await.unwrap();
        let (mut reading, mut writing) = stream.into_split();
        // The whole body would take about 33 s.
        writing.write_all(head.as_bytes()).await.unwrap();
        let dribbled = tokio::spawn(dribble(writing, body));
        let started = Instant::now();
        let mut bytes = Vec::new();
        let read = tokio::time::timeout(IDLE * 10, reading.read_to_end(&mut bytes)).await;
        let waited = started.elapsed();
        dribbled.abort();
        assert!(
            read.is_ok(),
            "no answer, and no close, within {:?}",
            IDLE * 10
        );
        let text = String::from_utf8_lossy(&bytes);
        assert!(text.starts_with("HTTP/1.1 400"), "{text}");
        assert!(text.contains("did not arrive"), "{text}");
        assert!(waited >= IDLE, "cut off after {waited:?}");
        let (status, answer) = try_take(&node, "slow").await.expect("an answer");
        assert_eq!(status, 200, "the cut-off request took the lock: {answer}");
    }

    #[tokio::test]
    async fn a_kept_alive_connection_serves_until_it_sits_idle_for_the_timeout() {
        let node = start_with(|c| c.with_idle_timeout(IDLE)).await;
        take_when_serving(&node, "warm").await;
        let mut stream = TcpStream::connect(&node.addr).await.unwrap();
        let ask = "GET /v1/cluster HTTP/1.1\r\nhost: node\r\n\r\n";
        // Requests closer together than the timeout share the connection,
        // for longer in all than the timeout.
        let started = Instant::now();
        while started.elapsed() < IDLE * 2 {
            stream.write_all(ask.as_bytes()).await.unwrap();
            let (status, _) = answer(&mut stream)
                .await
                .expect("served on the same connection");
            assert_eq!(status, 200);
            tokio::time::sleep(IDLE / 8).await;
        }
        let closed = closed_within(&mut stream, IDLE * 10).await;
        assert!(
            closed.is_some(),
            "an idle kept-alive connection stayed open"
        );
    }
}

impl Node {
    /// Sends `method path` with `body` as it is (with the cluster token if
    /// `token`): the status, the headers and the body as JSON.
    async fn send_raw(
        &self,
        method: &str,
        path: &str,
        body: &'static str,
        token: bool,
    ) -> (u16, reqwest::header::HeaderMap, Value) {
        let mut request = self
            .http
            .request(method.parse().unwrap(), format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body)
            .timeout(Duration::from_secs(10));
        if token {
            request = request.header("x-leasehold-token", TOKEN);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.json().await.unwrap_or(Value::Null);
        (status, headers, body)
    }
}

/// An operator's route asks for the cluster token before it reads what it
/// was sent: a caller without it hears `401`, whatever the body or the id
/// (as before the routes went through the transports' one layer of calls).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operators_route_asks_for_the_token_before_it_reads_the_body_or_the_id() {
    let node = start().await;
    for (method, path, body) in [
        ("POST", "/v1/cluster/members", "not json"),
        (
            "POST",
            "/v1/cluster/members",
            r#"{"id": 0, "addr": "127.0.0.1:9"}"#,
        ),
        ("DELETE", "/v1/cluster/members/abc", ""),
        ("DELETE", "/v1/cluster/members/0", ""),
    ] {
        let (status, _, answer) = node.send_raw(method, path, body, false).await;
        assert_eq!(status, 401, "{method} {path} {body}: {answer}");
        assert_eq!(answer["error"], json!("unauthorized"));
        let (status, _, answer) = node.send_raw(method, path, body, true).await;
        assert_eq!(
            status, 400,
            "with the token, {method} {path} {body}: {answer}"
        );
    }
}

/// A node whose client calls `--chaos` refuses refuses them unread: a
/// malformed call is refused `503` as a good one is (as before the routes
/// went through the transports' one layer of calls).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_refusing_client_calls_under_chaos_refuses_them_unread() {
    let node = start_with(|c| c.with_chaos(true)).await;
    node.serving().await;
    let set = node
        .http
        .post(format!("{}/internal/chaos", node.base))
        .header("x-leasehold-token", TOKEN)
        .json(&json!({ "refuse_clients": true }))
        .send()
        .await
        .unwrap();
    assert_eq!(set.status().as_u16(), 200);
    for (method, path, body) in [
        ("POST", "/v1/locks/acquire", r#"{"name": "a"}"#),
        ("POST", "/v1/locks/acquire", "{"),
        ("POST", "/v1/sessions/open", "[]"),
        ("GET", "/v1/locks?limit=0", ""),
        ("GET", "/v1/locks/a?wait_ms=x", ""),
    ] {
        let (status, headers, answer) = node.send_raw(method, path, body, false).await;
        assert_eq!(status, 503, "{method} {path} {body}: {answer}");
        assert_eq!(
            answer["error"],
            json!("no_leader"),
            "{method} {path} {body}"
        );
        assert!(headers.contains_key("retry-after"), "{headers:?}");
    }
}

/// With `--acl`, a name the token may not read is refused `403` before
/// the query is read (as before the routes went through the transports'
/// one layer of calls).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_the_token_may_not_read_is_refused_before_its_query_is_read() {
    let secret = "errors-jobs";
    let acl = leasehold_acl::Acl::parse(&format!(
        "[[token]]\nname = \"jobs\"\nsecret_sha256 = \"{}\"\nlock = [\"jobs/\"]\nread = [\"jobs/\"]\n",
        leasehold_acl::sha256_hex(secret.as_bytes())
    ))
    .unwrap();
    let node = start_with(|c| c.with_acl(acl)).await;
    for (path, status) in [
        ("/v1/locks/other%2F1?wait_ms=x", 403),
        ("/v1/locks/jobs%2F1?wait_ms=x", 400),
    ] {
        let answer = node
            .http
            .get(format!("{}{path}", node.base))
            .bearer_auth(secret)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status().as_u16(), status, "{path}");
    }
}
