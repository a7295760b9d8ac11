//! What travels in the simulated world: the messages between nodes and
//! clients, and the events on the world's queue.

use std::time::Duration;

use locktable::{Kind, LockId, LockInTransit, NodeId};

use crate::raft::RaftMsg;

/// A client, by its place in the world's clients.
pub(crate) type ClientId = usize;
/// A client's request, numbered across the run.
pub(crate) type ReqId = u64;

/// Why a node did not grant.
#[derive(Debug, Clone)]
pub(crate) enum Refusal {
    /// The name is held: by the grant of this fence (what the checker
    /// needs to see a lock kept past its session).
    Held(u64),
    Unavailable,
    /// A renewal of a lock the speaker does not hold (nor could reclaim).
    NotHeld,
    /// A session's renewal whose session the speaker's table lacks: the
    /// forwarding node is to send its records of the session's locks.
    RecordsWanted,
}

/// A grant as it travels back: the lock, and how long the speaker (and a
/// forwarding node) held the request.
pub(crate) type Answer = Result<(LockInTransit, u64), Refusal>;

/// What a client asks for.
#[derive(Debug, Clone)]
pub(crate) struct Ask {
    pub(crate) name: String,
    pub(crate) wait_ms: u64,
    pub(crate) lease_ms: u64,
    pub(crate) kind: Kind,
    /// The lock-delay asked for (0 for none).
    pub(crate) delay_ms: u64,
    /// A set's other names, to be granted with `name` all at once (empty
    /// for one name).
    pub(crate) also: Vec<String>,
    /// The session the lock is to hang off (its grant's id), if any.
    pub(crate) session: Option<LockId>,
}

/// A session's renewal as a client asks it, and as a node passes it on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SessionCall {
    /// The session's id.
    pub(crate) id: LockId,
    pub(crate) lease_ms: u64,
    /// The digest of the locks the client holds in the session.
    pub(crate) client_digest: Option<u128>,
}

/// A message between a client and its node, or between nodes.
#[derive(Debug, Clone)]
pub(crate) enum Msg {
    // A client and its node.
    Acquire {
        client: ClientId,
        req: ReqId,
        ask: Ask,
    },
    Release {
        name: String,
        id: LockId,
    },
    Renew {
        client: ClientId,
        req: ReqId,
        name: String,
        id: LockId,
        lease_ms: u64,
    },
    Reply {
        req: ReqId,
        result: Answer,
        /// A set's other locks, in the order asked (empty for one name).
        also: Vec<LockInTransit>,
    },
    /// A session's renewal, through the client's node.
    RenewSession {
        client: ClientId,
        req: ReqId,
        call: SessionCall,
    },
    /// The answer to a session's renewal: the session renewed, and, when
    /// the client's digest differed from the speaker's, the ids of every
    /// lock of it.
    SessionReply {
        req: ReqId,
        result: Answer,
        held: Option<Vec<LockId>>,
    },
    /// A session closed, with every lock of it: answered
    /// [`Msg::SessionClosed`] once the speaker released them.
    CloseSession {
        client: ClientId,
        id: LockId,
    },
    /// The answer to a close: the speaker released the session and every
    /// lock of it.
    SessionClosed {
        id: LockId,
    },
    // Between nodes.
    Forward {
        from: NodeId,
        client: ClientId,
        req: ReqId,
        ask: Ask,
    },
    /// The answer to a forwarded acquire or renewal.
    ForwardReply {
        client: ClientId,
        req: ReqId,
        result: Answer,
        /// A set's other locks, in the order asked.
        also: Vec<LockInTransit>,
    },
    ForwardRenew {
        from: NodeId,
        client: ClientId,
        req: ReqId,
        name: String,
        id: LockId,
        lease_ms: u64,
        /// The renewing node's record of the lock, if it has one.
        record: Option<LockInTransit>,
    },
    /// A session's renewal passed on to the speaker, with the digest of
    /// the session's locks the renewing node records.
    ForwardRenewSession {
        from: NodeId,
        client: ClientId,
        req: ReqId,
        call: SessionCall,
        node_digest: Option<u128>,
        /// The renewing node's record of the session (`--session-reclaim`).
        record: Option<LockInTransit>,
        /// Its records of the session's locks, when the speaker wanted
        /// them.
        records: Option<Vec<LockInTransit>>,
    },
    /// The speaker's answer to a forwarded session's renewal: the session,
    /// and every lock of it when the renewing node's records may differ.
    ForwardSessionReply {
        client: ClientId,
        req: ReqId,
        result: Answer,
        records: Option<Vec<LockInTransit>>,
    },
    ForwardCloseSession {
        from: NodeId,
        client: ClientId,
        id: LockId,
    },
    /// The speaker released a session a node forwarded the close of.
    ForwardSessionClosed {
        client: ClientId,
        id: LockId,
        /// The session's grant as released, for the node's records.
        session: LockInTransit,
    },
    /// A copy of a grant or renewal by the speaker of `term`.
    Copy {
        from: NodeId,
        key: u64,
        term: u64,
        lock: LockInTransit,
    },
    CopyAck {
        from: NodeId,
        key: u64,
        ok: bool,
    },
    /// A copy of a session's grant by the speaker of `term`, with the
    /// count and digest of its locks as noted (protocol 7).
    SessionCopy {
        from: NodeId,
        key: u64,
        term: u64,
        lock: LockInTransit,
        locks: leasehold_protocol::SessionLocks,
    },
    /// A member did not follow the session's copy `key`: it is to be sent
    /// the session and every lock of it as copies.
    SessionUnfollowed {
        from: NodeId,
        key: u64,
        term: u64,
        session: LockId,
    },
    /// Copies of a session and its locks, acknowledged as copy `key`.
    Copies {
        from: NodeId,
        key: u64,
        term: u64,
        locks: Vec<LockInTransit>,
    },
    ForwardRelease {
        name: String,
        id: LockId,
    },
    /// Releases passed on, each with the time its lease had left at the
    /// send, as batch `key`.
    Forgets {
        from: NodeId,
        key: u64,
        forgets: Vec<(String, LockId, Duration)>,
    },
    /// A member took the batch of releases `key`.
    ForgetAck {
        key: u64,
    },
    ReadReport {
        leader: NodeId,
        term: u64,
        attempt: u64,
    },
    Report {
        from: NodeId,
        attempt: u64,
        header: ReportHeader,
        locks: Vec<LockInTransit>,
    },
    Lost {
        ids: Vec<LockId>,
    },
    Raft {
        from: NodeId,
        msg: RaftMsg,
    },
}

/// Where a message is delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum To {
    Node(NodeId),
    Client(ClientId),
}

/// What the world's queue holds, each due at a simulated time.
#[derive(Debug)]
pub(crate) enum Event {
    Deliver(To, Box<Msg>),
    /// A node's Raft tick, speaker watch and expiry poll.
    Tick(NodeId),
    /// Raft starts on a node's incarnation.
    RaftStart(NodeId, u64),
    /// A rebuild attempt's reads are due.
    ReadDeadline(NodeId, u64),
    /// `Reads` said the reads of node `n`'s attempt may stop now: asked
    /// again, as a member may have answered meanwhile.
    ReadsMayStop(NodeId, u64),
    /// A rebuild attempt's speaker learns that its read of a member failed.
    ReadFailed(NodeId, u64, NodeId),
    /// A rebuild attempt's speaker reads a member again.
    ReadAgain(NodeId, u64, NodeId),
    ClientWake(ClientId),
    /// A client stops waiting for the answer to this request.
    ClientGiveUp(ClientId, ReqId),
    /// A client lets go of what this request won.
    ClientRelease(ClientId, ReqId),
    Probe(ClientId),
    Fault,
    /// A crashed (or stopped) node starts again.
    Restart(NodeId),
    /// Links cut by a partition heal.
    Reconnect(Vec<(NodeId, NodeId)>),
    /// A stopping node (this incarnation) checks whether another leads yet.
    StopCheck(NodeId, u64),
    /// A node crashes, to start again after the given time.
    Crash(NodeId, u64),
    /// A paused node (this incarnation) wakes, if it is due to now.
    Wake(NodeId, u64),
    /// The last fault has healed: the quiet tail begins.
    Quiet,
    /// A node (this incarnation) sends the copies it queued.
    CopyFlush(NodeId, u64),
    /// A node (this incarnation) stops waiting for a member's
    /// acknowledgement of the copy `key`.
    CopyTimeout(NodeId, u64, u64, NodeId),
    /// A node (this incarnation) sees whether a member left the copy `key`
    /// unanswered long enough to send another member one as well.
    CopyHedge(NodeId, u64, u64, NodeId),
    /// A node (this incarnation) sees whether a member took the releases
    /// `key` soon enough.
    ForgetLate(NodeId, u64, NodeId, u64),
    /// A node (this incarnation) stops waiting for a member to take the
    /// releases `key`.
    ForgetTimeout(NodeId, u64, NodeId, u64),
    /// A node (this incarnation) tries a member's releases again after
    /// the failed batch `key`.
    ForgetRetry(NodeId, u64, u64),
    /// A holder renews the lock won by this request, if it still holds it.
    ClientRenew(ClientId, ReqId),
    /// A holder stops waiting for the answer to this renewal attempt.
    RenewGiveUp(ClientId, ReqId),
    /// A client renews the session it opened with this request, if it
    /// still holds it.
    SessionRenew(ClientId, ReqId),
    /// A session's holder stops waiting for the answer to this renewal
    /// attempt.
    SessionRenewGiveUp(ClientId, ReqId),
}

/// What a member says of itself ahead of its report.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReportHeader {
    pub(crate) uptime: Duration,
    pub(crate) first_start: bool,
    pub(crate) max_lease: Duration,
    pub(crate) copies: usize,
}
