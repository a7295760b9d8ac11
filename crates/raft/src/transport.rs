//! The HTTP round trip under [`crate::PeerHttp`], behind a trait so that
//! something other than a real socket can carry peer traffic (a network
//! simulator, a test double). [`crate::Http1Transport`] is the one a node
//! runs with.
//!
//! A transport only moves a request and its answer: the fault plan, the
//! cluster token and the identity stamps are [`crate::PeerHttp`]'s.

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
