//! What a client can ask of any node: served here when this node speaks,
//! forwarded to the speaker otherwise. The HTTP API and an embedded client
//! both call these, and the values of a request are checked here, once.

use std::sync::Arc;
use std::time::Duration;

use leasehold_api::{
    routes, AcquireBody, Body, ClusterAnswer, ErrorCode, ForwardAcquire, ForwardAnswer,
    ForwardCall, ForwardGet, ForwardGetReply, ForwardList, ForwardRelease, ForwardRenew, Granted,
    Member, PeerLock, ReleaseBody, RenewBody, Watch,
};
use leasehold_protocol::{Forwarded, Refusal};
use leasehold_raft::WatchReceiver;
use locktable::{Lock, LockId, LockInTransit, NodeId};
use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::time::Instant;

use crate::error::ApiError;
use crate::node::Node;
use crate::speak::AcquireRequest;

/// The longest a watching get waits for a change.
pub const MAX_WATCH: Duration = Duration::from_secs(60);

pub(crate) fn unanswered(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(
        ErrorCode::NotRebuilt,
        format!("the speaker did not answer: {e}"),
    )
}

/// The lock a released or renewed call answers with.
pub(crate) fn forwarded_lock(answer: ForwardAnswer) -> Result<PeerLock, ApiError> {
    match answer {
        ForwardAnswer::Lock(lock) => Ok(lock),
        other => Err(unexpected(other)),
    }
}

/// An answer of the wrong kind: the speaker refused, or spoke nonsense.
pub(crate) fn unexpected(answer: ForwardAnswer) -> ApiError {
    match answer {
        ForwardAnswer::Refused(e) => ApiError::from(e),
        other => ApiError::internal(format!("the speaker answered out of turn: {other:?}")),
    }
}

pub(crate) fn malformed(e: impl std::fmt::Display) -> ApiError {
    ApiError::internal(format!("the speaker sent a malformed lock: {e}"))
}

/// Locks the speaker answered to a call sent at `sent`, on this node's
/// clock.
fn arrived(locks: Vec<PeerLock>, sent: locktable::MonoTime) -> Result<Vec<Lock>, ApiError> {
    locks
        .into_iter()
        .map(|p| LockInTransit::try_from(p).map(|l| l.arrive(sent)))
        .collect::<Result<Vec<_>, _>>()
        .map_err(malformed)
}

/// Slack over a request's own wait for a forwarded call.
const FORWARD_SLACK: Duration = Duration::from_secs(5);

/// A forwarded watch that took longer than this is read again without a
/// wait, so that the lock's time left is not short by the wait.
const READ_AGAIN_AFTER: Duration = Duration::from_millis(50);

/// How soon a waiting call forwarded to a speaker that is not rebuilt
/// yet (or did not answer, or while none is known) is asked again.
const ASK_AGAIN_AFTER: Duration = Duration::from_millis(100);

/// The longest between two such askings (a strict hold answers
/// `not_rebuilt` for as long as it lasts).
const ASK_AGAIN_AT_MOST: Duration = Duration::from_secs(2);

/// How long a waiting call may still answer from the speaker it went to
/// once Raft names another leader.
const OLD_SPEAKER_GRACE: Duration = Duration::from_secs(1);

impl Node {
    /// A call about to be forwarded to the speaker: sent now, with the
    /// highest term that has read this node so far.
    pub(crate) fn forwarding(&self) -> Forwarded {
        Forwarded {
            sent: self.clock.now(),
            read_before: self.read_by_term(),
        }
    }

    /// Forwards `body` to the speaker's `path`, for requests this node
    /// cannot serve itself.
    pub(crate) async fn forward<B: Serialize, R: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        wait: Duration,
    ) -> Result<R, ApiError> {
        let bytes = self.forward_raw(path, body, wait).await?;
        serde_json::from_slice(&bytes).map_err(|e| unanswered(format!("unreadable answer: {e}")))
    }

    /// As [`Node::forward`], the speaker's answer left as its bytes.
    pub(crate) async fn forward_raw<B: Serialize>(
        &self,
        path: &str,
        body: &B,
        wait: Duration,
    ) -> Result<axum::body::Bytes, ApiError> {
        let (_, addr) = self.leader().ok_or_else(ApiError::no_leader)?;
        self.metrics.forwarded.inc();
        self.peers
            .call_raw(&addr, path, body, wait + FORWARD_SLACK)
            .await
            .map_err(unanswered)?
            .map_err(ApiError::from)
    }

    /// Forwards a call that may wait at the speaker (an acquire with a
    /// wait, a watch), made by `call` for the wait left, and asks the next
    /// speaker instead, with the wait then left, once Raft names another
    /// leader: a wait never outlives the speaker it waits at (one that
    /// hangs answers nothing until it resumes, and a new speaker is elected
    /// meanwhile). The call asked before still has [`OLD_SPEAKER_GRACE`] to
    /// answer: a speaker that runs turns its waiters away as it loses its
    /// place, and a grant it made is answered (and recorded, or taken back)
    /// rather than dropped. Only one that does not answer by then is
    /// dropped: a deposed speaker grants nothing once its successor was
    /// elected, and what it granted before is on record for the next
    /// speaker's rebuild. While the wait lasts and `wanted` says the
    /// caller still waits, a speaker not rebuilt yet (or not answering, or
    /// none known) is asked again, [`ASK_AGAIN_AFTER`] at first and up to
    /// [`ASK_AGAIN_AT_MOST`] apart. Answers the answer and when the call
    /// answered was sent.
    async fn forward_waiting<B: Serialize, R: DeserializeOwned>(
        &self,
        path: &str,
        wait: Duration,
        call: impl Fn(Duration) -> B,
        wanted: &(dyn Fn() -> bool + Sync),
    ) -> Result<(R, Forwarded), ApiError> {
        let until = Instant::now() + wait;
        let mut pause = ASK_AGAIN_AFTER;
        let again = |pause: Duration| wanted() && Instant::now() + pause < until;
        loop {
            let Some((leader, _)) = self.leader() else {
                if again(pause) {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(ASK_AGAIN_AT_MOST);
                    continue;
                }
                return Err(ApiError::no_leader());
            };
            let sent = self.forwarding();
            let left = until.saturating_duration_since(Instant::now());
            let body = call(left);
            let forward = self.forward(path, &body, left);
            tokio::pin!(forward);
            let answer = tokio::select! {
                biased;
                answer = &mut forward => Some(answer),
                next = self.leader_other_than(leader) => {
                    let late = tokio::time::timeout(OLD_SPEAKER_GRACE, &mut forward).await;
                    if late.is_err() {
                        tracing::info!(
                            was = leader,
                            next,
                            path,
                            "the speaker changed while a call waited there: asking the next one"
                        );
                    }
                    late.ok()
                }
            };
            match answer {
                Some(Err(e)) if e.body.error == ErrorCode::NotRebuilt && again(pause) => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(ASK_AGAIN_AT_MOST);
                }
                Some(answer) => return answer.map(|r| (r, sent)),
                None if wanted() => pause = ASK_AGAIN_AFTER,
                None => return Err(unanswered("the speaker changed, and the caller went away")),
            }
        }
    }

    /// Once Raft names a leader other than `leader` (this node, too), that
    /// leader; never, if Raft stops.
    async fn leader_other_than(&self, leader: NodeId) -> NodeId {
        // The server's metrics change only with the vote, the state, the
        // leader or the membership, not with every heartbeat.
        let mut metrics = self.raft.server_metrics();
        loop {
            if let Some(next) = metrics.borrow_watched().current_leader {
                if next != leader {
                    return next;
                }
            }
            if metrics.changed().await.is_err() {
                return std::future::pending().await;
            }
        }
    }

    /// Takes a lock for a client of this node.
    ///
    /// Through a follower, the lease is counted from the follower's send
    /// plus the time the speaker says it held the request (a wait): the
    /// speaker received it no earlier than it was sent. The forward runs
    /// to its end whether or not the caller waits for it: a grant the
    /// caller is no longer there to hear of, or that this node may not
    /// record, is taken back at once rather than left to block the name
    /// for its whole lease.
    pub async fn acquire(self: &Arc<Self>, body: AcquireBody) -> Result<Lock, ApiError> {
        let mut locks = self.acquire_locks(body).await?;
        Ok(locks.swap_remove(0))
    }

    /// Takes a lock, or a set of them (`names`) all at once, for a client
    /// of this node, as [`Node::acquire`] does: the locks in the order
    /// asked.
    pub async fn acquire_locks(self: &Arc<Self>, body: AcquireBody) -> Result<Vec<Lock>, ApiError> {
        body.validate()?;
        let request = AcquireRequest::from(&body);
        // Before forwarding too: a speaker of an older build would read a
        // reader's request as a writer's.
        self.request_spoken(&request)?;
        if body.is_set() {
            self.sets_spoken()?;
        }
        if self.is_leader() {
            return match body.names {
                Some(names) => self.speak_acquire_set(request, names, self.id()).await,
                None => Ok(vec![self.speak_acquire(request, self.id()).await?]),
            };
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let node = Arc::clone(self);
        self.tasks.spawn(async move {
            let wanted = || !tx.is_closed();
            let (outcome, mut ghosts) = node.forward_acquire(body, request.wait, &wanted).await;
            if let Err(Ok(locks)) = tx.send(outcome) {
                // The caller went away: its grants, if it got them, are ghosts.
                for lock in &locks {
                    node.drop_held(lock.id);
                }
                ghosts = locks;
            }
            for lock in ghosts {
                node.take_back_forwarded(lock).await;
            }
        });
        rx.await
            .unwrap_or_else(|_| Err(self.refused(Refusal::Stopping)))
    }

    /// Forwards an acquire to the speaker and records its grants: the
    /// outcome for the caller, and the grants the speaker made that this
    /// node did not record (to be taken back): of a set, every one of them
    /// if one could not be recorded.
    async fn forward_acquire(
        &self,
        body: AcquireBody,
        wait: Duration,
        wanted: &(dyn Fn() -> bool + Sync),
    ) -> (Result<Vec<Lock>, ApiError>, Vec<Lock>) {
        let node = self.id();
        let granted: Result<(Granted, Forwarded), ApiError> = if wait.is_zero() {
            let call = self.forwarding();
            let forwarded = ForwardAcquire { body, node };
            match self.forward_call(ForwardCall::Acquire(forwarded)).await {
                Ok(ForwardAnswer::Granted(granted)) => Ok((granted, call)),
                Ok(other) => Err(unexpected(other)),
                Err(e) => Err(e),
            }
        } else {
            self.forward_waiting(
                routes::FORWARD_ACQUIRE,
                wait,
                |left| ForwardAcquire {
                    body: AcquireBody {
                        wait_ms: Some(u64::try_from(left.as_millis()).unwrap_or(u64::MAX)),
                        ..body.clone()
                    },
                    node,
                },
                wanted,
            )
            .await
        };
        let (granted, call) = match granted {
            Ok(granted) => granted,
            Err(e) => return (Err(e), Vec::new()),
        };
        let served = Duration::from_millis(granted.served_ms);
        let in_transit: Result<Vec<LockInTransit>, _> = std::iter::once(granted.lock)
            .chain(granted.also)
            .map(LockInTransit::try_from)
            .collect();
        let in_transit = match in_transit {
            Ok(locks) => locks,
            Err(e) => return (Err(malformed(e)), Vec::new()),
        };
        let now = self.clock.now();
        let unrecorded: Vec<Lock> = in_transit.iter().map(|l| l.clone().arrive(now)).collect();
        let mut recorded = Vec::with_capacity(in_transit.len());
        let mut state = self.state();
        for lock in in_transit {
            match state
                .member
                .granted_through_speaker(call, lock, served, now)
            {
                Ok(lock) => recorded.push(lock),
                Err(refusal) => {
                    for lock in &recorded {
                        state.member.drop_held(lock.id);
                    }
                    drop(state);
                    return (Err(self.refused(refusal)), unrecorded);
                }
            }
        }
        drop(state);
        (Ok(recorded), Vec::new())
    }

    /// Releases, at the speaker, a grant whose client never heard of it
    /// (a ghost): the name is free again at once.
    async fn take_back_forwarded(&self, lock: Lock) {
        let release = ForwardRelease {
            name: lock.name.clone(),
            id: lock.id.to_string(),
            node: self.id(),
            unrenewed: true,
        };
        match self.forward_call(ForwardCall::Release(release)).await {
            Ok(ForwardAnswer::Lock(_)) => {
                tracing::info!(name = %lock.name, id = %lock.id, "took back a grant its client never heard of");
            }
            other => tracing::info!(
                name = %lock.name,
                id = %lock.id,
                answer = ?other.err().map(|e| e.body.error),
                "a grant its client never heard of could not be taken back; it ends with its lease"
            ),
        }
    }

    /// Releases a lock by name and id (a set's release, with `locks`, is
    /// [`Node::release_set`]'s).
    pub async fn release(self: &Arc<Self>, body: ReleaseBody) -> Result<Lock, ApiError> {
        body.validate()?;
        if body.is_set() {
            return Err(ApiError::new(
                ErrorCode::BadRequest,
                "a set's release answers every lock of it: Node::release_set",
            ));
        }
        let id: LockId = body.lock_id()?;
        if self.is_leader() {
            return self.speak_release(body.name(), id);
        }
        let forwarded = ForwardRelease {
            name: body.name().to_string(),
            id: body.id().to_string(),
            node: self.id(),
            unrenewed: false,
        };
        let released = forwarded_lock(self.forward_call(ForwardCall::Release(forwarded)).await?)?;
        let now = self.clock.now();
        let released = LockInTransit::try_from(released)
            .map_err(malformed)?
            .arrive(now);
        let guard = self.guard();
        self.state()
            .member
            .released_through_speaker(&released, &guard, now);
        Ok(released)
    }

    /// Renews a lock by name and id; this node keeps its record from now on.
    pub async fn renew(self: &Arc<Self>, body: RenewBody) -> Result<Lock, ApiError> {
        body.validate()?;
        let id: LockId = body.lock_id()?;
        let record = self.held_record(id);
        if self.is_leader() {
            return self
                .speak_renew(&body.name, id, body.lease(), self.id(), record, body.data)
                .await;
        }
        let call = self.forwarding();
        let forwarded = ForwardRenew {
            name: body.name.clone(),
            id: body.id.clone(),
            lease_ms: body.lease_ms,
            node: self.id(),
            record: record.map(|l| PeerLock::from(l.in_transit(call.sent))),
            data: body.data.clone(),
        };
        let renewed = self
            .forward_call(ForwardCall::Renew(forwarded))
            .await
            .and_then(forwarded_lock);
        match renewed {
            Ok(renewed) => {
                let lock = LockInTransit::try_from(renewed).map_err(malformed)?;
                let recorded =
                    self.state()
                        .member
                        .renewed_through_speaker(call, lock, self.clock.now());
                recorded.map_err(|r| self.refused(r))
            }
            Err(e) => {
                if e.body.error == ErrorCode::NotHeld {
                    self.state()
                        .member
                        .renewal_refused(id, &Refusal::NotHeld, self.clock.now());
                }
                Err(e)
            }
        }
    }

    /// The lock `name`, if held; with a watch, once it changes.
    ///
    /// Through a follower, the time left is the speaker's less the call's
    /// own time: "a little shorter, never longer" (docs/api.md).
    pub async fn get(
        self: &Arc<Self>,
        name: &str,
        watch: Option<Watch>,
    ) -> Result<Option<Lock>, ApiError> {
        leasehold_api::validate_name(name)?;
        if self.is_leader() {
            return self.speak_watch(name, watch).await;
        }
        let wait = watch.map(|w| w.wait.min(MAX_WATCH)).unwrap_or_default();
        let call = |left| ForwardGet {
            name: name.to_string(),
            watch: watch.map(|w| Watch { wait: left, ..w }),
            queue: false,
        };
        // Its caller awaits it: gone, it is dropped.
        let (mut found, mut call): (Option<PeerLock>, Forwarded) = self
            .forward_waiting(routes::FORWARD_GET, wait, call, &|| true)
            .await?;
        // A lock's time left is counted from when its call was sent, the
        // most it can have been since the speaker read it: for a watch
        // that waited, read it again, so that its time left is short by
        // one round trip only, not by the wait.
        if watch.is_some()
            && self.clock.now().saturating_duration_since(call.sent) > READ_AGAIN_AFTER
        {
            let again = |_| ForwardGet {
                name: name.to_string(),
                watch: None,
                queue: false,
            };
            (found, call) = self
                .forward_waiting(routes::FORWARD_GET, Duration::ZERO, again, &|| true)
                .await?;
        }
        found
            .map(|p| LockInTransit::try_from(p).map(|l| l.arrive(call.sent)))
            .transpose()
            .map_err(malformed)
    }

    /// The lock `name`, if held, with the requests waiting for it, which a
    /// name no one holds may have too (none shown through a speaker of an
    /// earlier build).
    pub async fn get_waiting(
        self: &Arc<Self>,
        name: &str,
    ) -> Result<(Option<Lock>, locktable::Waiting), ApiError> {
        leasehold_api::validate_name(name)?;
        if self.is_leader() {
            return self.speak_get_waiting(name);
        }
        let call = |_| ForwardGet {
            name: name.to_string(),
            watch: None,
            queue: true,
        };
        let (answer, call): (ForwardGetReply, Forwarded) = self
            .forward_waiting(routes::FORWARD_GET, Duration::ZERO, call, &|| true)
            .await?;
        let (lock, waiting) = match answer {
            ForwardGetReply::Bare(lock) => (lock, locktable::Waiting::default()),
            ForwardGetReply::Waiting(answer) => {
                let waiting = locktable::Waiting {
                    count: usize::try_from(answer.waiters).unwrap_or(usize::MAX),
                    first: answer.queue.iter().map(|q| q.arrive(call.sent)).collect(),
                    others: arrived(answer.others, call.sent)?,
                };
                (answer.lock, waiting)
            }
        };
        let lock = lock
            .map(|p| LockInTransit::try_from(p).map(|l| l.arrive(call.sent)))
            .transpose()
            .map_err(malformed)?;
        Ok((lock, waiting))
    }

    /// As the speaker: the lock `name`, waiting for a change if asked.
    pub(crate) async fn speak_watch(
        &self,
        name: &str,
        watch: Option<Watch>,
    ) -> Result<Option<Lock>, ApiError> {
        let Some(watch) = watch else {
            return self.speak_get(name);
        };
        let deadline = Instant::now() + watch.wait.min(MAX_WATCH);
        let mut changes = self.subscribe();
        loop {
            let lock = self.speak_get(name)?;
            let fence = lock.as_ref().map_or(0, |l| l.fence.0);
            if watch.sees_change(fence, lock.as_ref().and_then(|l| l.data.as_deref())) {
                return Ok(lock);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(lock);
            }
            let _ = tokio::time::timeout(left, changes.changed()).await;
        }
    }

    /// The locks whose names start with `prefix`, at most `limit`.
    pub async fn list(
        self: &Arc<Self>,
        prefix: &str,
        limit: usize,
    ) -> Result<locktable::Listing, ApiError> {
        if self.is_leader() {
            return self.speak_list(prefix, limit);
        }
        let sent = self.clock.now();
        // Counts are asked once every member reads the three-part request.
        let counts = self.data_revs();
        let list = ForwardList {
            prefix: prefix.to_string(),
            limit,
            counts,
        };
        let (answer, total) = if counts {
            let answer: leasehold_api::ForwardListAnswer = self
                .forward(routes::FORWARD_LIST, &list, Duration::ZERO)
                .await?;
            let total = answer.total as usize;
            (answer, Some(total))
        } else {
            let locks: Vec<PeerLock> = self
                .forward(routes::FORWARD_LIST, &list, Duration::ZERO)
                .await?;
            let answer = leasehold_api::ForwardListAnswer {
                total: 0,
                waiters: vec![0; locks.len()],
                queues: Vec::new(),
                also: Vec::new(),
                awaited: Vec::new(),
                locks,
            };
            (answer, None)
        };
        let locks = arrived(answer.locks, sent)?;
        let waiters = answer.waiters.iter().map(|w| *w as usize).collect();
        let queues = answer
            .queues
            .iter()
            .map(|q| q.iter().map(|q| q.arrive(sent)).collect())
            .collect();
        let also = answer
            .also
            .into_iter()
            .map(|others| arrived(others, sent))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(locktable::Listing {
            total: total.map(|t| t.max(locks.len())),
            waiters,
            queues,
            also,
            locks,
            awaited: answer.awaited.iter().map(|a| a.arrive(sent)).collect(),
        })
    }

    /// Who speaks, and this node's view of the cluster.
    pub fn cluster(&self) -> ClusterAnswer {
        let metrics = self.raft.metrics().borrow_watched().clone();
        let state = self.state();
        let membership = metrics.membership_config.membership();
        let voters: std::collections::BTreeSet<NodeId> = membership.voter_ids().collect();
        let mut nodes: Vec<(NodeId, String)> = membership
            .nodes()
            .map(|(id, node)| (*id, node.addr.clone()))
            .collect();
        if nodes.is_empty() {
            // Not initialized yet: the members it was started with.
            nodes = self.config.peers.clone().into_iter().collect();
        }
        let last = metrics.last_log_index;
        let lag = |id: NodeId| -> Option<u64> {
            if Some(id) == metrics.current_leader && id == self.id() {
                return Some(0);
            }
            let matched = metrics.replication.as_ref()?.get(&id)?;
            let matched = matched.as_ref().map(|log| log.index + 1).unwrap_or(0);
            Some(last.map_or(0, |l| l + 1).saturating_sub(matched))
        };
        let reach = |id: NodeId| {
            (id != self.id())
                .then(|| self.peers.reach().of(id))
                .flatten()
        };
        let versions = self.identity.versions();
        let members = nodes
            .into_iter()
            .map(|(id, addr)| {
                let voter = voters.is_empty() || voters.contains(&id);
                let seen = reach(id);
                let reachable = if id == self.id() {
                    Some(true)
                } else {
                    seen.map(|s| s.reachable)
                };
                Member {
                    id,
                    addr,
                    state: if reachable == Some(false) {
                        "unreachable"
                    } else if Some(id) == metrics.current_leader {
                        "leader"
                    } else if voter {
                        "follower"
                    } else {
                        "learner"
                    }
                    .into(),
                    role: if voter { "voter" } else { "learner" }.into(),
                    lag: lag(id),
                    reachable,
                    last_contact_ms: if id == self.id() {
                        Some(0)
                    } else {
                        seen.and_then(|s| s.last_contact)
                            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                    },
                    protocol: if id == self.id() {
                        Some(versions.speaks())
                    } else {
                        versions.heard(id)
                    },
                }
            })
            .collect();
        let changing = membership.get_joint_config().len() > 1
            || metrics.membership_config.log_id() != metrics.committed_membership_config.log_id();
        ClusterAnswer {
            node: self.id(),
            leader: metrics.current_leader,
            term: metrics.current_term,
            rebuilt: state.member.is_rebuilt(),
            generation: state.member.generation(),
            members,
            changing,
            last_rebuild: state.member.last_rebuild().cloned(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            protocol: versions.cluster(),
            protocol_offered: versions.speaks(),
            view: if self.is_leader() && state.member.is_rebuilt() {
                "speaker"
            } else {
                "own"
            }
            .into(),
            through: None,
            speaker_error: None,
            at_ms: self.clock.wall_ms(),
            grants: self.metrics.grants.get(),
        }
    }

    /// The speaker's view of the cluster (`?view=speaker`): this node's
    /// own if it speaks, else asked of the speaker, within
    /// 800 ms; this node's own, saying why, if the speaker
    /// cannot be asked or does not answer.
    pub async fn speaker_cluster(&self) -> ClusterAnswer {
        if self.is_leader() {
            let mut own = self.cluster();
            if own.view != "speaker" {
                own.speaker_error =
                    Some("this node leads but has not rebuilt its lock table yet".into());
            }
            return own;
        }
        let asked = match self.leader() {
            None => Err("no speaker is known".to_string()),
            Some((leader, addr)) => self
                .peers
                .call::<_, ClusterAnswer>(&addr, routes::CLUSTER, &(), SPEAKER_VIEW_WAIT)
                .await
                .map_err(|e| format!("node {leader} did not answer: {e}"))
                .and_then(|answer| {
                    answer.map_err(|e| format!("node {leader} refused: {}", e.message))
                }),
        };
        match asked {
            Ok(mut view) if view.view == "speaker" => {
                view.through = Some(self.id());
                view
            }
            Ok(view) => {
                let mut own = self.cluster();
                own.speaker_error = Some(format!(
                    "node {} does not speak yet (it is rebuilding, or another was elected)",
                    view.node
                ));
                own
            }
            Err(why) => {
                let mut own = self.cluster();
                own.speaker_error = Some(why);
                own
            }
        }
    }

    /// The speaker's failover history (`?view=speaker`): as
    /// [`Node::speaker_cluster`], this node's own if the speaker cannot be
    /// asked.
    pub async fn speaker_history(&self) -> leasehold_api::HistoryAnswer {
        if self.is_leader() {
            return self.history();
        }
        if let Some((_, addr)) = self.leader() {
            let asked = self
                .peers
                .call::<_, leasehold_api::HistoryAnswer>(
                    &addr,
                    routes::HISTORY,
                    &(),
                    SPEAKER_VIEW_WAIT,
                )
                .await;
            if let Ok(Ok(history)) = asked {
                if history.view == "speaker" {
                    return history;
                }
            }
        }
        self.history()
    }
}

/// How long a node waits for the speaker's view before it answers its
/// own: a status page asks every second.
const SPEAKER_VIEW_WAIT: Duration = Duration::from_millis(800);

impl From<&AcquireBody> for AcquireRequest {
    fn from(body: &AcquireBody) -> Self {
        AcquireRequest {
            name: body.name().to_string(),
            holder: body.holder().to_string(),
            lease: body.lease(),
            wait: body.wait(),
            data: body.data.clone(),
            request_id: body.request_id.clone(),
            kind: body.kind(),
            delay: body.delay(),
            session: body.session(),
        }
    }
}
