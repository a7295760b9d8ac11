//! What a run records for the checker ([`History`]), and what it comes to
//! ([`Report`]).

use std::collections::{BTreeMap, BTreeSet};

use locktable::{LockId, NodeId};

use crate::msg::Msg;

/// A holding a client completed: from its receipt of the grant to its
/// release, its own count of the lease's end (as the last renewal left
/// it), or the renewal that found it lost, whichever came first.
pub(crate) struct Interval {
    pub(crate) name: String,
    /// What the holder asked to hold of the name.
    pub(crate) kind: locktable::Kind,
    pub(crate) fence: u64,
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// Until when the name is closed to others: `end`, or, for a lease
    /// that ran out unreleased with a lock-delay, the end of the lease on
    /// the holder's count (without its margin) plus the delay asked.
    pub(crate) closed_until: u64,
    /// A lock of a session (renewed by renewing its session).
    pub(crate) session: bool,
}

/// A lock its holder kept renewing until a renewal was answered "not
/// held" while the holder's own count of the lease still ran.
pub(crate) struct LostLock {
    pub(crate) name: String,
    pub(crate) fence: u64,
    /// When the holder received the grant.
    pub(crate) granted: u64,
    pub(crate) lost: u64,
    /// The nodes the holder went through.
    pub(crate) via: Vec<NodeId>,
}

/// A session that ended, as its holder saw it end: closed (the close
/// answered) or left to lapse.
pub(crate) struct SessionEnd {
    /// The session's id.
    pub(crate) id: locktable::LockId,
    /// Every lock granted in it (name, fence, lock-delay in ms), kept or
    /// not.
    pub(crate) locks: Vec<(String, u64, u64)>,
    /// When the close was answered: the speaker had released the session
    /// and every lock of it.
    pub(crate) closed: Option<u64>,
    /// When the speaker's lease of the session ends at the latest: the
    /// latest answer to its open or a renewal, plus the lease asked; none
    /// when a renewal went unanswered (the speaker may have renewed it
    /// later than any answer says).
    pub(crate) lapsed_by: Option<u64>,
}

/// An acquire refused "held", naming the holder.
pub(crate) struct HeldRefusal {
    pub(crate) name: String,
    /// The holder's fence.
    pub(crate) fence: u64,
    /// When the refused acquire was sent: the speaker refused it later.
    pub(crate) sent: u64,
    /// When the refusal came: the speaker refused it earlier.
    pub(crate) answered: u64,
}

/// What the checker reads.
#[derive(Default)]
pub(crate) struct History {
    pub(crate) intervals: Vec<Interval>,
    pub(crate) lost: Vec<LostLock>,
    /// Members faulted, and from when to when: crashed (until restarted),
    /// paused, stopping gracefully (until restarted), or at either end of a
    /// cut link.
    pub(crate) faults: Vec<(NodeId, u64, u64)>,
    /// When rebuilds that missed as many members as there are copies (or
    /// more) finished.
    pub(crate) missing_rebuilds: Vec<u64>,
    /// The latest term a leader was elected in so far: (term, when, who).
    pub(crate) newest: Option<(u64, u64, NodeId)>,
    /// Nodes found able to grant for a term after a later one's election.
    pub(crate) deposed: BTreeSet<(NodeId, u64)>,
    /// Sets of names answered otherwise than whole: the names asked, and
    /// what came.
    pub(crate) broken_sets: Vec<String>,
    /// Sessions that ended, by their holders' sight.
    pub(crate) session_ends: Vec<SessionEnd>,
    /// Acquires refused "held", with the holder named.
    pub(crate) held_refusals: Vec<HeldRefusal>,
    /// When each rebuild finished: a table rebuilt from the members'
    /// records may take back a lock released before, whose release some
    /// member did not hear of, until its lease ends.
    pub(crate) rebuilds: Vec<u64>,
    /// The longest a copy of each lock (name and fence) waited at a paused
    /// member before the member took it, in ms: the member counts the
    /// copy's lease from then, so its record ends that much later than
    /// the speaker's did.
    pub(crate) copies_waited: BTreeMap<(String, u64), u64>,
    /// The same, by the lock's id (what a session's end names).
    pub(crate) copies_waited_by_id: BTreeMap<LockId, u64>,
}

impl History {
    /// `msg` reached a paused member and waited `ms` there before it was
    /// taken: if it carries copies, each is noted with the wait.
    pub(crate) fn copy_waited(&mut self, msg: &Msg, ms: u64) {
        let locks = match msg {
            Msg::Copy { lock, .. } | Msg::SessionCopy { lock, .. } => std::slice::from_ref(lock),
            Msg::Copies { locks, .. } => locks.as_slice(),
            _ => return,
        };
        for lock in locks {
            let by_fence = self
                .copies_waited
                .entry((lock.name.clone(), lock.fence.0))
                .or_default();
            *by_fence = (*by_fence).max(ms);
            let by_id = self.copies_waited_by_id.entry(lock.id).or_default();
            *by_id = (*by_id).max(ms);
        }
    }
}

/// What a run saw.
#[derive(Clone, Default)]
pub struct Report {
    /// The seed.
    pub seed: u64,
    /// Simulated time, in ms.
    pub sim_ms: u64,
    /// Holding intervals clients completed.
    pub grants: usize,
    /// Of them, locks of sessions.
    pub session_grants: usize,
    /// Overlapping intervals of one name.
    pub overlaps: usize,
    /// Overlaps, and fences out of order, explained by a rebuild that
    /// missed as many members as there are copies, or more (proceed mode).
    pub explained: usize,
    /// Overlaps the promises do not allow.
    pub unexplained: Vec<String>,
    /// Fences that did not increase along a name's history.
    pub fence_inversions: Vec<String>,
    /// Grants by a speaker after a leader of a later term was elected.
    pub deposed_grants: Vec<String>,
    /// Speakers that could grant (table rebuilt, leading its term, guard
    /// open) after a leader of a later term was elected, found at their
    /// ticks: the guard's premise broken, whether or not a request came.
    pub deposed_speakers: Vec<String>,
    /// Locks lost while their holders kept renewing, with fewer members
    /// faulted meanwhile than there are copies.
    pub lost_locks: Vec<String>,
    /// Locks of sessions still held after their session ended: named as
    /// the holder to an acquire sent after the close was answered, or after
    /// the session's lease ran out at the latest.
    pub session_locks_kept: Vec<String>,
    /// Locks lost while their holders kept renewing, with as many members
    /// faulted meanwhile as there are copies, or more.
    pub excused_losses: usize,
    /// Nodes that served no grant within the bound after the last fault
    /// healed.
    pub liveness: Vec<String>,
    /// Violations of every kind, counted (the lists above spell out the
    /// first few of each).
    pub violations: usize,
    /// The longest any node took to serve its probe after the last fault
    /// healed, in ms.
    pub liveness_ms: u64,
    /// Leaders elected.
    pub elections: usize,
    /// Crashes injected (graceful stops included).
    pub crashes: usize,
    /// Pauses injected.
    pub pauses: usize,
    /// Partitions injected (quorum blips included).
    pub partitions: usize,
    /// Graceful stops (leadership handed over) injected.
    pub graceful_stops: usize,
    /// Leaders cut off from every member right after their election.
    pub blips: usize,
    /// Rebuild attempts that failed (and were tried again).
    pub failed_rebuilds: usize,
    /// Speakers that stepped down after failing to rebuild too long.
    pub step_downs: usize,
    /// Messages lost (to loss or cut links).
    pub lost_messages: usize,
    /// What happened, when the run kept a trace.
    pub trace: Vec<String>,
}

impl Report {
    /// Whether every promise held.
    pub fn ok(&self) -> bool {
        self.violations == 0
    }

    /// Faults injected, of every kind.
    pub fn faults(&self) -> usize {
        self.crashes + self.pauses + self.partitions
    }
}

/// Every field, but `session_grants` only when a run made some: a run
/// without sessions prints as before they were simulated (the digest
/// example compares the output before and after a change).
impl std::fmt::Debug for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Report");
        d.field("seed", &self.seed)
            .field("sim_ms", &self.sim_ms)
            .field("grants", &self.grants);
        if self.session_grants > 0 {
            d.field("session_grants", &self.session_grants);
        }
        d.field("overlaps", &self.overlaps)
            .field("explained", &self.explained)
            .field("unexplained", &self.unexplained)
            .field("fence_inversions", &self.fence_inversions)
            .field("deposed_grants", &self.deposed_grants)
            .field("deposed_speakers", &self.deposed_speakers)
            .field("lost_locks", &self.lost_locks);
        if !self.session_locks_kept.is_empty() {
            d.field("session_locks_kept", &self.session_locks_kept);
        }
        d.field("excused_losses", &self.excused_losses)
            .field("liveness", &self.liveness)
            .field("violations", &self.violations)
            .field("liveness_ms", &self.liveness_ms)
            .field("elections", &self.elections)
            .field("crashes", &self.crashes)
            .field("pauses", &self.pauses)
            .field("partitions", &self.partitions)
            .field("graceful_stops", &self.graceful_stops)
            .field("blips", &self.blips)
            .field("failed_rebuilds", &self.failed_rebuilds)
            .field("step_downs", &self.step_downs)
            .field("lost_messages", &self.lost_messages)
            .field("trace", &self.trace)
            .finish()
    }
}
