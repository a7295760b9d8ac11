//! The public HTTP API (docs/api.md): what clients call.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::rejection::{BytesRejection, PathRejection};
use axum::extract::{Extension, Path, RawQuery, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use leasehold_acl::Right;
use leasehold_api::wire::{Answer, GetQuery, Request as Call, View};
use leasehold_api::{read_body, ErrorCode, ListQuery, Watch};

use super::access::{authenticate, Caller};
use super::calls;
use super::{raw, wrong_method, Shared};
use crate::error::ApiError;

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

fn body<T: leasehold_api::Body>(bytes: &Result<Bytes, BytesRejection>) -> Result<T, ApiError> {
    Ok(read_body(raw(bytes)?)?)
}

/// Serves a call read from an HTTP request to `route` ([`calls::serve`],
/// as a frame's is), or answers the error reading it (after the checks
/// that come before reading: see [`calls::serve`]).
async fn call(
    node: Shared,
    caller: Caller,
    route: &'static str,
    waits: Option<Extension<Waits>>,
    request: Result<Call, ApiError>,
) -> Response {
    if let (Ok(request), Some(Extension(waits))) = (&request, waits) {
        waits.set(calls::waits(request));
    }
    match calls::serve(&node, &caller, route, request).await {
        Some(answer) => respond(answer),
        None => {
            // `--chaos` lost the answer: the caller gives up and closes
            // the connection, which drops this.
            std::future::pending().await
        }
    }
}

/// An answer as HTTP sends it: `200` with its JSON, or the error's status.
fn respond(answer: Answer) -> Response {
    match answer {
        Answer::Lock(a) => Json(a).into_response(),
        Answer::Locks(a) => Json(a).into_response(),
        Answer::Session(a) => Json(a).into_response(),
        Answer::SessionClosed(a) => Json(a).into_response(),
        Answer::Cluster(a) => Json(a).into_response(),
        Answer::History(a) => Json(a).into_response(),
        Answer::Done => axum::http::StatusCode::NO_CONTENT.into_response(),
        Answer::Error(e) => ApiError::from(e).into_response(),
        // No public route is answered with a member's reply.
        Answer::Peer(_) => ApiError::new(
            leasehold_api::ErrorCode::Internal,
            "a member's reply to a client's call",
        )
        .into_response(),
    }
}

async fn acquire(
    State(node): State<Shared>,
    Extension(caller): Extension<Caller>,
    waits: Option<Extension<Waits>>,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    call(
        node,
        caller,
        "/v1/locks/acquire",
        waits,
        body(&bytes).map(Call::Acquire),
    )
    .await
}

async fn release(
    State(node): State<Shared>,
    Extension(caller): Extension<Caller>,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    call(
        node,
        caller,
        "/v1/locks/release",
        None,
        body(&bytes).map(Call::Release),
    )
    .await
}

async fn renew(
    State(node): State<Shared>,
    Extension(caller): Extension<Caller>,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    call(
        node,
        caller,
        "/v1/locks/renew",
        None,
        body(&bytes).map(Call::Renew),
    )
    .await
}

async fn open_session(
    State(node): State<Shared>,
    Extension(caller): Extension<Caller>,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    call(
        node,
        caller,
        "/v1/sessions/open",
        None,
        body(&bytes).map(Call::OpenSession),
    )
    .await
}

async fn renew_session(
    State(node): State<Shared>,
    Extension(caller): Extension<Caller>,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    call(
        node,
        caller,
        "/v1/sessions/renew",
        None,
        body(&bytes).map(Call::RenewSession),
    )
    .await
}

async fn close_session(
    State(node): State<Shared>,
    Extension(caller): Extension<Caller>,
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    call(
        node,
        caller,
        "/v1/sessions/close",
        None,
        body(&bytes).map(Call::CloseSession),
    )
    .await
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
) -> Response {
    let query = name
        .map_err(|e| ApiError::bad_request(format!("the name in the path: {}", e.body_text())))
        .and_then(|Path(name)| {
            // A name the caller may not read is refused before its query
            // is read.
            let watch = watch_query(raw.as_deref())
                .map_err(|e| caller.check(Right::Read, &name).err().unwrap_or(e))?;
            Ok(GetQuery { name, watch })
        });
    call(
        node,
        caller,
        "/v1/locks/{name}",
        waits,
        query.map(Call::Get),
    )
    .await
}

async fn list(
    State(node): State<Shared>,
    Extension(caller): Extension<Caller>,
    RawQuery(raw): RawQuery,
) -> Response {
    let query = ListQuery::parse(raw.as_deref()).map_err(ApiError::from);
    call(node, caller, "/v1/locks", None, query.map(Call::List)).await
}

/// `GET /v1/cluster`: this node's view, or with `?view=speaker` the
/// speaker's (asked of it by this node; this node's own, saying why, if it
/// cannot be had).
async fn cluster(
    State(node): State<Shared>,
    Extension(caller): Extension<Caller>,
    RawQuery(raw): RawQuery,
) -> Response {
    let view = speaker_view(raw.as_deref());
    call(node, caller, "/v1/cluster", None, view.map(Call::Cluster)).await
}

/// `GET /v1/cluster/history`: this node's rebuilds, or with
/// `?view=speaker` the speaker's.
async fn history(
    State(node): State<Shared>,
    Extension(caller): Extension<Caller>,
    RawQuery(raw): RawQuery,
) -> Response {
    let view = speaker_view(raw.as_deref());
    call(
        node,
        caller,
        "/v1/cluster/history",
        None,
        view.map(Call::History),
    )
    .await
}

/// Whether a view's query asks for the speaker's view (`view=speaker`;
/// `view=own`, or none, is the answering node's). Other keys are skipped
/// (a dashboard's cache buster); another `view` is a `400`.
fn speaker_view(raw: Option<&str>) -> Result<View, ApiError> {
    let mut view = View::Own;
    for pair in raw.unwrap_or("").split('&') {
        match pair.split_once('=') {
            Some(("view", "speaker")) => view = View::Speaker,
            Some(("view", "own")) => view = View::Own,
            Some(("view", other)) => {
                return Err(ApiError::bad_request(format!(
                    "view={other:?}: this route takes view=speaker or view=own"
                )))
            }
            _ => {}
        }
    }
    Ok(view)
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
    bytes: Result<Bytes, BytesRejection>,
) -> Response {
    let body = raw(&bytes).and_then(|bytes| Ok(read_body(bytes)?));
    call(
        node,
        caller,
        "/v1/cluster/members",
        None,
        body.map(Call::AddMember),
    )
    .await
}

/// `DELETE /v1/cluster/members/{id}`: an operator's call, with the cluster
/// token or an admin token.
async fn remove_member(
    State(node): State<Shared>,
    Extension(caller): Extension<Caller>,
    id: Result<Path<String>, PathRejection>,
) -> Response {
    let id = id
        .map_err(|e| ApiError::new(ErrorCode::BadRequest, e.body_text()))
        .and_then(|Path(id)| {
            id.parse::<u64>().ok().filter(|id| *id > 0).ok_or_else(|| {
                ApiError::new(
                    ErrorCode::BadRequest,
                    format!("{id:?} is not a member id (1 or more)"),
                )
            })
        });
    call(
        node,
        caller,
        "/v1/cluster/members/{id}",
        None,
        id.map(Call::RemoveMember),
    )
    .await
}
