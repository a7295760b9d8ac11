//! Talking to the other members under `/internal/`: reports for a rebuild,
//! forwarded requests, and releases and losses to pass on.

use std::collections::BTreeMap;
use std::time::Duration;

use leasehold_api::{ErrorBody, Lost, PeerLock, ReportRequest};

use crate::report::Report;
use leasehold_raft::{Faults, TOKEN_HEADER};
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
}

/// The HTTP client for peer traffic.
#[derive(Clone)]
pub struct Peers {
    http: reqwest::Client,
    token: String,
    /// Each member's id by address, to apply the fault plan.
    ids: BTreeMap<String, NodeId>,
    faults: Faults,
}

impl Peers {
    /// A client carrying `token` to the members `peers` (id to address),
    /// sending through the fault plan `faults`.
    pub fn new(
        token: &str,
        peers: &BTreeMap<NodeId, String>,
        faults: Faults,
    ) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(30))
            .build()?;
        Ok(Peers {
            http,
            token: token.to_string(),
            ids: peers.iter().map(|(id, addr)| (addr.clone(), *id)).collect(),
            faults,
        })
    }

    /// The fault plan this node's peer traffic goes through.
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// Sends a POST to `path` on `addr` through the fault plan, with the
    /// cluster token; answers whether it succeeded, and the body.
    async fn post(
        &self,
        addr: &str,
        path: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<(bool, axum::body::Bytes), PeerError> {
        let fail = |reason: String| PeerError {
            addr: addr.to_string(),
            reason,
        };
        if let Some(id) = self.ids.get(addr) {
            self.faults
                .before_send(*id)
                .await
                .map_err(|e| fail(e.to_string()))?;
        }
        let mut request = self
            .http
            .post(format!("http://{addr}{path}"))
            .header(TOKEN_HEADER, &self.token)
            .timeout(timeout);
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body);
        }
        let response = request.send().await.map_err(|e| fail(e.to_string()))?;
        let ok = response.status().is_success();
        let bytes = response.bytes().await.map_err(|e| fail(e.to_string()))?;
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
        let fail = |reason: String| PeerError {
            addr: addr.to_string(),
            reason,
        };
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

    /// A member's `Held` and `Granted`, read by the speaker of `term`.
    pub(crate) async fn report(
        &self,
        addr: &str,
        term: u64,
        timeout: Duration,
    ) -> Result<Report, PeerError> {
        let fail = |reason: String| PeerError {
            addr: addr.to_string(),
            reason,
        };
        let body = serde_json::to_vec(&ReportRequest { term }).map_err(|e| fail(e.to_string()))?;
        let (ok, bytes) = self
            .post(addr, "/internal/held", Some(body), timeout)
            .await?;
        if !ok {
            return Err(fail("the member refused to report".into()));
        }
        tokio::task::spawn_blocking(move || leasehold_raft::codec::decode::<Report>(&bytes))
            .await
            .map_err(|e| fail(e.to_string()))?
            .map_err(|e| fail(e.to_string()))
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
        let (ok, answer) = self
            .post(addr, "/internal/forget", Some(body), timeout)
            .await?;
        if ok {
            return Ok(());
        }
        let reason = serde_json::from_slice::<ErrorBody>(&answer).map_or_else(
            |_| "the member refused the releases".to_string(),
            |e| format!("the member refused the releases: {}", e.message),
        );
        Err(PeerError {
            addr: addr.to_string(),
            reason,
        })
    }

    /// Tells a member its clients lost these locks.
    pub async fn lost(&self, addr: &str, locks: Vec<PeerLock>) {
        let body = Lost { locks };
        if let Err(e) = self
            .call::<_, serde_json::Value>(addr, "/internal/lost", &body, Duration::from_secs(2))
            .await
        {
            tracing::debug!(%e, "could not report lost locks");
        }
    }
}
