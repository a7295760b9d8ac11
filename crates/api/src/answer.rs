//! Every success: a lock, a listing, the state of the cluster.

use locktable::NodeId;
use serde::{Deserialize, Serialize};

use crate::lock::LockView;

/// `200 {"lock": Lock}`: acquire, release, renew and get.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
pub struct LockAnswer {
    /// The lock.
    pub lock: LockView,
    /// How long the answering node held the request before answering (a
    /// wait, forwarding), in milliseconds, rounded down. A client counts the
    /// lease as ending `served_ms + ttl_ms` after it sent the request: the
    /// node received it no earlier than it was sent.
    #[serde(default)]
    pub served_ms: u64,
    /// Of a set's acquire (`names`): every lock of the set, in the order
    /// asked, `lock` first. Of a set's release (`locks`): the locks
    /// released, in the order asked, `lock` first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locks: Option<Vec<LockView>>,
    /// Of a set's release (`locks`): the locks asked that were not
    /// released, not being held under their ids (released, expired or lost
    /// already), in the order asked; absent when every one was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_held: Option<Vec<crate::LockRef>>,
}

/// `200 {"locks": [Lock...]}`: list. Its layout in a frame is the
/// wire module's (`Answer::Locks`): `awaited` travels only where the
/// connection's version carries it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LocksAnswer {
    /// The locks, in name order.
    pub locks: Vec<LockView>,
    /// How many locks are held under the prefix in all, beyond the limit
    /// too (absent for a token of `--acl`, and from a speaker of an older
    /// protocol).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    /// The names under the prefix nobody holds that requests wait for, in
    /// name order, at most `limit` (absent when none, and from a speaker
    /// of an earlier build).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub awaited: Vec<crate::AwaitedView>,
}

/// `GET /v1/cluster`: who speaks, and how the last rebuild went.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
pub struct ClusterAnswer {
    /// The answering node.
    pub node: NodeId,
    /// The node the answering one takes to speak (the Raft leader), if any.
    pub leader: Option<NodeId>,
    /// The answering node's current Raft term.
    pub term: u64,
    /// Whether the answering node speaks and has rebuilt its table.
    pub rebuilt: bool,
    /// The answering node's table generation.
    pub generation: u64,
    /// The members of the cluster: its latest configuration, both halves
    /// of a joint one.
    pub members: Vec<Member>,
    /// Whether a membership change is under way: the latest configuration
    /// is joint, or not yet committed.
    #[serde(default)]
    pub changing: bool,
    /// The answering node's latest rebuild; null before its first.
    pub last_rebuild: Option<RebuildReport>,
    /// The answering node's leasehold version.
    #[serde(default)]
    pub version: String,
    /// The protocol version the cluster agreed, as the answering node
    /// applied it (0 from a build before versions).
    #[serde(default)]
    pub protocol: u16,
    /// The highest protocol version the answering node offers.
    #[serde(default)]
    pub protocol_offered: u16,
    /// Whose view this is: `"speaker"` when the answering node speaks and
    /// has rebuilt (its members' reachability is what the speaker sees),
    /// `"own"` otherwise (a follower's, or a speaker still rebuilding).
    #[serde(default)]
    pub view: String,
    /// With `?view=speaker` through another node: that node, which asked
    /// the speaker for its view. Absent when answered directly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub through: Option<NodeId>,
    /// With `?view=speaker`, when the speaker's view could not be had: why
    /// (the answer is then the asked node's own view).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speaker_error: Option<String>,
    /// When the view was taken: Unix time in milliseconds, on the answering
    /// node's clock.
    #[serde(default)]
    pub at_ms: u64,
    /// How many locks the answering node has granted since its process
    /// started (as `leasehold_grants_total`): the speaker's view gives the
    /// cluster's grant rate between two reads.
    #[serde(default)]
    pub grants: u64,
}

/// A member of the cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
pub struct Member {
    /// Its Raft node id.
    pub id: NodeId,
    /// Its address, as in `--peers`.
    pub addr: String,
    /// Its state as the answering node sees it, e.g. `"leader"`,
    /// `"follower"`, `"candidate"`, `"learner"`, `"unreachable"`: a string,
    /// so new states need no new client.
    pub state: String,
    /// `"voter"`, or `"learner"` (a member that copies the log but does not
    /// vote, as a new one does until it has caught up).
    #[serde(default = "voter")]
    pub role: String,
    /// How many Raft log entries it is behind the speaker; only in the
    /// speaker's answer (`null` in others').
    #[serde(default)]
    pub lag: Option<u64>,
    /// Whether it answered the answering node's last Raft message to it
    /// (`null`: none sent yet; a follower sends members few messages).
    #[serde(default)]
    pub reachable: Option<bool>,
    /// How long ago it last answered one, in milliseconds (`null`: never).
    #[serde(default)]
    pub last_contact_ms: Option<u64>,
    /// The highest protocol version it offered in its last message to the
    /// answering node (`null`: none heard since that node started): during
    /// a rolling upgrade, the members still on an old build show here.
    #[serde(default)]
    pub protocol: Option<u16>,
}

fn voter() -> String {
    "voter".into()
}

/// `GET /v1/cluster/history`: the answering node's last rebuilds (at most
/// [`HISTORY_LEN`]), oldest first.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode,
)]
pub struct HistoryAnswer {
    /// The answering node.
    pub node: NodeId,
    /// Its rebuilds, each with when it ended.
    pub rebuilds: Vec<HistoryEntry>,
    /// Whose history this is: `"speaker"` when the answering node speaks
    /// and has rebuilt, `"own"` otherwise (as [`ClusterAnswer::view`]).
    #[serde(default)]
    pub view: String,
}

/// How many rebuilds a node keeps for `GET /v1/cluster/history`.
pub const HISTORY_LEN: usize = 100;

/// One rebuild in a node's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode)]
pub struct HistoryEntry {
    /// When it ended, on the answering node's wall clock (RFC 3339, UTC).
    pub at: String,
    /// The same, in milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    /// Its report.
    #[serde(flatten)]
    pub report: RebuildReport,
}

/// The failover report of a rebuild.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode,
)]
pub struct RebuildReport {
    /// The term the rebuild was for.
    pub term: u64,
    /// The members whose `Held` and `Granted` were read, whole.
    pub members_read: Vec<NodeId>,
    /// The members counted missing: they did not answer in time, or
    /// restarted too recently (read, but their memory of their clients'
    /// locks is incomplete: those are in `members_restarted` too).
    pub members_missing: Vec<NodeId>,
    /// The missing members that answered but restarted less than the
    /// longest lease ago.
    #[serde(default)]
    pub members_restarted: Vec<NodeId>,
    /// Whether fewer members were missing than `--copies`: every grant
    /// answered to a client was then read (each is on record with that
    /// many members), so nothing was excused (proceed) or held back
    /// (strict).
    #[serde(default)]
    pub all_seen: bool,
    /// Locks in the rebuilt table.
    pub locks: u64,
    /// Locks reported by two nodes, settled to one.
    pub conflicts: u64,
    /// How long new grants are held back after the rebuild (strict mode,
    /// members missing), in milliseconds; 0 when none are.
    #[serde(default)]
    pub held_back_ms: u64,
    /// How long the rebuild took, in milliseconds.
    pub took_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_shape_matches_the_spec() {
        let mut answer = ClusterAnswer {
            node: 1,
            leader: None,
            term: 0,
            rebuilt: false,
            generation: 0,
            members: vec![Member {
                id: 1,
                addr: "127.0.0.1:7701".into(),
                state: "follower".into(),
                role: "voter".into(),
                lag: None,
                reachable: None,
                last_contact_ms: None,
                protocol: Some(1),
            }],
            changing: false,
            last_rebuild: None,
            version: "0.1.0".into(),
            protocol: 1,
            protocol_offered: 1,
            view: "own".into(),
            through: None,
            speaker_error: None,
            at_ms: 1_795_982_400_000,
            grants: 7,
        };
        let json = serde_json::to_value(&answer).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"node": 1, "leader": null, "term": 0, "rebuilt": false,
                "generation": 0, "members": [{"id": 1, "addr": "127.0.0.1:7701",
                    "state": "follower", "role": "voter", "lag": null, "reachable": null,
                    "last_contact_ms": null, "protocol": 1}],
                "changing": false, "last_rebuild": null, "version": "0.1.0",
                "protocol": 1, "protocol_offered": 1, "view": "own",
                "at_ms": 1_795_982_400_000_u64, "grants": 7})
        );
        answer.leader = Some(2);
        answer.last_rebuild = Some(RebuildReport {
            term: 3,
            members_read: vec![1, 2],
            members_missing: vec![3],
            members_restarted: vec![],
            all_seen: false,
            locks: 10,
            conflicts: 1,
            held_back_ms: 4300,
            took_ms: 12,
        });
        let json = serde_json::to_value(&answer).unwrap();
        assert_eq!(
            json["last_rebuild"],
            serde_json::json!({"term": 3, "members_read": [1, 2], "members_missing": [3],
                "members_restarted": [], "all_seen": false, "locks": 10, "conflicts": 1, "held_back_ms": 4300, "took_ms": 12})
        );
        assert_eq!(
            serde_json::from_value::<ClusterAnswer>(json).unwrap(),
            answer
        );
    }

    #[test]
    fn lock_answers() {
        let locks = LocksAnswer::default();
        assert_eq!(serde_json::to_string(&locks).unwrap(), r#"{"locks":[]}"#);
    }
}
