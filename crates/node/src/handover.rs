//! A member that leaves cleanly (stopped with SIGTERM, or removed) hands
//! its records over before it goes: the speaker copies every lock it kept
//! a record of again, to members that stay, so the member's leaving costs
//! no record. Then the member did not lose anything when it stopped: its
//! next start reports itself as having forgotten nothing (it is not
//! missing from rebuilds), and a departed member that handed over need
//! not be read.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, StreamExt};
use leasehold_api::{routes, ErrorCode, HandedOver, Handover, PeerLock};
use locktable::{LockInTransit, NodeId};

use crate::error::ApiError;
use crate::node::Node;
use crate::queue::{cut_by_size, encoded_len, MAX_PART_BYTES};

/// How many handed-over locks the speaker copies again at once.
const RECOPY_AT_ONCE: usize = 64;

/// How long the speaker may take over one handover request, and how long
/// a member asks again while the speaker is not serving yet.
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(10);

/// The wait between two tries of a handover the speaker could not take yet.
const HANDOVER_RETRY: Duration = Duration::from_millis(50);

impl Node {
    /// Hands every record this member keeps to the speaker, which copies
    /// each live one again to members that stay. Answers whether every
    /// request was acknowledged (nothing to hand over counts as done). The
    /// member takes no new record meanwhile (it is stopping).
    pub(crate) async fn hand_records_over(&self) -> bool {
        if self.sabotage().no_handover {
            return false;
        }
        // A speaker that just took over (from this node, stopping) may
        // still be rebuilding, and a removed speaker learns of no leader
        // any more: asked again, of the leader it knows or of each other
        // member in turn (a member that does not speak refuses), until one
        // takes every part or the time is up. Each try hands the records
        // over as they are then, each lease with the time it has left.
        let deadline = tokio::time::Instant::now() + HANDOVER_TIMEOUT;
        let mut turn = 0;
        loop {
            let now = self.clock.now();
            let records = self.state().member.records(now);
            if records.is_empty() {
                return true;
            }
            let count = records.len();
            let records: Vec<PeerLock> = records
                .iter()
                .map(|lock| PeerLock::record_of(lock.in_transit(now)))
                .collect();
            let parts = cut_by_size(records, encoded_len, MAX_PART_BYTES);
            let Some(addr) = self.speaker_or_another(turn) else {
                return false;
            };
            turn += 1;
            let Some((passing, why)) = self.send_parts(&addr, parts).await else {
                tracing::info!(
                    records = count,
                    "shutdown: records handed over to the speaker"
                );
                return true;
            };
            if passing && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(HANDOVER_RETRY).await;
                continue;
            }
            tracing::warn!(
                e = %why,
                "shutdown: this node's records could not all be handed over; a rebuild \
                 counts it missing until a lease has passed"
            );
            return false;
        }
    }

    /// Sends every part to the member at `addr`, the last one marked so;
    /// `None` once all were taken, else whether the refusal may pass (that
    /// member does not speak, or not yet; no answer) and why.
    async fn send_parts(&self, addr: &str, parts: Vec<Vec<PeerLock>>) -> Option<(bool, String)> {
        let last = parts.len().saturating_sub(1);
        for (at, locks) in parts.into_iter().enumerate() {
            let handover = Handover {
                locks,
                last: at == last,
            };
            let sent = self
                .peers
                .call_raw(addr, routes::HANDOVER, &handover, HANDOVER_TIMEOUT)
                .await;
            match sent {
                Ok(Ok(_)) => {}
                Ok(Err(refused)) => {
                    let passing =
                        matches!(refused.error, ErrorCode::NotRebuilt | ErrorCode::NoLeader);
                    return Some((passing, refused.message));
                }
                Err(e) => return Some((true, e.to_string())),
            }
        }
        None
    }

    /// Where to hand records over, try `turn`: the speaker Raft names, if
    /// another member; else each other member in turn.
    fn speaker_or_another(&self, turn: usize) -> Option<String> {
        if let Some((_, addr)) = self.leader().filter(|(id, _)| *id != self.id()) {
            return Some(addr);
        }
        let roster = self.roster();
        let others: Vec<&str> = roster
            .members()
            .filter(|(id, _)| *id != self.id())
            .map(|(_, addr)| addr)
            .collect();
        (!others.is_empty()).then(|| others[turn % others.len()].to_string())
    }

    /// As the speaker: copies each record `from` handed over again, as for
    /// a grant to a client of this node (the lock's own node is not counted
    /// on: it may have left cleanly too), so it keeps `--copies` records
    /// among the members that stay. A record this table no longer has
    /// (released, ended, lost) needs nothing.
    pub(crate) async fn take_handover(
        self: &Arc<Self>,
        from: NodeId,
        locks: Vec<PeerLock>,
        last: bool,
    ) -> Result<(), ApiError> {
        let now = self.clock.now();
        let records = locks
            .into_iter()
            .map(|record| LockInTransit::try_from(record).map(|r| r.arrive(now)))
            .collect::<Result<Vec<_>, _>>()?;
        let guard = self.guard();
        let (todo, made) = {
            let state = self.state();
            let todo = records
                .iter()
                .filter_map(|r| {
                    let found = state
                        .member
                        .handed_over(&r.name, r.id, r.expires, &guard, now);
                    found.transpose()
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(|r| self.refused(r))?;
            (todo, state.member.made())
        };
        let me = self.id();
        let copied: Vec<Result<(), ApiError>> = stream::iter(todo)
            .map(|lock| async move { self.ensure_on_record(&lock, me, made).await })
            .buffer_unordered(RECOPY_AT_ONCE)
            .collect()
            .await;
        copied.into_iter().collect::<Result<(), ApiError>>()?;
        // Only the last part says that a departed member handed everything
        // over: a rebuild between two parts must still read it.
        if last && self.roster().addr(from).is_none() {
            self.forget_departed(from).await;
        }
        Ok(())
    }

    /// `member`, which left the cluster, handed every record over: it is
    /// no longer read at rebuilds, here or at any member told.
    async fn forget_departed(&self, member: NodeId) {
        self.handed_over(member);
        let notice = HandedOver { member };
        for (id, addr) in self.roster().members() {
            if id == self.id() {
                continue;
            }
            let body = serde_json::to_vec(&notice).unwrap_or_default();
            if let Err(e) = self
                .peers
                .post_json(addr, routes::HANDED_OVER, body, Duration::from_secs(2))
                .await
            {
                tracing::info!(member = id, %e, "a departed member's handover was not heard");
            }
        }
    }
}
