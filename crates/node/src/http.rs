//! The HTTP API of SPEC §2 and the peer routes under `/internal/`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Path, RawQuery, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use leasehold_api::{
    millis_floor, parse_body, routes, AcquireBody, ClusterAnswer, ErrorCode, ForwardAcquire,
    ForwardAnswer, ForwardAnswers, ForwardBatch, ForwardCall, ForwardGet, ForwardList, Granted,
    ListQuery, LockAnswer, LocksAnswer, PeerLock, ReleaseBody, RenewBody, Watch, MAX_BODY_BYTES,
};
use leasehold_raft::{raft_router, token_matches, TOKEN_HEADER};
use locktable::{Lock, LockId};

use crate::error::ApiError;
use crate::node::Node;

type Shared = Arc<Node>;

/// How much of a body is read before answering: bodies over
/// `MAX_BODY_BYTES` but under this are read whole and answered `413` as
/// JSON on a connection that stays usable; a client still sending a larger
/// body when the answer goes may see the connection close instead.
const READ_LIMIT_BYTES: usize = 4 << 20;

/// The node's router: the public API, and the peer routes behind the
/// cluster token.
pub fn router(node: Shared) -> Router {
    let internal = Router::new()
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
        .route(routes::FORWARD_GET, post(forward_get))
        .route(routes::FORWARD_LIST, post(forward_list))
        .route(routes::FORGET, post(internal_forget))
        .route(routes::LOST, post(internal_lost))
        .route(routes::COPIES, post(internal_copies))
        .route(routes::IDENTITY, post(internal_identity))
        .with_state(Arc::clone(&node))
        .merge(raft_router(node.raft.clone()))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&node.identity),
            leasehold_raft::identity::guard,
        ))
        // An operator's (or a test's) route, not a member's: no identity.
        .route(
            routes::CHAOS,
            post(internal_chaos).with_state(Arc::clone(&node)),
        )
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&node),
            guard_internal,
        ));
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/v1/locks/acquire", post(acquire))
        .route("/v1/locks/release", post(release))
        .route("/v1/locks/renew", post(renew))
        .route("/v1/locks", get(list))
        .route("/v1/locks/{name}", get(get_lock))
        .route("/v1/cluster", get(cluster))
        .fallback(no_such_route)
        .with_state(node)
        .merge(internal)
        .layer(axum::extract::DefaultBodyLimit::max(READ_LIMIT_BYTES))
}

/// Every request under `/internal/`, whatever its path or method, needs the
/// cluster token; nothing else about the peer routes shows without it. The
/// public routes do not pass through this check. Past it, the identity
/// guard admits the sender's data directory and stamps the answer.
async fn guard_internal(State(node): State<Shared>, request: Request, next: Next) -> Response {
    match refuse_without_token(&node, &request) {
        Some(refused) => refused.into_response(),
        None => next.run(request).await,
    }
}

/// `401` for a request without the cluster token (the caller has checked
/// that the request is for the peer routes).
fn refuse_without_token(node: &Node, request: &Request) -> Option<ApiError> {
    let given = request
        .headers()
        .get(TOKEN_HEADER)
        .map(|v| v.as_bytes())
        .unwrap_or(b"");
    (!token_matches(&node.config.cluster_token, given)).then(|| {
        ApiError::new(
            ErrorCode::Unauthorized,
            "the cluster token is missing or wrong",
        )
    })
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

/// No route matched: `404`, or `401` under `/internal` without the token
/// (so the peer routes' names do not show).
async fn no_such_route(State(node): State<Shared>, request: Request) -> ApiError {
    if request.uri().path().starts_with(routes::PREFIX) {
        if let Some(refused) = refuse_without_token(&node, &request) {
            return refused;
        }
    }
    ApiError::new(ErrorCode::NotHeld, "no such route")
}

/// The body's bytes, or a JSON error: `413 too_large` past
/// `MAX_BODY_BYTES`, `400` when it could not be read.
fn raw(bytes: &Result<Bytes, BytesRejection>) -> Result<&Bytes, ApiError> {
    match bytes {
        Ok(bytes) if bytes.len() <= MAX_BODY_BYTES => Ok(bytes),
        Ok(_) => Err(too_large()),
        Err(e) if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE => Err(too_large()),
        Err(e) => Err(ApiError::new(ErrorCode::BadRequest, e.body_text())),
    }
}

fn too_large() -> ApiError {
    ApiError::new(
        ErrorCode::TooLarge,
        format!("the body is larger than {MAX_BODY_BYTES} bytes"),
    )
}

fn body<T: leasehold_api::Body>(bytes: &Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    parse_body(raw(bytes)?).map_err(|e| ApiError::new(ErrorCode::BadRequest, e.to_string()))
}

/// A peer's body: peers are trusted to send well-formed JSON.
fn peer_body<T: serde::de::DeserializeOwned>(
    bytes: &Result<Bytes, BytesRejection>,
) -> Result<T, ApiError> {
    serde_json::from_slice(raw(bytes)?)
        .map_err(|e| ApiError::new(ErrorCode::BadRequest, e.to_string()))
}

fn bad(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(ErrorCode::BadRequest, e.to_string())
}

fn answer(node: &Node, lock: &Lock) -> Json<LockAnswer> {
    Json(LockAnswer {
        lock: node.view(lock),
        served_ms: 0,
    })
}

async fn acquire(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<LockAnswer>, ApiError> {
    let received = Instant::now();
    let request: AcquireBody = body(&bytes)?;
    let lock = node.acquire(request).await?;
    Ok(Json(LockAnswer {
        lock: node.view(&lock),
        served_ms: millis_floor(received.elapsed()),
    }))
}

async fn release(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<LockAnswer>, ApiError> {
    let request: ReleaseBody = body(&bytes)?;
    let lock = node.release(request).await?;
    Ok(answer(&node, &lock))
}

async fn renew(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<LockAnswer>, ApiError> {
    let request: RenewBody = body(&bytes)?;
    let lock = node.renew(request).await?;
    Ok(answer(&node, &lock))
}

/// `?wait_ms=&after_fence=`: wait for the lock to change (long poll).
fn watch_query(raw: Option<&str>) -> Result<Option<Watch>, ApiError> {
    let mut wait = None;
    let mut after_fence = 0;
    for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let number = |field: &str| {
            value.parse::<u64>().map_err(|_| {
                bad(format!(
                    "`{field}` must be a non-negative integer that fits in 64 bits"
                ))
            })
        };
        match key {
            "wait_ms" => wait = Some(Duration::from_millis(number("wait_ms")?)),
            "after_fence" => after_fence = number("after_fence")?,
            _ => {}
        }
    }
    Ok(wait.map(|wait| Watch { wait, after_fence }))
}

async fn get_lock(
    State(node): State<Shared>,
    name: Result<Path<String>, PathRejection>,
    RawQuery(raw): RawQuery,
) -> Result<Json<LockAnswer>, ApiError> {
    let Path(name) = name.map_err(|e| bad(format!("the name in the path: {}", e.body_text())))?;
    leasehold_api::validate_name(&name).map_err(bad)?;
    let watch = watch_query(raw.as_deref())?;
    let lock = node.get(&name, watch).await?;
    lock.map(|l| answer(&node, &l))
        .ok_or_else(ApiError::not_held)
}

async fn list(
    State(node): State<Shared>,
    RawQuery(raw): RawQuery,
) -> Result<Json<LocksAnswer>, ApiError> {
    let query = ListQuery::parse(raw.as_deref()).map_err(bad)?;
    query.validate().map_err(bad)?;
    let locks = node.list(query.prefix(), query.limit()).await?;
    Ok(Json(LocksAnswer {
        locks: locks.iter().map(|l| node.view(l)).collect(),
    }))
}

async fn cluster(State(node): State<Shared>) -> Json<ClusterAnswer> {
    Json(node.cluster())
}

// ---- peer routes ----

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
    let frames = tokio::task::spawn_blocking(move || node.report_frames())
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let body = axum::body::Body::from_stream(futures::stream::iter(
        frames
            .into_iter()
            .map(|frame| Ok::<_, std::convert::Infallible>(Bytes::from(frame))),
    ));
    Ok(([("content-type", "application/octet-stream")], body).into_response())
}

/// A forwarded acquire that may wait (those that do not come in batches).
async fn forward_acquire(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<Granted>, ApiError> {
    let received = Instant::now();
    let forwarded: ForwardAcquire = peer_body(&bytes)?;
    match node
        .serve_forwarded(ForwardCall::Acquire(forwarded), received, true)
        .await
    {
        ForwardAnswer::Granted(granted) => Ok(Json(granted)),
        ForwardAnswer::Refused(e) => Err(ApiError::from(e)),
        ForwardAnswer::Lock(_) => Err(ApiError::internal("an acquire answered with no grant")),
    }
}

/// Forwarded calls that answer at once, served in order and answered
/// together.
async fn forward_batch(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<ForwardAnswers>, ApiError> {
    let received = Instant::now();
    let batch: ForwardBatch = peer_body(&bytes)?;
    // Each call does its table work when first polled, in order; those
    // that wait for copies then wait together.
    let answers = futures::future::join_all(
        batch
            .calls
            .into_iter()
            .map(|call| node.serve_forwarded(call, received, false)),
    )
    .await;
    Ok(Json(ForwardAnswers { answers }))
}

async fn forward_get(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<Option<PeerLock>>, ApiError> {
    let forwarded: ForwardGet = peer_body(&bytes)?;
    let lock = node.speak_watch(&forwarded.name, forwarded.watch).await?;
    Ok(Json(lock.map(|l| node.transit(&l))))
}

async fn forward_list(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<Vec<PeerLock>>, ApiError> {
    let list: ForwardList = peer_body(&bytes)?;
    let now = node.clock.now();
    let locks = node.speak_list(&list.prefix, list.limit)?;
    Ok(Json(
        locks
            .iter()
            .map(|l| PeerLock::from(l.in_transit(now)))
            .collect(),
    ))
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

async fn internal_forget(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let batch: leasehold_api::Forgets = peer_body(&bytes)?;
    for forget in batch.forgets {
        let id: LockId = forget.id.parse().map_err(bad)?;
        // Counted from now, after the sender's send: no record of the
        // lease outlives it. An older sender says nothing: the longest.
        let left = forget
            .ttl_ms
            .map_or(node.config.lease.max, Duration::from_millis);
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
        .collect::<Result<Vec<_>, _>>()
        .map_err(bad)?;
    node.lost(ids);
    Ok(Json(serde_json::json!({})))
}

/// Sets this node's fault plan; only a node started with `--chaos` accepts.
/// A member asking whether this node admits it: the identity guard has
/// answered by the time this runs.
async fn internal_identity() -> Json<serde_json::Value> {
    Json(serde_json::json!({}))
}

async fn internal_chaos(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    if !node.config.chaos {
        return Err(ApiError::new(
            ErrorCode::NotHeld,
            "fault injection is off (start the node with --chaos)",
        ));
    }
    let plan: leasehold_raft::FaultPlan = peer_body(&bytes)?;
    tracing::warn!(?plan, "chaos: fault plan set");
    node.peers.faults().set(plan);
    Ok(Json(serde_json::json!({})))
}
