//! The leasehold client: locks held by a guard that renews them in the
//! background and releases them when dropped, work run under a lock and
//! cancelled when the lock is lost, and leader election.
//!
//! ```no_run
//! # async fn demo() -> Result<(), leasehold_client::Error> {
//! use leasehold_client::{AcquireOptions, Client};
//! let client = Client::new(["127.0.0.1:7701", "127.0.0.1:7702", "127.0.0.1:7703"])?;
//! let guard = client.acquire("jobs/42", AcquireOptions::default()).await?;
//! println!("fence {}", guard.fence());
//! guard.release().await?;
//! # Ok(()) }
//! ```
//!
//! Every lease is counted on the client's own monotonic clock from the
//! moment it *sent* the request that won or renewed it, so the client's view
//! of a lease always ends before the speaker's.
//!
//! Calls go to the nodes over the binary transport ([`FrameTransport`]:
//! frames, many calls in flight on one connection per node), and over
//! HTTP to a node that does not serve it; [`ClientBuilder::transport`]
//! chooses ([`TransportKind`]), and [`Client::http`] is HTTP only
//! ([`HttpTransport`]). [`Client::with_transport`] takes any
//! [`Transport`], an embedded node's for one.

mod builder;
mod calls;
mod election;
mod elector;
mod endpoints;
mod error;
mod frames;
mod guard;
mod http;
mod release;
mod session;
mod set;
mod suspend;
mod transport;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use leasehold_api::{AcquireBody, ClusterAnswer, ErrorCode, LockView, LocksAnswer, ReleaseBody};
use tokio_util::sync::CancellationToken;

pub use builder::{ClientBuilder, TransportKind};
pub use election::{CampaignOptions, Leadership};
pub use elector::{ElectionStats, Elector, ElectorBuilder, Leading};
pub use error::Error;
pub use guard::{Holding, LockGuard, Loss};
pub use leasehold_api::Kind;
pub use leasehold_api::LockView as Lock;
pub use session::{Session, SessionLock, SessionOptions};
pub use set::LockSet;

pub use endpoints::EndpointError;
pub use frames::FrameTransport;
pub use http::{request_failure, trust_only, HttpOptions, HttpTransport};
pub use leasehold_api::MAX_LOCK_DELAY;
pub use suspend::{BootClock, SuspendClock};
pub use transport::{BoxFuture, CallError, SessionCall, SetReleased, Transport};

/// The body of an acquire of `name`, or of the set `names`, as `options`
/// ask. One name for this acquisition, sent on every retry of it: a retry
/// whose first try was granted (its answer lost) gets that grant back
/// instead of `409 held`.
fn acquire_body(
    name: Option<String>,
    names: Option<Vec<String>>,
    options: &AcquireOptions,
) -> AcquireBody {
    AcquireBody {
        names,
        name,
        holder: options.holder.clone(),
        lease_ms: options.lease.map(|d| d.as_millis() as u64),
        wait_ms: None,
        data: options.data.clone(),
        request_id: Some(request_id()),
        shared: (options.kind == Kind::Shared).then_some(true),
        permits: match options.kind {
            Kind::Permit(n) => Some(u64::from(n)),
            _ => None,
        },
        lock_delay_ms: (!options.lock_delay.is_zero())
            .then_some(options.lock_delay.as_millis() as u64),
        session: options.session.clone(),
    }
}

/// How a lock is asked for.
#[derive(Debug, Clone, Default)]
pub struct AcquireOptions {
    /// The lease; none means the cluster's default.
    pub lease: Option<Duration>,
    /// How long to wait while another holds it; zero fails at once.
    pub wait: Duration,
    /// Who holds it, for people reading a listing.
    pub holder: Option<String>,
    /// Data kept with the lock.
    pub data: Option<String>,
    /// How often to renew; none means a third of the lease. At most half
    /// the lease (a slower renewal could let the lease lapse between two).
    pub renew_every: Option<Duration>,
    /// How long before its lease ends (on the client's clock) an unrenewed
    /// lock counts as lost; none means a tenth of the lease, at most 2 s.
    pub lapse_margin: Option<Duration>,
    /// What to hold of the name: alone (the default), shared beside other
    /// readers, or one of a semaphore's permits.
    pub kind: Kind,
    /// The lock-delay: once the lease runs out unreleased (the holder died
    /// or stalled), the name stays closed this much longer, so the lapsed
    /// holder's writes already on their way land before anyone else
    /// starts. At most a minute; zero (the default) for none.
    pub lock_delay: Duration,
    /// The id of the session the lock is to hang off: it takes the
    /// session's lease and is renewed with it (no renewal of its own), and
    /// ends with it. [`Session::acquire`] sets it; not with `lease` or
    /// `lock_delay`.
    pub session: Option<String>,
}

impl AcquireOptions {
    /// Options with this lease.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Options with this wait.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// Options with this lock-delay ([`AcquireOptions::lock_delay`]).
    pub fn lock_delay(mut self, delay: Duration) -> Self {
        self.lock_delay = delay;
        self
    }

    /// Options to hold the name shared, beside other shared holders: a
    /// reader's lock. A writer (the default) waits for every reader, and
    /// readers that come after a waiting writer wait behind it.
    pub fn shared(mut self) -> Self {
        self.kind = Kind::Shared;
        self
    }

    /// Options to hold one of `n` permits of the name: a semaphore, held
    /// by at most `n` at once. Every holder and waiter of the name must ask
    /// the same `n`.
    pub fn permits(mut self, n: u32) -> Self {
        self.kind = Kind::Permit(n);
        self
    }

    /// Options with this holder.
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = Some(holder.into());
        self
    }

    /// Options with this data.
    pub fn data(mut self, data: impl Into<String>) -> Self {
        self.data = Some(data.into());
        self
    }
}

/// The lease assumed before the cluster says which it granted.
const ASSUMED_DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// How long a one-shot call keeps retrying through other nodes while none
/// can serve (a speaker change takes well under a second).
const RETRY_FOR: Duration = Duration::from_secs(10);

/// The longest wait of one watch (the node's limit).
const MAX_WATCH: Duration = Duration::from_secs(60);

/// The time allowed one request beyond any wait it asks for.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest any deadline is set ahead: a wait of `Duration::MAX` means
/// "as long as it takes", not an overflow.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// The instant `d` from now, saturating.
pub(crate) fn after(d: Duration) -> Instant {
    Instant::now() + d.min(FOREVER)
}

/// A client of a leasehold cluster.
#[derive(Clone)]
pub struct Client {
    transport: Arc<dyn Transport>,
    suspends: Arc<dyn SuspendClock>,
    /// How long a one-shot call keeps trying while no node can serve.
    retry_for: Duration,
}

fn retryable(e: &CallError) -> bool {
    match e {
        CallError::NoAnswer(_) | CallError::NotSent(_) => true,
        CallError::Api(body) => body.error.retryable(),
    }
}

fn refused(e: CallError) -> Error {
    match e {
        CallError::Api(body) => match body.error {
            ErrorCode::Held => match body.lock {
                Some(lock) => Error::Held(lock),
                None => Error::Reserved(body.message),
            },
            ErrorCode::NotHeld => Error::NotHeld,
            ErrorCode::KindMismatch => Error::KindMismatch(body.message),
            ErrorCode::BadRequest | ErrorCode::TooLarge | ErrorCode::InSession => {
                Error::BadRequest(body.message)
            }
            ErrorCode::Unauthorized => Error::Unauthorized(body.message),
            ErrorCode::Forbidden => Error::Forbidden(body.message),
            ErrorCode::NotRebuilt | ErrorCode::NoLeader => Error::Unavailable(body.message),
            ErrorCode::WrongMember | ErrorCode::Internal | ErrorCode::Disabled => {
                Error::Server(body.message)
            }
            ErrorCode::UnknownRoute | ErrorCode::MethodNotAllowed => {
                Error::UnknownRoute(body.message)
            }
            ErrorCode::NotCaughtUp | ErrorCode::Upgrading => Error::Unavailable(body.message),
            ErrorCode::UnknownMember
            | ErrorCode::MemberExists
            | ErrorCode::ChangeInProgress
            | ErrorCode::WouldLoseQuorum => Error::Membership(body.error, body.message),
        },
        CallError::NoAnswer(e) => Error::NoAnswer(e),
        CallError::NotSent(e) => Error::Unavailable(e),
    }
}

/// `Err(Error::BadRequest)` for a name no lock can have (empty, or too
/// long): said as such, not as an endpoint that serves no such call.
fn checked_name(name: &str) -> Result<(), Error> {
    leasehold_api::validate_name(name).map_err(|e| Error::BadRequest(e.to_string()))
}

/// How often a call that no node has served for its retry window says
/// so again while its wait lasts.
const OUTAGE_WARNING_EVERY: Duration = Duration::from_secs(60);

/// One call's run of failures: a call still failing after the client's
/// retry window (it waits longer: an acquire's or a watch's wait) says so,
/// and again every [`OUTAGE_WARNING_EVERY`], rather than waiting in
/// silence on a cluster that is down or an endpoint that is wrong.
#[derive(Default)]
struct Outage {
    since: Option<Instant>,
    warned: Option<Instant>,
}

impl Outage {
    /// The call failed with `e`, worth retrying.
    fn failed(&mut self, e: &CallError, retry_for: Duration) {
        let now = Instant::now();
        let since = *self.since.get_or_insert(now);
        let due = match self.warned {
            Some(at) => now.duration_since(at) >= OUTAGE_WARNING_EVERY,
            None => now.duration_since(since) >= retry_for,
        };
        if due {
            self.warned = Some(now);
            tracing::warn!(
                failing_for_s = now.duration_since(since).as_secs(),
                last = %e,
                "no node could serve the call; still trying while its wait lasts"
            );
        }
    }
}

/// A short pause before trying again.
async fn backoff(attempt: u32) {
    let ms = (50u64 << attempt.min(4)).min(500);
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

impl Client {
    /// A client over HTTP to `endpoints`, moving to another when one fails.
    pub fn http(endpoints: impl IntoIterator<Item = impl Into<String>>) -> Result<Self, Error> {
        let transport =
            HttpTransport::new(endpoints).map_err(|e| Error::BadRequest(e.to_string()))?;
        Ok(Self::with_transport(Arc::new(transport)))
    }

    /// A client over HTTP to `endpoints` whose every request carries
    /// `token` (`Authorization: Bearer`), for a cluster run with `--acl`.
    pub fn http_with_token(
        endpoints: impl IntoIterator<Item = impl Into<String>>,
        token: &str,
    ) -> Result<Self, Error> {
        let transport = HttpTransport::authorized(endpoints, Some(token))
            .map_err(|e| Error::BadRequest(e.to_string()))?;
        Ok(Self::with_transport(Arc::new(transport)))
    }

    /// A builder of a client to `endpoints`: give it a token, a TLS CA
    /// and a transport before [`ClientBuilder::build`]. The transport is
    /// [`TransportKind::Auto`] unless chosen: frames, and HTTP to a node
    /// that does not serve them.
    ///
    /// ```no_run
    /// # fn demo() -> Result<(), leasehold_client::Error> {
    /// let client = leasehold_client::Client::builder(["10.0.0.1:7701", "10.0.0.2:7701"])
    ///     .token(std::env::var("LEASEHOLD_TOKEN").unwrap_or_default())
    ///     .tls_ca_file("/etc/leasehold/ca.pem")?
    ///     .build()?;
    /// # Ok(()) }
    /// ```
    pub fn builder(endpoints: impl IntoIterator<Item = impl Into<String>>) -> ClientBuilder {
        ClientBuilder::new(endpoints.into_iter().map(Into::into).collect())
    }

    /// A client to `endpoints` over the default transport
    /// ([`TransportKind::Auto`]: the binary transport, and HTTP to a node
    /// that does not serve it), moving to another when one fails. As
    /// `Client::builder(endpoints).build()`.
    pub fn new(endpoints: impl IntoIterator<Item = impl Into<String>>) -> Result<Self, Error> {
        Self::builder(endpoints).build()
    }

    /// A client over any transport (an embedded node's, for one).
    pub fn with_transport(transport: Arc<dyn Transport>) -> Self {
        Client {
            transport,
            suspends: Arc::new(BootClock::new()),
            retry_for: RETRY_FOR,
        }
    }

    /// This client, with `suspends` telling how long the machine has been
    /// suspended (the default, [`BootClock`], reads `CLOCK_BOOTTIME`; tests
    /// give a clock of their own to simulate a suspend).
    pub fn with_suspend_clock(self, suspends: Arc<dyn SuspendClock>) -> Self {
        Client { suspends, ..self }
    }

    /// How long a one-shot call (and an acquire beyond its wait) keeps
    /// trying through other nodes while none can serve, before it fails
    /// with why (default 10 s: a speaker change takes well under a
    /// second). A command line's `--timeout`.
    pub fn with_retry_for(self, retry_for: Duration) -> Self {
        Client { retry_for, ..self }
    }

    /// Runs `call` until it succeeds, is refused for good, or `until`
    /// passes; moves to another node after each failure.
    async fn retrying<T, F, Fut>(&self, until: Instant, mut call: F) -> Result<T, CallError>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, CallError>>,
    {
        let mut attempt = 0;
        // An attempt that got no answer may have gone through: if one did,
        // the outcome stays unknown whatever the later ones say.
        let mut unanswered = None;
        let mut outage = Outage::default();
        loop {
            match call().await {
                Err(e) if retryable(&e) && Instant::now() < until => {
                    outage.failed(&e, self.retry_for);
                    if let CallError::NoAnswer(why) = &e {
                        unanswered = Some(why.clone());
                    }
                    self.transport.move_on();
                    backoff(attempt).await;
                    attempt += 1;
                }
                Err(CallError::Api(e)) if e.error.retryable() && unanswered.is_some() => {
                    let first = unanswered.unwrap_or_default();
                    return Err(CallError::NoAnswer(format!(
                        "{first} (then: {})",
                        e.message
                    )));
                }
                other => return other,
            }
        }
    }

    /// Acquires `name`, waiting as `options` say, and returns a guard that
    /// renews it until it is released or dropped.
    pub async fn acquire(&self, name: &str, options: AcquireOptions) -> Result<LockGuard, Error> {
        let body = acquire_body(Some(name.to_string()), None, &options);
        let (granted, sent) = self
            .granted(body, &options, |body, timeout| {
                self.transport.acquire(body, timeout)
            })
            .await?;
        LockGuard::start(
            self.transport.clone(),
            self.suspends.clone(),
            granted,
            sent,
            &options,
        )
    }

    /// Acquires every one of `names` at once, or none: the set waits (as
    /// `options` say) until every name is free for it, first come first
    /// served on each name, and is granted in one step, each lock with its
    /// own fence (consecutive, in the order asked). The [`LockSet`] renews
    /// them together and counts the set lost when any of them is.
    pub async fn acquire_all(
        &self,
        names: &[&str],
        options: AcquireOptions,
    ) -> Result<LockSet, Error> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let body = acquire_body(None, Some(names), &options);
        let (granted, sent) = self
            .granted(body, &options, |body, timeout| {
                self.transport.acquire_set(body, timeout)
            })
            .await?;
        let guards = granted
            .into_iter()
            .map(|lock| {
                LockGuard::start(
                    self.transport.clone(),
                    self.suspends.clone(),
                    lock,
                    sent,
                    &options,
                )
            })
            // On an error the guards started so far are dropped, which
            // releases them.
            .collect::<Result<Vec<LockGuard>, Error>>()?;
        Ok(LockSet::new(guards))
    }

    /// Runs `work` while holding every one of `names` ([`Client::acquire_all`]),
    /// then releases them; as [`Client::with_lock`], the work's token is
    /// cancelled the moment any of them is lost.
    pub async fn with_locks<F, Fut, T>(
        &self,
        names: &[&str],
        options: AcquireOptions,
        work: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let set = self.acquire_all(names, options).await?;
        let lost = set.lost_token();
        let out = tokio::select! {
            out = work(lost.clone()) => out,
            _ = lost.cancelled() => return Err(Error::Lost),
        };
        if set.is_lost() {
            return Err(Error::Lost);
        }
        let _ = set.release().await;
        Ok(out)
    }

    /// Sends an acquire (`call`) until a node grants it, refuses it for
    /// good, or the wait and the retries run out; moves to another node
    /// after each failure. Answers the grant and where its lease is counted
    /// from: the send of the call that won it, plus the time the node held
    /// it.
    async fn granted<'a, T, F>(
        &'a self,
        body: AcquireBody,
        options: &AcquireOptions,
        call: F,
    ) -> Result<(T, (Instant, Duration)), Error>
    where
        F: Fn(AcquireBody, Duration) -> BoxFuture<'a, Result<(T, Duration), CallError>>,
    {
        let expected_lease = options.lease.unwrap_or(ASSUMED_DEFAULT_LEASE);
        guard::Schedule::checked(expected_lease, options).map_err(Error::BadRequest)?;
        let until = after(options.wait.saturating_add(self.retry_for));
        let wait_until = after(options.wait);
        let mut sent = (Instant::now(), self.suspends.suspended());
        let granted = loop {
            let answer = self
                .retrying(until, || {
                    sent = (Instant::now(), self.suspends.suspended());
                    let mut body = body.clone();
                    let wait = wait_until.saturating_duration_since(sent.0);
                    body.wait_ms = (!wait.is_zero())
                        .then(|| u64::try_from(wait.as_millis()).unwrap_or(u64::MAX));
                    call(body, wait.saturating_add(REQUEST_TIMEOUT))
                })
                .await;
            match answer {
                // A node waits at most `MAX_WAIT_MS` at a time: ask again
                // while this call's own wait lasts.
                Err(CallError::Api(e))
                    if e.error == ErrorCode::Held && Instant::now() < wait_until =>
                {
                    backoff(0).await;
                }
                other => break other.map_err(refused)?,
            }
        };
        let (granted, served) = granted;
        // The node got the request no earlier than it was sent and held it
        // `served`: the lease is counted from there.
        Ok((granted, (sent.0 + served, sent.1)))
    }

    /// Acquires `name` if it is free now; otherwise fails at once with
    /// [`Error::Held`] and the holder's lock.
    pub async fn try_acquire(
        &self,
        name: &str,
        options: AcquireOptions,
    ) -> Result<LockGuard, Error> {
        self.acquire(
            name,
            AcquireOptions {
                wait: Duration::ZERO,
                ..options
            },
        )
        .await
    }

    /// Runs `work` while holding `name`, then releases it. The work is
    /// given a token cancelled the moment the lock is lost or its lease is
    /// about to lapse unrenewed (on this client's clock, even with no node
    /// answering). Work that does not finish by the time the lease itself
    /// ends is stopped (dropped); work whose renewal was refused (another
    /// may hold the lock already) is stopped at once. Either way the call
    /// answers [`Error::Lost`].
    pub async fn with_lock<F, Fut, T>(
        &self,
        name: &str,
        options: AcquireOptions,
        work: F,
    ) -> Result<T, Error>
    where
        F: FnOnce(CancellationToken) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let guard = self.acquire(name, options).await?;
        let lost = guard.lost_token();
        let work = work(lost.clone());
        tokio::pin!(work);
        let outcome = tokio::select! {
            out = &mut work => Ok(out),
            _ = lost.cancelled() => {
                // Let the work see the token and stop, until the lease ends.
                // A refused renewal means another may hold it already: stop
                // now. A lapse leaves the work until the lease ends.
                if guard.loss() != Some(Loss::Refused) {
                    tokio::select! {
                        _ = &mut work => {}
                        _ = guard.lease_ended() => {}
                    }
                }
                Err(Error::Lost)
            }
        };
        match outcome {
            // Work that returned because it saw the token still ran on a
            // lost lock: say so.
            Ok(_) if guard.is_lost() => Err(Error::Lost),
            Ok(out) => {
                // The work is done; a failed release only leaves the lease
                // to run out.
                let _ = guard.release().await;
                Ok(out)
            }
            Err(e) => Err(e),
        }
    }

    /// The lock `name`, if held.
    pub async fn get(&self, name: &str) -> Result<Option<LockView>, Error> {
        checked_name(name)?;
        let until = Instant::now() + self.retry_for;
        self.retrying(until, || {
            self.transport.get(name.to_string(), None, REQUEST_TIMEOUT)
        })
        .await
        .map_err(refused)
    }

    /// The lock `name` once its fence differs from `after_fence`, or after
    /// `wait` (at most 60 s), as it then is.
    pub async fn watch(
        &self,
        name: &str,
        after_fence: u64,
        wait: Duration,
    ) -> Result<Option<LockView>, Error> {
        self.watch_changes(name, after_fence, None, wait).await
    }

    /// As [`Client::watch`], answering also once the lock's data differs
    /// from `after_data` (as the lock last seen had it: `None`, no data),
    /// as [`LockGuard::set_data`] changes it.
    pub async fn watch_data(
        &self,
        name: &str,
        after_fence: u64,
        after_data: Option<&str>,
        wait: Duration,
    ) -> Result<Option<LockView>, Error> {
        let tag = leasehold_api::data_tag(after_data);
        self.watch_changes(name, after_fence, Some(tag), wait).await
    }

    async fn watch_changes(
        &self,
        name: &str,
        after_fence: u64,
        after_data: Option<u64>,
        wait: Duration,
    ) -> Result<Option<LockView>, Error> {
        checked_name(name)?;
        let wait = wait.min(MAX_WATCH);
        let until = after(wait + self.retry_for);
        let watch = leasehold_api::Watch {
            wait,
            after_fence,
            after_data,
        };
        self.retrying(until, || {
            self.transport
                .get(name.to_string(), Some(watch), wait + REQUEST_TIMEOUT)
        })
        .await
        .map_err(refused)
    }

    /// The locks whose names start with `prefix`, at most `limit`.
    pub async fn list(&self, prefix: &str, limit: usize) -> Result<Vec<LockView>, Error> {
        Ok(self.listing(prefix, limit).await?.locks)
    }

    /// As [`Client::list`], with how many locks are held under `prefix`
    /// in all and the free names under it that requests wait for
    /// (`awaited`: a set waiting for all its names keeps the free ones
    /// for itself).
    pub async fn listing(&self, prefix: &str, limit: usize) -> Result<LocksAnswer, Error> {
        let until = Instant::now() + self.retry_for;
        self.retrying(until, || {
            self.transport
                .list(prefix.to_string(), limit, REQUEST_TIMEOUT)
        })
        .await
        .map_err(refused)
    }

    /// The cluster as the node reached sees it.
    pub async fn cluster(&self) -> Result<ClusterAnswer, Error> {
        let until = Instant::now() + self.retry_for;
        self.retrying(until, || self.transport.cluster(REQUEST_TIMEOUT))
            .await
            .map_err(refused)
    }

    /// Releases a lock by name and id (for a lock held without a guard).
    pub async fn release(&self, name: &str, id: &str) -> Result<LockView, Error> {
        let until = Instant::now() + self.retry_for;
        let body = ReleaseBody::one(name, id);
        self.retrying(until, || {
            self.transport.release(body.clone(), REQUEST_TIMEOUT)
        })
        .await
        .map_err(refused)
    }
}

/// A new name for one acquisition: 128 bits from the process's hash keys,
/// a counter and the clock, as 32 hex digits (unique, not secret).
pub fn request_id() -> String {
    use std::hash::BuildHasher;
    static COUNT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let count = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let keys = std::collections::hash_map::RandomState::new();
    let high = keys.hash_one((count, nanos, std::process::id()));
    let low = std::collections::hash_map::RandomState::new().hash_one((nanos, count));
    format!("{high:016x}{low:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_api::ErrorBody;

    fn api(code: ErrorCode) -> CallError {
        CallError::Api(ErrorBody::new(code, "m"))
    }

    /// Callers branch on what went wrong: each answer has its own kind.
    #[test]
    fn each_failure_has_a_kind_callers_can_branch_on() {
        assert!(matches!(refused(api(ErrorCode::NotHeld)), Error::NotHeld));
        assert!(matches!(
            refused(api(ErrorCode::BadRequest)),
            Error::BadRequest(_)
        ));
        assert!(matches!(
            refused(api(ErrorCode::TooLarge)),
            Error::BadRequest(_)
        ));
        assert!(matches!(
            refused(api(ErrorCode::Unauthorized)),
            Error::Unauthorized(_)
        ));
        assert!(matches!(
            refused(api(ErrorCode::NotRebuilt)),
            Error::Unavailable(_)
        ));
        assert!(matches!(
            refused(api(ErrorCode::NoLeader)),
            Error::Unavailable(_)
        ));
        assert!(matches!(
            refused(api(ErrorCode::Internal)),
            Error::Server(_)
        ));
        assert!(matches!(
            refused(api(ErrorCode::WrongMember)),
            Error::Server(_)
        ));
        // Held without a lock: the name is free, but a set waits for it.
        assert!(matches!(refused(api(ErrorCode::Held)), Error::Reserved(_)));
        // Both are someone else having the name; nothing else is.
        assert!(refused(api(ErrorCode::Held)).is_taken());
        assert!(!refused(api(ErrorCode::NoLeader)).is_taken());
        assert!(!refused(api(ErrorCode::Internal)).is_taken());
        assert!(matches!(
            refused(CallError::NoAnswer("timed out".into())),
            Error::NoAnswer(_)
        ));
        assert!(matches!(
            refused(CallError::NotSent("connection refused".into())),
            Error::Unavailable(_)
        ));
    }

    /// A call to a route or with a method the node does not serve (a wrong
    /// URL) is told apart from every answer about a lock.
    #[test]
    fn a_route_the_node_does_not_serve_is_its_own_failure() {
        for code in [ErrorCode::UnknownRoute, ErrorCode::MethodNotAllowed] {
            assert!(
                matches!(refused(api(code)), Error::UnknownRoute(_)),
                "{code}"
            );
        }
        assert!(matches!(
            refused(api(ErrorCode::Disabled)),
            Error::Server(_)
        ));
    }

    #[test]
    fn request_ids_are_new_each_time_and_valid() {
        let ids: std::collections::BTreeSet<String> = (0..1000).map(|_| request_id()).collect();
        assert_eq!(ids.len(), 1000);
        for id in &ids {
            assert!(leasehold_api::validate_request_id(id).is_ok(), "{id}");
        }
    }
}
