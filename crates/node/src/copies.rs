//! Copies on their way: one lane per member, in batches. Which members a
//! grant needs, which to try next (after a refusal, a timeout, or a copy
//! unanswered for `COPY_HEDGE`) and when it may be answered are the
//! protocol's (`leasehold_protocol::OnRecord`); this module sends and
//! times.

use std::sync::Arc;

use futures::stream::{FuturesUnordered, StreamExt};
use leasehold_api::{PeerLock, MAX_BODY_BYTES};
use leasehold_protocol::{Made, RecordOut, SessionLocks, COPY_HEDGE, COPY_TIMEOUT};
use leasehold_raft::WatchReceiver;
use locktable::{Lock, LockInTransit, MonoTime, NodeId};

use crate::clock::Clock;
use crate::copier::PendingCopy;
use crate::error::ApiError;
use crate::lane::Batch;
use crate::node::Node;
use crate::peers::Peers;

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
        // The clock is read under the lock: the copies it notes as sent
        // at `noted` leave by `noted` + a copy's timeout, or never.
        let (mut recording, mut noted) = {
            let guard = self.guard();
            let mut state = self.state();
            let now = self.clock.now();
            let recording = state
                .member
                .start_on_record(lock, holder, made, &guard, now);
            (recording, now)
        };
        let mut sent = FuturesUnordered::new();
        let mut hedges = FuturesUnordered::new();
        loop {
            while let Some(out) = recording.poll() {
                match out {
                    RecordOut::Copy(member) => {
                        let term = recording.term();
                        let by_session =
                            recording.session_locks().filter(|_| self.session_copies());
                        sent.push(self.copy_one(member, lock.clone(), term, noted, by_session));
                        hedges.push(async move {
                            tokio::time::sleep(COPY_HEDGE).await;
                            member
                        });
                    }
                    RecordOut::Decided(decided) => return decided.map_err(|r| self.refused(r)),
                }
            }
            let next = tokio::select! {
                biased;
                next = sent.next() => Some(next),
                Some(silent) = hedges.next() => {
                    let guard = self.guard();
                    let mut state = self.state();
                    noted = self.clock.now();
                    recording.hedge(&mut state.member, lock, silent, &guard, noted);
                    None
                }
            };
            let Some(next) = next else { continue };
            // Read as every grant's guard check is: after the wait, then
            // the state's lock.
            let guard = self.guard();
            let Some((member, acked)) = next else {
                let state = self.state();
                recording.decide(&state.member, &guard, self.clock.now());
                continue;
            };
            let mut state = self.state();
            noted = self.clock.now();
            recording.answered(&mut state.member, lock, member, acked, &guard, noted);
        }
    }

    /// Sends one copy to `member` (noted at `noted` as a member that may
    /// keep it) in the next batch of its lane, or, for a session's grant
    /// whose locks it may renew in place (`by_session`), as a session's
    /// copy; answers whether it acknowledged in time.
    async fn copy_one(
        &self,
        member: NodeId,
        lock: Lock,
        term: u64,
        noted: MonoTime,
        by_session: Option<SessionLocks>,
    ) -> (NodeId, bool) {
        let acked = match by_session {
            Some(locks) => self.copy_session(member, lock, term, noted, locks).await,
            None => self.copy_by_lane(member, lock, term, noted).await,
        };
        (member, acked)
    }

    /// Sends one copy to `member` (noted at `noted`) in the next batch of
    /// its lane; answers whether it acknowledged in time.
    pub(crate) async fn copy_by_lane(
        &self,
        member: NodeId,
        lock: Lock,
        term: u64,
        noted: MonoTime,
    ) -> bool {
        let Some(to) = self
            .roster()
            .addr(member)
            .map(|a| self.copier.lane(member, a))
        else {
            return false;
        };
        let pending = PendingCopy {
            lock,
            term,
            deadline: noted + COPY_TIMEOUT,
        };
        let (peers, clock, addr) = (Arc::clone(&self.peers), self.clock, to.addr.clone());
        let send = move |batch| send_copy_batch(peers, clock, addr, batch);
        let acked = to.lane.send(pending, COPY_TIMEOUT, &self.tasks, send).await;
        acked == Some(true)
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

/// Sends one batch of copies to the member at `addr`, in requests of at
/// most the body a member reads (`MAX_BODY_BYTES`), each of copies of one
/// term, and answers each copy whether the member acknowledged it as soon
/// as its request is answered. Each lease leaves as it is now. A copy
/// past its deadline, or whose grant stopped waiting, is not sent.
async fn send_copy_batch(
    peers: Arc<Peers>,
    clock: Clock,
    addr: String,
    mut batch: Batch<PendingCopy, bool>,
) {
    let count = batch.items().len();
    let mut next = 0;
    while next < count {
        let term = batch.items()[next].term;
        let mut body = format!("{{\"term\":{term},\"locks\":[").into_bytes();
        let mut in_body = Vec::new();
        while let Some(copy) = batch.items().get(next).filter(|c| c.term == term) {
            let now = clock.now();
            let json = (batch.is_awaited(next) && now < copy.deadline)
                .then(|| serde_json::to_vec(&PeerLock::record_of(copy.lock.in_transit(now))).ok())
                .flatten();
            let Some(json) = json else {
                batch.answer(next, false);
                next += 1;
                continue;
            };
            if !in_body.is_empty() && body.len() + json.len() + 3 > MAX_BODY_BYTES {
                break;
            }
            if !in_body.is_empty() {
                body.push(b',');
            }
            body.extend_from_slice(&json);
            in_body.push(next);
            next += 1;
        }
        if in_body.is_empty() {
            continue;
        }
        body.extend_from_slice(b"]}");
        let acked = peers
            .post_json(&addr, leasehold_api::routes::COPIES, body, COPY_TIMEOUT)
            .await
            .is_ok();
        for at in in_body {
            batch.answer(at, acked);
        }
    }
}
