//! A session's grant put on record with a member that copies its locks:
//! one message renews the member's copies of every lock of the session
//! (protocol 7), and only a member whose copies are not the table's is
//! sent every lock again. The rules are the protocol's
//! (`leasehold_protocol::Member::take_session_copy`); this module sends.

use leasehold_api::{
    format_digest, parse_digest, routes, PeerLock, SessionCopied, SessionCopy, MAX_BODY_BYTES,
};
use leasehold_protocol::{SessionLocks, COPY_TIMEOUT};
use leasehold_raft::WatchReceiver;
use locktable::{Lock, LockInTransit, MonoTime, NodeId};

use crate::error::ApiError;
use crate::node::Node;

impl Node {
    /// Whether the cluster renews copies of a session's locks by the
    /// session's copy ([`leasehold_raft::version::SESSION_COPIES`]).
    pub(crate) fn session_copies(&self) -> bool {
        self.identity.versions().cluster() >= leasehold_raft::version::SESSION_COPIES
    }

    /// Puts the session's grant `session` on record with `member`, noted at
    /// `noted` as a member that may keep it and every lock of the session
    /// counted in `locks`: the member renews its copies in place if it keeps
    /// exactly those; if not, the session and every lock of it, as the table
    /// has them now, are sent as copies. Answers whether the member
    /// acknowledged within a copy's timeout of its noting.
    pub(crate) async fn copy_session(
        &self,
        member: NodeId,
        session: Lock,
        term: u64,
        noted: MonoTime,
        locks: SessionLocks,
    ) -> bool {
        let Some(addr) = self.roster().addr(member).map(str::to_owned) else {
            return false;
        };
        let now = self.clock.now();
        let left = (noted + COPY_TIMEOUT).saturating_duration_since(now);
        if left.is_zero() {
            return false;
        }
        let copy = SessionCopy {
            term,
            session: PeerLock::record_of(session.in_transit(now)),
            locks: locks.count as u64,
            digest: format_digest(locks.digest),
        };
        let answer = self
            .peers
            .call::<_, SessionCopied>(&addr, routes::SESSION_COPY, &copy, left)
            .await;
        match answer {
            Ok(Ok(SessionCopied { followed: true })) => return true,
            Ok(Ok(SessionCopied { followed: false })) => {}
            Ok(Err(_)) | Err(_) => return false,
        }
        let (records, noted) = {
            let mut state = self.state();
            let now = self.clock.now();
            (state.member.session_copies(session.id, member, now), now)
        };
        if records.is_empty() {
            return false;
        }
        let deadline = noted + COPY_TIMEOUT;
        for body in copy_bodies(term, &records, self.clock.now()) {
            let left = deadline.saturating_duration_since(self.clock.now());
            if left.is_zero() {
                return false;
            }
            let sent = self
                .peers
                .post_json(&addr, routes::COPIES, body, left)
                .await;
            if sent.is_err() {
                return false;
            }
        }
        true
    }

    /// As a member: keeps the speaker's copy of a session's grant, renewing
    /// its copies of the session's locks where they are the speaker's (see
    /// [`leasehold_protocol::Member::take_session_copy`]).
    pub(crate) fn take_session_copy(&self, copy: SessionCopy) -> Result<SessionCopied, ApiError> {
        let now = self.clock.now();
        let session = LockInTransit::try_from(copy.session)?.arrive(now);
        let locks = SessionLocks {
            count: usize::try_from(copy.locks).unwrap_or(usize::MAX),
            digest: parse_digest(&copy.digest)?,
        };
        let seen = self.raft.metrics().borrow_watched().current_term;
        let taken = self
            .state()
            .member
            .take_session_copy(copy.term, session, locks, seen, now);
        let followed = taken.map_err(|r| self.refused(r))?;
        Ok(SessionCopied { followed })
    }
}

/// `locks` as [`leasehold_api::Copies`] bodies of the speaker of `term`, each
/// at most [`MAX_BODY_BYTES`] (one lock may pass it alone), leases as they
/// are at `now`.
fn copy_bodies(term: u64, locks: &[Lock], now: MonoTime) -> Vec<Vec<u8>> {
    let head = format!("{{\"term\":{term},\"locks\":[");
    let mut bodies = Vec::new();
    let mut body = head.clone().into_bytes();
    let mut empty = true;
    for lock in locks {
        let Ok(json) = serde_json::to_vec(&PeerLock::record_of(lock.in_transit(now))) else {
            continue;
        };
        if !empty && body.len() + json.len() + 3 > MAX_BODY_BYTES {
            body.extend_from_slice(b"]}");
            bodies.push(std::mem::replace(&mut body, head.clone().into_bytes()));
            empty = true;
        }
        if !empty {
            body.push(b',');
        }
        body.extend_from_slice(&json);
        empty = false;
    }
    if !empty {
        body.extend_from_slice(b"]}");
        bodies.push(body);
    }
    bodies
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn lock(n: u128) -> Lock {
        Lock {
            name: format!("name-{n}"),
            id: locktable::LockId::from_u128(n + 1),
            node: 1,
            holder: "h".repeat(200),
            fence: locktable::Fence::new(1, n as u64 + 1),
            lease: Duration::from_secs(10),
            acquired: MonoTime::ZERO,
            expires: MonoTime::ZERO + Duration::from_secs(10),
            data: None,
            data_rev: 0,
            kind: Default::default(),
            delay: Duration::ZERO,
            session: None,
        }
    }

    /// Every lock goes in exactly one body, each body within the limit and
    /// a `Copies` of the term.
    #[test]
    fn copies_are_split_into_bodies_a_member_reads() {
        let locks: Vec<Lock> = (0..20_000).map(lock).collect();
        let bodies = copy_bodies(7, &locks, MonoTime::ZERO);
        assert!(bodies.len() > 1);
        let mut seen = 0;
        for body in &bodies {
            assert!(body.len() <= MAX_BODY_BYTES, "{} bytes", body.len());
            let copies: leasehold_api::Copies = serde_json::from_slice(body).expect("a Copies");
            assert_eq!(copies.term, 7);
            seen += copies.locks.len();
        }
        assert_eq!(seen, locks.len());
        assert!(copy_bodies(7, &[], MonoTime::ZERO).is_empty());
    }
}
