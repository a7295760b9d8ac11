//! The speaker task, as `crates/node/src/speaker.rs` drives the protocol:
//! each watch turn tells the protocol's `Leadership` the term Raft says
//! this node leads and does what it answers (drop the table, start a
//! rebuild attempt, step down). An attempt confirms leadership with
//! ReadIndex, reads every member as the protocol's `Reads` says (which to
//! read again, when enough were read) and hands what it read to
//! `Member::rebuild`. The simulation carries the reads as messages and
//! learns at once when the network loses one.

use std::time::Duration;

use leasehold_protocol::{Attempt, MemberRead, ReadOut, Reading, Step};
use locktable::{Lock, LockInTransit, NodeId};

use crate::config::timing::{LEADER_LEASE_MS, READ_AGAIN_AFTER_MS, REBUILD_TIMEOUT_MS};
use crate::msg::{Event, Msg, ReportHeader, To};
use crate::node::{Phase, RebuildAttempt};
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
        let generation = node.member.generation();
        // The blank entry of this term committed and a quorum still knows
        // this leader: openraft's ReadIndex.
        let phase = if node.raft.start_read(id, t) {
            Phase::Confirming
        } else {
            Phase::Done(Attempt::Failed("not the leader, or handing over"))
        };
        node.attempt = Some(RebuildAttempt {
            id,
            number,
            term,
            generation,
            started: t,
            phase,
        });
        self.flush_raft(n);
    }

    /// The attempt `id` of node `n` that is reading, if it is.
    fn reading(&mut self, n: NodeId, id: u64) -> Option<&mut Reading> {
        match self.nodes.get_mut(&n)?.attempt.as_mut() {
            Some(RebuildAttempt {
                id: current,
                phase: Phase::Reading(reading),
                ..
            }) if *current == id => Some(&mut **reading),
            _ => None,
        }
    }

    /// ReadIndex of attempt `id` ended: read every member as the
    /// protocol's `Reading` says, or fail.
    pub(crate) fn read_confirmed(&mut self, n: NodeId, id: u64, confirmed: bool) {
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        let Some(attempt) = node.attempt.as_mut().filter(|a| a.id == id) else {
            return;
        };
        if !matches!(attempt.phase, Phase::Confirming) {
            return;
        }
        if !confirmed {
            attempt.phase = Phase::Done(Attempt::Failed("no quorum confirmed this leader"));
            return;
        }
        let (term, generation) = (attempt.term, attempt.generation);
        let now = node.mono(t);
        let members = node.member.config().members.clone();
        let reading = node.member.start_reading(term, generation, &members, now);
        let attempt = node.attempt.as_mut().expect("checked");
        attempt.phase = Phase::Reading(Box::new(reading));
        self.send_reads(n, id);
        self.at(t + REBUILD_TIMEOUT_MS, Event::ReadDeadline(n, id));
        self.reads_moved_on(n, id);
    }

    /// Does what attempt `id`'s `Reading` says: reads this node on the
    /// spot (by the attempt's term like any member), sends the read to
    /// another, or times a read again.
    fn send_reads(&mut self, n: NodeId, id: u64) {
        let t = self.t;
        while let Some(out) = self.reading(n, id).and_then(Reading::poll_read) {
            match out {
                ReadOut::Read(member) if member == n => {
                    let node = self.nodes.get_mut(&n).expect("member");
                    let now = node.mono(t);
                    let Some(Phase::Reading(reading)) = node.attempt.as_ref().map(|a| &a.phase)
                    else {
                        return;
                    };
                    let term = reading.term();
                    node.member.deposed_by(term, now);
                    let read = member_read(n, node.report_header(t), node.member.own_report(now));
                    if let Some(reading) = self.reading(n, id) {
                        reading.answered(read);
                    }
                }
                ReadOut::Read(member) => {
                    let term = self.reading(n, id).map_or(0, |r| r.term());
                    self.send_read(n, term, id, member);
                }
                ReadOut::ReadAgain { member, after } => {
                    let ms = u64::try_from(after.as_millis()).unwrap_or(u64::MAX);
                    debug_assert_eq!(ms, READ_AGAIN_AFTER_MS);
                    self.at(t + ms, Event::ReadAgain(n, id, member));
                }
            }
        }
    }

    fn send_read(&mut self, n: NodeId, term: u64, attempt: u64, member: NodeId) {
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

    /// Node `n` learns that its read of `member` failed: `Reading` says
    /// whether to read it again a while later.
    pub(crate) fn read_failed_at(&mut self, n: NodeId, id: u64, member: NodeId) {
        let t = self.t;
        let now = self.nodes[&n].mono(t);
        let Some(reading) = self.reading(n, id) else {
            return;
        };
        let Some(again) = reading.failed(member, "lost".into(), now) else {
            return;
        };
        self.send_reads(n, id);
        self.note(|| format!("node {n}'s read of node {member} fails, read again: {again}"));
        self.reads_moved_on(n, id);
    }

    /// Node `n` reads `member` again for attempt `id`.
    pub(crate) fn read_again(&mut self, n: NodeId, id: u64, member: NodeId) {
        if let Some(reading) = self.reading(n, id) {
            let term = reading.term();
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
        let t = self.t;
        let node = &self.nodes[&n];
        let now = node.mono(t);
        let count_from_send = self.config.sabotage.count_from_send;
        let Some(reading) = self.reading(n, id) else {
            return;
        };
        // Counted from the report's arrival: the speaker's table must not
        // end a lease before its holder's own count does.
        let counted_from = if count_from_send {
            reading.began()
        } else {
            now
        };
        let locks = locks.into_iter().map(|l| l.arrive(counted_from)).collect();
        if reading.answered(member_read(from, header, locks)) {
            self.send_reads(n, id);
            self.reads_moved_on(n, id);
        }
    }

    /// The reads of attempt `id` end when `Reading` says they stop.
    pub(crate) fn reads_moved_on(&mut self, n: NodeId, id: u64) {
        let t = self.t;
        let now = self.nodes[&n].mono(t);
        let Some(reading) = self.reading(n, id) else {
            return;
        };
        if reading.none_out() {
            self.finish_reads(n, id);
            return;
        }
        let wait = reading.stop_at(now).saturating_duration_since(now);
        if wait.is_zero() {
            self.note(|| format!("node {n}: reads end, enough members read"));
            self.finish_reads(n, id);
        } else {
            // Rounded up: the event asks `Reading` again, and must not come
            // back before the time it was set for.
            let ms = u64::try_from(wait.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX);
            self.at(t + ms, Event::ReadsMayStop(n, id));
        }
    }

    /// The reads ended (`Reading` says so, or the rebuild timeout):
    /// `Member::rebuild` rebuilds the table from them, unless leadership
    /// moved on; the nodes whose clients lost a lock to an older grant are
    /// told.
    pub(crate) fn finish_reads(&mut self, n: NodeId, id: u64) {
        let t = self.t;
        let short_hold = self.config.sabotage.short_strict_hold;
        let guard = self.guard(n);
        let node = self.nodes.get_mut(&n).expect("member");
        let Some(attempt) = node
            .attempt
            .as_mut()
            .filter(|a| a.id == id && matches!(a.phase, Phase::Reading(_)))
        else {
            return;
        };
        let Phase::Reading(reading) = std::mem::replace(
            &mut attempt.phase,
            Phase::Done(Attempt::Failed("superseded")),
        ) else {
            unreachable!("matched above");
        };
        let (input, _) = reading.finish(Duration::from_millis(t - attempt.started));
        let missing = input.missing.clone();
        let term = attempt.term;
        let mut now = node.mono(t);
        if short_hold {
            // A node that stamps its rebuild one leader lease early: the
            // strict hold, counted from it, ends that much sooner.
            now = node.mono(t.saturating_sub(LEADER_LEASE_MS));
        }
        let outcome = match node.member.rebuild(input, &guard, now) {
            Ok(done) => {
                if !done.report.all_seen {
                    self.history.missing_rebuilds.push(t);
                }
                for (owner, locks) in done.lost {
                    let ids = locks.iter().map(|l| l.id).collect();
                    if owner == n {
                        self.nodes.get_mut(&n).expect("member").member.lost(ids);
                    } else {
                        self.send(Some(n), To::Node(owner), Msg::Lost { ids });
                    }
                }
                self.note(|| format!("node {n}: rebuilt for term {term}, missing {missing:?}"));
                Attempt::Rebuilt
            }
            Err(failed) => failed,
        };
        let node = self.nodes.get_mut(&n).expect("member");
        if let Some(attempt) = node.attempt.as_mut().filter(|a| a.id == id) {
            attempt.phase = Phase::Done(outcome);
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
fn member_read(member: NodeId, header: ReportHeader, locks: Vec<Lock>) -> MemberRead {
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
    }
}
