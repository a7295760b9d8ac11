//! The public calls, whichever transport carried them: an HTTP route's
//! handler and a frame of the binary transport (docs/design.md, "The
//! binary transport: frames") both come here with a [`Request`] and the
//! [`Caller`], and send on the [`Answer`]. What a call may do, how long it
//! may wait, what a removed node refuses and what `--chaos` does to it are
//! decided here once, for both.

use std::time::Duration;

use leasehold_acl::Right;
use leasehold_api::wire::{Answer, GetQuery, Request, View};
use leasehold_api::{
    millis_floor, Body, ErrorCode, LockAnswer, MemberChange, SessionAnswer, Watch,
};
use locktable::Lock;
use tokio::time::Instant;

use super::access::Caller;
use super::Shared;
use crate::error::ApiError;
use crate::node::Node;

/// The route a call stands for: its label in the request metrics, and the
/// routes the removed node's and `--chaos`'s refusals name.
pub(super) fn route(request: &Request) -> &'static str {
    match request {
        Request::Acquire(_) => "/v1/locks/acquire",
        Request::Release(_) => "/v1/locks/release",
        Request::Renew(_) => "/v1/locks/renew",
        Request::OpenSession(_) => "/v1/sessions/open",
        Request::RenewSession(_) => "/v1/sessions/renew",
        Request::CloseSession(_) => "/v1/sessions/close",
        Request::Get(_) => "/v1/locks/{name}",
        Request::List(_) => "/v1/locks",
        Request::Cluster(_) => "/v1/cluster",
        Request::History(_) => "/v1/cluster/history",
        Request::AddMember(_) => "/v1/cluster/members",
        Request::RemoveMember(_) => "/v1/cluster/members/{id}",
        Request::Token(_) | Request::Ping | Request::Peer(_) => "",
    }
}

/// Whether the call asks to wait (an acquire with `wait_ms`, a watch): its
/// time goes to the waiting calls' histogram, not the fast calls'.
pub(super) fn waits(request: &Request) -> bool {
    match request {
        Request::Acquire(body) => !body.wait().is_zero(),
        Request::Get(query) => query.watch.is_some_and(|w| !w.wait.is_zero()),
        _ => false,
    }
}

/// Whether the call's answer may be large: a lookup without a watch and a
/// listing show every holder of a name and every request waiting for it
/// (tens of megabytes for a name shared by thousands); every other answer
/// is a few locks at most.
pub(super) fn may_answer_large(request: &Request) -> bool {
    matches!(
        request,
        Request::List(_) | Request::Get(GetQuery { watch: None, .. })
    )
}

/// Serves `request` for `caller`: the answer, or the error to send; none
/// if `--chaos` lost it (the call was served, and its answer is never
/// sent).
///
/// `request` may be the error of reading a call to `route` (HTTP's body,
/// path or query): what comes before reading a call comes before that
/// error too, as when each was a layer around the routes: the removed
/// node's refusal and `--chaos`'s faults, and an operator's route's check
/// of the caller.
pub(super) async fn serve(
    node: &Shared,
    caller: &Caller,
    route: &'static str,
    request: Result<Request, ApiError>,
) -> Option<Answer> {
    if let Ok(request) = &request {
        debug_assert_eq!(self::route(request), route);
    }
    if node.is_removed() && route.starts_with("/v1/locks") {
        return Some(refused(ApiError::new(
            ErrorCode::NoLeader,
            "this node was removed from the cluster: ask another member",
        )));
    }
    let chaos =
        node.config.chaos && (route.starts_with("/v1/locks") || route.starts_with("/v1/sessions"));
    if !chaos {
        return Some(answer_read(node, caller, route, request).await);
    }
    // The fault plan's faults of client calls (docs/harness.md: `chaos
    // refuse`, `lag`, `lose-answer`): refused unserved, answered late, or
    // served and never answered.
    let faults = node.peers.faults();
    let plan = faults.plan();
    if plan.refuse_clients {
        return Some(refused(ApiError::new(
            ErrorCode::NoLeader,
            "chaos: this node refuses client calls (`leasehold chaos refuse`)",
        )));
    }
    let answered = answer_read(node, caller, route, request).await;
    if plan.lose_next_answer && faults.take_lost_answer() {
        // Each transport loses it its own way: HTTP holds the request
        // until its caller gives up and closes the connection; a frame's
        // answer is not sent, and its call holds none of the connection's
        // places (its caller times the call out, and its other calls go
        // on).
        return None;
    }
    if plan.client_answer_lag_ms > 0 {
        tokio::time::sleep(Duration::from_millis(plan.client_answer_lag_ms)).await;
    }
    Some(answered)
}

/// The answer to a call read, or to the error reading it: for an
/// operator's route, the caller's check first (a caller without the
/// token hears `401`, not what is wrong with what it sent).
async fn answer_read(
    node: &Shared,
    caller: &Caller,
    route: &'static str,
    request: Result<Request, ApiError>,
) -> Answer {
    match request {
        Ok(request) => answer(node, caller, request).await,
        Err(e) => {
            let admin = matches!(route, "/v1/cluster/members" | "/v1/cluster/members/{id}");
            let first = admin.then(|| caller.check_admin().err()).flatten();
            refused(first.unwrap_or(e))
        }
    }
}

fn refused(error: ApiError) -> Answer {
    Answer::Error(*error.body)
}

async fn answer(node: &Shared, caller: &Caller, request: Request) -> Answer {
    let received = Instant::now();
    let answered = match request {
        Request::Acquire(body) => acquire(node, caller, body, received).await,
        Request::Release(body) => release(node, caller, body, received).await,
        Request::Renew(body) => match caller.check(Right::Lock, &body.name) {
            Err(e) => Err(e),
            Ok(()) => node.renew(body).await.map(|lock| lock_answer(node, &lock)),
        },
        Request::OpenSession(body) => node.open_session(body).await.map(|session| {
            Answer::Session(SessionAnswer {
                session: node.session_view(&session, None),
                served_ms: millis_floor(received.elapsed()),
                held: None,
            })
        }),
        Request::RenewSession(body) => node.renew_session(body).await.map(|renewed| {
            Answer::Session(SessionAnswer {
                session: node.session_view(&renewed.session, Some(renewed.locks)),
                served_ms: millis_floor(received.elapsed()),
                held: renewed
                    .held
                    .map(|ids| ids.iter().map(ToString::to_string).collect()),
            })
        }),
        Request::CloseSession(body) => node.close_session(body).await.map(|(session, released)| {
            Answer::SessionClosed(leasehold_api::SessionClosed {
                session: node.session_view(&session, Some(released)),
                released,
            })
        }),
        Request::Get(query) => get(node, caller, query).await,
        Request::List(query) => list(node, caller, query).await,
        Request::Cluster(view) => Ok(Answer::Cluster(match view {
            View::Speaker => node.speaker_cluster().await,
            View::Own => node.cluster(),
        })),
        Request::History(view) => Ok(Answer::History(match view {
            View::Speaker => node.speaker_history().await,
            View::Own => node.history(),
        })),
        Request::AddMember(mut body) => match caller.check_admin() {
            Err(e) => Err(e),
            Ok(()) => match body.validate() {
                Err(e) => Err(e.into()),
                Ok(()) => {
                    // A data directory's id comes from the node's own join,
                    // never from an operator's request.
                    body.store = None;
                    node.change_members(MemberChange::Add(body), false)
                        .await
                        .map(Answer::Cluster)
                }
            },
        },
        Request::RemoveMember(id) => match caller.check_admin() {
            Err(e) => Err(e),
            Ok(()) if id == 0 => Err(ApiError::bad_request("0 is not a member id (1 or more)")),
            Ok(()) => node
                .change_members(MemberChange::Remove { id }, false)
                .await
                .map(Answer::Cluster),
        },
        Request::Token(_) | Request::Ping => Ok(Answer::Done),
        // The connection serves members' calls itself (frames::peer_call).
        Request::Peer(_) => Err(ApiError::bad_request(
            "a member's call is served by its connection, not as a client's",
        )),
    };
    answered.unwrap_or_else(refused)
}

fn lock_answer(node: &Node, lock: &Lock) -> Answer {
    Answer::Lock(LockAnswer {
        locks: None,
        lock: node.view(lock),
        served_ms: 0,
        not_held: None,
    })
}

/// `lock` as `caller` may see it: its id only if the caller may lock the
/// name (the id is what renews and releases it).
fn seen_by(caller: &Caller, node: &Node, lock: &Lock) -> leasehold_api::LockView {
    let mut view = node.view(lock);
    if !caller.may(Right::Lock, &view.name) {
        view.id = String::new();
    }
    view
}

async fn acquire(
    node: &Shared,
    caller: &Caller,
    mut request: leasehold_api::AcquireBody,
    received: Instant,
) -> Result<Answer, ApiError> {
    // A longer wait is cut to the node's --max-wait: the caller asks again.
    let max_wait = u64::try_from(node.config.max_wait.as_millis()).unwrap_or(u64::MAX);
    request.wait_ms = request.wait_ms.map(|w| w.min(max_wait));
    for name in request.all_names() {
        caller.check(Right::Lock, &name)?;
    }
    let set = request.is_set();
    let locks = node.acquire_locks(request).await?;
    let views: Vec<leasehold_api::LockView> = locks.iter().map(|lock| node.view(lock)).collect();
    Ok(Answer::Lock(LockAnswer {
        lock: views[0].clone(),
        served_ms: millis_floor(received.elapsed()),
        locks: set.then_some(views),
        not_held: None,
    }))
}

async fn release(
    node: &Shared,
    caller: &Caller,
    request: leasehold_api::ReleaseBody,
    received: Instant,
) -> Result<Answer, ApiError> {
    request.validate()?;
    for lock in request.all_locks() {
        caller.check(Right::Lock, &lock.name)?;
    }
    if !request.is_set() {
        let lock = node.release(request).await?;
        return Ok(lock_answer(node, &lock));
    }
    let released = node.release_set(request).await?;
    let views: Vec<leasehold_api::LockView> =
        released.locks.iter().map(|lock| node.view(lock)).collect();
    Ok(Answer::Lock(LockAnswer {
        lock: views[0].clone(),
        served_ms: millis_floor(received.elapsed()),
        locks: Some(views),
        not_held: (!released.not_held.is_empty()).then_some(released.not_held),
    }))
}

async fn get(node: &Shared, caller: &Caller, query: GetQuery) -> Result<Answer, ApiError> {
    let GetQuery { name, watch } = query;
    caller.check(Right::Read, &name)?;
    let watch = watch.map(|w| Watch {
        wait: w.wait.min(node.config.max_wait),
        ..w
    });
    // Without a watch, with the requests waiting for it.
    let (lock, waiting) = match watch {
        None => {
            let (lock, waiting) = node.get_waiting(&name).await?;
            (lock, Some(waiting))
        }
        Some(_) => (node.get(&name, watch).await?, None),
    };
    let Some(lock) = lock else {
        return Err(match waiting {
            Some(mut waiting) if waiting.count > 0 => {
                for q in &mut waiting.first {
                    q.with.retain(|other| caller.may(Right::Read, other));
                }
                let awaited = crate::embedded::awaited_view(
                    name.clone(),
                    waiting.count,
                    &waiting.first,
                    node,
                );
                ApiError::free_awaited(&name, &waiting, awaited)
            }
            _ => ApiError::free(&name),
        });
    };
    let mut lock =
        crate::embedded::with_waiting(&lock, waiting, node, |l| seen_by(caller, node, l));
    queue_seen_by(caller, &mut lock);
    Ok(Answer::Lock(LockAnswer {
        locks: None,
        lock,
        served_ms: 0,
        not_held: None,
    }))
}

/// `view`'s queue as `caller` may see it: a waiting set's other names
/// (`with`) only those the caller may read, as a listing shows it only
/// those names.
fn queue_seen_by(caller: &Caller, view: &mut leasehold_api::LockView) {
    with_seen_by(caller, &mut view.queue);
}

/// Each waiting set's other names in `queue` as `caller` may see them.
fn with_seen_by(caller: &Caller, queue: &mut [leasehold_api::QueuedView]) {
    for q in queue {
        q.with.retain(|other| caller.may(Right::Read, other));
    }
}

/// A listing shows only the names the caller may read (a token's listing
/// may hold fewer than `limit` locks, the others filtered out).
async fn list(
    node: &Shared,
    caller: &Caller,
    query: leasehold_api::ListQuery,
) -> Result<Answer, ApiError> {
    query.validate()?;
    let mut listing = node.list(query.prefix(), query.limit()).await?;
    // A token that may not read every name is not told how many there are.
    let total = match caller {
        Caller::Open | Caller::Cluster => listing.total.map(|t| t as u64),
        Caller::Token(_) => None,
    };
    let awaited = crate::embedded::awaited_views(std::mem::take(&mut listing.awaited), node)
        .into_iter()
        .filter(|a| caller.may(Right::Read, &a.name))
        .map(|mut a| {
            with_seen_by(caller, &mut a.queue);
            a
        })
        .collect();
    let locks = crate::embedded::listed(listing, node, |l| seen_by(caller, node, l))
        .into_iter()
        .filter(|view| caller.may(Right::Read, &view.name))
        .map(|mut view| {
            queue_seen_by(caller, &mut view);
            view
        })
        .collect();
    Ok(Answer::Locks(leasehold_api::LocksAnswer {
        locks,
        total,
        awaited,
    }))
}
