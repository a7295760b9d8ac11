//! Safety mechanisms a simulation switches off, one at a time, to show
//! that its checks see what each one prevents: the one vocabulary of the
//! whole-node simulation (through `leasehold_node::Seams`), the protocol
//! simulation (`crates/sim`) and the chaos suite (its `skip_copies` fault,
//! set through `/internal/chaos`). Production never sets any.
//!
//! Most switches are read here, by the protocol itself, wherever it is
//! driven. A few break a driver's own duty (how it counts a report's
//! leases, how it times its reads, when it answers a copied grant, how it
//! stamps a rebuild); each says which driver reads it.

/// Which safety mechanisms are switched off. [`Sabotage::NONE`] (the
/// default) switches off nothing.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
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
    /// The rebuild: a new speaker serves from an empty table, as if it had
    /// read nothing and missed no member.
    pub skip_rebuild: bool,
    /// The copies: a grant or renewal is answered on the guard alone, no
    /// copy sent (as if `--copies` were 1). The chaos suite switches it
    /// on and off at run time.
    pub skip_copies: bool,
    /// The copies, as a hasty driver breaks them: a grant is answered at
    /// once, and its copies sent without waiting for them (read by the
    /// simulation's driver).
    pub unacked_copies: bool,
    /// The reads, as the node before they were fixed made them: each
    /// member read once (no read again after a failure), and no early end
    /// (the reads wait for every answer or the deadline); `no_reread` is
    /// the first half.
    pub read_once: bool,
    /// The strict hold, one leader lease short: a rebuild attempt stamps
    /// its table one leader lease early ([`crate::Rebuilding`]).
    pub short_strict_hold: bool,
    /// A report's leases counted from when the reads were sent, not from
    /// each report's arrival (read by the simulation's driver; the node's
    /// report reader counts from each part's arrival on its own clock).
    pub count_from_send: bool,
    /// A renewal the strict hold may not refuse as not held (a member the
    /// rebuild missed may have it on record) is refused as not held.
    pub not_held_in_hold: bool,
    /// The kinds at a rebuild: every lock read from the members is taken
    /// for an exclusive one, as a member of a build before kinds would
    /// report it (readers and permits of one name then settle as grants
    /// two speakers made apart, and all but one are lost).
    pub kinds_unread: bool,
    /// The writers: the speaker grants an exclusive request as a shared
    /// one, so a writer holds beside readers and other writers.
    pub writers_shared: bool,
    /// The sets: the speaker grants the names of a set that are free now,
    /// one by one, and answers those, as a multi-lock that takes what it
    /// can (the rest are neither granted nor waited for).
    pub sets_partial: bool,
    /// The lock-delay: the speaker grants every request without its delay,
    /// so a lease that runs out frees its name at once. The chaos suite
    /// switches it on at run time.
    pub delay_ignored: bool,
    /// The sessions: the speaker renews a session's grant alone, and its
    /// locks keep the end they had, so they lapse while the session is
    /// renewed. The chaos suite switches it on at run time.
    pub session_locks_unfollowed: bool,
    /// The permits: the speaker grants a permit request as one of a
    /// semaphore with one permit more than asked (the count taken as N+1),
    /// so a name holds one holder past its permits.
    pub permits_overfull: bool,
    /// A session's end: the speaker ends a closed session's own grant and
    /// leaves its locks held (to run out at the session's last end), and a
    /// session's renewal gives its locks a lease past the session's own
    /// end, so they outlast its lapse.
    pub session_end_leaves_locks: bool,
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
        skip_rebuild: false,
        skip_copies: false,
        unacked_copies: false,
        read_once: false,
        short_strict_hold: false,
        count_from_send: false,
        not_held_in_hold: false,
        kinds_unread: false,
        writers_shared: false,
        sets_partial: false,
        delay_ignored: false,
        session_locks_unfollowed: false,
        permits_overfull: false,
        session_end_leaves_locks: false,
    };
}

/// Where a switch lives in [`Sabotage`].
type Field = fn(&mut Sabotage) -> &mut bool;

/// Each switch by the name the simulations' `--sabotage` takes.
const SWITCHES: [(&str, Field); 24] = [
    ("guard", |s| &mut s.no_grant_guard),
    ("restart-wait", |s| &mut s.no_restart_wait),
    ("reread", |s| &mut s.no_reread),
    ("rebuild-retry", |s| &mut s.no_rebuild_retry),
    ("term-fence", |s| &mut s.no_term_fence),
    ("copies-of-now", |s| &mut s.copies_of_now),
    ("own-timings", |s| &mut s.own_timings),
    ("departed-anywhere", |s| &mut s.departed_anywhere),
    ("no-handover", |s| &mut s.no_handover),
    ("agree-alone", |s| &mut s.agree_alone),
    ("skip-rebuild", |s| &mut s.skip_rebuild),
    ("skip-copies", |s| &mut s.skip_copies),
    ("unacked-copies", |s| &mut s.unacked_copies),
    ("read-once", |s| &mut s.read_once),
    ("short-hold", |s| &mut s.short_strict_hold),
    ("count-from-send", |s| &mut s.count_from_send),
    ("not-held-in-hold", |s| &mut s.not_held_in_hold),
    ("kinds-unread", |s| &mut s.kinds_unread),
    ("writers-shared", |s| &mut s.writers_shared),
    ("sets-partial", |s| &mut s.sets_partial),
    ("delay-ignored", |s| &mut s.delay_ignored),
    ("session-locks-unfollowed", |s| {
        &mut s.session_locks_unfollowed
    }),
    ("permits-overfull", |s| &mut s.permits_overfull),
    ("session-end-leaves-locks", |s| {
        &mut s.session_end_leaves_locks
    }),
];

impl Sabotage {
    /// The switches only the protocol simulation's driver reads: they
    /// break a duty the node's driver does not have as such.
    pub const DRIVER_ONLY: [&'static str; 2] = ["unacked-copies", "count-from-send"];

    /// Every switch's name, as `--sabotage` takes it.
    pub fn names() -> impl Iterator<Item = &'static str> {
        SWITCHES.iter().map(|(name, _)| *name)
    }

    /// Switches off the mechanism called `name`; `false` if no switch has
    /// that name.
    pub fn switch(&mut self, name: &str) -> bool {
        let Some((_, field)) = SWITCHES.iter().find(|(n, _)| *n == name) else {
            return false;
        };
        *field(self) = true;
        true
    }

    /// The names of the switches set.
    pub fn set(&self) -> Vec<&'static str> {
        let mut copy = *self;
        SWITCHES
            .iter()
            .filter(|(_, field)| *field(&mut copy))
            .map(|(name, _)| *name)
            .collect()
    }

    /// Whether no switch is set.
    pub fn is_none(&self) -> bool {
        *self == Sabotage::NONE
    }
}

impl std::fmt::Debug for Sabotage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.set()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_switch_has_one_name_and_one_field() {
        let names: Vec<&str> = Sabotage::names().collect();
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "a name twice");
        let mut all = Sabotage::NONE;
        for name in &names {
            let mut one = Sabotage::NONE;
            assert!(one.switch(name));
            assert_eq!(one.set(), vec![*name], "{name} sets one field, its own");
            all.switch(name);
        }
        assert_eq!(all.set(), names, "every field has a name");
        let mut none = Sabotage::NONE;
        assert!(!none.switch("no-such-switch"));
        assert_eq!(format!("{:?}", Sabotage::NONE), "[]");
        for name in Sabotage::DRIVER_ONLY {
            assert!(names.contains(&name), "{name}");
        }
    }
}
