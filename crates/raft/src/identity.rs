//! Who a peer is: the cluster a data directory belongs to, and which data
//! directory each member runs on.
//!
//! Raft's safety rests on every member remembering its vote and log. A
//! member whose data directory was wiped (or swapped for another one) comes
//! back having forgotten both, and could vote twice in one term. So every
//! data directory is named when it is created (its *store id*, random), the
//! cluster is named when it forms (its *cluster id*, made by the member
//! that bootstraps it, learned by the others from the first peer message
//! that carries it), and every member records, durably, the store id each
//! other member first showed it.
//!
//! Every peer request and every answer carries the sender's [`Stamp`]
//! (headers [`FROM_HEADER`], [`STORE_HEADER`], [`CLUSTER_HEADER`]). A
//! receiver that knows another cluster id refuses with
//! [`Refusal::ForeignCluster`]; one that recorded another store id for that
//! member refuses with [`Refusal::StoreChanged`]. The same checks apply to
//! answers, so a vote answered from a wiped directory is never counted. A
//! refused request is answered `409` with the kind in [`REFUSED_HEADER`].
//!
//! `StoreChanged` is decisive: the member that hears it about itself knows
//! its own directory is not the one the cluster knew, and stops
//! ([`Identity::refused`]). `ForeignCluster` is not: either side may be the
//! stray one, so both refuse each other's traffic and log it, and only a
//! quorum of members saying so at start stops a node.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::sync::Mutex;
use std::sync::Weak;

use std::sync::Arc;

use axum::extract::Request;
use axum::extract::State;
use axum::http::header;
use axum::http::HeaderMap;
use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::response::Response;
use redb::Database;
use tokio::sync::watch;

use crate::types::NodeId;

/// The header naming the sending member's id.
pub const FROM_HEADER: &str = "x-leasehold-from";
/// The header carrying the sending member's store id (32 hex digits).
pub const STORE_HEADER: &str = "x-leasehold-store";
/// The header carrying the sender's cluster id (32 hex digits), once it has one.
pub const CLUSTER_HEADER: &str = "x-leasehold-cluster";
/// The header of a `409` refusal, naming its kind ([`Refusal::kind`]).
pub const REFUSED_HEADER: &str = "x-leasehold-refused";

/// Declares a random 128-bit name, shown as 32 hex digits.
macro_rules! hex_name {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
        )]
        pub struct $name(pub u128);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:032x}", self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({self})", stringify!($name))
            }
        }
    };
}

hex_name!(
    /// A random name for one data directory, made when it is created.
    StoreId
);
hex_name!(
    /// A random name for one cluster, made when it is bootstrapped.
    ClusterId
);

/// What one peer message says about its sender.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// The sender's node id.
    pub from: NodeId,
    /// The sender's data directory.
    pub store: StoreId,
    /// The sender's cluster, if it has learned one yet.
    pub cluster: Option<ClusterId>,
}

impl Stamp {
    /// Writes this stamp into `headers`.
    pub fn write(&self, headers: &mut HeaderMap) {
        headers.insert(FROM_HEADER, HeaderValue::from(self.from));
        headers.insert(STORE_HEADER, hex_value(self.store.0));
        if let Some(cluster) = self.cluster {
            headers.insert(CLUSTER_HEADER, hex_value(cluster.0));
        }
    }

    /// The stamp in `headers`, or why there is none.
    pub fn read(headers: &HeaderMap) -> Result<Stamp, BadStamp> {
        let text = |name: &'static str| -> Result<Option<&str>, BadStamp> {
            headers
                .get(name)
                .map(|v| v.to_str().map_err(|_| BadStamp(name)))
                .transpose()
        };
        let from = text(FROM_HEADER)?
            .ok_or(BadStamp(FROM_HEADER))?
            .parse()
            .map_err(|_| BadStamp(FROM_HEADER))?;
        let store = text(STORE_HEADER)?
            .ok_or(BadStamp(STORE_HEADER))
            .and_then(|s| parse_hex(s).ok_or(BadStamp(STORE_HEADER)))?;
        let cluster = text(CLUSTER_HEADER)?
            .map(|s| parse_hex(s).ok_or(BadStamp(CLUSTER_HEADER)))
            .transpose()?;
        Ok(Stamp {
            from,
            store: StoreId(store),
            cluster: cluster.map(ClusterId),
        })
    }
}

fn hex_value(v: u128) -> HeaderValue {
    HeaderValue::from_str(&format!("{v:032x}")).expect("hex digits are a valid header value")
}

fn parse_hex(s: &str) -> Option<u128> {
    (s.len() == 32)
        .then(|| u128::from_str_radix(s, 16).ok())
        .flatten()
}

/// A peer message without a readable [`Stamp`]: the named header is missing or malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("peer message without a valid {0} header")]
pub struct BadStamp(pub &'static str);

/// Why a peer's message was refused.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// The peer belongs to another cluster (or its directory does).
    #[error(
        "member {member} belongs to cluster {theirs}, this node to cluster {ours}: \
         one of the two data directories is from another cluster"
    )]
    ForeignCluster {
        /// The peer.
        member: NodeId,
        /// This node's cluster.
        ours: ClusterId,
        /// The peer's cluster.
        theirs: ClusterId,
    },
    /// The peer runs on another data directory than the one this node knew
    /// for it: wiped, replaced, or another process claiming its id.
    #[error(
        "member {member} runs on data directory {given}, but this cluster knew it on {known}: \
         its directory was wiped or replaced, so it has forgotten its votes; \
         restore that directory, or remove the member and add it again"
    )]
    StoreChanged {
        /// The peer.
        member: NodeId,
        /// The store id recorded for it.
        known: StoreId,
        /// The store id it showed.
        given: StoreId,
    },
    /// The peer runs on the data directory of a member that was removed
    /// from the cluster: that directory's votes and log belong to the
    /// member as it was, and may not come back.
    #[error(
        "member {member} runs on data directory {store}, which it had before it was removed \
         from the cluster: wipe the directory, and add the member again"
    )]
    Retired {
        /// The peer.
        member: NodeId,
        /// The store id it showed.
        store: StoreId,
    },
    /// What was learned could not be recorded durably.
    #[error("could not record a peer's identity: {0}")]
    Store(#[source] io::Error),
}

impl Refusal {
    /// The kind, as sent in [`REFUSED_HEADER`]: `cluster`, `store` or `unrecorded`.
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::ForeignCluster { .. } => KIND_CLUSTER,
            Refusal::StoreChanged { .. } | Refusal::Retired { .. } => KIND_STORE,
            Refusal::Store(_) => "unrecorded",
        }
    }
}

const KIND_CLUSTER: &str = "cluster";
const KIND_STORE: &str = "store";
/// The refusal of a member whose protocol version the cluster went past.
const KIND_PROTOCOL: &str = "protocol";

/// What a refused sender learns from the `409` it got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedAs {
    /// The peer knew this node on another data directory: this node's
    /// directory is not the one the cluster knew.
    StoreChanged,
    /// The peer belongs to another cluster.
    ForeignCluster,
    /// The peer's cluster speaks a protocol version above what this node
    /// offers, or this node's above what the peer offers.
    Protocol,
    /// The peer could not record this node's identity (try again).
    Unrecorded,
}

impl RefusedAs {
    /// The refusal named in an answer's headers, if it is one.
    pub fn read(headers: &HeaderMap) -> Option<RefusedAs> {
        let kind = headers.get(REFUSED_HEADER)?.to_str().ok()?;
        Some(match kind {
            KIND_STORE => RefusedAs::StoreChanged,
            KIND_CLUSTER => RefusedAs::ForeignCluster,
            KIND_PROTOCOL => RefusedAs::Protocol,
            _ => RefusedAs::Unrecorded,
        })
    }
}

/// What the data directory recorded, read when the store opens.
#[derive(Debug, Clone, Default)]
pub(crate) struct Recorded {
    pub(crate) cluster: Option<ClusterId>,
    pub(crate) members: BTreeMap<NodeId, StoreId>,
    /// The data directories members had when they were removed: never
    /// admitted again.
    pub(crate) retired: BTreeMap<NodeId, BTreeSet<StoreId>>,
    /// For each member, the log index of the committed configuration that
    /// last added it (it was not in the one before), as applied here.
    pub(crate) added: BTreeMap<NodeId, u64>,
    /// For each member, its `added` when its directory was recorded (or
    /// last shown again): a member added since may show a new directory.
    pub(crate) recorded_at: BTreeMap<NodeId, u64>,
    /// Whether a configuration from Raft ever named this node (`None`: a
    /// data directory older than this record).
    pub(crate) named: Option<bool>,
    /// The members whose store the log says ([`Command::MemberStore`]):
    /// no other is admitted while they are members.
    ///
    /// [`Command::MemberStore`]: crate::types::Command::MemberStore
    pub(crate) pinned: BTreeSet<NodeId>,
    /// The leader lease (`election_timeout_max`, in milliseconds) this
    /// directory's node last ran Raft with (`None`: never recorded): a
    /// restart with shorter timings waits out the longer one first.
    pub(crate) leader_lease_ms: Option<u64>,
    /// Whether the node's last process handed every record it kept over
    /// before it stopped (read, and cleared, at the next start).
    pub(crate) left_cleanly: Option<bool>,
    /// The protocol version the cluster agreed last, as applied here
    /// (`None`: none agreed, version 0).
    pub(crate) protocol: Option<crate::version::Protocol>,
}

/// What a peer's stamp is to what this node recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// As recorded: nothing to learn.
    Known,
    /// A member whose directory is not recorded yet.
    New,
    /// A member added again since, on the directory recorded.
    ShownAgain,
    /// A member added again since, on a new directory (this one's old).
    Replaced(StoreId),
    /// Not a member now, on another directory: admitted, not recorded
    /// (but a cluster id it carries is learned).
    Outsider,
}

/// This node's identity and what it knows of the others'; shared by the
/// peer server and both peer clients.
pub struct Identity {
    node: NodeId,
    store: StoreId,
    known: Mutex<Recorded>,
    /// The members now, once the node knows them.
    members: Mutex<Option<BTreeSet<NodeId>>>,
    /// The members of the last configuration applied since this process
    /// started.
    applied: Mutex<Option<BTreeSet<NodeId>>>,
    /// Whether the log says this node's id is on this data directory (the
    /// last [`Command::MemberStore`] for it names this store): a member's
    /// refusal of this directory then comes from a member behind the log,
    /// not from a wipe, and does not stop this node.
    ///
    /// [`Command::MemberStore`]: crate::types::Command::MemberStore
    vouched: std::sync::atomic::AtomicBool,
    /// Whether this node, on a new data directory, is replacing its id's
    /// old one (`--rejoin`): a member's refusal of this directory is then
    /// expected, until the old one is removed, and does not stop it.
    rejoining: std::sync::atomic::AtomicBool,
    /// Held across each write of what is recorded, so that writes follow
    /// one another.
    writing: tokio::sync::Mutex<()>,
    /// The (member, kind) refusals already logged.
    warned: Mutex<std::collections::BTreeSet<(NodeId, &'static str)>>,
    /// Writes go to the data directory's database while it is open.
    db: Weak<Database>,
    refused: watch::Sender<Option<String>>,
    /// What this member runs with, stamped beside its identity, and where
    /// what other members stamp goes.
    terms: crate::terms::TermsBook,
    /// The protocol versions this member offers and its cluster agreed.
    versions: crate::version::VersionBook,
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
        let recorded_protocol = recorded.protocol.unwrap_or(crate::version::OLDEST);
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
            terms: crate::terms::TermsBook::default(),
            versions: crate::version::VersionBook::new(crate::version::SPEAKS, recorded_protocol),
            cannot_speak: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The protocol versions this member offers and its cluster agreed
    /// ([`crate::version`]).
    pub fn versions(&self) -> &crate::version::VersionBook {
        &self.versions
    }

    /// Whether this node stopped because it cannot speak its cluster's
    /// protocol version (a process exits 64 for it).
    pub fn cannot_speak_cluster(&self) -> bool {
        self.cannot_speak.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn refuse_for_protocol(&self, why: String) {
        self.cannot_speak
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.refuse_self(why);
    }

    /// The cluster agreed to speak protocol `version` (an applied
    /// [`Command::Protocol`]): recorded in the data directory, so that a
    /// build that cannot speak it refuses to start on it; this node stops
    /// if it offers less.
    ///
    /// [`Command::Protocol`]: crate::types::Command::Protocol
    pub async fn agreed_protocol(&self, version: crate::version::Protocol) -> io::Result<()> {
        if version > self.versions.cluster() {
            let _writing = self.writing.lock().await;
            let mut recorded = self.lock().clone();
            recorded.protocol = Some(version);
            self.write(recorded).await?;
            self.versions.applied(version);
            tracing::info!(version, "the cluster speaks protocol {version} from now on");
        }
        let speaks = self.versions.speaks();
        if version > speaks {
            self.refuse_for_protocol(
                crate::version::Mismatch::ClusterAhead {
                    cluster: version,
                    speaks,
                }
                .to_string(),
            );
        }
        Ok(())
    }

    /// Takes the protocol versions of an admitted message from `from`: an
    /// error if it cannot be read (and this node stops if its cluster went
    /// ahead of it).
    fn read_versions(&self, from: NodeId, headers: &HeaderMap) -> Result<(), String> {
        match self.versions.read(from, headers) {
            Ok(()) => Ok(()),
            Err(m @ crate::version::Mismatch::ClusterAhead { .. }) => {
                let why = format!("member {from} says {m}");
                self.refuse_for_protocol(why.clone());
                Err(why)
            }
            Err(m) => {
                let why = format!("member {from}: {m}");
                let first = self
                    .warned
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert((from, "protocol"));
                if first {
                    tracing::error!(member = from, %m, "refusing a member's peer traffic");
                }
                Err(why)
            }
        }
    }

    /// What this member runs with and tells the others, and where what
    /// they tell it goes.
    pub fn terms(&self) -> &crate::terms::TermsBook {
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

    fn lock(&self) -> std::sync::MutexGuard<'_, Recorded> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Checks `peer` against what this node knows, and records what it
    /// learns (the cluster id if it has none, the peer's store id on first
    /// sight) durably before answering.
    pub async fn admit(&self, peer: Stamp) -> Result<(), Refusal> {
        let nothing_new = |known: &Recorded, seen: Seen| {
            let learns_cluster = known.cluster.is_none() && peer.cluster.is_some();
            matches!(seen, Seen::Known | Seen::Outsider) && !learns_cluster
        };
        {
            let known = self.lock();
            if nothing_new(&known, self.decide(&known, peer)?) {
                return Ok(());
            }
        }
        // Decided again under the write lock, on what is recorded then.
        let _writing = self.writing.lock().await;
        let mut next = self.lock().clone();
        let seen = self.decide(&next, peer)?;
        if nothing_new(&next, seen) {
            return Ok(());
        }
        if next.cluster.is_none() {
            next.cluster = peer.cluster;
        }
        let member = peer.from;
        let added = next.added.get(&member).copied().unwrap_or(0);
        match seen {
            Seen::New | Seen::ShownAgain => {
                next.members.insert(member, peer.store);
                next.recorded_at.insert(member, added);
            }
            Seen::Replaced(old) => {
                next.retired.entry(member).or_default().insert(old);
                next.members.insert(member, peer.store);
                next.recorded_at.insert(member, added);
            }
            Seen::Known | Seen::Outsider => {}
        }
        self.write(next).await.map_err(Refusal::Store)
    }

    /// What `peer`'s stamp is to what `known` records, or why it is refused.
    fn decide(&self, known: &Recorded, peer: Stamp) -> Result<Seen, Refusal> {
        if let (Some(ours), Some(theirs)) = (known.cluster, peer.cluster) {
            if ours != theirs {
                return Err(Refusal::ForeignCluster {
                    member: peer.from,
                    ours,
                    theirs,
                });
            }
        }
        let member = peer.from;
        if known
            .retired
            .get(&member)
            .is_some_and(|stores| stores.contains(&peer.store))
        {
            return Err(Refusal::Retired {
                member,
                store: peer.store,
            });
        }
        if member == self.node {
            if peer.store != self.store {
                return Err(Refusal::StoreChanged {
                    member,
                    known: self.store,
                    given: peer.store,
                });
            }
            return Ok(Seen::Known);
        }
        if known.pinned.contains(&member) {
            // The log says which directory this id is on.
            return Ok(match known.members.get(&member).copied() {
                Some(store) if store == peer.store => Seen::Known,
                Some(_) if self.is_outsider(member) => Seen::Outsider,
                Some(known) => {
                    return Err(Refusal::StoreChanged {
                        member,
                        known,
                        given: peer.store,
                    })
                }
                None => Seen::New,
            });
        }
        // Added again (by a committed configuration) since its directory
        // was recorded: a new directory may be the machine rebuilt.
        let added_since = known.added.get(&member).copied().unwrap_or(0)
            > known.recorded_at.get(&member).copied().unwrap_or(0);
        Ok(match known.members.get(&member).copied() {
            None => Seen::New,
            Some(store) if store == peer.store && added_since => Seen::ShownAgain,
            Some(store) if store == peer.store => Seen::Known,
            Some(old) if added_since => Seen::Replaced(old),
            // Not a member now (removed, or asking to be added): nothing
            // it sends counts in Raft; its directory is not recorded.
            Some(_) if self.is_outsider(member) => Seen::Outsider,
            Some(known) => {
                return Err(Refusal::StoreChanged {
                    member,
                    known,
                    given: peer.store,
                })
            }
        })
    }

    /// Takes the configuration committed at log index `index`, naming
    /// `members`, as applied in log order (every configuration, at every
    /// start, from the first): a member not in the one before was added
    /// at `index`. The first configuration applied since this process
    /// started adds no one: a member there was recorded as it was then.
    pub async fn applied(&self, index: u64, members: BTreeSet<NodeId>) -> io::Result<()> {
        let before = self
            .applied
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace(members.clone());
        let _writing = self.writing.lock().await;
        let mut next = self.lock().clone();
        let mut changed = false;
        for member in members {
            // The first configuration applied since this process started
            // is where the log begins for it: no one is added there.
            let new = before
                .as_ref()
                .is_some_and(|before| !before.contains(&member));
            let at = next.added.entry(member).or_insert(0);
            if new && *at < index {
                *at = index;
                changed = true;
            }
        }
        if !changed {
            return Ok(());
        }
        self.write(next).await
    }

    /// Takes `members` as the cluster's members now (Raft's latest
    /// configuration): one not among them may show another data directory
    /// than the one recorded (it is not recorded).
    pub fn set_members(&self, members: impl IntoIterator<Item = NodeId>) {
        *self.members.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(members.into_iter().collect());
    }

    /// Whether `member` is known not to be a member now.
    /// Until Raft runs and says its members ([`Identity::set_members`]),
    /// the last configuration this process applied from its log: a node
    /// that restarted after a member left must not take the id for a
    /// member, and refuse as a wiped member its replacement asking to join.
    fn is_outsider(&self, member: NodeId) -> bool {
        let members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(members) = members.as_ref() {
            return !members.contains(&member);
        }
        drop(members);
        let applied = self.applied.lock().unwrap_or_else(|e| e.into_inner());
        applied.as_ref().is_some_and(|m| !m.contains(&member))
    }

    /// Names the cluster this node is about to bootstrap (keeping a name it
    /// already has), durably; answers it.
    pub async fn bootstrap(&self) -> io::Result<ClusterId> {
        if let Some(cluster) = self.cluster() {
            return Ok(cluster);
        }
        let _writing = self.writing.lock().await;
        let mut next = self.lock().clone();
        if next.cluster.is_none() {
            next.cluster = Some(ClusterId(crate::entropy::random_u128()));
            self.write(next.clone()).await?;
        }
        Ok(next.cluster.expect("named above"))
    }

    /// Takes the log's word ([`Command::MemberStore`], applied in log
    /// order) that `member` runs on `store`: recorded in place of any other
    /// (which is retired), and from now on no other is admitted while the
    /// id is a member. For this node's own id, says whether the log vouches
    /// for this directory.
    ///
    /// [`Command::MemberStore`]: crate::types::Command::MemberStore
    pub async fn pin(&self, member: NodeId, store: StoreId) -> io::Result<()> {
        if member == self.node {
            self.vouched
                .store(store == self.store, std::sync::atomic::Ordering::Relaxed);
            return Ok(());
        }
        let _writing = self.writing.lock().await;
        let mut next = self.lock().clone();
        let old = next.members.insert(member, store);
        if old == Some(store) && next.pinned.contains(&member) {
            return Ok(());
        }
        if let Some(old) = old.filter(|old| *old != store) {
            next.retired.entry(member).or_default().insert(old);
        }
        if let Some(retired) = next.retired.get_mut(&member) {
            retired.remove(&store);
        }
        next.pinned.insert(member);
        self.write(next).await
    }

    /// The store the log says `member` runs on, if it says.
    pub fn pinned(&self, member: NodeId) -> Option<StoreId> {
        if member == self.node {
            let vouched = self.vouched.load(std::sync::atomic::Ordering::Relaxed);
            return vouched.then_some(self.store);
        }
        let known = self.lock();
        known
            .pinned
            .contains(&member)
            .then(|| known.members.get(&member).copied())
            .flatten()
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

    /// Writes `recorded` to the data directory, then takes it as what is
    /// known; the caller holds `writing`.
    async fn write(&self, recorded: Recorded) -> io::Result<()> {
        let db = self.db()?;
        let to_write = recorded.clone();
        crate::blocking::unblock(move || crate::log_store::write_identity(&db, &to_write))
            .await??;
        *self.lock() = recorded;
        Ok(())
    }

    fn db(&self) -> io::Result<Arc<Database>> {
        self.db
            .upgrade()
            .ok_or_else(|| io::Error::other("the data directory is closed"))
    }

    /// Logs a refusal of `member` as an error the first time it happens.
    /// Logs, once per member, that a leader's entries came from a
    /// directory the log as applied here names otherwise (see [`guard`]).
    fn note_behind(&self, member: NodeId) {
        let first = self
            .warned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((member, "behind"));
        if first {
            tracing::info!(
                member,
                "taking the leader's entries from a data directory the log applied here \
                 names otherwise: this node is behind the log"
            );
        }
    }

    fn warn_once(&self, member: NodeId, kind: &'static str, refusal: &Refusal) {
        let first = self
            .warned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((member, kind));
        if first {
            tracing::error!(member, %refusal, "refusing a member's peer traffic");
        }
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

    /// Checks an answer from `target`: a refusal of this node (a `409` with
    /// [`REFUSED_HEADER`]) or a successful answer from a stranger is an
    /// error, and a refusal that says this node's directory changed marks it
    /// refused. Other failures (no stamp: the token was refused, say) are
    /// left to the caller, which reports their status.
    pub async fn check_answer(
        &self,
        target: NodeId,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> Result<(), String> {
        if let Some(refused) = RefusedAs::read(headers) {
            let why = format!("member {target} refused this node ({refused:?})");
            let vouched = self.vouched.load(std::sync::atomic::Ordering::Relaxed);
            let spoken = crate::version::Spoken::read(headers);
            if refused == RefusedAs::Protocol && spoken.cluster > self.versions.speaks() {
                self.refuse_for_protocol(format!(
                    "member {target} refused this node: {}",
                    crate::version::Mismatch::ClusterAhead {
                        cluster: spoken.cluster,
                        speaks: self.versions.speaks(),
                    }
                ));
            }
            if refused == RefusedAs::StoreChanged && !vouched && !self.is_rejoining() {
                self.refuse_self(format!(
                    "member {target} knew node {} on another data directory than {}: \
                     this one was wiped or replaced, and has forgotten its votes; restore \
                     the old directory, or remove this member and add it again",
                    self.node, self.store
                ));
            }
            return Err(why);
        }
        if !status.is_success() {
            return Ok(());
        }
        let stamp =
            Stamp::read(headers).map_err(|e| format!("answer from member {target}: {e}"))?;
        if stamp.from != target {
            return Err(format!(
                "member {target}'s address answered as member {}",
                stamp.from
            ));
        }
        match self.admit(stamp).await {
            Ok(()) => {
                self.read_versions(target, headers)?;
                self.terms.read(target, headers, true);
                Ok(())
            }
            Err(e) => {
                if !matches!(e, Refusal::Store(_)) {
                    self.warn_once(target, e.kind(), &e);
                }
                Err(e.to_string())
            }
        }
    }
}

/// The peer server's middleware: admits each request's stamp (refusing a
/// stranger with `409`, a request without a stamp with `400`, both with a
/// JSON body) and stamps every answer. Put it inside the token check, so
/// nothing unauthenticated is recorded.
///
/// A leader's entries (`append`, `snapshot`) are the one exception: they
/// are taken even from a directory that what this node has applied of the
/// log names otherwise. Such a node is behind the log (a member removed and
/// added again under its id on a new directory since the entry it applied
/// last), and only those entries can bring it up to date; refusing them
/// would keep it behind for good. Raft's own term check refuses a stale
/// leader's entries, and a leader's entries count nothing towards a vote or
/// a commit: the votes, and every answer, are still checked.
pub async fn guard(
    State(identity): State<Arc<Identity>>,
    request: Request,
    next: Next,
) -> Response {
    let from_leader = matches!(
        request.uri().path(),
        crate::routes::APPEND | crate::routes::SNAPSHOT
    );
    let retiring = request.uri().path() == crate::routes::RETIRE_SELF;
    let refused = match Stamp::read(request.headers()) {
        Err(e) => Some((StatusCode::BAD_REQUEST, "bad_request", None, e.to_string())),
        Ok(stamp) => match identity.admit(stamp).await {
            Ok(()) => match identity.read_versions(stamp.from, request.headers()) {
                Ok(()) => {
                    identity.terms.read(stamp.from, request.headers(), false);
                    None
                }
                Err(why) => Some((
                    StatusCode::CONFLICT,
                    "wrong_member",
                    Some(KIND_PROTOCOL),
                    why,
                )),
            },
            Err(Refusal::StoreChanged { member, .. } | Refusal::Retired { member, .. })
                if from_leader && member != identity.node() =>
            {
                identity.note_behind(member);
                None
            }
            // A new directory asking that its own id's old one be removed:
            // the route asks nothing else of it (and a retired directory,
            // an old one, may not).
            Err(Refusal::StoreChanged { member, .. })
                if retiring && member == stamp.from && member != identity.node() =>
            {
                None
            }
            Err(e @ Refusal::Store(_)) => Some((
                StatusCode::SERVICE_UNAVAILABLE,
                "internal",
                Some(e.kind()),
                e.to_string(),
            )),
            Err(e) => {
                identity.warn_once(stamp.from, e.kind(), &e);
                Some((
                    StatusCode::CONFLICT,
                    "wrong_member",
                    Some(e.kind()),
                    e.to_string(),
                ))
            }
        },
    };
    let mut response = match refused {
        None => next.run(request).await,
        Some((status, code, kind, message)) => {
            let body = serde_json::json!({ "error": code, "message": message }).to_string();
            let mut response =
                (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
            if let Some(kind) = kind {
                response
                    .headers_mut()
                    .insert(REFUSED_HEADER, HeaderValue::from_static(kind));
            }
            response
        }
    };
    identity.stamp().write(response.headers_mut());
    identity.terms.write(response.headers_mut());
    identity.versions.write(response.headers_mut());
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity(node: NodeId) -> (tempfile::TempDir, crate::LogStore, Identity) {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::LogStore::open(dir.path(), node).unwrap();
        let identity = store.identity();
        (dir, store, identity)
    }

    /// A member behind the log (it applied a pin of member 2's old
    /// directory; the log goes on to a new one) takes the leader's entries
    /// from member 2's new directory, so that it can catch up, and still
    /// refuses that directory's votes and everything else.
    #[tokio::test]
    async fn a_member_behind_the_log_takes_the_leaders_entries_but_no_vote() {
        use tower::ServiceExt;
        let (_dir, _store, me) = identity(1);
        let me = Arc::new(me);
        me.applied(1, BTreeSet::from([1, 2, 3])).await.unwrap();
        me.set_members([1, 2, 3]);
        me.pin(2, StoreId(7)).await.unwrap();
        let app = axum::Router::new()
            .route("/{*path}", axum::routing::post(|| async { "taken" }))
            .layer(axum::middleware::from_fn_with_state(Arc::clone(&me), guard));
        let from_new_directory = |path: &str| {
            let mut request = axum::http::Request::post(path)
                .body(axum::body::Body::empty())
                .unwrap();
            let stamp = Stamp {
                from: 2,
                store: StoreId(8),
                cluster: None,
            };
            stamp.write(request.headers_mut());
            request
        };
        for path in [crate::routes::APPEND, crate::routes::SNAPSHOT] {
            let answer = app.clone().oneshot(from_new_directory(path)).await.unwrap();
            assert_eq!(answer.status(), StatusCode::OK, "{path}");
        }
        for path in [
            crate::routes::VOTE,
            crate::routes::PRE_VOTE,
            "/internal/held",
        ] {
            let answer = app.clone().oneshot(from_new_directory(path)).await.unwrap();
            assert_eq!(answer.status(), StatusCode::CONFLICT, "{path}");
        }
        assert_eq!(me.pinned(2), Some(StoreId(7)), "nothing taken as recorded");
    }

    #[test]
    fn a_stamp_survives_its_headers() {
        let stamp = Stamp {
            from: 3,
            store: StoreId(0xabc),
            cluster: Some(ClusterId(u128::MAX)),
        };
        let mut headers = HeaderMap::new();
        stamp.write(&mut headers);
        assert_eq!(Stamp::read(&headers), Ok(stamp));
        headers.remove(CLUSTER_HEADER);
        assert_eq!(Stamp::read(&headers).unwrap().cluster, None);
        headers.insert(STORE_HEADER, HeaderValue::from_static("xyz"));
        assert_eq!(Stamp::read(&headers), Err(BadStamp(STORE_HEADER)));
        headers.remove(FROM_HEADER);
        assert_eq!(Stamp::read(&headers), Err(BadStamp(FROM_HEADER)));
    }

    #[tokio::test]
    async fn a_member_is_known_by_the_store_it_first_showed() {
        let (_dir, _store, me) = identity(1);
        let first = Stamp {
            from: 2,
            store: StoreId(7),
            cluster: None,
        };
        me.admit(first).await.unwrap();
        me.admit(first).await.unwrap();
        let wiped = Stamp {
            store: StoreId(8),
            ..first
        };
        assert!(matches!(
            me.admit(wiped).await,
            Err(Refusal::StoreChanged {
                member: 2,
                known: StoreId(7),
                given: StoreId(8)
            })
        ));
        let impostor = Stamp {
            from: 1,
            store: StoreId(9),
            cluster: None,
        };
        assert!(matches!(
            me.admit(impostor).await,
            Err(Refusal::StoreChanged { member: 1, .. })
        ));
    }

    #[tokio::test]
    async fn a_member_added_again_may_show_a_new_directory_once_and_the_old_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let two = |store| Stamp {
            from: 2,
            store: StoreId(store),
            cluster: None,
        };
        let wiped = |result: Result<(), Refusal>| {
            matches!(result, Err(Refusal::StoreChanged { member: 2, .. }))
        };
        let all = || BTreeSet::from([1, 2, 3]);
        let without_two = || BTreeSet::from([1, 3]);
        {
            let store = crate::LogStore::open(dir.path(), 1).unwrap();
            let me = store.identity();
            me.applied(1, all()).await.unwrap();
            me.set_members(all());
            me.admit(two(7)).await.unwrap();
            assert!(wiped(me.admit(two(8)).await), "a wiped voter");
            // Removed: another directory is admitted, and not recorded.
            me.applied(10, without_two()).await.unwrap();
            me.set_members(without_two());
            me.admit(two(8)).await.unwrap();
            assert_eq!(me.recorded(2), Some(StoreId(7)));
            // Added again: its new directory replaces the old, once.
            me.applied(20, all()).await.unwrap();
            me.set_members(all());
            me.admit(two(8)).await.unwrap();
            assert_eq!(me.recorded(2), Some(StoreId(8)));
            assert!(matches!(
                me.admit(two(7)).await,
                Err(Refusal::Retired {
                    member: 2,
                    store: StoreId(7)
                })
            ));
            assert!(wiped(me.admit(two(9)).await), "wiped after its comeback");
            // Removed and added again on the same directory: shown again,
            // so a later wipe is a wipe.
            me.applied(30, without_two()).await.unwrap();
            me.applied(40, all()).await.unwrap();
            me.admit(two(8)).await.unwrap();
            assert!(wiped(me.admit(two(9)).await));
        }
        // The log applied again from the start after a restart adds no one
        // anew: what was recorded stands.
        let store = crate::LogStore::open(dir.path(), 1).unwrap();
        let me = store.identity();
        me.applied(1, all()).await.unwrap();
        me.set_members(all());
        assert_eq!(me.recorded(2), Some(StoreId(8)));
        assert!(wiped(me.admit(two(9)).await));
        assert!(matches!(
            me.admit(two(7)).await,
            Err(Refusal::Retired { .. })
        ));
    }

    #[tokio::test]
    async fn the_log_says_which_directory_a_member_is_on() {
        let dir = tempfile::tempdir().unwrap();
        let two = |store| Stamp {
            from: 2,
            store: StoreId(store),
            cluster: None,
        };
        let store = crate::LogStore::open(dir.path(), 1).unwrap();
        let me = store.identity();
        me.applied(1, BTreeSet::from([1, 3])).await.unwrap();
        me.set_members([1, 3]);
        // A joiner's first word, before it is a member: admitted.
        me.admit(two(6)).await.unwrap();
        me.pin(2, StoreId(7)).await.unwrap();
        me.applied(5, BTreeSet::from([1, 2, 3])).await.unwrap();
        me.set_members([1, 2, 3]);
        assert_eq!(me.pinned(2), Some(StoreId(7)));
        me.admit(two(7)).await.unwrap();
        // Pinned: no other directory, not even after an addition.
        assert!(matches!(
            me.admit(two(8)).await,
            Err(Refusal::StoreChanged { member: 2, .. })
        ));
        assert!(me.admit(two(6)).await.is_err());
        // Removed, and added again on a new directory the log names.
        me.applied(8, BTreeSet::from([1, 3])).await.unwrap();
        me.set_members([1, 3]);
        me.pin(2, StoreId(9)).await.unwrap();
        me.applied(9, BTreeSet::from([1, 2, 3])).await.unwrap();
        me.set_members([1, 2, 3]);
        me.admit(two(9)).await.unwrap();
        assert!(matches!(
            me.admit(two(7)).await,
            Err(Refusal::Retired { .. })
        ));
        // This node's own id: the log vouches for this directory or not.
        me.pin(1, StoreId(1)).await.unwrap();
        assert!(!me.vouched.load(std::sync::atomic::Ordering::Relaxed));
        assert_eq!(me.pinned(1), None, "the log names another directory");
        me.pin(1, me.store()).await.unwrap();
        assert!(me.vouched.load(std::sync::atomic::Ordering::Relaxed));
        assert_eq!(me.pinned(1), Some(me.store()), "the log names this one");

        // A member recorded before this process applied its first
        // configuration (a first start) was not added since: a wipe is one.
        let dir = tempfile::tempdir().unwrap();
        let store = crate::LogStore::open(dir.path(), 1).unwrap();
        let me = store.identity();
        me.admit(two(7)).await.unwrap();
        me.applied(1, BTreeSet::from([1, 2, 3])).await.unwrap();
        me.set_members([1, 2, 3]);
        assert!(matches!(
            me.admit(two(8)).await,
            Err(Refusal::StoreChanged { member: 2, .. })
        ));
    }

    #[tokio::test]
    async fn whether_a_configuration_named_this_node_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = crate::LogStore::open(dir.path(), 1).unwrap();
            let me = store.identity();
            assert_eq!(me.was_named(), Some(false), "a new directory");
            me.admit(Stamp {
                from: 2,
                store: StoreId(7),
                cluster: None,
            })
            .await
            .unwrap();
            assert_eq!(me.was_named(), Some(false));
            me.named().await.unwrap();
        }
        let store = crate::LogStore::open(dir.path(), 1).unwrap();
        assert_eq!(store.identity().was_named(), Some(true));
    }

    #[tokio::test]
    async fn the_first_cluster_learned_is_kept_and_others_refused() {
        let (_dir, _store, me) = identity(1);
        let peer = |cluster| Stamp {
            from: 2,
            store: StoreId(7),
            cluster: Some(ClusterId(cluster)),
        };
        me.admit(peer(5)).await.unwrap();
        assert_eq!(me.cluster(), Some(ClusterId(5)));
        assert_eq!(me.bootstrap().await.unwrap(), ClusterId(5));
        assert!(matches!(
            me.admit(peer(6)).await,
            Err(Refusal::ForeignCluster { .. })
        ));
    }

    #[tokio::test]
    async fn what_was_learned_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let (store_id, cluster) = {
            let store = crate::LogStore::open(dir.path(), 1).unwrap();
            let me = store.identity();
            let cluster = me.bootstrap().await.unwrap();
            me.admit(Stamp {
                from: 2,
                store: StoreId(7),
                cluster: Some(cluster),
            })
            .await
            .unwrap();
            (me.store(), cluster)
        };
        let store = crate::LogStore::open(dir.path(), 1).unwrap();
        let me = store.identity();
        assert_eq!(me.store(), store_id);
        assert_eq!(me.cluster(), Some(cluster));
        assert_eq!(me.recorded(2), Some(StoreId(7)));
        let other = crate::LogStore::open(tempfile::tempdir().unwrap().path(), 1).unwrap();
        assert_ne!(other.identity().store(), store_id);
    }

    #[tokio::test]
    async fn an_answer_saying_this_store_changed_refuses_this_node() {
        let (_dir, _store, me) = identity(2);
        let mut headers = HeaderMap::new();
        headers.insert(REFUSED_HEADER, HeaderValue::from_static(KIND_CLUSTER));
        let conflict = StatusCode::CONFLICT;
        assert!(me.check_answer(1, conflict, &headers).await.is_err());
        assert!(!me.is_refused());
        headers.insert(REFUSED_HEADER, HeaderValue::from_static(KIND_STORE));
        assert!(me.check_answer(1, conflict, &headers).await.is_err());
        assert!(me.is_refused());
    }

    #[tokio::test]
    async fn an_answer_from_the_wrong_member_or_store_is_not_believed() {
        let (_dir, _store, me) = identity(1);
        let mut headers = HeaderMap::new();
        Stamp {
            from: 3,
            store: StoreId(7),
            cluster: None,
        }
        .write(&mut headers);
        let ok = StatusCode::OK;
        assert!(me.check_answer(2, ok, &headers).await.is_err());
        assert!(me.check_answer(3, ok, &headers).await.is_ok());
        assert!(me
            .check_answer(2, StatusCode::UNAUTHORIZED, &HeaderMap::new())
            .await
            .is_ok());
        let mut wiped = HeaderMap::new();
        Stamp {
            from: 3,
            store: StoreId(8),
            cluster: None,
        }
        .write(&mut wiped);
        assert!(me.check_answer(3, ok, &wiped).await.is_err());
        assert!(!me.is_refused());
    }
}
