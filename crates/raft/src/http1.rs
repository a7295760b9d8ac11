//! The production [`Transport`]: HTTP/1.1 over TCP, each connection
//! driven by the task that sends on it.
//!
//! A pooled HTTP client usually gives each connection a task of its own,
//! so every request crosses two task hand-offs (to the connection's task
//! and back) before and after the wire. On a node whose grants wait for a
//! peer's answer (copies), each hand-off waits its turn behind every other
//! task on a loaded runtime; here the caller polls the connection itself
//! while it waits for the answer, and puts the connection back in the pool
//! once the answer is read. Measured in docs/benchmarks.md.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt, TryStreamExt};
use http::header::HOST;
use http::{HeaderValue, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, Connection, SendRequest};
use hyper_util::rt::TokioIo;
use leasehold_tls::{PeerStream, Tls};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::transport::{PeerRequest, PeerResponse, StreamedResponse, Transport, TransportError};

/// The most idle connections kept per member.
const IDLE_PER_ADDR: usize = 16;
/// How long an idle connection is kept: what a client of a node keeps one
/// (`leasehold_api::IDLE_KEPT`, asserted by the node), well under the 30 s
/// a member keeps one open without a request, so none is used as the
/// member closes it.
pub const IDLE_KEPT: Duration = Duration::from_secs(20);
/// How often the pool closes connections idle for longer.
const SWEEP_EVERY: Duration = Duration::from_secs(10);

type Conn = Pin<Box<Connection<TokioIo<PeerStream>, Full<Bytes>>>>;

/// One open connection: the half that sends and the half that must be
/// polled for anything to move.
struct Open {
    sender: SendRequest<Full<Bytes>>,
    /// `None` once it has ended.
    conn: Option<Conn>,
    /// When it was last put back in the pool (or made).
    idle_since: Instant,
    /// The TLS reload it was made under (0 without TLS): one made before
    /// a later reload is not used again.
    generation: u64,
}

impl Open {
    /// Whether the connection has ended: polling it once reads a close the
    /// member sent, or the end of an answer, since it was last polled.
    fn has_ended(&mut self) -> bool {
        match self.conn.as_mut() {
            Some(conn) => conn.now_or_never().is_some(),
            None => true,
        }
    }
}

/// HTTP/1.1 over TCP (`TCP_NODELAY`), or over TLS on it, idle connections
/// pooled per member and each driven by whichever request uses it.
#[derive(Default)]
pub struct Http1Transport {
    pool: Arc<Pool>,
}

impl std::fmt::Debug for Http1Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http1Transport").finish_non_exhaustive()
    }
}

/// Idle connections by member address, and how new ones are made.
#[derive(Default)]
struct Pool {
    idle: Mutex<Idle>,
    /// TLS for new connections, if the node speaks it.
    tls: Option<Arc<Tls>>,
}

#[derive(Default)]
struct Idle {
    by_addr: HashMap<String, Vec<Open>>,
    /// When connections idle too long were last closed.
    swept: Option<Instant>,
}

impl Pool {
    /// An idle connection to `addr` that is still open (and `true`), or a
    /// new one.
    async fn checkout(&self, addr: &str) -> Result<(Open, bool), TransportError> {
        loop {
            let idle = self.lock().by_addr.get_mut(addr).and_then(Vec::pop);
            let Some(mut open) = idle else { break };
            // One the member closed while it sat in the pool is dropped,
            // and so is one made under TLS files since reloaded.
            if open.idle_since.elapsed() > IDLE_KEPT
                || open.generation != self.generation()
                || open.has_ended()
            {
                continue;
            }
            let ready = drive(&mut open.conn, open.sender.ready()).await;
            if ready.is_ok() && open.conn.is_some() {
                return Ok((open, true));
            }
        }
        Ok((self.connect(addr).await?, false))
    }

    /// Keeps `open` for the next request to `addr`, if it can take one.
    fn checkin(&self, addr: String, mut open: Open) {
        // The connection learns that its answer is over only when it is
        // polled once more; one the member closed is not kept.
        if open.has_ended() || open.sender.is_closed() || open.generation != self.generation() {
            return;
        }
        let now = Instant::now();
        open.idle_since = now;
        let mut idle = self.lock();
        // Connections to a member no request went to for a while (one
        // that left the cluster, say) are closed here, now and then.
        if idle.swept.is_none_or(|at| now - at >= SWEEP_EVERY) {
            idle.swept = Some(now);
            idle.by_addr.retain(|_, conns| {
                conns.retain(|c| now - c.idle_since <= IDLE_KEPT);
                !conns.is_empty()
            });
        }
        let conns = idle.by_addr.entry(addr).or_default();
        if conns.len() < IDLE_PER_ADDR {
            conns.push(open);
        }
    }

    /// How many times the TLS files were reloaded (0 without TLS).
    fn generation(&self) -> u64 {
        self.tls.as_ref().map_or(0, |tls| tls.generation())
    }

    /// A new connection to `addr`, over TLS if the node speaks it.
    async fn connect(&self, addr: &str) -> Result<Open, TransportError> {
        let generation = self.generation();
        let failed = |e: std::io::Error| TransportError::Connect(format!("{addr}: {e}"));
        let tcp = TcpStream::connect(addr).await.map_err(failed)?;
        tcp.set_nodelay(true).map_err(failed)?;
        let stream = match &self.tls {
            Some(tls) => PeerStream::Tls(Box::new(tls.connect(addr, tcp).await.map_err(failed)?)),
            None => PeerStream::Plain(tcp),
        };
        let (sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| TransportError::Connect(format!("{addr}: {e}")))?;
        Ok(Open {
            sender,
            conn: Some(Box::pin(conn)),
            idle_since: Instant::now(),
            generation,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Idle> {
        // The pool is plain data: a panic elsewhere leaves it usable.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Http1Transport {
    /// A transport with an empty pool, over plain TCP.
    pub fn new() -> Self {
        Self::default()
    }

    /// A transport with an empty pool, over TLS with `tls`'s client
    /// configuration as it is when each connection is made (a reload
    /// applies to new connections).
    pub fn with_tls(tls: Arc<Tls>) -> Self {
        Http1Transport {
            pool: Arc::new(Pool {
                idle: Mutex::default(),
                tls: Some(tls),
            }),
        }
    }

    /// Sends `request` on a pooled connection and answers once the head
    /// has come; the body, read from the answer, drives the connection and
    /// gives it back to the pool at its end. All of it by `deadline`.
    async fn start(
        &self,
        request: PeerRequest,
        deadline: Instant,
    ) -> Result<StreamedResponse, TransportError> {
        let addr = request.addr.clone();
        let head = async {
            let (mut open, reused) = self.pool.checkout(&addr).await?;
            let sent = open.sender.try_send_request(post(request)?);
            match drive_raw(&mut open.conn, sent).await {
                Ok(response) => Ok((open, response)),
                // A pooled connection the member closed just before it was
                // used takes no request: none of it was written, so it goes
                // on a new connection.
                Err(mut unsent) if reused && unsent.message().is_some() => {
                    let request = unsent.take_message().expect("checked");
                    let mut open = self.pool.connect(&addr).await?;
                    let sent = open.sender.send_request(request);
                    let response = drive(&mut open.conn, sent).await?;
                    Ok((open, response))
                }
                Err(failed) => Err(other(failed.into_error())),
            }
        };
        let (open, response) = tokio::time::timeout_at(deadline, head)
            .await
            .unwrap_or(Err(TransportError::Timeout))?;
        let (parts, body) = response.into_parts();
        let reading = Reading {
            body,
            open,
            addr,
            pool: Arc::clone(&self.pool),
        };
        let body = futures::stream::try_unfold(Some(reading), move |reading| async move {
            let Some(mut reading) = reading else {
                return Ok(None);
            };
            let piece = tokio::time::timeout_at(deadline, reading.next_piece())
                .await
                .map_err(|_| TransportError::Timeout)??;
            match piece {
                Some(piece) => Ok(Some((piece, Some(reading)))),
                None => {
                    reading.pool.checkin(reading.addr, reading.open);
                    Ok(None)
                }
            }
        });
        Ok(StreamedResponse {
            status: parts.status,
            headers: parts.headers,
            body: body.boxed(),
        })
    }
}

/// An answer's body being read, with the connection it comes on.
struct Reading {
    body: Incoming,
    open: Open,
    addr: String,
    pool: Arc<Pool>,
}

impl Reading {
    /// The next piece of the body's data, or `None` at its end.
    async fn next_piece(&mut self) -> Result<Option<Bytes>, TransportError> {
        loop {
            match drive(
                &mut self.open.conn,
                self.body.frame().map(Option::transpose),
            )
            .await?
            {
                None => return Ok(None),
                Some(frame) => {
                    if let Ok(data) = frame.into_data() {
                        return Ok(Some(data));
                    }
                }
            }
        }
    }
}

impl Transport for Http1Transport {
    fn send(&self, request: PeerRequest) -> BoxFuture<'_, Result<PeerResponse, TransportError>> {
        async move {
            let response = self.send_streamed(request).await?;
            let pieces: Vec<Bytes> = response.body.try_collect().await?;
            Ok(PeerResponse {
                status: response.status,
                headers: response.headers,
                body: pieces.concat().into(),
            })
        }
        .boxed()
    }

    fn send_streamed(
        &self,
        request: PeerRequest,
    ) -> BoxFuture<'_, Result<StreamedResponse, TransportError>> {
        let deadline = Instant::now() + request.timeout;
        self.start(request, deadline).boxed()
    }
}

/// `request` as a POST with its `Host`.
fn post(request: PeerRequest) -> Result<Request<Full<Bytes>>, TransportError> {
    let mut post = Request::builder()
        .method(Method::POST)
        .uri(&request.path)
        .body(Full::new(Bytes::from(request.body)))
        .map_err(|e| TransportError::Other(e.to_string()))?;
    *post.headers_mut() = request.headers;
    if let Ok(host) = HeaderValue::from_str(&request.addr) {
        post.headers_mut().insert(HOST, host);
    }
    Ok(post)
}

/// Waits for `work` while polling the connection `conn`, which moves its
/// bytes (`None` once it has ended). A connection that ends first may still
/// have read enough for `work` (a member that answers and closes); `work`
/// fails if not.
async fn drive<T, E>(
    conn: &mut Option<Conn>,
    work: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, TransportError>
where
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    drive_raw(conn, work).await.map_err(other)
}

/// [`drive`], answering what `work` does.
async fn drive_raw<O>(conn: &mut Option<Conn>, work: impl std::future::Future<Output = O>) -> O {
    tokio::pin!(work);
    if let Some(open) = conn.as_mut() {
        tokio::select! {
            biased;
            done = &mut work => return done,
            _ended = open => *conn = None,
        }
    }
    work.await
}

fn other<E: Into<Box<dyn std::error::Error + Send + Sync>>>(e: E) -> TransportError {
    TransportError::Other(with_sources(&*e.into()))
}

/// `e` and every error under it, as one line.
fn with_sources(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
