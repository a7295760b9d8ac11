//! One member's connection for members' calls: opened with the preambles,
//! written by each caller in turn (a write cut short by a caller that gave
//! up is finished by the next), read by one task that hands each answer to
//! the call waiting for it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http::StatusCode;
use leasehold_api::wire::{self, encode_frame, Answer, FrameDecoder, PeerCall, PeerReply, Request};
use leasehold_tls::{PeerStream, Tls};
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::PING_EVERY;
use crate::http1::IDLE_KEPT;
use crate::transport::{PeerRequest, PeerResponse, TransportError};

/// The request id of pings; calls count from 1.
const PING_ID: u64 = 0;
/// How much is read from the connection at a time.
const READ_BUFFER: usize = 16 << 10;
/// How long a closing connection's last bytes may take to go.
const SHUTDOWN_FOR: std::time::Duration = std::time::Duration::from_secs(1);

/// Why no connection was opened.
#[derive(Debug, thiserror::Error)]
pub(super) enum OpenError {
    /// No connection, or it failed before the member chose a version.
    #[error("{0}")]
    Failed(String),
    /// The member answered, and speaks no version with members' calls.
    #[error("{0}")]
    NoFrames(String),
}

/// What came of a call.
pub(super) enum Sent {
    /// The member's answer, or why there is none.
    Answered(Result<PeerResponse, TransportError>),
    /// The connection had closed: nothing was written, and here is the
    /// request back.
    Unsent(PeerRequest),
}

/// An open connection.
pub(super) struct Link {
    writer: tokio::sync::Mutex<Writer>,
    /// Taken by [`Link::run`].
    reader: Mutex<Option<ReadHalf<PeerStream>>>,
    calls: Mutex<Calls>,
    next_id: AtomicU64,
    /// Frames read, of any kind: a member that answers anything is alive.
    frames_read: AtomicU64,
    /// When a call was last made.
    last_call: Mutex<Instant>,
    /// The TLS reload it was made under (0 without TLS).
    generation: u64,
    closed: CancellationToken,
    /// Closed because no one called for a while.
    unused: AtomicBool,
    /// Made before a TLS reload: takes no more calls, and closes once none
    /// waits.
    retiring: AtomicBool,
}

/// The calls waiting for their answers.
#[derive(Default)]
struct Calls {
    waiting: HashMap<u64, oneshot::Sender<Result<PeerReply, TransportError>>>,
    closed: bool,
}

/// The connection's writing half, and the frame being written: one a
/// caller gave up on in the middle is finished before the next, so the
/// stream stays whole.
struct Writer {
    io: WriteHalf<PeerStream>,
    bytes: Vec<u8>,
    written: usize,
}

impl Writer {
    async fn finish(&mut self) -> std::io::Result<()> {
        while self.written < self.bytes.len() {
            match self.io.write(&self.bytes[self.written..]).await? {
                0 => return Err(std::io::ErrorKind::WriteZero.into()),
                n => self.written += n,
            }
        }
        self.io.flush().await
    }
}

/// Opens a connection to `addr`: TCP (`TCP_NODELAY`), TLS over it if
/// given, and the preambles, in which the member must choose a version with
/// members' calls.
pub(super) async fn open(
    addr: &str,
    tls: Option<&Tls>,
    generation: u64,
) -> Result<Arc<Link>, OpenError> {
    let failed = |e: std::io::Error| OpenError::Failed(format!("{addr}: {e}"));
    let tcp = TcpStream::connect(addr).await.map_err(failed)?;
    tcp.set_nodelay(true).map_err(failed)?;
    let mut stream = match tls {
        Some(tls) => PeerStream::Tls(Box::new(
            tls.connect_frames(addr, tcp).await.map_err(failed)?,
        )),
        None => PeerStream::Plain(tcp),
    };
    stream
        .write_all(&wire::preamble(wire::SPEAKS))
        .await
        .map_err(failed)?;
    stream.flush().await.map_err(failed)?;
    // An older build's HTTP server answers the preamble `400`: longer than
    // a preamble, and not one.
    let mut chosen = [0u8; wire::PREAMBLE_LEN];
    stream.read_exact(&mut chosen).await.map_err(failed)?;
    let no_frames = |why: String| OpenError::NoFrames(format!("{addr}: {why}"));
    let chosen = match wire::read_preamble(&chosen) {
        Ok(Some(version)) => version,
        Ok(None) => unreachable!("a whole preamble was read"),
        Err(e) => return Err(no_frames(e.to_string())),
    };
    let version = wire::accept(wire::SPEAKS, chosen).map_err(|e| no_frames(e.to_string()))?;
    if version < wire::PEER_CALLS {
        return Err(no_frames(format!(
            "speaks version {version} of the binary transport, without members' calls"
        )));
    }
    let (reader, writer) = tokio::io::split(stream);
    Ok(Arc::new(Link {
        writer: tokio::sync::Mutex::new(Writer {
            io: writer,
            bytes: Vec::new(),
            written: 0,
        }),
        reader: Mutex::new(Some(reader)),
        calls: Mutex::default(),
        next_id: AtomicU64::new(PING_ID + 1),
        frames_read: AtomicU64::new(0),
        last_call: Mutex::new(Instant::now()),
        generation,
        closed: CancellationToken::new(),
        unused: AtomicBool::new(false),
        retiring: AtomicBool::new(false),
    }))
}

/// What came of a write.
enum Written {
    /// The frame went, whole.
    Whole,
    /// The connection closed before any of it went.
    Closed,
}

/// Takes the waiting call's entry out when the call ends, however it ends.
struct Waiting<'a> {
    link: &'a Link,
    id: u64,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let empty = {
            let mut calls = self.link.calls();
            calls.waiting.remove(&self.id);
            calls.waiting.is_empty()
        };
        self.link.close_if_retired(empty);
    }
}

impl Link {
    fn calls(&self) -> MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The TLS reload it was made under.
    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    /// Whether it has closed.
    pub(super) fn is_closed(&self) -> bool {
        self.closed.is_cancelled()
    }

    /// Whether it closed because no one called for a while.
    pub(super) fn closed_unused(&self) -> bool {
        self.unused.load(Ordering::Relaxed)
    }

    /// Takes no more calls (a TLS reload: the next ones go on a new
    /// connection), and closes once none waits: the calls in flight are
    /// answered on it, as over HTTP.
    pub(super) fn retire(&self) {
        self.retiring.store(true, Ordering::Release);
        let empty = self.calls().waiting.is_empty();
        self.close_if_retired(empty);
    }

    /// Closes it if it is retired and no call waits (`empty`).
    fn close_if_retired(&self, empty: bool) {
        if empty && self.retiring.load(Ordering::Acquire) {
            self.close();
        }
    }

    /// Closes it: every call waiting is answered that it closed.
    pub(super) fn close(&self) {
        self.closed.cancel();
        let waiting = {
            let mut calls = self.calls();
            calls.closed = true;
            std::mem::take(&mut calls.waiting)
        };
        for (_, call) in waiting {
            let _ = call.send(Err(TransportError::Other(
                "the connection to the member closed before its answer came".into(),
            )));
        }
    }

    /// Sends `request` and waits for its answer, all within its timeout.
    pub(super) async fn call(&self, request: PeerRequest) -> Sent {
        let deadline = Instant::now() + request.timeout;
        *self.last_call.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        {
            let mut calls = self.calls();
            if calls.closed {
                return Sent::Unsent(request);
            }
            calls.waiting.insert(id, tx);
        }
        let _waiting = Waiting { link: self, id };
        let mut frame = Vec::new();
        if encode_frame(id, &Request::Peer(peer_call(&request)), &mut frame).is_err() {
            // Over a frame's limit: HTTP takes it.
            return Sent::Unsent(request);
        }
        let read_before = self.frames_read.load(Ordering::Acquire);
        match tokio::time::timeout_at(deadline, self.write(&frame)).await {
            Ok(Ok(Written::Whole)) => {}
            Ok(Ok(Written::Closed)) => return Sent::Unsent(request),
            Ok(Err(e)) => {
                self.close();
                return Sent::Answered(Err(TransportError::Other(e.to_string())));
            }
            Err(_) => {
                // A write stalled for the whole timeout: the member reads
                // nothing.
                self.close();
                return Sent::Answered(Err(TransportError::Timeout));
            }
        }
        let answer = match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(_)) => Err(TransportError::Other(
                "the connection to the member closed before its answer came".into(),
            )),
            Err(_) => {
                // Nothing at all came since the call went: the member or
                // the link has stalled. A new connection is tried later.
                if self.frames_read.load(Ordering::Acquire) == read_before {
                    self.close();
                }
                Err(TransportError::Timeout)
            }
        };
        Sent::Answered(answer.and_then(response))
    }

    /// Writes `frame` whole, after what a caller before left unwritten;
    /// if the connection closes before its first byte goes, not at all.
    async fn write(&self, frame: &[u8]) -> std::io::Result<Written> {
        let mut writer = tokio::select! {
            biased;
            () = self.closed.cancelled() => return Ok(Written::Closed),
            writer = async {
                let mut writer = self.writer.lock().await;
                writer.finish().await.map(|()| writer)
            } => writer?,
        };
        if self.closed.is_cancelled() {
            return Ok(Written::Closed);
        }
        writer.bytes.clear();
        writer.written = 0;
        writer.bytes.extend_from_slice(frame);
        writer.finish().await.map(|()| Written::Whole)
    }

    /// Reads answers and hands each to its call, and pings while the
    /// connection is used, until it closes.
    pub(super) async fn run(self: &Arc<Self>) {
        let reader = self.reader.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(mut reader) = reader else {
            return;
        };
        let mut decoder = FrameDecoder::<Answer>::new();
        let mut buffer = vec![0u8; READ_BUFFER];
        let mut ping = tokio::time::interval_at(Instant::now() + PING_EVERY, PING_EVERY);
        let mut ping_frame = Vec::new();
        encode_frame(PING_ID, &Request::Ping, &mut ping_frame).expect("a ping fits a frame");
        let why = 'reading: loop {
            tokio::select! {
                read = reader.read(&mut buffer) => match read {
                    Ok(0) => break "the member closed it".to_string(),
                    Ok(n) => {
                        decoder.feed(&buffer[..n]);
                        loop {
                            match decoder.poll() {
                                Ok(Some(frame)) => self.answer(frame.id, frame.message),
                                Ok(None) => break,
                                Err(e) if e.is_fatal() => break 'reading e.to_string(),
                                Err(e) => {
                                    self.frames_read.fetch_add(1, Ordering::Release);
                                    let failed = Err(TransportError::Other(e.to_string()));
                                    self.hand(e.id().unwrap_or(PING_ID), failed);
                                }
                            }
                        }
                    }
                    Err(e) => break e.to_string(),
                },
                _ = ping.tick() => {
                    let last = *self.last_call.lock().unwrap_or_else(|p| p.into_inner());
                    if last.elapsed() >= IDLE_KEPT && self.calls().waiting.is_empty() {
                        self.unused.store(true, Ordering::Relaxed);
                        break "no call for a while".to_string();
                    }
                    // Written apart: reading goes on while a write waits.
                    let link = Arc::clone(self);
                    let ping_frame = ping_frame.clone();
                    tokio::spawn(async move {
                        let pinged = tokio::time::timeout(PING_EVERY, link.write(&ping_frame));
                        if !matches!(pinged.await, Ok(Ok(_))) {
                            tracing::debug!("a ping could not be written: closing");
                            link.close();
                        }
                    });
                }
                () = self.closed.cancelled() => break "closed".to_string(),
            }
        };
        tracing::debug!(%why, "a connection for members' calls closed");
        self.close();
        // A member that reads nothing (paused, cut off) must not hold the
        // close: it is given a moment, then the connection is dropped.
        let shutdown = async {
            let mut writer = self.writer.lock().await;
            let _ = writer.io.shutdown().await;
        };
        let _ = tokio::time::timeout(SHUTDOWN_FOR, shutdown).await;
    }

    /// Hands the answer of call `id` to it.
    fn answer(&self, id: u64, answer: Answer) {
        self.frames_read.fetch_add(1, Ordering::Release);
        let answer = match answer {
            Answer::Peer(reply) => Ok(reply),
            Answer::Done if id == PING_ID => return,
            Answer::Error(e) => Err(TransportError::Other(format!(
                "the member refused the call: {}: {}",
                e.error, e.message
            ))),
            _ => Err(TransportError::Other(
                "the member answered a call with another kind of answer".into(),
            )),
        };
        self.hand(id, answer);
    }

    fn hand(&self, id: u64, answer: Result<PeerReply, TransportError>) {
        let (call, empty) = {
            let mut calls = self.calls();
            (calls.waiting.remove(&id), calls.waiting.is_empty())
        };
        if let Some(call) = call {
            let _ = call.send(answer);
        }
        self.close_if_retired(empty);
    }
}

/// `request` as a frame carries it (a copy: the request is kept, to go
/// over HTTP if the frame cannot).
fn peer_call(request: &PeerRequest) -> PeerCall {
    PeerCall {
        path: request.path.clone(),
        headers: wire::peer_headers(&request.headers),
        body: request.body.clone(),
    }
}

/// The answer a frame carried, as HTTP would have given it.
fn response(reply: PeerReply) -> Result<PeerResponse, TransportError> {
    let bad = |what: &str| TransportError::Other(format!("the member's answer has {what}"));
    let status = StatusCode::from_u16(reply.status).map_err(|_| bad("no valid status"))?;
    let headers = wire::header_map(reply.headers).ok_or_else(|| bad("a bad header"))?;
    Ok(PeerResponse {
        status,
        headers,
        body: Bytes::from(reply.body),
    })
}
