//! The in-memory Raft state machine: it only tracks what Raft needs.
//!
//! Grants are not logged, so there is no application state: the machine
//! records the last applied log id and the last membership, and a snapshot
//! is empty data with the right [`SnapshotMeta`].

use std::io;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::MutexGuard;

use futures::TryStreamExt;
use openraft::entry::RaftEntry;
use openraft::storage::EntryResponder;
use openraft::storage::RaftStateMachine;
use openraft::OptionalSend;
use openraft::RaftSnapshotBuilder;

use crate::identity::Identity;
use crate::types::Command;
use crate::types::CommandResponse;
use crate::types::LogId;
use crate::types::Snapshot;
use crate::types::SnapshotMeta;
use crate::types::StoredMembership;
use crate::types::TypeConfig;
use openraft::EntryPayload;

#[derive(Debug, Default)]
struct Inner {
    last_applied: Option<LogId>,
    last_membership: StoredMembership,
    current_snapshot: Option<SnapshotMeta>,
}

/// The state machine; clones share one state (a clone is the snapshot builder).
#[derive(Debug, Clone, Default)]
pub struct StateMachine {
    inner: Arc<Mutex<Inner>>,
    /// Told of every configuration applied, in log order.
    identity: Option<Arc<Identity>>,
}

impl StateMachine {
    /// A state machine that has applied nothing.
    pub fn new() -> Self {
        Self::default()
    }

    /// A state machine that tells `identity` of every configuration it
    /// applies ([`Identity::applied`]).
    pub fn telling(identity: Arc<Identity>) -> Self {
        StateMachine {
            identity: Some(identity),
            ..Self::default()
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The state is always consistent: recover from a poisoned lock.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The last applied log id.
    pub fn last_applied(&self) -> Option<LogId> {
        self.lock().last_applied
    }

    /// The last applied membership.
    pub fn last_membership(&self) -> StoredMembership {
        self.lock().last_membership.clone()
    }
}

impl RaftSnapshotBuilder<TypeConfig> for StateMachine {
    type SnapshotData = Vec<u8>;

    async fn build_snapshot(&mut self) -> Result<Snapshot, io::Error> {
        let mut inner = self.lock();
        let meta = SnapshotMeta {
            last_log_id: inner.last_applied,
            last_membership: inner.last_membership.clone(),
        };
        inner.current_snapshot = Some(meta.clone());
        Ok(Snapshot {
            meta,
            snapshot: Vec::new(),
        })
    }
}

impl RaftStateMachine<TypeConfig> for StateMachine {
    type SnapshotData = Vec<u8>;
    type SnapshotBuilder = StateMachine;

    async fn applied_state(&mut self) -> Result<(Option<LogId>, StoredMembership), io::Error> {
        let inner = self.lock();
        Ok((inner.last_applied, inner.last_membership.clone()))
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: futures::Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>>
            + Unpin
            + OptionalSend,
    {
        while let Some((entry, responder)) = entries.try_next().await? {
            let log_id = entry.log_id();
            if let (Some(identity), EntryPayload::Normal(Command::MemberStore { member, store })) =
                (&self.identity, &entry.payload)
            {
                identity.pin(*member, *store).await?;
            }
            if let (Some(identity), EntryPayload::Normal(Command::Protocol(version))) =
                (&self.identity, &entry.payload)
            {
                identity.agreed_protocol(*version).await?;
            }
            let membership = entry.get_membership();
            if let (Some(identity), Some(membership)) = (&self.identity, &membership) {
                let members = membership.nodes().map(|(id, _)| *id).collect();
                identity.applied(log_id.index, members).await?;
            }
            {
                let mut inner = self.lock();
                if let Some(membership) = membership {
                    inner.last_membership = StoredMembership::new(Some(log_id), membership);
                }
                inner.last_applied = Some(log_id);
            }
            if let Some(responder) = responder {
                responder.send(CommandResponse);
            }
        }
        Ok(())
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    /// Never called while the log is never purged (`SnapshotPolicy::Never`,
    /// `crates/raft/src/config.rs`): a snapshot would skip the
    /// configurations and member stores the identity learns from the log.
    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        _snapshot: Vec<u8>,
    ) -> Result<(), io::Error> {
        let mut inner = self.lock();
        inner.last_applied = meta.last_log_id;
        inner.last_membership = meta.last_membership.clone();
        inner.current_snapshot = Some(meta.clone());
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> Result<Option<Snapshot>, io::Error> {
        Ok(self.lock().current_snapshot.clone().map(|meta| Snapshot {
            meta,
            snapshot: Vec::new(),
        }))
    }
}
