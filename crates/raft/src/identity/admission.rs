//! Whether a peer is who it says: each stamp (on a request or an answer)
//! checked against what this node recorded, and what it newly learns
//! recorded before it is believed.

use std::io;

use axum::http::HeaderMap;
use axum::http::StatusCode;

use crate::ids::{ClusterId, NodeId, StoreId};
use crate::version::{Mismatch, Spoken};

use super::node::Identity;
use super::records::Recorded;
use super::stamp::{RefusedAs, Stamp, KIND_CLUSTER, KIND_STORE};

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
    ///
    /// [`REFUSED_HEADER`]: super::REFUSED_HEADER
    pub fn kind(&self) -> &'static str {
        match self {
            Refusal::ForeignCluster { .. } => KIND_CLUSTER,
            Refusal::StoreChanged { .. } | Refusal::Retired { .. } => KIND_STORE,
            Refusal::Store(_) => "unrecorded",
        }
    }
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

impl Identity {
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

    /// Checks an answer from `target`: a refusal of this node (a `409` with
    /// [`REFUSED_HEADER`]) or a successful answer from a stranger is an
    /// error, and a refusal that says this node's directory changed marks it
    /// refused. Other failures (no stamp: the token was refused, say) are
    /// left to the caller, which reports their status.
    ///
    /// [`REFUSED_HEADER`]: super::REFUSED_HEADER
    pub async fn check_answer(
        &self,
        target: NodeId,
        status: StatusCode,
        headers: &HeaderMap,
    ) -> Result<(), String> {
        if let Some(refused) = RefusedAs::read(headers) {
            let why = format!("member {target} refused this node ({refused:?})");
            let vouched = self.vouched.load(std::sync::atomic::Ordering::Relaxed);
            let spoken = Spoken::read(headers);
            if refused == RefusedAs::Protocol && spoken.cluster > self.versions.speaks() {
                self.refuse_for_protocol(format!(
                    "member {target} refused this node: {}",
                    Mismatch::ClusterAhead {
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

    /// Takes the protocol versions of an admitted message from `from`: an
    /// error if it cannot be read (and this node stops if its cluster went
    /// ahead of it).
    pub(super) fn read_versions(&self, from: NodeId, headers: &HeaderMap) -> Result<(), String> {
        match self.versions.read(from, headers) {
            Ok(()) => Ok(()),
            Err(m @ Mismatch::ClusterAhead { .. }) => {
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

    /// Logs a refusal of `member` as an error the first time it happens.
    pub(super) fn warn_once(&self, member: NodeId, kind: &'static str, refusal: &Refusal) {
        let first = self
            .warned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((member, kind));
        if first {
            tracing::error!(member, %refusal, "refusing a member's peer traffic");
        }
    }
}
