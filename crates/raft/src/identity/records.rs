//! What a data directory records of the cluster, and its rows in the
//! store's `meta` table.

use std::collections::{BTreeMap, BTreeSet};
use std::io;

use redb::Database;
use redb::ReadableTable;

use crate::ids::{ClusterId, NodeId, StoreId};
use crate::meta_table::{get_meta, io_err, put_meta, META};
use crate::version::Protocol;

const KEY_CLUSTER_ID: &str = "cluster_id";
const KEY_MEMBERS: &str = "member_stores";
const KEY_RETIRED: &str = "retired_stores";
const KEY_ADDED: &str = "members_added_at";
const KEY_RECORDED_AT: &str = "member_stores_recorded_at";
const KEY_NAMED: &str = "named";
const KEY_PINNED: &str = "members_pinned";
const KEY_LEADER_LEASE: &str = "leader_lease_ms";
const KEY_LEFT_CLEANLY: &str = "left_cleanly";
const KEY_PROTOCOL: &str = "protocol";

/// What the data directory recorded, read when the store opens.
#[derive(Debug, Clone, Default)]
pub(crate) struct Recorded {
    pub(super) cluster: Option<ClusterId>,
    pub(super) members: BTreeMap<NodeId, StoreId>,
    /// The data directories members had when they were removed: never
    /// admitted again.
    pub(super) retired: BTreeMap<NodeId, BTreeSet<StoreId>>,
    /// For each member, the log index of the committed configuration that
    /// last added it (it was not in the one before), as applied here.
    pub(super) added: BTreeMap<NodeId, u64>,
    /// For each member, its `added` when its directory was recorded (or
    /// last shown again): a member added since may show a new directory.
    pub(super) recorded_at: BTreeMap<NodeId, u64>,
    /// Whether a configuration from Raft ever named this node (`None`: a
    /// data directory older than this record).
    pub(super) named: Option<bool>,
    /// The members whose store the log says ([`Command::MemberStore`]):
    /// no other is admitted while they are members.
    ///
    /// [`Command::MemberStore`]: crate::types::Command::MemberStore
    pub(super) pinned: BTreeSet<NodeId>,
    /// The leader lease (`election_timeout_max`, in milliseconds) this
    /// directory's node last ran Raft with (`None`: never recorded): a
    /// restart with shorter timings waits out the longer one first.
    pub(super) leader_lease_ms: Option<u64>,
    /// Whether the node's last process handed every record it kept over
    /// before it stopped (read, and cleared, at the next start).
    pub(super) left_cleanly: Option<bool>,
    /// The protocol version the cluster agreed last, as applied here
    /// (`None`: none agreed, version 0).
    pub(super) protocol: Option<Protocol>,
}

impl Recorded {
    /// What the `meta` table records.
    pub(crate) fn read(meta: &impl ReadableTable<&'static str, &'static [u8]>) -> io::Result<Self> {
        Ok(Recorded {
            cluster: get_meta(meta, KEY_CLUSTER_ID)?,
            members: get_meta(meta, KEY_MEMBERS)?.unwrap_or_default(),
            retired: get_meta(meta, KEY_RETIRED)?.unwrap_or_default(),
            added: get_meta(meta, KEY_ADDED)?.unwrap_or_default(),
            recorded_at: get_meta(meta, KEY_RECORDED_AT)?.unwrap_or_default(),
            named: get_meta(meta, KEY_NAMED)?,
            pinned: get_meta(meta, KEY_PINNED)?.unwrap_or_default(),
            leader_lease_ms: get_meta(meta, KEY_LEADER_LEASE)?,
            left_cleanly: get_meta(meta, KEY_LEFT_CLEANLY)?,
            protocol: get_meta(meta, KEY_PROTOCOL)?,
        })
    }

    /// As recorded in a data directory just created: no configuration
    /// named its node yet (written to `meta`, in the caller's transaction).
    pub(crate) fn created(
        self,
        meta: &mut redb::Table<&'static str, &'static [u8]>,
    ) -> io::Result<Self> {
        put_meta(meta, KEY_NAMED, &false)?;
        Ok(Recorded {
            named: Some(false),
            ..self
        })
    }

    /// Records this (the cluster id, every member's store id and when it
    /// was recorded, the retired ones, when each member was added, and
    /// whether this node was named) in one committed transaction.
    pub(super) fn save(&self, db: &Database) -> io::Result<()> {
        let txn = db.begin_write().map_err(io_err)?;
        {
            let mut meta = txn.open_table(META).map_err(io_err)?;
            if let Some(cluster) = self.cluster {
                put_meta::<ClusterId>(&mut meta, KEY_CLUSTER_ID, &cluster)?;
            }
            put_meta(&mut meta, KEY_MEMBERS, &self.members)?;
            put_meta(&mut meta, KEY_RETIRED, &self.retired)?;
            put_meta(&mut meta, KEY_ADDED, &self.added)?;
            put_meta(&mut meta, KEY_RECORDED_AT, &self.recorded_at)?;
            put_meta(&mut meta, KEY_PINNED, &self.pinned)?;
            if let Some(named) = self.named {
                put_meta(&mut meta, KEY_NAMED, &named)?;
            }
            if let Some(lease) = self.leader_lease_ms {
                put_meta(&mut meta, KEY_LEADER_LEASE, &lease)?;
            }
            if let Some(clean) = self.left_cleanly {
                put_meta(&mut meta, KEY_LEFT_CLEANLY, &clean)?;
            }
            if let Some(protocol) = self.protocol {
                put_meta(&mut meta, KEY_PROTOCOL, &protocol)?;
            }
        }
        txn.commit().map_err(io_err)
    }
}
