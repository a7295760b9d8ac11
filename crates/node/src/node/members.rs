//! Who the members are, as this node follows them: the roster from Raft,
//! whether this node joins or is a member, and a sender of releases for
//! each member.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use leasehold_raft::WatchReceiver;
use locktable::NodeId;
use tokio_util::sync::CancellationToken;

use crate::forgets;
use crate::roster::Roster;

use super::{copies_of, Node};

impl Node {
    /// The members now.
    pub fn roster(&self) -> Arc<Roster> {
        Arc::clone(&self.roster.borrow())
    }

    /// Takes `latest`, read from Raft, as the members, if they changed:
    /// the protocol's member list follows, each new member gets its sender
    /// of releases before anything may be sent to it, and members gone are
    /// kept as departed. A node named by an earlier roster and not by
    /// `latest` was removed.
    pub(crate) fn roster_changed(self: &Arc<Self>, latest: Roster) {
        let named = latest.addr(self.id()).is_some();
        self.identity.set_members(latest.ids());
        let first = !self.saw_roster.swap(true, Ordering::Relaxed);
        // A node joining replays configurations from before it was added;
        // a member finds its latest one first, and is removed if that does
        // not name it (restarted after its removal). The data directory
        // records whether a configuration ever named this node, so that a
        // joiner restarted before its addition reached it is no member
        // yet; a directory from before that record counts a node started
        // without --join as a member.
        let recorded = self.identity.was_named().unwrap_or(!self.is_joiner());
        let was_member = self.was_member.load(Ordering::Relaxed) || (first && recorded);
        // A joining node replaying the log may find its id named by a
        // configuration of an earlier member under that id: it is a member
        // once the cluster answers its join (`confirm_joined`).
        let confirmed = !self.is_joiner() || self.identity.was_named() == Some(true);
        if named {
            if confirmed {
                self.confirm_joined();
            }
        } else if was_member {
            if self.is_leader() && latest.is_committed_member(self.id()) {
                self.removing_self();
            } else {
                self.removed_from_cluster();
            }
        }
        let before = self.roster();
        if *before == latest {
            return;
        }
        self.forgets.set_members(latest.members());
        let members: Vec<NodeId> = latest.ids().collect();
        let left = before
            .members()
            .filter(|(id, _)| latest.addr(*id).is_none());
        let copy_to = latest.copy_to();
        let copies = copies_of(&self.config, &latest);
        let now = self.clock.now();
        {
            let mut state = self.state();
            state.member.members_left(&members, left, now);
            state
                .member
                .set_members(latest.ids().collect(), copy_to, copies, now);
            // Under the lock, so no refresh stamps an older count after it.
            self.identity
                .terms()
                .set_copies(state.member.copies_floor(now));
        }
        tracing::info!(
            members = ?latest.ids().collect::<Vec<_>>(),
            "the members changed"
        );
        self.roster.send_replace(Arc::new(latest));
    }

    /// Whether this node asks the cluster to add it (`--join`, or
    /// `--rejoin` once the cluster removed its id's old data directory)
    /// rather than forming the cluster of its peers.
    pub(crate) fn is_joiner(&self) -> bool {
        self.joining.load(Ordering::Relaxed)
    }

    /// From now on this node joins the cluster rather than forming it.
    pub(crate) fn become_joiner(&self) {
        self.joining.store(true, Ordering::Relaxed);
    }

    /// The members to ask to add this node: `--join`, or else the other
    /// peers.
    pub(crate) fn join_targets(&self) -> Vec<String> {
        if !self.config.join.is_empty() {
            return self.config.join.clone();
        }
        self.config
            .peers
            .iter()
            .filter(|(id, _)| **id != self.id())
            .map(|(_, addr)| addr.clone())
            .collect()
    }

    /// Whether a configuration from Raft named this node (a node still
    /// joining was never named).
    pub(crate) fn was_named(&self) -> bool {
        self.was_member.load(Ordering::Relaxed)
    }

    /// This node is a member (a configuration named it, or the cluster
    /// answered its join): from now on a configuration that does not name
    /// it removed it. Recorded durably.
    pub(crate) fn confirm_joined(&self) {
        if self.was_member.swap(true, Ordering::Relaxed) {
            return;
        }
        let identity = Arc::clone(&self.identity);
        self.tasks.spawn(async move {
            if let Err(e) = identity.named().await {
                tracing::warn!(%e, "could not record that this node is a member");
            }
        });
    }

    /// Keeps the roster in step with Raft's latest membership until `stop`:
    /// on every change the protocol's member list follows, and the members
    /// new to it get their lanes of releases.
    pub(crate) async fn follow_roster(self: Arc<Self>, stop: CancellationToken) {
        let mut metrics = self.raft.metrics();
        loop {
            let latest = {
                let metrics = metrics.borrow_watched();
                Roster::from_membership(
                    &metrics.membership_config,
                    &metrics.committed_membership_config,
                )
            };
            if let Some(latest) = latest {
                self.roster_changed(latest);
            }
            tokio::select! {
                changed = metrics.changed() => if changed.is_err() { return },
                _ = stop.cancelled() => return,
            }
        }
    }

    /// Passes releases on to every member with a lane, as the protocol's
    /// outbox says, until `stop` (one task: each batch is sent apart, so a
    /// member that cannot be reached holds up no other).
    pub(crate) async fn pass_on_releases(self: Arc<Self>, stop: CancellationToken) {
        let (peers, clock) = (&self.peers, self.clock);
        let send = |addr: String, body| async move {
            peers.forget(&addr, body, forgets::SEND_TIMEOUT).await
        };
        forgets::send_releases(&self.forgets, || clock.now(), send, stop).await;
    }
}
