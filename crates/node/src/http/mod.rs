//! The node's HTTP server: the public API (docs/api.md, [`public`]) and the
//! peer routes under `/internal/` ([`peer`]), assembled into one router
//! here, with what both share: reading a body, and the answers to a
//! request no route takes.

mod access;
mod calls;
mod deadline;
mod frames;
mod peer;
mod public;
mod serve;

pub(crate) use serve::serve;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Request, State};
use axum::http::{Method, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use leasehold_api::{routes, ErrorCode, MAX_BODY_BYTES};

use crate::error::ApiError;
use crate::node::Node;

type Shared = Arc<Node>;

/// How much of a body is read before answering: bodies over
/// `MAX_BODY_BYTES` but under this are read whole and answered `413` as
/// JSON on a connection that stays usable; a client still sending a larger
/// body when the answer goes may see the connection close instead.
pub(super) const READ_LIMIT_BYTES: usize = 4 << 20;

/// The node's router: the public API, and the peer routes behind the
/// cluster token.
///
/// Requests are not handled in the node's log span: the request path logs
/// a few lines at most, and a span entered on every poll of every request
/// is work for them all (docs/benchmarks.md, "Log spans per node").
pub fn router(node: Shared) -> Router {
    public::router(Arc::clone(&node))
        .fallback(no_such_route)
        .with_state(Arc::clone(&node))
        .merge(peer::router(node))
        .layer(axum::extract::DefaultBodyLimit::max(READ_LIMIT_BYTES))
}

/// No route matched: `404 unknown_route`, or `401` without the token the
/// path would need (the cluster token under `/internal`, a bearer token
/// elsewhere with `--acl`), so which routes exist does not show.
async fn no_such_route(State(node): State<Shared>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    // Read as a route would, so that the connection stays usable after
    // the answer (see `access::authenticate`).
    let _ = axum::body::to_bytes(body, READ_LIMIT_BYTES).await;
    let request = Request::from_parts(parts, axum::body::Body::empty());
    let path = request.uri().path();
    if path.starts_with(routes::PREFIX) {
        if let Some(refused) = peer::refuse_without_token(&node, &request) {
            return refused.into_response();
        }
    } else if let Err(refused) = access::caller(&node, path, request.headers()) {
        return refused.into_response();
    }
    let hint = if path.starts_with("/v1/locks/") {
        " (a lock's name is one segment of the path: send `/` in it as %2F)"
    } else {
        ""
    };
    ApiError::new(
        ErrorCode::UnknownRoute,
        format!("no such route: {path}{hint}"),
    )
    .into_response()
}

/// A route that does not take the method: `405 method_not_allowed` (axum
/// adds the `Allow` header).
async fn wrong_method(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        format!("{method} is not allowed on {}", uri.path()),
    )
}

/// The body's bytes, or a JSON error: `413 too_large` past
/// `MAX_BODY_BYTES`, `400` when it could not be read.
fn raw(bytes: &Result<Bytes, BytesRejection>) -> Result<&Bytes, ApiError> {
    match bytes {
        Ok(bytes) if bytes.len() <= MAX_BODY_BYTES => Ok(bytes),
        Ok(_) => Err(too_large()),
        Err(e) if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE => Err(too_large()),
        Err(e) => Err(ApiError::bad_request(e.body_text())),
    }
}

fn too_large() -> ApiError {
    ApiError::new(
        ErrorCode::TooLarge,
        format!("the body is larger than {MAX_BODY_BYTES} bytes"),
    )
}
