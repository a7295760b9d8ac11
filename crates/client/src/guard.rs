//! A held lock: renewed in the background, released when dropped.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use leasehold_api::{ErrorCode, LockRef, LockView, ReleaseBody, RenewBody};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::release::{attempt_timeout, release_one, HandedLock, ATTEMPT_TIMEOUT};
use crate::suspend::SuspendClock;
use crate::transport::{CallError, Transport};
use crate::{refused, AcquireOptions, Error};

/// The longest margin before a lease's end at which an unrenewed lock
/// counts as lost.
const MAX_LAPSE_MARGIN: Duration = Duration::from_secs(2);

/// The shortest renewal period a schedule may ask for.
const MIN_RENEW_EVERY: Duration = Duration::from_millis(10);

/// The longest the renewal task sleeps without looking at the lapse.
const LOOK_AT_MOST: Duration = Duration::from_millis(250);

/// A duration in whole milliseconds, saturating.
fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// When a guard renews, and how long before the lease's end an unrenewed
/// lock counts as lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Schedule {
    pub(crate) every: Duration,
    pub(crate) margin: Duration,
}

impl Schedule {
    /// The schedule `options` ask for under `lease`, or why it cannot keep
    /// the lock: a renewal at least twice a lease and at most every 10 ms,
    /// a margin under half of it, and room for a whole period between a
    /// renewal and the lapse, less half a period at most (a renewal is
    /// sent a period before the lapse at the latest: with less room,
    /// renewals would come back to back).
    pub(crate) fn checked(lease: Duration, options: &AcquireOptions) -> Result<Schedule, String> {
        let schedule = Schedule::asked(lease, options);
        let Schedule { every, margin } = schedule;
        if every < MIN_RENEW_EVERY || every > lease / 2 {
            return Err(format!(
                "a renewal every {every:?} does not fit a {lease:?} lease: renew at least twice \
                 a lease, and at most every {MIN_RENEW_EVERY:?}"
            ));
        }
        if margin >= lease / 2 {
            return Err(format!(
                "a lapse margin of {margin:?} is too long for a {lease:?} lease: keep it under half"
            ));
        }
        if every + every / 2 + margin > lease {
            return Err(format!(
                "a renewal every {every:?} with a lapse margin of {margin:?} leaves too little of a \
                 {lease:?} lease between renewals: shorten one of them"
            ));
        }
        Ok(schedule)
    }

    /// The schedule for a granted `lease`: as asked where it fits. Where
    /// the cluster granted less than was assumed, the margin asked for (the
    /// caller's time to stop its work) is kept if it is under half the
    /// lease, and the period is shortened to fit around it.
    fn fitted(lease: Duration, options: &AcquireOptions) -> Schedule {
        Schedule::checked(lease, options)
            .unwrap_or_else(|_| {
                let asked = Schedule::asked(lease, options);
                let margin = if asked.margin < lease / 2 {
                    asked.margin
                } else {
                    lease / 4
                };
                let room = lease.saturating_sub(margin) * 2 / 3;
                Schedule {
                    every: asked.every.min(lease / 2).min(room),
                    margin,
                }
            })
            .at_least_a_millisecond()
    }

    fn asked(lease: Duration, options: &AcquireOptions) -> Schedule {
        Schedule {
            every: options.renew_every.unwrap_or(lease / 3),
            margin: options
                .lapse_margin
                .unwrap_or((lease / 10).min(MAX_LAPSE_MARGIN)),
        }
    }

    fn at_least_a_millisecond(self) -> Schedule {
        Schedule {
            every: self.every.max(Duration::from_millis(1)),
            margin: self.margin,
        }
    }
}

/// What the renewal task is asked to do when the guard goes.
enum Stop {
    /// Release, and say how it went.
    Release(Option<oneshot::Sender<Result<(), Error>>>),
    /// Stop renewing, and hand the lock over to be released with others
    /// in one call ([`LockGuard::hand_over`]).
    Hand(oneshot::Sender<Result<Handed, Error>>),
}

/// A held lock whose renewals stopped, handed over to be released
/// ([`LockGuard::hand_over`]): its name and id, and its lease as this
/// client counts it.
pub(crate) struct Handed {
    lock: LockRef,
    lease: Arc<LeaseCount>,
}

impl HandedLock for Handed {
    fn lock(&self) -> &LockRef {
        &self.lock
    }

    fn ends(&self) -> Instant {
        self.lease.ends()
    }
}

/// How long a change of data is tried while the cluster answers
/// `upgrading` (its members have not all agreed the version that allows
/// it: at a new cluster's start, for a few seconds, or through a rolling
/// upgrade).
const DATA_PATIENCE: Duration = Duration::from_secs(5);

/// Why a renewal did not go through.
enum Failed {
    /// The lock is lost.
    Lost(Loss),
    /// A change of data was refused; the lock is kept.
    NotChanged(Error),
}

/// Why a held lock was lost ([`LockGuard::loss`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// The cluster refused a renewal: the lock is gone (released by an
    /// operator, its lease ended, or a rebuild kept an older grant).
    /// Another client may hold it already.
    Refused,
    /// No renewal got through before the lease was about to end on this
    /// client's clock: the cluster may still have it, until its lease ends.
    Lapsed,
}

/// A lock this client holds. It is renewed in the background until it is
/// released ([`LockGuard::release`]) or dropped (which releases it in the
/// background). [`LockGuard::lost_token`] is cancelled the moment the lock
/// is lost, or its lease is about to lapse unrenewed on this client's clock.
pub struct LockGuard {
    view: Arc<Mutex<LockView>>,
    lease: Arc<LeaseCount>,
    /// What renews the lock, shared with the renewal task (a change of the
    /// lock's data is a renewal too).
    renewal: Arc<Renewal>,
    stop: Option<oneshot::Sender<Stop>>,
    task: Option<JoinHandle<()>>,
}

/// Where a lease is counted from: when it ends on the runtime's clock, and
/// how long the machine had been suspended at the send it is counted from.
#[derive(Debug, Clone, Copy)]
struct Count {
    ends: Instant,
    suspended_at_send: Duration,
}

/// The lease as this client counts it, shared by the guard and its
/// renewal task, and whether (and why) the lock is lost.
struct LeaseCount {
    count: Mutex<Count>,
    margin: Duration,
    suspends: Arc<dyn SuspendClock>,
    lost: CancellationToken,
    loss: OnceLock<Loss>,
}

impl LeaseCount {
    /// When the lease ends, on the runtime's clock, less any suspend since
    /// the send it is counted from (the runtime's clock stood still then).
    fn ends(&self) -> Instant {
        let count = *self.count.lock().unwrap_or_else(|p| p.into_inner());
        let suspended = self
            .suspends
            .suspended()
            .saturating_sub(count.suspended_at_send);
        count
            .ends
            .checked_sub(suspended)
            .unwrap_or_else(Instant::now)
    }

    /// When the unrenewed lock counts as lost.
    fn lapse(&self) -> Instant {
        let ends = self.ends();
        ends.checked_sub(self.margin).unwrap_or(ends)
    }

    /// The lease now runs for `left` from a send at `sent`.
    fn counted_from(&self, sent: Instant, suspended_at_send: Duration, left: Duration) {
        *self.count.lock().unwrap_or_else(|p| p.into_inner()) = Count {
            ends: sent + left,
            suspended_at_send,
        };
    }

    fn lose(&self, loss: Loss) {
        let _ = self.loss.set(loss);
        self.lost.cancel();
    }

    /// Resolves once the lapse has come (looked at every so often: a
    /// suspend moves it closer without any timer noticing), or the lock was
    /// declared lost.
    async fn lapsed(&self) {
        self.passed(|| self.lapse()).await
    }

    /// Resolves once the lease has ended, as [`LeaseCount::lapsed`].
    async fn ended(&self) {
        self.passed(|| self.ends()).await
    }

    async fn passed(&self, deadline: impl Fn() -> Instant) {
        loop {
            let at = deadline();
            let now = Instant::now();
            if now >= at {
                return;
            }
            tokio::time::sleep_until(at.min(now + self.look_every())).await;
        }
    }

    /// How often a wait looks at the lease again: often enough that a
    /// suspend is seen within half the margin of waking.
    fn look_every(&self) -> Duration {
        (self.margin / 2).clamp(Duration::from_millis(10), LOOK_AT_MOST)
    }

    /// Whether the lock is lost, judged now: a lapse is seen the moment it
    /// is due, whether or not the renewal task has run since (it may have
    /// been starved, or the machine suspended).
    fn is_lost(&self) -> bool {
        if !self.lost.is_cancelled() && Instant::now() >= self.lapse() {
            self.lose(Loss::Lapsed);
        }
        self.lost.is_cancelled()
    }
}

/// The renewal task's view of the lock.
struct Renewal {
    transport: Arc<dyn Transport>,
    view: Arc<Mutex<LockView>>,
    /// When the call that answered `view` was sent: an answer to an
    /// earlier call (a background renewal crossing a change of data)
    /// does not replace it.
    view_sent: Mutex<Instant>,
    lease_count: Arc<LeaseCount>,
    name: String,
    id: String,
    lease: Duration,
    every: Duration,
}

impl LockGuard {
    /// Starts guarding `granted`, whose request was sent at `sent`, when
    /// the machine had been suspended for `suspended_at_send`.
    pub(crate) fn start(
        transport: Arc<dyn Transport>,
        suspends: Arc<dyn SuspendClock>,
        granted: LockView,
        (sent, suspended_at_send): (Instant, Duration),
        options: &AcquireOptions,
    ) -> Result<LockGuard, Error> {
        // Never counted past the lease asked for, whatever an answer says.
        let granted_lease = Duration::from_millis(granted.lease_ms.max(1));
        let lease = options
            .lease
            .map_or(granted_lease, |asked| asked.min(granted_lease))
            .max(Duration::from_millis(1));
        let Schedule { every, margin } = Schedule::fitted(lease, options);
        let lease_count = Arc::new(LeaseCount {
            count: Mutex::new(Count {
                ends: sent + Duration::from_millis(granted.ttl_ms).min(lease),
                suspended_at_send,
            }),
            margin,
            suspends,
            lost: CancellationToken::new(),
            loss: OnceLock::new(),
        });
        if Instant::now() >= lease_count.lapse() {
            // The grant came too late to be used: give it back.
            let body = ReleaseBody::one(granted.name.clone(), granted.id.clone());
            let t = transport.clone();
            leasehold_tasks::spawn(async move {
                let _ = t.release(body, ATTEMPT_TIMEOUT).await;
            });
            return Err(Error::ArrivedLate);
        }
        let view = Arc::new(Mutex::new(granted.clone()));
        let (stop, stopped) = oneshot::channel();
        let renewal = Renewal {
            transport,
            view: view.clone(),
            view_sent: Mutex::new(sent),
            lease_count: lease_count.clone(),
            name: granted.name.clone(),
            id: granted.id.clone(),
            lease,
            every,
        };
        let renewal = Arc::new(renewal);
        let task = leasehold_tasks::spawn(Arc::clone(&renewal).run(stopped));
        Ok(LockGuard {
            view,
            lease: lease_count,
            renewal,
            stop: Some(stop),
            task: Some(task),
        })
    }

    /// The lock as last granted or renewed.
    pub fn lock(&self) -> LockView {
        self.view.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The lock's name.
    pub fn name(&self) -> String {
        self.lock().name
    }

    /// The grant's id.
    pub fn id(&self) -> String {
        self.lock().id
    }

    /// The grant's fencing token: pass it to the resource the lock guards,
    /// which refuses any request carrying a lower one.
    pub fn fence(&self) -> u64 {
        self.lock().fence
    }

    /// When the lease ends on this client's clock, as of the last renewal
    /// (earlier by any time the machine spent suspended since).
    pub fn lease_ends(&self) -> std::time::Instant {
        self.lease.ends().into_std()
    }

    /// Keeps `data` with the lock in place of its data (for an election,
    /// the leader proclaiming a new value): a renewal that changes it, put
    /// on record with two members before it is answered, as any renewal.
    /// Watchers of the lock see the change at once (`after_data`).
    /// `Err(Error::Lost)` if the lock is lost or may be (judged on the
    /// clock first); `Err(Error::BadRequest)` for data too long, or when the
    /// speaker runs a build from before data could change, which renews but
    /// keeps the data as granted; `Err(Error::Unavailable)` while the cluster cannot change
    /// data yet (`upgrading`: a member runs an earlier build), after
    /// trying for 5 s. The lock is kept on every error but `Lost`.
    pub async fn set_data(&self, data: &str) -> Result<LockView, Error> {
        self.holding().set_data(data).await
    }

    /// A token cancelled when the lock is lost or about to lapse. The
    /// lapse is judged as the token is handed out too, so a token taken
    /// after a pause (SIGSTOP, a suspend) that outlived the lease is
    /// cancelled already, whether or not the renewal task has run since.
    pub fn lost_token(&self) -> CancellationToken {
        self.lease.is_lost();
        self.lease.lost.clone()
    }

    /// Whether the lock is lost, or about to lapse: judged now on the
    /// client's clock (suspends included), not only as last seen by the
    /// renewal task.
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// `Err(Error::Lost)` once the lock may be lost, judged now as
    /// [`LockGuard::is_lost`] does: call it before every unit of work that
    /// acts as the holder. A process paused past its lease learns it here
    /// before it acts (the fence is still the resource's defence: a pause
    /// between this check and the act is not seen).
    pub fn check(&self) -> Result<(), Error> {
        match self.is_lost() {
            true => Err(Error::Lost),
            false => Ok(()),
        }
    }

    /// A view of the held lock that can be shared (with the work done
    /// under it, with an observer) without the right to release it.
    pub fn holding(&self) -> Holding {
        Holding {
            view: self.view.clone(),
            lease: self.lease.clone(),
            renewal: self.renewal.clone(),
        }
    }

    /// Why the lock was lost, once it was (`None` while it is held, and
    /// after a release).
    pub fn loss(&self) -> Option<Loss> {
        self.lease.is_lost();
        self.lease.loss.get().copied()
    }

    /// Waits until the lock is lost.
    pub async fn lost(&self) {
        self.lease.lost.cancelled().await
    }

    /// Waits until the lease has ended on this client's clock (suspends
    /// included: looked at again every so often, not set once).
    pub async fn lease_ended(&self) {
        self.lease.ended().await
    }

    /// How long before the lease's end an unrenewed lock counts as lost
    /// (the schedule's lapse margin, as fitted to the lease granted).
    pub fn lapse_margin(&self) -> Duration {
        self.lease.margin
    }

    /// Stops renewing and releases the lock.
    pub async fn release(mut self) -> Result<(), Error> {
        let (tx, rx) = oneshot::channel();
        if let Some(stop) = self.stop.take() {
            if stop.send(Stop::Release(Some(tx))).is_err() {
                return Err(Error::Lost);
            }
        }
        let result = rx.await.unwrap_or(Err(Error::Lost));
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        result
    }

    /// Stops renewing and hands the lock over, to be released with others
    /// in one call ([`crate::LockSet::release`]); `Err(Error::Lost)` if it
    /// was lost already (nothing to release).
    pub(crate) async fn hand_over(mut self) -> Result<Handed, Error> {
        let (tx, rx) = oneshot::channel();
        if let Some(stop) = self.stop.take() {
            if stop.send(Stop::Hand(tx)).is_err() {
                return Err(Error::Lost);
            }
        }
        let result = rx.await.unwrap_or(Err(Error::Lost));
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        result
    }

    /// The transport the lock is renewed and released through.
    pub(crate) fn transport(&self) -> Arc<dyn Transport> {
        self.renewal.transport.clone()
    }
}

/// A view of a held lock, shared without the right to release it
/// ([`LockGuard::holding`]): the same questions as the guard answers, each
/// judged now on the client's clock.
#[derive(Clone)]
pub struct Holding {
    view: Arc<Mutex<LockView>>,
    lease: Arc<LeaseCount>,
    renewal: Arc<Renewal>,
}

impl Holding {
    /// [`LockGuard::set_data`], for the leader's work an elector hands
    /// this view to.
    pub(crate) async fn set_data(&self, data: &str) -> Result<LockView, Error> {
        if self.lease.is_lost() {
            return Err(Error::Lost);
        }
        leasehold_api::validate_data(data).map_err(|e| Error::BadRequest(e.to_string()))?;
        let renewed = match self.renewal.renew(Some(data)).await {
            Ok(renewed) => renewed,
            Err(Failed::NotChanged(e)) => return Err(e),
            Err(Failed::Lost(loss)) => {
                self.lease.lose(loss);
                return Err(Error::Lost);
            }
        };
        if renewed.data.as_deref() != Some(data) {
            return Err(Error::BadRequest(
                "the speaker renewed the lock but kept its data: it runs an earlier build; \
                 upgrade every member to change a held lock's data"
                    .to_string(),
            ));
        }
        Ok(renewed)
    }

    /// The lock as last granted or renewed.
    pub fn lock(&self) -> LockView {
        self.view.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The grant's fencing token.
    pub fn fence(&self) -> u64 {
        self.lock().fence
    }

    /// When the lease ends on this client's clock ([`LockGuard::lease_ends`]).
    pub fn lease_ends(&self) -> std::time::Instant {
        self.lease.ends().into_std()
    }

    /// Whether the lock is lost or about to lapse, judged now.
    pub fn is_lost(&self) -> bool {
        self.lease.is_lost()
    }

    /// `Err(Error::Lost)` once the lock may be lost ([`LockGuard::check`]).
    pub fn check(&self) -> Result<(), Error> {
        match self.is_lost() {
            true => Err(Error::Lost),
            false => Ok(()),
        }
    }

    /// A token cancelled when the lock is lost or about to lapse, judged
    /// as it is handed out ([`LockGuard::lost_token`]).
    pub fn lost_token(&self) -> CancellationToken {
        self.lease.is_lost();
        self.lease.lost.clone()
    }

    /// Waits until the lock is lost.
    pub async fn lost(&self) {
        self.lease.lost.cancelled().await
    }

    /// Why the lock was lost, once it was.
    pub fn loss(&self) -> Option<Loss> {
        self.lease.is_lost();
        self.lease.loss.get().copied()
    }
}

impl std::fmt::Debug for Holding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lock = self.lock();
        f.debug_struct("Holding")
            .field("name", &lock.name)
            .field("fence", &lock.fence)
            .finish_non_exhaustive()
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            // The task releases in the background.
            let _ = stop.send(Stop::Release(None));
        }
    }
}

impl Renewal {
    async fn run(self: Arc<Self>, mut stopped: oneshot::Receiver<Stop>) {
        let mut next = self.next_renewal();
        loop {
            // Looked at again every so often: a suspend moves the lapse
            // closer without any timer noticing.
            let lapse = self.lease_count.lapse();
            let look = Instant::now() + self.lease_count.look_every();
            tokio::select! {
                _ = tokio::time::sleep_until(next.min(lapse).min(look)) => {}
                stop = &mut stopped => {
                    let reply = match stop {
                        Ok(Stop::Release(reply)) => reply,
                        Ok(Stop::Hand(reply)) => {
                            let _ = reply.send(Ok(Handed {
                                lock: LockRef::new(self.name.clone(), self.id.clone()),
                                lease: self.lease_count.clone(),
                            }));
                            self.lease_count.lost.cancel();
                            return;
                        }
                        Err(_) => None, // the guard was forgotten: release anyway
                    };
                    let result = self.release().await;
                    if let Some(reply) = reply {
                        let _ = reply.send(result);
                    }
                    self.lease_count.lost.cancel();
                    return;
                }
            }
            let lapse = self.lease_count.lapse();
            if Instant::now() >= lapse || self.lease_count.lost.is_cancelled() {
                tracing::warn!(name = %self.name, "lock lapsed: no renewal got through in time");
                self.lease_count.lose(Loss::Lapsed);
                // Nothing to release; a later release() answers Lost.
                let _ = self.release_when_stopped(stopped).await;
                return;
            }
            // A suspend may have moved the lapse closer than the renewal
            // planned: renew early enough still.
            next = next.min(self.next_renewal());
            if Instant::now() < next {
                continue;
            }
            match self.renew(None).await {
                Ok(_) => next = self.next_renewal(),
                // Only a change of data is refused without a loss.
                Err(Failed::NotChanged(_)) => next = self.next_renewal(),
                Err(Failed::Lost(loss)) => {
                    self.lease_count.lose(loss);
                    let _ = self.release_when_stopped(stopped).await;
                    return;
                }
            }
        }
    }

    /// When to renew next: a period from now, but early enough that a
    /// whole period is left before the lapse (at once, for a grant that
    /// came with little of its lease left).
    fn next_renewal(&self) -> Instant {
        let lapse = self.lease_count.lapse();
        let now = Instant::now();
        let early = lapse.checked_sub(self.every).unwrap_or(now).max(now);
        (now + self.every).min(early)
    }

    /// Renews (keeping `data` with the lock in place of its data, if
    /// given), trying node after node, until it gets through or the lapse:
    /// the lock as renewed.
    ///
    /// A change of data the cluster cannot take is not a loss: refused as
    /// malformed or forbidden it fails at once, and while the cluster is
    /// `upgrading` (a member runs an earlier build) it is tried for
    /// [`DATA_PATIENCE`] and then given up; the lock is kept either way.
    async fn renew(&self, data: Option<&str>) -> Result<LockView, Failed> {
        let mut attempt = 0u32;
        let started = Instant::now();
        loop {
            // Looked at again before every attempt, and raced against it: a
            // suspend meanwhile moves the lapse closer.
            let lapse = self.lease_count.lapse();
            let sent = Instant::now();
            let suspended_at_send = self.lease_count.suspends.suspended();
            if sent >= lapse || self.lease_count.lost.is_cancelled() {
                return Err(Failed::Lost(Loss::Lapsed));
            }
            let body = RenewBody {
                name: self.name.clone(),
                id: self.id.clone(),
                lease_ms: Some(millis(self.lease)),
                data: data.map(str::to_string),
            };
            let endpoints = self.transport.endpoints().max(1);
            let tries_left = endpoints - attempt as usize % endpoints;
            let timeout = attempt_timeout(lapse.saturating_duration_since(sent), tries_left);
            let answer = tokio::select! {
                answer = self.transport.renew(body, timeout) => answer,
                _ = self.lease_count.lapsed() => return Err(Failed::Lost(Loss::Lapsed)),
            };
            match answer {
                // Declared lost meanwhile (`is_lost` saw the lapse): lost
                // it stays, whatever the cluster says.
                Ok(_) if self.lease_count.lost.is_cancelled() => {
                    return Err(Failed::Lost(Loss::Lapsed))
                }
                Ok(view) => {
                    let left = Duration::from_millis(view.ttl_ms).min(self.lease);
                    self.lease_count.counted_from(sent, suspended_at_send, left);
                    let mut latest = self.view_sent.lock().unwrap_or_else(|p| p.into_inner());
                    if sent >= *latest {
                        *latest = sent;
                        *self.view.lock().unwrap_or_else(|p| p.into_inner()) = view.clone();
                    }
                    return Ok(view);
                }
                Err(CallError::Api(e))
                    if matches!(e.error, ErrorCode::NotHeld | ErrorCode::Held) =>
                {
                    tracing::warn!(name = %self.name, error = %e.error, "renewal refused: the lock is lost");
                    return Err(Failed::Lost(Loss::Refused));
                }
                Err(CallError::Api(e))
                    if data.is_some()
                        && matches!(
                            e.error,
                            ErrorCode::BadRequest
                                | ErrorCode::TooLarge
                                | ErrorCode::Forbidden
                                | ErrorCode::Unauthorized
                        ) =>
                {
                    return Err(Failed::NotChanged(refused(CallError::Api(e))));
                }
                Err(CallError::Api(e))
                    if data.is_some()
                        && e.error == ErrorCode::Upgrading
                        && started.elapsed() >= DATA_PATIENCE =>
                {
                    return Err(Failed::NotChanged(refused(CallError::Api(e))));
                }
                Err(e) => {
                    // Unknown outcome, no speaker, or a node that failed:
                    // not lost until the lease really runs out; try
                    // another node.
                    tracing::debug!(name = %self.name, %e, "renewal did not get through; retrying");
                    self.transport.move_on();
                    let pause = Duration::from_millis((25u64 << attempt.min(3)).min(200));
                    tokio::select! {
                        _ = tokio::time::sleep(pause) => {}
                        _ = self.lease_count.lapsed() => return Err(Failed::Lost(Loss::Lapsed)),
                    }
                    attempt += 1;
                }
            }
        }
    }

    /// Releases, trying node after node while the lease runs.
    async fn release(&self) -> Result<(), Error> {
        let lock = LockRef::new(self.name.clone(), self.id.clone());
        release_one(&*self.transport, &lock, || self.lease_count.ends(), false).await
    }

    async fn release_when_stopped(&self, stopped: oneshot::Receiver<Stop>) -> Result<(), Error> {
        match stopped.await {
            Ok(Stop::Release(reply)) => {
                if let Some(reply) = reply {
                    let _ = reply.send(Err(Error::Lost));
                }
                Ok(())
            }
            Ok(Stop::Hand(reply)) => {
                let _ = reply.send(Err(Error::Lost));
                Ok(())
            }
            Err(_) => Ok(()),
        }
    }
}
