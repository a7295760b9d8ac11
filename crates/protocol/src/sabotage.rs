//! Safety mechanisms a simulation switches off, one at a time, to show
//! that its checks see what each one prevents. Production never sets any:
//! only the simulation's start path (`leasehold_node::Seams`) can.

/// Which safety mechanisms are switched off. [`Sabotage::NONE`] (the
/// default) switches off nothing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sabotage {
    /// The grant guard: a speaker grants while its table speaks for a term
    /// Raft last said it led, whether or not a quorum acknowledged it
    /// within the leader lease.
    pub no_grant_guard: bool,
    /// The restart wait: a (re)started node runs Raft at once instead of
    /// first waiting out any leader lease it may have backed.
    pub no_restart_wait: bool,
    /// The reread: a member whose read failed is not read again within
    /// the rebuild.
    pub no_reread: bool,
    /// The rebuild retry: once a rebuild attempt failed (most often
    /// openraft's ReadIndex giving up without a quorum), none is tried
    /// again while this node leads the same term; nor does it step down
    /// after failing for long, which is decided when an attempt ends.
    pub no_rebuild_retry: bool,
    /// The read's term fence: a member read by a newer speaker neither
    /// drops its own table nor refuses older speakers' copies and answers.
    pub no_term_fence: bool,
    /// The copies floor: a rebuild counts on the copies members make now,
    /// not on the fewer a grant made before the count rose (growth, a
    /// higher `--copies`) may still have.
    pub copies_of_now: bool,
    /// Timings agreed: the guard and the strict hold count on this
    /// member's own leader lease, not on the shortest (the guard) or the
    /// longest (the hold) any member said it runs with.
    pub own_timings: bool,
    /// The departed-member rule: a member that left the roster is read as
    /// any member is, whatever data directory it answers from, and a
    /// process of it up for less than the longest lease is not counted as
    /// restarted (its replacement's empty table is taken for the one that
    /// left).
    pub departed_anywhere: bool,
    /// The handover: a member leaving cleanly (stopped, or removed) hands
    /// none of its records over, so its leaving costs what a crash costs
    /// (it is missing from the next rebuild).
    pub no_handover: bool,
    /// The protocol agreement: the speaker agrees a higher version once it
    /// offers it itself, not once every member does (an old member then
    /// meets a version it cannot speak).
    pub agree_alone: bool,
}

impl Sabotage {
    /// Nothing switched off.
    pub const NONE: Sabotage = Sabotage {
        no_grant_guard: false,
        no_restart_wait: false,
        no_reread: false,
        no_rebuild_retry: false,
        no_term_fence: false,
        copies_of_now: false,
        own_timings: false,
        departed_anywhere: false,
        no_handover: false,
        agree_alone: false,
    };
}
