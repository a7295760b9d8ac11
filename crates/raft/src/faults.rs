//! Faults injected into a node's outgoing peer traffic, for chaos tests:
//! messages to chosen peers are dropped (a partition, one way or, set on
//! both sides, both ways) or delayed (a slow link), and answers to
//! forwarded calls held back. Only a node started with
//! `--chaos` lets anyone change them.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::types::NodeId;

/// What to do to this node's outgoing peer traffic.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultPlan {
    /// Peers whose messages from this node are dropped (seen as unreachable).
    #[serde(default)]
    pub drop_to: BTreeSet<NodeId>,
    /// Delay added to every message to a peer, in milliseconds.
    #[serde(default)]
    pub delay_ms: u64,
    /// Delay added to messages to one peer, in milliseconds (a slow link),
    /// on top of `delay_ms`.
    #[serde(default)]
    pub delay_to: std::collections::BTreeMap<NodeId, u64>,
    /// A step of this node's wall clock, in milliseconds (display only:
    /// no lease reads the wall clock).
    #[serde(default)]
    pub wall_step_ms: i64,
    /// Delay before this node answers a forwarded call, in milliseconds:
    /// an answer slowed on its way back (the request was served at once).
    #[serde(default)]
    pub answer_delay_ms: u64,
    /// Every client call (`/v1/locks...`, `/v1/sessions...`) is answered
    /// `503 no_leader` unserved, as by a node cut off from its speaker.
    #[serde(default)]
    pub refuse_clients: bool,
    /// Every answer to a client call is held back this long, in
    /// milliseconds, after the call was served.
    #[serde(default)]
    pub client_answer_lag_ms: u64,
    /// The next client call is served and its answer never sent: an answer
    /// lost on its way (the flag is spent by that call).
    #[serde(default)]
    pub lose_next_answer: bool,
    /// Sabotage, for the chaos suite's self-test only: grants and renewals
    /// are answered without waiting for any copy (none is sent), as if
    /// `--copies` were 1 (the protocol's `Sabotage::skip_copies`, which the
    /// node sets from this). The suite must see locks lost to single
    /// crashes.
    #[serde(default)]
    pub skip_copies: bool,
    /// Sabotage, for the chaos suite's self-test only: the speaker grants
    /// without the lock-delay asked (the protocol's
    /// `Sabotage::delay_ignored`). The suite must see a name granted inside
    /// a lapsed grant's delay.
    #[serde(default)]
    pub ignore_lock_delay: bool,
    /// Sabotage, for the chaos suite's self-test only: the speaker renews a
    /// session's grant but not its locks (the protocol's
    /// `Sabotage::session_locks_unfollowed`). The suite must see a lock of
    /// a renewed session lapse while its holder still counts it held.
    #[serde(default)]
    pub ignore_session_renewal: bool,
    /// Sabotage, for the chaos suite's self-test only: the speaker grants
    /// an exclusive request as a shared one (the protocol's
    /// `Sabotage::writers_shared`). The suite must see a writer held beside
    /// another holder.
    #[serde(default)]
    pub writers_shared: bool,
    /// Sabotage, for the chaos suite's self-test only: the speaker grants
    /// the names of a set that are free now and answers those as the set
    /// (the protocol's `Sabotage::sets_partial`). The suite must see a set
    /// granted otherwise than whole.
    #[serde(default)]
    pub sets_partial: bool,
    /// Sabotage, for the chaos suite's self-test only: the speaker grants
    /// a permit as one of a semaphore with one permit more than asked (the
    /// protocol's `Sabotage::permits_overfull`). The suite must see a name
    /// held by more holders than its permits.
    #[serde(default)]
    pub permits_overfull: bool,
    /// Sabotage, for the chaos suite's self-test only: a session's close
    /// ends its grant alone and its renewals give its locks a lease past
    /// its own (the protocol's `Sabotage::session_end_leaves_locks`). The
    /// suite must see a session's lock held after its close was answered
    /// or its lease ran out.
    #[serde(default)]
    pub session_end_leaves_locks: bool,
}

/// A message the plan drops.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("chaos: messages to node {0} are dropped")]
pub struct Dropped(pub NodeId);

/// The fault plan in force, shared by everything that sends to peers.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    plan: Arc<RwLock<FaultPlan>>,
    /// The plan's wall-clock step, read on every answer without a lock.
    wall_step_ms: Arc<AtomicI64>,
}

impl Faults {
    /// Replaces the plan.
    pub fn set(&self, plan: FaultPlan) {
        self.wall_step_ms
            .store(plan.wall_step_ms, Ordering::Relaxed);
        *self.plan.write().unwrap_or_else(|p| p.into_inner()) = plan;
    }

    /// The wall-clock step in force, in milliseconds.
    pub fn wall_step_ms(&self) -> i64 {
        self.wall_step_ms.load(Ordering::Relaxed)
    }

    /// The plan in force.
    pub fn plan(&self) -> FaultPlan {
        self.plan.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether the answer to this client call is to be lost: true once
    /// after the plan set `lose_next_answer`.
    pub fn take_lost_answer(&self) -> bool {
        let mut plan = self.plan.write().unwrap_or_else(|p| p.into_inner());
        std::mem::take(&mut plan.lose_next_answer)
    }

    /// Applies the plan to a message for `target`: waits out the delay, or
    /// drops it.
    pub async fn before_send(&self, target: NodeId) -> Result<(), Dropped> {
        let (dropped, delay) = {
            let plan = self.plan.read().unwrap_or_else(|p| p.into_inner());
            let to_target = plan.delay_to.get(&target).copied().unwrap_or(0);
            (
                plan.drop_to.contains(&target),
                plan.delay_ms.saturating_add(to_target),
            )
        };
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        if dropped {
            return Err(Dropped(target));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_slow_link_delays_messages_to_its_peer_only() {
        let faults = Faults::default();
        faults.set(FaultPlan {
            delay_to: [(2, 100)].into_iter().collect(),
            drop_to: [3].into_iter().collect(),
            ..FaultPlan::default()
        });
        let start = tokio::time::Instant::now();
        faults.before_send(2).await.unwrap();
        assert_eq!(start.elapsed(), Duration::from_millis(100));
        let start = tokio::time::Instant::now();
        faults.before_send(4).await.unwrap();
        assert_eq!(start.elapsed(), Duration::ZERO);
        assert!(faults.before_send(3).await.is_err(), "3 is cut off");
    }

    #[test]
    fn a_lost_answer_is_spent_by_one_call() {
        let faults = Faults::default();
        assert!(!faults.take_lost_answer());
        faults.set(FaultPlan {
            lose_next_answer: true,
            ..FaultPlan::default()
        });
        assert!(faults.take_lost_answer());
        assert!(!faults.take_lost_answer(), "spent");
        assert!(!faults.plan().lose_next_answer);
    }
}
