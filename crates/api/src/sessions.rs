//! Sessions as the API shows them, and their calls forwarded to the speaker.

use locktable::{Lock, MonoTime, NodeId};
use serde::{Deserialize, Serialize};

use crate::millis_floor;
use crate::peer::PeerLock;
use crate::time::format_rfc3339_ms;

/// A session as the API shows it:
///
/// ```json
/// {"id": "01J...", "node": 2, "holder": "worker-7", "lease_ms": 10000,
///  "ttl_ms": 9987, "locks": 3, "expires_at": "2026-11-29T20:00:10.000Z"}
/// ```
///
/// `ttl_ms` is the time left on the session's lease, and on every lock
/// hanging off it, as the answering node counts it (rounded down).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
pub struct SessionView {
    /// The session's id: what its locks name (`session` of an acquire), and
    /// what it is renewed and closed by.
    pub id: String,
    /// The node whose client holds it.
    pub node: NodeId,
    /// Who holds it; may be empty.
    #[serde(default)]
    pub holder: String,
    /// The lease last granted or renewed, in milliseconds.
    pub lease_ms: u64,
    /// Time left on the lease, in milliseconds, rounded down.
    pub ttl_ms: u64,
    /// How many locks hang off it, as the speaker counted them (absent when
    /// not counted: an open).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locks: Option<u64>,
    /// When the lease ends, wall clock, RFC 3339 UTC.
    pub expires_at: String,
}

impl SessionView {
    /// The session granted as `lock`, seen at `now` on the keeping node's
    /// clock, whose wall clock reads `wall_now_ms`.
    pub fn from_lock(lock: &Lock, locks: Option<u64>, now: MonoTime, wall_now_ms: u64) -> Self {
        let ttl_ms = millis_floor(lock.lease_left(now));
        SessionView {
            id: lock.id.to_string(),
            node: lock.node,
            holder: lock.holder.clone(),
            lease_ms: millis_floor(lock.lease),
            ttl_ms,
            locks,
            expires_at: format_rfc3339_ms(wall_now_ms.saturating_add(ttl_ms)),
        }
    }
}

/// `200 {"session": Session, "served_ms": N}`: open and renew; `held` when
/// a renewal's `digest` differed from the speaker's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
pub struct SessionAnswer {
    /// The session.
    pub session: SessionView,
    /// How long the answering node held the request, in milliseconds,
    /// rounded down (as [`crate::LockAnswer::served_ms`]).
    #[serde(default)]
    pub served_ms: u64,
    /// The ids of every lock hanging off the session, given when the
    /// renewal's `digest` differs from the speaker's (a lock of it was lost,
    /// or taken through another node): a lock the caller holds that is not
    /// here is no longer held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held: Option<Vec<String>>,
}

/// `200 {"session": Session, "released": N}`: close.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
pub struct SessionClosed {
    /// The session, as it was when closed.
    pub session: SessionView,
    /// How many locks hanging off it were released with it.
    pub released: u64,
}

/// A session's open a follower hands to the speaker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardOpenSession {
    /// Who holds it.
    #[serde(default)]
    pub holder: String,
    /// The lease asked for, in milliseconds; absent means the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// The forwarding node, whose client will hold it.
    pub node: NodeId,
}

/// A session's renewal a follower hands to the speaker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardRenewSession {
    /// The session's id.
    pub id: String,
    /// The new lease, in milliseconds; absent means the lease it had.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// The forwarding node, to which the records of the session and of
    /// every lock of it move.
    pub node: NodeId,
    /// The digest of the session's locks the forwarding node records (32
    /// hexadecimal digits); absent when it records none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_digest: Option<String>,
    /// The digest the client sent, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_digest: Option<String>,
    /// The forwarding node's record of the session, as it left (protocol
    /// 7): a speaker whose table lacks the session answers
    /// [`ForwardAnswer::RecordsWanted`](crate::ForwardAnswer::RecordsWanted)
    /// rather than "not held".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<PeerLock>,
    /// The forwarding node's records of the session's locks, sent when the
    /// speaker wanted them: with `record`, the session is taken back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records: Option<Vec<PeerLock>>,
}

/// A session's close a follower hands to the speaker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardCloseSession {
    /// The session's id.
    pub id: String,
    /// The forwarding node.
    pub node: NodeId,
}

/// The speaker's answer to a forwarded session renewal.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionRenewed {
    /// The session's grant, renewed.
    pub session: PeerLock,
    /// How many locks hang off it.
    pub locks: u64,
    /// Every lock of the session, renewed, when either digest differed
    /// from the speaker's: they replace the forwarding node's records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub records: Option<Vec<PeerLock>>,
}

/// The speaker's copy of a session's grant, renewed, for a member that
/// copies the session's locks: the member renews its copies of them to the
/// session's end if it keeps exactly the locks counted here (protocol 7).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCopy {
    /// The sending speaker's term: a member that has seen a newer term
    /// refuses the copy.
    pub term: u64,
    /// The session's grant, as it left the speaker.
    pub session: PeerLock,
    /// How many locks hang off the session in the speaker's table.
    pub locks: u64,
    /// The digest of their ids (32 hexadecimal digits).
    pub digest: String,
}

/// A member's answer to a [`SessionCopy`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionCopied {
    /// Whether it renewed its copies (it kept exactly the locks counted);
    /// if not, it kept nothing, and the speaker sends every lock as a copy.
    pub followed: bool,
}
