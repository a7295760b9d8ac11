//! Releases passed on to the members that may keep a record of the lock
//! (`/internal/forget`), as the protocol's [`Outbox`] says: one lane per
//! member, in batches, each retried until the member acknowledges it or
//! the lease it cancels has ended, a slow member's given to the others.
//! This module encodes the batches, sends them and runs their timers.

use std::future::Future;
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use leasehold_api::{millis_ceil, Forget};
use leasehold_protocol::{Members, Outbox, Release, ReleaseSender};
use locktable::{LockId, MonoTime, NodeId};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How long a member has to acknowledge a batch.
pub(crate) const SEND_TIMEOUT: Duration = Duration::from_secs(2);
/// The most bytes of JSON in one batch: well under the 64 KiB a node reads
/// of a peer's body.
const BATCH_BYTES: usize = 48 * 1024;

/// This node's [`Outbox`], and word to its sender that releases came.
pub(crate) struct Releases {
    outbox: Mutex<Outbox>,
    came: Notify,
}

impl Releases {
    /// No lanes yet, as seen by member `me`.
    pub(crate) fn new(me: NodeId) -> Self {
        Releases {
            outbox: Mutex::new(Outbox::new(me)),
            came: Notify::new(),
        }
    }

    fn outbox(&self) -> MutexGuard<'_, Outbox> {
        self.outbox.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The members of the latest configuration, with their addresses
    /// ([`Outbox::set_members`]).
    pub(crate) fn set_members<'a>(&self, members: impl IntoIterator<Item = (NodeId, &'a str)>) {
        self.outbox().set_members(members);
    }

    /// Closes `member`'s lane ([`Outbox::close`]).
    pub(crate) fn close(&self, member: NodeId) {
        self.outbox().close(member);
    }

    /// Queues at `now` the release of `name` held under `id`, whose lease
    /// ends at `ends`, for every member of `to` but this node.
    pub(crate) fn push(&self, to: Members, name: &str, id: LockId, ends: MonoTime, now: MonoTime) {
        self.outbox().push(to, name, id, ends, now);
        self.came.notify_one();
    }
}

/// A batch's body as it is filled: `{"forgets":[...]}`, each with the time
/// its lease has left at `now` (rounded up, so the receiver keeps the id
/// no shorter than it must), within [`BATCH_BYTES`].
struct Body {
    bytes: Vec<u8>,
    count: usize,
    now: MonoTime,
}

impl Body {
    const HEAD: &'static [u8] = b"{\"forgets\":[";

    fn new(now: MonoTime) -> Self {
        Body {
            bytes: Self::HEAD.to_vec(),
            count: 0,
            now,
        }
    }

    /// Adds `release` if it fits (the first always goes); says whether it
    /// did.
    fn add(&mut self, release: &Release) -> bool {
        let forget = Forget {
            name: release.name.clone(),
            id: release.id.to_string(),
            ttl_ms: Some(millis_ceil(
                release.ends.saturating_duration_since(self.now),
            )),
        };
        // Writing plain data to a vector cannot fail.
        let json = serde_json::to_vec(&forget).expect("a forget encodes");
        let comma = usize::from(self.count > 0);
        if self.count > 0 && self.bytes.len() + comma + json.len() + 2 > BATCH_BYTES {
            return false;
        }
        if comma == 1 {
            self.bytes.push(b',');
        }
        self.bytes.extend_from_slice(&json);
        self.count += 1;
        true
    }

    fn finish(mut self) -> Vec<u8> {
        self.bytes.extend_from_slice(b"]}");
        self.bytes
    }
}

/// A timer a batch started.
enum Timer {
    /// [`ReleaseSender::SPREAD_AFTER`] after batch `key` left.
    Late(u64),
    /// The wait after the failed batch `key` is over.
    Resume(u64),
}

/// `timer`, due `wait` from now (counted from the call, not from the
/// first poll).
fn after(wait: Duration, timer: Timer) -> impl Future<Output = Timer> {
    let due = tokio::time::Instant::now() + wait;
    async move {
        tokio::time::sleep_until(due).await;
        timer
    }
}

/// Sends every batch `releases`' outbox says with `send` (to an address,
/// a body), each lane's apart so that a member that cannot be reached
/// holds up no other, and reports each answer and timer back, until
/// `stop`; `now` is the node's clock. Once stopped it still passes on what
/// it holds (a stopping node releases its own clients' locks), until every
/// lane is empty or [`SEND_TIMEOUT`] has passed.
pub(crate) async fn send_releases<S, F, E>(
    releases: &Releases,
    now: impl Fn() -> MonoTime,
    send: S,
    stop: CancellationToken,
) where
    S: Fn(String, Vec<u8>) -> F,
    F: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let mut sending = FuturesUnordered::new();
    let mut timers = FuturesUnordered::new();
    let mut draining: Option<tokio::time::Instant> = None;
    loop {
        {
            let mut outbox = releases.outbox();
            let now = now();
            loop {
                let mut body = Body::new(now);
                let Some(batch) = outbox.poll_batch(now, |r| body.add(r)) else {
                    break;
                };
                let (key, member, queued) = (batch.key, batch.member, batch.releases.len());
                let sent = send(batch.addr, body.finish());
                sending.push(async move { (key, member, queued, sent.await) });
                timers.push(after(ReleaseSender::SPREAD_AFTER, Timer::Late(key)));
            }
        }
        if draining.is_some() && releases.outbox().is_empty() {
            return;
        }
        let drained = async {
            match draining {
                Some(until) => tokio::time::sleep_until(until).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            Some((key, member, queued, sent)) = sending.next() => {
                if let Err(e) = &sent {
                    tracing::debug!(member, %e, queued, "a member did not take releases; retrying");
                }
                let pause = releases.outbox().answered(key, sent.is_ok(), now());
                if let Some(pause) = pause {
                    timers.push(after(pause, Timer::Resume(key)));
                }
            }
            Some(timer) = timers.next() => match timer {
                Timer::Late(key) => releases.outbox().late(key, now()),
                Timer::Resume(key) => releases.outbox().resume(key),
            },
            _ = releases.came.notified() => {}
            _ = stop.cancelled(), if draining.is_none() => {
                draining = Some(tokio::time::Instant::now() + SEND_TIMEOUT);
            }
            _ = drained => return,
        }
    }
}

#[cfg(test)]
mod tests;
