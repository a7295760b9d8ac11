//! The speaker task, as `crates/node/src/speaker.rs` drives the protocol:
//! each watch turn tells the protocol's `Leadership` the term Raft says
//! this node leads and does what it answers (drop the table, start a
//! rebuild attempt, step down). An attempt confirms leadership with
//! ReadIndex, reads every member as the protocol's `Reads` says (which to
//! read again, when enough were read) and hands what it read to
//! `Member::rebuild`. The simulation carries the reads as messages and
//! learns at once when the network loses one.

use leasehold_protocol::{
    Attempt, AttemptOut, Guard, Member, MemberRead, ReadOut, Rebuilding, Step,
};
use locktable::{Lock, LockInTransit, MonoTime, NodeId};

use crate::config::timing::{READ_AGAIN_AFTER_MS, REBUILD_TIMEOUT_MS};
use crate::msg::{Event, Msg, ReportHeader, To};
use crate::node::RebuildAttempt;
use crate::world::World;

impl World {
    /// Node `n`'s guard as it builds it from its Raft, at the current time.
    pub(crate) fn guard(&self, n: NodeId) -> leasehold_protocol::Guard {
        self.nodes[&n].guard()
    }

    /// `watch_leadership`, one turn: tell `Leadership` the term this node
    /// leads, take a finished attempt's outcome, and do what it says.
    pub(crate) fn watch(&mut self, n: NodeId) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        let term = if node.member.is_stopping() {
            None
        } else {
            node.raft.leader_term()
        };
        if let Some(step) = node.lead.leads(term) {
            node.attempt = None;
            match term {
                Some(term) => self.note(|| format!("node {n}: leads term {term}, rebuilding")),
                None => self.note(|| format!("node {n}: not the speaker")),
            }
            self.carry_out(n, step);
        }
        let node = self.nodes.get_mut(&n).expect("member");
        if let Some((term, number, outcome)) = node.ended_attempt() {
            if let Attempt::Failed(why) = &outcome {
                self.report.failed_rebuilds += 1;
                let failures = self.nodes[&n].lead.failures() + 1;
                self.note(|| {
                    format!("node {n}: rebuild of term {term} failed ({why}), {failures} so far")
                });
            }
            let node = self.nodes.get_mut(&n).expect("member");
            let now = node.mono(t);
            if let Some(step) = node.lead.attempt_ended(number, outcome, now) {
                self.carry_out(n, step);
            }
        }
        let guard = self.guard(n);
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        let (rebuilt, may_speak) = (node.member.is_rebuilt(), node.member.may_speak(&guard, now));
        if let Some(step) = node.lead.tick(rebuilt, may_speak, now) {
            self.carry_out(n, step);
        }
    }

    /// Does what `Leadership` said.
    fn carry_out(&mut self, n: NodeId, step: Step) {
        match step {
            Step::Drop(term) => self.drop_table(n, term),
            Step::Rebuild { term, attempt } => self.start_attempt(n, term, attempt),
            Step::StepDown { term, why } => self.step_down(n, term, &why),
        }
    }

    /// Drops the table, then hands leadership to another member
    /// (`step_down`): openraft's transfer lets the target win at once.
    fn step_down(&mut self, n: NodeId, term: u64, why: &str) {
        self.report.step_downs += 1;
        self.drop_table(n, Some(term));
        let node = self.nodes.get_mut(&n).expect("member");
        let to = node.raft.transfer_target();
        if let Some(to) = to {
            node.raft.transfer_leader(to);
        }
        self.note(|| {
            format!("node {n}: steps down from term {term} ({why}), hands over to {to:?}")
        });
        self.flush_raft(n);
    }

    /// Drops node `n`'s table, now speaking for `term`: waiting requests
    /// are answered `not_rebuilt` and its grants are kept as `Granted`.
    pub(crate) fn drop_table(&mut self, n: NodeId, term: Option<u64>) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        node.member.drop_table(term, now);
        self.dispatch(n);
    }

    /// Starts `Leadership`'s attempt `number`: the simulation numbers its
    /// reads' messages apart, across the nodes and their restarts.
    fn start_attempt(&mut self, n: NodeId, term: u64, number: u64) {
        let t = self.t;
        self.next_attempt += 1;
        let id = self.next_attempt;
        let node = self.nodes.get_mut(&n).expect("member");
        let rebuilding = node.member.start_attempt(number, term, node.mono(t));
        node.attempt = Some(RebuildAttempt {
            id,
            rebuilding,
            feed: None,
            ended: None,
        });
        self.drive(n, id);
        self.flush_raft(n);
    }

    /// Feeds node `n`'s attempt `id`, if it is the one under way, with `f`
    /// (given the node's `Member`, guard and time).
    fn with_attempt<R>(
        &mut self,
        n: NodeId,
        id: u64,
        f: impl FnOnce(&mut Rebuilding, &mut Member, &Guard, MonoTime) -> R,
    ) -> Option<R> {
        let guard = self.guard(n);
        let t = self.t;
        let node = self.nodes.get_mut(&n)?;
        let now = node.mono(t);
        let attempt = node.attempt.as_mut().filter(|a| a.id == id)?;
        Some(f(&mut attempt.rebuilding, &mut node.member, &guard, now))
    }

    /// Carries out what node `n`'s attempt `id` says, until it waits.
    fn drive(&mut self, n: NodeId, id: u64) {
        let t = self.t;
        while let Some(out) = self.with_attempt(n, id, |a, _, _, _| a.poll()).flatten() {
            match out {
                // The blank entry of this term committed and a quorum still
                // knows this leader: openraft's ReadIndex.
                AttemptOut::Confirm { .. } => {
                    let node = self.nodes.get_mut(&n).expect("member");
                    if !node.raft.start_read(id, t) {
                        self.with_attempt(n, id, |a, _, _, _| {
                            a.not_confirmed("not the leader, or handing over");
                        });
                    }
                }
                // This node's own report, read by the attempt's term like
                // any member's.
                AttemptOut::Collect(feed) => {
                    let node = self.nodes.get_mut(&n).expect("member");
                    if let Some(attempt) = node.attempt.as_mut().filter(|a| a.id == id) {
                        attempt.feed = Some(feed);
                    }
                }
                AttemptOut::Read(ReadOut::Read(member)) if member == n => {
                    self.with_attempt(n, id, |a, m, _, now| m.deposed_by(a.term(), now));
                    let node = &self.nodes[&n];
                    let now = node.mono(t);
                    let header = node.report_header(t);
                    let locks = node.member.own_report(now);
                    let locks = self.feed(n, id, locks, now);
                    let read = member_read(n, header, locks);
                    self.with_attempt(n, id, |a, m, guard, now| a.answered(read, m, guard, now));
                }
                AttemptOut::Read(ReadOut::Read(member)) => {
                    let term = self.with_attempt(n, id, |a, _, _, _| a.term()).unwrap_or(0);
                    self.send_read(n, term, id, member);
                }
                AttemptOut::Read(ReadOut::ReadAgain { member, after }) => {
                    let ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
                    debug_assert_eq!(ms, READ_AGAIN_AFTER_MS);
                    self.at(t + ms, Event::ReadAgain(n, id, member));
                }
                AttemptOut::Settle(job) => {
                    let node = self.nodes.get_mut(&n).expect("member");
                    let attempt = node.attempt.as_mut().filter(|a| a.id == id);
                    let feed = attempt.and_then(|a| a.feed.take());
                    let settled = job.settle(feed.expect("the feed came before the reads"));
                    self.with_attempt(n, id, |a, m, guard, now| a.settled(settled, m, guard, now));
                }
                AttemptOut::Rebuilt(report) => {
                    self.history.rebuilds.push(t);
                    if !report.all_seen {
                        self.history.missing_rebuilds.push(t);
                    }
                    let (term, missing) = (report.term, report.members_missing);
                    self.note(|| format!("node {n}: rebuilt for term {term}, missing {missing:?}"));
                    if report.held_back_ms > 0 {
                        self.start_late_reads(n, term, &missing);
                    }
                }
                AttemptOut::TellLost { member, locks } => {
                    let ids = locks.iter().map(|l| l.id).collect();
                    if member == n {
                        self.nodes.get_mut(&n).expect("member").member.lost(ids);
                    } else {
                        self.send(Some(n), To::Node(member), Msg::Lost { ids });
                    }
                }
                AttemptOut::Ended(outcome) => {
                    let node = self.nodes.get_mut(&n).expect("member");
                    if let Some(attempt) = node.attempt.as_mut().filter(|a| a.id == id) {
                        attempt.ended = Some(outcome);
                    }
                }
            }
        }
    }

    /// ReadIndex of attempt `id` ended: read every member, or fail.
    pub(crate) fn read_confirmed(&mut self, n: NodeId, id: u64, confirmed: bool) {
        let t = self.t;
        let members = self.nodes[&n].member.config().members.clone();
        let reading = self.with_attempt(n, id, |a, m, guard, now| {
            if !a.is_confirming() {
                return None;
            }
            if confirmed {
                // The simulation never changes membership: no member left.
                a.confirmed(m, &members, guard, now);
            } else {
                a.not_confirmed("no quorum confirmed this leader");
            }
            Some(a.reading_began().is_some())
        });
        let Some(reading) = reading.flatten() else {
            return;
        };
        self.drive(n, id);
        if reading {
            self.at(t + REBUILD_TIMEOUT_MS, Event::ReadDeadline(n, id));
            self.reads_moved_on(n, id);
        }
    }

    pub(crate) fn send_read(&mut self, n: NodeId, term: u64, attempt: u64, member: NodeId) {
        let msg = Msg::ReadReport {
            leader: n,
            term,
            attempt,
        };
        self.send(Some(n), To::Node(member), msg);
    }

    /// The read of `member` by node `n`'s rebuild attempt `id` failed: the
    /// network lost it or its answer, or the member was down. The speaker
    /// learns so as soon as it runs.
    pub(crate) fn read_lost(&mut self, n: NodeId, id: u64, member: NodeId) {
        self.at(self.t, Event::ReadFailed(n, id, member));
    }

    /// Node `n` learns that its read of `member` failed: the attempt says
    /// whether to read it again a while later.
    pub(crate) fn read_failed_at(&mut self, n: NodeId, id: u64, member: NodeId) {
        if self.late_read_failed(n, id, member) {
            return;
        }
        let again = self
            .with_attempt(n, id, |a, m, guard, now| {
                a.failed(member, "lost".into(), m, guard, now)
            })
            .flatten();
        let Some(again) = again else {
            return;
        };
        self.drive(n, id);
        self.note(|| format!("node {n}'s read of node {member} fails, read again: {again}"));
        self.reads_moved_on(n, id);
    }

    /// Node `n` reads `member` again for attempt `id`.
    pub(crate) fn read_again(&mut self, n: NodeId, id: u64, member: NodeId) {
        if self.late_read_again(n, id, member) {
            return;
        }
        let term = self
            .with_attempt(n, id, |a, _, _, _| a.reading_began().map(|_| a.term()))
            .flatten();
        if let Some(term) = term {
            self.send_read(n, term, id, member);
        }
    }

    /// A member's report for attempt `id` arrived: its leases counted from
    /// now.
    pub(crate) fn report_arrived(
        &mut self,
        n: NodeId,
        from: NodeId,
        id: u64,
        header: ReportHeader,
        locks: Vec<LockInTransit>,
    ) {
        let locks = match self.late_report_arrived(n, from, id, header, locks) {
            Some(locks) => locks,
            None => return,
        };
        let count_from_send = self.config.sabotage.count_from_send;
        let began = self.with_attempt(n, id, |a, _, _, now| Some((a.reading_began()?, now)));
        let Some((began, now)) = began.flatten() else {
            return;
        };
        // Counted from the report's arrival: the speaker's table must not
        // end a lease before its holder's own count does.
        let counted_from = if count_from_send { began } else { now };
        let locks = locks.into_iter().map(|l| l.arrive(counted_from)).collect();
        let locks = self.feed(n, id, locks, now);
        let taken = self.with_attempt(n, id, |a, m, guard, now| {
            Some(a.answered(member_read(from, header, locks), m, guard, now))
        });
        if taken.flatten() == Some(true) {
            self.drive(n, id);
            self.reads_moved_on(n, id);
        }
    }

    /// Settles `locks`, arrived at `now`, into the feed of node `n`'s
    /// attempt `id` as they arrive, as a node does; answers the locks left
    /// for the read (none once they went to the feed).
    fn feed(&mut self, n: NodeId, id: u64, locks: Vec<Lock>, now: MonoTime) -> Vec<Lock> {
        let node = self.nodes.get_mut(&n).expect("member");
        let attempt = node.attempt.as_mut().filter(|a| a.id == id);
        match attempt.and_then(|a| a.feed.as_mut()) {
            Some(feed) => {
                feed.add(locks, now);
                Vec::new()
            }
            None => locks,
        }
    }

    /// The reads of attempt `id` end when the attempt says they stop: it
    /// is asked again then.
    pub(crate) fn reads_moved_on(&mut self, n: NodeId, id: u64) {
        let t = self.t;
        self.with_attempt(n, id, |a, m, guard, now| a.timeout(m, guard, now));
        self.drive(n, id);
        let wait = self
            .with_attempt(n, id, |a, _, _, now| {
                a.stop_at(now)
                    .map(|stop| stop.saturating_duration_since(now))
            })
            .flatten();
        if let Some(wait) = wait.filter(|w| !w.is_zero()) {
            // Rounded up: the event asks the attempt again, and must not
            // come back before the time it was set for.
            let ms = u64::try_from(wait.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
            self.at(t + ms, Event::ReadsMayStop(n, id));
        }
    }

    /// As a member: a speaker of `term` reads node `n`'s report. Unless
    /// the read carries no term (sabotaged), a member still speaking for
    /// an older term drops its table first (`deposed_by`).
    pub(crate) fn read_report(&mut self, n: NodeId, leader: NodeId, term: u64, attempt: u64) {
        let t = self.t;
        if !self.config.sabotage.no_term_fence {
            let node = self.nodes.get_mut(&n).expect("member");
            let now = node.mono(t);
            let was = node.member.speaking();
            node.member.deposed_by(term, now);
            if was.is_some_and(|own| own < term) {
                self.note(|| {
                    format!("node {n}: read by the speaker of term {term}, drops its table")
                });
            }
            self.dispatch(n);
        }
        let node = &self.nodes[&n];
        let now = node.mono(t);
        let (held, granted) = node.member.report(now);
        let mut locks: Vec<LockInTransit> = held.map(|l| l.to_lock().in_transit(now)).collect();
        locks.extend(granted.iter().map(|l| l.in_transit(now)));
        let (from, header) = (n, node.report_header(t));
        let report = Msg::Report {
            from,
            attempt,
            header,
            locks,
        };
        self.send(Some(n), To::Node(leader), report);
    }
}

/// `member`'s report as the rebuild takes it: its header, and its locks on
/// the reader's clock.
pub(crate) fn member_read(member: NodeId, header: ReportHeader, locks: Vec<Lock>) -> MemberRead {
    let ReportHeader {
        uptime,
        first_start,
        max_lease,
        copies,
    } = header;
    MemberRead {
        member,
        max_lease,
        copies,
        uptime: (!first_start).then_some(uptime),
        locks,
        departed: Vec::new(),
    }
}
