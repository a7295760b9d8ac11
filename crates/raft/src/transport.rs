//! The HTTP round trip under [`crate::PeerHttp`], behind a trait so that
//! something other than a real socket can carry peer traffic (a network
//! simulator, a test double). [`ReqwestTransport`] is the one a node runs
//! with.
//!
//! A transport only moves a request and its answer: the fault plan, the
//! cluster token and the identity stamps are [`crate::PeerHttp`]'s.

use std::error::Error as _;
use std::fmt;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use http::{HeaderMap, StatusCode};

/// One peer request: always a `POST`.
#[derive(Debug, Clone)]
pub struct PeerRequest {
    /// The member's address, `host:port`.
    pub addr: String,
    /// The route, starting with `/`.
    pub path: String,
    /// Every header to send, the content type included.
    pub headers: HeaderMap,
    /// The body (empty for none).
    pub body: Vec<u8>,
    /// How long the whole round trip may take, the answer's body included.
    pub timeout: Duration,
}

/// A member's whole answer.
#[derive(Debug, Clone)]
pub struct PeerResponse {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body, read to its end within the request's timeout.
    pub body: Bytes,
}

/// A member's answer whose body is read as it arrives, for answers too
/// large to hold at once or whose pieces count from their arrival.
pub struct StreamedResponse {
    /// The status.
    pub status: StatusCode,
    /// The headers.
    pub headers: HeaderMap,
    /// The body's pieces; the stream fails once the request's timeout has
    /// passed.
    pub body: BoxStream<'static, Result<Bytes, TransportError>>,
}

impl fmt::Debug for StreamedResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StreamedResponse")
            .field("status", &self.status)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

impl From<PeerResponse> for StreamedResponse {
    fn from(response: PeerResponse) -> Self {
        StreamedResponse {
            status: response.status,
            headers: response.headers,
            body: futures::stream::once(async move { Ok(response.body) }).boxed(),
        }
    }
}

/// Why a request got no whole answer. The Raft network tells these apart
/// (see [`crate::network`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// No connection to the member could be made.
    #[error("could not connect: {0}")]
    Connect(String),
    /// The request's timeout passed before the whole answer came.
    #[error("no whole answer within the request's timeout")]
    Timeout,
    /// The request or its answer failed some other way (cut off, say).
    #[error("{0}")]
    Other(String),
}

/// What carries peer requests to other members and brings their answers back.
pub trait Transport: Send + Sync + fmt::Debug + 'static {
    /// Sends `request` and answers with the member's whole answer, or why
    /// there is none, within `request.timeout`.
    fn send(&self, request: PeerRequest) -> BoxFuture<'_, Result<PeerResponse, TransportError>>;

    /// Sends `request` and answers as soon as the status and headers have
    /// come, the body to be read as it arrives, all within
    /// `request.timeout`. Unless a transport streams, the body is
    /// [`Transport::send`]'s, in one piece.
    fn send_streamed(
        &self,
        request: PeerRequest,
    ) -> BoxFuture<'_, Result<StreamedResponse, TransportError>> {
        self.send(request)
            .map(|r| r.map(StreamedResponse::from))
            .boxed()
    }
}

/// The production transport: HTTP/1.1 over TCP with `reqwest`, connections
/// pooled and shared by clones.
#[derive(Debug, Clone)]
pub struct ReqwestTransport {
    client: reqwest::Client,
}

impl ReqwestTransport {
    /// A transport with its own connection pool (no proxy, `TCP_NODELAY`,
    /// idle connections closed after a minute).
    pub fn new() -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(60))
            .build()?;
        Ok(ReqwestTransport { client })
    }

    /// Sends `request`; reqwest's timeout covers the body as well.
    async fn start(&self, request: PeerRequest) -> Result<reqwest::Response, TransportError> {
        self.client
            .post(format!("http://{}{}", request.addr, request.path))
            .timeout(request.timeout)
            .headers(request.headers)
            .body(request.body)
            .send()
            .await
            .map_err(transport_error)
    }
}

impl Transport for ReqwestTransport {
    fn send(&self, request: PeerRequest) -> BoxFuture<'_, Result<PeerResponse, TransportError>> {
        async move {
            let mut response = self.start(request).await?;
            let status = response.status();
            let headers = std::mem::take(response.headers_mut());
            let body = response.bytes().await.map_err(transport_error)?;
            Ok(PeerResponse {
                status,
                headers,
                body,
            })
        }
        .boxed()
    }

    fn send_streamed(
        &self,
        request: PeerRequest,
    ) -> BoxFuture<'_, Result<StreamedResponse, TransportError>> {
        async move {
            let mut response = self.start(request).await?;
            let status = response.status();
            let headers = std::mem::take(response.headers_mut());
            let body = futures::stream::try_unfold(response, |mut response| async move {
                let piece = response.chunk().await.map_err(transport_error)?;
                Ok(piece.map(|piece| (piece, response)))
            });
            Ok(StreamedResponse {
                status,
                headers,
                body: body.boxed(),
            })
        }
        .boxed()
    }
}

/// Sorts a reqwest failure the way the Raft network tells them apart; a
/// connect timeout is a failure to connect.
fn transport_error(e: reqwest::Error) -> TransportError {
    if e.is_connect() {
        TransportError::Connect(with_sources(&e))
    } else if e.is_timeout() {
        TransportError::Timeout
    } else {
        TransportError::Other(with_sources(&e))
    }
}

/// `e` and every error under it, as one line.
fn with_sources(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
