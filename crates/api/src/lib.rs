//! The wire format of leasehold's HTTP API (docs/api.md): the JSON lock, request
//! bodies and their validation, answers, errors, and the bodies of the peer
//! routes under `/internal/`.
//!
//! This crate does no I/O and pulls in no HTTP or async runtime, so the node
//! and the client share it.
//!
//! * [`LockView`]: a lock as every answer shows it.
//! * [`AcquireBody`], [`ReleaseBody`], [`RenewBody`], [`ListQuery`]: what
//!   clients send; [`read_body`] turns request bytes into one and
//!   [`Body::validate`] checks its values ([`parse_body`] does both), or a
//!   [`BadRequest`] names the problem.
//! * [`ErrorCode`], [`ErrorBody`]: every failure.
//! * [`LockAnswer`], [`LocksAnswer`], [`ClusterAnswer`]: every success.
//! * [`PeerLock`] and the [`internal`] bodies: peer traffic, on the
//!   [`routes`] under `/internal/`.
//! * [`codec`]: the one binary codec (bincode), for peer bodies, the log
//!   store, and [`wire`]: the binary transport's frames, carrying the
//!   values above.
//!
//! Unknown fields in any body are ignored, for forward compatibility: an
//! older node accepts a newer client's request, minus what it does not know.

pub mod answer;
pub mod codec;
pub mod error;
pub mod internal;
pub mod lock;
pub mod peer;
pub mod query;
pub mod queue;
pub mod request;
pub mod routes;
pub mod sessions;
pub mod time;
pub mod wire;

pub use answer::{
    ClusterAnswer, HistoryAnswer, HistoryEntry, LockAnswer, LocksAnswer, Member, RebuildReport,
    HISTORY_LEN,
};
pub use error::{ErrorBody, ErrorCode, RETRY_AFTER_SECS};
pub use internal::{
    data_tag, Copies, Forget, Forgets, ForwardAcquire, ForwardAnswer, ForwardAnswers, ForwardBatch,
    ForwardCall, ForwardGet, ForwardGetAnswer, ForwardGetReply, ForwardList, ForwardListAnswer,
    ForwardRelease, ForwardReleaseSet, ForwardRenew, Granted, HandedOver, Handover, Lost,
    MemberChange, ReleasedLocks, Removed, ReportRequest, RetireAnswer, Watch,
};
pub use lock::{LockView, Mode};
pub use locktable::{Kind, LockId};
/// The longest lock-delay a grant may ask for (`lock_delay_ms`).
pub const MAX_LOCK_DELAY: std::time::Duration = locktable::Lock::MAX_DELAY;
pub use peer::PeerLock;
pub use query::ListQuery;
pub use queue::{AwaitedView, PeerAwaited, PeerQueued, QueuedView};
pub use request::{
    format_digest, parse_body, parse_body_checked, parse_digest, read_body, validate_data,
    validate_holder, validate_id, validate_name, validate_new_name, validate_release_set,
    validate_request_id, validate_set, AcquireBody, AddMemberBody, BadRequest, Body, Field,
    FieldKind, LockRef, ReleaseBody, RenewBody, SessionBody, SessionOpenBody, DEFAULT_LIST_LIMIT,
    IDLE_KEPT, IDLE_TIMEOUT, MAX_BODY_BYTES, MAX_DATA_BYTES, MAX_HOLDER_BYTES, MAX_LIST_LIMIT,
    MAX_NAME_BYTES, MAX_REQUEST_ID_BYTES, MAX_SET_BYTES, MAX_SET_NAMES, MAX_WAIT_MS,
};
pub use sessions::{
    ForwardCloseSession, ForwardOpenSession, ForwardRenewSession, SessionAnswer, SessionClosed,
    SessionCopied, SessionCopy, SessionRenewed, SessionView,
};
pub use time::format_rfc3339_ms;

/// The public API described in OpenAPI 3.1 (JSON), as every node serves it
/// at `GET /v1/openapi.json`; `tests/openapi.rs` checks a running node's
/// answers against it.
pub const OPENAPI_JSON: &str = include_str!("../openapi.json");

/// Whole milliseconds in `d`, rounded down, saturating at `u64::MAX`.
pub fn millis_floor(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Milliseconds in `d`, rounded up to the next whole one, saturating at
/// `u64::MAX`.
pub fn millis_ceil(d: std::time::Duration) -> u64 {
    let whole = millis_floor(d);
    if d.subsec_nanos() % 1_000_000 != 0 {
        whole.saturating_add(1)
    } else {
        whole
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn millis_round_as_named() {
        assert_eq!(millis_floor(Duration::from_micros(1_999)), 1);
        assert_eq!(millis_ceil(Duration::from_micros(1_001)), 2);
        assert_eq!(millis_ceil(Duration::from_millis(7)), 7);
        assert_eq!(millis_ceil(Duration::from_nanos(1)), 1);
        assert_eq!(millis_floor(Duration::MAX), u64::MAX);
        assert_eq!(millis_ceil(Duration::MAX), u64::MAX);
    }
}
