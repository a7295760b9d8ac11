//! The one HTTP client for peer traffic, Raft's ([`crate::network`]) and
//! the node's own: every request goes through the fault plan, carries the
//! cluster token and this node's identity stamp, and every answer's stamp
//! is checked before the caller sees it. The round trip itself is a
//! [`Transport`]'s.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use futures::StreamExt;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue, StatusCode};

use crate::auth::TOKEN_HEADER;
use crate::faults::{Dropped, Faults};
use crate::identity::{Identity, RefusedAs, Stamp};
use crate::routes;
use crate::transport::{PeerRequest, PeerResponse, StreamedResponse, Transport, TransportError};
use crate::types::NodeId;

/// Why the peer client could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum NetworkInitError {
    /// The cluster token cannot be sent as an HTTP header value.
    #[error("cluster token is not a valid HTTP header value")]
    BadToken,
}

/// A peer request's body, with its content type.
#[derive(Debug)]
pub enum PeerBody {
    /// No body.
    Empty,
    /// JSON (the node's peer routes).
    Json(Vec<u8>),
    /// [`crate::codec`] bytes (the Raft routes).
    Codec(Vec<u8>),
}

/// Why a peer request got no answer to read.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The fault plan dropped it.
    #[error(transparent)]
    Dropped(#[from] Dropped),
    /// It failed on the way: no connection, timed out, cut off.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// The answer's stamp was refused: the member refused this node
    /// (`refused` says how, when it said), or it answered as a stranger.
    #[error("{reason}")]
    Stamp {
        /// Why, for the log.
        reason: String,
        /// How the member refused this node, if it did.
        refused: Option<RefusedAs>,
    },
}

/// The HTTP client every peer request goes through; cheap to clone (the
/// transport, and so its connections, are shared).
#[derive(Debug, Clone)]
pub struct PeerHttp {
    transport: Arc<dyn Transport>,
    token: HeaderValue,
    identity: Arc<Identity>,
    faults: Faults,
    reach: Arc<crate::reach::Reachability>,
}

impl PeerHttp {
    /// A client for the node `identity` names, sending `cluster_token` and
    /// its stamp with every request, through the fault plan `faults`, over
    /// an [`Http1Transport`](crate::Http1Transport).
    pub fn new(
        identity: Arc<Identity>,
        cluster_token: &str,
        faults: Faults,
    ) -> Result<Self, NetworkInitError> {
        let transport = Arc::new(crate::Http1Transport::new());
        Self::with_transport(identity, cluster_token, faults, transport)
    }

    /// As [`PeerHttp::new`], over `transport`.
    pub fn with_transport(
        identity: Arc<Identity>,
        cluster_token: &str,
        faults: Faults,
        transport: Arc<dyn Transport>,
    ) -> Result<Self, NetworkInitError> {
        let mut token =
            HeaderValue::from_str(cluster_token).map_err(|_| NetworkInitError::BadToken)?;
        token.set_sensitive(true);
        Ok(PeerHttp {
            transport,
            token,
            identity,
            faults,
            reach: Arc::default(),
        })
    }

    /// Whether each member answers Raft's messages, as this node sees it.
    pub fn reach(&self) -> &crate::reach::Reachability {
        &self.reach
    }

    /// The fault plan peer traffic goes through.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// The identity this client stamps requests with.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// POSTs `body` to `path` on `addr` within `timeout`, and answers with
    /// the whole response. The fault plan applies when the member's id
    /// `target` is known; without it, the answer's stamp names the member
    /// whose answer is checked.
    pub async fn post(
        &self,
        target: Option<NodeId>,
        addr: &str,
        path: &str,
        body: PeerBody,
        timeout: Duration,
    ) -> Result<PeerResponse, SendError> {
        // The stamp is checked on the headers, before the body is read: a
        // refusal whose body is then cut off is still a refusal.
        let StreamedResponse {
            status,
            headers,
            body: mut pieces,
        } = self
            .post_streamed(target, addr, path, body, timeout)
            .await?;
        let mut body = BytesMut::new();
        while let Some(piece) = pieces.next().await {
            body.extend_from_slice(&piece?);
        }
        Ok(PeerResponse {
            status,
            headers,
            body: body.freeze(),
        })
    }

    /// As [`PeerHttp::post`], but answers once the status and headers have
    /// come (and their stamp is checked), the body to be read as it
    /// arrives, within `timeout`.
    pub async fn post_streamed(
        &self,
        target: Option<NodeId>,
        addr: &str,
        path: &str,
        body: PeerBody,
        timeout: Duration,
    ) -> Result<StreamedResponse, SendError> {
        let request = self.request(target, addr, path, body, timeout).await?;
        let response = self.transport.send_streamed(request).await?;
        self.check(target, response.status, &response.headers)
            .await?;
        Ok(response)
    }

    /// The request for `body` to `path` on `addr`, with the token, this
    /// node's stamp and the content type, once the fault plan let it go.
    async fn request(
        &self,
        target: Option<NodeId>,
        addr: &str,
        path: &str,
        body: PeerBody,
        timeout: Duration,
    ) -> Result<PeerRequest, Dropped> {
        if let Some(id) = target {
            self.faults.before_send(id).await?;
        }
        let mut headers = HeaderMap::new();
        headers.insert(TOKEN_HEADER, self.token.clone());
        self.identity.stamp().write(&mut headers);
        self.identity.terms().write(&mut headers);
        self.identity.versions().write(&mut headers);
        let body = match body {
            PeerBody::Empty => Vec::new(),
            PeerBody::Json(bytes) => {
                headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                bytes
            }
            PeerBody::Codec(bytes) => {
                headers.insert(CONTENT_TYPE, HeaderValue::from_static(routes::CONTENT_TYPE));
                bytes
            }
        };
        Ok(PeerRequest {
            addr: addr.to_string(),
            path: path.to_string(),
            headers,
            body,
            timeout,
        })
    }

    /// Checks the answer's stamp: `target`'s, or, unknown, the member's the
    /// stamp names.
    async fn check(
        &self,
        target: Option<NodeId>,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> Result<(), SendError> {
        let id = match target {
            Some(id) => id,
            None => Stamp::read(headers).map_or(NodeId::MAX, |s| s.from),
        };
        // An answer from a member on another data directory than the one
        // this node knew (a wiped one forgot its votes) is not counted.
        self.identity
            .check_answer(id, status, headers)
            .await
            .map_err(|reason| SendError::Stamp {
                reason,
                refused: RefusedAs::read(headers),
            })
    }
}
