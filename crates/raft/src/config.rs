//! Raft timing and the openraft [`Config`] leasehold runs with.

use std::sync::Arc;
use std::time::Duration;

use openraft::Config;
use openraft::ConfigError;
use openraft::SnapshotPolicy;

/// Raft's timers, in milliseconds.
///
/// Defaults: heartbeat 50, election timeout 150..300. A follower that hears
/// nothing for 150–300 ms campaigns, so failover takes a few hundred ms; a
/// heartbeat every 50 ms gives three or more chances per election timeout, so
/// one slow round trip does not start an election. openraft times each
/// replication RPC out at the heartbeat interval, so a loopback or LAN HTTP
/// round trip (well under a millisecond) fits easily. Raise all three
/// together on slow or noisy machines (e.g. 100, 400..800).
///
/// `election_max_ms` is also the leader lease: a follower refuses to vote
/// until that long after the last heartbeat it accepted, so no new leader
/// can exist before `last_quorum_acked + election_max_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaftTimings {
    /// Interval between heartbeats from the leader.
    pub heartbeat_ms: u64,
    /// Lower bound of the randomized election timeout.
    pub election_min_ms: u64,
    /// Upper bound of the randomized election timeout (and the leader lease).
    pub election_max_ms: u64,
}

impl Default for RaftTimings {
    fn default() -> Self {
        Self {
            heartbeat_ms: 50,
            election_min_ms: 150,
            election_max_ms: 300,
        }
    }
}

impl RaftTimings {
    /// The leader lease openraft uses (`election_timeout_max`).
    pub fn leader_lease(&self) -> Duration {
        Duration::from_millis(self.election_max_ms)
    }

    /// The validated openraft config for these timings.
    pub fn config(&self) -> Result<Arc<Config>, ConfigError> {
        raft_config(
            self.election_min_ms,
            self.election_max_ms,
            self.heartbeat_ms,
        )
    }
}

/// The validated openraft config leasehold runs with.
///
/// - `snapshot_policy: Never`, and the log is never purged: the state
///   machine holds nothing, and membership is recovered from the log.
/// - `enable_leader_restore: Some(false)`: a restarted leader must win a new
///   election (a new term), so a term names one speaker with one table.
/// - `enable_pre_vote: Some(true)`: a node rejoining after a partition does
///   not bump the term and depose a healthy leader.
/// - `backoff`: a constant delay of one heartbeat interval after an
///   unreachable peer, so a restarted follower hears from the leader soon.
/// - `removed_leader_step_down: Never`: openraft would hand leadership on
///   by itself once a leader's removal commits, and a transfer's votes skip
///   the followers' lease while the removed speaker may still grant; the
///   node steps such a speaker down itself, table first (docs/design.md,
///   "Membership changes").
pub fn raft_config(
    election_min_ms: u64,
    election_max_ms: u64,
    heartbeat_ms: u64,
) -> Result<Arc<Config>, ConfigError> {
    let hb = heartbeat_ms.max(1);
    let config = Config {
        cluster_name: "leasehold".to_string(),
        heartbeat_interval: heartbeat_ms,
        election_timeout_min: election_min_ms,
        election_timeout_max: election_max_ms,
        snapshot_policy: SnapshotPolicy::Never,
        enable_leader_restore: Some(false),
        enable_pre_vote: Some(true),
        backoff: format!("{hb}ms {hb}ms {hb}ms"),
        removed_leader_step_down: openraft::StepDownPolicy::Never,
        ..Config::default()
    };
    Ok(Arc::new(config.validate()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_validate() {
        let c = RaftTimings::default().config().unwrap();
        assert_eq!(c.heartbeat_interval, 50);
        assert_eq!(c.snapshot_policy, SnapshotPolicy::Never);
        assert_eq!(c.enable_leader_restore, Some(false));
        assert_eq!(c.enable_pre_vote, Some(true));
        let mut b = c.build_backoff();
        assert_eq!(b.next(), Some(Duration::from_millis(50)));
        assert_eq!(b.nth(10), Some(Duration::from_millis(50)));
    }

    #[test]
    fn bad_timings_rejected() {
        assert!(raft_config(300, 150, 50).is_err());
        assert!(raft_config(40, 300, 50).is_err());
    }
}
