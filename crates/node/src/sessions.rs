//! Sessions: one lease that many locks hang off (docs/api.md, "Sessions").
//! Opened, renewed and closed through any node, as locks are; the speaker
//! serves them, and the renewing node keeps the records of the session and
//! of all its locks.

use std::sync::Arc;
use std::time::Duration;

use leasehold_api::PeerLock;
use leasehold_api::{
    format_digest, parse_digest, Body, ErrorCode, ForwardAnswer, ForwardCall, ForwardCloseSession,
    ForwardOpenSession, ForwardRenewSession, SessionBody, SessionOpenBody, SessionRenewed,
};
use leasehold_protocol::{Forwarded, Refusal, RenewedSession, SessionRenewal, SessionSent};
use locktable::{session_name, Kind, Lock, LockId, LockInTransit, NodeId};

use crate::error::ApiError;
use crate::node::Node;
use crate::service::{malformed, unexpected};
use crate::speak::AcquireRequest;

/// A session renewed, as this node answers its client.
#[derive(Debug, Clone)]
pub struct Renewed {
    /// The session's grant, on this node's clock.
    pub session: Lock,
    /// How many locks hang off it, as the speaker counted them.
    pub locks: u64,
    /// The ids of every lock of it, when the client's digest differed from
    /// the speaker's.
    pub held: Option<Vec<LockId>>,
}

impl Node {
    /// Refuses sessions until every member speaks protocol
    /// [`leasehold_raft::version::SESSIONS`] (`503 upgrading`).
    pub(crate) fn sessions_spoken(&self) -> Result<(), ApiError> {
        if self.sessions() {
            return Ok(());
        }
        Err(ApiError::new(
            ErrorCode::Upgrading,
            format!(
                "sessions are served only once every member speaks protocol {} (a member runs \
                 an older build, or the cluster has just started)",
                leasehold_raft::version::SESSIONS
            ),
        ))
    }

    /// Opens a session for a client of this node.
    pub async fn open_session(self: &Arc<Self>, body: SessionOpenBody) -> Result<Lock, ApiError> {
        body.validate()?;
        self.sessions_spoken()?;
        if self.is_leader() {
            return self
                .speak_open_session(body.holder(), body.lease(), self.id())
                .await;
        }
        let call = self.forwarding();
        let forwarded = ForwardOpenSession {
            holder: body.holder().to_owned(),
            ttl_ms: body.ttl_ms,
            node: self.id(),
        };
        let granted = match self
            .forward_call(ForwardCall::OpenSession(forwarded))
            .await?
        {
            ForwardAnswer::Granted(granted) => granted,
            other => return Err(unexpected(other)),
        };
        let served = Duration::from_millis(granted.served_ms);
        let lock = LockInTransit::try_from(granted.lock).map_err(malformed)?;
        let now = self.clock.now();
        let recorded = self
            .state()
            .member
            .granted_through_speaker(call, lock.clone(), served, now);
        match recorded {
            Ok(session) => Ok(session),
            Err(refusal) => {
                // Never answered: its client cannot renew or close it, and
                // it holds no lock; it ends with its lease.
                tracing::info!(id = %lock.id, "a session opened meanwhile was not recorded: {refusal}");
                Err(self.refused(refusal))
            }
        }
    }

    /// Renews a session for a client of this node: the session and every
    /// lock of it, wherever they were taken; this node keeps all their
    /// records from now on.
    pub async fn renew_session(self: &Arc<Self>, body: SessionBody) -> Result<Renewed, ApiError> {
        body.validate()?;
        self.sessions_spoken()?;
        let id = body.session_id()?;
        let client_digest = body.digest()?;
        if self.is_leader() {
            let renewal = SessionRenewal {
                id,
                lease: body.lease(),
                node: self.id(),
                digest: self.state().member.session_digest(id),
                client_digest,
                session_copies: self.session_copies(),
                reclaimable: false,
            };
            let renewed = self
                .speak_renew_session(renewal, None)
                .await?
                .ok_or_else(|| ApiError::internal("records wanted from the speaker itself"))?;
            let held = client_digest
                .is_some_and(|d| renewed.records.as_ref().is_some_and(|r| digest_of(r) != d))
                .then(|| ids(renewed.records.as_deref().unwrap_or_default()));
            return Ok(Renewed {
                session: renewed.session,
                locks: renewed.locks as u64,
                held,
            });
        }
        let (call, sent, answer) = {
            let (call, sent, answer) = self
                .forward_session_renewal(&body, id, client_digest, false)
                .await;
            match answer {
                Ok(ForwardAnswer::RecordsWanted) => {
                    self.forward_session_renewal(&body, id, client_digest, true)
                        .await
                }
                other => (call, sent, other),
            }
        };
        let renewed = match answer {
            Ok(ForwardAnswer::Session(renewed)) => renewed,
            Ok(other) => return Err(unexpected(other)),
            Err(e) => {
                if e.body.error == ErrorCode::NotHeld {
                    self.session_refused(id);
                }
                return Err(e);
            }
        };
        let session = LockInTransit::try_from(renewed.session).map_err(malformed)?;
        let records = renewed
            .records
            .map(|r| {
                r.into_iter()
                    .map(LockInTransit::try_from)
                    .collect::<Result<Vec<_>, _>>()
            })
            .transpose()
            .map_err(malformed)?;
        let held = records
            .as_ref()
            .map(|r| r.iter().map(|l| l.id).collect::<Vec<_>>())
            .filter(|ids| {
                client_digest.is_some_and(|d| d != locktable::session::digest(ids.iter().copied()))
            });
        let now = self.clock.now();
        let (session, lost) = self
            .state()
            .member
            .renewed_session_through_speaker(call, session, records, &sent, now)
            .map_err(|r| self.refused(r))?;
        for lock in lost {
            tracing::warn!(name = %lock.name, id = %lock.id, session = %id, "a lock of a session is no longer held");
        }
        Ok(Renewed {
            session,
            locks: renewed.locks,
            held,
        })
    }

    /// Forwards a client's session renewal to the speaker, with this
    /// node's record of the session (from protocol 7), and with its records
    /// of the session's locks when `with_records` (the speaker's table
    /// lacked the session and wants them to take it back). Answers the
    /// call, what the node recorded of the session's locks at the send,
    /// and the speaker's answer.
    async fn forward_session_renewal(
        self: &Arc<Self>,
        body: &SessionBody,
        id: LockId,
        client_digest: Option<u128>,
        with_records: bool,
    ) -> (Forwarded, SessionSent, Result<ForwardAnswer, ApiError>) {
        let call = self.forwarding();
        let (sent, record, records) = {
            let state = self.state();
            let member = &state.member;
            let record = self
                .session_copies()
                .then(|| member.held_record(id))
                .flatten();
            let records =
                (with_records && record.is_some()).then(|| member.held_session_records(id));
            (member.session_sent(id), record, records)
        };
        let peer = |lock: &Lock| PeerLock::from(lock.in_transit(call.sent));
        let forwarded = ForwardRenewSession {
            id: body.id.clone(),
            ttl_ms: body.ttl_ms,
            node: self.id(),
            node_digest: sent.digest.map(format_digest),
            client_digest: client_digest.map(format_digest),
            record: record.as_ref().map(peer),
            records: records.map(|r| r.iter().map(peer).collect()),
        };
        let answer = self
            .forward_call(ForwardCall::RenewSession(forwarded))
            .await;
        (call, sent, answer)
    }

    /// A session the speaker says is not held: its records, and its
    /// locks', go.
    fn session_refused(&self, id: LockId) {
        let now = self.clock.now();
        let mut state = self.state();
        let locks = state.member.held_session_locks(id);
        for lock in locks.into_iter().chain([id]) {
            state.member.renewal_refused(lock, &Refusal::NotHeld, now);
        }
    }

    /// Closes a session for a client of this node: it and every lock of it
    /// are released. Answers the session and how many locks went with it.
    pub async fn close_session(
        self: &Arc<Self>,
        body: SessionBody,
    ) -> Result<(Lock, u64), ApiError> {
        body.validate()?;
        self.sessions_spoken()?;
        let id = body.session_id()?;
        if self.is_leader() {
            let mut released = self.speak_close_session(id)?;
            let session = released.remove(0);
            return Ok((session, released.len() as u64));
        }
        let forwarded = ForwardCloseSession {
            id: body.id.clone(),
            node: self.id(),
        };
        let closed = match self
            .forward_call(ForwardCall::CloseSession(forwarded))
            .await?
        {
            ForwardAnswer::Session(closed) => closed,
            other => return Err(unexpected(other)),
        };
        let now = self.clock.now();
        let session = LockInTransit::try_from(closed.session)
            .map_err(malformed)?
            .arrive(now);
        self.state()
            .member
            .session_released_through_speaker(&session, &self.guard(), now);
        Ok((session, closed.locks))
    }

    /// Opens a session as the speaker, for a client of `node`: a grant
    /// under a name of its own that no client can ask for.
    pub(crate) async fn speak_open_session(
        &self,
        holder: &str,
        lease: Option<Duration>,
        node: NodeId,
    ) -> Result<Lock, ApiError> {
        self.sessions_spoken()?;
        let nonce =
            LockId::from_parts(self.clock.wall_ms(), leasehold_raft::entropy::random_u128());
        let request = AcquireRequest {
            name: session_name(nonce),
            holder: holder.to_owned(),
            lease,
            wait: Duration::ZERO,
            data: None,
            request_id: None,
            kind: Kind::Exclusive,
            delay: Duration::ZERO,
            session: None,
        };
        self.speak_acquire(request, node).await
    }

    /// Renews a session as the speaker, and answers once the session (and,
    /// where copies are needed, every lock of it: by the session's copy from
    /// protocol 7, one by one before) is on record with enough members.
    ///
    /// With the renewing node's records (`reclaim`: the session's grant and
    /// its locks), a session the table lacks is taken back from them first
    /// ([`leasehold_protocol::Member::reclaim_session`]). `None`: the table
    /// lacks the session and the renewing node's records are wanted.
    pub(crate) async fn speak_renew_session(
        &self,
        renewal: SessionRenewal,
        reclaim: Option<(Lock, Vec<Lock>)>,
    ) -> Result<Option<RenewedSession>, ApiError> {
        self.sessions_spoken()?;
        let guard = self.guard();
        let renewed = {
            let mut state = self.state();
            let now = self.clock.now();
            let reclaimed = match reclaim {
                Some((session, locks)) => state.member.reclaim_session(session, locks, &guard, now),
                None => Ok(()),
            };
            let renewed = reclaimed.and_then(|()| state.member.renew_session(renewal, &guard, now));
            // A take-back may have served a name's queue.
            self.dispatch(&mut state);
            if renewed.is_ok() {
                self.changed(&state);
            }
            renewed
        };
        let (renewed, made) = match renewed {
            Ok(renewed) => renewed,
            Err(Refusal::RecordsWanted) => return Ok(None),
            Err(refusal) => return Err(self.refused(refusal)),
        };
        let node = renewal.node;
        let locks: &[Lock] = match renewed.copied {
            true => renewed.records.as_deref().unwrap_or_default(),
            false => &[],
        };
        let recorded = futures::future::join_all(
            std::iter::once(&renewed.session)
                .chain(locks)
                .map(|lock| self.ensure_on_record(lock, node, made)),
        )
        .await;
        recorded.into_iter().collect::<Result<Vec<()>, _>>()?;
        self.metrics.renewals.inc();
        Ok(Some(renewed))
    }

    /// Closes a session as the speaker: its grant first, then every lock of
    /// it, each passed on to the members that keep a record of it.
    pub(crate) fn speak_close_session(&self, id: LockId) -> Result<Vec<Lock>, ApiError> {
        self.sessions_spoken()?;
        let guard = self.guard();
        let released = {
            let mut state = self.state();
            let released = state.member.release_session(id, &guard, self.clock.now());
            if released.is_ok() {
                self.dispatch(&mut state);
                self.changed(&state);
            }
            released
        }
        .map_err(|r| self.refused(r))?;
        let now = self.clock.now();
        let mut locks = Vec::with_capacity(released.len());
        for (lock, to) in released {
            self.forgets
                .push(to, &lock.name, lock.id, lock.expires, now);
            self.metrics.releases.inc();
            locks.push(lock);
        }
        Ok(locks)
    }

    /// Serves a forwarded session call as the speaker.
    pub(crate) async fn serve_session_call(
        &self,
        call: ForwardCall,
    ) -> Result<ForwardAnswer, ApiError> {
        match call {
            ForwardCall::OpenSession(open) => {
                leasehold_api::validate_holder(&open.holder)?;
                let received = tokio::time::Instant::now();
                let lease = open.ttl_ms.map(Duration::from_millis);
                let lock = self
                    .speak_open_session(&open.holder, lease, open.node)
                    .await?;
                Ok(ForwardAnswer::Granted(leasehold_api::Granted {
                    lock: self.transit(&lock),
                    served_ms: leasehold_api::millis_floor(received.elapsed()),
                    also: Vec::new(),
                }))
            }
            ForwardCall::RenewSession(renew) => {
                let digest = |d: &Option<String>| d.as_deref().map(parse_digest).transpose();
                let arrived =
                    |l: PeerLock| LockInTransit::try_from(l).map(|l| l.arrive(self.clock.now()));
                let with_record = renew.record.is_some();
                let reclaim = match (renew.record, renew.records) {
                    (Some(session), Some(locks)) => Some((
                        arrived(session).map_err(malformed)?,
                        locks
                            .into_iter()
                            .map(arrived)
                            .collect::<Result<Vec<_>, _>>()
                            .map_err(malformed)?,
                    )),
                    _ => None,
                };
                let renewal = SessionRenewal {
                    id: renew.id.parse()?,
                    lease: renew.ttl_ms.map(Duration::from_millis),
                    node: renew.node,
                    digest: digest(&renew.node_digest)?,
                    client_digest: digest(&renew.client_digest)?,
                    session_copies: self.session_copies(),
                    reclaimable: with_record && reclaim.is_none(),
                };
                let Some(renewed) = self.speak_renew_session(renewal, reclaim).await? else {
                    return Ok(ForwardAnswer::RecordsWanted);
                };
                Ok(ForwardAnswer::Session(SessionRenewed {
                    session: self.transit(&renewed.session),
                    locks: renewed.locks as u64,
                    records: renewed
                        .records
                        .map(|r| r.iter().map(|l| self.transit(l)).collect()),
                }))
            }
            ForwardCall::CloseSession(close) => {
                let mut released = self.speak_close_session(close.id.parse()?)?;
                let session = released.remove(0);
                Ok(ForwardAnswer::Session(SessionRenewed {
                    session: self.transit(&session),
                    locks: released.len() as u64,
                    records: None,
                }))
            }
            other => Err(ApiError::internal(format!("not a session call: {other:?}"))),
        }
    }
}

fn ids(locks: &[Lock]) -> Vec<LockId> {
    locks.iter().map(|l| l.id).collect()
}

fn digest_of(locks: &[Lock]) -> u128 {
    locktable::session::digest(locks.iter().map(|l| l.id))
}
