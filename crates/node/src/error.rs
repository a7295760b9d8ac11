//! Errors as the HTTP API answers them.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use leasehold_api::{BadRequest, ErrorBody, ErrorCode, LockView, RETRY_AFTER_SECS};
use locktable::BadLockId;

/// A failed request: a code from docs/api.md, a message, and for `held` the
/// lock that holds the name.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The error body sent (boxed: a `Result` carrying it stays small).
    pub body: Box<ErrorBody>,
}

impl ApiError {
    /// An error of `code` with `message`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            body: Box::new(ErrorBody::new(code, message)),
        }
    }

    /// `400 bad_request`, for input that is not a [`BadRequest`] (a body
    /// axum could not read, a peer's malformed JSON, a query or a path).
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::BadRequest, message)
    }

    /// `409 held`, with the lock holding the name.
    pub fn held(lock: LockView) -> Self {
        let mut e = Self::new(ErrorCode::Held, format!("{} is held by another", lock.name));
        e.body.lock = Some(Box::new(lock));
        e
    }

    /// `503 not_rebuilt`.
    pub fn not_rebuilt() -> Self {
        Self::new(
            ErrorCode::NotRebuilt,
            "the cluster lock table is not rebuilt from the nodes yet; retry",
        )
    }

    /// `404 not_held`.
    pub fn not_held() -> Self {
        Self::new(ErrorCode::NotHeld, "the lock is not held under that id")
    }

    /// `404 not_held` for a get of `name`, which no one holds.
    pub fn free(name: &str) -> Self {
        Self::new(ErrorCode::NotHeld, format!("{name} is not held"))
    }

    /// `404 not_held` for a get of `name`, which no one holds while
    /// requests wait for it (a set waiting for its other names, whose
    /// place this name is kept for): the message names them, the first
    /// few in the order they will be served, and `awaited` shows them.
    pub fn free_awaited(
        name: &str,
        waiting: &locktable::Waiting,
        awaited: leasehold_api::AwaitedView,
    ) -> Self {
        const NAMED: usize = 3;
        let named: Vec<String> = waiting
            .first
            .iter()
            .take(NAMED)
            .map(|q| {
                let holder = if q.holder.is_empty() { "-" } else { &q.holder };
                let kind = match q.kind {
                    locktable::Kind::Exclusive => String::new(),
                    locktable::Kind::Shared => ", shared".to_string(),
                    locktable::Kind::Permit(n) => format!(", one of {n} permits"),
                };
                let with = if q.with.is_empty() {
                    String::new()
                } else {
                    format!(", together with {}", q.with.join(" "))
                };
                format!("{holder} (node {}{kind}{with})", q.node)
            })
            .collect();
        let more = waiting.count.saturating_sub(named.len());
        let more = if more > 0 {
            format!(", and {more} more")
        } else {
            String::new()
        };
        let requests = if waiting.count == 1 {
            "1 request waits".to_string()
        } else {
            format!("{} requests wait", waiting.count)
        };
        let mut e = Self::new(
            ErrorCode::NotHeld,
            format!(
                "{name} is not held, but {requests} for it (kept free for them, in this order): {}{more}",
                named.join("; ")
            ),
        );
        e.body.awaited = Some(Box::new(awaited));
        e
    }

    /// `503 no_leader`.
    pub fn no_leader() -> Self {
        Self::new(ErrorCode::NoLeader, "no speaker is known; retry")
    }

    /// `500 internal`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }
}

/// An error another node answered with, passed on as it is.
impl From<ErrorBody> for ApiError {
    fn from(body: ErrorBody) -> Self {
        ApiError {
            body: Box::new(body),
        }
    }
}

/// `400 bad_request`, the message naming the field and the fault.
impl From<BadRequest> for ApiError {
    fn from(e: BadRequest) -> Self {
        ApiError::from(ErrorBody::from(e))
    }
}

/// `400 bad_request`: an id in a request (a peer's) that is not a lock id.
impl From<BadLockId> for ApiError {
    fn from(e: BadLockId) -> Self {
        ApiError::bad_request(e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.body.error.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (status, Json(*self.body)).into_response();
        if status == StatusCode::SERVICE_UNAVAILABLE {
            response
                .headers_mut()
                .insert("retry-after", HeaderValue::from(RETRY_AFTER_SECS));
        }
        response
    }
}
