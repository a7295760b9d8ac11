//! A set's release in one call (`POST /v1/locks/release` with `locks`):
//! the speaker releases each lock of it under one hold of the table and
//! answers once. A follower forwards the set whole (protocol
//! [`leasehold_raft::version::SET_RELEASES`]), or, in a cluster below it,
//! one release per lock, all queued at once so that they go in one batch:
//! either way the client sees the same answer.

use std::sync::Arc;

use leasehold_api::{
    validate_release_set, Body, ErrorCode, ForwardAnswer, ForwardCall, ForwardRelease,
    ForwardReleaseSet, LockRef, ReleaseBody, ReleasedLocks,
};
use leasehold_protocol::Refusal;
use locktable::{Lock, LockId, LockInTransit, MonoTime};

use crate::error::ApiError;
use crate::metrics::Ended;
use crate::node::Node;
use crate::service::{forwarded_lock, malformed, unexpected};

/// What a set's release did.
#[derive(Debug, Clone, Default)]
pub struct ReleasedSet {
    /// The locks released, in the order asked.
    pub locks: Vec<Lock>,
    /// The locks asked that were not held under their ids (released,
    /// expired or lost already), in the order asked.
    pub not_held: Vec<LockRef>,
}

/// The answer to a set's release none of whose locks was held: a repeat
/// of a release already done answers as a single release's repeat does.
fn none_held() -> ApiError {
    ApiError::new(
        ErrorCode::NotHeld,
        "none of the locks is held under its id (released, expired or lost already)",
    )
}

impl Node {
    /// Releases every lock of a set (`body.locks`) in one call: answers
    /// the locks released and those not held, or `404 not_held` if none
    /// was (as a single release answers its repeat).
    pub async fn release_set(self: &Arc<Self>, body: ReleaseBody) -> Result<ReleasedSet, ApiError> {
        body.validate()?;
        let Some(locks) = body.locks else {
            return Err(ApiError::new(
                ErrorCode::BadRequest,
                "a set's release names its `locks`",
            ));
        };
        let ids = validate_release_set(&locks)?;
        let released = if self.is_leader() {
            self.speak_release_set(&locks, &ids)?
        } else if self.set_releases() {
            self.forward_release_set(locks).await?
        } else {
            self.forward_releases_each(locks).await?
        };
        if released.locks.is_empty() {
            return Err(none_held());
        }
        Ok(released)
    }

    /// Releases, as the speaker, each of `locks` (held under `ids`, in the
    /// same order) under one hold of the table; the releases are passed on
    /// to the members as any release is. A refusal of the whole call (not
    /// the speaker, not rebuilt) is an error; a lock not held is listed.
    pub(crate) fn speak_release_set(
        &self,
        locks: &[LockRef],
        ids: &[LockId],
    ) -> Result<ReleasedSet, ApiError> {
        let guard = self.guard();
        let mut released = Vec::with_capacity(locks.len());
        let mut not_held = Vec::new();
        let mut refused = None;
        {
            let mut state = self.state();
            let now = self.clock.now();
            for (lock, &id) in locks.iter().zip(ids) {
                match state.member.release(&lock.name, id, &guard, now) {
                    Ok(done) => released.push(done),
                    Err(Refusal::NotHeld) => not_held.push(lock.clone()),
                    // The whole table refuses (it is the same for every
                    // lock under this hold): nothing is released.
                    Err(refusal) => {
                        refused = Some(refusal);
                        break;
                    }
                }
            }
            if !released.is_empty() {
                self.dispatch(&mut state);
                self.changed(&state);
            }
        }
        if let Some(refusal) = refused.filter(|_| released.is_empty()) {
            return Err(self.refused(refusal));
        }
        let now = self.clock.now();
        let locks = released
            .into_iter()
            .map(|(lock, to)| {
                // Passed on in batches, a lane per member (`pass_on_releases`).
                self.forgets
                    .push(to, &lock.name, lock.id, lock.expires, now);
                self.metrics.releases.inc();
                let held = lock.held_for(now).as_secs_f64();
                self.metrics
                    .prefixes
                    .ended(&lock.name, held, Ended::Released);
                lock
            })
            .collect();
        Ok(ReleasedSet { locks, not_held })
    }

    /// Serves a set's release a follower forwarded, as the speaker.
    pub(crate) fn serve_release_set(
        &self,
        forwarded: ForwardReleaseSet,
    ) -> Result<ForwardAnswer, ApiError> {
        let ids = validate_release_set(&forwarded.locks)?;
        let released = self.speak_release_set(&forwarded.locks, &ids)?;
        Ok(ForwardAnswer::Released(ReleasedLocks {
            locks: released.locks.iter().map(|l| self.transit(l)).collect(),
            not_held: released.not_held,
        }))
    }

    /// Forwards the set to the speaker in one call (the cluster speaks
    /// [`leasehold_raft::version::SET_RELEASES`]).
    async fn forward_release_set(&self, locks: Vec<LockRef>) -> Result<ReleasedSet, ApiError> {
        let call = ForwardReleaseSet {
            locks,
            node: self.id(),
        };
        let released = match self.forward_call(ForwardCall::ReleaseSet(call)).await? {
            ForwardAnswer::Released(released) => released,
            other => return Err(unexpected(other)),
        };
        let now = self.clock.now();
        let locks = released
            .locks
            .into_iter()
            .map(|p| LockInTransit::try_from(p).map(|l| l.arrive(now)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(malformed)?;
        self.released_here(&locks, now);
        Ok(ReleasedSet {
            locks,
            not_held: released.not_held,
        })
    }

    /// Forwards one release per lock, all queued at once (a cluster below
    /// [`leasehold_raft::version::SET_RELEASES`], whose speaker may not
    /// read a set's release). A release whose outcome is unknown (no
    /// answer) fails the call, once every answer is in: a retry of the set
    /// then finds the locks released meanwhile not held.
    async fn forward_releases_each(&self, locks: Vec<LockRef>) -> Result<ReleasedSet, ApiError> {
        let calls = locks.iter().map(|lock| {
            self.forward_call(ForwardCall::Release(ForwardRelease {
                name: lock.name.clone(),
                id: lock.id.clone(),
                node: self.id(),
                unrenewed: false,
            }))
        });
        let answers = futures::future::join_all(calls).await;
        let now = self.clock.now();
        let mut released = ReleasedSet::default();
        let mut failed = None;
        for (lock, answer) in locks.into_iter().zip(answers) {
            let arrived = answer.and_then(forwarded_lock).and_then(|p| {
                LockInTransit::try_from(p)
                    .map(|l| l.arrive(now))
                    .map_err(malformed)
            });
            match arrived {
                Ok(lock) => released.locks.push(lock),
                Err(e) if e.body.error == ErrorCode::NotHeld => released.not_held.push(lock),
                Err(e) => failed = failed.or(Some(e)),
            }
        }
        self.released_here(&released.locks, now);
        match failed {
            Some(e) => Err(e),
            None => Ok(released),
        }
    }

    /// Notes locks the speaker released for this node's client: their
    /// records go, and a renewal of one answered later is not kept.
    fn released_here(&self, locks: &[Lock], now: MonoTime) {
        if locks.is_empty() {
            return;
        }
        let guard = self.guard();
        let mut state = self.state();
        for lock in locks {
            state.member.released_through_speaker(lock, &guard, now);
        }
    }
}
