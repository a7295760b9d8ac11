//! Every failure: `{"error": CODE, "message": "...", "lock"?: Lock}`.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::lock::LockView;
use crate::request::BadRequest;

/// Seconds a server puts in the `Retry-After` header of every `503`.
pub const RETRY_AFTER_SECS: u64 = 1;

/// The `error` of a failure.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request is malformed or invalid: `400`.
    BadRequest,
    /// The lock is held by another: `409`, with the current lock.
    Held,
    /// No such lock is held (never was, released, expired, or lost): `404`.
    NotHeld,
    /// The speaker has not finished rebuilding its table, or stopped
    /// speaking: `503`, retryable.
    NotRebuilt,
    /// No node speaks for the cluster (or none can be reached): `503`,
    /// retryable.
    NoLeader,
    /// A peer route without the cluster token, or (with `--acl`) a public
    /// route without a known bearer token: `401`.
    Unauthorized,
    /// (With `--acl`) a token without the right for that name or route:
    /// `403`.
    Forbidden,
    /// The body is larger than [`crate::MAX_BODY_BYTES`]: `413`.
    TooLarge,
    /// A peer request from a member on another data directory than the one
    /// the cluster knew for it, or from another cluster: `409`.
    WrongMember,
    /// The node failed: `500`.
    Internal,
    /// No route has that path (a lock name with an unencoded `/`, a wrong
    /// URL): `404`.
    UnknownRoute,
    /// The route does not take that method: `405`.
    MethodNotAllowed,
    /// The route is off on this node (`/internal/chaos` without
    /// `--chaos`): `403`.
    Disabled,
    /// No member has that id: `404`.
    UnknownMember,
    /// A member has that id or that address already: `409`.
    MemberExists,
    /// Another membership change is under way: `409`.
    ChangeInProgress,
    /// The change would leave fewer voters that answer than a quorum of
    /// the new configuration needs: `409`.
    WouldLoseQuorum,
    /// A new member has not caught up with the log yet; it stays a learner
    /// until the same request is sent again: `503`, retryable.
    NotCaughtUp,
    /// The request needs a protocol version the cluster has not agreed yet
    /// (a member runs an older build, or the cluster has just started):
    /// `503`, retryable.
    Upgrading,
    /// The name is held or awaited as another kind than asked (permits on
    /// a lock, a lock on a semaphore, another permit count): `409`, not
    /// queued.
    KindMismatch,
    /// A renewal of a lock that hangs off a session (a session's locks are
    /// renewed with it): `409`.
    InSession,
}

impl ErrorCode {
    /// Every code.
    pub const ALL: [ErrorCode; 21] = [
        ErrorCode::BadRequest,
        ErrorCode::Held,
        ErrorCode::NotHeld,
        ErrorCode::NotRebuilt,
        ErrorCode::NoLeader,
        ErrorCode::Unauthorized,
        ErrorCode::Forbidden,
        ErrorCode::TooLarge,
        ErrorCode::WrongMember,
        ErrorCode::Internal,
        ErrorCode::UnknownRoute,
        ErrorCode::MethodNotAllowed,
        ErrorCode::Disabled,
        ErrorCode::UnknownMember,
        ErrorCode::MemberExists,
        ErrorCode::ChangeInProgress,
        ErrorCode::WouldLoseQuorum,
        ErrorCode::NotCaughtUp,
        ErrorCode::Upgrading,
        ErrorCode::KindMismatch,
        ErrorCode::InSession,
    ];

    /// The HTTP status answered with this code.
    pub const fn http_status(self) -> u16 {
        match self {
            ErrorCode::BadRequest => 400,
            ErrorCode::Held
            | ErrorCode::WrongMember
            | ErrorCode::MemberExists
            | ErrorCode::ChangeInProgress
            | ErrorCode::WouldLoseQuorum
            | ErrorCode::KindMismatch
            | ErrorCode::InSession => 409,
            ErrorCode::NotHeld | ErrorCode::UnknownRoute | ErrorCode::UnknownMember => 404,
            ErrorCode::NotRebuilt
            | ErrorCode::NoLeader
            | ErrorCode::NotCaughtUp
            | ErrorCode::Upgrading => 503,
            ErrorCode::Unauthorized => 401,
            ErrorCode::TooLarge => 413,
            ErrorCode::Internal => 500,
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::Disabled | ErrorCode::Forbidden => 403,
        }
    }

    /// Whether the same request may succeed if simply sent again later, to
    /// this node or another: true for the `503`s (`not_rebuilt`,
    /// `no_leader`, `not_caught_up`, `upgrading`), which carry
    /// `Retry-After`. `held` is not: an acquire that should wait says so
    /// with `wait_ms`.
    pub const fn retryable(self) -> bool {
        matches!(
            self,
            ErrorCode::NotRebuilt
                | ErrorCode::NoLeader
                | ErrorCode::NotCaughtUp
                | ErrorCode::Upgrading
        )
    }

    /// The code as it appears in JSON, e.g. `"not_held"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::Held => "held",
            ErrorCode::KindMismatch => "kind_mismatch",
            ErrorCode::InSession => "in_session",
            ErrorCode::NotHeld => "not_held",
            ErrorCode::NotRebuilt => "not_rebuilt",
            ErrorCode::NoLeader => "no_leader",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::TooLarge => "too_large",
            ErrorCode::WrongMember => "wrong_member",
            ErrorCode::Internal => "internal",
            ErrorCode::UnknownRoute => "unknown_route",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::Disabled => "disabled",
            ErrorCode::UnknownMember => "unknown_member",
            ErrorCode::MemberExists => "member_exists",
            ErrorCode::ChangeInProgress => "change_in_progress",
            ErrorCode::WouldLoseQuorum => "would_lose_quorum",
            ErrorCode::NotCaughtUp => "not_caught_up",
            ErrorCode::Upgrading => "upgrading",
        }
    }
}

impl ErrorCode {
    /// The code written `text` (as [`ErrorCode::as_str`] writes it), if
    /// this build knows it.
    pub fn parse(text: &str) -> Option<ErrorCode> {
        ErrorCode::ALL
            .into_iter()
            .find(|code| code.as_str() == text)
    }

    /// What a code this build does not know (a newer server's) counts as,
    /// by the HTTP status it came with: `503` as `no_leader` (retryable),
    /// another `4xx` as `bad_request`, anything else as `internal`.
    pub const fn by_status(status: u16) -> ErrorCode {
        match status {
            503 => ErrorCode::NoLeader,
            400..=499 => ErrorCode::BadRequest,
            _ => ErrorCode::Internal,
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The body of every failure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{error}: {message}")]
pub struct ErrorBody {
    /// What failed.
    pub error: ErrorCode,
    /// For people.
    pub message: String,
    /// The lock as it is held, with `409 held`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<Box<LockView>>,
    /// With `404 not_held` of a get over HTTP: the name is free, but
    /// requests wait for it (kept free for a waiting set), shown as a
    /// listing's `awaited` shows it. Frames carry it in the message only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub awaited: Option<Box<crate::AwaitedView>>,
}

impl ErrorBody {
    /// Reads a failure answered with HTTP `status`: a code this build does
    /// not know (a newer server's) is read by its status, `503` as
    /// `no_leader` (retryable), another `4xx` as `bad_request`, anything
    /// else as `internal`, the code kept at the head of the message.
    pub fn read(status: u16, bytes: &[u8]) -> Result<ErrorBody, serde_json::Error> {
        let whole = match serde_json::from_slice::<ErrorBody>(bytes) {
            Ok(body) => return Ok(body),
            Err(e) => e,
        };
        #[derive(Deserialize)]
        struct Loose {
            error: String,
            #[serde(default)]
            message: String,
        }
        let loose: Loose = serde_json::from_slice(bytes).map_err(|_| whole)?;
        Ok(ErrorBody::unknown(&loose.error, status, &loose.message))
    }

    /// A failure whose code `code` this build does not know, answered with
    /// HTTP `status`: read as [`ErrorCode::by_status`] says, the code kept
    /// at the head of the message.
    pub fn unknown(code: &str, status: u16, message: &str) -> Self {
        ErrorBody::new(ErrorCode::by_status(status), format!("{code}: {message}"))
    }

    /// A failure with no lock.
    pub fn new(error: ErrorCode, message: impl Into<String>) -> Self {
        ErrorBody {
            error,
            message: message.into(),
            lock: None,
            awaited: None,
        }
    }

    /// The HTTP status to answer with.
    pub fn http_status(&self) -> u16 {
        self.error.http_status()
    }
}

impl From<BadRequest> for ErrorBody {
    fn from(e: BadRequest) -> Self {
        ErrorBody::new(ErrorCode::BadRequest, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_code_a_newer_server_added_reads_by_its_status() {
        let known = br#"{"error":"held","message":"m"}"#;
        assert_eq!(ErrorBody::read(409, known).unwrap().error, ErrorCode::Held);
        let newer = br#"{"error":"some_new_code","message":"why","extra":1}"#;
        for (status, code) in [
            (503, ErrorCode::NoLeader),
            (409, ErrorCode::BadRequest),
            (400, ErrorCode::BadRequest),
            (500, ErrorCode::Internal),
        ] {
            let body = ErrorBody::read(status, newer).unwrap();
            assert_eq!(body.error, code, "{status}");
            assert_eq!(body.message, "some_new_code: why");
        }
        assert!(ErrorBody::read(503, b"not json").is_err());
        assert!(ErrorBody::read(503, br#"{"message":"no code"}"#).is_err());
    }

    #[test]
    fn codes_serialize_snake_case_with_their_statuses() {
        let expect = [
            ("bad_request", 400, false),
            ("held", 409, false),
            ("not_held", 404, false),
            ("not_rebuilt", 503, true),
            ("no_leader", 503, true),
            ("unauthorized", 401, false),
            ("forbidden", 403, false),
            ("too_large", 413, false),
            ("wrong_member", 409, false),
            ("internal", 500, false),
            ("unknown_route", 404, false),
            ("method_not_allowed", 405, false),
            ("disabled", 403, false),
            ("unknown_member", 404, false),
            ("member_exists", 409, false),
            ("change_in_progress", 409, false),
            ("would_lose_quorum", 409, false),
            ("not_caught_up", 503, true),
            ("upgrading", 503, true),
            ("kind_mismatch", 409, false),
            ("in_session", 409, false),
        ];
        assert_eq!(expect.len(), ErrorCode::ALL.len());
        for (code, (text, status, retry)) in ErrorCode::ALL.into_iter().zip(expect) {
            assert_eq!(serde_json::to_value(code).unwrap(), text);
            assert_eq!(code.as_str(), text);
            assert_eq!(code.to_string(), text);
            assert_eq!(
                serde_json::from_value::<ErrorCode>(text.into()).unwrap(),
                code
            );
            assert_eq!(code.http_status(), status);
            assert_eq!(code.retryable(), retry);
            // Every 503 is retryable and only those.
            assert_eq!(code.retryable(), status == 503);
        }
    }

    #[test]
    fn the_codes_of_requests_no_route_serves() {
        for (code, text, status) in [
            (ErrorCode::UnknownRoute, "unknown_route", 404),
            (ErrorCode::MethodNotAllowed, "method_not_allowed", 405),
            (ErrorCode::Disabled, "disabled", 403),
        ] {
            assert!(ErrorCode::ALL.contains(&code));
            assert_eq!(serde_json::to_value(code).unwrap(), text);
            assert_eq!(code.as_str(), text);
            assert_eq!(
                serde_json::from_value::<ErrorCode>(text.into()).unwrap(),
                code
            );
            assert_eq!(code.http_status(), status);
            assert!(!code.retryable());
        }
    }

    #[test]
    fn bodies() {
        let body = ErrorBody::from(BadRequest::EmptyName);
        assert_eq!(
            serde_json::to_string(&body).unwrap(),
            r#"{"error":"bad_request","message":"field `name` must not be empty"}"#
        );
        assert_eq!(body.http_status(), 400);
        assert_eq!(ErrorBody::new(ErrorCode::TooLarge, "m").http_status(), 413);
        let lock = crate::LockView {
            session: Default::default(),
            lock_delay_ms: 0,
            delay_left_ms: 0,
            name: "a".into(),
            id: "00000000000000000000000001".into(),
            node: 1,
            holder: String::new(),
            fence: 1,
            lease_ms: 1,
            ttl_ms: 1,
            acquired_at: "1970-01-01T00:00:00.000Z".into(),
            expires_at: "1970-01-01T00:00:00.001Z".into(),
            data: None,
            waiters: 0,
            queue: Vec::new(),
            mode: crate::Mode::Exclusive,
            permits: None,
            others: Vec::new(),
        };
        let held = ErrorBody {
            lock: Some(Box::new(lock.clone())),
            ..ErrorBody::new(ErrorCode::Held, "held")
        };
        let json = serde_json::to_value(&held).unwrap();
        assert_eq!(json["error"], "held");
        assert_eq!(json["lock"]["name"], "a");
        let back: ErrorBody = serde_json::from_value(json).unwrap();
        assert_eq!(back.lock, Some(Box::new(lock)));
        // A body with no lock reads back with none.
        let plain: ErrorBody =
            serde_json::from_str(r#"{"error":"no_leader","message":"m"}"#).unwrap();
        assert_eq!(plain, ErrorBody::new(ErrorCode::NoLeader, "m"));
    }
}
