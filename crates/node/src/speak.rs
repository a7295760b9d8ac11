//! The speaker's and a member's operations as the driver runs them: each
//! asks the protocol under the node's lock, then carries out what it says
//! (answers to waiters, copies, releases passed on).

use std::time::Duration;

use leasehold_api::ErrorCode;
use leasehold_protocol::{Acquisition, Made, Named, Refusal, Renewal, SetAcquisition, Waited};
use locktable::{Acquired, AcquiredSet, Answer, Kind, Lock, LockId, NodeId, Request, WaiterId};
use tokio::sync::oneshot;

use crate::error::ApiError;
use crate::metrics::Ended;
use crate::node::Node;

/// A lock request as the node receives it, validated.
#[derive(Debug, Clone)]
pub struct AcquireRequest {
    /// The name.
    pub name: String,
    /// Who asks.
    pub holder: String,
    /// The lease asked for.
    pub lease: Option<Duration>,
    /// How long to wait.
    pub wait: Duration,
    /// Data to keep with the lock.
    pub data: Option<String>,
    /// The caller's name for this acquisition, the same on its retries.
    pub request_id: Option<String>,
    /// What the grant is to hold of the name.
    pub kind: Kind,
    /// The grant's lock-delay.
    pub delay: Duration,
    /// The session the grant is to hang off.
    pub session: Option<LockId>,
}

/// What the table first said to a set's acquire.
enum SetFirst {
    Granted(Vec<Lock>, Made),
    Waiting(oneshot::Receiver<Answer>, WaiterId, Made),
    Own(Vec<Lock>),
    Refused(Refusal),
}

/// What the table first said to an acquire.
enum First {
    Granted(Lock, Made),
    Waiting(oneshot::Receiver<Answer>, WaiterId, Made),
    Own(Lock),
    Refused(Refusal),
}

impl Node {
    /// A refusal as the API answers it.
    pub(crate) fn refused(&self, refusal: Refusal) -> ApiError {
        match refusal {
            Refusal::Held(lock) => {
                self.metrics.conflicts.inc();
                ApiError::held(self.view(&lock))
            }
            Refusal::NotRebuilt => {
                self.metrics.unavailable(refusal.kind());
                ApiError::not_rebuilt()
            }
            Refusal::NotHeld => ApiError::not_held(),
            Refusal::NoSession => ApiError::new(ErrorCode::NotHeld, refusal.to_string()),
            Refusal::InSession => ApiError::new(ErrorCode::InSession, refusal.to_string()),
            Refusal::KindMismatch(kind) => ApiError::new(
                ErrorCode::KindMismatch,
                format!(
                    "the name is held or awaited as {kind}: every holder and waiter of a name asks \
                     the same (a lock, shared or not, or one count of permits)"
                ),
            ),
            Refusal::Claimed | Refusal::Awaited(_) => {
                ApiError::new(ErrorCode::Held, refusal.to_string())
            }
            Refusal::BadSet | Refusal::BadDelay { .. } => {
                ApiError::new(ErrorCode::BadRequest, refusal.to_string())
            }
            other => {
                self.metrics.unavailable(other.kind());
                ApiError::new(ErrorCode::NotRebuilt, other.to_string())
            }
        }
    }

    /// Refuses what the cluster does not speak yet (`503 upgrading`):
    /// shared locks and permits wait for every member to speak protocol
    /// [`leasehold_raft::version::LOCK_KINDS`], a lock-delay for
    /// [`leasehold_raft::version::LOCK_DELAYS`], a lock of a session for
    /// [`leasehold_raft::version::SESSIONS`], and one with a lock-delay for
    /// [`leasehold_raft::version::SESSION_DELAYS`].
    pub(crate) fn request_spoken(&self, request: &AcquireRequest) -> Result<(), ApiError> {
        let (what, version) = if request.kind != Kind::Exclusive && !self.lock_kinds() {
            (
                "shared locks and permits",
                leasehold_raft::version::LOCK_KINDS,
            )
        } else if !request.delay.is_zero() && !self.lock_delays() {
            ("lock-delays", leasehold_raft::version::LOCK_DELAYS)
        } else if request.session.is_some() && !self.sessions() {
            ("locks of sessions", leasehold_raft::version::SESSIONS)
        } else if request.session.is_some() && !request.delay.is_zero() && !self.session_delays() {
            (
                "lock-delays on locks of sessions",
                leasehold_raft::version::SESSION_DELAYS,
            )
        } else {
            return Ok(());
        };
        Err(ApiError::new(
            ErrorCode::Upgrading,
            format!(
                "{what} are granted only once every member speaks protocol {version} \
                 (a member runs an older build, or the cluster has just started)"
            ),
        ))
    }

    /// Grants a lock as the speaker, for a client of `node`. A retry of an
    /// acquisition the caller named (`request_id`) that finds its own grant
    /// holding the name is answered with that grant, renewed
    /// (`Member::acquire_named`).
    pub(crate) async fn speak_acquire(
        &self,
        request: AcquireRequest,
        node: NodeId,
    ) -> Result<Lock, ApiError> {
        self.request_spoken(&request)?;
        let asked = tokio::time::Instant::now();
        let wall_ms = self.clock.wall_ms();
        let random = LockId::from_parts(wall_ms, leasehold_raft::entropy::random_u128());
        let named = request.request_id.as_deref().map(|request_id| Named {
            holder: &request.holder,
            request: request_id,
            wall_ms,
        });
        let (name, lease, wait) = (request.name.as_str(), request.lease, request.wait);
        let guard = self.guard();
        let first = {
            let mut state = self.state();
            let table_request = Request {
                session: request.session,
                delay: request.delay,
                kind: request.kind,
                name: request.name.clone(),
                id: random,
                node,
                holder: request.holder.clone(),
                lease,
                wait,
                data: request.data.clone(),
            };
            let acquired =
                state
                    .member
                    .acquire_named(table_request, named, &guard, self.clock.now());
            let first = match acquired {
                Ok(Acquisition::Table(Acquired::Granted(lock), made)) => First::Granted(lock, made),
                Ok(Acquisition::Table(Acquired::Waiting(waiter), made)) => {
                    let (tx, rx) = oneshot::channel();
                    state.waiters.insert(waiter, tx);
                    First::Waiting(rx, waiter, made)
                }
                Ok(Acquisition::Own(lock)) => First::Own(lock),
                Err(refusal) => First::Refused(refusal),
            };
            if matches!(first, First::Granted(..) | First::Waiting(..)) {
                self.changed(&state);
            }
            first
        };
        let (rx, waiter, made) = match first {
            First::Granted(lock, made) => return self.copied_grant(lock, node, made, asked).await,
            First::Waiting(rx, waiter, made) => (rx, waiter, made),
            // A lock of a session has its session's lease: answered as it is.
            First::Own(lock) if lock.session.is_some() => {
                return self
                    .own_session_locks(vec![lock], node)
                    .await
                    .map(|mut l| l.remove(0))
            }
            First::Own(lock) => {
                return self
                    .speak_renew(name, lock.id, lease, node, None, None)
                    .await
            }
            First::Refused(refusal) => return Err(self.refused(refusal)),
        };
        let answer = self.answer_to(waiter, name, rx, wait).await?;
        match leasehold_protocol::waited(answer.result, named) {
            Ok(Waited::Granted(lock)) => self.copied_grant(lock, node, made, asked).await,
            Ok(Waited::Own(lock)) if lock.session.is_some() => {
                self.state().member.claim(&lock);
                self.own_session_locks(vec![lock], node)
                    .await
                    .map(|mut l| l.remove(0))
            }
            Ok(Waited::Own(lock)) => {
                self.speak_renew(name, lock.id, lease, node, None, None)
                    .await
            }
            Err(refusal) => Err(self.waited_refused(refusal)),
        }
    }

    /// A waiting request's refusal as the API answers it: one its table
    /// turned away says why the speaker could not grant.
    fn waited_refused(&self, refusal: Refusal) -> ApiError {
        let refusal = match refusal {
            Refusal::NotRebuilt => {
                let (guard, now) = (self.guard(), self.clock.now());
                self.state().member.unable(&guard, now)
            }
            other => other,
        };
        self.refused(refusal)
    }

    /// `lock`, once it is on record with enough members; a grant that
    /// could not be, or whose caller went away meanwhile, is taken back
    /// (its client never hears of it). Its acquire arrived at `asked`.
    async fn copied_grant(
        &self,
        lock: Lock,
        node: NodeId,
        made: Made,
        asked: tokio::time::Instant,
    ) -> Result<Lock, ApiError> {
        let mut locks = self.copied_grants(vec![lock], node, made, asked).await?;
        Ok(locks.pop().expect("one lock"))
    }

    /// `locks`, granted together, once every one of them is on record with
    /// enough members (their copies travel in the same batches); if one
    /// could not be, or the caller went away meanwhile, all are taken back.
    async fn copied_grants(
        &self,
        locks: Vec<Lock>,
        node: NodeId,
        made: Made,
        asked: tokio::time::Instant,
    ) -> Result<Vec<Lock>, ApiError> {
        let take_back = TakeBackOnDrop { node: self, locks };
        let recorded = futures::future::join_all(
            take_back
                .locks
                .iter()
                .map(|lock| self.ensure_on_record(lock, node, made)),
        )
        .await;
        recorded
            .into_iter()
            .collect::<Result<Vec<()>, ApiError>>()?;
        let waited = asked.elapsed().as_secs_f64();
        for lock in &take_back.locks {
            self.metrics.grants.inc();
            self.metrics.prefixes.granted(&lock.name, waited);
        }
        Ok(take_back.handed())
    }

    /// Grants a set of names as the speaker, all or none, for a client of
    /// `node`: the locks are answered in the order asked, once every one of
    /// them is on record with enough members. A retry of a set the caller
    /// named (`request_id`) that finds its own grants holding every name is
    /// answered with them, renewed.
    pub(crate) async fn speak_acquire_set(
        &self,
        request: AcquireRequest,
        names: Vec<String>,
        node: NodeId,
    ) -> Result<Vec<Lock>, ApiError> {
        self.sets_spoken()?;
        self.request_spoken(&request)?;
        let asked = tokio::time::Instant::now();
        let wall_ms = self.clock.wall_ms();
        let named = request.request_id.as_deref().map(|request_id| Named {
            holder: &request.holder,
            request: request_id,
            wall_ms,
        });
        let (lease, wait) = (request.lease, request.wait);
        let guard = self.guard();
        let first = {
            let mut state = self.state();
            let requests = names
                .iter()
                .map(|name| Request {
                    session: request.session,
                    delay: request.delay,
                    kind: request.kind,
                    name: name.clone(),
                    id: LockId::from_parts(wall_ms, leasehold_raft::entropy::random_u128()),
                    node,
                    holder: request.holder.clone(),
                    lease,
                    wait,
                    data: request.data.clone(),
                })
                .collect();
            let acquired = state
                .member
                .acquire_set(requests, named, &guard, self.clock.now());
            let first = match acquired {
                Ok(SetAcquisition::Table(AcquiredSet::Granted(locks), made)) => {
                    SetFirst::Granted(locks, made)
                }
                Ok(SetAcquisition::Table(AcquiredSet::Waiting(waiter), made)) => {
                    let (tx, rx) = oneshot::channel();
                    state.waiters.insert(waiter, tx);
                    SetFirst::Waiting(rx, waiter, made)
                }
                Ok(SetAcquisition::Own(locks)) => SetFirst::Own(locks),
                Err(refusal) => SetFirst::Refused(refusal),
            };
            if matches!(first, SetFirst::Granted(..) | SetFirst::Waiting(..)) {
                self.changed(&state);
            }
            first
        };
        let (rx, waiter, made) = match first {
            SetFirst::Granted(locks, made) => {
                return self.copied_grants(locks, node, made, asked).await
            }
            SetFirst::Waiting(rx, waiter, made) => (rx, waiter, made),
            SetFirst::Own(locks) if locks.iter().any(|l| l.session.is_some()) => {
                return self.own_session_locks(locks, node).await
            }
            SetFirst::Own(locks) => {
                let mut renewed = Vec::with_capacity(locks.len());
                for lock in locks {
                    renewed.push(
                        self.speak_renew(&lock.name, lock.id, lease, node, None, None)
                            .await?,
                    );
                }
                return Ok(renewed);
            }
            SetFirst::Refused(refusal) => return Err(self.refused(refusal)),
        };
        let answer = self.answer_to(waiter, &names[0], rx, wait).await?;
        match answer.result {
            Ok(first) => {
                let locks = std::iter::once(first).chain(answer.also).collect();
                self.copied_grants(locks, node, made, asked).await
            }
            Err(e) => match leasehold_protocol::waited(Err(e), None) {
                Err(refusal) => Err(self.waited_refused(refusal)),
                Ok(_) => Err(self.waited_refused(Refusal::NotRebuilt)),
            },
        }
    }

    /// The table's answer to `waiter`, waiting (in `name`'s queue, and a
    /// set's other names') for at most `wait` and a margin. If the client
    /// goes away meanwhile, the request stops waiting, and a grant that
    /// came meanwhile is taken back (`CancelOnDrop`).
    async fn answer_to(
        &self,
        waiter: WaiterId,
        name: &str,
        rx: oneshot::Receiver<Answer>,
        wait: Duration,
    ) -> Result<Answer, ApiError> {
        let mut cancel = CancelOnDrop {
            node: self,
            name,
            waiter: Some(waiter),
            answer: Some(rx),
        };
        let answer = tokio::time::timeout(
            wait + Duration::from_secs(5),
            cancel.answer.as_mut().expect("just set"),
        )
        .await;
        let Ok(answer) = answer else {
            self.metrics.unavailable("no_answer");
            return Err(ApiError::new(
                ErrorCode::NotRebuilt,
                "the speaker's table did not answer the waiting request in time; retry",
            ));
        };
        cancel.waiter = None;
        cancel.answer = None;
        answer.map_err(|_| self.waited_refused(Refusal::NotRebuilt))
    }

    /// Refuses a set while the cluster does not speak sets yet: they wait
    /// for every member to speak protocol
    /// [`leasehold_raft::version::LOCK_SETS`] (`503 upgrading`).
    pub(crate) fn sets_spoken(&self) -> Result<(), ApiError> {
        if self.lock_sets() {
            return Ok(());
        }
        Err(ApiError::new(
            ErrorCode::Upgrading,
            format!(
                "sets of names are granted only once every member speaks protocol {} \
                 (a member runs an older build, or the cluster has just started)",
                leasehold_raft::version::LOCK_SETS
            ),
        ))
    }

    /// A retry's own grants in a session (claimed, so no take-back of the
    /// first try frees them), answered once on record with enough members:
    /// the first try's copies may have failed.
    async fn own_session_locks(
        &self,
        locks: Vec<Lock>,
        node: NodeId,
    ) -> Result<Vec<Lock>, ApiError> {
        let made = self.state().member.made();
        let recorded = futures::future::join_all(
            locks
                .iter()
                .map(|lock| self.ensure_on_record(lock, node, made)),
        )
        .await;
        recorded
            .into_iter()
            .collect::<Result<Vec<()>, ApiError>>()?;
        Ok(locks)
    }

    /// Releases a grant its client never heard of, and tells the members
    /// that may keep a record of it.
    pub(crate) fn take_back(&self, lock: &Lock) {
        let to = {
            let guard = self.guard();
            let mut state = self.state();
            let to = state.member.take_back(lock, &guard, self.clock.now());
            self.dispatch(&mut state);
            self.changed(&state);
            to
        };
        self.forgets
            .push(to, &lock.name, lock.id, lock.expires, self.clock.now());
    }

    /// Releases a lock as the speaker, and tells the members that may keep
    /// a record of it to forget it.
    pub(crate) fn speak_release(&self, name: &str, id: LockId) -> Result<Lock, ApiError> {
        self.speak_release_as(name, id, false)
    }

    /// Takes back, as the speaker, a grant a follower's caller never heard
    /// of, unless a client renewed it since (`Member::take_back_unrenewed`).
    pub(crate) fn speak_take_back(&self, name: &str, id: LockId) -> Result<Lock, ApiError> {
        self.speak_release_as(name, id, true)
    }

    fn speak_release_as(&self, name: &str, id: LockId, unrenewed: bool) -> Result<Lock, ApiError> {
        let guard = self.guard();
        let (lock, to) = {
            let mut state = self.state();
            let now = self.clock.now();
            let released = match unrenewed {
                true => state.member.take_back_unrenewed(name, id, &guard, now),
                false => state.member.release(name, id, &guard, now),
            };
            if released.is_ok() {
                self.dispatch(&mut state);
                self.changed(&state);
            }
            released
        }
        .map_err(|r| self.refused(r))?;
        // Passed on in batches, a lane per member (`pass_on_releases`).
        let now = self.clock.now();
        self.forgets.push(to, name, id, lock.expires, now);
        self.metrics.releases.inc();
        if !unrenewed {
            let held = lock.held_for(now).as_secs_f64();
            self.metrics.prefixes.ended(name, held, Ended::Released);
        }
        Ok(lock)
    }

    /// Renews a lock as the speaker (keeping `data` with it in place of
    /// its data, if given), and answers once the renewal is on record with
    /// enough members; a lock this table lacks is reclaimed from `record`,
    /// the renewing node's view of it.
    pub(crate) async fn speak_renew(
        &self,
        name: &str,
        id: LockId,
        lease: Option<Duration>,
        node: NodeId,
        record: Option<Lock>,
        data: Option<String>,
    ) -> Result<Lock, ApiError> {
        if data.is_some() && !self.data_revs() {
            return Err(ApiError::new(
                ErrorCode::Upgrading,
                format!(
                    "a lock's data can change only once every member speaks protocol {} \
                     (a member runs an older build, or the cluster has just started)",
                    leasehold_raft::version::DATA_REVS
                ),
            ));
        }
        let guard = self.guard();
        let (renewed, made) = {
            let mut state = self.state();
            let renewal = Renewal {
                name,
                id,
                lease,
                node,
                record,
                data,
            };
            let renewed = state.member.renew(renewal, &guard, self.clock.now());
            // A take-back may have served a name's queue.
            self.dispatch(&mut state);
            if renewed.is_ok() {
                self.changed(&state);
            }
            renewed
        }
        .map_err(|r| self.refused(r))?;
        self.ensure_on_record(&renewed, node, made).await?;
        self.metrics.renewals.inc();
        Ok(renewed)
    }

    /// The lock `name`, as the speaker has it.
    pub(crate) fn speak_get(&self, name: &str) -> Result<Option<Lock>, ApiError> {
        let guard = self.guard();
        let state = self.state();
        let found = state.member.get(name, &guard, self.clock.now());
        drop(state);
        found.map_err(|r| self.refused(r))
    }

    /// The lock `name`, as the speaker has it (if held), with the requests
    /// waiting for it.
    pub(crate) fn speak_get_waiting(
        &self,
        name: &str,
    ) -> Result<(Option<Lock>, locktable::Waiting), ApiError> {
        let guard = self.guard();
        let state = self.state();
        let found = state.member.get_waiting(name, &guard, self.clock.now());
        drop(state);
        found.map_err(|r| self.refused(r))
    }

    /// The locks under `prefix`, as the speaker has them.
    pub(crate) fn speak_list(
        &self,
        prefix: &str,
        limit: usize,
    ) -> Result<locktable::Listing, ApiError> {
        let guard = self.guard();
        let state = self.state();
        let found = state.member.list(prefix, limit, &guard, self.clock.now());
        drop(state);
        found.map_err(|r| self.refused(r))
    }

    /// A release heard of from the speaker, with the time the released
    /// lease had left when it was sent, if it said: the lock is gone everywhere.
    pub(crate) fn forget(&self, name: &str, id: LockId, left: Option<Duration>) {
        let guard = self.guard();
        let mut state = self.state();
        state
            .member
            .forget(name, id, left, &guard, self.clock.now());
        self.dispatch(&mut state);
        self.changed(&state);
    }

    /// Locks a rebuild found another grant held longer: their clients lost them.
    pub(crate) fn lost(&self, ids: impl IntoIterator<Item = LockId>) {
        let lost = self.state().member.lost(ids);
        for lock in lost {
            tracing::warn!(name = %lock.name, id = %lock.id, "lock lost to an older grant at a rebuild");
        }
    }

    /// This node's record of `id`: its client's, or a copy.
    pub(crate) fn held_record(&self, id: LockId) -> Option<Lock> {
        self.state().member.held_record(id)
    }

    /// Drops this node's record of `id`.
    pub(crate) fn drop_held(&self, id: LockId) {
        self.state().member.drop_held(id);
    }
}

/// Takes grants back unless they were handed to their client: one could
/// not be put on record with enough members, or whoever waited for them
/// went away meanwhile.
struct TakeBackOnDrop<'a> {
    node: &'a Node,
    locks: Vec<Lock>,
}

impl TakeBackOnDrop<'_> {
    /// The grants, handed to their client: none is taken back.
    fn handed(mut self) -> Vec<Lock> {
        std::mem::take(&mut self.locks)
    }
}

impl Drop for TakeBackOnDrop<'_> {
    fn drop(&mut self) {
        for lock in &self.locks {
            self.node.take_back(lock);
        }
    }
}

/// Cancels a waiting request whose client went away, and takes back a
/// grant that reached it too late to be handed on.
struct CancelOnDrop<'a> {
    node: &'a Node,
    name: &'a str,
    waiter: Option<WaiterId>,
    answer: Option<oneshot::Receiver<Answer>>,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(waiter) = self.waiter.take() {
            let guard = self.node.guard();
            let mut state = self.node.state();
            state
                .member
                .cancel(self.name, waiter, &guard, self.node.clock.now());
            state.waiters.remove(&waiter);
            // Readers behind a writer that left may now go.
            self.node.dispatch(&mut state);
            self.node.changed(&state);
        }
        if let Some(Ok(answer)) = self.answer.as_mut().map(|rx| rx.try_recv()) {
            for lock in answer.result.iter().chain(&answer.also) {
                self.node.take_back(lock);
            }
        }
    }
}
