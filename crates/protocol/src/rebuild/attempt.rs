//! One rebuild attempt from its start to its end: confirm that a quorum
//! still knows this leader, read every member as [`Reading`] says, count
//! what was read, settle its locks apart from the member, put the table in
//! place, and tell the members whose clients lost a lock to an older grant.
//!
//! The driver carries out what [`Rebuilding::poll`] says, in order, and
//! feeds back what came of it ([`Rebuilding::confirmed`],
//! [`Rebuilding::answered`], [`Rebuilding::failed`], [`Rebuilding::settled`],
//! and [`Rebuilding::timeout`] once [`Rebuilding::stop_at`] is past). It
//! decides nothing itself; the last output is always
//! [`AttemptOut::Ended`], the outcome for [`crate::Leadership`].

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use leasehold_api::RebuildReport;
use locktable::{Lock, MonoTime, NodeId};

use super::{MemberRead, ReadOut, Reading, RebuildFeed, RebuildJob, SettledRebuild};
use crate::guard::Guard;
use crate::leadership::Attempt;
use crate::member::Member;

/// What a driver does for a rebuild attempt.
#[derive(Debug)]
pub enum AttemptOut {
    /// Ask Raft whether a quorum still knows this leader (openraft's
    /// ReadIndex), giving up after `within`; then
    /// [`Rebuilding::confirmed`] or [`Rebuilding::not_confirmed`].
    Confirm {
        /// How long to wait for the answer.
        within: Duration,
    },
    /// Settle every read's locks into this feed as they arrive
    /// ([`RebuildFeed::add`]), where heavy work may run, rather than with
    /// the read ([`MemberRead::locks`]); hand it to [`RebuildJob::settle`]
    /// at [`AttemptOut::Settle`]. Comes before the first read.
    Collect(RebuildFeed),
    /// Read a member's report by the attempt's term (this member's own
    /// too), now or after a wait; then [`Rebuilding::answered`] or
    /// [`Rebuilding::failed`]. A read gives up at
    /// [`Rebuilding::read_deadline`].
    Read(ReadOut),
    /// Close the feed with the locks read, apart from the member, where
    /// heavy work may run ([`RebuildJob::settle`]); then
    /// [`Rebuilding::settled`].
    Settle(RebuildJob),
    /// The table was rebuilt and serves: what the rebuild did, for
    /// operators.
    Rebuilt(RebuildReport),
    /// Tell `member` (this one too) that its clients lost `locks`: the
    /// rebuild found an older grant of each name held longer.
    TellLost {
        /// The holder's node.
        member: NodeId,
        /// The locks it lost.
        locks: Vec<Lock>,
    },
    /// The attempt is over; nothing follows.
    Ended(Attempt),
}

/// Where an attempt is.
#[derive(Debug)]
enum Phase {
    Confirming,
    Reading(Box<Reading>),
    Settling,
    Over,
}

/// A rebuild attempt under way, for one term.
#[derive(Debug)]
pub struct Rebuilding {
    number: u64,
    term: u64,
    generation: u64,
    started: MonoTime,
    phase: Phase,
    out: VecDeque<AttemptOut>,
    /// The configuration's members, as confirmed.
    configuration: Vec<NodeId>,
    /// The members read that left the configuration, at the address each
    /// left from.
    departed: BTreeMap<NodeId, String>,
}

impl Member {
    /// Starts [`crate::Leadership`]'s attempt `number` to rebuild the table
    /// for `term` at `now`: first, the confirmation that a quorum knows
    /// this leader (the blank entry of the term committed), giving up after
    /// [`crate::MemberConfig::confirm_within`].
    pub fn start_attempt(&self, number: u64, term: u64, now: MonoTime) -> Rebuilding {
        Rebuilding {
            number,
            term,
            generation: self.generation(),
            started: now,
            phase: Phase::Confirming,
            out: VecDeque::from([AttemptOut::Confirm {
                within: self.config().confirm_within(),
            }]),
            configuration: Vec::new(),
            departed: BTreeMap::new(),
        }
    }
}

impl Rebuilding {
    /// [`crate::Leadership`]'s number for it.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// The term it rebuilds for.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The next thing to do, if any.
    pub fn poll(&mut self) -> Option<AttemptOut> {
        self.out.pop_front()
    }

    /// Whether it waits for the confirmation that a quorum knows this
    /// leader.
    pub fn is_confirming(&self) -> bool {
        matches!(self.phase, Phase::Confirming)
    }

    /// Whether it is over: [`AttemptOut::Ended`] was queued.
    pub fn is_over(&self) -> bool {
        matches!(self.phase, Phase::Over)
    }

    /// When the reads were sent, while they are under way.
    pub fn reading_began(&self) -> Option<MonoTime> {
        self.reading().map(Reading::began)
    }

    /// When every read gives up at the latest, while reads are under way.
    pub fn read_deadline(&self) -> Option<MonoTime> {
        self.reading().map(Reading::deadline)
    }

    /// A quorum confirmed this leader at `now`: read every member of
    /// `configuration` (the latest, both halves of a joint one and the
    /// learners: any of them may hold locks of its clients), this member
    /// first, and every member that left it lately
    /// ([`Member::departed_to_read`]), which may too. Answers the members
    /// that left whose time ran out: no rebuild reads them any more (their
    /// releases may stop).
    pub fn confirmed(
        &mut self,
        member: &mut Member,
        configuration: &[NodeId],
        guard: &Guard,
        now: MonoTime,
    ) -> Vec<NodeId> {
        if !matches!(self.phase, Phase::Confirming) {
            return Vec::new();
        }
        let (departed, ended) = member.departed_to_read(configuration, now);
        let mut members = configuration.to_vec();
        members.extend(departed.iter().map(|(id, _)| *id));
        self.configuration = configuration.to_vec();
        self.departed = departed.into_iter().collect();
        let reading = member.start_reading(self.term, self.generation, &members, now);
        self.phase = Phase::Reading(Box::new(reading));
        self.out.push_back(AttemptOut::Collect(member.start_feed()));
        self.moved_on(member, guard, now);
        ended
    }

    /// Where to read `id`, a member that left the configuration (read at
    /// the address it left from); `None` for a member of the
    /// configuration.
    pub fn departed_addr(&self, id: NodeId) -> Option<&str> {
        self.departed.get(&id).map(String::as_str)
    }

    /// No quorum confirmed this leader (`why`): the attempt fails.
    pub fn not_confirmed(&mut self, why: &'static str) {
        if matches!(self.phase, Phase::Confirming) {
            self.end(Attempt::Failed(why));
        }
    }

    /// `read.member` answered at `now`, its leases on this member's clock.
    /// A member its report names as gone lately, which this one did not
    /// see go (it joined or restarted since), is taken as departed and read
    /// too, at the address it left from (unless read already, or it
    /// handed its records over). An answer to no read still out is not
    /// taken (false).
    pub fn answered(
        &mut self,
        mut read: MemberRead,
        member: &mut Member,
        guard: &Guard,
        now: MonoTime,
    ) -> bool {
        let Phase::Reading(reading) = &mut self.phase else {
            return false;
        };
        for gone in std::mem::take(&mut read.departed) {
            let known = self.configuration.contains(&gone.member);
            let until = now + gone.left;
            if !known
                && member.departed.adopt(gone.member, &gone.addr, until, now)
                && reading.add(gone.member)
            {
                self.departed.insert(gone.member, gone.addr);
            }
        }
        let taken = reading.answered(read);
        if taken {
            self.moved_on(member, guard, now);
        } else {
            // A member adopted above is read all the same.
            self.take_reads();
        }
        taken
    }

    /// The read of `who` failed at `now` (`why`): [`Reading::failed`] says
    /// whether it is read again. `None` for a member with no read out.
    pub fn failed(
        &mut self,
        who: NodeId,
        why: String,
        member: &mut Member,
        guard: &Guard,
        now: MonoTime,
    ) -> Option<bool> {
        let Phase::Reading(reading) = &mut self.phase else {
            return None;
        };
        let again = reading.failed(who, why, now)?;
        self.moved_on(member, guard, now);
        Some(again)
    }

    /// When the reads stop, as of `now`, while they are under way: call
    /// [`Rebuilding::timeout`] then.
    pub fn stop_at(&mut self, now: MonoTime) -> Option<MonoTime> {
        match &mut self.phase {
            Phase::Reading(reading) => Some(reading.stop_at(now)),
            _ => None,
        }
    }

    /// Time passed: the reads end if their stop time is past at `now`.
    pub fn timeout(&mut self, member: &mut Member, guard: &Guard, now: MonoTime) {
        if self.stop_at(now).is_some_and(|stop| stop <= now) {
            self.finish_reads(member, guard, now);
        }
    }

    /// The locks read settled: put the table in place at `now`, unless
    /// leadership or the table moved on meanwhile. Answers whether the
    /// table now serves.
    pub fn settled(
        &mut self,
        settled: SettledRebuild,
        member: &mut Member,
        guard: &Guard,
        now: MonoTime,
    ) -> bool {
        if !matches!(self.phase, Phase::Settling) {
            return false;
        }
        let now = stamp(member, now);
        match member.finish_rebuild(settled, guard, now) {
            Ok(done) => {
                self.out.push_back(AttemptOut::Rebuilt(done.report));
                for (holder, locks) in done.lost {
                    self.out.push_back(AttemptOut::TellLost {
                        member: holder,
                        locks,
                    });
                }
                self.end(Attempt::Rebuilt);
                true
            }
            Err(failed) => {
                self.end(failed);
                false
            }
        }
    }

    /// The reading's reads to send, queued; the reads end if nothing more
    /// is to be waited for at `now`.
    fn moved_on(&mut self, member: &mut Member, guard: &Guard, now: MonoTime) {
        self.take_reads();
        self.timeout(member, guard, now);
    }

    fn take_reads(&mut self) {
        if let Phase::Reading(reading) = &mut self.phase {
            while let Some(read) = reading.poll_read() {
                self.out.push_back(AttemptOut::Read(read));
            }
        }
    }

    /// The reads end: count what they read and hand the locks out to
    /// settle, unless leadership moved on.
    fn finish_reads(&mut self, member: &mut Member, guard: &Guard, now: MonoTime) {
        if !matches!(self.phase, Phase::Reading(_)) {
            return;
        }
        let Phase::Reading(reading) = std::mem::replace(&mut self.phase, Phase::Settling) else {
            unreachable!("matched above");
        };
        let (input, unread) = reading.finish(now.saturating_duration_since(self.started));
        for (missing, why) in unread {
            tracing::warn!(member = missing, e = %why, "member missing at the rebuild");
        }
        match member.begin_rebuild(input, guard, stamp(member, now)) {
            Ok(job) => self.out.push_back(AttemptOut::Settle(job)),
            Err(failed) => self.end(failed),
        }
    }

    fn end(&mut self, outcome: Attempt) {
        self.phase = Phase::Over;
        self.out.push_back(AttemptOut::Ended(outcome));
    }

    fn reading(&self) -> Option<&Reading> {
        match &self.phase {
            Phase::Reading(reading) => Some(reading),
            _ => None,
        }
    }
}

/// The time a rebuild stamps its table with: `now`, or one leader lease
/// earlier when sabotaged with `short_strict_hold` (the strict hold,
/// counted from it, then ends that much sooner).
fn stamp(member: &Member, now: MonoTime) -> MonoTime {
    if member.config().sabotage.short_strict_hold {
        now - member.config().leader_lease
    } else {
        now
    }
}
