//! What each simulated client is: the node it talks to, and what it is
//! doing (asking for a name, holding one, or holding a session).

use locktable::{Kind, LockId, NodeId};

use crate::msg::ReqId;

/// What a client is doing.
#[derive(Debug, Clone)]
pub(crate) enum ClientState {
    Idle,
    Asking {
        req: ReqId,
        sent: u64,
        name: String,
        kind: Kind,
        /// The lock-delay asked for.
        delay_ms: u64,
        /// A set's other names, in the order asked.
        also: Vec<String>,
    },
    Holding(Holding),
    /// The locks of a set, held unrenewed and released together.
    HoldingSet(HeldSet),
    /// Opening a session: the acquire of its name, sent at `sent`.
    OpeningSession {
        req: ReqId,
        sent: u64,
        lease_ms: u64,
    },
    /// A session held, with the locks taken in it.
    InSession(SessionHolding),
}

/// A session a client holds, renewed as one for every lock of it.
#[derive(Debug, Clone)]
pub(crate) struct SessionHolding {
    /// The acquire that opened it: names its renewals' and end's events.
    pub(crate) req: ReqId,
    /// The session's id.
    pub(crate) id: LockId,
    pub(crate) lease_ms: u64,
    /// When the holder's own count of the session's lease ends (less its
    /// margin).
    pub(crate) ends: u64,
    /// The names still to take in it, in order.
    pub(crate) to_take: Vec<String>,
    /// The acquire of a lock in it under way: request, send, name, and
    /// the lock-delay asked for (in ms).
    pub(crate) asking: Option<(ReqId, u64, String, u64)>,
    /// The locks held in it.
    pub(crate) locks: Vec<SessionLock>,
    /// The renewal attempt under way: request, send, and the ids of the
    /// locks whose digest it sent.
    pub(crate) renewing: Option<(ReqId, u64, Vec<LockId>)>,
    /// When the next renewal is due (later events are stale).
    pub(crate) next_renew: u64,
    /// Failed renewal attempts in a row.
    pub(crate) attempts: u32,
    /// The nodes the holder went through.
    pub(crate) via: Vec<NodeId>,
    /// Closed at its end, or else left to lapse.
    pub(crate) close: bool,
    /// Every lock granted in it (name, fence, lock-delay in ms), kept or
    /// not: what must be free once it ends (after its delay, if it lapsed).
    pub(crate) granted: Vec<(String, u64, u64)>,
    /// The latest answer to its open or a renewal, plus the lease asked:
    /// when the speaker's lease of it ends at the latest, unless it is in
    /// doubt.
    pub(crate) answered_until: u64,
    /// A renewal attempt went unanswered, or was refused otherwise than
    /// "not held": the speaker may have renewed the session later than any
    /// answer says.
    pub(crate) in_doubt: bool,
}

/// A lock held in a session, as its holder counts it.
#[derive(Debug, Clone)]
pub(crate) struct SessionLock {
    pub(crate) name: String,
    pub(crate) id: LockId,
    pub(crate) fence: u64,
    pub(crate) start: u64,
    /// When the holder's count of its lease ends (less its margin): from
    /// its grant, then from each renewal of the session that counted it.
    pub(crate) ends: u64,
    /// The lock-delay it was granted with (0 for none): the name stays
    /// closed that long after the session lapses.
    pub(crate) delay_ms: u64,
}

/// A set of names a client holds, each lock as its holder counts it.
#[derive(Debug, Clone)]
pub(crate) struct HeldSet {
    /// The acquire that won the set.
    pub(crate) req: ReqId,
    pub(crate) start: u64,
    /// Each lock: name, id, fence, and when the holder's count of its
    /// lease ends (less its margin).
    pub(crate) locks: Vec<(String, LockId, u64, u64)>,
}

/// A lock a client holds, as its holder counts it.
#[derive(Debug, Clone)]
pub(crate) struct Holding {
    /// The acquire that won the lock.
    pub(crate) req: ReqId,
    pub(crate) name: String,
    /// What the client asked to hold of the name.
    pub(crate) kind: Kind,
    pub(crate) id: LockId,
    pub(crate) fence: u64,
    pub(crate) start: u64,
    /// When the holder's own count of the lease ends (less its margin).
    pub(crate) ends: u64,
    pub(crate) lease_ms: u64,
    /// The lock-delay the holder asked for.
    pub(crate) delay_ms: u64,
    /// When the next renewal is due (later events are stale).
    pub(crate) next_renew: u64,
    /// The renewal attempt under way: its request and when it left.
    pub(crate) renewing: Option<(ReqId, u64)>,
    /// Failed renewal attempts in a row.
    pub(crate) attempts: u32,
    /// The nodes the holder went through.
    pub(crate) via: Vec<NodeId>,
}

/// A simulated client, or a liveness probe.
pub(crate) struct Client {
    pub(crate) node: NodeId,
    pub(crate) state: ClientState,
    /// A liveness probe (asks for fresh names in the quiet tail).
    pub(crate) probe: bool,
    /// When a probe was first granted.
    pub(crate) granted_at: Option<u64>,
    pub(crate) asked: u64,
}

impl Client {
    /// An idle client of `node`; a liveness probe if `probe`.
    pub(crate) fn new(node: NodeId, probe: bool) -> Client {
        Client {
            node,
            state: ClientState::Idle,
            probe,
            granted_at: None,
            asked: 0,
        }
    }
}
