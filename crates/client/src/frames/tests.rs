//! The transport against fake nodes written here with tokio and the wire
//! codec: a node that serves frames as the test says, and an older one
//! that answers the preamble as HTTP.

use std::time::Duration;

use leasehold_api::wire::{self, Answer, Frame, FrameDecoder, Request, Token};
use leasehold_api::{ErrorBody, ErrorCode, LockAnswer, LockView, RenewBody};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::{FrameTransport, Tuning};
use crate::http::HttpOptions;
use crate::transport::{CallError, Transport};

const SHORT: Duration = Duration::from_millis(300);
const LONG: Duration = Duration::from_secs(5);

/// A lock named `name`.
fn view(name: &str) -> LockView {
    let json = serde_json::json!({
        "name": name, "node": 1, "fence": 7, "lease_ms": 3_000, "ttl_ms": 3_000,
        "acquired_at": "", "expires_at": "",
    });
    serde_json::from_value(json).unwrap()
}

fn renew(name: &str) -> RenewBody {
    RenewBody {
        name: name.into(),
        id: "01JD0000000000000000000000".into(),
        lease_ms: None,
        data: None,
    }
}

fn lock_answer(name: &str) -> Answer {
    Answer::Lock(LockAnswer {
        lock: view(name),
        served_ms: 0,
        locks: None,
        not_held: None,
    })
}

/// A listener on a port of its own, and its address.
async fn listen() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    (listener, addr)
}

/// A fake node's listener, and a transport to it with `options` and an
/// idle close after `idle`.
async fn start(options: &HttpOptions, idle: Duration) -> (TcpListener, FrameTransport) {
    let (listener, addr) = listen().await;
    (listener, transport(&addr, options, idle))
}

/// A transport to `addr`, with short times, an idle close after `idle`.
fn transport(addr: &str, options: &HttpOptions, idle: Duration) -> FrameTransport {
    let mut tuning = Tuning::default();
    tuning.limits.idle = idle;
    tuning.limits.max_in_flight = 2;
    tuning.connect_timeout = SHORT;
    tuning.handshake_timeout = SHORT;
    FrameTransport::with_options([addr], options)
        .unwrap()
        .tuned(tuning)
}

/// One connection a fake node accepted, its preambles exchanged.
struct Peer {
    stream: TcpStream,
    decoder: FrameDecoder<Request>,
}

impl Peer {
    /// The next connection, answered with version 1.
    async fn accept(listener: &TcpListener) -> Peer {
        let (mut stream, _) = tokio::time::timeout(LONG, listener.accept())
            .await
            .expect("a connection")
            .unwrap();
        let mut preamble = [0; wire::PREAMBLE_LEN];
        stream.read_exact(&mut preamble).await.unwrap();
        assert_eq!(wire::read_preamble(&preamble), Ok(Some(wire::SPEAKS)));
        stream.write_all(&wire::preamble(1)).await.unwrap();
        Peer {
            stream,
            decoder: FrameDecoder::new(),
        }
    }

    /// The next request.
    async fn request(&mut self) -> Frame<Request> {
        let mut buf = [0; 4096];
        loop {
            if let Some(frame) = self.decoder.poll().unwrap() {
                return frame;
            }
            let n = tokio::time::timeout(LONG, self.stream.read(&mut buf))
                .await
                .expect("a request")
                .unwrap();
            assert_ne!(n, 0, "the client closed the connection");
            self.decoder.feed(&buf[..n]);
        }
    }

    /// The name a lock request is about.
    async fn renewal(&mut self) -> (u64, String) {
        match self.request().await {
            Frame {
                id,
                message: Request::Renew(body),
            } => (id, body.name),
            other => panic!("not a renewal: {other:?}"),
        }
    }

    /// Answers the next renewal with its lock.
    async fn serve_one(&mut self) {
        let (id, name) = self.renewal().await;
        self.answer(id, &lock_answer(&name)).await;
    }

    async fn answer(&mut self, id: u64, answer: &Answer) {
        let mut bytes = Vec::new();
        wire::encode_frame(id, answer, &mut bytes).unwrap();
        self.stream.write_all(&bytes).await.unwrap();
    }

    /// Whether the client closed the connection within `within`.
    async fn closed_within(&mut self, within: Duration) -> bool {
        let mut buf = [0; 64];
        matches!(
            tokio::time::timeout(within, self.stream.read(&mut buf)).await,
            Ok(Ok(0) | Err(_))
        )
    }
}

/// Calls answered out of order reach the callers that made them, all on
/// one connection.
#[tokio::test]
async fn answers_out_of_order_reach_their_callers() {
    let (listener, client) = start(&HttpOptions::default(), LONG).await;
    let node = tokio::spawn(async move {
        let mut peer = Peer::accept(&listener).await;
        let first = peer.renewal().await;
        let second = peer.renewal().await;
        peer.answer(second.0, &lock_answer(&second.1)).await;
        peer.answer(first.0, &lock_answer(&first.1)).await;
        (listener, peer)
    });
    let (a, b) = tokio::join!(
        client.renew(renew("a"), LONG),
        client.renew(renew("b"), LONG)
    );
    assert_eq!(a.unwrap().name, "a");
    assert_eq!(b.unwrap().name, "b");
    let (listener, _peer) = node.await.unwrap();
    let again = tokio::time::timeout(SHORT, listener.accept()).await;
    assert!(again.is_err(), "a second connection was opened");
}

/// A call that times out gets no answer and leaves the connection to the
/// next call, which is answered on it (its late answer is dropped).
#[tokio::test]
async fn a_timed_out_call_leaves_the_connection_usable() {
    let (listener, client) = start(&HttpOptions::default(), LONG).await;
    let node = tokio::spawn(async move {
        let mut peer = Peer::accept(&listener).await;
        let (late, name) = peer.renewal().await;
        let (next, next_name) = peer.renewal().await;
        peer.answer(late, &lock_answer(&name)).await;
        peer.answer(next, &lock_answer(&next_name)).await;
        (listener, peer)
    });
    let timed_out = client.renew(renew("slow"), SHORT).await;
    assert!(
        matches!(timed_out, Err(CallError::NoAnswer(_))),
        "{timed_out:?}"
    );
    let next = client.renew(renew("next"), LONG).await.unwrap();
    assert_eq!(next.name, "next");
    let (listener, _peer) = node.await.unwrap();
    assert!(tokio::time::timeout(SHORT, listener.accept())
        .await
        .is_err());
}

/// A node that closes in the middle of an answer fails the call with no
/// answer; the next call opens a new connection.
#[tokio::test]
async fn a_connection_cut_mid_frame_fails_its_calls_and_the_next_reconnects() {
    let (listener, client) = start(&HttpOptions::default(), LONG).await;
    let node = tokio::spawn(async move {
        let mut peer = Peer::accept(&listener).await;
        let (id, name) = peer.renewal().await;
        let mut bytes = Vec::new();
        wire::encode_frame(id, &lock_answer(&name), &mut bytes).unwrap();
        peer.stream
            .write_all(&bytes[..bytes.len() / 2])
            .await
            .unwrap();
        drop(peer);
        let mut peer = Peer::accept(&listener).await;
        peer.serve_one().await;
        peer
    });
    let started = std::time::Instant::now();
    let cut = client.renew(renew("cut"), LONG).await;
    assert!(matches!(cut, Err(CallError::NoAnswer(_))), "{cut:?}");
    assert!(
        started.elapsed() < LONG / 2,
        "the call waited for its timeout"
    );
    assert_eq!(
        client.renew(renew("again"), LONG).await.unwrap().name,
        "again"
    );
    node.await.unwrap();
}

/// An HTTP server's answer to a request (head and body) read from
/// `stream`: `json` with status 200, then it closes.
async fn answer_http(stream: &mut TcpStream, json: &str) -> String {
    let mut read = Vec::new();
    let mut buf = [0; 4096];
    let head_end = loop {
        let n = stream.read(&mut buf).await.unwrap();
        assert_ne!(n, 0);
        read.extend_from_slice(&buf[..n]);
        if let Some(at) = read.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
    };
    let head = String::from_utf8_lossy(&read[..head_end]).to_string();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while read.len() < head_end + length {
        let n = stream.read(&mut buf).await.unwrap();
        read.extend_from_slice(&buf[..n]);
    }
    let response = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{json}",
        json.len()
    );
    stream.write_all(response.as_bytes()).await.unwrap();
    head
}

/// An older node answers the preamble `400` as HTTP and closes: the call
/// goes to it over HTTP, and succeeds; so does the next, over HTTP still.
#[tokio::test]
async fn a_node_answering_http_is_called_over_http() {
    let (listener, client) = start(&HttpOptions::default(), LONG).await;
    let node = tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut first = [0; 1];
        stream.read_exact(&mut first).await.unwrap();
        assert_eq!(first[0], 0x89);
        let refusal = "HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
        stream.write_all(refusal.as_bytes()).await.unwrap();
        drop(stream);
        let mut heads = Vec::new();
        for name in ["old", "older"] {
            let json = serde_json::to_string(&LockAnswer {
                lock: view(name),
                served_ms: 0,
                locks: None,
                not_held: None,
            })
            .unwrap();
            let (mut stream, _) = listener.accept().await.unwrap();
            heads.push(answer_http(&mut stream, &json).await);
        }
        heads
    });
    assert_eq!(client.renew(renew("old"), LONG).await.unwrap().name, "old");
    assert_eq!(
        client.renew(renew("older"), LONG).await.unwrap().name,
        "older"
    );
    let heads = node.await.unwrap();
    assert!(
        heads[0].starts_with("POST /v1/locks/renew HTTP/1.1"),
        "{heads:?}"
    );
}

/// Without the fallback, a node that does not serve frames fails the call
/// as not sent.
#[tokio::test]
async fn without_the_fallback_an_http_node_is_not_sent_to() {
    let (listener, addr) = listen().await;
    let client = transport(&addr, &HttpOptions::default(), LONG)
        .without_fallback()
        .unwrap();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut first = [0; 1];
        stream.read_exact(&mut first).await.unwrap();
        let refusal = "HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n";
        stream.write_all(refusal.as_bytes()).await.unwrap();
    });
    let refused = client.renew(renew("x"), LONG).await;
    match refused {
        Err(CallError::NotSent(why)) => assert!(why.contains("400"), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// A node that is not there: not sent.
#[tokio::test]
async fn a_node_not_listening_is_not_sent_to() {
    let (listener, addr) = listen().await;
    drop(listener);
    let client = transport(&addr, &HttpOptions::default(), LONG);
    let refused = client.renew(renew("x"), LONG).await;
    match refused {
        Err(CallError::NotSent(why)) => assert!(why.starts_with("connection refused"), "{why}"),
        other => panic!("{other:?}"),
    }
}

fn with_token(token: &str) -> HttpOptions {
    HttpOptions {
        token: Some(token.into()),
        ..HttpOptions::default()
    }
}

/// The token goes first, in a frame of its own; the calls follow on the
/// same connection without waiting for its answer.
#[tokio::test]
async fn the_token_is_sent_first() {
    let (listener, client) = start(&with_token("secret-1"), LONG).await;
    let node = tokio::spawn(async move {
        let mut peer = Peer::accept(&listener).await;
        let token = peer.request().await;
        assert_eq!(token.message, Request::Token(Token("secret-1".into())));
        let (id, name) = peer.renewal().await;
        peer.answer(token.id, &Answer::Done).await;
        peer.answer(id, &lock_answer(&name)).await;
        peer
    });
    assert_eq!(client.renew(renew("t"), LONG).await.unwrap().name, "t");
    node.await.unwrap();
}

/// A refused token fails the calls on the connection as the node refused
/// it.
#[tokio::test]
async fn a_refused_token_fails_the_calls_unauthorized() {
    let (listener, client) = start(&with_token("wrong"), LONG).await;
    let node = tokio::spawn(async move {
        let mut peer = Peer::accept(&listener).await;
        let token = peer.request().await;
        let _call = peer.renewal().await;
        let refusal = ErrorBody::new(ErrorCode::Unauthorized, "no such token");
        peer.answer(token.id, &Answer::Error(refusal)).await;
        peer
    });
    match client.renew(renew("t"), LONG).await {
        Err(CallError::Api(e)) => {
            assert_eq!(e.error, ErrorCode::Unauthorized);
            assert_eq!(e.message, "no such token");
        }
        other => panic!("{other:?}"),
    }
    node.await.unwrap();
}

/// A connection with no call for the idle time is closed by the client;
/// the next call opens another.
#[tokio::test]
async fn an_idle_connection_is_closed_and_the_next_call_reconnects() {
    let (listener, client) = start(&HttpOptions::default(), SHORT).await;
    let node = tokio::spawn(async move {
        let mut peer = Peer::accept(&listener).await;
        peer.serve_one().await;
        let closed = peer.closed_within(SHORT * 4).await;
        let mut peer = Peer::accept(&listener).await;
        peer.serve_one().await;
        closed
    });
    assert_eq!(client.renew(renew("a"), LONG).await.unwrap().name, "a");
    tokio::time::sleep(SHORT * 5).await;
    assert_eq!(client.renew(renew("b"), LONG).await.unwrap().name, "b");
    assert!(node.await.unwrap(), "the idle connection was not closed");
}

/// A connection busy answering is not idle, however long its calls take.
#[tokio::test]
async fn a_connection_with_a_call_waiting_is_not_idle() {
    let (listener, client) = start(&HttpOptions::default(), SHORT).await;
    let node = tokio::spawn(async move {
        let mut peer = Peer::accept(&listener).await;
        let (id, name) = peer.renewal().await;
        tokio::time::sleep(SHORT * 3).await;
        peer.answer(id, &lock_answer(&name)).await;
        peer
    });
    assert_eq!(
        client.renew(renew("slow"), LONG).await.unwrap().name,
        "slow"
    );
    node.await.unwrap();
}

/// At most the connection's limit of calls are in flight: the next one
/// is sent once one of them is answered.
#[tokio::test]
async fn calls_beyond_the_limit_wait_for_room() {
    let (listener, client) = start(&HttpOptions::default(), LONG).await;
    let node = tokio::spawn(async move {
        let mut peer = Peer::accept(&listener).await;
        let first = peer.renewal().await;
        let second = peer.renewal().await;
        let mut buf = [0; 64];
        let third_early = tokio::time::timeout(SHORT, peer.stream.read(&mut buf)).await;
        assert!(
            third_early.is_err(),
            "a third call was sent with two in flight"
        );
        peer.answer(first.0, &lock_answer(&first.1)).await;
        let third = peer.renewal().await;
        peer.answer(second.0, &lock_answer(&second.1)).await;
        peer.answer(third.0, &lock_answer(&third.1)).await;
        peer
    });
    let (a, b, c) = tokio::join!(
        client.renew(renew("a"), LONG),
        client.renew(renew("b"), LONG),
        client.renew(renew("c"), LONG)
    );
    let mut names = [a.unwrap().name, b.unwrap().name, c.unwrap().name];
    names.sort();
    assert_eq!(names, ["a", "b", "c"]);
    node.await.unwrap();
}

/// An answer of another kind than the request's is no answer.
#[tokio::test]
async fn an_answer_of_the_wrong_kind_is_no_answer() {
    let (listener, client) = start(&HttpOptions::default(), LONG).await;
    let node = tokio::spawn(async move {
        let mut peer = Peer::accept(&listener).await;
        let (id, _) = peer.renewal().await;
        peer.answer(id, &Answer::Done).await;
        peer
    });
    let wrong = client.renew(renew("x"), LONG).await;
    assert!(matches!(wrong, Err(CallError::NoAnswer(_))), "{wrong:?}");
    node.await.unwrap();
}
