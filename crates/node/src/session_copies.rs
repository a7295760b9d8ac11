//! A session's grant put on record with a member that copies its locks:
//! one message renews the member's copies of every lock of the session
//! (protocol 7), and only a member whose copies are not the table's is
//! sent every lock again, as plain copies in its lane's batches. The rules
//! are the protocol's (`leasehold_protocol::Member::take_session_copy`);
//! this module sends.

use leasehold_api::{format_digest, parse_digest, routes, PeerLock, SessionCopied, SessionCopy};
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
        let sent = records
            .into_iter()
            .map(|lock| self.copy_by_lane(member, lock, term, noted));
        futures::future::join_all(sent)
            .await
            .into_iter()
            .all(|acked| acked)
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
