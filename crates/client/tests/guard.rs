//! The guard's rules over a fake transport on tokio's paused clock: how the
//! lease is counted, when renewals go out, when the lock counts as lost,
//! and what `with_lock` does then. Every time here is virtual, so the
//! tests assert exact schedules without waiting for them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_api::{
    AcquireBody, ClusterAnswer, ErrorBody, ErrorCode, LockView, ReleaseBody, RenewBody, Watch,
};
use leasehold_client::{AcquireOptions, BoxFuture, CallError, Client, Error, Loss, Transport};
use tokio::time::Instant;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// How the fake answers one call.
#[derive(Debug, Clone, Copy)]
enum Reply {
    /// A lock with this much of its lease left.
    Ttl(u64),
    /// `404 not_held`.
    NotHeld,
    /// `500 internal`: a node that failed.
    Failed,
    /// `409 held`, by another client.
    Held,
    /// Nothing until the caller's timeout, then no answer.
    Silence,
    /// The connection refused: the request never left.
    Refused,
    /// `404 unknown_route`: an endpoint that is not a node's API (a wrong
    /// URL).
    UnknownRoute,
}

type Script = Box<dyn FnMut(usize) -> Reply + Send>;

/// A cluster of `endpoints` nodes that answer as scripted: each script is
/// given the endpoint the call went to.
struct Fake {
    lease_ms: u64,
    endpoints: usize,
    current: AtomicUsize,
    acquire: Mutex<Script>,
    renew: Mutex<Script>,
    release: Mutex<Script>,
    renewals: AtomicUsize,
    /// Whether `get` is refused (`400`).
    refuse_gets: bool,
    gets: AtomicUsize,
    /// (endpoint, when) of every renewal sent.
    renew_log: Mutex<Vec<(usize, Instant)>>,
}

impl Fake {
    fn new(lease_ms: u64) -> Fake {
        Fake {
            lease_ms,
            endpoints: 1,
            current: AtomicUsize::new(0),
            acquire: Mutex::new(Box::new(move |_| Reply::Ttl(lease_ms))),
            renew: Mutex::new(Box::new(move |_| Reply::Ttl(lease_ms))),
            release: Mutex::new(Box::new(move |_| Reply::Ttl(0))),
            renewals: AtomicUsize::new(0),
            refuse_gets: false,
            gets: AtomicUsize::new(0),
            renew_log: Mutex::new(Vec::new()),
        }
    }

    fn view(&self, ttl_ms: u64) -> LockView {
        LockView {
            session: Default::default(),
            lock_delay_ms: 0,
            delay_left_ms: 0,
            name: "n".into(),
            id: "01JD0000000000000000000000".into(),
            node: 1,
            holder: String::new(),
            fence: 7,
            lease_ms: self.lease_ms,
            ttl_ms,
            acquired_at: String::new(),
            expires_at: String::new(),
            data: None,
            waiters: 0,
            queue: Vec::new(),
            mode: Default::default(),
            permits: None,
            others: Vec::new(),
        }
    }

    async fn answer(&self, reply: Reply, timeout: Duration) -> Result<LockView, CallError> {
        match reply {
            Reply::Ttl(ttl) => Ok(self.view(ttl)),
            Reply::NotHeld => Err(CallError::Api(ErrorBody::new(
                ErrorCode::NotHeld,
                "the lock is not held under that id",
            ))),
            Reply::Failed => Err(CallError::Api(ErrorBody::new(
                ErrorCode::Internal,
                "the node failed",
            ))),
            Reply::Held => Err(CallError::Api(ErrorBody {
                lock: Some(Box::new(self.view(1_000))),
                ..ErrorBody::new(ErrorCode::Held, "held")
            })),
            Reply::Refused => Err(CallError::NotSent("connection refused".into())),
            Reply::UnknownRoute => Err(CallError::Api(ErrorBody::new(
                ErrorCode::UnknownRoute,
                "no such route: /wrong/v1/locks/renew",
            ))),
            Reply::Silence => {
                tokio::time::sleep(timeout).await;
                Err(CallError::NoAnswer("timed out".into()))
            }
        }
    }

    fn at(&self) -> usize {
        self.current.load(Ordering::Relaxed) % self.endpoints
    }

    fn client(self) -> (Client, Arc<Fake>) {
        let fake = Arc::new(self);
        (Client::with_transport(fake.clone()), fake)
    }
}

impl Transport for Fake {
    fn acquire(
        &self,
        _body: AcquireBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<(LockView, Duration), CallError>> {
        let reply = (self.acquire.lock().unwrap())(self.at());
        Box::pin(async move { Ok((self.answer(reply, timeout).await?, Duration::ZERO)) })
    }

    fn release(
        &self,
        _body: ReleaseBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<LockView, CallError>> {
        let reply = (self.release.lock().unwrap())(self.at());
        Box::pin(self.answer(reply, timeout))
    }

    fn renew(
        &self,
        _body: RenewBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<LockView, CallError>> {
        self.renewals.fetch_add(1, Ordering::Relaxed);
        self.renew_log
            .lock()
            .unwrap()
            .push((self.at(), Instant::now()));
        let reply = (self.renew.lock().unwrap())(self.at());
        Box::pin(self.answer(reply, timeout))
    }

    fn get(
        &self,
        _name: String,
        watch: Option<Watch>,
        _timeout: Duration,
    ) -> BoxFuture<'_, Result<Option<LockView>, CallError>> {
        self.gets.fetch_add(1, Ordering::Relaxed);
        Box::pin(async move {
            if self.refuse_gets {
                return Err(CallError::Api(ErrorBody::new(
                    ErrorCode::BadRequest,
                    "an empty name",
                )));
            }
            if let Some(watch) = watch {
                tokio::time::sleep(watch.wait).await;
            }
            Ok(None)
        })
    }

    fn list(
        &self,
        _prefix: String,
        _limit: usize,
        _timeout: Duration,
    ) -> BoxFuture<'_, Result<leasehold_api::LocksAnswer, CallError>> {
        Box::pin(async { Ok(Default::default()) })
    }

    fn cluster(&self, _timeout: Duration) -> BoxFuture<'_, Result<ClusterAnswer, CallError>> {
        Box::pin(async { Err(CallError::NoAnswer("not in this fake".into())) })
    }

    fn move_on(&self) {
        self.current.fetch_add(1, Ordering::Relaxed);
    }

    fn endpoints(&self) -> usize {
        self.endpoints
    }
}

fn lease(lease_ms: u64) -> AcquireOptions {
    AcquireOptions::default().lease(ms(lease_ms))
}

/// An answer's `ttl_ms` is never counted past the lease asked for.
#[tokio::test(start_paused = true)]
async fn a_huge_ttl_is_not_counted_past_the_lease_asked_for() {
    // The fake grants a minute (more than asked) and claims an hour left.
    let fake = Fake::new(60_000);
    *fake.acquire.lock().unwrap() = Box::new(|_| Reply::Ttl(3_600_000));
    *fake.renew.lock().unwrap() = Box::new(|_| Reply::Ttl(3_600_000));
    let (client, _) = fake.client();
    let sent = Instant::now();
    let guard = client.acquire("n", lease(1_000)).await.unwrap();
    assert!(guard.lease_ends() <= (sent + ms(1_000)).into_std());
    tokio::time::sleep(ms(500)).await;
    let renewed = Instant::now();
    assert!(guard.lease_ends() <= (renewed + ms(1_000)).into_std());
}

/// Work that ignores its token: a refused renewal means another may hold
/// the lock already, and `with_lock` stops the work at once (at the first
/// renewal, a third of the lease in); a lapse (no renewal got through)
/// leaves it running until the lease itself ends, and no longer.
#[tokio::test(start_paused = true)]
async fn with_lock_stops_work_at_a_refusal_at_once_and_at_a_lapse_at_the_lease_end() {
    for (reply, stopped_after) in [(Reply::NotHeld, 3_000), (Reply::Silence, 9_000)] {
        let fake = Fake::new(9_000);
        *fake.renew.lock().unwrap() = Box::new(move |_| reply);
        let (client, _) = fake.client();
        let start = Instant::now();
        let outcome = client
            .with_lock("n", lease(9_000), |_token| std::future::pending::<()>())
            .await;
        assert!(matches!(outcome, Err(Error::Lost)), "{outcome:?}");
        assert_eq!(start.elapsed(), ms(stopped_after), "{reply:?}");
    }
}

/// A guard tells a refused renewal from a lapse.
#[tokio::test(start_paused = true)]
async fn a_guard_says_why_it_lost_its_lock() {
    for (reply, loss) in [
        (Reply::NotHeld, Loss::Refused),
        (Reply::Silence, Loss::Lapsed),
    ] {
        let fake = Fake::new(3_000);
        *fake.renew.lock().unwrap() = Box::new(move |_| reply);
        let (client, _) = fake.client();
        let guard = client.acquire("n", lease(3_000)).await.unwrap();
        guard.lost().await;
        assert_eq!(guard.loss(), Some(loss));
    }
}

/// A grant that arrives with little of its lease left is renewed at once,
/// not a whole period later (when it would have lapsed).
#[tokio::test(start_paused = true)]
async fn a_grant_with_little_lease_left_is_renewed_before_it_lapses() {
    let fake = Fake::new(1_000);
    *fake.acquire.lock().unwrap() = Box::new(|_| Reply::Ttl(550));
    let (client, fake) = fake.client();
    let options = AcquireOptions {
        renew_every: Some(ms(500)),
        ..lease(1_000)
    };
    let start = Instant::now();
    let guard = client.acquire("n", options).await.unwrap();
    tokio::time::sleep(ms(3_000)).await;
    assert!(
        !guard.is_lost(),
        "lost with {} renewals",
        fake.renewals.load(Ordering::Relaxed)
    );
    let first = fake.renew_log.lock().unwrap()[0].1;
    assert!(
        first - start < ms(450),
        "first renewal after {:?}",
        first - start
    );
}

/// A schedule that cannot keep the lock is refused before any request is
/// sent: a margin of half the lease or more, a period over half the lease
/// or under 10 ms, and a period and margin that leave too little room
/// between renewals (they would come back to back).
#[tokio::test(start_paused = true)]
async fn a_schedule_that_cannot_keep_the_lock_is_refused() {
    let (client, fake) = Fake::new(10_000).client();
    for (lease_ms, every_ms, margin_ms) in [
        (600, 200, 350),
        (600, 301, 10),
        (10_000, 5, 100),
        (10_000, 5_000, 4_990),
        (10_000, 4_000, 4_500),
    ] {
        let options = AcquireOptions {
            renew_every: Some(ms(every_ms)),
            lapse_margin: Some(ms(margin_ms)),
            ..lease(lease_ms)
        };
        let refused = client.acquire("n", options).await;
        assert!(
            matches!(refused, Err(Error::BadRequest(_))),
            "{lease_ms}/{every_ms}/{margin_ms}: {:?}",
            refused.err()
        );
    }
    assert_eq!(fake.renewals.load(Ordering::Relaxed), 0);
    let fits = AcquireOptions {
        renew_every: Some(ms(5_000)),
        lapse_margin: Some(ms(1_000)),
        ..lease(10_000)
    };
    assert!(client.acquire("n", fits).await.is_ok());
}

/// Two endpoints, leases of 3 s: renewals through the first are answered
/// `first`, through the second granted.
fn renewals_fail_at_the_first_of_two(first: Reply) -> Fake {
    let mut fake = Fake::new(3_000);
    fake.endpoints = 2;
    *fake.renew.lock().unwrap() =
        Box::new(move |at| if at == 0 { first } else { Reply::Ttl(3_000) });
    fake
}

/// A node that fails (`500`) is not a refusal: the renewal goes on through
/// another node, and the lock is kept.
#[tokio::test(start_paused = true)]
async fn a_failed_node_is_not_a_refused_renewal() {
    let (client, _) = renewals_fail_at_the_first_of_two(Reply::Failed).client();
    let guard = client.acquire("n", lease(3_000)).await.unwrap();
    tokio::time::sleep(ms(6_000)).await;
    assert!(!guard.is_lost(), "{:?}", guard.loss());
}

/// An endpoint with no such route (a wrong URL) answers nothing about the
/// lock: an acquire through it fails with `UnknownRoute` (not `NotHeld`),
/// and a renewal through it goes on through another node, the lock kept.
#[tokio::test(start_paused = true)]
async fn an_unknown_route_is_neither_not_held_nor_a_refused_renewal() {
    let fake = Fake::new(3_000);
    *fake.acquire.lock().unwrap() = Box::new(|_| Reply::UnknownRoute);
    let (client, _) = fake.client();
    let refused = client.acquire("n", lease(3_000)).await.err();
    assert!(
        matches!(refused, Some(Error::UnknownRoute(_))),
        "{refused:?}"
    );

    let (client, _) = renewals_fail_at_the_first_of_two(Reply::UnknownRoute).client();
    let guard = client.acquire("n", lease(3_000)).await.unwrap();
    tokio::time::sleep(ms(6_000)).await;
    assert!(!guard.is_lost(), "{:?}", guard.loss());
}

/// A node that hangs does not use up the whole time left: each attempt
/// gets a share of it per endpoint, and the renewal reaches a healthy node
/// before the lapse.
#[tokio::test(start_paused = true)]
async fn a_hanging_node_leaves_time_for_the_others() {
    let mut fake = Fake::new(3_000);
    fake.endpoints = 3;
    *fake.renew.lock().unwrap() = Box::new(|at| {
        if at == 0 {
            Reply::Silence
        } else {
            Reply::Ttl(3_000)
        }
    });
    let (client, fake) = fake.client();
    let guard = client.acquire("n", lease(3_000)).await.unwrap();
    tokio::time::sleep(ms(6_000)).await;
    assert!(!guard.is_lost());
    assert!(fake
        .renew_log
        .lock()
        .unwrap()
        .iter()
        .any(|(at, _)| *at != 0));
}

/// A release whose first attempt got no answer (it went through; the
/// answer was lost) and whose retry finds the lock gone reports it
/// released, not lost.
#[tokio::test(start_paused = true)]
async fn a_retried_release_that_finds_the_first_went_through_is_a_release() {
    let fake = Fake::new(9_000);
    let tries = Arc::new(AtomicUsize::new(0));
    let seen = tries.clone();
    *fake.release.lock().unwrap() = Box::new(move |_| {
        if seen.fetch_add(1, Ordering::Relaxed) == 0 {
            Reply::Silence
        } else {
            Reply::NotHeld
        }
    });
    let (client, _) = fake.client();
    let guard = client.acquire("n", lease(9_000)).await.unwrap();
    assert!(guard.release().await.is_ok());
    assert_eq!(tries.load(Ordering::Relaxed), 2);
}

/// A release whose first attempt never left (the connection refused) and
/// whose retry finds the lock gone reports it lost: nothing this client
/// sent released it.
#[tokio::test(start_paused = true)]
async fn a_release_that_finds_the_lock_gone_after_a_refused_connection_is_a_loss() {
    let fake = Fake::new(9_000);
    let tries = Arc::new(AtomicUsize::new(0));
    let seen = tries.clone();
    *fake.release.lock().unwrap() = Box::new(move |_| {
        if seen.fetch_add(1, Ordering::Relaxed) == 0 {
            Reply::Refused
        } else {
            Reply::NotHeld
        }
    });
    let (client, _) = fake.client();
    let guard = client.acquire("n", lease(9_000)).await.unwrap();
    assert!(matches!(guard.release().await, Err(Error::Lost)));
    assert_eq!(tries.load(Ordering::Relaxed), 2);
}

/// Waits of `Duration::MAX` mean "as long as it takes", not a panic.
#[tokio::test(start_paused = true)]
async fn the_longest_waits_do_not_overflow() {
    let (client, _) = Fake::new(9_000).client();
    let guard = client
        .acquire("n", lease(9_000).wait(Duration::MAX))
        .await
        .unwrap();
    drop(guard);
    assert!(client.watch("n", 0, Duration::MAX).await.is_ok());
    let options = leasehold_client::CampaignOptions {
        lease: Some(ms(9_000)),
        give_up_after: Some(Duration::MAX),
    };
    assert!(client.campaign("e", "v", options).await.is_ok());
}

/// An observer whose calls are refused at once does not repeat them in a
/// tight loop: the calls after a failure back off.
#[tokio::test(start_paused = true)]
async fn a_refused_observer_backs_off() {
    use futures::StreamExt;
    let mut fake = Fake::new(9_000);
    fake.refuse_gets = true;
    let (client, fake) = fake.client();
    let mut leaders = std::pin::pin!(client.observe("n"));
    let start = Instant::now();
    for _ in 0..6 {
        assert!(leaders.next().await.expect("never ends").is_err());
    }
    // 50 + 100 + 200 + 400 + 800 ms between the six calls.
    assert!(start.elapsed() >= ms(1_550), "{:?}", start.elapsed());
    assert_eq!(fake.gets.load(Ordering::Relaxed), 6);
}

/// A suspend clock the test moves by hand.
struct FakeSuspend(AtomicUsize);

impl leasehold_client::SuspendClock for FakeSuspend {
    fn suspended(&self) -> Duration {
        ms(self.0.load(Ordering::Relaxed) as u64)
    }
}

/// The runtime's clock (and its timers) stands still while the machine is
/// suspended; the cluster's leases do not. A suspend longer than what was
/// left of the lease loses the lock the moment the machine wakes: `is_lost`
/// says so at once, and the renewal task within a fraction of the margin.
#[tokio::test(start_paused = true)]
async fn a_suspend_longer_than_the_lease_left_loses_the_lock_on_waking() {
    let (client, fake) = Fake::new(10_000).client();
    let suspend = Arc::new(FakeSuspend(AtomicUsize::new(0)));
    let client = client.with_suspend_clock(suspend.clone());
    let guard = client.acquire("n", lease(10_000)).await.unwrap();
    let watcher = client.acquire("w", lease(10_000)).await.unwrap();
    tokio::time::sleep(ms(1_000)).await;
    assert!(!guard.is_lost());
    suspend.0.store(20_000, Ordering::Relaxed);
    assert!(guard.is_lost(), "seen at once, whether the task ran or not");
    assert_eq!(guard.loss(), Some(Loss::Lapsed));
    tokio::time::timeout(ms(600), watcher.lost())
        .await
        .expect("the renewal task sees the suspend too");
    assert_eq!(watcher.loss(), Some(Loss::Lapsed));
    let renewals = fake.renewals.load(Ordering::Relaxed);
    tokio::time::sleep(ms(10_000)).await;
    assert_eq!(
        fake.renewals.load(Ordering::Relaxed),
        renewals,
        "a lost lock is not renewed"
    );
}

/// A suspend shorter than what was left is survived, and the renewal after
/// it counts the lease afresh.
#[tokio::test(start_paused = true)]
async fn a_short_suspend_is_survived_and_the_next_renewal_counts_afresh() {
    let (client, _) = Fake::new(10_000).client();
    let suspend = Arc::new(FakeSuspend(AtomicUsize::new(0)));
    let client = client.with_suspend_clock(suspend.clone());
    let guard = client.acquire("n", lease(10_000)).await.unwrap();
    tokio::time::sleep(ms(1_000)).await;
    suspend.0.store(5_000, Ordering::Relaxed);
    assert!(!guard.is_lost());
    // The renewal at a third of the lease (runtime clock) goes through.
    tokio::time::sleep(ms(20_000)).await;
    assert!(!guard.is_lost());
    assert!(guard.lease_ends() > (Instant::now() + ms(5_000)).into_std());
}

/// A suspend while a renewal is under way (no node answers) is seen at
/// once, not when the attempts give up at the old lapse.
#[tokio::test(start_paused = true)]
async fn a_suspend_during_a_renewal_is_seen_at_once() {
    let fake = Fake::new(30_000);
    *fake.renew.lock().unwrap() = Box::new(|_| Reply::Silence);
    let (client, fake) = fake.client();
    let suspend = Arc::new(FakeSuspend(AtomicUsize::new(0)));
    let client = client.with_suspend_clock(suspend.clone());
    let guard = client.acquire("n", lease(30_000)).await.unwrap();
    // The first renewal goes out at 10 s, and gets no answer.
    tokio::time::sleep(ms(10_500)).await;
    assert_eq!(fake.renewals.load(Ordering::Relaxed), 1);
    suspend.0.store(60_000, Ordering::Relaxed);
    tokio::time::timeout(ms(600), guard.lost())
        .await
        .expect("seen within a look of waking");
    assert_eq!(guard.loss(), Some(Loss::Lapsed));
}

/// A suspend that moves the lapse before the renewal planned is survived:
/// the renewal is sent early enough.
#[tokio::test(start_paused = true)]
async fn a_suspend_before_the_planned_renewal_brings_the_renewal_forward() {
    let (client, fake) = Fake::new(30_000).client();
    let suspend = Arc::new(FakeSuspend(AtomicUsize::new(0)));
    let client = client.with_suspend_clock(suspend.clone());
    let guard = client.acquire("n", lease(30_000)).await.unwrap();
    // At 5 s (renewal planned at 10 s), 20 s suspended: the lease now ends
    // at 10 s, its lapse at 8 s.
    tokio::time::sleep(ms(5_000)).await;
    suspend.0.store(20_000, Ordering::Relaxed);
    tokio::time::sleep(ms(1_000)).await;
    assert!(fake.renewals.load(Ordering::Relaxed) >= 1);
    assert!(!guard.is_lost(), "{:?}", guard.loss());
}

/// A node waits at most ten minutes at a time (`MAX_WAIT_MS`): an acquire
/// that may wait longer asks again while its own wait lasts.
#[tokio::test(start_paused = true)]
async fn a_wait_longer_than_a_node_waits_asks_again() {
    let fake = Fake::new(9_000);
    let asked = Arc::new(AtomicUsize::new(0));
    let count = asked.clone();
    *fake.acquire.lock().unwrap() = Box::new(move |_| {
        if count.fetch_add(1, Ordering::Relaxed) < 3 {
            Reply::Held
        } else {
            Reply::Ttl(9_000)
        }
    });
    let (client, _) = fake.client();
    let guard = client
        .acquire("n", lease(9_000).wait(ms(3_600_000)))
        .await
        .unwrap();
    assert_eq!(asked.load(Ordering::Relaxed), 4);
    drop(guard);
}

/// A holder whose process stood still (SIGSTOP, a stall) past its lease
/// learns of its loss before it acts, whether or not the renewal task has
/// run since: `check()`, `is_lost()` and a token taken now judge the
/// clock themselves. Here the only thread is blocked for longer than the
/// lease, so the renewal task cannot have run when the holder resumes.
#[tokio::test(flavor = "current_thread")]
async fn a_holder_paused_past_its_lease_sees_the_loss_before_it_acts() {
    let fake = Fake::new(400);
    let (client, _) = fake.client();
    let guard = client.acquire("n", lease(400)).await.unwrap();
    let leadership = client
        .campaign(
            "n",
            "me",
            leasehold_client::CampaignOptions {
                lease: Some(ms(400)),
                give_up_after: None,
            },
        )
        .await
        .unwrap();
    assert!(guard.check().is_ok() && leadership.check().is_ok());
    let token = guard.lost_token();
    assert!(!token.is_cancelled());
    // The process stands still: no task runs.
    std::thread::sleep(ms(600));
    // Resumed, before any await lets the renewal task run:
    assert!(matches!(guard.check(), Err(Error::Lost)));
    assert!(guard.is_lost());
    assert!(
        token.is_cancelled(),
        "the token handed out before the pause"
    );
    assert!(guard.lost_token().is_cancelled());
    assert!(matches!(leadership.check(), Err(Error::Lost)));
    assert!(leadership.is_lost());
    assert!(leadership.lost_token().is_cancelled());
    assert_eq!(guard.loss(), Some(Loss::Lapsed));
}
