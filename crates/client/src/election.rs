//! Leader election on a lock: the candidate holding it leads; its data is
//! the leader's value.

use std::time::Duration;

use tokio::time::Instant;

use futures::Stream;
use leasehold_api::LockView;
use tokio_util::sync::CancellationToken;

use crate::{AcquireOptions, Client, Error, Holding, LockGuard, Loss};

/// How a candidate campaigns.
#[derive(Debug, Clone, Default)]
pub struct CampaignOptions {
    /// The leadership lease: how soon another takes over after this leader
    /// dies without resigning. None means the cluster's default.
    pub lease: Option<Duration>,
    /// Give up after this long without winning; none means never.
    pub give_up_after: Option<Duration>,
}

/// This candidate leads while this lives and is not lost.
pub struct Leadership {
    guard: LockGuard,
}

impl Leadership {
    /// The leadership's lock (its data is this leader's value).
    pub fn lock(&self) -> LockView {
        self.guard.lock()
    }

    /// The fence of this term of leadership.
    pub fn fence(&self) -> u64 {
        self.guard.fence()
    }

    /// When the leadership's lease ends on this client's clock.
    pub fn lease_ends(&self) -> std::time::Instant {
        self.guard.lease_ends()
    }

    /// A token cancelled when leadership is lost or about to lapse, by the
    /// renewal task or by whichever call judges the clock first
    /// ([`Leadership::is_lost`], [`Leadership::check`], this one): a token
    /// taken after a pause that outlived the lease is cancelled already.
    /// Work that may resume from a pause checks before each step.
    pub fn lost_token(&self) -> CancellationToken {
        self.guard.lost_token()
    }

    /// Whether leadership is lost or about to lapse, judged now on the
    /// client's clock (suspends included).
    pub fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    /// `Err(Error::Lost)` once leadership may be lost, judged now: call it
    /// before every unit of leader work. A process paused (SIGSTOP, a
    /// suspend, a long GC-like stall) past its lease learns it here before
    /// it acts; a pause between the check and the act is not seen, which is
    /// what the fence is for.
    pub fn check(&self) -> Result<(), Error> {
        self.guard.check()
    }

    /// A shareable view of this leadership, without the right to resign.
    pub fn holding(&self) -> Holding {
        self.guard.holding()
    }

    /// Waits until leadership is lost.
    pub async fn lost(&self) {
        self.guard.lost().await
    }

    /// Why leadership was lost, once it was (see [`LockGuard::loss`]).
    pub fn loss(&self) -> Option<Loss> {
        self.guard.loss()
    }

    /// How long before the lease's end unrenewed leadership counts as lost.
    pub fn lapse_margin(&self) -> Duration {
        self.guard.lapse_margin()
    }

    /// Announces `value` as this leader's in place of the one it campaigned
    /// with, without giving leadership up (etcd's `Proclaim`): observers
    /// see the new value at once. Errors as [`LockGuard::set_data`].
    pub async fn proclaim(&self, value: &str) -> Result<LockView, Error> {
        self.guard.set_data(value).await
    }

    /// Gives leadership up at once, so another candidate can take over.
    pub async fn resign(self) -> Result<(), Error> {
        self.guard.release().await
    }
}

/// The longest single wait of a campaign; it waits again after.
const CAMPAIGN_WAIT: Duration = Duration::from_secs(60);

/// How long an observer's watch waits before asking again.
const OBSERVE_WAIT: Duration = Duration::from_secs(30);

impl Client {
    /// Waits until this candidate leads election `name`, announcing
    /// `value`, and returns its leadership.
    pub async fn campaign(
        &self,
        name: &str,
        value: &str,
        options: CampaignOptions,
    ) -> Result<Leadership, Error> {
        let give_up = options.give_up_after.map(crate::after);
        loop {
            let wait = match give_up {
                Some(at) => at
                    .saturating_duration_since(Instant::now())
                    .min(CAMPAIGN_WAIT),
                None => CAMPAIGN_WAIT,
            };
            let acquire = AcquireOptions {
                lease: options.lease,
                wait,
                holder: Some(value.to_string()),
                data: Some(value.to_string()),
                ..AcquireOptions::default()
            };
            match self.acquire(name, acquire).await {
                Ok(guard) => return Ok(Leadership { guard }),
                Err(e)
                    if (e.is_taken() || matches!(e, Error::ArrivedLate))
                        && give_up.is_none_or(|at| Instant::now() < at) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Who leads election `name` now, if anyone: the leader's lock, whose
    /// `data` is its value.
    pub async fn leader(&self, name: &str) -> Result<Option<LockView>, Error> {
        self.get(name).await
    }

    /// Who leads election `name`, as it changes: first the leader now (or
    /// none), then each change as the speaker's table made it (a new
    /// leader, or a leader's new value, [`Leadership::proclaim`]), without
    /// polling. A leader that held for less than one round trip may be
    /// missed. Fences increase from one item to the next, except in
    /// `proceed` mode just after a rebuild that missed members, when an
    /// older grant may surface as the leader again. After a failed call
    /// (an `Err` item) the next one waits, 50 ms doubling to 2 s, so a call
    /// refused at once is not repeated in a tight loop.
    pub fn observe(
        &self,
        name: &str,
    ) -> impl Stream<Item = Result<Option<LockView>, Error>> + Send + 'static {
        let client = self.clone();
        let name = name.to_string();
        type Seen = Option<(u64, Option<String>)>;
        futures::stream::unfold((None::<Seen>, 0u32), move |(seen, failures)| {
            let client = client.clone();
            let name = name.clone();
            async move {
                if failures > 0 {
                    tokio::time::sleep(observe_backoff(failures)).await;
                }
                loop {
                    let result = match &seen {
                        None => client.get(&name).await,
                        Some(None) => client.watch_data(&name, 0, None, OBSERVE_WAIT).await,
                        Some(Some((fence, data))) => {
                            client
                                .watch_data(&name, *fence, data.as_deref(), OBSERVE_WAIT)
                                .await
                        }
                    };
                    match result {
                        Ok(current) => {
                            let now = current.as_ref().map(|l| (l.fence, l.data.clone()));
                            if seen.as_ref() != Some(&now) {
                                return Some((Ok(current), (Some(now), 0)));
                            }
                        }
                        Err(e) => return Some((Err(e), (seen, failures.saturating_add(1)))),
                    }
                }
            }
        })
    }
}

/// The wait before an observer's next call after `failures` failed in a
/// row.
fn observe_backoff(failures: u32) -> Duration {
    Duration::from_millis(50u64 << failures.saturating_sub(1).min(6)).min(Duration::from_secs(2))
}
