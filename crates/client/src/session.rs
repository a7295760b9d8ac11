//! A session: one lease that many locks hang off, renewed once for all of
//! them, and lost with all of them.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use leasehold_api::{LockRef, LockView, SessionBody, SessionView};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::release::attempt_timeout;
use crate::transport::{SessionCall, Transport};
use crate::{refused, AcquireOptions, Client, Error, Loss, REQUEST_TIMEOUT};

/// How a session is opened.
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// The session's lease; none means the cluster's default. Every lock
    /// of the session has this lease.
    pub ttl: Option<Duration>,
    /// Who holds it, for people reading a listing.
    pub holder: Option<String>,
    /// The lock-delay of every lock taken in the session (Consul's session
    /// `LockDelay`): once the session lapses unclosed, each lock's name
    /// stays closed this much longer. Zero for none; a lock asked with its
    /// own [`AcquireOptions::lock_delay`] takes that instead. Needs
    /// protocol 8.
    pub lock_delay: Duration,
}

/// A session this client holds: renewed in the background, once for all
/// its locks, until it is closed ([`Session::close`]) or dropped (which
/// closes it in the background, releasing its locks).
/// [`Session::lost_token`] is cancelled the moment the session is lost (a
/// renewal refused, or its lease about to lapse unrenewed on this client's
/// clock): every lock of it is lost with it.
pub struct Session {
    client: Client,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
    closed: bool,
}

struct Shared {
    transport: Arc<dyn Transport>,
    id: String,
    view: Mutex<SessionView>,
    /// When the lease ends, counted from the send of the call that won or
    /// renewed it.
    ends: Mutex<Instant>,
    margin: Duration,
    lost: CancellationToken,
    /// Why the session was lost (none while it runs, or once closed).
    loss: Arc<OnceLock<Loss>>,
    /// The lock-delay of its locks ([`SessionOptions::lock_delay`]).
    lock_delay: Duration,
    /// The locks held in it.
    locks: Mutex<Vec<HeldInSession>>,
}

/// A lock held in a session, as the session keeps it.
struct HeldInSession {
    id: String,
    /// Cancelled once it is lost (a child of the session's).
    lost: CancellationToken,
    /// Why it was lost on its own (a renewal found it gone).
    loss: Arc<OnceLock<Loss>>,
    /// When its grant was answered.
    granted: Instant,
}

/// A lock of a session: no renewal of its own; lost when its session is,
/// or when a renewal of the session finds it gone.
#[derive(Debug, Clone)]
pub struct SessionLock {
    view: LockView,
    lost: CancellationToken,
    loss: Arc<OnceLock<Loss>>,
    session_loss: Arc<OnceLock<Loss>>,
}

impl SessionLock {
    /// The lock as granted.
    pub fn lock(&self) -> &LockView {
        &self.view
    }

    /// Its fencing token.
    pub fn fence(&self) -> u64 {
        self.view.fence
    }

    /// Cancelled once the lock is lost.
    pub fn lost_token(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Whether the lock is lost.
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }

    /// Why the lock was lost: [`Loss::Refused`] when a renewal of its
    /// session found it gone (a rebuild kept an older grant, an operator
    /// released it) or the cluster refused the session, [`Loss::Lapsed`]
    /// when no renewal of the session got through before its lease was
    /// about to end on this client's clock. `None` while held, and after
    /// the session was closed or the lock released by this client.
    pub fn loss(&self) -> Option<Loss> {
        self.loss.get().or(self.session_loss.get()).copied()
    }
}

impl Client {
    /// Opens a session: a lease that locks taken with
    /// [`Session::acquire`] hang off, renewed in the background once for
    /// all of them.
    pub async fn open_session(&self, options: SessionOptions) -> Result<Session, Error> {
        let body = leasehold_api::SessionOpenBody {
            holder: options.holder.clone(),
            ttl_ms: options.ttl.map(|d| d.as_millis() as u64),
        };
        let until = Instant::now() + self.retry_for;
        // A Mutex, not a Cell: the future is Send (a session may be opened
        // in a spawned task).
        let sent = Mutex::new(Instant::now());
        let answer = self
            .retrying(until, || {
                *lock(&sent) = Instant::now();
                self.transport
                    .session(SessionCall::Open(body.clone()), REQUEST_TIMEOUT)
            })
            .await
            .map_err(refused)?;
        let view = answer.session;
        let lease = Duration::from_millis(view.lease_ms);
        let sent = *lock(&sent);
        let ends = sent + Duration::from_millis(answer.served_ms + view.ttl_ms);
        let shared = Arc::new(Shared {
            transport: self.transport.clone(),
            id: view.id.clone(),
            view: Mutex::new(view),
            ends: Mutex::new(ends),
            margin: (lease / 10).min(Duration::from_secs(2)),
            lost: CancellationToken::new(),
            loss: Arc::new(OnceLock::new()),
            lock_delay: options.lock_delay,
            locks: Mutex::new(Vec::new()),
        });
        let task = tokio::spawn(renew(Arc::clone(&shared), lease / 3));
        Ok(Session {
            client: self.clone(),
            shared,
            task,
            closed: false,
        })
    }
}

impl Session {
    /// The session's id.
    pub fn id(&self) -> &str {
        &self.shared.id
    }

    /// The session as last opened or renewed.
    pub fn view(&self) -> SessionView {
        lock(&self.shared.view).clone()
    }

    /// When the session's lease ends on this client's count (from the send
    /// of the call that opened or last renewed it): no lock of it may be
    /// counted held past this.
    pub fn lease_ends(&self) -> std::time::Instant {
        lock(&self.shared.ends).into_std()
    }

    /// Takes `name` in this session, waiting as `options` say: the lock has
    /// the session's lease and no renewal of its own (`options.lease` is
    /// not taken), and `options.lock_delay`, or with none the session's
    /// ([`SessionOptions::lock_delay`]), after the session's lease.
    pub async fn acquire(&self, name: &str, options: AcquireOptions) -> Result<SessionLock, Error> {
        if self.is_lost() {
            return Err(Error::Lost);
        }
        let options = AcquireOptions {
            session: Some(self.shared.id.clone()),
            lease: None,
            lock_delay: match options.lock_delay {
                own if own.is_zero() => self.shared.lock_delay,
                own => own,
            },
            ..options
        };
        let body = crate::acquire_body(Some(name.to_string()), None, &options);
        let transport = &self.shared.transport;
        let (view, _sent) = self
            .client
            .granted(body, &options, |body, timeout| {
                transport.acquire(body, timeout)
            })
            .await?;
        let lost = self.shared.lost.child_token();
        let loss = Arc::new(OnceLock::new());
        lock(&self.shared.locks).push(HeldInSession {
            id: view.id.clone(),
            lost: lost.clone(),
            loss: Arc::clone(&loss),
            granted: Instant::now(),
        });
        Ok(SessionLock {
            view,
            lost,
            loss,
            session_loss: Arc::clone(&self.shared.loss),
        })
    }

    /// Runs `work` while holding `name` in this session
    /// ([`Session::acquire`]), then releases the lock and leaves the
    /// session open. The work is given a token cancelled the moment the
    /// lock is lost (with its session, or found gone by a renewal); a lock
    /// of a session has no lease of its own to wait out, so work still
    /// running then is stopped (dropped) at once, and the call answers
    /// [`Error::Lost`], as it does for work that returned after the loss.
    /// The lock is released however the call ends: in the background when
    /// the work panics or this future is dropped mid-way.
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
        let held = self.acquire(name, options).await?;
        let lost = held.lost_token();
        // However the call ends (a loss, work that panics, a caller that
        // drops this future), the lock is released in the background: a
        // lock of a session is otherwise held as long as the session.
        let releasing = ReleaseOnDrop {
            shared: Arc::clone(&self.shared),
            lock: Some(LockRef::new(held.view.name.clone(), held.view.id.clone())),
        };
        let out = tokio::select! {
            out = work(lost.clone()) => out,
            () = lost.cancelled() => return Err(Error::Lost),
        };
        if held.is_lost() || self.is_lost() {
            return Err(Error::Lost);
        }
        // The work is done. The release is tried node after node while
        // the session lasts, as a guard's is; one that fails still leaves
        // the lock to end with the session.
        if let Some(lock) = releasing.disarm() {
            let _ = self.shared.release_lock(&lock).await;
        }
        Ok(out)
    }

    /// Releases one lock of the session before the session ends, trying
    /// node after node while the session's lease runs, as a guard's
    /// release does. `Err(Error::Lost)` when the cluster no longer held it.
    pub async fn release(&self, held: SessionLock) -> Result<(), Error> {
        let lock = LockRef::new(held.view.name.clone(), held.view.id.clone());
        self.shared.release_lock(&lock).await
    }

    /// Cancelled once the session is lost, with every lock of it.
    pub fn lost_token(&self) -> CancellationToken {
        self.shared.lost.clone()
    }

    /// Whether the session is lost, judged now (a lapse is seen the moment
    /// it is due).
    pub fn is_lost(&self) -> bool {
        self.shared.is_lost()
    }

    /// Why the session was lost ([`Loss::Refused`]: the cluster refused a
    /// renewal, the session is gone; [`Loss::Lapsed`]: no renewal got
    /// through before its lease was about to end on this client's clock).
    /// `None` while it runs, and once closed.
    pub fn loss(&self) -> Option<Loss> {
        self.shared.is_lost();
        self.shared.loss.get().copied()
    }

    /// Resolves once the session is lost.
    pub async fn lost(&self) {
        self.shared.lost.cancelled().await
    }

    /// Closes the session: it and every lock of it are released. Answers
    /// how many locks went with it.
    pub async fn close(mut self) -> Result<u64, Error> {
        self.closed = true;
        self.task.abort();
        self.shared.lost.cancel();
        let body = SessionBody {
            id: self.shared.id.clone(),
            ..SessionBody::default()
        };
        let answer = self
            .shared
            .transport
            .session(SessionCall::Close(body), REQUEST_TIMEOUT)
            .await
            .map_err(refused)?;
        Ok(answer.session.locks.unwrap_or(0))
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.task.abort();
        if self.closed {
            return;
        }
        self.shared.lost.cancel();
        let shared = Arc::clone(&self.shared);
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let body = SessionBody {
                    id: shared.id.clone(),
                    ..SessionBody::default()
                };
                let _ = shared
                    .transport
                    .session(SessionCall::Close(body), REQUEST_TIMEOUT)
                    .await;
            });
        }
    }
}

/// Releases a lock of `with_lock` in the background when dropped armed.
struct ReleaseOnDrop {
    shared: Arc<Shared>,
    lock: Option<LockRef>,
}

impl ReleaseOnDrop {
    /// The lock, no longer released on drop.
    fn disarm(mut self) -> Option<LockRef> {
        self.lock.take()
    }
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        let Some(held) = self.lock.take() else {
            return;
        };
        // Out of the digest at once; the cluster is told in the background.
        lock(&self.shared.locks).retain(|l| l.id != held.id);
        let shared = Arc::clone(&self.shared);
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = shared.release_lock(&held).await;
            });
        }
    }
}

impl Shared {
    /// Releases `held`, a lock of the session: out of the digest, then
    /// tried node after node until released, refused, or the session's
    /// lease is over (the lock with it).
    async fn release_lock(&self, held: &LockRef) -> Result<(), Error> {
        lock(&self.locks).retain(|l| l.id != held.id);
        crate::release::release_one(&*self.transport, held, || *lock(&self.ends), false).await
    }

    /// When the session counts as lost unless renewed.
    fn lapse(&self) -> Instant {
        let ends = *lock(&self.ends);
        ends.checked_sub(self.margin).unwrap_or(ends)
    }

    fn is_lost(&self) -> bool {
        let ends = *lock(&self.ends);
        if !self.lost.is_cancelled() && Instant::now() + self.margin >= ends {
            self.lose(Loss::Lapsed);
        }
        self.lost.is_cancelled()
    }

    /// The digest of the ids of the locks held in the session.
    fn digest(&self) -> String {
        let digest = lock(&self.locks)
            .iter()
            .filter_map(|l| l.id.parse::<leasehold_api::LockId>().ok())
            .fold(0u128, |d, id| d ^ id.as_u128());
        leasehold_api::format_digest(digest)
    }

    /// Marks lost every lock not in `held`, the session's locks as a
    /// renewal sent at `sent` found them: a lock granted since (its answer
    /// came after the send) may be missing from it, and is kept.
    fn keep_only(&self, held: &[String], sent: Instant) {
        let held: BTreeSet<&String> = held.iter().collect();
        lock(&self.locks).retain(|l| {
            let kept = held.contains(&l.id) || l.granted >= sent;
            if !kept {
                let _ = l.loss.set(Loss::Refused);
                l.lost.cancel();
            }
            kept
        });
    }

    /// The session is lost, for `why` (the first reason stands).
    fn lose(&self, why: Loss) {
        let _ = self.loss.set(why);
        self.lost.cancel();
    }
}

/// Renews the session every `every` until it is lost; a renewal refused
/// loses it at once, and one that gets no answer is tried again, node
/// after node, until the lease is about to end. Each attempt has a share
/// of the time left for every endpoint not tried yet in the round, as a
/// guard's renewal has: a node that hangs leaves time for the others.
async fn renew(shared: Arc<Shared>, every: Duration) {
    let every = every.max(Duration::from_millis(10));
    loop {
        tokio::select! {
            _ = shared.lost.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
            _ = tokio::time::sleep_until(shared.lapse()) => {}
        }
        let mut attempt = 0usize;
        loop {
            if shared.is_lost() {
                return;
            }
            let body = SessionBody {
                id: shared.id.clone(),
                ttl_ms: None,
                digest: Some(shared.digest()),
            };
            let sent = Instant::now();
            let endpoints = shared.transport.endpoints().max(1);
            let tries_left = endpoints - attempt % endpoints;
            let timeout =
                attempt_timeout(shared.lapse().saturating_duration_since(sent), tries_left);
            // Raced against the lapse: a call that hangs must not hold the
            // loss back past the lease.
            let answer = tokio::select! {
                answer = shared
                    .transport
                    .session(SessionCall::Renew(body), timeout) => answer,
                _ = tokio::time::sleep_until(shared.lapse()) => {
                    shared.lose(Loss::Lapsed);
                    return;
                }
            };
            match answer {
                Ok(answer) => {
                    let left = Duration::from_millis(answer.session.ttl_ms);
                    *lock(&shared.ends) = sent + left;
                    if let Some(held) = &answer.held {
                        shared.keep_only(held, sent);
                    }
                    *lock(&shared.view) = answer.session;
                    break;
                }
                Err(crate::CallError::Api(e)) if !e.error.retryable() => {
                    tracing::warn!(session = %shared.id, error = %e.error, "session renewal refused: the session is lost");
                    shared.lose(Loss::Refused);
                    return;
                }
                Err(e) => {
                    tracing::debug!(session = %shared.id, %e, "session renewal did not get through; retrying");
                    shared.transport.move_on();
                    attempt += 1;
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                        _ = tokio::time::sleep_until(shared.lapse()) => {}
                    }
                }
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
