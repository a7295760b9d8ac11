//! Copies on their way: one queue and one sender per member, in
//! batches. Which members a grant needs and when it may be answered are the
//! protocol's (`leasehold_protocol::CopyRound`); this module sends.

use std::sync::Arc;

use futures::stream::{FuturesUnordered, StreamExt};
use leasehold_api::{PeerLock, MAX_BODY_BYTES};
use leasehold_protocol::{CopyStep, Made, Refusal, COPY_TIMEOUT};
use leasehold_raft::WatchReceiver;
use locktable::{Lock, LockInTransit, NodeId};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::copier::PendingCopy;
use crate::error::ApiError;
use crate::node::Node;
use crate::queue::{drain_in_batches, Queue};

/// Most copies in one batch.
const MAX_BATCH: usize = 256;
/// Batches on their way to one member at once: one, sent by the member's
/// queue task itself (see [`drain_in_batches`]).
const IN_FLIGHT: usize = 1;

impl Node {
    /// Makes sure `lock`, just granted or renewed by the table `made` for
    /// a client of `holder`, is on record with `--copies` members, then
    /// that this table still speaks: only then may the client hear of it.
    pub(crate) async fn ensure_on_record(
        &self,
        lock: &Lock,
        holder: NodeId,
        made: Made,
    ) -> Result<(), ApiError> {
        let mut round = self.state().member.copy_round(holder);
        // Skipping copies is a chaos-only sabotage: the grant is answered
        // on the guard alone.
        let skip = self.peers.faults().skip_copies();
        if round.needed() > 0 && !skip {
            let term = made.term.ok_or_else(ApiError::not_rebuilt)?;
            let mut sent = FuturesUnordered::new();
            for member in round.start() {
                sent.push(self.copy_one(member, lock, term));
            }
            while let Some((member, acked)) = sent.next().await {
                self.state().member.copy_answered(member, acked);
                match round.answered(member, acked) {
                    CopyStep::Done | CopyStep::GiveUp => break,
                    CopyStep::SendTo(next) => sent.push(self.copy_one(next, lock, term)),
                    CopyStep::Wait => {}
                }
            }
        }
        let guard = self.guard();
        let state = self.state();
        // Read under the lock, as every grant's guard check is.
        let now = self.clock.now();
        let on_record = if skip {
            match state.member.still_speaks_for(made, &guard, now) {
                true => Ok(()),
                false => Err(Refusal::NotRebuilt),
            }
        } else {
            state.member.on_record(&round, made, &guard, now)
        };
        drop(state);
        on_record.map_err(|r| self.refused(r))
    }

    /// Queues one copy for `member`, noted first as a member that may keep
    /// it; answers whether it acknowledged in time.
    async fn copy_one(&self, member: NodeId, lock: &Lock, term: u64) -> (NodeId, bool) {
        let Some(queue) = self.copier.queues.get(&member) else {
            return (member, false);
        };
        self.state()
            .member
            .copy_sent(member, lock, self.clock.now());
        let (tx, rx) = oneshot::channel();
        let pending = PendingCopy {
            lock: lock.clone(),
            term,
            acked: tx,
        };
        if !queue.push(pending) {
            return (member, false);
        }
        let acked = matches!(tokio::time::timeout(COPY_TIMEOUT, rx).await, Ok(Ok(true)));
        (member, acked)
    }

    /// Sends the copies queued for `member` at `addr` in batches until `stop`.
    pub(crate) async fn send_copies(
        self: Arc<Self>,
        member: NodeId,
        addr: String,
        stop: CancellationToken,
    ) {
        let Some(rx) = self
            .copier
            .queues
            .get(&member)
            .and_then(Queue::take_receiver)
        else {
            return;
        };
        let tasks = self.tasks.clone();
        drain_in_batches(rx, MAX_BATCH, IN_FLIGHT, stop, &tasks, move |batch| {
            let node = Arc::clone(&self);
            let addr = addr.clone();
            async move { node.send_copy_batch(&addr, batch).await }
        })
        .await;
    }

    /// Sends one batch of copies to the member at `addr`, in requests of
    /// at most the body a member reads (`MAX_BODY_BYTES`), each of copies
    /// of one term. A copy whose
    /// grant gave up waiting is not sent; each lease leaves as it is now.
    async fn send_copy_batch(&self, addr: &str, batch: Vec<PendingCopy>) {
        let mut batch = batch
            .into_iter()
            .filter(|c| !c.acked.is_closed())
            .peekable();
        while let Some(first) = batch.peek() {
            let term = first.term;
            let mut body = format!("{{\"term\":{term},\"locks\":[").into_bytes();
            let mut replies = Vec::new();
            while let Some(next) = batch.peek().filter(|c| c.term == term) {
                let Ok(json) = serde_json::to_vec(&self.transit(&next.lock)) else {
                    let next = batch.next().expect("peeked");
                    let _ = next.acked.send(false);
                    continue;
                };
                if !replies.is_empty() && body.len() + json.len() + 3 > MAX_BODY_BYTES {
                    break;
                }
                let next = batch.next().expect("peeked");
                if !replies.is_empty() {
                    body.push(b',');
                }
                body.extend_from_slice(&json);
                replies.push(next.acked);
            }
            body.extend_from_slice(b"]}");
            let acked = self
                .peers
                .post_json(addr, leasehold_api::routes::COPIES, body, COPY_TIMEOUT)
                .await
                .is_ok();
            for reply in replies {
                let _ = reply.send(acked);
            }
        }
    }

    /// As a member: keeps copies sent by the speaker of `term` (see
    /// [`leasehold_protocol::Member::take_copies`]).
    pub(crate) fn take_copies(&self, term: u64, locks: Vec<PeerLock>) -> Result<(), ApiError> {
        let now = self.clock.now();
        let locks = locks
            .into_iter()
            .map(|l| LockInTransit::try_from(l).map(|l| l.arrive(now)))
            .collect::<Result<Vec<_>, _>>()?;
        let seen = self.raft.metrics().borrow_watched().current_term;
        let taken = self.state().member.take_copies(term, locks, seen, now);
        taken.map_err(|r| self.refused(r))
    }
}
