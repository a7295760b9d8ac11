//! The HTTP API of SPEC §2 and the peer routes under `/internal/`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, RawQuery, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use leasehold_api::Body as _;
use leasehold_api::{
    parse_body, AcquireBody, ClusterAnswer, ErrorBody, ErrorCode, ForwardAcquire, ForwardRelease,
    ForwardRenew, ListQuery, LockAnswer, LocksAnswer, Member, PeerLock, ReleaseBody, RenewBody,
    MAX_BODY_BYTES,
};
use leasehold_raft::{raft_router, token_matches, WatchReceiver, TOKEN_HEADER};
use locktable::{Lock, LockId, LockInTransit};

use crate::error::ApiError;
use crate::node::{AcquireRequest, Node};

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
        .route("/internal/held", post(internal_held))
        .route("/internal/forward/acquire", post(forward_acquire))
        .route("/internal/forward/release", post(forward_release))
        .route("/internal/forward/renew", post(forward_renew))
        .route("/internal/forward/get", post(forward_get))
        .route("/internal/forward/list", post(forward_list))
        .route("/internal/forget", post(internal_forget))
        .route("/internal/lost", post(internal_lost))
        .with_state(Arc::clone(&node))
        .merge(raft_router(node.raft.clone()));
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/v1/locks/acquire", post(acquire))
        .route("/v1/locks/release", post(release))
        .route("/v1/locks/renew", post(renew))
        .route("/v1/locks", get(list))
        .route("/v1/locks/{name}", get(get_lock))
        .route("/v1/cluster", get(cluster))
        .with_state(Arc::clone(&node))
        .merge(internal)
        .fallback(|| async { ApiError::new(ErrorCode::NotHeld, "no such route") })
        .layer(axum::middleware::from_fn_with_state(node, guard_internal))
        .layer(axum::extract::DefaultBodyLimit::max(READ_LIMIT_BYTES))
}

/// Every request under `/internal/`, whatever its path or method, needs the
/// cluster token; nothing else about the peer routes shows without it.
async fn guard_internal(State(node): State<Shared>, request: Request, next: Next) -> Response {
    if request.uri().path().starts_with("/internal") {
        let given = request
            .headers()
            .get(TOKEN_HEADER)
            .map(|v| v.as_bytes())
            .unwrap_or(b"");
        if !token_matches(&node.config.cluster_token, given) {
            return ApiError::new(
                ErrorCode::Unauthorized,
                "the cluster token is missing or wrong",
            )
            .into_response();
        }
    }
    next.run(request).await
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
    })
}

fn passed_on(e: ErrorBody) -> ApiError {
    ApiError { body: Box::new(e) }
}

/// Where to send a request this node cannot serve itself.
fn speaker_addr(node: &Node) -> Result<String, ApiError> {
    node.leader()
        .map(|(_, addr)| addr)
        .ok_or_else(ApiError::no_leader)
}

fn forward_timeout(wait: Duration) -> Duration {
    wait + Duration::from_secs(5)
}

async fn acquire(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<LockAnswer>, ApiError> {
    let request: AcquireBody = body(&bytes)?;
    let wanted = to_request(&request);
    if node.is_leader() {
        let lock = node.speak_acquire(wanted, node.id()).await?;
        return Ok(answer(&node, &lock));
    }
    let addr = speaker_addr(&node)?;
    let sent = node.clock.now();
    let forwarded = ForwardAcquire {
        body: request,
        node: node.id(),
    };
    let granted: PeerLock = node
        .peers
        .call(
            &addr,
            "/internal/forward/acquire",
            &forwarded,
            forward_timeout(wanted.wait),
        )
        .await
        .map_err(|e| {
            ApiError::new(
                ErrorCode::NotRebuilt,
                format!("the speaker did not answer: {e}"),
            )
        })?
        .map_err(passed_on)?;
    let lock = LockInTransit::try_from(granted)
        .map_err(|e| ApiError::internal(e.to_string()))?
        .arrive(sent);
    node.record_held(lock.clone());
    Ok(answer(&node, &lock))
}

fn to_request(body: &AcquireBody) -> AcquireRequest {
    AcquireRequest {
        name: body.name.clone(),
        holder: body.holder().to_string(),
        lease: body.lease(),
        wait: body.wait(),
        data: body.data.clone(),
    }
}

async fn release(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<LockAnswer>, ApiError> {
    let request: ReleaseBody = body(&bytes)?;
    let id: LockId = request.id.parse().map_err(bad)?;
    if node.is_leader() {
        let lock = node.speak_release(&request.name, id)?;
        return Ok(answer(&node, &lock));
    }
    let addr = speaker_addr(&node)?;
    let forwarded = ForwardRelease {
        name: request.name.clone(),
        id: request.id.clone(),
        node: node.id(),
    };
    let released: PeerLock = node
        .peers
        .call(
            &addr,
            "/internal/forward/release",
            &forwarded,
            forward_timeout(Duration::ZERO),
        )
        .await
        .map_err(|e| {
            ApiError::new(
                ErrorCode::NotRebuilt,
                format!("the speaker did not answer: {e}"),
            )
        })?
        .map_err(passed_on)?;
    node.drop_held(id);
    let lock = LockInTransit::try_from(released)
        .map_err(|e| ApiError::internal(e.to_string()))?
        .arrive(node.clock.now());
    Ok(answer(&node, &lock))
}

async fn renew(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<LockAnswer>, ApiError> {
    let request: RenewBody = body(&bytes)?;
    let id: LockId = request.id.parse().map_err(bad)?;
    let lease = request.lease_ms.map(Duration::from_millis);
    let record = node.held_record(id);
    if node.is_leader() {
        let lock = node.speak_renew(&request.name, id, lease, node.id(), record)?;
        return Ok(answer(&node, &lock));
    }
    let addr = speaker_addr(&node)?;
    let sent = node.clock.now();
    let forwarded = ForwardRenew {
        name: request.name.clone(),
        id: request.id.clone(),
        lease_ms: request.lease_ms,
        node: node.id(),
        record: record.map(|l| PeerLock::from(l.in_transit(sent))),
    };
    let outcome = node
        .peers
        .call::<_, PeerLock>(
            &addr,
            "/internal/forward/renew",
            &forwarded,
            forward_timeout(Duration::ZERO),
        )
        .await
        .map_err(|e| {
            ApiError::new(
                ErrorCode::NotRebuilt,
                format!("the speaker did not answer: {e}"),
            )
        })?;
    match outcome {
        Ok(renewed) => {
            let lock = LockInTransit::try_from(renewed)
                .map_err(|e| ApiError::internal(e.to_string()))?
                .arrive(sent);
            node.record_held(lock.clone());
            Ok(answer(&node, &lock))
        }
        Err(e) => {
            if e.error == ErrorCode::NotHeld {
                node.drop_held(id);
            }
            Err(passed_on(e))
        }
    }
}

async fn get_lock(
    State(node): State<Shared>,
    Path(name): Path<String>,
) -> Result<Json<LockAnswer>, ApiError> {
    leasehold_api::validate_name(&name).map_err(bad)?;
    let lock = if node.is_leader() {
        node.speak_get(&name)?
    } else {
        let addr = speaker_addr(&node)?;
        let sent = node.clock.now();
        let found: Option<PeerLock> = node
            .peers
            .call(
                &addr,
                "/internal/forward/get",
                &name,
                forward_timeout(Duration::ZERO),
            )
            .await
            .map_err(|e| {
                ApiError::new(
                    ErrorCode::NotRebuilt,
                    format!("the speaker did not answer: {e}"),
                )
            })?
            .map_err(passed_on)?;
        found
            .map(LockInTransit::try_from)
            .transpose()
            .map_err(|e| ApiError::internal(e.to_string()))?
            .map(|l| l.arrive(sent))
    };
    lock.map(|l| answer(&node, &l))
        .ok_or_else(ApiError::not_held)
}

async fn list(
    State(node): State<Shared>,
    RawQuery(raw): RawQuery,
) -> Result<Json<LocksAnswer>, ApiError> {
    let query = ListQuery::parse(raw.as_deref()).map_err(bad)?;
    query.validate().map_err(bad)?;
    let (prefix, limit) = (query.prefix().to_string(), query.limit());
    let locks = if node.is_leader() {
        node.speak_list(&prefix, limit)?
    } else {
        let addr = speaker_addr(&node)?;
        let sent = node.clock.now();
        let found: Vec<PeerLock> = node
            .peers
            .call(
                &addr,
                "/internal/forward/list",
                &(prefix, limit),
                forward_timeout(Duration::ZERO),
            )
            .await
            .map_err(|e| {
                ApiError::new(
                    ErrorCode::NotRebuilt,
                    format!("the speaker did not answer: {e}"),
                )
            })?
            .map_err(passed_on)?;
        found
            .into_iter()
            .map(|p| LockInTransit::try_from(p).map(|l| l.arrive(sent)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| ApiError::internal(e.to_string()))?
    };
    Ok(Json(LocksAnswer {
        locks: locks.iter().map(|l| node.view(l)).collect(),
    }))
}

async fn cluster(State(node): State<Shared>) -> Json<ClusterAnswer> {
    let metrics = node.raft.metrics().borrow_watched().clone();
    let state = node.state();
    let members = node
        .config
        .peers
        .iter()
        .map(|(id, addr)| Member {
            id: *id,
            addr: addr.clone(),
            state: if Some(*id) == metrics.current_leader {
                "leader".into()
            } else {
                "follower".into()
            },
        })
        .collect();
    Json(ClusterAnswer {
        node: node.id(),
        leader: metrics.current_leader,
        term: metrics.current_term,
        rebuilt: state.table.is_rebuilt(),
        generation: state.table.generation(),
        members,
        last_rebuild: state.last_rebuild.clone(),
    })
}

// ---- peer routes ----

fn transit(node: &Node, lock: &Lock) -> Json<PeerLock> {
    Json(PeerLock::from(lock.in_transit(node.clock.now())))
}

async fn internal_held(State(node): State<Shared>) -> impl IntoResponse {
    Json(node.own_report())
}

async fn forward_acquire(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<PeerLock>, ApiError> {
    let forwarded: ForwardAcquire = peer_body(&bytes)?;
    forwarded.body.validate().map_err(bad)?;
    let lock = node
        .speak_acquire(to_request(&forwarded.body), forwarded.node)
        .await?;
    Ok(transit(&node, &lock))
}

async fn forward_release(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<PeerLock>, ApiError> {
    let forwarded: ForwardRelease = peer_body(&bytes)?;
    let id: LockId = forwarded.id.parse().map_err(bad)?;
    let lock = node.speak_release(&forwarded.name, id)?;
    Ok(transit(&node, &lock))
}

async fn forward_renew(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<PeerLock>, ApiError> {
    let forwarded: ForwardRenew = peer_body(&bytes)?;
    let id: LockId = forwarded.id.parse().map_err(bad)?;
    let now = node.clock.now();
    let record = forwarded
        .record
        .map(LockInTransit::try_from)
        .transpose()
        .map_err(bad)?
        .map(|l| l.arrive(now));
    let lease = forwarded.lease_ms.map(Duration::from_millis);
    let lock = node.speak_renew(&forwarded.name, id, lease, forwarded.node, record)?;
    Ok(transit(&node, &lock))
}

async fn forward_get(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<Option<PeerLock>>, ApiError> {
    let name: String = peer_body(&bytes)?;
    let lock = node.speak_get(&name)?;
    Ok(Json(
        lock.map(|l| PeerLock::from(l.in_transit(node.clock.now()))),
    ))
}

async fn forward_list(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<Vec<PeerLock>>, ApiError> {
    let (prefix, limit): (String, usize) = peer_body(&bytes)?;
    let now = node.clock.now();
    let locks = node.speak_list(&prefix, limit)?;
    Ok(Json(
        locks
            .iter()
            .map(|l| PeerLock::from(l.in_transit(now)))
            .collect(),
    ))
}

async fn internal_forget(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let forget: leasehold_api::Forget = peer_body(&bytes)?;
    let id: LockId = forget.id.parse().map_err(bad)?;
    node.forget(&forget.name, id);
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
