//! One message of every kind, every field set: each round-trips, and
//! their bytes pin the layout.

use std::time::Duration;

use super::{frames, round_trips};
use crate::wire::{kind, Answer, GetQuery, Message, PeerCall, PeerReply, Request, Token, View};
use crate::{
    AcquireBody, AddMemberBody, AwaitedView, ClusterAnswer, ErrorBody, ErrorCode, HistoryAnswer,
    HistoryEntry, ListQuery, LockAnswer, LockRef, LockView, LocksAnswer, Member, Mode, QueuedView,
    RebuildReport, ReleaseBody, RenewBody, SessionAnswer, SessionBody, SessionClosed,
    SessionOpenBody, SessionView, Watch,
};

/// A lock with one other holder, every field set, for the layout's pin.
fn full_view() -> LockView {
    LockView {
        others: vec![leaf()],
        ..leaf()
    }
}

/// A lock with every field set but `others`.
pub(super) fn leaf() -> LockView {
    LockView {
        name: "jobs/42".into(),
        id: "01J0000000000000000000000A".into(),
        node: 2,
        holder: "worker-7".into(),
        fence: 12_884_901_889,
        lease_ms: 30_000,
        ttl_ms: 29_987,
        acquired_at: "2026-11-29T20:00:00.000Z".into(),
        expires_at: "2026-11-29T20:00:30.000Z".into(),
        data: Some("d".into()),
        waiters: 1,
        queue: vec![QueuedView {
            holder: "w".into(),
            node: 3,
            since: "s".into(),
            waited_ms: 4,
            wait_left_ms: 5,
            lease_ms: 6,
            mode: Mode::Permit,
            permits: Some(3),
            with: vec!["b".into()],
        }],
        mode: Mode::Shared,
        permits: Some(2),
        others: Vec::new(),
        lock_delay_ms: 7,
        delay_left_ms: 8,
        session: Some("01J0000000000000000000000B".into()),
    }
}

/// One message of every kind, every field set.
/// Requests and answers, each with its id.
type Messages = (Vec<(u64, Request)>, Vec<(u64, Answer)>);

pub(super) fn every_kind() -> Messages {
    let s = |t: &str| Some(t.to_string());
    let requests = vec![
        Request::Acquire(AcquireBody {
            name: s("a"),
            names: Some(vec!["b".into()]),
            holder: s("h"),
            lease_ms: Some(1),
            wait_ms: Some(2),
            data: s("d"),
            request_id: s("r"),
            shared: Some(true),
            permits: Some(3),
            lock_delay_ms: Some(4),
            session: s("s"),
        }),
        Request::Release(ReleaseBody {
            name: s("a"),
            id: s("i"),
            locks: Some(vec![LockRef::new("b", "j")]),
        }),
        Request::Renew(RenewBody {
            name: "a".into(),
            id: "i".into(),
            lease_ms: Some(5),
            data: s("d"),
        }),
        Request::OpenSession(SessionOpenBody {
            holder: s("h"),
            ttl_ms: Some(6),
        }),
        Request::RenewSession(SessionBody {
            id: "i".into(),
            ttl_ms: Some(7),
            digest: s("g"),
        }),
        Request::CloseSession(SessionBody::default()),
        Request::Get(GetQuery {
            name: "a".into(),
            watch: Some(Watch {
                wait: Duration::from_millis(8),
                after_fence: 9,
                after_data: Some(10),
            }),
        }),
        Request::List(ListQuery {
            prefix: s("p"),
            limit: Some(11),
        }),
        Request::Cluster(View::Speaker),
        Request::History(View::Own),
        Request::AddMember(AddMemberBody {
            id: 12,
            addr: "h:1".into(),
            store: s("st"),
        }),
        Request::RemoveMember(13),
        Request::Token(Token("t".into())),
        Request::Ping,
        // Version 3.
        Request::Peer(PeerCall {
            path: "/internal/copies".into(),
            headers: vec![("content-type".into(), b"application/json".to_vec())],
            body: b"{}".to_vec(),
        }),
    ];
    let report = RebuildReport {
        term: 1,
        members_read: vec![1],
        members_missing: vec![2],
        members_restarted: vec![3],
        all_seen: true,
        locks: 4,
        conflicts: 5,
        held_back_ms: 6,
        took_ms: 7,
    };
    let session = SessionView {
        id: "i".into(),
        node: 1,
        holder: "h".into(),
        lease_ms: 2,
        ttl_ms: 3,
        locks: Some(4),
        expires_at: "e".into(),
    };
    let answers = vec![
        Answer::Lock(LockAnswer {
            lock: full_view(),
            served_ms: 1,
            locks: Some(vec![full_view()]),
            not_held: Some(vec![LockRef::new("n", "i")]),
        }),
        Answer::Locks(LocksAnswer {
            locks: vec![full_view()],
            total: Some(2),
            awaited: Vec::new(),
        }),
        Answer::Session(SessionAnswer {
            session: session.clone(),
            served_ms: 3,
            held: Some(vec!["i".into()]),
        }),
        Answer::SessionClosed(SessionClosed {
            session,
            released: 4,
        }),
        Answer::Cluster(ClusterAnswer {
            node: 1,
            leader: Some(2),
            term: 3,
            rebuilt: true,
            generation: 4,
            members: vec![Member {
                id: 1,
                addr: "a".into(),
                state: "leader".into(),
                role: "voter".into(),
                lag: Some(0),
                reachable: Some(true),
                last_contact_ms: Some(5),
                protocol: Some(7),
            }],
            changing: true,
            last_rebuild: Some(report.clone()),
            version: "0.1.0".into(),
            protocol: 7,
            protocol_offered: 7,
            view: "speaker".into(),
            through: Some(3),
            speaker_error: s("e"),
            at_ms: 6,
            grants: 7,
        }),
        Answer::History(HistoryAnswer {
            node: 1,
            rebuilds: vec![HistoryEntry {
                at: "t".into(),
                at_unix_ms: 2,
                report,
            }],
            view: "own".into(),
        }),
        Answer::Done,
        Answer::Error(ErrorBody {
            lock: Some(Box::new(full_view())),
            ..ErrorBody::new(ErrorCode::Held, "m")
        }),
        // Version 2.
        Answer::Locks(LocksAnswer {
            locks: vec![full_view()],
            total: Some(2),
            awaited: vec![AwaitedView {
                name: "jobs/43".into(),
                waiters: 1,
                queue: leaf().queue,
            }],
        }),
        // Version 3.
        Answer::Peer(PeerReply {
            status: 409,
            headers: vec![("x-a".into(), b"b".to_vec())],
            body: b"[]".to_vec(),
        }),
    ];
    (
        requests
            .into_iter()
            .enumerate()
            .map(|(i, r)| (i as u64, r))
            .collect(),
        answers
            .into_iter()
            .enumerate()
            .map(|(i, a)| (i as u64, a))
            .collect(),
    )
}

#[test]
fn every_kind_round_trips_and_the_kinds_are_listed_once() {
    let (requests, answers) = every_kind();
    let kinds: Vec<u8> = requests.iter().map(|(_, r)| r.kind()).collect();
    assert_eq!(kinds, kind::REQUESTS);
    let kinds: Vec<u8> = answers.iter().map(|(_, a)| a.kind()).collect();
    assert_eq!(kinds, kind::ANSWERS);
    assert!(kind::REQUESTS.iter().all(|k| !kind::ANSWERS.contains(k)));
    round_trips(requests);
    round_trips(answers);
}

/// FNV-1a, 64 bits.
fn digest(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The bytes of every kind, pinned: a change to any type a frame carries
/// (a field added, moved or retyped) changes them. Such a change must
/// raise [`crate::wire::SPEAKS`] and keep writing the older layout to a
/// connection that chose an older version; then pin the new version's
/// bytes beside the older ones, which stay as they are.
#[test]
fn the_layout_of_every_kind_is_pinned() {
    let (requests, answers) = every_kind();
    let (requests, requests_3): (Vec<_>, Vec<_>) = requests
        .into_iter()
        .partition(|(_, r)| r.kind() != kind::PEER);
    let requests = frames(&requests);
    let (answers, version_3): (Vec<_>, Vec<_>) = answers
        .into_iter()
        .partition(|(_, a)| a.kind() != kind::PEER_REPLY);
    let (version_1, version_2): (Vec<_>, Vec<_>) = answers
        .into_iter()
        .partition(|(_, a)| a.kind() != kind::LOCKS_AWAITED);
    let version_1 = frames(&version_1);
    let version_2 = frames(&version_2);
    let mut version_3_bytes = frames(&requests_3);
    version_3_bytes.extend(frames(&version_3));
    assert_eq!(
        (
            requests.len(),
            digest(&requests),
            version_1.len(),
            digest(&version_1)
        ),
        (
            278,
            15_612_385_339_032_976_602,
            1548,
            8_852_759_862_406_371_217
        ),
        "the layout of version 1 changed: raise wire::SPEAKS (see this test's comment)"
    );
    assert_eq!(
        (version_2.len(), digest(&version_2)),
        (367, 777_993_797_200_923_825),
        "the layout of version 2 changed: raise wire::SPEAKS (see this test's comment)"
    );
    assert_eq!(
        (version_3_bytes.len(), digest(&version_3_bytes)),
        (90, 4_112_600_036_053_914_496),
        "the layout of version 3 changed: raise wire::SPEAKS (see this test's comment)"
    );
}

#[test]
fn each_request_is_answered_by_its_kind_or_an_error() {
    let (requests, answers) = every_kind();
    let expect = [
        kind::LOCK,
        kind::LOCK,
        kind::LOCK,
        kind::SESSION,
        kind::SESSION,
        kind::SESSION_CLOSED,
        kind::LOCK,
        kind::LOCKS,
        kind::CLUSTER_ANSWER,
        kind::HISTORY_ANSWER,
        kind::CLUSTER_ANSWER,
        kind::CLUSTER_ANSWER,
        kind::DONE,
        kind::DONE,
        kind::PEER_REPLY,
    ];
    for ((_, request), answered) in requests.iter().zip(expect) {
        for (_, answer) in &answers {
            let k = answer.kind();
            // A listing is answered in either layout.
            let answered = match answered {
                kind::LOCKS => k == kind::LOCKS || k == kind::LOCKS_AWAITED,
                answered => k == answered,
            };
            assert_eq!(
                request.answered_by(answer),
                answered || k == kind::ERROR,
                "{request:?} by {k:#x}"
            );
        }
    }
}
