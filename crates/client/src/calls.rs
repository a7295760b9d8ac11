//! Every call of [`Transport`](crate::Transport) as the wire's
//! [`Request`], and the [`Answer`] read back into what the call returns:
//! the one mapping both transports to a list of nodes use, over HTTP and
//! over frames, so that they answer alike. A transport says how it
//! exchanges a request for an answer ([`Exchange`]); [`over_exchange!`]
//! makes it a `Transport`.

use std::future::Future;
use std::time::Duration;

use leasehold_api::wire::{Answer, GetQuery, Request, View};
use leasehold_api::{
    AcquireBody, ClusterAnswer, ErrorCode, ListQuery, LockAnswer, LockView, LocksAnswer,
    ReleaseBody, RenewBody, SessionAnswer, Watch,
};

use crate::transport::{CallError, SessionCall, SetReleased};

/// A way to send one [`Request`] and get its answer.
pub(crate) trait Exchange: Send + Sync + 'static {
    /// The answer to `request`, within `timeout`: `Ok` only with an answer
    /// of the kind the request is answered by
    /// ([`Request::answered_by`]), never [`Answer::Error`] (a refusal is
    /// [`CallError::Api`]).
    fn exchange(
        &self,
        request: Request,
        timeout: Duration,
    ) -> impl Future<Output = Result<Answer, CallError>> + Send;

    /// How many endpoints calls may go to.
    fn endpoint_count(&self) -> usize;
}

/// An answer an exchange should not have let through (of another kind
/// than its request's).
fn unexpected(answer: &Answer) -> CallError {
    CallError::NoAnswer(format!("an answer of an unexpected kind: {answer:?}"))
}

/// The lock answer to `request` (an acquire, a release, a renewal).
async fn locked(
    x: &impl Exchange,
    request: Request,
    timeout: Duration,
) -> Result<LockAnswer, CallError> {
    match x.exchange(request, timeout).await? {
        Answer::Lock(a) => Ok(a),
        other => Err(unexpected(&other)),
    }
}

/// `POST /v1/locks/acquire` of one name.
pub(crate) async fn acquire(
    x: &impl Exchange,
    body: AcquireBody,
    timeout: Duration,
) -> Result<(LockView, Duration), CallError> {
    let a = locked(x, Request::Acquire(body), timeout).await?;
    Ok((a.lock, Duration::from_millis(a.served_ms)))
}

/// `POST /v1/locks/acquire` of a set of names.
pub(crate) async fn acquire_set(
    x: &impl Exchange,
    body: AcquireBody,
    timeout: Duration,
) -> Result<(Vec<LockView>, Duration), CallError> {
    let a = locked(x, Request::Acquire(body), timeout).await?;
    let served = Duration::from_millis(a.served_ms);
    Ok((a.locks.unwrap_or_else(|| vec![a.lock]), served))
}

/// `POST /v1/locks/release` of one lock.
pub(crate) async fn release(
    x: &impl Exchange,
    body: ReleaseBody,
    timeout: Duration,
) -> Result<LockView, CallError> {
    Ok(locked(x, Request::Release(body), timeout).await?.lock)
}

/// `POST /v1/locks/release` of a set of locks.
pub(crate) async fn release_set(
    x: &impl Exchange,
    body: ReleaseBody,
    timeout: Duration,
) -> Result<SetReleased, CallError> {
    let a = locked(x, Request::Release(body), timeout).await?;
    let released = a.locks.unwrap_or_else(|| vec![a.lock]);
    Ok((released, a.not_held.unwrap_or_default()))
}

/// `POST /v1/locks/renew`.
pub(crate) async fn renew(
    x: &impl Exchange,
    body: RenewBody,
    timeout: Duration,
) -> Result<LockView, CallError> {
    Ok(locked(x, Request::Renew(body), timeout).await?.lock)
}

/// `GET /v1/locks/{name}`, with a watch: `None` when not held.
pub(crate) async fn get(
    x: &impl Exchange,
    name: String,
    watch: Option<Watch>,
    timeout: Duration,
) -> Result<Option<LockView>, CallError> {
    match x
        .exchange(Request::Get(GetQuery { name, watch }), timeout)
        .await
    {
        Ok(Answer::Lock(a)) => Ok(Some(a.lock)),
        Ok(other) => Err(unexpected(&other)),
        Err(CallError::Api(e)) if e.error == ErrorCode::NotHeld => Ok(None),
        Err(e) => Err(e),
    }
}

/// `GET /v1/locks?prefix=&limit=`.
pub(crate) async fn list(
    x: &impl Exchange,
    prefix: String,
    limit: usize,
    timeout: Duration,
) -> Result<LocksAnswer, CallError> {
    let query = ListQuery {
        prefix: Some(prefix),
        limit: Some(u64::try_from(limit).unwrap_or(u64::MAX)),
    };
    match x.exchange(Request::List(query), timeout).await? {
        Answer::Locks(a) => Ok(a),
        other => Err(unexpected(&other)),
    }
}

/// `GET /v1/cluster`.
pub(crate) async fn cluster(
    x: &impl Exchange,
    timeout: Duration,
) -> Result<ClusterAnswer, CallError> {
    match x.exchange(Request::Cluster(View::Own), timeout).await? {
        Answer::Cluster(a) => Ok(a),
        other => Err(unexpected(&other)),
    }
}

/// `POST /v1/sessions/open`, `/renew` or `/close`: a close answers the
/// session as it was.
pub(crate) async fn session(
    x: &impl Exchange,
    call: SessionCall,
    timeout: Duration,
) -> Result<SessionAnswer, CallError> {
    let request = match call {
        SessionCall::Open(body) => Request::OpenSession(body),
        SessionCall::Renew(body) => Request::RenewSession(body),
        SessionCall::Close(body) => Request::CloseSession(body),
    };
    match x.exchange(request, timeout).await? {
        Answer::Session(a) => Ok(a),
        Answer::SessionClosed(closed) => Ok(SessionAnswer {
            session: closed.session,
            served_ms: 0,
            held: None,
        }),
        other => Err(unexpected(&other)),
    }
}

/// `impl Transport for $transport` over its [`Exchange`]: every call made
/// as its [`Request`] by the functions of this module. A call the
/// endpoint did not serve has moved the transport's rotation on already,
/// from the place that failed ([`crate::endpoints::Rotation::answered`]),
/// so `move_on` does nothing.
macro_rules! over_exchange {
    ($transport:ty) => {
        impl $crate::transport::Transport for $transport {
            fn acquire(
                &self,
                body: leasehold_api::AcquireBody,
                timeout: std::time::Duration,
            ) -> $crate::transport::BoxFuture<
                '_,
                Result<(leasehold_api::LockView, std::time::Duration), $crate::CallError>,
            > {
                Box::pin($crate::calls::acquire(self, body, timeout))
            }

            fn acquire_set(
                &self,
                body: leasehold_api::AcquireBody,
                timeout: std::time::Duration,
            ) -> $crate::transport::BoxFuture<
                '_,
                Result<(Vec<leasehold_api::LockView>, std::time::Duration), $crate::CallError>,
            > {
                Box::pin($crate::calls::acquire_set(self, body, timeout))
            }

            fn release(
                &self,
                body: leasehold_api::ReleaseBody,
                timeout: std::time::Duration,
            ) -> $crate::transport::BoxFuture<
                '_,
                Result<leasehold_api::LockView, $crate::CallError>,
            > {
                Box::pin($crate::calls::release(self, body, timeout))
            }

            fn release_set(
                &self,
                body: leasehold_api::ReleaseBody,
                timeout: std::time::Duration,
            ) -> $crate::transport::BoxFuture<
                '_,
                Result<$crate::transport::SetReleased, $crate::CallError>,
            > {
                Box::pin($crate::calls::release_set(self, body, timeout))
            }

            fn renew(
                &self,
                body: leasehold_api::RenewBody,
                timeout: std::time::Duration,
            ) -> $crate::transport::BoxFuture<
                '_,
                Result<leasehold_api::LockView, $crate::CallError>,
            > {
                Box::pin($crate::calls::renew(self, body, timeout))
            }

            fn get(
                &self,
                name: String,
                watch: Option<leasehold_api::Watch>,
                timeout: std::time::Duration,
            ) -> $crate::transport::BoxFuture<
                '_,
                Result<Option<leasehold_api::LockView>, $crate::CallError>,
            > {
                Box::pin($crate::calls::get(self, name, watch, timeout))
            }

            fn list(
                &self,
                prefix: String,
                limit: usize,
                timeout: std::time::Duration,
            ) -> $crate::transport::BoxFuture<
                '_,
                Result<leasehold_api::LocksAnswer, $crate::CallError>,
            > {
                Box::pin($crate::calls::list(self, prefix, limit, timeout))
            }

            fn cluster(
                &self,
                timeout: std::time::Duration,
            ) -> $crate::transport::BoxFuture<
                '_,
                Result<leasehold_api::ClusterAnswer, $crate::CallError>,
            > {
                Box::pin($crate::calls::cluster(self, timeout))
            }

            fn session(
                &self,
                call: $crate::transport::SessionCall,
                timeout: std::time::Duration,
            ) -> $crate::transport::BoxFuture<
                '_,
                Result<leasehold_api::SessionAnswer, $crate::CallError>,
            > {
                Box::pin($crate::calls::session(self, call, timeout))
            }

            fn move_on(&self) {}

            fn endpoints(&self) -> usize {
                $crate::calls::Exchange::endpoint_count(self)
            }
        }
    };
}
pub(crate) use over_exchange;
