//! A [`leasehold_client::LockSet`]'s release over a fake transport on
//! tokio's paused clock: one call for the whole set, one per lock against
//! a node that does not read a set's release, and what an answer naming
//! locks not held means.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use leasehold_api::{
    AcquireBody, ClusterAnswer, ErrorBody, ErrorCode, LockRef, LockView, ReleaseBody, RenewBody,
    Watch,
};
use leasehold_client::{
    AcquireOptions, BoxFuture, CallError, Client, Error, SetReleased, Transport,
};

const LEASE_MS: u64 = 9_000;

/// How the fake answers a set's release.
#[derive(Debug, Clone, Copy)]
enum Reply {
    /// Every lock released.
    Released,
    /// The first lock asked not held, the others released.
    FirstNotHeld,
    /// `404 not_held`: none held.
    NoneHeld,
    /// `400 bad_request`: a node of a build before set releases.
    NotRead,
    /// Nothing until the caller's timeout, then no answer.
    Silence,
}

/// A node that grants every set asked for, and answers set releases as
/// scripted (the last reply again once the script runs out); it logs the
/// releases it is sent.
struct Fake {
    replies: Mutex<VecDeque<Reply>>,
    /// The locks of each set's release, in the order sent.
    set_releases: Mutex<Vec<Vec<LockRef>>>,
    /// The lock of each single release, in the order sent.
    releases: Mutex<Vec<LockRef>>,
}

impl Fake {
    fn new(replies: &[Reply]) -> std::sync::Arc<Fake> {
        std::sync::Arc::new(Fake {
            replies: Mutex::new(replies.iter().copied().collect()),
            set_releases: Mutex::new(Vec::new()),
            releases: Mutex::new(Vec::new()),
        })
    }

    fn reply(&self) -> Reply {
        let mut replies = self.replies.lock().unwrap();
        match replies.len() {
            0 => Reply::Released,
            1 => replies[0],
            _ => replies.pop_front().unwrap(),
        }
    }
}

fn view(name: &str, i: usize) -> LockView {
    LockView {
        session: Default::default(),
        lock_delay_ms: 0,
        delay_left_ms: 0,
        name: name.into(),
        id: format!("01JD00000000000000000000{i:02}"),
        node: 1,
        holder: String::new(),
        fence: 7 + i as u64,
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

fn refusal(code: ErrorCode) -> CallError {
    CallError::Api(ErrorBody::new(code, "as scripted"))
}

impl Transport for Fake {
    fn acquire(
        &self,
        _body: AcquireBody,
        _timeout: Duration,
    ) -> BoxFuture<'_, Result<(LockView, Duration), CallError>> {
        Box::pin(async { Err(refusal(ErrorCode::BadRequest)) })
    }

    fn acquire_set(
        &self,
        body: AcquireBody,
        _timeout: Duration,
    ) -> BoxFuture<'_, Result<(Vec<LockView>, Duration), CallError>> {
        let names = body.names.unwrap_or_default();
        let locks = names.iter().enumerate().map(|(i, n)| view(n, i)).collect();
        Box::pin(async move { Ok((locks, Duration::ZERO)) })
    }

    fn release(
        &self,
        body: ReleaseBody,
        _timeout: Duration,
    ) -> BoxFuture<'_, Result<LockView, CallError>> {
        self.releases
            .lock()
            .unwrap()
            .push(LockRef::new(body.name(), body.id()));
        Box::pin(async move { Ok(view(body.name(), 0)) })
    }

    fn release_set(
        &self,
        body: ReleaseBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<SetReleased, CallError>> {
        let locks = body.all_locks();
        self.set_releases.lock().unwrap().push(locks.clone());
        let reply = self.reply();
        Box::pin(async move {
            let views = |locks: &[LockRef]| -> Vec<LockView> {
                locks.iter().map(|l| view(&l.name, 0)).collect()
            };
            match reply {
                Reply::Released => Ok((views(&locks), Vec::new())),
                Reply::FirstNotHeld => Ok((views(&locks[1..]), vec![locks[0].clone()])),
                Reply::NoneHeld => Err(refusal(ErrorCode::NotHeld)),
                Reply::NotRead => Err(refusal(ErrorCode::BadRequest)),
                Reply::Silence => {
                    tokio::time::sleep(timeout).await;
                    Err(CallError::NoAnswer("timed out".into()))
                }
            }
        })
    }

    fn renew(
        &self,
        body: RenewBody,
        _timeout: Duration,
    ) -> BoxFuture<'_, Result<LockView, CallError>> {
        Box::pin(async move { Ok(view(&body.name, 0)) })
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
}

const NAMES: [&str; 3] = ["s/a", "s/b", "s/c"];

/// Takes the set [`NAMES`] through `fake`, then releases it.
async fn take_and_release(fake: &std::sync::Arc<Fake>) -> Result<(), Error> {
    let client = Client::with_transport(fake.clone());
    let options = AcquireOptions::default().lease(Duration::from_millis(LEASE_MS));
    let set = client.acquire_all(&NAMES, options).await.unwrap();
    set.release().await
}

fn asked() -> Vec<LockRef> {
    NAMES
        .iter()
        .enumerate()
        .map(|(i, n)| LockRef::new(*n, view(n, i).id))
        .collect()
}

/// The whole set goes in one call, every lock named by name and id in the
/// order asked, and no lock is released on its own.
#[tokio::test(start_paused = true)]
async fn a_sets_release_is_one_call() {
    let fake = Fake::new(&[Reply::Released]);
    take_and_release(&fake).await.unwrap();
    assert_eq!(*fake.set_releases.lock().unwrap(), vec![asked()]);
    assert!(fake.releases.lock().unwrap().is_empty());
}

/// A node that does not read a set's release (an earlier build, `400`)
/// gets one release per lock, and the set is released.
#[tokio::test(start_paused = true)]
async fn a_node_before_set_releases_gets_one_call_per_lock() {
    let fake = Fake::new(&[Reply::NotRead]);
    take_and_release(&fake).await.unwrap();
    assert_eq!(fake.set_releases.lock().unwrap().len(), 1);
    let mut each = fake.releases.lock().unwrap().clone();
    each.sort_by(|a, b| a.name.cmp(&b.name));
    assert_eq!(each, asked());
}

/// A lock of the set not held any more is a loss, as a single release's
/// `not_held` is; the others were released all the same.
#[tokio::test(start_paused = true)]
async fn a_lock_not_held_at_the_sets_release_is_a_loss() {
    let fake = Fake::new(&[Reply::FirstNotHeld]);
    assert!(matches!(take_and_release(&fake).await, Err(Error::Lost)));
    let fake = Fake::new(&[Reply::NoneHeld]);
    assert!(matches!(take_and_release(&fake).await, Err(Error::Lost)));
    assert_eq!(fake.set_releases.lock().unwrap().len(), 1);
}

/// A release whose first attempt went unanswered, and whose retry finds
/// the locks gone (the first went through, its answer lost), is a
/// release: the retry sends the same set.
#[tokio::test(start_paused = true)]
async fn a_retried_sets_release_that_finds_them_gone_is_a_release() {
    let fake = Fake::new(&[Reply::Silence, Reply::NoneHeld]);
    take_and_release(&fake).await.unwrap();
    assert_eq!(*fake.set_releases.lock().unwrap(), vec![asked(), asked()]);
    let fake = Fake::new(&[Reply::Silence, Reply::FirstNotHeld]);
    take_and_release(&fake).await.unwrap();
}

/// A caller that stops waiting for a set's release (a timeout around it)
/// does not keep the locks from being released: the release goes on in
/// the background, as a guard's release does once asked (and as a set
/// dropped unreleased is released). Otherwise the handed-over locks,
/// renewed no more, would stay held until their leases ran out.
#[tokio::test(start_paused = true)]
async fn a_sets_release_the_caller_stops_waiting_for_goes_on() {
    let fake = Fake::new(&[Reply::Silence, Reply::Released]);
    let client = Client::with_transport(fake.clone());
    let options = AcquireOptions::default().lease(Duration::from_millis(LEASE_MS));
    let set = client.acquire_all(&NAMES, options).await.unwrap();
    let waited = tokio::time::timeout(Duration::from_millis(100), set.release()).await;
    assert!(waited.is_err(), "the first attempt is silent past the wait");
    tokio::time::sleep(Duration::from_millis(LEASE_MS / 2)).await;
    assert_eq!(
        *fake.set_releases.lock().unwrap(),
        vec![asked(), asked()],
        "the release was tried again after the caller stopped waiting"
    );
}
