//! A session's loss as its client sees it, over a fake transport on
//! tokio's paused clock.

use std::time::Duration;

use leasehold_api::{
    AcquireBody, ClusterAnswer, LockView, ReleaseBody, RenewBody, SessionAnswer, SessionView, Watch,
};
use leasehold_client::{
    AcquireOptions, BoxFuture, CallError, Client, SessionCall, SessionOptions, Transport,
};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A node that opens sessions and grants locks at once, and never answers
/// a session's renewal (until the caller's timeout).
struct Silent;

const LEASE_MS: u64 = 3_000;

fn view() -> LockView {
    LockView {
        session: Default::default(),
        lock_delay_ms: 0,
        delay_left_ms: 0,
        name: "n".into(),
        id: "01JD0000000000000000000000".into(),
        node: 1,
        holder: String::new(),
        fence: 7,
        lease_ms: LEASE_MS,
        ttl_ms: LEASE_MS,
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

impl Transport for Silent {
    fn acquire(
        &self,
        _body: AcquireBody,
        _timeout: Duration,
    ) -> BoxFuture<'_, Result<(LockView, Duration), CallError>> {
        Box::pin(async { Ok((view(), Duration::ZERO)) })
    }
    fn release(
        &self,
        _body: ReleaseBody,
        _timeout: Duration,
    ) -> BoxFuture<'_, Result<LockView, CallError>> {
        Box::pin(async { Ok(view()) })
    }
    fn renew(
        &self,
        _body: RenewBody,
        _timeout: Duration,
    ) -> BoxFuture<'_, Result<LockView, CallError>> {
        Box::pin(async { Ok(view()) })
    }
    fn get(
        &self,
        _name: String,
        _watch: Option<Watch>,
        _timeout: Duration,
    ) -> BoxFuture<'_, Result<Option<LockView>, CallError>> {
        Box::pin(async { Ok(None) })
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
    fn session(
        &self,
        call: SessionCall,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<SessionAnswer, CallError>> {
        Box::pin(async move {
            match call {
                SessionCall::Renew(_) => {
                    tokio::time::sleep(timeout).await;
                    Err(CallError::NoAnswer("timed out".into()))
                }
                _ => Ok(SessionAnswer {
                    session: SessionView {
                        id: "01JD0000000000000000000001".into(),
                        node: 1,
                        holder: String::new(),
                        lease_ms: LEASE_MS,
                        ttl_ms: LEASE_MS,
                        locks: None,
                        expires_at: String::new(),
                    },
                    served_ms: 0,
                    held: None,
                }),
            }
        })
    }
}

/// The methods of [`Transport`] named, each answered as [`Silent`] does.
macro_rules! like_silent {
    ($($method:ident),*) => { $(like_silent!(@ $method);)* };
    (@ acquire) => {
        fn acquire(
            &self,
            body: AcquireBody,
            timeout: Duration,
        ) -> BoxFuture<'_, Result<(LockView, Duration), CallError>> {
            Silent.acquire(body, timeout)
        }
    };
    (@ release) => {
        fn release(
            &self,
            body: ReleaseBody,
            timeout: Duration,
        ) -> BoxFuture<'_, Result<LockView, CallError>> {
            Silent.release(body, timeout)
        }
    };
    (@ renew) => {
        fn renew(
            &self,
            body: RenewBody,
            timeout: Duration,
        ) -> BoxFuture<'_, Result<LockView, CallError>> {
            Silent.renew(body, timeout)
        }
    };
    (@ get) => {
        fn get(
            &self,
            name: String,
            watch: Option<Watch>,
            timeout: Duration,
        ) -> BoxFuture<'_, Result<Option<LockView>, CallError>> {
            Silent.get(name, watch, timeout)
        }
    };
    (@ list) => {
        fn list(
            &self,
            prefix: String,
            limit: usize,
            timeout: Duration,
        ) -> BoxFuture<'_, Result<leasehold_api::LocksAnswer, CallError>> {
            Silent.list(prefix, limit, timeout)
        }
    };
    (@ cluster) => {
        fn cluster(&self, timeout: Duration) -> BoxFuture<'_, Result<ClusterAnswer, CallError>> {
            Silent.cluster(timeout)
        }
    };
}

/// A renewal that hangs (a node that stopped answering) must not hold the
/// loss back past the lease: the session's locks count as lost before the
/// cluster can grant their names to another, whether or not the
/// renewal's call has timed out.
#[tokio::test(start_paused = true)]
async fn a_hanging_renewal_does_not_hide_the_lapse() {
    let client = Client::with_transport(std::sync::Arc::new(Silent));
    let session = client
        .open_session(SessionOptions::default())
        .await
        .unwrap();
    let lock = session
        .acquire("n", AcquireOptions::default())
        .await
        .unwrap();
    let token = lock.lost_token();
    let lost = tokio::time::timeout(ms(LEASE_MS), token.cancelled()).await;
    assert!(
        lost.is_ok(),
        "the lock still counts as held after its session's lease ended"
    );
}

/// A node whose renewals take 500 ms and answer that the session holds no
/// lock (a lock of it lost at a rebuild); its grants have ids of their own.
struct Forgetful {
    next: std::sync::atomic::AtomicU64,
}

impl Transport for Forgetful {
    like_silent!(release, renew, get, list, cluster);
    fn acquire(
        &self,
        _body: AcquireBody,
        _timeout: Duration,
    ) -> BoxFuture<'_, Result<(LockView, Duration), CallError>> {
        let n = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Box::pin(async move {
            let id = format!("01JD00000000000000000000{n:02}");
            Ok((LockView { id, ..view() }, Duration::ZERO))
        })
    }
    fn session(
        &self,
        call: SessionCall,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<SessionAnswer, CallError>> {
        Box::pin(async move {
            let renew = matches!(call, SessionCall::Renew(_));
            let mut answer = match call {
                SessionCall::Renew(_) => {
                    Silent.session(SessionCall::Open(Default::default()), timeout)
                }
                other => Silent.session(other, timeout),
            }
            .await?;
            if renew {
                tokio::time::sleep(ms(500)).await;
                answer.held = Some(Vec::new());
            }
            Ok(answer)
        })
    }
}

/// A renewal whose answer lists the session's locks loses the ones held
/// before it was sent that it does not list, and keeps a lock granted
/// while it was on its way (which it could not list).
#[tokio::test(start_paused = true)]
async fn a_renewal_listing_the_sessions_locks_loses_only_those_it_should_have_seen() {
    let client = Client::with_transport(std::sync::Arc::new(Forgetful {
        next: Default::default(),
    }));
    let session = client
        .open_session(SessionOptions::default())
        .await
        .unwrap();
    let before = session
        .acquire("a", AcquireOptions::default())
        .await
        .unwrap();
    // The first renewal leaves at a third of the lease (1 s) and is
    // answered at 1.5 s; this grant comes in between.
    tokio::time::sleep(ms(1_200)).await;
    let during = session
        .acquire("b", AcquireOptions::default())
        .await
        .unwrap();
    tokio::time::sleep(ms(600)).await;
    assert!(
        before.is_lost(),
        "held before the renewal's send, not listed: lost"
    );
    assert!(
        !during.is_lost(),
        "granted while the renewal was on its way: kept"
    );
    assert!(!session.is_lost());
}

/// A session is opened, used, its end read and closed in a spawned task,
/// as a worker pool does (this fails to compile if a call's future is not
/// `Send`, as `open_session`'s was).
#[tokio::test]
async fn a_session_is_used_from_a_spawned_task() {
    let client = Client::with_transport(std::sync::Arc::new(Silent));
    let task = tokio::spawn(async move {
        let session = client.open_session(SessionOptions::default()).await?;
        let lock = session.acquire("n", AcquireOptions::default()).await?;
        let counted = session.lease_ends();
        let opened = std::time::Instant::now();
        session
            .close()
            .await
            .map(|_| (lock.fence(), counted, opened))
    });
    let (fence, counted, opened) = task.await.unwrap().unwrap();
    assert_eq!(fence, 7);
    assert!(
        counted > opened && counted <= opened + ms(LEASE_MS),
        "the session's lease ends on the client's count within its lease"
    );
}

/// Work run under a session's lock has its token cancelled when the
/// session lapses and is stopped at once though it ignores the token; the
/// call answers `Lost`, before the session's lease ends.
#[tokio::test(start_paused = true)]
async fn with_lock_in_a_session_stops_the_work_when_the_session_is_lost() {
    let client = Client::with_transport(std::sync::Arc::new(Silent));
    let session = client
        .open_session(SessionOptions::default())
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let given = std::sync::Arc::new(std::sync::Mutex::new(None));
    let keep = std::sync::Arc::clone(&given);
    let outcome = session
        .with_lock("n", AcquireOptions::default(), |token| async move {
            *keep.lock().unwrap() = Some(token);
            // Work that never looks at its token.
            tokio::time::sleep(ms(10 * LEASE_MS)).await;
            1
        })
        .await;
    assert!(
        matches!(outcome, Err(leasehold_client::Error::Lost)),
        "{outcome:?}"
    );
    let token = given.lock().unwrap().take().expect("the work ran");
    assert!(token.is_cancelled(), "the work's token was cancelled");
    assert!(
        started.elapsed() < ms(LEASE_MS),
        "stopped at the loss, before the session's lease ended: {:?}",
        started.elapsed()
    );
}

/// A node that answers every call at once (renewals included, so the
/// session stays open) and counts the releases it is sent; the first
/// `fail_first` get no answer.
struct Counting {
    releases: std::sync::Mutex<Vec<String>>,
    fail_first: usize,
}

impl Counting {
    fn new(fail_first: usize) -> std::sync::Arc<Counting> {
        std::sync::Arc::new(Counting {
            releases: Default::default(),
            fail_first,
        })
    }

    fn releases(&self) -> Vec<String> {
        self.releases.lock().unwrap().clone()
    }
}

impl Transport for Counting {
    like_silent!(acquire, renew, get, list, cluster);
    fn release(
        &self,
        body: ReleaseBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<LockView, CallError>> {
        let mut releases = self.releases.lock().unwrap();
        releases.push(body.id().to_string());
        let answered = releases.len() > self.fail_first;
        Box::pin(async move {
            if answered {
                Silent.release(body, timeout).await
            } else {
                Err(CallError::NoAnswer("connection reset".into()))
            }
        })
    }
    fn session(
        &self,
        call: SessionCall,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<SessionAnswer, CallError>> {
        match call {
            SessionCall::Renew(_) => Silent.session(SessionCall::Open(Default::default()), timeout),
            other => Silent.session(other, timeout),
        }
    }
}

/// `Session::with_lock` releases its lock however the call ends, as a
/// dropped guard does: work that panics must not leave the lock held for
/// as long as the session lives; the session stays open.
#[tokio::test(start_paused = true)]
async fn with_lock_in_a_session_releases_when_the_work_panics() {
    let transport = Counting::new(0);
    let client = Client::with_transport(transport.clone());
    let session = std::sync::Arc::new(
        client
            .open_session(SessionOptions::default())
            .await
            .unwrap(),
    );
    let panicked = tokio::spawn({
        let session = std::sync::Arc::clone(&session);
        async move {
            session
                .with_lock("n", AcquireOptions::default(), |_lost| async {
                    panic!("the work failed");
                })
                .await
        }
    })
    .await;
    assert!(panicked.unwrap_err().is_panic());
    tokio::time::sleep(ms(100)).await;
    assert_eq!(
        transport.releases(),
        vec![view().id],
        "released after the work panicked"
    );
    assert!(!session.is_lost(), "the session stays open");
}

/// As above, for a caller that drops the call mid-way (a timeout around
/// it).
#[tokio::test(start_paused = true)]
async fn with_lock_in_a_session_releases_when_the_call_is_dropped() {
    let transport = Counting::new(0);
    let client = Client::with_transport(transport.clone());
    let session = client
        .open_session(SessionOptions::default())
        .await
        .unwrap();
    let dropped = tokio::time::timeout(
        ms(500),
        session.with_lock("n", AcquireOptions::default(), |_lost| {
            std::future::pending::<()>()
        }),
    )
    .await;
    assert!(dropped.is_err(), "the call was dropped mid-way");
    tokio::time::sleep(ms(100)).await;
    assert_eq!(
        transport.releases(),
        vec![view().id],
        "released after the call was dropped"
    );
    assert!(!session.is_lost(), "the session stays open");
}

/// The release after the work is tried again, as a guard's is, when a
/// node does not answer it: a lock of a long-lived session left held
/// after one failed call would stay held as long as the session.
#[tokio::test(start_paused = true)]
async fn with_lock_in_a_session_tries_its_release_again() {
    let transport = Counting::new(1);
    let client = Client::with_transport(transport.clone());
    let session = client
        .open_session(SessionOptions::default())
        .await
        .unwrap();
    let out = session
        .with_lock("n", AcquireOptions::default(), |_lost| async { 5 })
        .await;
    assert_eq!(out.unwrap(), 5);
    assert_eq!(
        transport.releases().len(),
        2,
        "the release that got no answer was sent again"
    );
}

/// `Session::release` tries node after node as a guard's release does: a
/// release that got no answer (a connection reset) is sent again, not
/// given up with the lock left held for the session's life.
#[tokio::test(start_paused = true)]
async fn a_sessions_release_tries_again() {
    let transport = Counting::new(1);
    let client = Client::with_transport(transport.clone());
    let session = client
        .open_session(SessionOptions::default())
        .await
        .unwrap();
    let held = session
        .acquire("n", AcquireOptions::default())
        .await
        .unwrap();
    session.release(held).await.unwrap();
    assert_eq!(transport.releases().len(), 2, "sent again");
}

/// Two nodes: the first never answers a session's renewal (until the
/// caller's timeout), the second renews it; which one a call goes to moves
/// on after a failure.
struct FirstHangs {
    at: std::sync::atomic::AtomicUsize,
    renewed_by_second: std::sync::atomic::AtomicUsize,
}

impl Transport for FirstHangs {
    like_silent!(acquire, release, renew, get, list, cluster);
    fn session(
        &self,
        call: SessionCall,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<SessionAnswer, CallError>> {
        use std::sync::atomic::Ordering;
        let first = self.at.load(Ordering::SeqCst) % 2 == 0;
        match call {
            SessionCall::Renew(_) if !first => {
                self.renewed_by_second.fetch_add(1, Ordering::SeqCst);
                Silent.session(SessionCall::Open(Default::default()), timeout)
            }
            call => Silent.session(call, timeout),
        }
    }
    fn move_on(&self) {
        self.at.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
    fn endpoints(&self) -> usize {
        2
    }
}

/// A node that hangs does not use up the session's whole lease (a call's
/// timeout is longer than the lease): each renewal attempt gets a share of
/// the time left for each endpoint, so the session is renewed through the
/// other node before it lapses, and its locks are kept. A chaos run lost a
/// session's lock that way while the speaker was replaced.
#[tokio::test(start_paused = true)]
async fn a_hanging_node_leaves_the_session_time_for_the_others() {
    let transport = std::sync::Arc::new(FirstHangs {
        at: Default::default(),
        renewed_by_second: Default::default(),
    });
    let client = Client::with_transport(transport.clone());
    let session = client
        .open_session(SessionOptions::default())
        .await
        .unwrap();
    let lock = session
        .acquire("n", AcquireOptions::default())
        .await
        .unwrap();
    tokio::time::sleep(ms(3 * LEASE_MS)).await;
    assert_eq!(session.loss(), None);
    assert!(!lock.is_lost(), "{:?}", lock.loss());
    assert!(
        transport
            .renewed_by_second
            .load(std::sync::atomic::Ordering::SeqCst)
            > 0
    );
}

/// A session lost says why, and so do its locks: a lapse when no renewal
/// gets through, a refusal when a renewal finds a lock gone.
#[tokio::test(start_paused = true)]
async fn a_session_and_its_locks_say_why_they_were_lost() {
    let client = Client::with_transport(std::sync::Arc::new(Silent));
    let session = client
        .open_session(SessionOptions::default())
        .await
        .unwrap();
    let lock = session
        .acquire("n", AcquireOptions::default())
        .await
        .unwrap();
    assert_eq!((session.loss(), lock.loss()), (None, None));
    lock.lost_token().cancelled().await;
    assert_eq!(session.loss(), Some(leasehold_client::Loss::Lapsed));
    assert_eq!(lock.loss(), Some(leasehold_client::Loss::Lapsed));
}

/// A node that grants at once and keeps every acquire's body.
#[derive(Default)]
struct Recording {
    asked: std::sync::Mutex<Vec<AcquireBody>>,
}

impl Transport for Recording {
    like_silent!(release, renew, get, list, cluster);
    fn acquire(
        &self,
        body: AcquireBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<(LockView, Duration), CallError>> {
        self.asked.lock().unwrap().push(body.clone());
        Silent.acquire(body, timeout)
    }
    fn session(
        &self,
        call: SessionCall,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<SessionAnswer, CallError>> {
        Silent.session(call, timeout)
    }
}

/// A session's lock-delay goes with every lock taken in it, unless the
/// lock asks its own; the lock asks no lease of its own.
#[tokio::test(start_paused = true)]
async fn a_sessions_lock_delay_goes_with_each_lock_unless_it_asks_its_own() {
    let node = std::sync::Arc::new(Recording::default());
    let client = Client::with_transport(node.clone());
    let options = SessionOptions {
        lock_delay: ms(4_000),
        ..Default::default()
    };
    let session = client.open_session(options).await.unwrap();
    session
        .acquire("a", AcquireOptions::default())
        .await
        .unwrap();
    let own = AcquireOptions::default()
        .lock_delay(ms(1_500))
        .lease(ms(9_000));
    session.acquire("b", own).await.unwrap();
    let asked = node.asked.lock().unwrap().clone();
    let delays: Vec<Option<u64>> = asked.iter().map(|b| b.lock_delay_ms).collect();
    assert_eq!(delays, [Some(4_000), Some(1_500)]);
    assert!(asked
        .iter()
        .all(|b| b.lease_ms.is_none() && b.session.is_some()));
}
