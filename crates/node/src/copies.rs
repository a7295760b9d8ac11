//! Copies: every grant and renewal is known to `--copies` members before
//! its client hears of it, so that no single crash loses a lock.
//!
//! A lock is on record with the speaker (its table and `Granted`) and with
//! the holder's node (its `Held`, once the answer reaches it). When those
//! are fewer than `--copies` members (always for a client of the speaker
//! itself), the speaker sends the lock to more members, which keep it as a
//! *copy* until its lease ends, and answers only once they acknowledged it.
//! Copies travel in batches, one queue and one sender per member.
//!
//! A member refuses copies from a speaker of an older term than one it has
//! seen or been read by: a copy is either in the report a newer speaker
//! reads, or refused (and then never answered to its client).
//!
//! Every member a copy is sent to is noted with the lock before it is
//! sent, acknowledged or not, so that a release (or a grant taken back)
//! reaches every member that may keep one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use leasehold_api::{ErrorCode, PeerLock, MAX_BODY_BYTES};
use leasehold_raft::WatchReceiver;
use locktable::{Lock, LockInTransit, NodeId, Table};
use tokio::sync::{oneshot, watch};

use crate::batch::{drain_in_batches, Queue};
use crate::error::ApiError;
use crate::node::{Made, Node};

/// How long a member has to acknowledge a copy before another is tried;
/// a copy not sent by then is not sent at all.
const COPY_TIMEOUT: Duration = Duration::from_secs(1);
/// Most copies in one batch.
const MAX_BATCH: usize = 256;
/// Batches on their way to one member at once.
const IN_FLIGHT: usize = 4;

/// A copy waiting for its batch: the lock, the term whose speaker granted
/// or renewed it, and where the acknowledgement goes.
pub(crate) struct PendingCopy {
    lock: Lock,
    term: u64,
    acked: oneshot::Sender<bool>,
}

/// One queue per other member, and the members that failed a copy and
/// have not acknowledged one since.
pub(crate) struct Copier {
    queues: BTreeMap<NodeId, Queue<PendingCopy>>,
    suspects: Mutex<BTreeSet<NodeId>>,
}

impl Copier {
    /// Queues for every member of `peers` but `me`.
    pub(crate) fn new(peers: &BTreeMap<NodeId, String>, me: NodeId) -> Self {
        Copier {
            queues: peers
                .keys()
                .filter(|id| **id != me)
                .map(|id| (*id, Queue::new()))
                .collect(),
            suspects: Mutex::new(BTreeSet::new()),
        }
    }

    /// The members that may take a copy of a lock held through `holder`,
    /// in the order to try them: after `me` in id order (so that speakers
    /// spread their copies), suspects last.
    fn candidates(&self, me: NodeId, holder: NodeId) -> Vec<NodeId> {
        let mut order: Vec<NodeId> = self
            .queues
            .keys()
            .copied()
            .filter(|id| *id != holder)
            .collect();
        let before_me = order.iter().take_while(|id| **id < me).count();
        order.rotate_left(before_me);
        let suspects = self.suspects.lock().unwrap_or_else(|e| e.into_inner());
        order.sort_by_key(|id| suspects.contains(id));
        order
    }

    fn note(&self, member: NodeId, acked: bool) {
        let mut suspects = self.suspects.lock().unwrap_or_else(|e| e.into_inner());
        if acked {
            suspects.remove(&member);
        } else {
            suspects.insert(member);
        }
    }
}

/// How many members beyond the speaker and the holder's node (one member
/// when they are the same) must acknowledge a copy.
fn copies_needed(copies: usize, speaker: NodeId, holder: NodeId) -> usize {
    let records = if holder == speaker { 1 } else { 2 };
    copies.saturating_sub(records)
}

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
        let needed = copies_needed(self.config.copies(), self.id(), holder);
        if needed > 0 && !self.peers.faults().skip_copies() {
            let term = made.term.ok_or_else(ApiError::not_rebuilt)?;
            let acked = self.copy_to_members(lock, holder, needed, term).await;
            if acked.len() < needed {
                return Err(ApiError::new(
                    ErrorCode::NotRebuilt,
                    format!(
                        "the lock reached {} of the {needed} other members it must reach \
                         before it is answered (--copies {}); retry",
                        acked.len(),
                        self.config.copies()
                    ),
                ));
            }
        }
        if !self.still_speaks_for(made) {
            return Err(ApiError::not_rebuilt());
        }
        Ok(())
    }

    /// Sends `lock` to members until `needed` acknowledged it or none is
    /// left to try; answers the members that did.
    async fn copy_to_members(
        &self,
        lock: &Lock,
        holder: NodeId,
        needed: usize,
        term: u64,
    ) -> Vec<NodeId> {
        let mut candidates = self.copier.candidates(self.id(), holder).into_iter();
        let mut sent = FuturesUnordered::new();
        for member in candidates.by_ref().take(needed) {
            sent.push(self.copy_one(member, lock, term));
        }
        let mut acked = Vec::with_capacity(needed);
        while let Some((member, ok)) = sent.next().await {
            self.copier.note(member, ok);
            if ok {
                acked.push(member);
                if acked.len() == needed {
                    break;
                }
            } else if let Some(next) = candidates.next() {
                sent.push(self.copy_one(next, lock, term));
            }
        }
        acked
    }

    /// Queues one copy for `member`, noted first as a member that may keep
    /// it; answers whether it acknowledged in time.
    async fn copy_one(&self, member: NodeId, lock: &Lock, term: u64) -> (NodeId, bool) {
        let Some(queue) = self.copier.queues.get(&member) else {
            return (member, false);
        };
        // Its lease there is counted from its arrival, at most a request's
        // timeout after it is sent, and it is sent within that of now.
        self.note_record_on(
            member,
            lock,
            lock.expires + Table::FORGET_MARGIN + 2 * COPY_TIMEOUT,
        );
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
        stop: watch::Receiver<bool>,
    ) {
        let Some(rx) = self
            .copier
            .queues
            .get(&member)
            .and_then(Queue::take_receiver)
        else {
            return;
        };
        drain_in_batches(rx, MAX_BATCH, IN_FLIGHT, stop, move |batch| {
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

    /// As a member: keeps copies sent by the speaker of `term`, unless this
    /// node has seen a newer term or been read by one (under the same lock
    /// a read takes, so a copy is either in that report or refused).
    pub(crate) fn take_copies(&self, term: u64, locks: Vec<PeerLock>) -> Result<(), ApiError> {
        let now = self.clock.now();
        let locks = locks
            .into_iter()
            .map(|l| LockInTransit::try_from(l).map(|l| l.arrive(now)))
            .collect::<Result<Vec<_>, _>>()?;
        let mut state = self.state();
        let seen = self
            .read_by_term()
            .max(self.raft.metrics().borrow_watched().current_term);
        if term < seen {
            return Err(ApiError::new(
                ErrorCode::NotRebuilt,
                format!("copies from the speaker of term {term}, but term {seen} has begun"),
            ));
        }
        // A copy that arrives after its release was heard of stays released.
        for lock in locks {
            if !state.table.is_forgotten(lock.id, now) {
                state.copies.record(lock);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copier(members: u64) -> Copier {
        let peers = (1..=members).map(|i| (i, format!("h:{i}"))).collect();
        Copier::new(&peers, 2)
    }

    #[test]
    fn a_client_of_the_speaker_needs_one_copy_more() {
        assert_eq!(copies_needed(2, 1, 1), 1);
        assert_eq!(copies_needed(2, 1, 3), 0);
        assert_eq!(copies_needed(3, 1, 3), 1);
        assert_eq!(copies_needed(1, 1, 1), 0);
    }

    #[test]
    fn copies_go_to_the_members_after_the_speaker_then_to_suspects() {
        let c = copier(5);
        assert_eq!(c.candidates(2, 2), vec![3, 4, 5, 1]);
        assert_eq!(c.candidates(2, 4), vec![3, 5, 1]);
        c.note(3, false);
        assert_eq!(c.candidates(2, 2), vec![4, 5, 1, 3]);
        c.note(4, true);
        assert_eq!(
            c.candidates(2, 2),
            vec![4, 5, 1, 3],
            "a suspect stays one until it acks"
        );
        c.note(3, true);
        assert_eq!(c.candidates(2, 2), vec![3, 4, 5, 1]);
    }
}
