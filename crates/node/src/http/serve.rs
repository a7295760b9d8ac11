//! Serving the node's port: connections accepted on the node's listener,
//! each on a task of the node's own ([`Tasks`], so that a simulated host
//! paused stops serving too), until `stop`. Then no more are accepted, and
//! each connection closes once the calls it is serving are answered.
//!
//! A connection's first byte says what it speaks: the binary transport's
//! magic ([`frames`]), or HTTP/1, served by hyper with the router (the
//! same under TLS, where the node offers ALPN `leasehold` before
//! `http/1.1`).
//!
//! With TLS every connection is a TLS one: a client that speaks plain HTTP
//! to the port is answered `400` in plain text (JSON) and the connection
//! closed; a failed handshake (a certificate from another CA) closes it.
//! Requests on a connection whose client showed a certificate the CA
//! verified carry [`PeerVerified`] in their extensions.
//!
//! A connection that does not send a whole request head within the idle
//! timeout, counted from its start (after the TLS handshake) or from its
//! last answer, is closed: an idle keep-alive connection, and one that
//! sends its head a byte at a time, hold a task for no longer. A body has
//! as long again from the first wait for it ([`DeadlineBody`]); an answer
//! the client does not read has no deadline here.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use leasehold_api::wire::{self, Sniff};
use leasehold_tls::{AcceptError, PeerVerified, Prefixed, Tls, HANDSHAKE_TIMEOUT};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;
use tracing::Instrument;

use super::deadline::DeadlineBody;
use super::{frames, Shared};
use crate::tasks::Tasks;

/// Serves `app` on `listener` (over `tls`, if given) until `stop` is
/// cancelled, closing connections idle for `idle`.
pub(crate) async fn serve<L>(
    mut listener: L,
    app: Router,
    node: Shared,
    tls: Option<Arc<Tls>>,
    idle: Duration,
    tasks: Tasks,
    stop: CancellationToken,
) where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    loop {
        let (io, from) = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = stop.cancelled() => return,
        };
        let app = app.clone();
        let node = Arc::clone(&node);
        let stop = stop.clone();
        let tls = tls.clone();
        tasks.spawn(
            async move {
                match tls {
                    None => serve_sniffed(io, app, node, None, idle, stop).await,
                    Some(tls) => {
                        let generation = tls.generation();
                        let accepted = tokio::select! {
                            accepted = tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(io)) => accepted,
                            _ = stop.cancelled() => return,
                        };
                        match accepted {
                            Ok(Ok((stream, verified))) => {
                                // A reload closes it: its client's
                                // certificate was checked against the
                                // files as they were.
                                let closing = stop.child_token();
                                let close_on_reload = async {
                                    tls.reloaded(generation).await;
                                    closing.cancel();
                                    std::future::pending::<()>().await;
                                };
                                tokio::select! {
                                    () = serve_sniffed(stream, app, node, verified, idle, closing.clone()) => {}
                                    () = close_on_reload => {}
                                }
                            }
                            Ok(Err(AcceptError::NotTls(io))) => refuse_plain_http(io).await,
                            Ok(Err(AcceptError::Handshake(e))) => {
                                tracing::info!(?from, %e, "TLS handshake failed");
                            }
                            Err(_) => tracing::info!(?from, "TLS handshake timed out"),
                        }
                    }
                }
            }
            .in_current_span(),
        );
    }
}

/// Serves `io` as its first byte says: the binary transport's frames
/// after its magic ([`frames`]), HTTP/1 otherwise. A connection that sends
/// nothing for `idle` is closed.
async fn serve_sniffed<IO>(
    mut io: IO,
    app: Router,
    node: Shared,
    verified: Option<PeerVerified>,
    idle: Duration,
    stop: CancellationToken,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let first = tokio::select! {
        first = tokio::time::timeout(idle, io.read_u8()) => first,
        _ = stop.cancelled() => return,
    };
    let Ok(Ok(first)) = first else {
        return;
    };
    let io = Prefixed::new(first, io);
    match wire::sniff(&[first]) {
        Sniff::Other => serve_connection(io, app, verified, idle, stop).await,
        Sniff::Binary | Sniff::NeedMore => {
            let peers = frames::PeerRoutes { app, verified };
            frames::serve_frames(io, node, peers, idle, stop).await
        }
    }
}

/// Serves HTTP/1 on `io` until it closes, goes `idle` without a whole
/// request head, or `stop` (then once the request being served is
/// answered).
async fn serve_connection<IO>(
    io: IO,
    app: Router,
    verified: Option<PeerVerified>,
    idle: Duration,
    stop: CancellationToken,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let app = app.map_request(move |request: hyper::Request<hyper::body::Incoming>| {
        let mut request = request.map(|body| DeadlineBody::new(body, idle));
        if let Some(verified) = verified {
            request.extensions_mut().insert(verified);
        }
        request
    });
    let service = TowerToHyperService::new(app);
    let mut http = hyper::server::conn::http1::Builder::new();
    // hyper runs this timer from when it starts reading a head: at the
    // connection's start and after each answer.
    http.timer(TokioTimer::new()).header_read_timeout(idle);
    let mut connection = pin!(http.serve_connection(TokioIo::new(io), service));
    let served = tokio::select! {
        served = connection.as_mut() => served,
        _ = stop.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = served {
        tracing::debug!(%e, "connection ended");
    }
}

/// Answers a client that spoke plain HTTP to the TLS port, as JSON, and
/// closes the connection.
async fn refuse_plain_http<IO: AsyncRead + AsyncWrite + Unpin>(mut io: IO) {
    let body = serde_json::json!({
        "error": "bad_request",
        "message": "this node speaks HTTPS: send the request to https://",
    })
    .to_string();
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = io.write_all(answer.as_bytes()).await;
    let _ = io.shutdown().await;
    // What the client still sends is read and dropped for a moment, so
    // that closing does not reset the connection before it reads the 400.
    let mut sink = [0u8; 16 << 10];
    let drained = async {
        let mut left = DRAIN_BYTES;
        while left > 0 {
            match io.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    };
    let _ = tokio::time::timeout(DRAIN_FOR, drained).await;
}

/// How long, and how much, a plain HTTP request is read after its 400.
const DRAIN_FOR: Duration = Duration::from_secs(1);
const DRAIN_BYTES: usize = 4 << 20;
