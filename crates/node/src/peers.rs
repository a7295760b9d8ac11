//! Talking to the other members under `/internal/`: reports for a rebuild,
//! forwarded requests, and releases and losses to pass on.

use std::sync::Arc;
use std::time::Duration;

use leasehold_api::{routes, ErrorBody, Lost, PeerLock};

use crate::clock::Clock;
use crate::report::{Layout, LockSink, MemberReport, ReportReader, REPORT_LOCKS_HEADER};
use crate::roster::Roster;
use futures::TryStreamExt;
use leasehold_raft::identity::{ClusterId, RefusedAs, Stamp};
use leasehold_raft::peer_http::{PeerBody, SendError};
use leasehold_raft::{Faults, PeerHttp, PeerResponse, StreamedResponse};
use locktable::NodeId;
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::sync::watch;

/// A peer that did not give the answer asked for: the outcome of a
/// forwarded request is unknown.
#[derive(Debug, thiserror::Error)]
#[error("peer {addr}: {reason}")]
pub struct PeerError {
    addr: String,
    kind: PeerErrorKind,
    reason: String,
}

/// What went wrong with a peer request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerErrorKind {
    /// No answer came: the fault plan dropped the request, no connection
    /// was made, or it timed out or was cut off.
    NoAnswer,
    /// The member refused this node's data directory or cluster.
    Refused(RefusedAs),
    /// The answer came from another member than the one asked, or from
    /// one this node does not admit.
    Stranger,
    /// The member answered with an error.
    Answered,
    /// A body could not be written, or the answer could not be read.
    Malformed,
}

impl PeerError {
    fn new(addr: &str, kind: PeerErrorKind, reason: impl std::fmt::Display) -> Self {
        PeerError {
            addr: addr.to_string(),
            kind,
            reason: reason.to_string(),
        }
    }

    /// The node at `addr` reported as `found`, not as `asked`.
    pub(crate) fn not_the_member(addr: &str, asked: NodeId, found: NodeId) -> Self {
        let reason = format!("node {found} answered for member {asked}");
        PeerError::new(addr, PeerErrorKind::Stranger, reason)
    }

    /// The node at `addr` answered for departed member `id` from another
    /// data directory, or another process, than the one it left with.
    pub(crate) fn left_on_another_directory(addr: &str, id: NodeId) -> Self {
        let reason = format!(
            "member {id} left the cluster with another data directory: the node \
             now at its address holds none of its records"
        );
        PeerError::new(addr, PeerErrorKind::Stranger, reason)
    }

    /// What went wrong.
    pub fn kind(&self) -> PeerErrorKind {
        self.kind
    }
}

/// The [`PeerError`] for a request to `addr` that got no answer to read.
fn send_error(addr: &str, e: SendError) -> PeerError {
    let kind = match &e {
        SendError::Dropped(_) | SendError::Transport(_) => PeerErrorKind::NoAnswer,
        SendError::Stamp {
            refused: Some(how), ..
        } => PeerErrorKind::Refused(*how),
        SendError::Stamp { refused: None, .. } => PeerErrorKind::Stranger,
    };
    PeerError::new(addr, kind, e)
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
    /// The members, to know each one's id by address: the fault plan and
    /// the checks of answers go by id.
    roster: watch::Receiver<Arc<Roster>>,
}

impl Peers {
    /// Requests to the members of `roster`, sent through `http`.
    pub fn new(roster: watch::Receiver<Arc<Roster>>, http: PeerHttp) -> Self {
        Peers { http, roster }
    }

    /// The id of the member at `addr`, if it is one.
    fn id_at(&self, addr: &str) -> Option<NodeId> {
        self.roster.borrow().id_at(addr)
    }

    /// The fault plan this node's peer traffic goes through.
    pub fn faults(&self) -> &Faults {
        self.http.faults()
    }

    /// Whether each member answers Raft's messages, as this node sees it.
    pub fn reach(&self) -> &leasehold_raft::reach::Reachability {
        self.http.reach()
    }

    /// Sends a POST to `path` on `addr` through [`PeerHttp`]; answers with
    /// the whole response.
    async fn send(
        &self,
        addr: &str,
        path: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<PeerResponse, PeerError> {
        let body = body.map_or(PeerBody::Empty, PeerBody::Json);
        let target = self.id_at(addr);
        self.http
            .post(target, addr, path, body, timeout)
            .await
            .map_err(|e| send_error(addr, e))
    }

    /// Sends a POST as [`Peers::send`] does; answers with the response, its
    /// body to be read as it arrives.
    async fn send_streamed(
        &self,
        addr: &str,
        path: &str,
        body: Option<Vec<u8>>,
        timeout: Duration,
    ) -> Result<StreamedResponse, PeerError> {
        let body = body.map_or(PeerBody::Empty, PeerBody::Json);
        let target = self.id_at(addr);
        self.http
            .post_streamed(target, addr, path, body, timeout)
            .await
            .map_err(|e| send_error(addr, e))
    }

    /// Asks the member at `addr` whether it admits this node, within `timeout`.
    pub(crate) async fn probe(&self, addr: &str, timeout: Duration) -> Probe {
        match self.send(addr, routes::IDENTITY, None, timeout).await {
            Ok(response) if response.status.is_success() => Probe::Admitted {
                cluster: Stamp::read(&response.headers).ok().and_then(|s| s.cluster),
            },
            Ok(_) => Probe::Silent,
            Err(e) => match e.kind() {
                PeerErrorKind::Refused(how) => Probe::Refused(how),
                _ => Probe::Silent,
            },
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
        Ok((response.status.is_success(), response.body))
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
        let fail = |e: serde_json::Error| PeerError::new(addr, PeerErrorKind::Malformed, e);
        match self.call_raw(addr, path, body, timeout).await? {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Ok).map_err(fail),
            Err(refused) => Ok(Err(refused)),
        }
    }

    /// As [`Peers::call`], a successful answer left as its bytes.
    pub async fn call_raw<B: Serialize>(
        &self,
        addr: &str,
        path: &str,
        body: &B,
        timeout: Duration,
    ) -> Result<Result<axum::body::Bytes, ErrorBody>, PeerError> {
        let fail = |e: serde_json::Error| PeerError::new(addr, PeerErrorKind::Malformed, e);
        let json = serde_json::to_vec(body).map_err(fail)?;
        let (ok, bytes) = self.post(addr, path, Some(json), timeout).await?;
        if ok {
            Ok(Ok(bytes))
        } else {
            serde_json::from_slice(&bytes).map(Err).map_err(fail)
        }
    }

    /// A member's `Held` and `Granted`, read by the speaker of `term` frame
    /// by frame as they arrive (frames over `frame_limit` bytes are
    /// refused), each frame's leases counted on `clock` from its arrival,
    /// in `layout` (its data's revisions and kinds, as the cluster speaks
    /// them). `timeout` bounds the whole read. With a `feed`, each frame's
    /// locks go to its sink as they are decoded, once the header said the
    /// report is of its member (another node's is refused), rather than
    /// into the report.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn report(
        &self,
        addr: &str,
        term: u64,
        layout: Layout,
        timeout: Duration,
        frame_limit: usize,
        clock: Clock,
        feed: Option<(NodeId, Box<dyn LockSink>)>,
    ) -> Result<MemberReport, PeerError> {
        use PeerErrorKind::{Answered, Malformed, NoAnswer};
        let read = async {
            let body = serde_json::to_vec(&layout.request(term))
                .map_err(|e| PeerError::new(addr, Malformed, e))?;
            let mut response = self
                .send_streamed(addr, routes::HELD, Some(body), timeout)
                .await?;
            let store = leasehold_raft::identity::Stamp::read(&response.headers)
                .ok()
                .map(|stamp| stamp.store);
            if !response.status.is_success() {
                return Err(PeerError::new(
                    addr,
                    Answered,
                    "the member refused to report",
                ));
            }
            let mut reader = ReportReader::new(frame_limit, layout, || clock.now());
            let asked = feed.as_ref().map(|(member, _)| *member);
            if let Some((member, mut sink)) = feed {
                let said = response.headers.get(REPORT_LOCKS_HEADER);
                if let Some(locks) = said.and_then(|v| v.to_str().ok()?.parse().ok()) {
                    sink.expect(locks);
                }
                reader = reader.feeding(member, sink);
            }
            while let Some(piece) = response
                .body
                .try_next()
                .await
                .map_err(|e| PeerError::new(addr, NoAnswer, e))?
            {
                reader
                    .push(&piece)
                    .map_err(|e| match (asked, reader.reported_by()) {
                        (Some(asked), Some(found)) if asked != found => {
                            PeerError::not_the_member(addr, asked, found)
                        }
                        _ => PeerError::new(addr, Malformed, e),
                    })?;
            }
            let mut report = reader
                .finish()
                .map_err(|e| PeerError::new(addr, Malformed, e))?;
            report.store = store;
            Ok(report)
        };
        tokio::time::timeout(timeout, read).await.map_err(|_| {
            let reason = format!("no whole report within {timeout:?}");
            PeerError::new(addr, NoAnswer, reason)
        })?
    }

    /// Posts a JSON `body` to `path` on `addr`: `Ok` once the member
    /// answered with success; an error answer is an error.
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
        let reason = serde_json::from_slice::<ErrorBody>(&answer).map_or_else(
            |_| format!("the member refused {path}"),
            |e| format!("the member refused {path}: {}", e.message),
        );
        Err(PeerError::new(addr, PeerErrorKind::Answered, reason))
    }

    /// Tells the member at `addr` of releases: `body` is a
    /// [`leasehold_api::Forgets`] in JSON. `Ok` once the member says it
    /// took them.
    pub(crate) async fn forget(
        &self,
        addr: &str,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<(), PeerError> {
        self.post_json(addr, routes::FORGET, body, timeout).await
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
