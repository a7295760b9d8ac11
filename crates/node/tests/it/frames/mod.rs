//! The binary transport as a running node serves it (docs/design.md, "The
//! binary transport: frames"), driven by a raw client of the wire codec:
//! the same port as HTTP, versions chosen, calls pipelined and answered
//! out of order, tokens, and each fault of a connection (a frame over the
//! limit, an unknown kind, a body that does not decode, a stream cut
//! mid-frame, a caller that never reads) answered or closed clearly, with
//! nothing held lost.

use std::time::{Duration, Instant};

use leasehold_api::wire::{
    self, encode_frame, kind, Answer, Frame, FrameDecoder, GetQuery, Message, Request, Token,
    PREAMBLE_LEN,
};
use leasehold_api::{AcquireBody, ErrorCode, LockView, ReleaseBody, RenewBody};
use leasehold_node::{NodeConfig, RunningNode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TOKEN: &str = "frames";
const IDLE: Duration = Duration::from_secs(2);
const PATIENCE: Duration = Duration::from_secs(30);

struct Node {
    addr: String,
    http: reqwest::Client,
    _running: RunningNode,
    _dir: tempfile::TempDir,
}

async fn start_with(configure: impl FnOnce(NodeConfig) -> NodeConfig) -> Node {
    let (running, addr, dir) = crate::common::start_one(TOKEN, configure).await;
    Node {
        addr,
        // No pooled connections: one kept idle between two reads of the
        // metrics is closed by the node's idle timeout (2 s in some tests)
        // just as the next read goes out on it, and that read fails.
        http: reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(0)
            .build()
            .unwrap(),
        _running: running,
        _dir: dir,
    }
}

impl Node {
    /// `GET /v1/locks/{name}` over HTTP: the status and the lock's id.
    async fn holder_over_http(&self, name: &str) -> (u16, String) {
        let answer = self
            .http
            .get(format!(
                "http://{}/v1/locks/{}",
                self.addr,
                name.replace('/', "%2F")
            ))
            .timeout(PATIENCE)
            .send()
            .await
            .unwrap();
        let status = answer.status().as_u16();
        let body: serde_json::Value = answer.json().await.unwrap();
        (
            status,
            body["lock"]["id"].as_str().unwrap_or("").to_string(),
        )
    }
}

impl Node {
    /// The value of the series `name` at `/metrics`.
    async fn metric(&self, name: &str) -> f64 {
        let text = self
            .http
            .get(format!("http://{}/metrics", self.addr))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    }
}

/// A raw connection of the binary transport.
struct Conn {
    stream: TcpStream,
    answers: FrameDecoder<Answer>,
}

impl Conn {
    /// Connects, offering `version`; the node's preamble.
    async fn offer(addr: &str, version: u8) -> (Conn, [u8; PREAMBLE_LEN]) {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(&wire::preamble(version)).await.unwrap();
        let mut chosen = [0u8; PREAMBLE_LEN];
        tokio::time::timeout(PATIENCE, stream.read_exact(&mut chosen))
            .await
            .expect("the node's preamble in time")
            .unwrap();
        let conn = Conn {
            stream,
            answers: FrameDecoder::new(),
        };
        (conn, chosen)
    }

    async fn open(addr: &str) -> Conn {
        let (conn, chosen) = Conn::offer(addr, wire::SPEAKS).await;
        assert_eq!(chosen, wire::preamble(wire::SPEAKS));
        conn
    }

    async fn send(&mut self, id: u64, request: &Request) {
        let mut bytes = Vec::new();
        encode_frame(id, request, &mut bytes).unwrap();
        self.stream.write_all(&bytes).await.unwrap();
    }

    async fn recv(&mut self) -> Frame<Answer> {
        let mut buffer = [0u8; 4096];
        loop {
            if let Some(frame) = self.answers.poll().unwrap() {
                return frame;
            }
            let read = tokio::time::timeout(PATIENCE, self.stream.read(&mut buffer))
                .await
                .expect("an answer in time")
                .unwrap();
            assert!(read > 0, "the node closed the connection");
            self.answers.feed(&buffer[..read]);
        }
    }

    async fn call(&mut self, id: u64, request: Request) -> Answer {
        self.send(id, &request).await;
        let frame = self.recv().await;
        assert_eq!(frame.id, id);
        frame.message
    }

    /// How long until the node closes the connection (what it sends
    /// before is read and dropped), if within `within`.
    async fn closed_within(&mut self, within: Duration) -> Option<Duration> {
        let start = Instant::now();
        let mut sink = vec![0u8; 64 << 10];
        loop {
            let read =
                tokio::time::timeout_at((start + within).into(), self.stream.read(&mut sink));
            match read.await {
                Ok(Ok(0)) | Ok(Err(_)) => return Some(start.elapsed()),
                Ok(Ok(_)) => {}
                Err(_) => return None,
            }
        }
    }
}

fn acquire(name: &str) -> Request {
    Request::Acquire(AcquireBody {
        name: Some(name.into()),
        lease_ms: Some(60_000),
        ..AcquireBody::default()
    })
}

fn lock(answer: Answer) -> LockView {
    match answer {
        Answer::Lock(a) => a.lock,
        other => panic!("not a lock: {other:?}"),
    }
}

fn error(answer: Answer) -> ErrorCode {
    match answer {
        Answer::Error(e) => e.error,
        other => panic!("not an error: {other:?}"),
    }
}

/// Takes `name` over frames, retrying while the node is not serving yet.
async fn take_when_serving(conn: &mut Conn, name: &str) -> LockView {
    let deadline = Instant::now() + PATIENCE;
    for id in 1000.. {
        match conn.call(id, acquire(name)).await {
            Answer::Lock(a) => return a.lock,
            Answer::Error(e) if e.http_status() == 503 => {}
            other => panic!("acquire {name}: {other:?}"),
        }
        assert!(Instant::now() < deadline, "the node never served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    unreachable!()
}

#[tokio::test]
async fn frames_and_http_share_the_port_and_the_locks() {
    let node = start_with(|c| c).await;
    let mut conn = Conn::open(&node.addr).await;
    let held = take_when_serving(&mut conn, "shared/port").await;
    assert_eq!(
        node.holder_over_http("shared/port").await,
        (200, held.id.clone())
    );

    let renewed = lock(
        conn.call(
            2,
            Request::Renew(RenewBody {
                name: "shared/port".into(),
                id: held.id.clone(),
                ..RenewBody::default()
            }),
        )
        .await,
    );
    assert_eq!(
        (renewed.id.as_str(), renewed.fence),
        (held.id.as_str(), held.fence)
    );
    let got = lock(
        conn.call(
            3,
            Request::Get(GetQuery {
                name: "shared/port".into(),
                watch: None,
            }),
        )
        .await,
    );
    assert_eq!(got.id, held.id);
    // The rules are the node's, whichever transport: a rival is refused
    // with the holder, a bad name is a bad request.
    match conn.call(4, acquire("shared/port")).await {
        Answer::Error(e) => {
            assert_eq!(e.error, ErrorCode::Held);
            assert_eq!(e.lock.unwrap().id, held.id);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        error(conn.call(5, acquire("")).await),
        ErrorCode::BadRequest
    );
    lock(
        conn.call(
            6,
            Request::Release(ReleaseBody::one("shared/port", &held.id)),
        )
        .await,
    );
    assert_eq!(node.holder_over_http("shared/port").await.0, 404);
    assert_eq!(conn.call(7, Request::Ping).await, Answer::Done);
}

#[tokio::test]
async fn the_lower_version_is_chosen_and_none_in_common_is_refused() {
    let node = start_with(|c| c).await;
    let (mut conn, chosen) = Conn::offer(&node.addr, 200).await;
    assert_eq!(chosen, wire::preamble(wire::SPEAKS), "the lower of the two");
    assert_eq!(conn.call(1, Request::Ping).await, Answer::Done);

    let (mut refused, chosen) = Conn::offer(&node.addr, wire::NONE).await;
    assert_eq!(chosen, wire::preamble(wire::NONE));
    assert!(refused.closed_within(PATIENCE).await.is_some());
}

/// A listing over version 2 names the free names a set waits for (the
/// frame kind that carries them); over version 1, whose listing has no
/// place for them, the same listing leaves them out.
#[tokio::test]
async fn a_listing_names_the_free_names_a_set_waits_for_from_version_2() {
    let node = start_with(|c| c).await;
    let mut conn = Conn::open(&node.addr).await;
    take_when_serving(&mut conn, "aw/held").await;
    let set = Request::Acquire(AcquireBody {
        names: Some(vec!["aw/held".into(), "aw/free".into()]),
        wait_ms: Some(60_000),
        holder: Some("the-set".into()),
        ..AcquireBody::default()
    });
    let list = || {
        Request::List(leasehold_api::ListQuery {
            prefix: Some("aw/".into()),
            limit: None,
        })
    };
    // The set is refused `upgrading` until the new node's protocol is
    // agreed; once it waits, the listing after it is answered first.
    let deadline = Instant::now() + PATIENCE;
    let mut id = 1;
    let listing = loop {
        assert!(Instant::now() < deadline, "the set never waited");
        conn.send(id, &set).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        conn.send(id + 1, &list()).await;
        let first = conn.recv().await;
        if first.id != id {
            match first.message {
                Answer::Locks(a) => break a,
                other => panic!("not a listing: {other:?}"),
            }
        }
        assert!(
            matches!(&first.message, Answer::Error(e) if e.error == ErrorCode::Upgrading),
            "{first:?}"
        );
        conn.recv().await;
        id += 2;
    };
    assert_eq!(Answer::Locks(listing.clone()).kind(), kind::LOCKS_AWAITED);
    assert_eq!(listing.awaited.len(), 1, "{listing:?}");
    assert_eq!(listing.awaited[0].name, "aw/free");
    assert_eq!(listing.awaited[0].queue[0].holder, "the-set");
    assert_eq!(listing.awaited[0].queue[0].with, ["aw/held"]);

    let (mut old, chosen) = Conn::offer(&node.addr, 1).await;
    assert_eq!(chosen, wire::preamble(1));
    match old.call(3, list()).await {
        Answer::Locks(a) => {
            assert!(a.awaited.is_empty(), "{a:?}");
            assert_eq!(a.locks.len(), 1, "{a:?}");
        }
        other => panic!("not a listing: {other:?}"),
    }
}

#[tokio::test]
async fn calls_are_answered_as_they_are_served_not_in_the_order_sent() {
    let node = start_with(|c| c).await;
    let mut conn = Conn::open(&node.addr).await;
    let held = take_when_serving(&mut conn, "order/a").await;
    // A blocking acquire of the held name, then a renewal of it: the
    // renewal is answered while the acquire waits, and the release that
    // follows lets the acquire through.
    let mut wait = acquire("order/a");
    if let Request::Acquire(body) = &mut wait {
        body.wait_ms = Some(20_000);
    }
    conn.send(10, &wait).await;
    let renew = Request::Renew(RenewBody {
        name: "order/a".into(),
        id: held.id.clone(),
        ..RenewBody::default()
    });
    conn.send(11, &renew).await;
    let first = conn.recv().await;
    assert_eq!(first.id, 11, "the renewal is not held up by the acquire");
    assert_eq!(lock(first.message).id, held.id);
    conn.send(12, &Request::Release(ReleaseBody::one("order/a", &held.id)))
        .await;
    let mut ids = Vec::new();
    let mut granted = None;
    for _ in 0..2 {
        let frame = conn.recv().await;
        ids.push(frame.id);
        if frame.id == 10 {
            granted = Some(lock(frame.message));
        }
    }
    ids.sort();
    assert_eq!(ids, [10, 12]);
    let granted = granted.unwrap();
    assert_ne!(granted.id, held.id);
    assert!(granted.fence > held.fence);
}

#[tokio::test]
async fn a_frame_over_the_limit_is_refused_and_closes_its_connection_and_nothing_held_is_lost() {
    let node = start_with(|c| c).await;
    let mut holder = Conn::open(&node.addr).await;
    let held = take_when_serving(&mut holder, "kept").await;

    let mut conn = Conn::open(&node.addr).await;
    let mut header = Vec::new();
    header.extend_from_slice(&(wire::MAX_REQUEST_BODY as u32 + 1).to_le_bytes());
    header.push(kind::ACQUIRE);
    header.extend_from_slice(&5u64.to_le_bytes());
    conn.stream.write_all(&header).await.unwrap();
    let refused = conn.recv().await;
    assert_eq!(refused.id, 5);
    assert_eq!(error(refused.message), ErrorCode::TooLarge);
    assert!(
        conn.closed_within(PATIENCE).await.is_some(),
        "the stream cannot be followed past the frame: closed"
    );

    assert_eq!(node.holder_over_http("kept").await, (200, held.id.clone()));
    let renew = Request::Renew(RenewBody {
        name: "kept".into(),
        id: held.id.clone(),
        ..RenewBody::default()
    });
    assert_eq!(lock(holder.call(2, renew).await).id, held.id);
}

#[tokio::test]
async fn an_unknown_kind_or_an_unreadable_body_is_refused_and_the_connection_goes_on() {
    let node = start_with(|c| c).await;
    let mut conn = Conn::open(&node.addr).await;
    let mut frames = Vec::new();
    // Kind 0x3e: a request kind no version has yet.
    frames.extend_from_slice(&3u32.to_le_bytes());
    frames.push(0x3e);
    frames.extend_from_slice(&7u64.to_le_bytes());
    frames.extend_from_slice(b"new");
    // An acquire whose body is not one.
    frames.extend_from_slice(&2u32.to_le_bytes());
    frames.push(kind::ACQUIRE);
    frames.extend_from_slice(&8u64.to_le_bytes());
    frames.extend_from_slice(&[0xff, 0xff]);
    conn.stream.write_all(&frames).await.unwrap();
    let unknown = conn.recv().await;
    assert_eq!(
        (unknown.id, error(unknown.message)),
        (7, ErrorCode::BadRequest)
    );
    let unreadable = conn.recv().await;
    assert_eq!(
        (unreadable.id, error(unreadable.message)),
        (8, ErrorCode::BadRequest)
    );
    assert_eq!(conn.call(9, Request::Ping).await, Answer::Done);
    take_when_serving(&mut conn, "goes/on").await;
}

#[tokio::test]
async fn a_frame_cut_off_is_not_served_and_nothing_held_is_lost() {
    let node = start_with(|c| c).await;
    let mut holder = Conn::open(&node.addr).await;
    let held = take_when_serving(&mut holder, "kept").await;

    let mut conn = Conn::open(&node.addr).await;
    let mut bytes = Vec::new();
    encode_frame(1, &acquire("cut/off"), &mut bytes).unwrap();
    conn.stream
        .write_all(&bytes[..bytes.len() - 3])
        .await
        .unwrap();
    conn.stream.shutdown().await.unwrap();
    assert!(conn.closed_within(PATIENCE).await.is_some());
    assert_eq!(node.holder_over_http("cut/off").await.0, 404, "not taken");
    assert_eq!(node.holder_over_http("kept").await, (200, held.id));
}

#[tokio::test]
async fn a_caller_that_reads_no_answers_is_slowed_then_closed_and_others_are_served() {
    let node = start_with(|c| c.with_idle_timeout(IDLE)).await;
    let mut holder = Conn::open(&node.addr).await;
    let held = take_when_serving(&mut holder, "kept").await;
    // Answers of a few kilobytes each: a listing of 50 locks with data.
    for i in 0..50 {
        let mut body = acquire(&format!("slow/{i:02}"));
        if let Request::Acquire(b) = &mut body {
            b.data = Some("d".repeat(1000));
        }
        lock(holder.call(100 + i, body).await);
    }

    let (mut reader, mut writer) = {
        let conn = Conn::open(&node.addr).await;
        conn.stream.into_split()
    };
    let list = Request::List(leasehold_api::ListQuery {
        prefix: Some("slow/".into()),
        limit: Some(50),
    });
    let mut frame = Vec::new();
    encode_frame(1, &list, &mut frame).unwrap();
    // Sent until the node stops reading (its calls in flight full, its
    // answers unread): a write that makes no progress for a while.
    let sender = tokio::spawn(async move {
        let mut sent = 0u64;
        loop {
            match tokio::time::timeout(IDLE * 3, writer.write_all(&frame)).await {
                Ok(Ok(())) => sent += 1,
                Ok(Err(_)) => return (sent, "closed"),
                Err(_) => return (sent, "blocked"),
            }
        }
    });
    // The node holds no more of this caller's calls than its bound while
    // it cannot write their answers (it closes the connection once a
    // write has made no progress for the idle timeout).
    let mut most = 0.0f64;
    let mut other = Conn::open(&node.addr).await;
    let mut renewed = false;
    while !sender.is_finished() {
        if !renewed && most >= 1.0 {
            // Another connection is served all the while.
            let renew = Request::Renew(RenewBody {
                name: "kept".into(),
                id: held.id.clone(),
                ..RenewBody::default()
            });
            assert_eq!(lock(other.call(2, renew).await).id, held.id);
            renewed = true;
        }
        let in_flight = node.metric("leasehold_binary_calls_in_flight").await;
        assert!(in_flight <= 256.0, "{in_flight} calls in flight");
        most = most.max(in_flight);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(most >= 1.0, "the caller's calls were never seen in flight");

    let (sent, how) = sender.await.unwrap();
    assert!(sent > 0);
    // Answered for no more than the node's bound of calls in flight and
    // what the sockets' buffers hold, then closed: what the caller reads
    // now ends.
    let mut read = 0usize;
    let mut sink = vec![0u8; 64 << 10];
    let ended = tokio::time::timeout(PATIENCE, async {
        loop {
            match reader.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(n) => read += n,
            }
        }
    })
    .await;
    assert!(
        ended.is_ok(),
        "the node kept a caller that reads nothing ({how} after {sent} calls)"
    );
    let answer_len = 50 * 1000;
    assert!(
        (read / answer_len) < sent as usize,
        "every call was answered: {read} bytes for {sent} calls, the node never stopped reading"
    );
    assert_eq!(node.holder_over_http("kept").await, (200, held.id));
    assert_eq!(node.metric("leasehold_binary_calls_in_flight").await, 0.0);
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_after_the_idle_timeout() {
    let node = start_with(|c| c.with_idle_timeout(IDLE)).await;
    let mut conn = Conn::open(&node.addr).await;
    assert_eq!(conn.call(1, Request::Ping).await, Answer::Done);
    assert_eq!(node.metric("leasehold_binary_connections").await, 1.0);
    let closed = conn.closed_within(IDLE * 10).await;
    assert!(closed.is_some(), "an idle connection stayed open");
    assert!(
        closed.unwrap() >= IDLE - Duration::from_millis(200),
        "{closed:?}"
    );
    assert_eq!(node.metric("leasehold_binary_connections").await, 0.0);
}

#[tokio::test]
async fn with_an_acl_the_token_frame_says_who_calls() {
    let secret = "frames-deployer";
    let acl = leasehold_acl::Acl::parse(&format!(
        "[[token]]\nname = \"deployer\"\nsecret_sha256 = \"{}\"\nlock = [\"jobs/\"]\nread = [\"jobs/\"]\n",
        leasehold_acl::sha256_hex(secret.as_bytes())
    ))
    .unwrap();
    let node = start_with(|c| c.with_acl(acl)).await;

    let mut cluster = Conn::open(&node.addr).await;
    let said = cluster.call(1, Request::Token(Token(TOKEN.into()))).await;
    assert_eq!(said, Answer::Done, "the cluster token calls as the cluster");
    take_when_serving(&mut cluster, "other/1").await;

    let mut anonymous = Conn::open(&node.addr).await;
    assert_eq!(anonymous.call(1, Request::Ping).await, Answer::Done);
    assert_eq!(
        error(anonymous.call(2, acquire("jobs/1")).await),
        ErrorCode::Unauthorized
    );

    let mut wrong = Conn::open(&node.addr).await;
    let said = wrong
        .call(1, Request::Token(Token("not-a-token".into())))
        .await;
    assert_eq!(error(said), ErrorCode::Unauthorized);
    assert_eq!(
        error(wrong.call(2, acquire("jobs/1")).await),
        ErrorCode::Unauthorized
    );

    let mut deployer = Conn::open(&node.addr).await;
    // The token, then at once a call: the node applies the token before it
    // reads the next frame.
    deployer
        .send(1, &Request::Token(Token(secret.into())))
        .await;
    deployer.send(2, &acquire("jobs/1")).await;
    let mut answers = [deployer.recv().await, deployer.recv().await];
    answers.sort_by_key(|f| f.id);
    let [token, taken] = answers;
    assert_eq!(token.message, Answer::Done);
    assert_eq!(lock(taken.message).name, "jobs/1");
    assert_eq!(
        error(deployer.call(3, acquire("other/2")).await),
        ErrorCode::Forbidden
    );
    assert_eq!(
        error(deployer.call(4, Request::RemoveMember(2)).await),
        ErrorCode::Forbidden,
        "not an admin token"
    );
}

mod limits;
mod peer;
