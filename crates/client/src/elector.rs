//! A leader elector, as client-go's `leaderelection` and etcd's
//! `concurrency.Election` give one: it campaigns, leads while it holds the
//! election's lock, campaigns again after losing it or after an error, and
//! tells the application through callbacks.
//!
//! ```no_run
//! # async fn demo(client: leasehold_client::Client) -> Result<(), leasehold_client::Error> {
//! use std::time::Duration;
//! use tokio_util::sync::CancellationToken;
//!
//! let elector = client
//!     .elector("app/leader", "host-a:9000")
//!     .lease(Duration::from_secs(2))
//!     .on_started_leading(|leading| async move {
//!         // Lead until the token is cancelled; check before every step.
//!         while leading.check().is_ok() {
//!             // ... work, sending leading.fence() to what it writes ...
//!             tokio::time::sleep(Duration::from_millis(100)).await;
//!         }
//!     })
//!     .on_stopped_leading(|| eprintln!("no longer leading"))
//!     .on_new_leader(|leader| eprintln!("leader: {:?}", leader.and_then(|l| l.data.clone())))
//!     .build();
//! let stop = CancellationToken::new();
//! elector.run(stop).await // until `stop` is cancelled: then it resigns
//! # }
//! ```

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use leasehold_api::LockView;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{BoxFuture, CampaignOptions, Client, Error, Holding, Leadership};

type Started = Arc<dyn Fn(Leading) -> BoxFuture<'static, ()> + Send + Sync>;
type Stopped = Arc<dyn Fn() + Send + Sync>;
type NewLeader = Arc<dyn Fn(Option<&LockView>) + Send + Sync>;
type Defer = Arc<dyn Fn() -> bool + Send + Sync>;

/// How long a deferring candidate waits without a leader before it
/// campaigns anyway, when no lease was given.
const DEFAULT_STANDBY: Duration = Duration::from_secs(30);

/// How often a deferring candidate asks whether it still defers.
const DEFER_EVERY: Duration = Duration::from_millis(100);

/// The first wait before campaigning again after a failed campaign; it
/// doubles after each failure in a row, up to [`MAX_RETRY`].
const RETRY: Duration = Duration::from_millis(500);

/// The longest wait between campaigns after failures in a row.
const MAX_RETRY: Duration = Duration::from_secs(8);

/// What a leader's work is handed: the term of leadership it runs in.
/// Every question is judged now on the client's clock.
#[derive(Clone, Debug)]
pub struct Leading {
    holding: Holding,
    token: CancellationToken,
}

impl Leading {
    /// A token cancelled the moment this term of leadership ends: lost,
    /// about to lapse, given up, or the elector stopped. Judged as it is
    /// handed out, so a token taken after a pause that outlived the lease
    /// is cancelled already.
    pub fn token(&self) -> CancellationToken {
        if self.holding.is_lost() {
            self.token.cancel();
        }
        self.token.clone()
    }

    /// Whether this term of leadership is over, judged now.
    pub fn is_over(&self) -> bool {
        self.token().is_cancelled()
    }

    /// `Err(Error::Lost)` once this term of leadership is over or may be
    /// lost, judged now: call it before every unit of leader work.
    pub fn check(&self) -> Result<(), Error> {
        match self.is_over() {
            true => Err(Error::Lost),
            false => Ok(()),
        }
    }

    /// The fence of this term of leadership: send it with every write the
    /// leader makes, so the resource refuses a deposed leader's.
    pub fn fence(&self) -> u64 {
        self.holding.fence()
    }

    /// The leadership's lock (its data is this leader's value).
    pub fn lock(&self) -> LockView {
        self.holding.lock()
    }

    /// When the leadership's lease ends on this client's clock.
    pub fn lease_ends(&self) -> std::time::Instant {
        self.holding.lease_ends()
    }

    /// Announces `value` as the leader's in place of the elector's (etcd's
    /// `Proclaim`); observers and every elector's `on_new_leader` see it
    /// at once. `Err(Error::Lost)` once this term is over.
    pub async fn proclaim(&self, value: &str) -> Result<LockView, Error> {
        self.check()?;
        self.holding.set_data(value).await
    }
}

/// How an [`Elector`] is set up ([`Client::elector`]).
pub struct ElectorBuilder {
    client: Client,
    name: String,
    value: String,
    lease: Option<Duration>,
    started: Option<Started>,
    stopped: Option<Stopped>,
    new_leader: Option<NewLeader>,
    defer: Option<Defer>,
}

impl Client {
    /// A leader elector for election `name`, announcing `value` while it
    /// leads: set its lease and callbacks, [`ElectorBuilder::build`] it,
    /// then [`Elector::run`] it.
    pub fn elector(&self, name: &str, value: &str) -> ElectorBuilder {
        ElectorBuilder {
            client: self.clone(),
            name: name.to_string(),
            value: value.to_string(),
            lease: None,
            started: None,
            stopped: None,
            new_leader: None,
            defer: None,
        }
    }
}

impl ElectorBuilder {
    /// The leadership lease: how soon another candidate takes over after
    /// this leader's process dies or hangs without resigning (default: the
    /// cluster's default lease).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Called (in a task of its own) each time this candidate starts
    /// leading, with the term of leadership; its [`Leading::token`] is
    /// cancelled when that term ends. The work's end gives leadership up.
    /// Once the term ends, the work has until the lease's end on this
    /// client's clock to return; then it is aborted.
    pub fn on_started_leading<F, Fut>(mut self, work: F) -> Self
    where
        F: Fn(Leading) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.started = Some(Arc::new(move |leading| Box::pin(work(leading))));
        self
    }

    /// Called each time a term of leadership of this candidate ends, after
    /// its work returned (or was aborted).
    pub fn on_stopped_leading<F>(mut self, stopped: F) -> Self
    where
        F: Fn() + Send + Sync + 'static,
    {
        self.stopped = Some(Arc::new(stopped));
        self
    }

    /// Called with the leader (its lock; `data` is its value) each time it
    /// changes as observed, this candidate included, and `None` while no
    /// one leads; first with the leader when the elector starts.
    pub fn on_new_leader<F>(mut self, new_leader: F) -> Self
    where
        F: Fn(Option<&LockView>) + Send + Sync + 'static,
    {
        self.new_leader = Some(Arc::new(new_leader));
        self
    }

    /// While `defer` answers true, this candidate stands by: it does not
    /// campaign (and gives a campaign under way up) unless no one has led
    /// for a whole lease (30 s without [`ElectorBuilder::lease`]), when it
    /// campaigns anyway. A term it leads is not given up when `defer` turns
    /// true. To keep the election's leader apart from the node that speaks
    /// where another instance can lead:
    /// `.defer_while(move || node.speaker() == Some(node.id()))`.
    pub fn defer_while<F>(mut self, defer: F) -> Self
    where
        F: Fn() -> bool + Send + Sync + 'static,
    {
        self.defer = Some(Arc::new(defer));
        self
    }

    /// The elector, ready to [`Elector::run`].
    pub fn build(self) -> Elector {
        Elector {
            shared: Arc::new(Shared {
                client: self.client,
                name: self.name,
                value: self.value,
                lease: self.lease,
                started: self.started,
                stopped: self.stopped,
                new_leader: self.new_leader,
                defer: self.defer,
                leading: Mutex::new(None),
                leader: Mutex::new(None),
                counts: Mutex::new(Counts::default()),
            }),
        }
    }
}

/// A candidate in an election, run by [`Elector::run`]; clones share it,
/// so one can ask [`Elector::is_leader`] while another runs it.
#[derive(Clone)]
pub struct Elector {
    shared: Arc<Shared>,
}

struct Shared {
    client: Client,
    name: String,
    value: String,
    lease: Option<Duration>,
    started: Option<Started>,
    stopped: Option<Stopped>,
    new_leader: Option<NewLeader>,
    /// While it answers true, this candidate stands by.
    defer: Option<Defer>,
    /// The term of leadership under way, if this candidate leads.
    leading: Mutex<Option<Leading>>,
    /// The leader as last observed.
    leader: Mutex<Option<LockView>>,
    /// What the elector counted.
    counts: Mutex<Counts>,
}

/// What an elector counted, for an application to export as its metrics
/// ([`Elector::stats`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ElectionStats {
    /// The leader's value as last observed (`None`: no one led then).
    pub leader: Option<String>,
    /// The fence of that leader's term.
    pub leader_fence: Option<u64>,
    /// Changes of leader observed (a term's start or end).
    pub changes: u64,
    /// Terms this candidate led.
    pub terms_led: u64,
    /// How long, in all, no one led as observed since the elector ran.
    pub without_leader: Duration,
    /// Whether this candidate leads now (judged on the clock now).
    pub leading: bool,
}

/// The elector's counts; `since` is when no one led since, as observed.
#[derive(Debug, Default)]
struct Counts {
    changes: u64,
    terms_led: u64,
    without_leader: Duration,
    leaderless_since: Option<tokio::time::Instant>,
}

impl std::fmt::Debug for Elector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Elector")
            .field("name", &self.shared.name)
            .field("value", &self.shared.value)
            .field("leading", &self.is_leader())
            .finish_non_exhaustive()
    }
}

impl Elector {
    /// The election's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Whether this candidate leads now: it won, and its leadership is not
    /// lost, judged now on the client's clock.
    pub fn is_leader(&self) -> bool {
        self.leading().is_some()
    }

    /// The term of leadership under way, if this candidate leads.
    pub fn leading(&self) -> Option<Leading> {
        let leading = self
            .shared
            .leading
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        leading.clone().filter(|l| !l.is_over())
    }

    /// The leader as last observed (its `data` is its value), `None` when
    /// no one led then or nothing was observed yet.
    pub fn leader(&self) -> Option<LockView> {
        self.shared
            .leader
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// What the elector counted so far: the leader as observed, changes,
    /// terms led, the time without a leader. Export it as the
    /// application's metrics (a gauge of who leads, counters of changes
    /// and of leaderless seconds).
    pub fn stats(&self) -> ElectionStats {
        let leader = self.leader();
        let counts = self.shared.counts.lock().unwrap_or_else(|p| p.into_inner());
        let leaderless = counts
            .leaderless_since
            .map_or(Duration::ZERO, |since| since.elapsed());
        ElectionStats {
            leader: leader.as_ref().and_then(|l| l.data.clone()),
            leader_fence: leader.as_ref().map(|l| l.fence),
            changes: counts.changes,
            terms_led: counts.terms_led,
            without_leader: counts.without_leader + leaderless,
            leading: self.is_leader(),
        }
    }

    /// Campaigns, leads, and campaigns again after each term of leadership
    /// and after each failed campaign (waiting 0.5 s doubling to 8 s between
    /// failures), observing who leads meanwhile, until `stop` is cancelled:
    /// then a term under way ends (its work's token cancelled), leadership
    /// is resigned, and this returns `Ok`. Returns an error only for what
    /// retrying cannot mend (`Unauthorized`, `Forbidden`, `BadRequest`,
    /// `UnknownRoute`). Dropping the future resigns in the background.
    pub async fn run(&self, stop: CancellationToken) -> Result<(), Error> {
        tokio::select! {
            result = self.campaign_again_and_again(&stop) => result,
            () = self.observe(&stop) => Ok(()),
        }
    }

    async fn campaign_again_and_again(&self, stop: &CancellationToken) -> Result<(), Error> {
        let shared = &self.shared;
        let options = CampaignOptions {
            lease: shared.lease,
            give_up_after: None,
        };
        let mut failures = 0u32;
        loop {
            let Some(standby) = self.stand_by(stop).await else {
                return Ok(());
            };
            let campaign = shared
                .client
                .campaign(&shared.name, &shared.value, options.clone());
            let won = tokio::select! {
                won = campaign => won,
                () = stop.cancelled() => return Ok(()),
                // Its node started speaking, say: stand back.
                () = self.starts_deferring(), if !standby => continue,
            };
            match won {
                Ok(leadership) => {
                    failures = 0;
                    self.lead(leadership, stop).await;
                }
                Err(e) if !retries(&e) => return Err(e),
                Err(e) => {
                    failures = failures.saturating_add(1);
                    let wait = retry_after(failures);
                    tracing::warn!(election = %shared.name, %e, ?wait, "campaign failed; campaigning again");
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = stop.cancelled() => return Ok(()),
                    }
                }
            }
            if stop.is_cancelled() {
                return Ok(());
            }
        }
    }

    /// Waits while this candidate defers and someone led within a lease;
    /// answers whether it campaigns as a stand-by (no one led for a lease
    /// while it deferred), or `None` once `stop` is cancelled.
    async fn stand_by(&self, stop: &CancellationToken) -> Option<bool> {
        let shared = &self.shared;
        let Some(defer) = &shared.defer else {
            return Some(false);
        };
        let patience = shared.lease.unwrap_or(DEFAULT_STANDBY);
        let mut leaderless_since: Option<tokio::time::Instant> = None;
        loop {
            if !defer() {
                return Some(false);
            }
            let leads = shared
                .leader
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some();
            let now = tokio::time::Instant::now();
            if leads {
                leaderless_since = None;
            } else if now - *leaderless_since.get_or_insert(now) >= patience {
                tracing::info!(election = %shared.name, "no one led for a lease: campaigning though deferring");
                return Some(true);
            }
            tokio::select! {
                () = tokio::time::sleep(DEFER_EVERY) => {}
                () = stop.cancelled() => return None,
            }
        }
    }

    /// Resolves once this candidate defers (never, without `defer_while`).
    async fn starts_deferring(&self) {
        let Some(defer) = &self.shared.defer else {
            return std::future::pending().await;
        };
        while !defer() {
            tokio::time::sleep(DEFER_EVERY).await;
        }
    }

    /// One term of leadership: the work runs until leadership is lost, the
    /// work returns, or `stop`; then the work's token is cancelled, the
    /// work given until the lease's end, and leadership resigned unless
    /// lost.
    async fn lead(&self, leadership: Leadership, stop: &CancellationToken) {
        let shared = &self.shared;
        let leading = Leading {
            holding: leadership.holding(),
            token: CancellationToken::new(),
        };
        *shared.leading.lock().unwrap_or_else(|p| p.into_inner()) = Some(leading.clone());
        shared
            .counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .terms_led += 1;
        let mut work: Option<JoinHandle<()>> = shared
            .started
            .as_ref()
            .map(|started| leasehold_tasks::spawn(started(leading.clone())));
        let returned = tokio::select! {
            () = leadership.lost() => false,
            () = stop.cancelled() => false,
            _ = async { work.as_mut().expect("present").await }, if work.is_some() => true,
        };
        if returned {
            work = None;
        }
        leading.token.cancel();
        *shared.leading.lock().unwrap_or_else(|p| p.into_inner()) = None;
        if let Some(mut work) = work {
            let ends = tokio::time::Instant::from_std(leadership.lease_ends());
            tokio::select! {
                _ = &mut work => {}
                () = tokio::time::sleep_until(ends) => {
                    tracing::warn!(election = %shared.name, "the leader's work outlived its lease: aborted");
                    work.abort();
                    let _ = work.await;
                }
            }
        }
        if let Some(stopped) = &shared.stopped {
            stopped();
        }
        if leadership.loss().is_none() {
            if let Err(e) = leadership.resign().await {
                tracing::info!(election = %shared.name, %e, "resigning");
            }
        }
    }

    /// Follows who leads, calling `on_new_leader` on each change, until
    /// `stop` (the observation ends with the elector's run).
    async fn observe(&self, stop: &CancellationToken) {
        let shared = &self.shared;
        let mut leaders = std::pin::pin!(shared.client.observe(&shared.name));
        let mut seen: Option<Option<(u64, Option<String>)>> = None;
        loop {
            let item = tokio::select! {
                item = leaders.next() => item,
                () = stop.cancelled() => None,
            };
            let Some(item) = item else {
                // The run ends with `stop`; keep this arm pending meanwhile.
                return std::future::pending().await;
            };
            let Ok(leader) = item else { continue };
            let key = leader.as_ref().map(|l| (l.fence, l.data.clone()));
            if seen.as_ref() == Some(&key) {
                continue;
            }
            let first = seen.is_none();
            // A new term (or none), not a leader's new value (a proclaim).
            let fence_of = |key: &Option<(u64, Option<String>)>| key.as_ref().map(|(f, _)| *f);
            let new_term = seen
                .as_ref()
                .is_none_or(|old| fence_of(old) != fence_of(&key));
            seen = Some(key);
            *shared.leader.lock().unwrap_or_else(|p| p.into_inner()) = leader.clone();
            {
                let mut counts = shared.counts.lock().unwrap_or_else(|p| p.into_inner());
                counts.changes += u64::from(!first && new_term);
                let now = tokio::time::Instant::now();
                match (&leader, counts.leaderless_since) {
                    (None, None) => counts.leaderless_since = Some(now),
                    (Some(_), Some(since)) => {
                        counts.without_leader += now - since;
                        counts.leaderless_since = None;
                    }
                    _ => {}
                }
            }
            if let Some(new_leader) = &shared.new_leader {
                new_leader(leader.as_ref());
            }
        }
    }
}

/// Whether a failed campaign may succeed if tried again.
fn retries(e: &Error) -> bool {
    !matches!(
        e,
        Error::Unauthorized(_)
            | Error::Forbidden(_)
            | Error::BadRequest(_)
            | Error::UnknownRoute(_)
    )
}

/// The wait before the next campaign after `failures` in a row.
fn retry_after(failures: u32) -> Duration {
    RETRY
        .saturating_mul(1 << failures.saturating_sub(1).min(8))
        .min(MAX_RETRY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_to_the_longest_wait() {
        assert_eq!(retry_after(1), Duration::from_millis(500));
        assert_eq!(retry_after(2), Duration::from_secs(1));
        assert_eq!(retry_after(5), Duration::from_secs(8));
        assert_eq!(retry_after(60), Duration::from_secs(8));
    }

    #[test]
    fn only_refusals_that_retrying_cannot_mend_end_a_run() {
        assert!(!retries(&Error::Unauthorized("x".into())));
        assert!(!retries(&Error::BadRequest("x".into())));
        assert!(retries(&Error::Unavailable("x".into())));
        assert!(retries(&Error::NoAnswer("x".into())));
        assert!(retries(&Error::Lost));
    }
}
