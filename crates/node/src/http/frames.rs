//! The binary transport's connections (docs/design.md, "The binary
//! transport: frames"): a connection whose first byte was the preamble's
//! magic is served here, on the node's one port, beside HTTP.
//!
//! The preambles first (the version chosen, or `0` and closed), then the
//! caller's frames are read, decoded ([`FrameDecoder`]) and served, each on
//! a task of its own ([`calls::serve`], as an HTTP request is), so a call
//! that waits holds up none behind it; answers go back in the order they
//! are ready, written by one writer in as few writes as it can.
//!
//! Bounded: at most [`MAX_IN_FLIGHT`] calls are served or waiting to be
//! written at once; at that many, the node stops reading the connection
//! (back-pressure: a client that sends faster than it reads its answers
//! is slowed down, and holds no more of the node's memory). Calls whose
//! answers may be large ([`calls::may_answer_large`]) run one at a time,
//! each answer written before the next is made. A write that
//! makes no progress for the idle timeout closes the connection, as does a
//! connection with nothing in flight that sends no whole frame for that
//! long. A frame over the limit is answered `too_large` and the
//! connection closed once the calls before it are answered; an unknown
//! kind or a body that does not decode is answered `bad_request` and the
//! connection goes on.
//!
//! A member's call ([`Request::Peer`], version 3) is served by the node's
//! own router, as the same request over HTTP would be ([`peer_call`]):
//! its token, stamps and versions are checked by the peer routes, not by
//! the connection's bearer token.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::Router;
use leasehold_api::wire::{
    self, choose, encode_frame, read_preamble, Answer, Frame, FrameDecoder, PeerCall, PeerReply,
    Request, PREAMBLE_LEN,
};
use leasehold_api::{ErrorBody, ErrorCode};
use leasehold_tls::PeerVerified;
use prometheus_client::metrics::gauge::Gauge;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

use super::access::{caller_of_token, Caller};
use super::{calls, Shared};
use crate::error::ApiError;

/// How many calls of one connection are served, or answered and not yet
/// written, at once.
pub(crate) const MAX_IN_FLIGHT: usize = 256;

/// How much is read from the connection at a time.
const READ_BUFFER: usize = 16 << 10;

/// How many bytes of answers the writer gathers into one write.
const WRITE_BATCH: usize = 64 << 10;

/// The most of a batch's memory a connection keeps between writes.
const KEPT_BATCH: usize = 4 * WRITE_BATCH;

/// An answer to write, with the place it held among those in flight.
type Outgoing = (u64, Answer, Place);

/// A call's place among a connection's calls in flight, counted in the
/// node's gauge until its answer is written.
struct Place {
    _permit: OwnedSemaphorePermit,
    _counted: Counted,
    /// For a call whose answer may be large, the connection's one turn
    /// for those: held until the answer is written.
    turn: Option<OwnedSemaphorePermit>,
}

/// One in a gauge's count, taken back when dropped.
struct Counted(Gauge);

impl Counted {
    fn new(gauge: &Gauge) -> Counted {
        gauge.inc();
        Counted(gauge.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// What serves members' calls on a connection: the node's router, and
/// whether the connection's client showed a certificate the CA verified.
pub(super) struct PeerRoutes {
    pub(super) app: Router,
    pub(super) verified: Option<PeerVerified>,
}

/// Serves the binary transport on `io`, whose first byte was the magic's
/// (it is read again from `io`), until the caller closes it, it goes idle,
/// or `stop`.
pub(super) async fn serve_frames<IO>(
    io: IO,
    node: Shared,
    peers: PeerRoutes,
    idle: Duration,
    stop: CancellationToken,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut reader, mut writer) = tokio::io::split(io);
    let mut offered = [0u8; PREAMBLE_LEN];
    // As the first byte's read, the rest of the preamble's ends at stop.
    let read = tokio::select! {
        read = tokio::time::timeout(idle, reader.read_exact(&mut offered)) => read,
        () = stop.cancelled() => return,
    };
    let Ok(Ok(_)) = read else {
        return;
    };
    let Ok(Some(offered)) = read_preamble(&offered) else {
        return;
    };
    let version = match choose(offered, wire::SPEAKS) {
        Ok(version) => version,
        Err(e) => {
            tracing::info!(%e, "a binary transport caller speaks no version of this node's");
            let _ = writer.write_all(&wire::preamble(wire::NONE)).await;
            let _ = writer.shutdown().await;
            return;
        }
    };
    if writer.write_all(&wire::preamble(version)).await.is_err() {
        return;
    }
    let _open = Counted::new(&node.metrics.binary_connections);
    let (answers, outgoing) = mpsc::unbounded_channel();
    let closed = CancellationToken::new();
    let writing = tokio::spawn(write_answers(writer, outgoing, idle, closed.clone()));
    let connection = Connection {
        version,
        caller: caller_of_token(&node, None),
        node,
        peers,
        answers,
        in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        large: Arc::new(Semaphore::new(1)),
        calls: JoinSet::new(),
        idle,
    };
    connection.read_calls(reader, stop, closed).await;
    // Every answer sent is written (or the writer gave up) before the
    // connection closes.
    let _ = writing.await;
}

/// A connection's reading side: who calls, and the calls it serves.
struct Connection {
    node: Shared,
    /// The version chosen: what its answers carry.
    version: wire::Version,
    /// As the last `Token` frame says (none: as HTTP without a token).
    caller: Result<Caller, ApiError>,
    peers: PeerRoutes,
    answers: mpsc::UnboundedSender<Outgoing>,
    in_flight: Arc<Semaphore>,
    /// One call at a time whose answer may be large
    /// ([`calls::may_answer_large`]).
    large: Arc<Semaphore>,
    calls: JoinSet<()>,
    idle: Duration,
}

/// Why a connection stops reading.
enum Ended {
    /// The caller closed it, the writer gave up, or it went idle: the
    /// calls still in flight have no one to answer.
    Gone,
    /// The node stops, or the caller sent what cannot be followed: the
    /// calls in flight are answered first.
    Finish,
}

impl Connection {
    async fn read_calls<IO: AsyncRead>(
        mut self,
        mut reader: ReadHalf<IO>,
        stop: CancellationToken,
        closed: CancellationToken,
    ) {
        let mut decoder = FrameDecoder::<Request>::new();
        let mut buffer = vec![0u8; READ_BUFFER];
        let mut last_frame = Instant::now();
        let ended = 'reading: loop {
            loop {
                while self.calls.try_join_next().is_some() {}
                let polled = decoder.poll();
                if matches!(polled, Ok(None)) {
                    break;
                }
                let Some(permit) = self.place(&closed).await else {
                    break 'reading Ended::Gone;
                };
                last_frame = Instant::now();
                match polled {
                    Ok(Some(frame)) => self.take(frame, permit),
                    Ok(None) => unreachable!("left the loop above"),
                    Err(e) => {
                        if let (Some(id), Some(body)) = (e.id(), e.answer()) {
                            let _ = self.answers.send((id, Answer::Error(body), permit));
                        }
                        if e.is_fatal() {
                            tracing::info!(%e, "a binary transport connection closed");
                            break 'reading Ended::Finish;
                        }
                    }
                }
            }
            // Answers not yet written have the writer's own deadline.
            let deadline = self.calls.is_empty().then(|| last_frame + self.idle);
            let read = tokio::select! {
                read = reader.read(&mut buffer) => read,
                Some(_) = self.calls.join_next(), if !self.calls.is_empty() => {
                    last_frame = Instant::now();
                    continue;
                }
                () = sleep_until(deadline) => break Ended::Gone,
                () = stop.cancelled() => break Ended::Finish,
                () = closed.cancelled() => break Ended::Gone,
            };
            match read {
                Ok(0) => {
                    if let Err(e) = decoder.finish() {
                        tracing::debug!(%e, "a binary transport connection ended");
                    }
                    break Ended::Gone;
                }
                Ok(n) => decoder.feed(&buffer[..n]),
                Err(e) => {
                    tracing::debug!(%e, "a binary transport connection failed");
                    break Ended::Gone;
                }
            }
        };
        match ended {
            Ended::Gone => self.calls.abort_all(),
            Ended::Finish => while self.calls.join_next().await.is_some() {},
        }
    }

    /// A place among the calls in flight, once one is free (none: the
    /// writer gave up).
    async fn place(&self, closed: &CancellationToken) -> Option<Place> {
        let permit = tokio::select! {
            permit = Arc::clone(&self.in_flight).acquire_owned() => permit.ok()?,
            () = closed.cancelled() => return None,
        };
        Some(Place {
            _permit: permit,
            _counted: Counted::new(&self.node.metrics.binary_calls_in_flight),
            turn: None,
        })
    }

    /// Serves one call: the connection's own at once, in order; the API's
    /// on a task.
    fn take(&mut self, frame: Frame<Request>, permit: Place) {
        let Frame { id, message } = frame;
        let caller = match message {
            Request::Ping => {
                let _ = self.answers.send((id, Answer::Done, permit));
                return;
            }
            Request::Peer(call) => return self.take_peer(id, call, permit),
            Request::Token(token) => {
                self.caller = caller_of_token(&self.node, Some(token.0.as_bytes()));
                let answer = match &self.caller {
                    Ok(_) => Answer::Done,
                    Err(e) => Answer::Error((*e.body).clone()),
                };
                let _ = self.answers.send((id, answer, permit));
                return;
            }
            _ => match &self.caller {
                Ok(caller) => caller.clone(),
                Err(e) => {
                    let _ = self
                        .answers
                        .send((id, Answer::Error((*e.body).clone()), permit));
                    return;
                }
            },
        };
        let node = Arc::clone(&self.node);
        let answers = self.answers.clone();
        let version = self.version;
        let large = calls::may_answer_large(&message).then(|| Arc::clone(&self.large));
        let mut permit = permit;
        self.calls.spawn(async move {
            // Large answers one at a time, each written before the next is
            // made: a caller that reads none holds one of them, as an
            // HTTP/1.1 connection does, not one for each place.
            if let Some(large) = large {
                permit.turn = large.acquire_owned().await.ok();
            }
            let started = std::time::Instant::now();
            let route = calls::route(&message);
            let waits = calls::waits(&message);
            // Boxed: `serve`'s future is as large as its largest route's,
            // and a task's future is copied whole as it is spawned and
            // again as it finishes (docs/benchmarks.md, "The call's task").
            let serving = Box::pin(calls::serve(&node, &caller, route, Ok(message)));
            let Some(answer) = serving.await else {
                // `--chaos` lost it: never sent, and its place is free.
                return;
            };
            let status = match &answer {
                Answer::Error(e) => e.http_status(),
                _ => 200,
            };
            node.metrics.observe_request(
                Some(route),
                status,
                started.elapsed().as_secs_f64(),
                waits,
            );
            let _ = answers.send((id, answer.in_version(version), permit));
        });
    }
}

impl Connection {
    /// Serves a member's call on a task, as the node's router serves the
    /// same request over HTTP.
    fn take_peer(&mut self, id: u64, call: PeerCall, permit: Place) {
        if self.version < wire::PEER_CALLS {
            let refused = ErrorBody::new(
                ErrorCode::BadRequest,
                format!(
                    "members' calls need version {} of the binary transport; this connection speaks {}",
                    wire::PEER_CALLS,
                    self.version
                ),
            );
            let _ = self.answers.send((id, Answer::Error(refused), permit));
            return;
        }
        self.node.metrics.binary_peer_calls.inc();
        let app = self.peers.app.clone();
        let verified = self.peers.verified;
        let answers = self.answers.clone();
        self.calls.spawn(async move {
            let answer = Box::pin(peer_call(app, call, verified)).await;
            let _ = answers.send((id, answer, permit));
        });
    }
}

/// `call` served by `app` as its HTTP request would be: only the short
/// peer routes members call over frames
/// ([`leasehold_raft::framed::framed_route`]) are served so. A report, which
/// streams megabytes, and every other route stay HTTP's.
async fn peer_call(app: Router, call: PeerCall, verified: Option<PeerVerified>) -> Answer {
    let bad = |why: String| Answer::Error(ErrorBody::new(ErrorCode::BadRequest, why));
    if !leasehold_raft::framed::framed_route(&call.path) {
        return bad(format!(
            "{:?} is not a route members call over the binary transport",
            call.path
        ));
    }
    let Ok(mut request) = axum::http::Request::post(&call.path).body(Body::from(call.body)) else {
        return bad(format!("a member's call to a bad path {:?}", call.path));
    };
    let Some(headers) = wire::header_map(call.headers) else {
        return bad("a member's call with a bad header".to_string());
    };
    *request.headers_mut() = headers;
    if let Some(verified) = verified {
        request.extensions_mut().insert(verified);
    }
    let Ok(response) = app.oneshot(request).await;
    let (parts, body) = response.into_parts();
    let body = match axum::body::to_bytes(body, wire::MAX_ANSWER_BODY).await {
        Ok(body) => body,
        Err(e) => {
            let failed = format!("a peer route's answer could not be read: {e}");
            return Answer::Error(ErrorBody::new(ErrorCode::Internal, failed));
        }
    };
    Answer::Peer(PeerReply {
        status: parts.status.as_u16(),
        headers: wire::peer_headers(&parts.headers),
        body: body.to_vec(),
    })
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Writes answers as they come, as many as are ready in one write, until
/// every sender is gone; a write that makes no progress for `idle` ends
/// it, and `closed` tells the reader.
async fn write_answers<IO: AsyncWrite>(
    mut writer: WriteHalf<IO>,
    mut outgoing: mpsc::UnboundedReceiver<Outgoing>,
    idle: Duration,
    closed: CancellationToken,
) {
    let _closed = closed.drop_guard();
    let mut batch = Vec::with_capacity(WRITE_BATCH);
    let mut places = Vec::new();
    while let Some(first) = outgoing.recv().await {
        batch.clear();
        let mut next = Some(first);
        while let Some((id, answer, permit)) = next.take() {
            encode(id, &answer, &mut batch);
            places.push(permit);
            if batch.len() < WRITE_BATCH {
                next = outgoing.try_recv().ok();
            }
        }
        if !write_progressing(&mut writer, &batch, idle).await {
            return;
        }
        places.clear();
        // An answer of megabytes leaves the batch that large: not kept for
        // the connection's life (a caller that once listed thousands of
        // locks, then only pings, would hold that much of the node's
        // memory per connection).
        if batch.capacity() > KEPT_BATCH {
            batch = Vec::with_capacity(WRITE_BATCH);
        }
    }
    let _ = writer.shutdown().await;
}

/// Writes all of `bytes`, each write given `idle` to make progress (not
/// the whole: an answer of megabytes to a caller that reads it steadily
/// takes as long as it reads); false if one made none, or failed.
async fn write_progressing<IO: AsyncWrite>(
    writer: &mut WriteHalf<IO>,
    mut bytes: &[u8],
    idle: Duration,
) -> bool {
    while !bytes.is_empty() {
        match tokio::time::timeout(idle, writer.write(bytes)).await {
            Ok(Ok(0)) => {
                tracing::debug!("a binary transport connection takes no more bytes");
                return false;
            }
            Ok(Ok(n)) => bytes = &bytes[n..],
            Ok(Err(e)) => {
                tracing::debug!(%e, "a binary transport connection failed");
                return false;
            }
            Err(_) => {
                tracing::info!(
                    "a binary transport caller read no answer for the idle timeout: closed"
                );
                return false;
            }
        }
    }
    true
}

/// `answer` as a frame, or in its place `too_large` if it is over the
/// answers' limit.
fn encode(id: u64, answer: &Answer, out: &mut Vec<u8>) {
    if let Err(e) = encode_frame(id, answer, out) {
        let refused = Answer::Error(ErrorBody::new(ErrorCode::TooLarge, e.to_string()));
        if let Err(e) = encode_frame(id, &refused, out) {
            tracing::error!(%e, "an error answer could not be written");
        }
    }
}
