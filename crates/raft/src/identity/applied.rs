//! What the applied log tells the identity, in log order: each committed
//! configuration (who was added when, who is a member now), each member's
//! directory ([`Command::MemberStore`]) and the protocol version agreed
//! ([`Command::Protocol`]).
//!
//! [`Command::MemberStore`]: crate::types::Command::MemberStore
//! [`Command::Protocol`]: crate::types::Command::Protocol

use std::collections::BTreeSet;
use std::io;

use crate::ids::{NodeId, StoreId};
use crate::version::{Mismatch, Protocol};

use super::node::Identity;

impl Identity {
    /// The cluster agreed to speak protocol `version` (an applied
    /// [`Command::Protocol`]): recorded in the data directory, so that a
    /// build that cannot speak it refuses to start on it; this node stops
    /// if it offers less.
    ///
    /// [`Command::Protocol`]: crate::types::Command::Protocol
    pub async fn agreed_protocol(&self, version: Protocol) -> io::Result<()> {
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
                Mismatch::ClusterAhead {
                    cluster: version,
                    speaks,
                }
                .to_string(),
            );
        }
        Ok(())
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
    pub(super) fn is_outsider(&self, member: NodeId) -> bool {
        let members = self.members.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(members) = members.as_ref() {
            return !members.contains(&member);
        }
        drop(members);
        let applied = self.applied.lock().unwrap_or_else(|e| e.into_inner());
        applied.as_ref().is_some_and(|m| !m.contains(&member))
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
}
