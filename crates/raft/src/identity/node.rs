//! This node's [`Identity`]: its own names, what it recorded of the
//! others, and whether the cluster refused it.

use std::collections::BTreeSet;
use std::fmt;
use std::io;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::Weak;

use redb::Database;
use tokio::sync::watch;

use crate::blocking;
use crate::ids::{ClusterId, NodeId, StoreId};
use crate::terms::TermsBook;
use crate::version::{VersionBook, OLDEST, SPEAKS};

use super::records::Recorded;
use super::stamp::Stamp;

/// This node's identity and what it knows of the others'; shared by the
/// peer server and both peer clients.
pub struct Identity {
    pub(super) node: NodeId,
    pub(super) store: StoreId,
    known: Mutex<Recorded>,
    /// The members now, once the node knows them.
    pub(super) members: Mutex<Option<BTreeSet<NodeId>>>,
    /// The members of the last configuration applied since this process
    /// started.
    pub(super) applied: Mutex<Option<BTreeSet<NodeId>>>,
    /// Whether the log says this node's id is on this data directory (the
    /// last [`Command::MemberStore`] for it names this store): a member's
    /// refusal of this directory then comes from a member behind the log,
    /// not from a wipe, and does not stop this node.
    ///
    /// [`Command::MemberStore`]: crate::types::Command::MemberStore
    pub(super) vouched: std::sync::atomic::AtomicBool,
    /// Whether this node, on a new data directory, is replacing its id's
    /// old one (`--rejoin`): a member's refusal of this directory is then
    /// expected, until the old one is removed, and does not stop it.
    rejoining: std::sync::atomic::AtomicBool,
    /// Held across each write of what is recorded, so that writes follow
    /// one another.
    pub(super) writing: tokio::sync::Mutex<()>,
    /// The (member, kind) refusals already logged.
    pub(super) warned: Mutex<BTreeSet<(NodeId, &'static str)>>,
    /// Writes go to the data directory's database while it is open.
    db: Weak<Database>,
    refused: watch::Sender<Option<String>>,
    /// What this member runs with, stamped beside its identity, and where
    /// what other members stamp goes.
    pub(super) terms: TermsBook,
    /// The protocol versions this member offers and its cluster agreed.
    pub(super) versions: VersionBook,
    /// Whether this node stopped because it cannot speak its cluster's
    /// protocol version.
    cannot_speak: std::sync::atomic::AtomicBool,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("node", &self.node)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl Identity {
    pub(crate) fn new(
        node: NodeId,
        store: StoreId,
        recorded: Recorded,
        db: Weak<Database>,
    ) -> Self {
        let recorded_protocol = recorded.protocol.unwrap_or(OLDEST);
        Identity {
            node,
            store,
            known: Mutex::new(recorded),
            members: Mutex::new(None),
            applied: Mutex::new(None),
            vouched: std::sync::atomic::AtomicBool::new(false),
            rejoining: std::sync::atomic::AtomicBool::new(false),
            writing: tokio::sync::Mutex::new(()),
            warned: Mutex::default(),
            db,
            refused: watch::channel(None).0,
            terms: TermsBook::default(),
            versions: VersionBook::new(SPEAKS, recorded_protocol),
            cannot_speak: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The protocol versions this member offers and its cluster agreed
    /// ([`crate::version`]).
    pub fn versions(&self) -> &VersionBook {
        &self.versions
    }

    /// Whether this node stopped because it cannot speak its cluster's
    /// protocol version (a process exits 64 for it).
    pub fn cannot_speak_cluster(&self) -> bool {
        self.cannot_speak.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(super) fn refuse_for_protocol(&self, why: String) {
        self.cannot_speak
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.refuse_self(why);
    }

    /// What this member runs with and tells the others, and where what
    /// they tell it goes.
    pub fn terms(&self) -> &TermsBook {
        &self.terms
    }

    /// This node's id.
    pub fn node(&self) -> NodeId {
        self.node
    }

    /// This node's data directory's id.
    pub fn store(&self) -> StoreId {
        self.store
    }

    /// The cluster this node belongs to, once it formed or learned one.
    pub fn cluster(&self) -> Option<ClusterId> {
        self.lock().cluster
    }

    /// The store id recorded for `member`, if it was ever seen.
    pub fn recorded(&self, member: NodeId) -> Option<StoreId> {
        self.lock().members.get(&member).copied()
    }

    /// The stamp this node puts on what it sends.
    pub fn stamp(&self) -> Stamp {
        Stamp {
            from: self.node,
            store: self.store,
            cluster: self.cluster(),
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes `recorded` to the data directory, then takes it as what is
    /// known; the caller holds `writing`.
    pub(super) async fn write(&self, recorded: Recorded) -> io::Result<()> {
        let db = self.db()?;
        let to_write = recorded.clone();
        blocking::unblock(move || to_write.save(&db)).await??;
        *self.lock() = recorded;
        Ok(())
    }

    fn db(&self) -> io::Result<Arc<Database>> {
        self.db
            .upgrade()
            .ok_or_else(|| io::Error::other("the data directory is closed"))
    }

    /// Whether this node replaces its id's old data directory (`--rejoin`,
    /// on a new one): until it is a member again, a refusal of this
    /// directory does not stop it.
    pub fn set_rejoining(&self, rejoining: bool) {
        self.rejoining
            .store(rejoining, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether this node is replacing its id's old data directory.
    pub fn is_rejoining(&self) -> bool {
        self.rejoining.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Marks this node as refused by the cluster: its data directory is not
    /// the one the cluster knew. The first reason is kept.
    pub fn refuse_self(&self, why: String) {
        self.refused.send_if_modified(|refused| {
            if refused.is_some() {
                return false;
            }
            tracing::error!(%why, "the cluster refuses this node: it cannot go on");
            *refused = Some(why);
            true
        });
    }

    /// Resolves once this node has been refused, with why.
    pub async fn refused(&self) -> String {
        let mut rx = self.refused.subscribe();
        loop {
            if let Some(why) = rx.borrow_and_update().clone() {
                return why;
            }
            if rx.changed().await.is_err() {
                return "the identity check stopped".to_string();
            }
        }
    }

    /// Whether this node has been refused.
    pub fn is_refused(&self) -> bool {
        self.refused.borrow().is_some()
    }
}
