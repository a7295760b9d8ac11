//! Who calls the public API: with `--acl`, every route but `/healthz` asks
//! for a bearer token (`Authorization: Bearer <secret>`), or the cluster
//! token; what the caller may do is checked where the route knows the
//! name (docs/security.md).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use leasehold_acl::{Right, Token};
use leasehold_api::ErrorCode;

use leasehold_raft::token_matches;

use super::peer::refuse_without_cluster_token;
use super::Shared;
use crate::error::ApiError;

/// The caller of a public route, as its credentials say.
#[derive(Debug, Clone)]
pub(crate) enum Caller {
    /// The node runs without `--acl`: anyone may do anything but
    /// administer (which asks for the cluster token).
    Open,
    /// The cluster token: everything.
    Cluster,
    /// A token of the ACL: what it allows.
    Token(Arc<Token>),
}

impl Caller {
    /// Whether the caller may do `right` to `name`.
    pub(crate) fn may(&self, right: Right, name: &str) -> bool {
        match self {
            Caller::Open | Caller::Cluster => true,
            Caller::Token(token) => token.may(right, name),
        }
    }

    /// `403 forbidden` unless the caller may do `right` to `name`.
    pub(crate) fn check(&self, right: Right, name: &str) -> Result<(), ApiError> {
        if self.may(right, name) {
            return Ok(());
        }
        let what = match right {
            Right::Lock => "lock",
            Right::Read => "read",
        };
        Err(ApiError::new(
            ErrorCode::Forbidden,
            format!("this token may not {what} {name:?}"),
        ))
    }

    /// The caller may administer the cluster: the cluster token, or an
    /// admin token.
    pub(crate) fn check_admin(&self) -> Result<(), ApiError> {
        match self {
            Caller::Cluster => Ok(()),
            Caller::Token(token) if token.is_admin() => Ok(()),
            Caller::Token(_) => Err(ApiError::new(
                ErrorCode::Forbidden,
                "this token may not administer the cluster",
            )),
            Caller::Open => Err(unauthorized("the cluster token is missing or wrong")),
        }
    }
}

/// The bearer secret in `headers`, if there is one.
fn bearer(headers: &HeaderMap) -> Option<&[u8]> {
    let value = headers.get(header::AUTHORIZATION)?.as_bytes();
    let scheme = value.get(..7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| value[7..].trim_ascii())
}

/// Finds who calls, or answers `401 unauthorized`: with `--acl`, a known
/// bearer token or the cluster token is needed on every route but
/// `/healthz`.
pub(super) async fn authenticate(
    State(node): State<Shared>,
    mut request: Request,
    next: Next,
) -> Response {
    let caller = match caller(&node, request.uri().path(), request.headers()) {
        Ok(caller) => caller,
        Err(refused) => {
            // The body is read (as far as the router would read it) before
            // the answer, so that a client still sending it gets the 401
            // rather than a connection closed under it.
            let _ = axum::body::to_bytes(request.into_body(), super::READ_LIMIT_BYTES).await;
            return refused.into_response();
        }
    };
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// Who sends `headers` to `path`, or the `401 unauthorized` answer: the
/// one rule for the public routes and for a path no route takes (so that,
/// with `--acl`, which routes exist does not show to a caller without a
/// token).
pub(super) fn caller(node: &Shared, path: &str, headers: &HeaderMap) -> Result<Caller, ApiError> {
    match &node.config.acl {
        // The cluster token (as `x-leasehold-token`) is what administers.
        None if refuse_without_cluster_token(node, headers).is_ok() => Ok(Caller::Cluster),
        None => Ok(Caller::Open),
        Some(_) if matches!(path, "/" | "/healthz" | "/readyz" | "/v1/openapi.json") => {
            Ok(Caller::Open)
        }
        Some(acl) => match bearer(headers) {
            Some(secret) => match acl.authenticate(secret) {
                Some(token) => Ok(Caller::Token(token)),
                None => Err(unauthorized(
                    "the bearer token is not one of this cluster's",
                )),
            },
            None if refuse_without_cluster_token(node, headers).is_ok() => Ok(Caller::Cluster),
            None => Err(unauthorized(
                "a token is needed: send Authorization: Bearer <token>",
            )),
        },
    }
}

fn unauthorized(why: &str) -> ApiError {
    ApiError::new(ErrorCode::Unauthorized, why)
}

/// Who calls on a connection of the binary transport whose `Token` frame
/// carried `secret` (none sent: `None`), or the `unauthorized` answer.
/// The rules of HTTP's, with one token for both headers: with `--acl`, a
/// token of the ACL or the cluster token; without, the cluster token
/// administers and any other is not looked at (as HTTP ignores a bearer
/// token then).
pub(super) fn caller_of_token(node: &Shared, secret: Option<&[u8]>) -> Result<Caller, ApiError> {
    let cluster = secret.is_some_and(|s| token_matches(&node.config.cluster_token, s));
    match (&node.config.acl, secret) {
        (_, Some(_)) if cluster => Ok(Caller::Cluster),
        (None, _) => Ok(Caller::Open),
        (Some(acl), Some(secret)) => match acl.authenticate(secret) {
            Some(token) => Ok(Caller::Token(token)),
            None => Err(unauthorized("the token is not one of this cluster's")),
        },
        (Some(_), None) => Err(unauthorized("a token is needed: send a Token frame first")),
    }
}
