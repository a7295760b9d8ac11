//! The table this node speaks from, behind the node's lock: the guard that
//! lets it grant, the answers to waiting requests, expiry, and when it is
//! dropped.

use std::sync::atomic::Ordering;

use leasehold_api::LockView;
use leasehold_protocol::{Guard, Leader, Sabotage};
use leasehold_raft::leader_state;
use locktable::{Lock, MonoTime};
use tokio::sync::watch;

use crate::clock::SuspendWatch;

use super::{Node, State};

impl Node {
    /// The guard's facts as of now: Raft's view of this node's leadership
    /// and the last resume, on the lease clock.
    pub(crate) fn guard(&self) -> Guard {
        Guard {
            leader: leader_state(&self.raft).map(|l| Leader {
                term: l.term(),
                quorum_acked_at: l.quorum_acked_at.map(|at| self.clock.at_or_before(at)),
            }),
            resumed_at: self
                .suspends
                .as_ref()
                .and_then(SuspendWatch::last_resume)
                .map(|at| self.clock.at_or_after(at)),
        }
    }

    /// A lock as this node shows it to a client.
    pub(crate) fn view(&self, lock: &Lock) -> LockView {
        LockView::from_lock(lock, self.clock.now(), self.wall_ms())
    }

    /// A session as this node shows it to a client, with how many locks
    /// hang off it if counted.
    pub(crate) fn session_view(
        &self,
        session: &Lock,
        locks: Option<u64>,
    ) -> leasehold_api::SessionView {
        leasehold_api::SessionView::from_lock(session, locks, self.clock.now(), self.wall_ms())
    }

    /// A request waiting for a lock, as people see it.
    pub(crate) fn queued_view(&self, queued: &locktable::Queued) -> leasehold_api::QueuedView {
        leasehold_api::QueuedView::from_queued(queued, self.clock.now(), self.wall_ms())
    }

    /// This node's wall clock, as the chaos suite may have stepped it.
    fn wall_ms(&self) -> u64 {
        let step = self.peers.faults().wall_step_ms();
        self.clock.wall_ms().saturating_add_signed(step)
    }

    /// The term this node may grant for now, if its guard lets it (rebuilt
    /// or not). No two nodes may answer with different terms at one
    /// instant: the whole-node simulation checks it.
    pub fn may_grant_for(&self) -> Option<u64> {
        let guard = self.guard();
        let state = self.state();
        if state.member.may_speak(&guard, self.clock.now()) {
            state.member.speaking()
        } else {
            None
        }
    }

    /// Safety mechanisms switched off (a simulation's self-test only).
    pub(crate) fn sabotage(&self) -> Sabotage {
        self.state().member.config().sabotage
    }

    /// Switches the copies off (`skip_copies`), the lock-delay
    /// (`ignore_lock_delay`), a session's renewal of its locks
    /// (`ignore_session_renewal`), writers (`writers_shared`: granted as
    /// readers), sets (`sets_partial`: granted in part), the permits'
    /// count (`permits_overfull`: one more admitted) or a session's end
    /// (`session_end_leaves_locks`: its locks outlast it), as a chaos
    /// suite's fault plan says (its self-tests must see locks lost to
    /// single crashes, names granted inside a delay, locks of a renewed
    /// session granted again, a writer beside another holder, a set
    /// granted in part, a permit past the count and a session's lock held
    /// after it ended), or on again.
    pub(crate) fn set_chaos_sabotage(&self, plan: &leasehold_raft::FaultPlan) {
        let mut state = self.state();
        let sabotage = state.member.config().sabotage;
        state.member.set_sabotage(Sabotage {
            skip_copies: plan.skip_copies,
            delay_ignored: plan.ignore_lock_delay,
            session_locks_unfollowed: plan.ignore_session_renewal,
            writers_shared: plan.writers_shared,
            sets_partial: plan.sets_partial,
            permits_overfull: plan.permits_overfull,
            session_end_leaves_locks: plan.session_end_leaves_locks,
            ..sabotage
        });
    }

    /// Whether this node may grant now (its guard passes), rebuilt or not.
    pub(crate) fn may_speak_now(&self) -> bool {
        let guard = self.guard();
        self.state().member.may_speak(&guard, self.clock.now())
    }

    /// Says the table changed: the expiry task re-arms, watchers look again.
    ///
    /// The expiry task is woken only when the table's next deadline is now
    /// earlier than the one it sleeps until: a grant on the hot path with a
    /// lease longer than that wakes nobody.
    pub(crate) fn changed(&self, state: &State) {
        if self.changes.receiver_count() > 0 {
            self.changes.send_modify(|v| *v = v.wrapping_add(1));
        }
        let next = state
            .member
            .next_deadline()
            .map_or(u64::MAX, MonoTime::as_nanos);
        if next < self.expiry_armed.load(Ordering::Acquire) {
            self.table_changed.notify_one();
        }
    }

    /// A receiver that wakes when the table's locks change.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Hands the table's answers to the requests waiting for them. It does
    /// not ring `table_changed`: the expiry task calls it, and ringing
    /// itself would keep it from ever yielding.
    pub(crate) fn dispatch(&self, state: &mut State) {
        for answer in state.member.take_answers() {
            if let Some(tx) = state.waiters.remove(&answer.waiter) {
                let _ = tx.send(answer);
            }
        }
    }

    /// Ends the leases and waits due by now, if this node may speak; when
    /// the table next has something to end.
    pub(crate) fn poll(&self) -> Option<MonoTime> {
        let guard = self.guard();
        let mut state = self.state();
        let before = state.member.expired();
        let polled = state.member.poll(&guard, self.clock.now());
        self.metrics
            .expiries
            .inc_by(state.member.expired().saturating_sub(before));
        if polled.changed {
            // Not `changed()`: the expiry task must not wake itself.
            self.changes.send_modify(|v| *v = v.wrapping_add(1));
        }
        self.dispatch(&mut state);
        let lapsed = state.member.take_lapsed();
        drop(state);
        for lapse in lapsed {
            let held = lapse.held.as_secs_f64();
            self.metrics
                .prefixes
                .ended(&lapse.name, held, crate::metrics::Ended::Lapsed);
        }
        polled.next
    }

    /// Drops the table (this node stopped speaking, or starts again):
    /// waiting requests are answered `not_rebuilt`. Answers the table's
    /// new generation.
    pub(crate) fn drop_table(&self, speaking: Option<u64>) -> u64 {
        let mut state = self.state();
        state.member.drop_table(speaking, self.clock.now());
        self.dispatch(&mut state);
        self.changed(&state);
        state.member.generation()
    }

    /// Whether the table is rebuilt (it may still be barred from granting
    /// by the guard).
    pub fn is_rebuilt(&self) -> bool {
        self.state().member.is_rebuilt()
    }

    /// Whether the node is shutting down.
    pub(crate) fn is_stopping(&self) -> bool {
        self.state().member.is_stopping()
    }

    /// Stops speaking for good: the table is dropped and no rebuild starts
    /// again. The first step of a shutdown, before leadership is handed on.
    pub(crate) fn stop_speaking(&self) {
        let mut state = self.state();
        state.member.stop_speaking(self.clock.now());
        self.dispatch(&mut state);
        self.changed(&state);
    }

    /// A speaker of `term` read this node's report (see
    /// [`Member::deposed_by`](leasehold_protocol::Member::deposed_by)).
    pub(crate) fn deposed_by(&self, term: u64) {
        let mut state = self.state();
        if state.member.deposed_by(term, self.clock.now()) {
            self.read_by.send_replace(term);
        }
        self.dispatch(&mut state);
        self.changed(&state);
    }

    /// The highest term whose speaker has read this node's report.
    pub(crate) fn read_by_term(&self) -> u64 {
        *self.read_by.borrow()
    }
}
