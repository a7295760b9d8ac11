//! The bodies of the peer routes under `/internal/`: reading a node's
//! `Held` and `Granted` at a rebuild, forwarding to the speaker, and telling
//! a node what it forgot or lost.
//!
//! Peer bodies are read with `serde_json` directly (the sender is a node, not
//! a user); the speaker checks a forwarded acquire's body again with
//! [`Body::validate`](crate::Body::validate), and parses the ids it serves.

use std::time::Duration;

use locktable::NodeId;
use serde::{Deserialize, Serialize};

use crate::error::ErrorBody;
use crate::peer::PeerLock;
use crate::request::AcquireBody;

/// The speaker's answer to a forwarded acquire.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Granted {
    /// The lock granted.
    pub lock: PeerLock,
    /// How long the speaker held the request (its wait), in milliseconds,
    /// rounded down.
    pub served_ms: u64,
    /// A set's other locks, granted with `lock` in the order asked (none
    /// for one name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub also: Vec<PeerLock>,
}

/// An acquire a follower hands to the speaker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardAcquire {
    /// The client's request.
    pub body: AcquireBody,
    /// The forwarding node, whose client will hold the lock.
    pub node: NodeId,
}

/// A renew a follower hands to the speaker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardRenew {
    /// The name locked.
    pub name: String,
    /// The grant's id.
    pub id: String,
    /// The new lease, in milliseconds; absent means the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
    /// The forwarding node, to which the lock's record moves.
    pub node: NodeId,
    /// The forwarding node's own record of the lock, if it has one, so a
    /// speaker that lost the lock (missed at a rebuild) can take it back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record: Option<PeerLock>,
    /// New data for the lock, if the renewal changes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
}

/// A release a follower hands to the speaker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardRelease {
    /// The name locked.
    pub name: String,
    /// The grant's id.
    pub id: String,
    /// The forwarding node.
    pub node: NodeId,
    /// A take-back of a grant the forwarding node's caller never heard of
    /// (it went away): released only if nobody renewed the lock since its
    /// grant (a retry of the same request, answered with it, renews it).
    /// A speaker before this field releases it either way.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unrenewed: bool,
}

/// A set's release a follower hands to the speaker in one call (protocol
/// 7, `leasehold_raft::version::SET_RELEASES`; a speaker of an earlier
/// build cannot read it): the speaker releases each lock and answers
/// [`ForwardAnswer::Released`] once.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardReleaseSet {
    /// The locks, as the client named them.
    pub locks: Vec<crate::LockRef>,
    /// The forwarding node.
    pub node: NodeId,
}

/// The speaker's answer to a [`ForwardReleaseSet`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleasedLocks {
    /// The locks released, in the order asked.
    pub locks: Vec<PeerLock>,
    /// The locks asked that were not held under their ids, in the order
    /// asked.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_held: Vec<crate::LockRef>,
}

/// A forwarded request the speaker answers at once: an acquire that does
/// not wait, a release, a renew. Followers send these in batches, one HTTP
/// request for however many of their clients asked meanwhile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ForwardCall {
    /// An acquire; its `wait_ms` is not honoured (a batch does not wait).
    Acquire(ForwardAcquire),
    /// A release.
    Release(ForwardRelease),
    /// A renew.
    Renew(ForwardRenew),
    /// A session's open (protocol 6).
    OpenSession(crate::ForwardOpenSession),
    /// A session's renewal (protocol 6).
    RenewSession(crate::ForwardRenewSession),
    /// A session's close (protocol 6).
    CloseSession(crate::ForwardCloseSession),
    /// A set's release, in one call (protocol 7).
    ReleaseSet(ForwardReleaseSet),
}

impl ForwardCall {
    /// The call as forwarded by `node`: the member the peer stamp names,
    /// whatever the body says (a member's body cannot speak for another).
    pub fn by(mut self, node: NodeId) -> Self {
        match &mut self {
            ForwardCall::Acquire(call) => call.node = node,
            ForwardCall::Release(call) => call.node = node,
            ForwardCall::Renew(call) => call.node = node,
            ForwardCall::OpenSession(call) => call.node = node,
            ForwardCall::RenewSession(call) => call.node = node,
            ForwardCall::CloseSession(call) => call.node = node,
            ForwardCall::ReleaseSet(call) => call.node = node,
        }
        self
    }
}

/// The speaker's answer to one call of a batch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ForwardAnswer {
    /// An acquire granted.
    Granted(Granted),
    /// The lock released or renewed (a session closed).
    Lock(PeerLock),
    /// A session renewed (protocol 6).
    Session(crate::SessionRenewed),
    /// A session's renewal that carried the node's record of a session
    /// the speaker's table lacks: send it again with the node's records of
    /// the session's locks (protocol 7).
    RecordsWanted,
    /// A set's locks released (protocol 7).
    Released(ReleasedLocks),
    /// The call refused, as the speaker would answer it over HTTP.
    Refused(ErrorBody),
}

/// Calls forwarded together; answered by [`ForwardAnswers`] in order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardBatch {
    /// The calls, in the order they came.
    pub calls: Vec<ForwardCall>,
}

impl ForwardBatch {
    /// Reads a batch from its JSON: a call this build cannot read (a kind
    /// a newer build added) is given as why, the others as read; an error
    /// only if the batch itself is not one.
    pub fn read(bytes: &[u8]) -> Result<Vec<Result<ForwardCall, String>>, serde_json::Error> {
        match serde_json::from_slice::<ForwardBatch>(bytes) {
            Ok(batch) => Ok(batch.calls.into_iter().map(Ok).collect()),
            Err(whole) => read_each(bytes, "calls").ok_or(whole),
        }
    }
}

/// The items of the list under `field` of the JSON object `bytes`, each
/// read on its own; `None` if there is no such list.
fn read_each<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    field: &str,
) -> Option<Vec<Result<T, String>>> {
    let mut object: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(bytes).ok()?;
    let serde_json::Value::Array(items) = object.remove(field)? else {
        return None;
    };
    Some(
        items
            .into_iter()
            .map(|item| serde_json::from_value(item).map_err(|e| e.to_string()))
            .collect(),
    )
}

impl ForwardAnswers {
    /// Reads answers from their JSON: an answer this build cannot read (a
    /// kind or error code a newer speaker added) is given as why, the
    /// others as read; an error only if the answers themselves are not.
    pub fn read(bytes: &[u8]) -> Result<Vec<Result<ForwardAnswer, String>>, serde_json::Error> {
        match serde_json::from_slice::<ForwardAnswers>(bytes) {
            Ok(answers) => Ok(answers.answers.into_iter().map(Ok).collect()),
            Err(whole) => read_each(bytes, "answers").ok_or(whole),
        }
    }
}

/// The answers to a [`ForwardBatch`], one per call, in its order.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardAnswers {
    /// The answers.
    pub answers: Vec<ForwardAnswer>,
}

/// A get that waits for the lock to change: it answers once the lock's
/// fence differs from `after_fence` (no lock counts as fence 0), or its
/// data's tag from `after_data` if given ([`data_tag`]), or when `wait`
/// runs out, with the lock as it then is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode,
)]
pub struct Watch {
    /// How long to wait for a change.
    pub wait: Duration,
    /// The fence the caller last saw.
    pub after_fence: u64,
    /// The tag of the data the caller last saw; `None`: data changes do
    /// not end the wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_data: Option<u64>,
}

impl Watch {
    /// Whether `lock` (`None`: no lock) differs from what the caller saw.
    pub fn sees_change(&self, fence: u64, data: Option<&str>) -> bool {
        fence != self.after_fence || self.after_data.is_some_and(|tag| tag != data_tag(data))
    }
}

/// The tag of a lock's data, for a watch to tell a change
/// (`after_data=`): FNV-1a (64 bits) of its UTF-8 bytes, 0 for no data.
/// Any client computes it in a few lines.
pub fn data_tag(data: Option<&str>) -> u64 {
    let Some(data) = data else {
        return 0;
    };
    data.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A get a follower hands to the speaker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardGet {
    /// The name locked.
    pub name: String,
    /// The change to wait for, if any.
    pub watch: Option<Watch>,
    /// Answer a [`ForwardGetAnswer`] (the lock with the requests waiting
    /// for it) rather than the bare lock; asked without a watch only. A
    /// speaker of an earlier build does not read it and answers the bare
    /// lock.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub queue: bool,
}

/// The speaker's answer to a [`ForwardGet`] that asked for the queue.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardGetAnswer {
    /// The lock, if held.
    pub lock: Option<PeerLock>,
    /// How many requests wait for it.
    #[serde(default)]
    pub waiters: u64,
    /// The first of them, in the order they will be served.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queue: Vec<crate::PeerQueued>,
    /// The name's other holders (held shared or as permits), oldest
    /// first; absent when one holds it, and from a speaker of an earlier
    /// build.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub others: Vec<PeerLock>,
}

/// The speaker's answer to a [`ForwardGet`] that asked for the queue, as
/// the follower reads it: with the queue, or, from a speaker of an earlier
/// build (which does not read `queue`), the bare lock.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(untagged)]
pub enum ForwardGetReply {
    /// The bare lock, if held.
    Bare(Option<PeerLock>),
    /// The lock with the requests waiting for it.
    Waiting(ForwardGetAnswer),
}

/// A listing a follower hands to the speaker. On the wire it is the pair
/// `[prefix, limit]`, as every node sends and reads it (with counts asked,
/// from protocol 2, `[prefix, limit, true]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "ListWire", into = "ListWire")]
pub struct ForwardList {
    /// Only names starting with this.
    pub prefix: String,
    /// At most this many locks.
    pub limit: usize,
    /// Answer a [`ForwardListAnswer`] (how many in all, and the waiters)
    /// rather than the bare list (protocol 2: `[prefix, limit, true]`).
    pub counts: bool,
}

/// A [`ForwardList`] on the wire: `[prefix, limit]`, or with counts asked
/// `[prefix, limit, true]`.
#[derive(Serialize, Deserialize)]
#[serde(untagged)]
enum ListWire {
    Counted(String, usize, bool),
    Bare(String, usize),
}

impl From<ListWire> for ForwardList {
    fn from(wire: ListWire) -> Self {
        let (prefix, limit, counts) = match wire {
            ListWire::Counted(prefix, limit, counts) => (prefix, limit, counts),
            ListWire::Bare(prefix, limit) => (prefix, limit, false),
        };
        ForwardList {
            prefix,
            limit,
            counts,
        }
    }
}

impl From<ForwardList> for ListWire {
    fn from(list: ForwardList) -> Self {
        match list.counts {
            true => ListWire::Counted(list.prefix, list.limit, true),
            false => ListWire::Bare(list.prefix, list.limit),
        }
    }
}

/// The speaker's answer to a [`ForwardList`] that asked for `counts`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardListAnswer {
    /// The locks, in name order.
    pub locks: Vec<PeerLock>,
    /// How many locks are held under the prefix in all.
    pub total: u64,
    /// How many requests wait for each of `locks`, in the same order.
    pub waiters: Vec<u64>,
    /// The requests waiting for each of `locks`, in the same order, each in
    /// the order it will be served (the first `locktable::QUEUE_SHOWN`).
    /// Absent from a speaker of an older build, and then read as none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<Vec<crate::PeerQueued>>,
    /// The other holders of each of `locks`' names (held shared or as
    /// permits), oldest first, in the same order. Absent from a speaker of
    /// an older build, and then read as none.
    #[serde(default, skip_serializing_if = "no_others")]
    pub also: Vec<Vec<PeerLock>>,
    /// The names under the prefix nobody holds that requests wait for, in
    /// name order. Absent when none, and from a speaker of an earlier
    /// build.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub awaited: Vec<crate::PeerAwaited>,
}

fn no_others(also: &[Vec<PeerLock>]) -> bool {
    also.iter().all(Vec::is_empty)
}

/// A rebuilding speaker's read of a member's report (`/internal/held`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportRequest {
    /// The term the reader leads, its blank entry committed. A member still
    /// speaking for an older term drops its table before it answers, so it
    /// grants nothing after the report it gives.
    pub term: u64,
    /// Whether the locks are to carry their data's revision (the reader's
    /// cluster speaks protocol 2); absent means not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub revs: bool,
    /// Whether the locks are to carry their kind (the reader's cluster
    /// speaks protocol 3); absent means not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub kinds: bool,
    /// Whether the locks are to carry their lock-delay (the reader's
    /// cluster speaks protocol 5); absent means not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub delays: bool,
    /// Whether the locks are to carry their session (the reader's cluster
    /// speaks protocol 6); absent means not.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sessions: bool,
}

/// Tells a node to forget a released lock (from its `Held` and `Granted`),
/// so no rebuild brings it back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forget {
    /// The name locked.
    pub name: String,
    /// The grant's id.
    pub id: String,
    /// The time the released lease had left when this was sent, in
    /// milliseconds, rounded up. The receiver keeps the id from rebuilds
    /// for this long (plus a second) from its receipt: no record of the
    /// lease outlives that. Absent (an older sender): the longest lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}

/// A batch of releases to forget: the speaker passes releases on in
/// batches, one request per member for however many came in meanwhile.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Forgets {
    /// The releases.
    pub forgets: Vec<Forget>,
}

/// Backup records of grants and renewals, sent by the speaker of `term` to
/// a member that keeps them until their leases end, so that a grant is
/// known to `--copies` members before its client hears of it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Copies {
    /// The sending speaker's term: a member that has seen a newer term
    /// refuses the batch.
    pub term: u64,
    /// The locks, each as it left the speaker.
    pub locks: Vec<PeerLock>,
}

/// A leaving member's records (its clients' locks and the copies it
/// keeps), each as it left the member, for the speaker to copy again to
/// members that stay.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handover {
    /// The records.
    pub locks: Vec<PeerLock>,
    /// Whether this is the last part: only then has a departed member
    /// handed everything over (a sender from before this field never says
    /// so, and is read at rebuilds as before).
    #[serde(default)]
    pub last: bool,
}

/// The speaker's word that a departed member handed every record it had
/// over before it left: rebuilds need not read it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HandedOver {
    /// The member that left.
    pub member: NodeId,
}

/// Tells a node its clients lost these locks: a rebuild kept another
/// holder's.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lost {
    /// The locks lost.
    pub locks: Vec<PeerLock>,
}

/// A membership change, forwarded to the speaker that makes it
/// ([`crate::routes::MEMBERS`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemberChange {
    /// Add this member: a learner until it caught up, then a voter.
    Add(crate::AddMemberBody),
    /// Remove the member with this id.
    Remove {
        /// The member's id.
        id: u64,
    },
    /// Remove the member with this id if it runs on another data
    /// directory than `store` (a node on `store` rejoins under the id,
    /// `serve --rejoin`), and its old directory's process no longer
    /// answers; nothing if the id runs on `store` already (a retirement
    /// that arrives late must not undo the rejoin). Protocol 2.
    Retire {
        /// The member's id.
        id: u64,
        /// The new data directory's id (32 hex digits).
        store: String,
    },
}

/// The answer to a node that asks, on a new data directory, that its id's
/// old one be removed (`serve --rejoin`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RetireAnswer {
    /// The cluster was formed (its log has a configuration): the node joins
    /// it, unless a configuration names it on this directory.
    pub cluster: bool,
    /// The id was a member on another data directory, and is removed now:
    /// it joins again once the cluster's departed wait has passed.
    pub removed: bool,
}

/// The speaker's notice to a member it removed ([`crate::routes::REMOVED`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Removed {
    /// The member removed: a node at its address that is another answers
    /// `400`.
    pub id: u64,
    /// The term of the speaker that removed it.
    pub term: u64,
    /// The log index of the configuration that no longer names it: a node
    /// named by a later one (added again since, under the same id) answers
    /// `409 member_exists` and serves on. 0: not given (acted on).
    #[serde(default)]
    pub config: u64,
    /// The term of the leader that proposed that configuration (a log id is
    /// its term and index).
    #[serde(default)]
    pub config_term: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use locktable::LockId;

    /// A get that asks for the queue is read by a speaker of an earlier
    /// build as a plain get, and its answer, bare or with the queue, is
    /// read by the follower either way.
    #[test]
    fn a_get_asking_for_the_queue_reads_either_answer() {
        let asked = ForwardGet {
            name: "a".into(),
            watch: None,
            queue: true,
        };
        let json = serde_json::to_value(&asked).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"name": "a", "watch": null, "queue": true})
        );
        let plain = ForwardGet {
            queue: false,
            ..asked.clone()
        };
        assert_eq!(
            serde_json::to_value(&plain).unwrap(),
            serde_json::json!({"name": "a", "watch": null}),
            "a plain get is sent as before"
        );
        let lock = PeerLock {
            session: Default::default(),
            delay_ms: 0,
            kind: Default::default(),
            name: "a".into(),
            id: LockId::from_u128(7).to_string(),
            node: 2,
            holder: "h".into(),
            fence: 9,
            lease_ms: 1000,
            ttl_ms: 900,
            held_ms: 100,
            data: None,
            data_rev: 0,
        };
        let read =
            |json: serde_json::Value| -> ForwardGetReply { serde_json::from_value(json).unwrap() };
        assert_eq!(read(serde_json::json!(null)), ForwardGetReply::Bare(None));
        assert_eq!(
            read(serde_json::to_value(&lock).unwrap()),
            ForwardGetReply::Bare(Some(lock.clone()))
        );
        let answer = ForwardGetAnswer {
            lock: Some(lock),
            waiters: 1,
            queue: vec![crate::PeerQueued {
                with: Vec::new(),
                holder: "w".into(),
                node: 3,
                waited_ms: 5,
                left_ms: 10,
                lease_ms: 1000,
                kind: 0,
            }],
            others: Vec::new(),
        };
        assert_eq!(
            read(serde_json::to_value(&answer).unwrap()),
            ForwardGetReply::Waiting(answer)
        );
        assert_eq!(
            read(serde_json::json!({"lock": null, "waiters": 0})),
            ForwardGetReply::Waiting(ForwardGetAnswer::default())
        );
    }

    /// The tag a watch compares data by is FNV-1a of its bytes, 0 for none:
    /// what every client computes (the published test vectors).
    #[test]
    fn data_tags_are_fnv1a() {
        assert_eq!(data_tag(None), 0);
        assert_eq!(data_tag(Some("")), 0xcbf2_9ce4_8422_2325);
        assert_eq!(data_tag(Some("a")), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(data_tag(Some("foobar")), 0x8594_4171_f739_67e8);
        let watch = Watch {
            wait: Duration::from_secs(1),
            after_fence: 7,
            after_data: Some(data_tag(Some("a"))),
        };
        assert!(!watch.sees_change(7, Some("a")));
        assert!(watch.sees_change(7, Some("b")));
        assert!(watch.sees_change(8, Some("a")));
        let fence_only = Watch {
            after_data: None,
            ..watch
        };
        assert!(!fence_only.sees_change(7, Some("b")));
    }

    #[test]
    fn round_trips() {
        let id = LockId::from_u128(99).to_string();
        let fwd = ForwardAcquire {
            body: AcquireBody {
                name: Some("a".into()),
                lease_ms: Some(10),
                ..AcquireBody::default()
            },
            node: 2,
        };
        let json = serde_json::to_string(&fwd).unwrap();
        assert_eq!(json, r#"{"body":{"name":"a","lease_ms":10},"node":2}"#);
        assert_eq!(serde_json::from_str::<ForwardAcquire>(&json).unwrap(), fwd);
        assert!(crate::Body::validate(&fwd.body).is_ok());

        let renew = ForwardRenew {
            name: "a".into(),
            id: id.clone(),
            lease_ms: None,
            node: 3,
            record: None,
            data: None,
        };
        let json = serde_json::to_string(&renew).unwrap();
        assert_eq!(serde_json::from_str::<ForwardRenew>(&json).unwrap(), renew);
        // A renewal from a build before data changes reads as keeping it.
        assert!(!json.contains("data"), "{json}");

        let forget = Forget {
            name: "a".into(),
            id: id.clone(),
            ttl_ms: Some(1500),
        };
        let text = serde_json::to_string(&forget).unwrap();
        assert_eq!(text, format!(r#"{{"name":"a","id":"{id}","ttl_ms":1500}}"#));
        assert_eq!(serde_json::from_str::<Forget>(&text).unwrap(), forget);
        let old = format!(r#"{{"name":"a","id":"{id}"}}"#);
        assert_eq!(serde_json::from_str::<Forget>(&old).unwrap().ttl_ms, None);
        assert_eq!(
            serde_json::to_string(&Lost::default()).unwrap(),
            r#"{"locks":[]}"#
        );
    }

    #[test]
    fn a_listing_travels_as_a_pair() {
        let mut list = ForwardList {
            prefix: "jobs/".into(),
            limit: 10,
            counts: false,
        };
        let json = serde_json::to_string(&list).unwrap();
        assert_eq!(json, r#"["jobs/",10]"#);
        assert_eq!(serde_json::from_str::<ForwardList>(&json).unwrap(), list);
        list.counts = true;
        let json = serde_json::to_string(&list).unwrap();
        assert_eq!(json, r#"["jobs/",10,true]"#);
        assert_eq!(serde_json::from_str::<ForwardList>(&json).unwrap(), list);
    }

    #[test]
    fn batches_round_trip() {
        let batch = ForwardBatch {
            calls: vec![
                ForwardCall::Acquire(ForwardAcquire {
                    body: AcquireBody {
                        name: Some("a".into()),
                        ..AcquireBody::default()
                    },
                    node: 2,
                }),
                ForwardCall::Release(ForwardRelease {
                    name: "a".into(),
                    id: LockId::from_u128(7).to_string(),
                    node: 2,
                    unrenewed: true,
                }),
            ],
        };
        let json = serde_json::to_string(&batch).unwrap();
        assert!(json.starts_with(r#"{"calls":[{"acquire":{"body":{"name":"a"},"node":2}}"#));
        assert_eq!(serde_json::from_str::<ForwardBatch>(&json).unwrap(), batch);
        let answers = ForwardAnswers {
            answers: vec![ForwardAnswer::Refused(ErrorBody::new(
                crate::ErrorCode::NotHeld,
                "gone",
            ))],
        };
        let json = serde_json::to_string(&answers).unwrap();
        assert_eq!(
            serde_json::from_str::<ForwardAnswers>(&json).unwrap(),
            answers
        );
    }
}

#[cfg(test)]
mod version_tests {
    use super::*;

    #[test]
    fn a_call_or_answer_of_a_kind_a_newer_build_added_fails_alone() {
        let batch = br#"{"calls":[{"release":{"name":"a","id":"x","node":2}},{"lease_all":{}}]}"#;
        let calls = ForwardBatch::read(batch).unwrap();
        assert_eq!(calls.len(), 2);
        assert!(matches!(calls[0], Ok(ForwardCall::Release(_))), "{calls:?}");
        assert!(calls[1].is_err());
        let answers = br#"{"answers":[{"refused":{"error":"held","message":"m"}},{"refused":{"error":"newer","message":"m"}}]}"#;
        let answers = ForwardAnswers::read(answers).unwrap();
        assert!(matches!(answers[0], Ok(ForwardAnswer::Refused(_))));
        assert!(answers[1].is_err());
        assert!(ForwardBatch::read(b"[]").is_err(), "not a batch at all");
    }
}
