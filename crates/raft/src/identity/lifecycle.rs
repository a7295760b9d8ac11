//! What this node keeps about itself across restarts: the cluster it
//! named, whether a configuration named it, the leader lease it ran with,
//! and whether its last process left cleanly.

use std::io;

use crate::entropy;
use crate::ids::ClusterId;

use super::node::Identity;

impl Identity {
    /// Names the cluster this node is about to bootstrap (keeping a name it
    /// already has), durably; answers it.
    pub async fn bootstrap(&self) -> io::Result<ClusterId> {
        if let Some(cluster) = self.cluster() {
            return Ok(cluster);
        }
        let _writing = self.writing.lock().await;
        let mut next = self.lock().clone();
        if next.cluster.is_none() {
            next.cluster = Some(ClusterId(entropy::random_u128()));
            self.write(next.clone()).await?;
        }
        Ok(next.cluster.expect("named above"))
    }

    /// Whether a configuration from Raft ever named this node, as this data
    /// directory recorded it (`None`: a directory from before the record
    /// was kept).
    pub fn was_named(&self) -> Option<bool> {
        self.lock().named
    }

    /// Records, durably, that a configuration from Raft named this node: it
    /// is a member, and a later configuration that does not name it
    /// removed it, even across a restart.
    pub async fn named(&self) -> io::Result<()> {
        let _writing = self.writing.lock().await;
        let mut named = self.lock().clone();
        if named.named == Some(true) {
            return Ok(());
        }
        named.named = Some(true);
        self.write(named).await
    }

    /// The leader lease this directory's node last ran Raft with, if it
    /// was recorded: it may have acknowledged a heartbeat a leader counts
    /// on it to honour that long.
    pub fn ran_with_leader_lease(&self) -> Option<std::time::Duration> {
        self.lock()
            .leader_lease_ms
            .map(std::time::Duration::from_millis)
    }

    /// Records, durably, that this process handed every record it kept
    /// over to the speaker as it stops: the next start forgot nothing.
    pub async fn left_cleanly(&self) -> io::Result<()> {
        let _writing = self.writing.lock().await;
        let mut recorded = self.lock().clone();
        recorded.left_cleanly = Some(true);
        self.write(recorded).await
    }

    /// Whether the process before this one handed every record over when
    /// it stopped; the record is cleared (durably) as it is read, so a
    /// crash of this process is not taken for a clean stop.
    pub async fn take_left_cleanly(&self) -> io::Result<bool> {
        let _writing = self.writing.lock().await;
        let mut recorded = self.lock().clone();
        let clean = recorded.left_cleanly == Some(true);
        if clean {
            recorded.left_cleanly = Some(false);
            self.write(recorded).await?;
        }
        Ok(clean)
    }

    /// Records, durably, that this node runs Raft with `lease` from now on.
    pub async fn runs_with_leader_lease(&self, lease: std::time::Duration) -> io::Result<()> {
        let _writing = self.writing.lock().await;
        let mut recorded = self.lock().clone();
        let ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
        if recorded.leader_lease_ms == Some(ms) {
            return Ok(());
        }
        recorded.leader_lease_ms = Some(ms);
        self.write(recorded).await
    }
}
