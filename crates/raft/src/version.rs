//! Protocol versions: what a member's build speaks, and what its cluster
//! has agreed to speak.
//!
//! Every peer request and answer carries `x-leasehold-protocol: speaks=1;
//! cluster=0`: the highest version the sender offers (its build's, or
//! lower with `--protocol`) and the version its cluster speaks as far as it
//! applied the log. A message without the header comes from a build before
//! versions, which speaks version 0. Unknown keys are skipped.
//!
//! The cluster's version is agreed through the log: once every member of
//! the committed configuration has stamped a higher version, the speaker
//! appends [`Command::Protocol`], and from that entry on the cluster speaks
//! it. Until then every member speaks the cluster's version, so a mixed
//! cluster (a rolling upgrade) only ever sends what its oldest member reads.
//!
//! A member that cannot speak its cluster's version stops (exit 64):
//! - at start, when its data directory applied a higher version than it
//!   offers;
//! - when a peer says the cluster speaks a version above what it offers
//!   (an old build joining an upgraded cluster);
//! - when it applies a [`Command::Protocol`] above what it offers.
//!
//! A message from a member that offers less than the cluster speaks is
//! refused (`409`, kind `protocol`), so an answer the receiver cannot trust
//! to read right is never counted: such a member is missing, never empty.
//!
//! [`Command::Protocol`]: crate::types::Command::Protocol

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::fmt;
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::Mutex;

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue};
use tokio::time::Instant;

use crate::ids::NodeId;

/// A protocol version.
pub type Protocol = u16;

/// The highest version this build speaks.
///
/// - 0: the builds before versions (no header).
/// - 1: the header itself and [`crate::types::Command::Protocol`].
/// - 2: data revisions ([`DATA_REVS`]).
/// - 3: shared locks and semaphores ([`LOCK_KINDS`]).
/// - 4: sets of names granted together ([`LOCK_SETS`]).
/// - 5: lock-delays ([`LOCK_DELAYS`]).
/// - 6: sessions ([`SESSIONS`]).
/// - 7: copies renewed by session ([`SESSION_COPIES`]), a session taken
///   back from its node's records, a set's release in one call
///   ([`SET_RELEASES`]).
/// - 8: lock-delays on locks of sessions ([`SESSION_DELAYS`]).
pub const SPEAKS: Protocol = 8;

/// The version from which a lock's data may change after its grant (a
/// renewal with data: proclaim): locks crossing between members carry
/// their data's revision, and a rebuilding speaker asks reports for it, so
/// the newest data wins whatever the leases. A cluster below it refuses
/// such renewals (`503 upgrading`) until every member speaks it.
pub const DATA_REVS: Protocol = 2;

/// The version from which a name may be held shared or as permits: locks
/// crossing between members carry their kind, and a rebuilding speaker asks
/// reports for it (a member of an earlier build would take a reader for a
/// writer, and a rebuild would keep one reader of many). A cluster below it
/// refuses such acquisitions (`503 upgrading`) until every member speaks it.
pub const LOCK_KINDS: Protocol = 3;

/// The version from which a set of names may be asked for at once: a
/// follower forwards the set to the speaker, which grants it whole and
/// answers every lock of it (a speaker of an earlier build would refuse a
/// request without a `name`). A cluster below it refuses sets
/// (`503 upgrading`) until every member speaks it.
pub const LOCK_SETS: Protocol = 4;

/// The version from which a grant may carry a lock-delay: locks crossing
/// between members carry it, and a rebuilding speaker asks reports for it
/// (a member of an earlier build would keep the record, the delay
/// included, as a lease, and answer its client a lease that long; a
/// renewal after a failover would drop the delay). A cluster below it
/// refuses such acquisitions (`503 upgrading`) until every member speaks
/// it.
pub const LOCK_DELAYS: Protocol = 5;

/// The version from which a lock may hang off a session: locks crossing
/// between members carry their session's id, and a rebuilding speaker asks
/// reports for it (a member of an earlier build would keep a session's
/// locks to their first lease, not their session's, and a rebuild reading
/// it would free them while their session runs). A cluster below it refuses
/// sessions (`503 upgrading`) until every member speaks it.
pub const SESSIONS: Protocol = 6;

/// The version from which the speaker renews a member's copies of a
/// session's locks with one message (the session's grant and the digest of
/// its locks' ids), the member extending its copies in memory when its
/// digest matches, rather than copying every lock again (a member of an
/// earlier build would take the message for nothing, 404, and the locks
/// would go unrenewed there). Below it, every lock is copied again.
pub const SESSION_COPIES: Protocol = 7;

/// The version from which a follower forwards a set's release (a release
/// with `locks`) to the speaker in one call, which releases every lock of
/// it and answers once (a speaker of an earlier build cannot read the
/// call). A cluster below it still releases sets: the follower forwards
/// one release per lock, all in one batch, so clients see no gate.
pub const SET_RELEASES: Protocol = 7;

/// The version from which a lock of a session may carry a lock-delay: its
/// records end at its session's lease end plus its delay (a member of an
/// earlier build would end them with the session's record, and a rebuild
/// reading it would free the name as the session lapsed, the delay
/// dropped). A cluster below it refuses such acquisitions
/// (`503 upgrading`) until every member speaks it.
pub const SESSION_DELAYS: Protocol = 8;

/// The lowest cluster version this build runs in.
pub const OLDEST: Protocol = 0;

/// The header carrying a member's [`Spoken`].
pub const PROTOCOL_HEADER: &str = "x-leasehold-protocol";

/// What one message says of its sender's versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spoken {
    /// The highest version the sender offers.
    pub speaks: Protocol,
    /// The version the sender's cluster speaks, as far as it applied the log.
    pub cluster: Protocol,
}

impl Spoken {
    /// What `headers` say: a message without the header (or with one this
    /// build cannot read) speaks version 0.
    pub fn read(headers: &HeaderMap) -> Spoken {
        let mut spoken = Spoken {
            speaks: 0,
            cluster: 0,
        };
        let Some(text) = headers.get(PROTOCOL_HEADER).and_then(|v| v.to_str().ok()) else {
            return spoken;
        };
        for pair in text.split(';') {
            let Some((key, value)) = pair.trim().split_once('=') else {
                continue;
            };
            let Ok(value) = value.trim().parse::<Protocol>() else {
                continue;
            };
            match key.trim() {
                "speaks" => spoken.speaks = value,
                "cluster" => spoken.cluster = value,
                _ => {}
            }
        }
        spoken
    }

    fn header(&self) -> HeaderValue {
        HeaderValue::from_str(&format!("speaks={}; cluster={}", self.speaks, self.cluster))
            .expect("digits are a valid header value")
    }
}

/// Why a message's versions cannot be taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mismatch {
    /// The sender's cluster speaks more than this node offers: this node
    /// cannot go on in it.
    ClusterAhead {
        /// The cluster's version, as the sender said.
        cluster: Protocol,
        /// What this node offers.
        speaks: Protocol,
    },
    /// The sender offers less than this node's cluster speaks: its
    /// message is not read.
    SenderBehind {
        /// What the sender offers.
        speaks: Protocol,
        /// The cluster's version here.
        cluster: Protocol,
    },
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Mismatch::ClusterAhead { cluster, speaks } => write!(
                f,
                "the cluster speaks protocol {cluster}, this node at most {speaks}: run a build \
                 that speaks {cluster} (and no lower --protocol)"
            ),
            Mismatch::SenderBehind { speaks, cluster } => write!(
                f,
                "the member speaks protocol {speaks} at most, the cluster speaks {cluster}: \
                 upgrade it"
            ),
        }
    }
}

/// This node's versions and the ones members stamped; one per node.
#[derive(Debug)]
pub struct VersionBook {
    speaks: AtomicU16,
    cluster: AtomicU16,
    /// What each member last offered, and when, heard by this process.
    heard: Mutex<BTreeMap<NodeId, (Protocol, Instant)>>,
}

impl VersionBook {
    /// A book for a node offering `speaks`, in a cluster that applied
    /// `cluster`.
    pub fn new(speaks: Protocol, cluster: Protocol) -> Self {
        VersionBook {
            speaks: AtomicU16::new(speaks),
            cluster: AtomicU16::new(cluster),
            heard: Mutex::default(),
        }
    }

    /// The highest version this node offers.
    pub fn speaks(&self) -> Protocol {
        self.speaks.load(Ordering::Relaxed)
    }

    /// Sets what this node offers (`--protocol`), before it starts.
    pub fn offer(&self, speaks: Protocol) {
        self.speaks.store(speaks, Ordering::Relaxed);
    }

    /// The version this node's cluster speaks, as applied here.
    pub fn cluster(&self) -> Protocol {
        self.cluster.load(Ordering::Relaxed)
    }

    /// The cluster now speaks `version` (an applied [`Command::Protocol`]);
    /// never lowers it.
    ///
    /// [`Command::Protocol`]: crate::types::Command::Protocol
    pub fn applied(&self, version: Protocol) {
        self.cluster.fetch_max(version, Ordering::Relaxed);
    }

    /// Writes this node's versions into `headers`.
    pub fn write(&self, headers: &mut HeaderMap) {
        let spoken = Spoken {
            speaks: self.speaks(),
            cluster: self.cluster(),
        };
        headers.insert(PROTOCOL_HEADER, spoken.header());
    }

    /// Takes the versions `headers` carry from member `from` (an admitted
    /// stamp): records what it offers, or says why its message cannot be
    /// taken.
    pub fn read(&self, from: NodeId, headers: &HeaderMap) -> Result<(), Mismatch> {
        let spoken = Spoken::read(headers);
        self.heard
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(from, (spoken.speaks, Instant::now()));
        let (speaks, cluster) = (self.speaks(), self.cluster());
        if spoken.cluster > speaks {
            return Err(Mismatch::ClusterAhead {
                cluster: spoken.cluster,
                speaks,
            });
        }
        if spoken.speaks < cluster {
            return Err(Mismatch::SenderBehind {
                speaks: spoken.speaks,
                cluster,
            });
        }
        Ok(())
    }

    /// What `member` offered in its last message heard by this process.
    pub fn heard(&self, member: NodeId) -> Option<Protocol> {
        self.heard
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&member)
            .map(|(speaks, _)| *speaks)
    }

    /// The version every one of `members` offers (this node counted by
    /// what it offers), once each was heard by this process within
    /// `lately`; `None` while one was not (a member down, or heard only
    /// in an earlier incarnation, blocks it).
    pub fn all_speak(
        &self,
        me: NodeId,
        members: &BTreeSet<NodeId>,
        lately: Duration,
    ) -> Option<Protocol> {
        let heard = self.heard.lock().unwrap_or_else(|e| e.into_inner());
        members
            .iter()
            .map(|m| {
                if *m == me {
                    Some(self.speaks())
                } else {
                    heard
                        .get(m)
                        .filter(|(_, at)| at.elapsed() <= lately)
                        .map(|(speaks, _)| *speaks)
                }
            })
            .try_fold(self.speaks(), |low, v| v.map(|v| low.min(v)))
    }

    /// The version the speaker should move its cluster to, if any: the
    /// version every member of `members` offered within `lately`, when
    /// above the cluster's.
    pub fn to_agree(
        &self,
        me: NodeId,
        members: &BTreeSet<NodeId>,
        lately: Duration,
    ) -> Option<Protocol> {
        self.all_speak(me, members, lately)
            .filter(|v| *v > self.cluster())
    }
}

impl Default for VersionBook {
    fn default() -> Self {
        VersionBook::new(SPEAKS, OLDEST)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(text: Option<&'static str>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(text) = text {
            headers.insert(PROTOCOL_HEADER, HeaderValue::from_static(text));
        }
        headers
    }

    #[test]
    fn a_message_without_the_header_speaks_version_zero_and_unknown_keys_are_skipped() {
        let none = Spoken {
            speaks: 0,
            cluster: 0,
        };
        assert_eq!(Spoken::read(&headers(None)), none);
        assert_eq!(Spoken::read(&headers(Some("garbage"))), none);
        assert_eq!(
            Spoken::read(&headers(Some("speaks=3; later=x; cluster=2; more=7"))),
            Spoken {
                speaks: 3,
                cluster: 2
            }
        );
        let book = VersionBook::new(1, 0);
        let mut written = HeaderMap::new();
        book.write(&mut written);
        assert_eq!(
            Spoken::read(&written),
            Spoken {
                speaks: 1,
                cluster: 0
            }
        );
    }

    const LATELY: Duration = Duration::from_secs(5);

    #[tokio::test(start_paused = true)]
    async fn a_member_heard_long_ago_counts_as_unheard() {
        let book = VersionBook::new(1, 0);
        let members: BTreeSet<NodeId> = [1, 2].into();
        book.read(2, &headers(Some("speaks=1; cluster=0"))).unwrap();
        assert_eq!(book.to_agree(1, &members, LATELY), Some(1));
        tokio::time::advance(LATELY + Duration::from_millis(1)).await;
        assert_eq!(book.to_agree(1, &members, LATELY), None, "2 went quiet");
        book.read(2, &headers(Some("speaks=1; cluster=0"))).unwrap();
        assert_eq!(book.to_agree(1, &members, LATELY), Some(1));
    }

    #[tokio::test]
    async fn the_cluster_moves_only_once_every_member_offered_the_version() {
        let book = VersionBook::new(1, 0);
        let members: BTreeSet<NodeId> = [1, 2, 3].into();
        assert_eq!(
            book.to_agree(1, &members, LATELY),
            None,
            "2 and 3 not heard"
        );
        book.read(2, &headers(Some("speaks=1; cluster=0"))).unwrap();
        assert_eq!(book.to_agree(1, &members, LATELY), None, "3 not heard");
        book.read(3, &headers(None)).unwrap();
        assert_eq!(
            book.to_agree(1, &members, LATELY),
            None,
            "3 is an old build"
        );
        book.read(3, &headers(Some("speaks=2; cluster=0"))).unwrap();
        assert_eq!(
            book.to_agree(1, &members, LATELY),
            Some(1),
            "the lowest offered"
        );
        book.applied(1);
        assert_eq!(book.to_agree(1, &members, LATELY), None, "already agreed");
        book.applied(0);
        assert_eq!(book.cluster(), 1, "never lowered");
    }

    #[test]
    fn an_old_sender_is_refused_and_a_cluster_ahead_stops_this_node() {
        let book = VersionBook::new(1, 1);
        assert_eq!(
            book.read(2, &headers(None)),
            Err(Mismatch::SenderBehind {
                speaks: 0,
                cluster: 1
            })
        );
        assert_eq!(
            book.read(2, &headers(Some("speaks=2; cluster=2"))),
            Err(Mismatch::ClusterAhead {
                cluster: 2,
                speaks: 1
            })
        );
        let held_back = VersionBook::new(0, 0);
        assert!(matches!(
            held_back.read(2, &headers(Some("speaks=1; cluster=1"))),
            Err(Mismatch::ClusterAhead { .. })
        ));
        assert_eq!(
            held_back.read(2, &headers(Some("speaks=1; cluster=0"))),
            Ok(())
        );
    }
}
