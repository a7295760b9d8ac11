//! Talking to the other members under `/internal/`: reports for a rebuild,
//! forwarded requests, and releases and losses to pass on.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use leasehold_api::{routes, ErrorBody, Lost, PeerLock, ReportRequest};

use crate::clock::Clock;
use crate::report::{MemberReport, ReportReader};
use leasehold_raft::identity::{ClusterId, RefusedAs, Stamp};
use leasehold_raft::peer_http::{PeerBody, SendError};
use leasehold_raft::{Faults, PeerHttp};
use locktable::NodeId;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// A peer that did not give an answer (unreachable, timed out, or spoke
/// nonsense): the outcome of a forwarded request is unknown.
#[derive(Debug, thiserror::Error)]
#[error("peer {addr}: {reason}")]
pub struct PeerError {
    addr: String,
    reason: String,
    /// Set when the peer refused this node's identity.
    refused: Option<RefusedAs>,
}

fn peer_error(addr: &str, reason: impl std::fmt::Display) -> PeerError {
    PeerError {
        addr: addr.to_string(),
        reason: reason.to_string(),
        refused: None,
    }
}

/// What a member answered to an identity probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Probe {
    /// It admitted this node.
    Admitted {
        /// The cluster it belongs to, if any yet.
        cluster: Option<ClusterId>,
    },
    /// It refused this node.
    Refused(RefusedAs),
    /// No answer.
    Silent,
}

/// The node's peer requests, sent through the node's one [`PeerHttp`].
#[derive(Clone)]
pub struct Peers {
    http: PeerHttp,
    /// Each member's id by address, to apply the fault plan and check answers.
    ids: BTreeMap<String, NodeId>,
}

impl Peers {
    /// Requests to the members `peers` (id to address), sent through `http`.
    pub fn new(peers: &BTreeMap<NodeId, String>, http: PeerHttp) -> Self {
        Peers {
            http,
            ids: peers.iter().map(|(id, addr)| (addr.clone(), *id)).collect(),
        }
    }

    /// The fault plan this node's peer traffic goes through.
    pub fn faults(&self) -> &Faults {
        self.http.faults()
    }

    /// Sends a POST to `path` on `addr` through [`PeerHttp`]; answers with
    /// the response, its body still to come.
    async fn send(
        &self,
        addr: &str,
        path: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<reqwest::Response, PeerError> {
        let body = body.map_or(PeerBody::Empty, PeerBody::Json);
        let target = self.ids.get(addr).copied();
        self.http
            .post(target, addr, path, body, timeout)
            .await
            .map_err(|e| match e {
                SendError::Stamp { reason, refused } => PeerError {
                    addr: addr.to_string(),
                    reason,
                    refused,
                },
                e => peer_error(addr, e),
            })
    }

    /// Asks the member at `addr` whether it admits this node, within `timeout`.
    pub(crate) async fn probe(&self, addr: &str, timeout: Duration) -> Probe {
        match self.send(addr, routes::IDENTITY, None, timeout).await {
            Ok(response) if response.status().is_success() => Probe::Admitted {
                cluster: Stamp::read(response.headers()).ok().and_then(|s| s.cluster),
            },
            Ok(_) => Probe::Silent,
            Err(PeerError {
                refused: Some(kind),
                ..
            }) => Probe::Refused(kind),
            Err(_) => Probe::Silent,
        }
    }

    /// Sends a POST as [`Peers::send`] does; answers whether it succeeded,
    /// and the body.
    async fn post(
        &self,
        addr: &str,
        path: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<(bool, axum::body::Bytes), PeerError> {
        let response = self.send(addr, path, body, timeout).await?;
        let ok = response.status().is_success();
        let bytes = response.bytes().await.map_err(|e| peer_error(addr, e))?;
        Ok((ok, bytes))
    }

    /// Posts `body` to `path` on `addr` and decodes the answer: `Ok(Ok)` on
    /// success, `Ok(Err)` for an error the peer answered with.
    pub async fn call<B: Serialize, R: DeserializeOwned>(
        &self,
        addr: &str,
        path: &str,
        body: &B,
        timeout: Duration,
    ) -> Result<Result<R, ErrorBody>, PeerError> {
        let fail = |reason: String| peer_error(addr, reason);
        let json = serde_json::to_vec(body).map_err(|e| fail(e.to_string()))?;
        let (ok, bytes) = self.post(addr, path, Some(json), timeout).await?;
        if ok {
            serde_json::from_slice(&bytes)
                .map(Ok)
                .map_err(|e| fail(e.to_string()))
        } else {
            serde_json::from_slice(&bytes)
                .map(Err)
                .map_err(|e| fail(e.to_string()))
        }
    }

    /// A member's `Held` and `Granted`, read by the speaker of `term` frame by frame as they arrive
    /// (frames over `frame_limit` bytes are refused), each frame's leases
    /// counted on `clock` from its arrival. `timeout` bounds the whole read.
    pub(crate) async fn report(
        &self,
        addr: &str,
        term: u64,
        timeout: Duration,
        frame_limit: usize,
        clock: Clock,
    ) -> Result<MemberReport, PeerError> {
        let read = async {
            let body =
                serde_json::to_vec(&ReportRequest { term }).map_err(|e| peer_error(addr, e))?;
            let mut response = self.send(addr, routes::HELD, Some(body), timeout).await?;
            if !response.status().is_success() {
                return Err(peer_error(addr, "the member refused to report"));
            }
            let mut reader = ReportReader::new(frame_limit, clock);
            while let Some(piece) = response.chunk().await.map_err(|e| peer_error(addr, e))? {
                reader
                    .push(&piece, Instant::now())
                    .map_err(|e| peer_error(addr, e))?;
            }
            reader.finish().map_err(|e| peer_error(addr, e))
        };
        tokio::time::timeout(timeout, read)
            .await
            .map_err(|_| peer_error(addr, format!("no whole report within {timeout:?}")))?
    }

    /// Posts a JSON `body` to `path` on `addr`: `Ok` once the member
    /// answered with success.
    pub(crate) async fn post_json(
        &self,
        addr: &str,
        path: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<(), PeerError> {
        let (ok, answer) = self.post(addr, path, Some(body), timeout).await?;
        if ok {
            return Ok(());
        }
        let reason = serde_json::from_slice::<ErrorBody>(&answer)
            .map_or_else(|_| "the member refused".to_string(), |e| e.message);
        Err(peer_error(addr, reason))
    }

    /// Tells the member at `addr` of releases: `body` is a
    /// [`leasehold_api::Forgets`] in JSON. `Ok` once the member says it
    /// took them; an error answer is an error.
    pub(crate) async fn forget(
        &self,
        addr: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<(), PeerError> {
        let (ok, answer) = self.post(addr, routes::FORGET, Some(body), timeout).await?;
        if ok {
            return Ok(());
        }
        let reason = serde_json::from_slice::<ErrorBody>(&answer).map_or_else(
            |_| "the member refused the releases".to_string(),
            |e| format!("the member refused the releases: {}", e.message),
        );
        Err(peer_error(addr, reason))
    }

    /// Tells a member its clients lost these locks.
    pub async fn lost(&self, addr: &str, locks: Vec<PeerLock>) {
        let body = Lost { locks };
        if let Err(e) = self
            .call::<_, serde_json::Value>(addr, routes::LOST, &body, Duration::from_secs(2))
            .await
        {
            tracing::debug!(%e, "could not report lost locks");
        }
    }
}
