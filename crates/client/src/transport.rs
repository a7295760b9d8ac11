//! How the client reaches the cluster: the calls every transport answers
//! ([`Transport`]), and how one fails ([`CallError`]). The transports: over
//! HTTP ([`crate::HttpTransport`]) or frames ([`crate::FrameTransport`]) to
//! a list of endpoints, or in-process to an embedded node.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use leasehold_api::{
    AcquireBody, ClusterAnswer, ErrorBody, LockRef, LockView, LocksAnswer, ReleaseBody, RenewBody,
    SessionAnswer, SessionBody, SessionOpenBody, Watch,
};

/// A boxed future, as the transport's calls return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a set's release answers ([`Transport::release_set`]): the locks
/// released, in the order asked, and those not held under their ids.
pub type SetReleased = (Vec<LockView>, Vec<LockRef>);

/// A call that failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// A node answered with an error.
    #[error("{}: {}", .0.error, .0.message)]
    Api(ErrorBody),
    /// No node answered (timed out, or the connection broke after the
    /// request was sent): the outcome is unknown.
    #[error("no answer: {0}")]
    NoAnswer(String),
    /// The request never reached a node (the connection could not be
    /// made): nothing was done.
    #[error("not sent: {0}")]
    NotSent(String),
}

/// A way to make the API's calls.
pub trait Transport: Send + Sync + 'static {
    /// `POST /v1/locks/acquire`: the lock, and how long the node held the
    /// request before answering.
    fn acquire(
        &self,
        body: AcquireBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<(LockView, Duration), CallError>>;
    /// `POST /v1/locks/acquire` with `names`: every lock of the set, in the
    /// order asked, and how long the node held the request. A transport
    /// that does not carry sets refuses them (`400 bad_request`), which
    /// this default does.
    fn acquire_set(
        &self,
        body: AcquireBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<(Vec<LockView>, Duration), CallError>> {
        let _ = (body, timeout);
        Box::pin(async {
            Err(CallError::Api(ErrorBody::new(
                leasehold_api::ErrorCode::BadRequest,
                "this transport does not carry sets of names",
            )))
        })
    }
    /// `POST /v1/locks/release`.
    fn release(
        &self,
        body: ReleaseBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<LockView, CallError>>;
    /// `POST /v1/locks/release` with `locks`: the locks released, in the
    /// order asked, and those not held under their ids (`404 not_held`
    /// when none was). A transport that does not carry a set's release
    /// refuses it (`400 bad_request`), which this default does: the
    /// client then releases one lock per call.
    fn release_set(
        &self,
        body: ReleaseBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<SetReleased, CallError>> {
        let _ = (body, timeout);
        Box::pin(async {
            Err(CallError::Api(ErrorBody::new(
                leasehold_api::ErrorCode::BadRequest,
                "this transport does not carry a set's release",
            )))
        })
    }
    /// `POST /v1/locks/renew`.
    fn renew(
        &self,
        body: RenewBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<LockView, CallError>>;
    /// `GET /v1/locks/{name}`, waiting up to `watch.0` for the fence to
    /// differ from `watch.1` if given.
    fn get(
        &self,
        name: String,
        watch: Option<Watch>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Option<LockView>, CallError>>;
    /// `GET /v1/locks?prefix=&limit=`.
    fn list(
        &self,
        prefix: String,
        limit: usize,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<LocksAnswer, CallError>>;
    /// `GET /v1/cluster`.
    fn cluster(&self, timeout: Duration) -> BoxFuture<'_, Result<ClusterAnswer, CallError>>;
    /// `POST /v1/sessions/open`, `/renew` or `/close`: the session (for a
    /// close, as it was, with `locks` the count released). A transport that
    /// does not carry sessions refuses them (`400 bad_request`), which this
    /// default does.
    fn session(
        &self,
        call: SessionCall,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<SessionAnswer, CallError>> {
        let _ = (call, timeout);
        Box::pin(async {
            Err(CallError::Api(ErrorBody::new(
                leasehold_api::ErrorCode::BadRequest,
                "this transport does not carry sessions",
            )))
        })
    }
    /// Says the node last used did not serve (no answer, or no speaker):
    /// the next call should try another.
    fn move_on(&self) {}
    /// How many endpoints calls may go to (a caller with a deadline gives
    /// each a share of it).
    fn endpoints(&self) -> usize {
        1
    }
}

/// A call on a session.
#[derive(Debug, Clone)]
pub enum SessionCall {
    /// `POST /v1/sessions/open`.
    Open(SessionOpenBody),
    /// `POST /v1/sessions/renew`.
    Renew(SessionBody),
    /// `POST /v1/sessions/close`.
    Close(SessionBody),
}
