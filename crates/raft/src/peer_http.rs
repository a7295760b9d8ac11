//! The one HTTP client for peer traffic, Raft's ([`crate::network`]) and
//! the node's own: every request goes through the fault plan, carries the
//! cluster token and this node's identity stamp, and every answer's stamp
//! is checked before the caller sees it.

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE};

use crate::auth::TOKEN_HEADER;
use crate::faults::{Dropped, Faults};
use crate::identity::{Identity, RefusedAs, Stamp};
use crate::routes;
use crate::types::NodeId;

/// Why the peer client could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum NetworkInitError {
    /// The cluster token cannot be sent as an HTTP header value.
    #[error("cluster token is not a valid HTTP header value")]
    BadToken,
    /// The HTTP client could not be built.
    #[error("http client: {0}")]
    Client(#[from] reqwest::Error),
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
    Http(#[from] reqwest::Error),
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
/// connections are pooled and shared).
#[derive(Debug, Clone)]
pub struct PeerHttp {
    client: reqwest::Client,
    token: HeaderValue,
    identity: Arc<Identity>,
    faults: Faults,
}

impl PeerHttp {
    /// A client for the node `identity` names, sending `cluster_token` and
    /// its stamp with every request, through the fault plan `faults`.
    pub fn new(
        identity: Arc<Identity>,
        cluster_token: &str,
        faults: Faults,
    ) -> Result<Self, NetworkInitError> {
        let mut token =
            HeaderValue::from_str(cluster_token).map_err(|_| NetworkInitError::BadToken)?;
        token.set_sensitive(true);
        let client = reqwest::Client::builder()
            .no_proxy()
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(60))
            .build()?;
        Ok(PeerHttp {
            client,
            token,
            identity,
            faults,
        })
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
    /// the response, its body still to come. The fault plan applies when
    /// the member's id `target` is known; without it, the answer's stamp
    /// names the member whose answer is checked.
    pub async fn post(
        &self,
        target: Option<NodeId>,
        addr: &str,
        path: &str,
        body: PeerBody,
        timeout: Duration,
    ) -> Result<reqwest::Response, SendError> {
        if let Some(id) = target {
            self.faults.before_send(id).await?;
        }
        let mut stamp = HeaderMap::new();
        self.identity.stamp().write(&mut stamp);
        let request = self
            .client
            .post(format!("http://{addr}{path}"))
            .timeout(timeout)
            .header(TOKEN_HEADER, self.token.clone())
            .headers(stamp);
        let request = match body {
            PeerBody::Empty => request,
            PeerBody::Json(bytes) => request.header(CONTENT_TYPE, "application/json").body(bytes),
            PeerBody::Codec(bytes) => request
                .header(CONTENT_TYPE, routes::CONTENT_TYPE)
                .body(bytes),
        };
        let response = request.send().await?;
        let id = match target {
            Some(id) => id,
            None => Stamp::read(response.headers()).map_or(NodeId::MAX, |s| s.from),
        };
        // An answer from a member on another data directory than the one
        // this node knew (a wiped one forgot its votes) is not counted.
        if let Err(reason) = self
            .identity
            .check_answer(id, response.status(), response.headers())
            .await
        {
            return Err(SendError::Stamp {
                reason,
                refused: RefusedAs::read(response.headers()),
            });
        }
        Ok(response)
    }
}
