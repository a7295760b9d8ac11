//! The node's network seams on turmoil's simulated TCP: a listener axum
//! serves on, a peer transport, and the HTTP round trip both it and the
//! simulated clients use.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderMap, HeaderValue, CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use leasehold_raft::{PeerRequest, PeerResponse, Transport, TransportError};

/// The cluster token of every simulated cluster: its nodes are made with
/// it, and [`admin_call`] carries it.
pub const TOKEN: &str = "simulated-cluster-token";

/// A simulated host's listening socket, for `axum::serve`.
pub struct SimListener(turmoil::net::TcpListener);

impl SimListener {
    /// Listens on `port` of every address of the current host.
    pub async fn bind(port: u16) -> std::io::Result<Self> {
        turmoil::net::TcpListener::bind(("0.0.0.0", port))
            .await
            .map(SimListener)
    }
}

impl axum::serve::Listener for SimListener {
    type Io = turmoil::net::TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.0.accept().await {
                Ok(accepted) => return accepted,
                // A simulated accept fails only while the host goes down.
                Err(_) => tokio::time::sleep(Duration::from_millis(1)).await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// A listener fed from a host's accept queue ([`SimListener::queued`]).
pub struct QueuedListener {
    queue: tokio::sync::mpsc::UnboundedReceiver<(turmoil::net::TcpStream, SocketAddr)>,
    local: SocketAddr,
}

impl SimListener {
    /// This listener as a kernel keeps a listening socket: the returned
    /// future accepts every connection (its handshake completes and what
    /// its caller sends is buffered) into a queue, whether or not the node
    /// is running, and the node takes them from the [`QueuedListener`].
    /// Run the future outside the node's tasks, so that connections queue
    /// while the node is paused (`crate::pauses`).
    pub fn queued(
        mut self,
    ) -> std::io::Result<(QueuedListener, impl std::future::Future<Output = ()>)> {
        use axum::serve::Listener;
        let local = self.local_addr()?;
        let (tx, queue) = tokio::sync::mpsc::unbounded_channel();
        let accepting = async move {
            loop {
                if tx.send(self.accept().await).is_err() {
                    return;
                }
            }
        };
        Ok((QueuedListener { queue, local }, accepting))
    }
}

impl axum::serve::Listener for QueuedListener {
    type Io = turmoil::net::TcpStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.queue.recv().await {
            Some(accepted) => accepted,
            // The queue's accepting end lives as long as the host.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// An answer read whole.
#[derive(Debug)]
pub struct Answer {
    /// Its status.
    pub status: StatusCode,
    /// Its headers.
    pub headers: HeaderMap,
    /// Its body.
    pub body: Bytes,
}

/// One HTTP/1.1 request to `addr` (`host:port`) over a new simulated
/// connection, answered whole within `timeout`.
pub async fn round_trip(
    addr: &str,
    method: Method,
    path: &str,
    headers: HeaderMap,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<Answer, TransportError> {
    let exchange = async {
        let stream = turmoil::net::TcpStream::connect(addr)
            .await
            .map_err(|e| TransportError::Connect(format!("{addr}: {e}")))?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| TransportError::Connect(format!("{addr}: {e}")))?;
        leasehold_raft::tasks::spawn(connection);
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .body(Full::new(Bytes::from(body)))
            .map_err(|e| TransportError::Other(e.to_string()))?;
        *request.headers_mut() = headers;
        if let Ok(host) = HeaderValue::from_str(addr) {
            request.headers_mut().insert(HOST, host);
        }
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| TransportError::Other(format!("{addr}: {e}")))?;
        let (parts, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| TransportError::Other(format!("{addr}: {e}")))?
            .to_bytes();
        Ok(Answer {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    };
    tokio::time::timeout(timeout, exchange)
        .await
        .unwrap_or(Err(TransportError::Timeout))
}

/// Peer traffic over simulated TCP: the node's [`Transport`] seam.
#[derive(Debug, Default)]
pub struct SimTransport;

impl Transport for SimTransport {
    fn send(&self, request: PeerRequest) -> BoxFuture<'_, Result<PeerResponse, TransportError>> {
        Box::pin(async move {
            let answer = round_trip(
                &request.addr,
                Method::POST,
                &request.path,
                request.headers,
                request.body,
                request.timeout,
            )
            .await?;
            Ok(PeerResponse {
                status: answer.status,
                headers: answer.headers,
                body: answer.body,
            })
        })
    }
}

/// A JSON call of the public API, as a simulated client makes it: the
/// status and the body (`null` when it is not JSON).
pub async fn call(
    addr: &str,
    method: Method,
    path: &str,
    body: Option<serde_json::Value>,
    timeout: Duration,
) -> Result<(StatusCode, serde_json::Value), TransportError> {
    call_with(addr, method, path, body, HeaderMap::new(), timeout).await
}

/// A call of the cluster's administration routes (membership), with the
/// cluster token, as an operator makes it.
pub async fn admin_call(
    addr: &str,
    method: Method,
    path: &str,
    timeout: Duration,
) -> Result<(StatusCode, serde_json::Value), TransportError> {
    let mut headers = HeaderMap::new();
    headers.insert("x-leasehold-token", HeaderValue::from_static(TOKEN));
    call_with(addr, method, path, None, headers, timeout).await
}

async fn call_with(
    addr: &str,
    method: Method,
    path: &str,
    body: Option<serde_json::Value>,
    mut headers: HeaderMap,
    timeout: Duration,
) -> Result<(StatusCode, serde_json::Value), TransportError> {
    let bytes = match body {
        Some(body) => {
            headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            serde_json::to_vec(&body).map_err(|e| TransportError::Other(e.to_string()))?
        }
        None => Vec::new(),
    };
    let answer = round_trip(addr, method, path, headers, bytes, timeout).await?;
    let json = serde_json::from_slice(&answer.body).unwrap_or(serde_json::Value::Null);
    Ok((answer.status, json))
}
