//! The public HTTP API (docs/api.md): what clients call.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Extension, Path, RawQuery, Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use leasehold_api::{
    millis_floor, parse_body, read_body, AcquireBody, AddMemberBody, Body, ClusterAnswer,
    ErrorCode, ListQuery, LockAnswer, LocksAnswer, MemberChange, ReleaseBody, RenewBody,
    SessionAnswer, SessionBody, SessionClosed, SessionOpenBody, Watch,
};
use locktable::Lock;
use tokio::time::Instant;

use leasehold_acl::Right;

use super::access::{authenticate, Caller};
use super::{raw, wrong_method, Shared};
use crate::error::ApiError;
use crate::node::Node;

/// The public routes, their state still to be given.
pub(super) fn router(node: Shared) -> Router<Shared> {
    Router::new()
        .route("/", get(status_page))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .route("/v1/cluster/history", get(history))
        .route("/metrics", get(metrics))
        .route("/v1/openapi.json", get(openapi))
        .route("/v1/locks/acquire", post(acquire))
        .route("/v1/locks/release", post(release))
        .route("/v1/locks/renew", post(renew))
        .route("/v1/sessions/open", post(open_session))
        .route("/v1/sessions/renew", post(renew_session))
        .route("/v1/sessions/close", post(close_session))
        .route("/v1/locks", get(list))
        .route("/v1/locks/{name}", get(get_lock))
        .route("/v1/cluster", get(cluster))
        .route("/v1/cluster/members", post(add_member))
        .route("/v1/cluster/members/{id}", delete(remove_member))
        .method_not_allowed_fallback(wrong_method)
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&node),
            client_faults,
        ))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&node),
            refuse_once_removed,
        ))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&node),
            authenticate,
        ))
        .layer(axum::middleware::from_fn_with_state(node, observe))
}

/// Set by a handler whose call asked to wait (an acquire with `wait_ms`,
/// a watch): its time goes to the waiting calls' histogram, not the fast
/// calls'.
#[derive(Clone, Default)]
struct Waits(Arc<std::sync::atomic::AtomicBool>);

impl Waits {
    fn set(&self, waits: bool) {
        self.0.store(waits, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Times every public request into the request histograms, by the route
/// it matched and its status class: calls that asked to wait apart.
async fn observe(State(node): State<Shared>, mut request: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .cloned();
    let waits = Waits::default();
    request.extensions_mut().insert(waits.clone());
    let response = next.run(request).await;
    node.metrics.observe_request(
        route.as_ref().map(|p| p.as_str()),
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
        waits.0.load(std::sync::atomic::Ordering::Relaxed),
    );
    response
}

/// The status page, from the binary: no external assets; it reads the
/// JSON API itself.
const STATUS_PAGE: &str = include_str!("status.html");

/// `GET /`: the status page (open: it holds no data; with `--acl` it asks
/// for a token and sends it with its reads).
async fn status_page() -> axum::response::Html<&'static str> {
    axum::response::Html(STATUS_PAGE)
}

/// `GET /v1/openapi.json`: the API's description.
async fn openapi() -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        leasehold_api::OPENAPI_JSON,
    )
        .into_response()
}

/// `GET /metrics`: every series, in the Prometheus text format, or in
/// OpenMetrics text for a scraper that asks for it (`Accept:
/// application/openmetrics-text`).
async fn metrics(State(node): State<Shared>, headers: axum::http::HeaderMap) -> Response {
    let openmetrics = headers
        .get_all(axum::http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/openmetrics-text"));
    let content_type = match openmetrics {
        true => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        false => "text/plain; version=0.0.4; charset=utf-8",
    };
    (
        [(axum::http::header::CONTENT_TYPE, content_type)],
        node.metrics_text(openmetrics),
    )
        .into_response()
}

/// A node removed from the cluster serves its clients no more: `503
/// no_leader` on the lock routes, so they move to another endpoint.
async fn refuse_once_removed(State(node): State<Shared>, request: Request, next: Next) -> Response {
    if node.is_removed() && request.uri().path().starts_with("/v1/locks") {
        return ApiError::new(
            ErrorCode::NoLeader,
            "this node was removed from the cluster: ask another member",
        )
        .into_response();
    }
    next.run(request).await
}

/// The fault plan's faults of client calls, on a node run with `--chaos`
/// (docs/harness.md: `chaos refuse`, `lag`, `lose-answer`): refused
/// unserved, answered late, or served and never answered.
async fn client_faults(State(node): State<Shared>, request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if !node.config.chaos || !(path.starts_with("/v1/locks") || path.starts_with("/v1/sessions")) {
        return next.run(request).await;
    }
    let faults = node.peers.faults();
    let plan = faults.plan();
    if plan.refuse_clients {
        return ApiError::new(
            ErrorCode::NoLeader,
            "chaos: this node refuses client calls (`leasehold chaos refuse`)",
        )
        .into_response();
    }
    let response = next.run(request).await;
    if plan.lose_next_answer && faults.take_lost_answer() {
        // The caller gives up and closes the connection, which drops this.
        std::future::pending::<()>().await;
    }
    if plan.client_answer_lag_ms > 0 {
        tokio::time::sleep(Duration::from_millis(plan.client_answer_lag_ms)).await;
    }
    response
}

fn body<T: leasehold_api::Body>(bytes: &Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    Ok(read_body(raw(bytes)?)?)
}

fn answer(node: &Node, lock: &Lock) -> Json<LockAnswer> {
    Json(LockAnswer {
        locks: None,
        lock: node.view(lock),
        served_ms: 0,
        not_held: None,
    })
}

/// `lock` as `caller` may see it: its id only if the caller may lock the
/// name (the id is what renews and releases it).
fn seen_by(caller: &Caller, node: &Node, lock: &Lock) -> leasehold_api::LockView {
    let mut view = node.view(lock);
    if !caller.may(Right::Lock, &view.name) {
        view.id = String::new();
    }
    view
}

async fn acquire(
    State(node): State<Shared>,
    Extension(caller): Extension<Caller>,
    waits: Option<Extension<Waits>>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<LockAnswer>, ApiError> {
    let received = Instant::now();
    let mut request: AcquireBody = body(&bytes)?;
    // A longer wait is cut to the node's --max-wait: the caller asks again.
    let max_wait = u64::try_from(node.config.max_wait.as_millis()).unwrap_or(u64::MAX);
    request.wait_ms = request.wait_ms.map(|w| w.min(max_wait));
    if let Some(Extension(waits)) = waits {
        waits.set(!request.wait().is_zero());
    }
    for name in request.all_names() {
        caller.check(Right::Lock, &name)?;
    }
    let set = request.is_set();
    let locks = node.acquire_locks(request).await?;
    let views: Vec<leasehold_api::LockView> = locks.iter().map(|lock| node.view(lock)).collect();
    Ok(Json(LockAnswer {
        lock: views[0].clone(),
        served_ms: millis_floor(received.elapsed()),
        locks: set.then_some(views),
        not_held: None,
    }))
}

async fn release(
    State(node): State<Shared>,
    Extension(caller): Extension<Caller>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<LockAnswer>, ApiError> {
    let received = Instant::now();
    let request: ReleaseBody = body(&bytes)?;
    request.validate()?;
    for lock in request.all_locks() {
        caller.check(Right::Lock, &lock.name)?;
    }
    if !request.is_set() {
        let lock = node.release(request).await?;
        return Ok(answer(&node, &lock));
    }
    let released = node.release_set(request).await?;
    let views: Vec<leasehold_api::LockView> =
        released.locks.iter().map(|lock| node.view(lock)).collect();
    Ok(Json(LockAnswer {
        lock: views[0].clone(),
        served_ms: millis_floor(received.elapsed()),
        locks: Some(views),
        not_held: (!released.not_held.is_empty()).then_some(released.not_held),
    }))
}

async fn renew(
    State(node): State<Shared>,
    Extension(caller): Extension<Caller>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<LockAnswer>, ApiError> {
    let request: RenewBody = body(&bytes)?;
    caller.check(Right::Lock, &request.name)?;
    let lock = node.renew(request).await?;
    Ok(answer(&node, &lock))
}

async fn open_session(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<SessionAnswer>, ApiError> {
    let received = Instant::now();
    let request: SessionOpenBody = body(&bytes)?;
    let session = node.open_session(request).await?;
    Ok(Json(SessionAnswer {
        session: node.session_view(&session, None),
        served_ms: millis_floor(received.elapsed()),
        held: None,
    }))
}

async fn renew_session(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<SessionAnswer>, ApiError> {
    let received = Instant::now();
    let request: SessionBody = body(&bytes)?;
    let renewed = node.renew_session(request).await?;
    Ok(Json(SessionAnswer {
        session: node.session_view(&renewed.session, Some(renewed.locks)),
        served_ms: millis_floor(received.elapsed()),
        held: renewed
            .held
            .map(|ids| ids.iter().map(ToString::to_string).collect()),
    }))
}

async fn close_session(
    State(node): State<Shared>,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<SessionClosed>, ApiError> {
    let request: SessionBody = body(&bytes)?;
    let (session, released) = node.close_session(request).await?;
    Ok(Json(SessionClosed {
        session: node.session_view(&session, Some(released)),
        released,
    }))
}

/// `?wait_ms=&after_fence=&after_data=`: wait for the lock to change (long
/// poll): its fence, or its data's tag if `after_data` is given.
fn watch_query(raw: Option<&str>) -> Result<Option<Watch>, ApiError> {
    let mut wait = None;
    let mut after_fence = 0;
    let mut after_data = None;
    for pair in raw.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let number = |field: &str| {
            value.parse::<u64>().map_err(|_| {
                ApiError::bad_request(format!(
                    "`{field}` must be a non-negative integer that fits in 64 bits"
                ))
            })
        };
        match key {
            "wait_ms" => wait = Some(Duration::from_millis(number("wait_ms")?)),
            "after_fence" => after_fence = number("after_fence")?,
            "after_data" => after_data = Some(number("after_data")?),
            _ => {}
        }
    }
    Ok(wait.map(|wait| Watch {
        wait,
        after_fence,
        after_data,
    }))
}

async fn get_lock(
    State(node): State<Shared>,
    Extension(caller): Extension<Caller>,
    name: Result<Path<String>, PathRejection>,
    RawQuery(raw): RawQuery,
    waits: Option<Extension<Waits>>,
) -> Result<Json<LockAnswer>, ApiError> {
    let Path(name) = name
        .map_err(|e| ApiError::bad_request(format!("the name in the path: {}", e.body_text())))?;
    caller.check(Right::Read, &name)?;
    let watch = watch_query(raw.as_deref())?.map(|w| Watch {
        wait: w.wait.min(node.config.max_wait),
        ..w
    });
    if let Some(Extension(waits)) = waits {
        waits.set(watch.is_some_and(|w| !w.wait.is_zero()));
    }
    // Without a watch, with the requests waiting for it.
    let (lock, waiting) = match watch {
        None => node.get_waiting(&name).await?.unzip(),
        Some(_) => (node.get(&name, watch).await?, None),
    };
    let lock = lock.ok_or_else(|| ApiError::free(&name))?;
    Ok(Json(LockAnswer {
        locks: None,
        lock: crate::embedded::with_waiting(&lock, waiting, &node, |l| seen_by(&caller, &node, l)),
        served_ms: 0,
        not_held: None,
    }))
}

/// A listing shows only the names the caller may read (a token's listing
/// may hold fewer than `limit` locks, the others filtered out).
async fn list(
    State(node): State<Shared>,
    Extension(caller): Extension<Caller>,
    RawQuery(raw): RawQuery,
) -> Result<Json<LocksAnswer>, ApiError> {
    let query = ListQuery::parse(raw.as_deref())?;
    let listing = node.list(query.prefix(), query.limit()).await?;
    // A token that may not read every name is not told how many there are.
    let total = match caller {
        Caller::Open | Caller::Cluster => listing.total.map(|t| t as u64),
        Caller::Token(_) => None,
    };
    let locks = crate::embedded::listed(listing, &node, |l| seen_by(&caller, &node, l))
        .into_iter()
        .filter(|view| caller.may(Right::Read, &view.name))
        .collect();
    Ok(Json(LocksAnswer { locks, total }))
}

/// `GET /v1/cluster`: this node's view, or with `?view=speaker` the
/// speaker's (asked of it by this node; this node's own, saying why, if it
/// cannot be had).
async fn cluster(
    State(node): State<Shared>,
    RawQuery(raw): RawQuery,
) -> Result<Json<ClusterAnswer>, ApiError> {
    Ok(Json(match speaker_view(raw.as_deref())? {
        true => node.speaker_cluster().await,
        false => node.cluster(),
    }))
}

/// `GET /v1/cluster/history`: this node's rebuilds, or with
/// `?view=speaker` the speaker's.
async fn history(
    State(node): State<Shared>,
    RawQuery(raw): RawQuery,
) -> Result<Json<leasehold_api::HistoryAnswer>, ApiError> {
    Ok(Json(match speaker_view(raw.as_deref())? {
        true => node.speaker_history().await,
        false => node.history(),
    }))
}

/// Whether a view's query asks for the speaker's view (`view=speaker`;
/// `view=own`, or none, is the answering node's). Other keys are skipped
/// (a dashboard's cache buster); another `view` is a `400`.
fn speaker_view(raw: Option<&str>) -> Result<bool, ApiError> {
    let mut speaker = false;
    for pair in raw.unwrap_or("").split('&') {
        match pair.split_once('=') {
            Some(("view", "speaker")) => speaker = true,
            Some(("view", "own")) => speaker = false,
            Some(("view", other)) => {
                return Err(ApiError::bad_request(format!(
                    "view={other:?}: this route takes view=speaker or view=own"
                )))
            }
            _ => {}
        }
    }
    Ok(speaker)
}

/// The name `/readyz` looks up at the speaker (whether anyone holds it
/// does not matter).
const READY_PROBE: &str = "leasehold/readyz";

/// How long `/readyz` waits for the speaker.
const READY_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// `GET /readyz`: `200` when a speaker is known and rebuilt, and this node
/// reaches it (a lookup of one name through it answers); the error that stops
/// a lock call otherwise (`503 no_leader`, `503 not_rebuilt`, ...).
async fn ready(State(node): State<Shared>) -> Result<Json<serde_json::Value>, ApiError> {
    // One name looked up through the speaker, not a listing: it proves the
    // same (a speaker known, rebuilt, reachable) at the cost of one hash
    // lookup, where a listing walked the speaker's whole table under its
    // lock, for a route that asks for no token.
    let reached = tokio::time::timeout(READY_WAIT, node.get(READY_PROBE, None)).await;
    match reached {
        Ok(Ok(_)) => Ok(Json(serde_json::json!({
            "ready": true,
            "node": node.id(),
            "speaker": node.cluster().leader,
        }))),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(ApiError::new(
            ErrorCode::NoLeader,
            format!("the speaker did not answer within {READY_WAIT:?}"),
        )),
    }
}

/// `POST /v1/cluster/members`: an operator's call, with the cluster token
/// or an admin token.
async fn add_member(
    State(node): State<Shared>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    bytes: Result<Bytes, BytesRejection>,
) -> Result<Json<ClusterAnswer>, ApiError> {
    caller.check_admin(&node, &headers)?;
    let mut body: AddMemberBody = parse_body(raw(&bytes)?)?;
    // A data directory's id comes from the node's own join, never from
    // an operator's request.
    body.store = None;
    Ok(Json(
        node.change_members(MemberChange::Add(body), false).await?,
    ))
}

/// `DELETE /v1/cluster/members/{id}`: an operator's call, with the cluster
/// token or an admin token.
async fn remove_member(
    State(node): State<Shared>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    id: Result<Path<String>, PathRejection>,
) -> Result<Json<ClusterAnswer>, ApiError> {
    caller.check_admin(&node, &headers)?;
    let Path(id) = id.map_err(|e| ApiError::new(ErrorCode::BadRequest, e.body_text()))?;
    let id = id.parse::<u64>().ok().filter(|id| *id > 0).ok_or_else(|| {
        ApiError::new(
            ErrorCode::BadRequest,
            format!("{id:?} is not a member id (1 or more)"),
        )
    })?;
    let change = MemberChange::Remove { id };
    Ok(Json(node.change_members(change, false).await?))
}
