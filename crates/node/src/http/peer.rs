//! The peer routes under `/internal/` ([`leasehold_api::routes`], and
//! Raft's), behind the cluster token and the identity guard.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use leasehold_api::{
    routes, ErrorCode, ForwardAcquire, ForwardAnswer, ForwardAnswers, ForwardBatch, ForwardCall,
    ForwardGet, ForwardGetAnswer, ForwardList, Granted, PeerAwaited, PeerLock, PeerQueued,
};
use leasehold_raft::identity::Stamp;
use leasehold_raft::{raft_router, token_matches, TOKEN_HEADER};
use locktable::{LockId, NodeId};
use tokio::time::Instant;

use super::{raw, wrong_method, Shared};
use crate::error::ApiError;
use crate::node::Node;

/// The peer routes, each behind the cluster token; all but the
/// operator's also behind the identity guard.
pub(super) fn router(node: Shared) -> Router {
    let members = Router::new()
        .route(routes::HELD, post(internal_held))
        .route(
            routes::FORWARD_ACQUIRE,
            post(forward_acquire).layer(axum::middleware::from_fn_with_state(
                Arc::clone(&node),
                delay_answer,
            )),
        )
        .route(
            routes::FORWARD_BATCH,
            post(forward_batch).layer(axum::middleware::from_fn_with_state(
                Arc::clone(&node),
                delay_answer,
            )),
        )
        .route(routes::HANDOVER, post(internal_handover))
        .route(routes::HANDED_OVER, post(internal_handed_over))
        .route(routes::FORWARD_GET, post(forward_get))
        .route(routes::FORWARD_LIST, post(forward_list))
        .route(routes::FORGET, post(internal_forget))
        .route(routes::LOST, post(internal_lost))
        .route(routes::COPIES, post(internal_copies))
        .route(routes::SESSION_COPY, post(internal_session_copy))
        .route(routes::IDENTITY, post(internal_identity))
        .route(routes::MEMBERS, post(internal_members))
        .route(routes::JOIN, post(internal_join))
        .route(routes::REMOVED, post(internal_removed))
        .route(routes::CLUSTER, post(internal_cluster))
        .route(routes::HISTORY, post(internal_history))
        .route(
            leasehold_raft::routes::RETIRE_SELF,
            post(internal_retire_self),
        )
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&node),
            refuse_forwards_from_strangers,
        ))
        .with_state(Arc::clone(&node))
        .merge(raft_router(node.raft.clone()))
        .method_not_allowed_fallback(wrong_method)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&node.identity),
            leasehold_raft::identity::guard,
        ));
    // An operator's (or a test's) route, not a member's: no identity.
    let operator = Router::new()
        .route(routes::CHAOS, post(internal_chaos))
        .method_not_allowed_fallback(wrong_method)
        .with_state(Arc::clone(&node));
    // The answers to a wrong method are set before the guards wrap the
    // routes, so that the guards come first.
    members
        .merge(operator)
        .layer(axum::middleware::from_fn_with_state(node, guard_internal))
}

/// Every request under `/internal/`, whatever its path or method, needs a
/// peer token (`--peer-token`, or the cluster token when none is set);
/// nothing else about the peer routes shows without it. The
/// public routes do not pass through this check. Past it, the identity
/// guard admits the sender's data directory and stamps the answer.
async fn guard_internal(State(node): State<Shared>, request: Request, next: Next) -> Response {
    match refuse_without_token(&node, &request) {
        Some(refused) => refused.into_response(),
        None => next.run(request).await,
    }
}

/// `401` for a request without a peer token, or, when members speak
/// mutual TLS, on a connection whose client showed no certificate the CA
/// verified (the caller has checked that the request is for the peer
/// routes).
pub(super) fn refuse_without_token(node: &Node, request: &Request) -> Option<ApiError> {
    let mutual = node.config.tls.as_ref().is_some_and(|tls| tls.mutual());
    if mutual
        && request
            .extensions()
            .get::<leasehold_tls::PeerVerified>()
            .is_none()
    {
        return Some(ApiError::new(
            ErrorCode::Unauthorized,
            "the peer routes need a client certificate from the cluster's CA",
        ));
    }
    refuse_without_peer_token(node, request.headers()).err()
}

/// `401` unless `headers` carry a peer credential this node takes (the
/// cluster token, unless `--peer-token` is set).
fn refuse_without_peer_token(node: &Node, headers: &HeaderMap) -> Result<(), ApiError> {
    match node.config.takes_peer_token(given_token(headers)) {
        true => Ok(()),
        false => Err(ApiError::new(
            ErrorCode::Unauthorized,
            "the peer token is missing or wrong",
        )),
    }
}

/// The token `headers` carry (`x-leasehold-token`), empty if none.
fn given_token(headers: &HeaderMap) -> &[u8] {
    headers
        .get(TOKEN_HEADER)
        .map(|v| v.as_bytes())
        .unwrap_or(b"")
}

/// `401` unless `headers` carry the cluster token (compared in constant
/// time).
pub(super) fn refuse_without_cluster_token(
    node: &Node,
    headers: &HeaderMap,
) -> Result<(), ApiError> {
    match token_matches(&node.config.cluster_token, given_token(headers)) {
        true => Ok(()),
        false => Err(ApiError::new(
            ErrorCode::Unauthorized,
            "the cluster token is missing or wrong",
        )),
    }
}

/// Serves calls forwarded by members only: a node removed from the cluster
/// that missed the news (it was down, say, and restarted with a log that
/// still names it) must not take locks for its clients, which a rebuild
/// would no longer read; nor may a node whose addition has not committed.
/// It is answered `503`, so its clients move on.
async fn refuse_forwards_from_strangers(
    State(node): State<Shared>,
    request: Request,
    next: Next,
) -> Response {
    if request.uri().path().starts_with(routes::FORWARD_PREFIX) {
        let from = leasehold_raft::identity::Stamp::read(request.headers()).map(|s| s.from);
        if let Ok(from) = from {
            // A member whose addition has not committed may be unknown to
            // the next leader, which would never read its clients' locks.
            if !node.roster().is_settled(from) {
                return ApiError::new(
                    ErrorCode::NoLeader,
                    format!(
                        "node {from} is not a member of the committed configuration: it was \
                         removed, or its addition has not committed yet"
                    ),
                )
                .into_response();
            }
        }
    }
    next.run(request).await
}

/// Holds back the answer to a forwarded call by the fault plan's
/// `answer_delay_ms` (chaos tests only; the call is served at once).
async fn delay_answer(State(node): State<Shared>, request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    if node.config.chaos {
        let delay = node.peers.faults().plan().answer_delay_ms;
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
    }
    response
}

/// The member a peer request's stamp names (the identity guard admitted
/// it): the node a forwarded call is for, not whatever its body says.
fn stamped_from(headers: &HeaderMap) -> Result<NodeId, ApiError> {
    leasehold_raft::identity::Stamp::read(headers)
        .map(|stamp| stamp.from)
        .map_err(|e| ApiError::bad_request(e.to_string()))
}

/// A peer's body: peers are trusted to send well-formed JSON.
fn peer_body<T: serde::de::DeserializeOwned>(
    bytes: &Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    serde_json::from_slice(raw(bytes)?).map_err(|e| ApiError::bad_request(e.to_string()))
}
/// This node's report to a rebuilding speaker, in bincode frames of at
/// most `--report-frame-bytes` (see `report`): each frame is sent, and
/// freed, on its own. The read carries the reader's term: a node still
/// speaking for an older one drops its table first.
async fn internal_held(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let read: leasehold_api::ReportRequest = peer_body(&bytes)?;
    node.deposed_by(read.term);
    // Frames go out as they are encoded: the reader decodes the first
    // while the rest are written. The channel is not bounded: the encoder
    // holds the node's lock, and must never wait on the network under it.
    let (frames, mut sent) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let locks = node.state().member.report_len();
    // A task of the node's own (tracked, and under a simulator in its
    // host's set, paused and crashed with it), as every task it starts.
    let tasks = node.tasks.clone();
    tasks.spawn(async move {
        let layout = crate::report::Layout::asked(&read);
        let encoded = leasehold_raft::blocking::unblock(move || {
            node.report_frames(layout, &mut |frame| {
                let _ = frames.send(frame);
            })
        })
        .await;
        // The stream stops without its end: the reader refuses it.
        if let Err(e) = encoded
            .map_err(|e| e.to_string())
            .and_then(|r| r.map_err(|e| e.to_string()))
        {
            tracing::warn!(error = %e, "report not encoded");
        }
    });
    let stream = futures::stream::poll_fn(move |cx| {
        sent.poll_recv(cx)
            .map(|frame| frame.map(|f| Ok::<_, std::convert::Infallible>(Bytes::from(f))))
    });
    let body = axum::body::Body::from_stream(stream);
    let headers = [
        ("content-type", "application/octet-stream".to_string()),
        (crate::report::REPORT_LOCKS_HEADER, locks.to_string()),
    ];
    Ok((headers, body).into_response())
}

/// A forwarded acquire that may wait (those that do not come in batches).
async fn forward_acquire(
    State(node): State<Shared>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<Granted>, ApiError> {
    let received = Instant::now();
    let from = stamped_from(&headers)?;
    let forwarded: ForwardAcquire = peer_body(&bytes)?;
    match node
        .serve_forwarded(ForwardCall::Acquire(forwarded).by(from), received, true)
        .await
    {
        ForwardAnswer::Granted(granted) => Ok(Json(granted)),
        ForwardAnswer::Refused(e) => Err(ApiError::from(e)),
        ForwardAnswer::Lock(_)
        | ForwardAnswer::Session(_)
        | ForwardAnswer::RecordsWanted
        | ForwardAnswer::Released(_) => {
            Err(ApiError::internal("an acquire answered with no grant"))
        }
    }
}

/// Forwarded calls that answer at once, served in order and answered
/// together.
async fn forward_batch(
    State(node): State<Shared>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<ForwardAnswers>, ApiError> {
    let received = Instant::now();
    let from = stamped_from(&headers)?;
    let calls =
        ForwardBatch::read(raw(&bytes)?).map_err(|e| ApiError::bad_request(e.to_string()))?;
    // Each call does its table work when first polled, in order; those
    // that wait for copies then wait together. A call this build cannot
    // read (a newer follower's) is refused alone.
    let answers = futures::future::join_all(calls.into_iter().map(|call| {
        let node = &node;
        async move {
            match call {
                Ok(call) => node.serve_forwarded(call.by(from), received, false).await,
                Err(why) => ForwardAnswer::Refused(
                    *ApiError::bad_request(format!(
                        "this speaker cannot read the call (a newer build's?): {why}"
                    ))
                    .body,
                ),
            }
        }
    }))
    .await;
    Ok(Json(ForwardAnswers { answers }))
}

async fn forward_get(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let forwarded: ForwardGet = peer_body(&bytes)?;
    if forwarded.queue && forwarded.watch.is_none() {
        let (lock, waiting) = node.speak_get_waiting(&forwarded.name)?;
        let now = node.clock.now();
        return Ok(Json(ForwardGetAnswer {
            lock: lock.map(|lock| node.transit(&lock)),
            waiters: waiting.count as u64,
            queue: waiting
                .first
                .iter()
                .map(|q| PeerQueued::leaving(q, now))
                .collect(),
            others: waiting.others.iter().map(|l| node.transit(l)).collect(),
        })
        .into_response());
    }
    let lock = node.speak_watch(&forwarded.name, forwarded.watch).await?;
    Ok(Json(lock.map(|l| node.transit(&l))).into_response())
}

async fn forward_list(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let list: ForwardList = peer_body(&bytes)?;
    let now = node.clock.now();
    let listing = node.speak_list(&list.prefix, list.limit)?;
    let locks: Vec<PeerLock> = listing
        .locks
        .iter()
        .map(|l| PeerLock::from(l.in_transit(now)))
        .collect();
    Ok(match list.counts {
        true => Json(leasehold_api::ForwardListAnswer {
            locks,
            total: listing.total.unwrap_or(listing.locks.len()) as u64,
            waiters: listing.waiters.iter().map(|w| *w as u64).collect(),
            queues: listing
                .queues
                .iter()
                .map(|q| q.iter().map(|q| PeerQueued::leaving(q, now)).collect())
                .collect(),
            also: listing
                .also
                .iter()
                .map(|a| {
                    a.iter()
                        .map(|l| PeerLock::from(l.in_transit(now)))
                        .collect()
                })
                .collect(),
            awaited: listing
                .awaited
                .iter()
                .map(|a| PeerAwaited::leaving(a, now))
                .collect(),
        })
        .into_response(),
        false => Json(locks).into_response(),
    })
}

/// Copies of grants from the speaker, kept until their leases end.
async fn internal_copies(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let batch: leasehold_api::Copies = peer_body(&bytes)?;
    node.take_copies(batch.term, batch.locks)?;
    Ok(Json(serde_json::json!({})))
}

/// The speaker's copy of a session's grant: answers whether this member
/// renewed its copies of the session's locks with it.
async fn internal_session_copy(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<leasehold_api::SessionCopied>, ApiError> {
    let copy: leasehold_api::SessionCopy = peer_body(&bytes)?;
    Ok(Json(node.take_session_copy(copy)?))
}

/// A leaving member hands its records over: each live lock is copied
/// again to members that stay (this node speaks; another answers `503`).
async fn internal_handover(
    State(node): State<Shared>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let from = stamped_from(&headers)?;
    let handover: leasehold_api::Handover = peer_body(&bytes)?;
    node.take_handover(from, handover.locks, handover.last)
        .await?;
    Ok(Json(serde_json::json!({})))
}

/// The speaker says a departed member handed its records over.
async fn internal_handed_over(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let notice: leasehold_api::HandedOver = peer_body(&bytes)?;
    node.handed_over(notice.member);
    Ok(Json(serde_json::json!({})))
}

async fn internal_forget(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let batch: leasehold_api::Forgets = peer_body(&bytes)?;
    for forget in batch.forgets {
        let id: LockId = forget.id.parse()?;
        let left = forget.ttl_ms.map(Duration::from_millis);
        node.forget(&forget.name, id, left);
    }
    Ok(Json(serde_json::json!({})))
}

async fn internal_lost(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let lost: leasehold_api::Lost = peer_body(&bytes)?;
    let ids = lost
        .locks
        .iter()
        .map(|l| l.id.parse::<LockId>())
        .collect::<Result<Vec<_>, _>>()?;
    node.lost(ids);
    Ok(Json(serde_json::json!({})))
}

/// A member asking whether this node admits it: the identity guard has
/// answered by the time this runs.
async fn internal_identity() -> Json<serde_json::Value> {
    Json(serde_json::json!({}))
}

/// A membership change another member forwarded: made here if this node
/// speaks, never forwarded again.
async fn internal_members(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<leasehold_api::ClusterAnswer>, ApiError> {
    let change: leasehold_api::MemberChange = peer_body(&bytes)?;
    Ok(Json(node.change_members(change, true).await?))
}

/// This node's view of the cluster, for a member answering
/// `?view=speaker`.
async fn internal_cluster(State(node): State<Shared>) -> Json<leasehold_api::ClusterAnswer> {
    Json(node.cluster())
}

/// This node's failover history, for a member answering `?view=speaker`.
async fn internal_history(State(node): State<Shared>) -> Json<leasehold_api::HistoryAnswer> {
    Json(node.history())
}

/// A new node asks to be added: forwarded to the speaker.
async fn internal_join(
    State(node): State<Shared>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<leasehold_api::ClusterAnswer>, ApiError> {
    let change: leasehold_api::MemberChange = peer_body(&bytes)?;
    let leasehold_api::MemberChange::Add(mut add) = change else {
        return Err(ApiError::new(ErrorCode::BadRequest, "a join adds a member"));
    };
    // The joiner's own stamp (admitted by the identity guard) says which
    // directory it runs on; the body's word is not taken.
    let stamp = Stamp::read(&headers).map_err(|e| ApiError::bad_request(e.to_string()))?;
    if stamp.from != add.id {
        return Err(ApiError::bad_request(format!(
            "node {} asks to add node {}: a node joins itself",
            stamp.from, add.id
        )));
    }
    if let Some(terms) = leasehold_raft::Terms::read(&headers) {
        node.config
            .honours_leader_lease(terms.leader_lease)
            .map_err(ApiError::bad_request)?;
    }
    add.store = Some(stamp.store.to_string());
    let change = leasehold_api::MemberChange::Add(add);
    Ok(Json(node.change_members(change, false).await?))
}

/// A node on a new data directory asks that its id's old one be removed
/// (`serve --rejoin`); the identity guard let it through though this node
/// may know the id on another directory, so the stamp names the only id it
/// may ask for.
async fn internal_retire_self(
    State(node): State<Shared>,
    headers: HeaderMap,
) -> Result<Json<leasehold_api::RetireAnswer>, ApiError> {
    let stamp = Stamp::read(&headers).map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(Json(node.retire_for(stamp).await?))
}

/// The speaker removed this node.
async fn internal_removed(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let notice: leasehold_api::Removed = peer_body(&bytes)?;
    node.removal_notice(&notice)?;
    Ok(Json(serde_json::json!({})))
}

/// Sets this node's fault plan; only a node started with `--chaos` accepts.
async fn internal_chaos(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    if !node.config.chaos {
        return Err(ApiError::new(
            ErrorCode::Disabled,
            "fault injection is off (start the node with --chaos)",
        ));
    }
    let plan: leasehold_raft::FaultPlan = peer_body(&bytes)?;
    tracing::warn!(?plan, "chaos: fault plan set");
    node.set_chaos_sabotage(&plan);
    node.peers.faults().set(plan);
    Ok(Json(serde_json::json!({})))
}
