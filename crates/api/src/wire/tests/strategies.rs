//! proptest strategies for every request and answer.

use std::time::Duration;

use proptest::collection::vec;
use proptest::option;
use proptest::prelude::*;

use crate::wire::{Answer, GetQuery, PeerCall, PeerReply, Request, Token, View};
use crate::{
    AcquireBody, AddMemberBody, AwaitedView, ClusterAnswer, ErrorBody, ErrorCode, HistoryAnswer,
    HistoryEntry, ListQuery, LockAnswer, LockRef, LockView, LocksAnswer, Member, Mode, QueuedView,
    RebuildReport, ReleaseBody, RenewBody, SessionAnswer, SessionBody, SessionClosed,
    SessionOpenBody, SessionView, Watch,
};

fn text() -> impl Strategy<Value = String> {
    "\\PC{0,10}"
}

fn opt_text() -> impl Strategy<Value = Option<String>> {
    option::of(text())
}

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![
        Just(Mode::Exclusive),
        Just(Mode::Shared),
        Just(Mode::Permit)
    ]
}

prop_compose! {
    fn queued()(holder in text(), node: u64, since in text(), waited_ms: u64,
        wait_left_ms: u64, lease_ms: u64, mode in mode(), permits: Option<u32>,
        with in vec(text(), 0..3)) -> QueuedView {
        QueuedView { holder, node, since, waited_ms, wait_left_ms, lease_ms, mode, permits, with }
    }
}

prop_compose! {
    fn awaited()(name in text(), waiters: u64, queue in vec(queued(), 0..2)) -> AwaitedView {
        AwaitedView { name, waiters, queue }
    }
}

prop_compose! {
    fn plain_view()(name in text(), id in text(), node: u64, holder in text(), fence: u64,
        lease_ms: u64, ttl_ms: u64, acquired_at in text(), expires_at in text(),
        data in opt_text(), waiters: u64, queue in vec(queued(), 0..2), mode in mode(),
        permits: Option<u32>, lock_delay_ms: u64, delay_left_ms: u64,
        session in opt_text()) -> LockView {
        LockView { name, id, node, holder, fence, lease_ms, ttl_ms, acquired_at, expires_at,
            data, waiters, queue, mode, permits, others: Vec::new(), lock_delay_ms,
            delay_left_ms, session }
    }
}

fn view() -> impl Strategy<Value = LockView> {
    (plain_view(), vec(plain_view(), 0..3)).prop_map(|(mut view, others)| {
        view.others = others;
        view
    })
}

fn error_code() -> impl Strategy<Value = ErrorCode> {
    proptest::sample::select(ErrorCode::ALL.to_vec())
}

prop_compose! {
    fn error_body()(error in error_code(), message in text(),
        lock in option::of(view().prop_map(Box::new))) -> ErrorBody {
        ErrorBody { lock, ..ErrorBody::new(error, message) }
    }
}

prop_compose! {
    fn acquire()(name in opt_text(), names in option::of(vec(text(), 0..4)),
        holder in opt_text(), lease_ms: Option<u64>, wait_ms: Option<u64>,
        data in opt_text(), request_id in opt_text(), shared: Option<bool>,
        permits: Option<u64>, lock_delay_ms: Option<u64>,
        session in opt_text()) -> AcquireBody {
        AcquireBody { name, names, holder, lease_ms, wait_ms, data, request_id, shared,
            permits, lock_delay_ms, session }
    }
}

fn lock_ref() -> impl Strategy<Value = LockRef> {
    (text(), text()).prop_map(|(name, id)| LockRef { name, id })
}

prop_compose! {
    fn watch()(wait_ms: u64, after_fence: u64, after_data: Option<u64>) -> Watch {
        Watch { wait: Duration::from_millis(wait_ms), after_fence, after_data }
    }
}

fn view_query() -> impl Strategy<Value = View> {
    prop_oneof![Just(View::Own), Just(View::Speaker)]
}

pub(super) fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        acquire().prop_map(Request::Acquire),
        (opt_text(), opt_text(), option::of(vec(lock_ref(), 0..3)))
            .prop_map(|(name, id, locks)| Request::Release(ReleaseBody { name, id, locks })),
        (text(), text(), any::<Option<u64>>(), opt_text()).prop_map(
            |(name, id, lease_ms, data)| Request::Renew(RenewBody {
                name,
                id,
                lease_ms,
                data
            })
        ),
        (opt_text(), any::<Option<u64>>()).prop_map(|(holder, ttl_ms)| {
            Request::OpenSession(SessionOpenBody { holder, ttl_ms })
        }),
        session_body().prop_map(Request::RenewSession),
        session_body().prop_map(Request::CloseSession),
        (text(), option::of(watch()))
            .prop_map(|(name, watch)| Request::Get(GetQuery { name, watch })),
        (opt_text(), any::<Option<u64>>())
            .prop_map(|(prefix, limit)| Request::List(ListQuery { prefix, limit })),
        view_query().prop_map(Request::Cluster),
        view_query().prop_map(Request::History),
        (any::<u64>(), text(), opt_text()).prop_map(|(id, addr, store)| {
            Request::AddMember(AddMemberBody { id, addr, store })
        }),
        any::<u64>().prop_map(Request::RemoveMember),
        text().prop_map(|t| Request::Token(Token(t))),
        Just(Request::Ping),
        (text(), headers(), vec(any::<u8>(), 0..64)).prop_map(|(path, headers, body)| {
            Request::Peer(PeerCall {
                path,
                headers,
                body,
            })
        }),
    ]
}

fn headers() -> impl Strategy<Value = Vec<(String, Vec<u8>)>> {
    vec((text(), vec(any::<u8>(), 0..16)), 0..4)
}

prop_compose! {
    fn session_body()(id in text(), ttl_ms: Option<u64>, digest in opt_text()) -> SessionBody {
        SessionBody { id, ttl_ms, digest }
    }
}

prop_compose! {
    fn session_view()(id in text(), node: u64, holder in text(), lease_ms: u64, ttl_ms: u64,
        locks: Option<u64>, expires_at in text()) -> SessionView {
        SessionView { id, node, holder, lease_ms, ttl_ms, locks, expires_at }
    }
}

prop_compose! {
    fn member()(id: u64, addr in text(), state in text(), role in text(), lag: Option<u64>,
        reachable: Option<bool>, last_contact_ms: Option<u64>,
        protocol: Option<u16>) -> Member {
        Member { id, addr, state, role, lag, reachable, last_contact_ms, protocol }
    }
}

prop_compose! {
    fn report()(term: u64, members_read in vec(any::<u64>(), 0..3),
        members_missing in vec(any::<u64>(), 0..3),
        members_restarted in vec(any::<u64>(), 0..3), all_seen: bool, locks: u64,
        conflicts: u64, held_back_ms: u64, took_ms: u64) -> RebuildReport {
        RebuildReport { term, members_read, members_missing, members_restarted, all_seen,
            locks, conflicts, held_back_ms, took_ms }
    }
}

prop_compose! {
    fn cluster()(node: u64, leader: Option<u64>, term: u64, rebuilt: bool, generation: u64,
        members in vec(member(), 0..3), changing: bool, last_rebuild in option::of(report()),
        version in text(), protocol: u16, protocol_offered: u16, view in text(),
        through: Option<u64>, speaker_error in opt_text(), at_ms: u64,
        grants: u64) -> ClusterAnswer {
        ClusterAnswer { node, leader, term, rebuilt, generation, members, changing,
            last_rebuild, version, protocol, protocol_offered, view, through, speaker_error,
            at_ms, grants }
    }
}

pub(super) fn answer() -> impl Strategy<Value = Answer> {
    prop_oneof![
        (
            view(),
            any::<u64>(),
            option::of(vec(view(), 0..3)),
            option::of(vec(lock_ref(), 0..3))
        )
            .prop_map(
                |(lock, served_ms, locks, not_held)| Answer::Lock(LockAnswer {
                    lock,
                    served_ms,
                    locks,
                    not_held
                })
            ),
        (
            vec(view(), 0..4),
            any::<Option<u64>>(),
            vec(awaited(), 0..3)
        )
            .prop_map(|(locks, total, awaited)| Answer::Locks(LocksAnswer {
                locks,
                total,
                awaited
            })),
        (session_view(), any::<u64>(), option::of(vec(text(), 0..3))).prop_map(
            |(session, served_ms, held)| Answer::Session(SessionAnswer {
                session,
                served_ms,
                held
            })
        ),
        (session_view(), any::<u64>()).prop_map(|(session, released)| {
            Answer::SessionClosed(SessionClosed { session, released })
        }),
        cluster().prop_map(Answer::Cluster),
        (
            any::<u64>(),
            vec((text(), any::<u64>(), report()), 0..3),
            text()
        )
            .prop_map(|(node, rebuilds, view)| Answer::History(HistoryAnswer {
                node,
                rebuilds: rebuilds
                    .into_iter()
                    .map(|(at, at_unix_ms, report)| HistoryEntry {
                        at,
                        at_unix_ms,
                        report
                    })
                    .collect(),
                view
            })),
        Just(Answer::Done),
        (any::<u16>(), headers(), vec(any::<u8>(), 0..64)).prop_map(|(status, headers, body)| {
            Answer::Peer(PeerReply {
                status,
                headers,
                body,
            })
        }),
        error_body().prop_map(Answer::Error),
    ]
}
