//! [`FramedTransport`] against a fake member on loopback: one that answers
//! members' calls over frames (after a delay, or never reading them) and
//! every HTTP request `200 http`, so a test can tell which way a call went.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::{HeaderMap, StatusCode};
use leasehold_api::wire::{self, Answer, FrameDecoder, PeerReply, Request};
use leasehold_raft::{FramedTransport, PeerRequest, Transport, TransportError};
use leasehold_tls::{Tls, TlsFiles};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// How the fake member treats a connection of the binary transport.
#[derive(Clone, Copy)]
enum Frames {
    /// Answers each member's call `200 frames` after this long.
    AnswerAfter(Duration),
    /// Answers the preamble, then never reads again (a member whose
    /// connection is stuck: its frames are not read).
    Stall,
}

/// A fake member on loopback; answers HTTP `200 http` on any connection
/// that does not open with the preamble.
async fn fake_member(frames: Frames, tls: Option<Arc<Tls>>) -> String {
    fake_member_counted(frames, tls).await.0
}

/// [`fake_member`], and how many of its connections are open.
async fn fake_member_counted(frames: Frames, tls: Option<Arc<Tls>>) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let open = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&open);
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let tls = tls.clone();
            let open = Arc::clone(&counted);
            tokio::spawn(async move {
                open.fetch_add(1, Ordering::SeqCst);
                match tls {
                    None => serve(tcp, frames).await,
                    Some(tls) => {
                        if let Ok((stream, _)) = tls.accept(tcp).await {
                            serve(stream, frames).await;
                        }
                    }
                }
                open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (addr, open)
}

async fn serve<IO: AsyncRead + AsyncWrite + Unpin + Send + 'static>(mut io: IO, frames: Frames) {
    let Ok(first) = io.read_u8().await else {
        return;
    };
    if first != wire::MAGIC[0] {
        return serve_http(io, first).await;
    }
    let mut rest = [0u8; wire::PREAMBLE_LEN - 1];
    if io.read_exact(&mut rest).await.is_err() {
        return;
    }
    io.write_all(&wire::preamble(wire::SPEAKS)).await.unwrap();
    io.flush().await.unwrap();
    let delay = match frames {
        Frames::Stall => {
            // Holds the connection open, and reads none of it.
            tokio::time::sleep(Duration::from_secs(3600)).await;
            drop(io);
            return;
        }
        Frames::AnswerAfter(delay) => delay,
    };
    let (mut reader, mut writer) = tokio::io::split(io);
    let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
    tokio::spawn(async move {
        while let Some(frame) = rx.recv().await {
            if writer.write_all(&frame).await.is_err() || writer.flush().await.is_err() {
                return;
            }
        }
    });
    let mut decoder = FrameDecoder::<Request>::new();
    let mut buffer = vec![0u8; 64 << 10];
    loop {
        let n = match reader.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        decoder.feed(&buffer[..n]);
        while let Ok(Some(frame)) = decoder.poll() {
            let tx = tx.clone();
            tokio::spawn(async move {
                let answer = match frame.message {
                    Request::Ping => Answer::Done,
                    Request::Peer(_) => {
                        tokio::time::sleep(delay).await;
                        Answer::Peer(PeerReply {
                            status: 200,
                            headers: Vec::new(),
                            body: b"frames".to_vec(),
                        })
                    }
                    _ => return,
                };
                let mut out = Vec::new();
                wire::encode_frame(frame.id, &answer, &mut out).unwrap();
                let _ = tx.send(out);
            });
        }
    }
}

/// Answers every request on `io` (whose first byte was `first`) `200 http`.
async fn serve_http<IO: AsyncRead + AsyncWrite + Unpin>(mut io: IO, first: u8) {
    let mut seen = vec![first];
    let mut buffer = [0u8; 64 << 10];
    loop {
        // A head, then its body (content-length).
        let head_end = loop {
            if let Some(at) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            match io.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buffer[..n]),
            }
        };
        let head = String::from_utf8_lossy(&seen[..head_end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().unwrap());
        while seen.len() < head_end + len {
            match io.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(n) => seen.extend_from_slice(&buffer[..n]),
            }
        }
        seen.drain(..head_end + len);
        let answer = b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nhttp";
        if io.write_all(answer).await.is_err() || io.flush().await.is_err() {
            return;
        }
    }
}

/// A copy (a route that goes over frames) to `addr`.
fn copy(addr: &str, body: Vec<u8>, timeout: Duration) -> PeerRequest {
    PeerRequest {
        addr: addr.to_string(),
        path: leasehold_api::routes::COPIES.to_string(),
        headers: HeaderMap::new(),
        body,
        timeout,
    }
}

/// Calls `addr` (over HTTP meanwhile) until its connection for members'
/// calls is open.
async fn until_open(transport: &FramedTransport, addr: &str) {
    let start = Instant::now();
    while transport.open_links() == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no connection opened"
        );
        let answer = transport
            .send(copy(addr, Vec::new(), Duration::from_secs(5)))
            .await
            .unwrap();
        assert_eq!(answer.status, StatusCode::OK);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn body(answer: &Result<leasehold_raft::PeerResponse, TransportError>) -> String {
    match answer {
        Ok(answer) => String::from_utf8_lossy(&answer.body).into_owned(),
        Err(e) => format!("error: {e}"),
    }
}

/// docs/design.md: "A call whose frame was never written (its connection
/// had closed) goes over HTTP at once." Calls queued behind a write that
/// stalled are not released when the stalled call's timeout closes the
/// connection: each waits out its own timeout, finishing the dead
/// connection's frames.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_queued_behind_a_stalled_write_goes_over_http_once_the_connection_closes() {
    let addr = fake_member(Frames::Stall, None).await;
    let transport = Arc::new(FramedTransport::new());
    until_open(&transport, &addr).await;

    // Enough bytes that the writes stall: the member reads none of them.
    let mut fillers = Vec::new();
    for _ in 0..128 {
        let transport = Arc::clone(&transport);
        let request = copy(&addr, vec![7; 60 << 10], Duration::from_secs(1));
        fillers.push(tokio::spawn(async move { transport.send(request).await }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = Instant::now();
    let queued = transport
        .send(copy(&addr, Vec::new(), Duration::from_secs(8)))
        .await;
    let took = started.elapsed();
    for filler in fillers {
        let _ = filler.await;
    }
    assert!(
        queued.is_ok() && took < Duration::from_secs(3),
        "a call whose frame was never written, on a connection closed at 1 s: \
         {} after {took:?}",
        body(&queued)
    );
}

/// A TLS reload (SIGHUP) makes new connections use the new files; over
/// HTTP a request in flight is answered on its connection (`Tls::reload`:
/// "closed ... when next taken from the pool"). Over frames, the next call
/// after a reload closes the connection under the calls in flight, and
/// they fail.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_is_answered_through_a_tls_reload() {
    let certs = tempfile::tempdir().unwrap();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/make-certs");
    let made = std::process::Command::new("bash")
        .arg(script)
        .arg(certs.path())
        .args(["node-1", "node-2"])
        .status()
        .unwrap();
    assert!(made.success());
    let tls = |name: &str| {
        Arc::new(
            Tls::load(TlsFiles {
                cert: certs.path().join(format!("{name}.pem")),
                key: certs.path().join(format!("{name}-key.pem")),
                ca: Some(certs.path().join("ca.pem")),
            })
            .unwrap(),
        )
    };
    let addr = fake_member(
        Frames::AnswerAfter(Duration::from_millis(500)),
        Some(tls("node-2")),
    )
    .await;
    let ours = tls("node-1");
    let transport = Arc::new(FramedTransport::with_tls(Arc::clone(&ours)));
    until_open(&transport, &addr).await;

    let in_flight = {
        let transport = Arc::clone(&transport);
        let request = copy(&addr, b"{}".to_vec(), Duration::from_secs(5));
        tokio::spawn(async move { transport.send(request).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    ours.reload().unwrap();
    let next = transport
        .send(copy(&addr, b"{}".to_vec(), Duration::from_secs(5)))
        .await;
    assert_eq!(
        body(&next),
        "http",
        "the next call waits for a new connection"
    );
    let in_flight = in_flight.await.unwrap();
    assert_eq!(
        body(&in_flight),
        "frames",
        "a call written before the reload, answered 400 ms later"
    );
}

/// A node's transport dropped (the node stopped, in a process that goes
/// on) closes its connections at once, not once they have gone unused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transport_dropped_closes_its_connections() {
    let (addr, open) = fake_member_counted(Frames::AnswerAfter(Duration::ZERO), None).await;
    let transport = FramedTransport::new();
    until_open(&transport, &addr).await;
    assert_eq!(
        body(
            &transport
                .send(copy(&addr, Vec::new(), Duration::from_secs(5)))
                .await
        ),
        "frames"
    );
    drop(transport);
    let start = Instant::now();
    while open.load(Ordering::SeqCst) > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{} connection(s) still open after the transport was dropped",
            open.load(Ordering::SeqCst)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
