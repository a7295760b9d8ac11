//! Releases passed on to the members that may keep a record of the lock
//! (`/internal/forget`): in batches, one queue and one sender per member,
//! each release retried until the member acknowledges it or the lease it
//! cancels has ended.

use std::collections::{BTreeMap, VecDeque};
use std::future::Future;
use std::sync::RwLock;
use std::time::Duration;

use leasehold_api::{millis_ceil, Forget};
use leasehold_protocol::{Members, Release, ReleaseSender};
use locktable::{LockId, MonoTime, NodeId};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::queue::Queue;

/// How long a member has to acknowledge a batch.
pub(crate) const SEND_TIMEOUT: Duration = Duration::from_secs(2);
/// The most bytes of JSON in one batch: well under the 64 KiB a node reads
/// of a peer's body.
const BATCH_BYTES: usize = 48 * 1024;

/// One queue of releases per other member, each emptied by its own sender.
pub(crate) struct Outbox {
    /// Every other member's queue, by id, with the address its sender
    /// sends to; a member's is opened when it joins the roster.
    members: RwLock<BTreeMap<NodeId, (String, Queue<Release>)>>,
    me: NodeId,
}

impl Outbox {
    /// No queues yet, as seen by member `me`.
    pub(crate) fn new(me: NodeId) -> Self {
        Outbox {
            members: RwLock::new(BTreeMap::new()),
            me,
        }
    }

    /// Every member's queue, with its id.
    fn queues(&self, mut each: impl FnMut(NodeId, &Queue<Release>)) {
        let members = self.members.read().unwrap_or_else(|p| p.into_inner());
        for (member, (_, queue)) in members.iter() {
            each(*member, queue);
        }
    }

    /// Opens a queue for `member` at `addr` and answers the end its sender
    /// reads; `None` for this node, or a member whose queue is already open
    /// to that address. A member now at another address (removed, and added
    /// again elsewhere) gets a new queue: the old one's sender ends once
    /// what it holds is sent or has expired.
    pub(crate) fn open(
        &self,
        member: NodeId,
        addr: &str,
    ) -> Option<mpsc::UnboundedReceiver<Release>> {
        if member == self.me {
            return None;
        }
        let mut members = self.members.write().unwrap_or_else(|p| p.into_inner());
        if members.get(&member).is_some_and(|(at, _)| at == addr) {
            return None;
        }
        let queue = Queue::new();
        let rx = queue.take_receiver();
        members.insert(member, (addr.to_string(), queue));
        rx
    }

    /// Closes `member`'s queue (it left the cluster, and no rebuild reads
    /// it any more): its sender ends once what it holds is sent or has
    /// expired.
    pub(crate) fn close(&self, member: NodeId) {
        let mut members = self.members.write().unwrap_or_else(|p| p.into_inner());
        members.remove(&member);
    }

    /// Queues the release of `name` held under `id`, whose lease ends at
    /// `ends`, for every member of `to` but this node.
    pub(crate) fn push(&self, to: Members, name: &str, id: LockId, ends: MonoTime) {
        self.queues(|member, queue| {
            if to.contains(member) {
                queue.push(Release {
                    name: name.to_string(),
                    id,
                    ends,
                    spread: false,
                });
            }
        });
    }

    /// Queues a release that member `failed` did not acknowledge for every
    /// other member (but this node), marked so it is not spread again.
    fn spread(&self, failed: NodeId, release: &Release) {
        self.queues(|member, queue| {
            if member != failed {
                queue.push(Release {
                    spread: true,
                    ..release.clone()
                });
            }
        });
    }
}

/// The body of one batch: the releases at the front of `pending` that fit
/// in [`BATCH_BYTES`], each with the time its lease has left at `now`
/// (rounded up, so the receiver keeps the id no shorter than it must).
/// Releases whose lease has ended are passed over. Says how many releases
/// from the front the batch accounts for, and has no body if none is
/// still needed.
fn encode(pending: &VecDeque<Release>, now: MonoTime) -> (Option<Vec<u8>>, usize) {
    const HEAD: &[u8] = b"{\"forgets\":[";
    let mut body = HEAD.to_vec();
    let mut taken = 0;
    let mut sending = 0;
    for release in pending {
        if release.ended(now) {
            taken += 1;
            continue;
        }
        let mark = body.len();
        if sending > 0 {
            body.push(b',');
        }
        let forget = Forget {
            name: release.name.clone(),
            id: release.id.to_string(),
            ttl_ms: Some(millis_ceil(release.ends.saturating_duration_since(now))),
        };
        // Writing plain data to a vector cannot fail.
        serde_json::to_writer(&mut body, &forget).expect("a forget encodes");
        if sending > 0 && body.len() + 2 > BATCH_BYTES {
            body.truncate(mark);
            break;
        }
        taken += 1;
        sending += 1;
    }
    body.extend_from_slice(b"]}");
    ((sending > 0).then_some(body), taken)
}

/// Sends member `member` the releases queued for it (`rx`) with `send`, in
/// batches of those that came while the last was on its way, until `stop`.
/// A batch not acknowledged (no answer, or an error) is sent again, after a
/// wait that doubles up to [`ReleaseSender::RETRY_MAX`], until it is acknowledged or the
/// leases it cancels have ended (by `now`, the node's clock).
///
/// A batch the member has not acknowledged within
/// [`ReleaseSender::SPREAD_AFTER`] is also
/// given to every other member through `outbox`, and so is every release
/// for the member that comes while it stays slow or failing, at once: the
/// next speaker, whichever it is, then knows of them.
pub(crate) async fn send_releases<S, F, E>(
    outbox: &Outbox,
    member: NodeId,
    now: impl Fn() -> MonoTime,
    mut send: S,
    mut rx: mpsc::UnboundedReceiver<Release>,
    stop: CancellationToken,
) where
    S: FnMut(Vec<u8>) -> F,
    F: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let spread = |releases: Vec<Release>| {
        for release in &releases {
            outbox.spread(member, release);
        }
    };
    let mut sender = ReleaseSender::new();
    let arrived = |sender: &mut ReleaseSender, release: Release| {
        if let Some(release) = sender.push(release, now()) {
            outbox.spread(member, &release);
        }
    };
    loop {
        if sender.pending().is_empty() {
            tokio::select! {
                next = rx.recv() => match next {
                    Some(release) => arrived(&mut sender, release),
                    None => return,
                },
                _ = stop.cancelled() => return,
            }
        }
        while let Ok(release) = rx.try_recv() {
            arrived(&mut sender, release);
        }
        let (body, taken) = encode(sender.pending(), now());
        let Some(body) = body else {
            sender.skip(taken);
            continue;
        };
        sender.sending(taken, now());
        let sending = send(body);
        tokio::pin!(sending);
        let slow = tokio::time::sleep(ReleaseSender::SPREAD_AFTER);
        tokio::pin!(slow);
        let mut late = false;
        let sent = loop {
            tokio::select! {
                sent = &mut sending => break sent,
                _ = &mut slow, if !late => {
                    late = true;
                    spread(sender.late(now()));
                }
                Some(release) = rx.recv(), if sender.is_down() => arrived(&mut sender, release),
            }
        };
        if let Err(e) = &sent {
            tracing::debug!(member, %e, queued = sender.pending().len(), "a member did not take releases; retrying");
        }
        let (to_spread, pause) = sender.sent(sent.is_ok(), now());
        spread(to_spread);
        let Some(pause) = pause else {
            continue;
        };
        let pause = tokio::time::sleep(pause);
        tokio::pin!(pause);
        loop {
            tokio::select! {
                _ = &mut pause => break,
                Some(release) = rx.recv() => arrived(&mut sender, release),
                _ = stop.cancelled() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests;
