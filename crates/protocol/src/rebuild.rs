//! The rebuild: which members a new speaker reads, when it has read
//! enough, and the table it rebuilds from what it read.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use leasehold_api::RebuildReport;
use locktable::{Lock, MonoTime, NodeId, RebuildError, RebuildFrom, Settled};

use crate::config::RebuildMode;
use crate::guard::Guard;
use crate::leadership::Attempt;
use crate::member::Member;

mod attempt;
mod feed;
mod late;
mod reading;

pub use attempt::{AttemptOut, Rebuilding};
pub use feed::RebuildFeed;
pub use late::LateRead;
pub use reading::{ReadOut, Reading};

/// How long a rebuild waits before it reads again a member whose read
/// failed.
pub const READ_AGAIN_AFTER: Duration = Duration::from_millis(50);

/// A rebuild's reads of every member.
///
/// A member that does not answer, or restarted less than the longest lease
/// ago (its memory of its clients' locks is incomplete), is missing.
///
/// Every grant answered to a client is on record with `copies` members
/// (the fewest any member read runs with, the reader's own included). Once
/// the members not read yet, with those missing already, are fewer, the
/// members read have seen every grant ([`Reads::enough`]). A member whose
/// read failed is read again until the deadline only while that is not so:
/// then each one read makes the difference. Once it is, the reads wait for
/// the members that have not answered at most [`Reads::straggler_wait`]
/// more, so that a healthy member is read (and the report names no member
/// missing that was not) while a host that is gone, whose connections go
/// unanswered, costs that much rather than the whole timeout.
#[derive(Debug, Clone)]
pub struct Reads {
    copies: usize,
    max_lease: Duration,
    deadline: MonoTime,
    /// Until when a failed read is read again (the deadline, unless
    /// [`Reads::reread_for`] says less).
    reread_until: MonoTime,
    straggler_wait: Duration,
    /// When the members read first covered every grant.
    enough_since: Option<MonoTime>,
    members: Vec<NodeId>,
    read: BTreeSet<NodeId>,
    /// Members read but restarted too recently.
    restarted: Vec<NodeId>,
    /// Members whose first read has not ended.
    unanswered: BTreeSet<NodeId>,
    /// Members whose last read failed, with why.
    failing: BTreeMap<NodeId, String>,
}

/// The share of the rebuild timeout the reads wait for members that have
/// not answered once the others cover every grant.
pub const STRAGGLER_SHARE: u32 = 4;

impl Reads {
    /// Reads of `members` (every member, this one's included) until
    /// `deadline` (`timeout` after they start), by a speaker whose longest
    /// lease is `max_lease` and whose `--copies` is `copies`.
    pub fn new(
        members: &[NodeId],
        copies: usize,
        max_lease: Duration,
        deadline: MonoTime,
        timeout: Duration,
    ) -> Self {
        Reads {
            copies,
            max_lease,
            deadline,
            reread_until: deadline,
            straggler_wait: timeout / STRAGGLER_SHARE,
            enough_since: None,
            members: members.to_vec(),
            read: BTreeSet::new(),
            restarted: Vec::new(),
            unanswered: members.iter().copied().collect(),
            failing: BTreeMap::new(),
        }
    }

    /// Reads a failed member again, and waits for one that has not
    /// answered, only for `span` after the reads began (`timeout` before
    /// the deadline), not to the deadline: for a strict rebuild, where a
    /// member missed costs a hold (renewals go on) and waiting for a dead
    /// one costs every holder its renewals meanwhile.
    pub fn reread_for(mut self, span: Duration, timeout: Duration) -> Self {
        let began = self.deadline - timeout;
        self.reread_until = (began + span).min(self.deadline);
        self
    }

    /// When the reads end at the latest: every read's own timeout.
    pub fn deadline(&self) -> MonoTime {
        self.deadline
    }

    /// The members to read first: all of them.
    pub fn members(&self) -> &[NodeId] {
        &self.members
    }

    /// Reads `member` too: one another member saw leave the cluster
    /// lately, which may hold the only other record of a lock. Nothing if
    /// it is read already.
    pub fn add(&mut self, member: NodeId) {
        if !self.members.contains(&member) {
            self.members.push(member);
            self.unanswered.insert(member);
        }
    }

    /// How long the reads wait for members that have not answered once
    /// the others cover every grant: a quarter of the rebuild timeout.
    pub fn straggler_wait(&self) -> Duration {
        self.straggler_wait
    }

    /// `member` answered with a report from a process up for `uptime`
    /// (`first_start`: its data directory is new), whose longest lease is
    /// `max_lease` and whose `--copies` is `copies`.
    pub fn answered(
        &mut self,
        member: NodeId,
        uptime: Duration,
        first_start: bool,
        max_lease: Duration,
        copies: usize,
    ) {
        self.unanswered.remove(&member);
        self.failing.remove(&member);
        self.copies = self.copies.min(copies);
        let longest = self.max_lease.max(max_lease);
        if !first_start && uptime < longest {
            self.restarted.push(member);
        }
        self.read.insert(member);
    }

    /// A read of `member` failed at `now` (`why`); answers whether to read
    /// it again after [`READ_AGAIN_AFTER`]: while the members read do not
    /// cover every grant without it, and the next read ends before the
    /// deadline (or the end of [`Reads::reread_for`]).
    pub fn failed(&mut self, member: NodeId, why: String, now: MonoTime) -> bool {
        self.unanswered.remove(&member);
        self.failing.insert(member, why);
        !self.enough() && !self.settled() && now + READ_AGAIN_AFTER < self.reread_until
    }

    /// Whether the members that restarted lately are as many as copies
    /// already: then no read can make the rebuild one that saw every grant.
    fn settled(&self) -> bool {
        self.restarted.len() >= self.copies
    }

    /// Whether the members read have seen every grant: those not read yet
    /// (unanswered or failing), with those that restarted lately, are
    /// fewer than copies, so no read can change the outcome.
    pub fn enough(&self) -> bool {
        self.unanswered.len() + self.failing.len() + self.restarted.len() < self.copies
    }

    /// When the reads stop, as of `now`. Once the members read cover every
    /// grant: at once if every member's first read has ended, else
    /// [`straggler_wait`] after they first did. Otherwise when every
    /// member's first read has ended if the members that restarted lately
    /// are as many as copies (no read can make the rebuild one that saw
    /// every grant, but each member read puts its locks in the table), else
    /// at the deadline (failed reads are read again meanwhile).
    ///
    /// [`straggler_wait`]: Reads::straggler_wait
    pub fn stop_at(&mut self, now: MonoTime) -> MonoTime {
        if !self.enough() {
            // A member that answered with fewer copies can make the reads
            // not enough again: the wait starts over if they become so.
            self.enough_since = None;
            return if self.settled() && self.unanswered.is_empty() {
                now
            } else {
                self.reread_until
            };
        }
        if self.unanswered.is_empty() {
            return now;
        }
        let since = *self.enough_since.get_or_insert(now);
        (since + self.straggler_wait).min(self.deadline)
    }

    /// The members read, and those missing: restarted lately, or not read
    /// (whatever stopped the reads), each with why it was not read.
    pub fn finish(self) -> (Vec<NodeId>, Vec<NodeId>, Vec<(NodeId, String)>) {
        let mut missing = self.restarted;
        let mut unread = Vec::new();
        for id in &self.members {
            if !self.read.contains(id) {
                let why = self
                    .failing
                    .get(id)
                    .cloned()
                    .unwrap_or_else(|| "no answer".to_string());
                unread.push((*id, why));
                missing.push(*id);
            }
        }
        (self.read.into_iter().collect(), missing, unread)
    }
}

/// One member's report, as the rebuild uses it.
#[derive(Debug, Clone)]
pub struct MemberRead {
    /// The member.
    pub member: NodeId,
    /// Its `--max-lease`.
    pub max_lease: Duration,
    /// Its `--copies`.
    pub copies: usize,
    /// How long its process had been up when it reported, unless this is
    /// its data directory's first start (`None`: it forgot nothing). A
    /// member that restarted has every record it took since it started.
    pub uptime: Option<Duration>,
    /// Its clients' locks, copies and grants, each lease counted from when
    /// the part of the report it came in arrived, unless they went into the
    /// attempt's [`RebuildFeed`] as they arrived (then none here).
    pub locks: Vec<Lock>,
    /// The members it says left the configuration lately, each with how
    /// long rebuilds still read it.
    pub departed: Vec<crate::Gone>,
}

/// What a rebuild attempt read.
#[derive(Debug, Clone)]
pub struct RebuildInput {
    /// The term it rebuilds for.
    pub term: u64,
    /// The table's generation when the attempt began.
    pub generation: u64,
    /// The reports read.
    pub reads: Vec<MemberRead>,
    /// The members missing.
    pub missing: Vec<NodeId>,
    /// How long the attempt has taken so far.
    pub took: Duration,
}

/// A rebuilt table's outcome.
#[derive(Debug, Clone)]
pub struct RebuildDone {
    /// What the rebuild did, for operators.
    pub report: RebuildReport,
    /// Locks a rebuild found another grant held longer, by the node whose
    /// client held them: to be told they are lost.
    pub lost: BTreeMap<NodeId, Vec<Lock>>,
}

/// How long a grant the members read may not have seen can still run,
/// when `missing` members (`restarted` of them read, up as long as each
/// says) were missed and a grant is on record with `copies` members.
///
/// A member that restarted has every record it took since its start: it
/// lost only grants made (or last renewed) before. A grant is unseen only
/// if the members not read, with those that restarted after it was made,
/// are as many as its copies: only grants older than the start of the
/// `copies − unread`-th most recent restart, which end within the longest
/// lease less that member's uptime. With as many members unread as copies,
/// any grant may be unseen: the whole longest lease.
pub fn at_risk_for(
    missing: &[NodeId],
    restarted: &[Duration],
    copies: usize,
    longest_lease: Duration,
) -> Duration {
    let unread = missing.len().saturating_sub(restarted.len());
    let Some(k) = copies.checked_sub(unread).filter(|k| *k >= 1) else {
        return longest_lease;
    };
    let mut ups = restarted.to_vec();
    ups.sort_unstable();
    match ups.get(k - 1) {
        Some(up) => longest_lease.saturating_sub(*up),
        None => Duration::ZERO,
    }
}

/// What a rebuild counted before its locks settle: its report's figures.
#[derive(Debug)]
struct Counted {
    term: u64,
    members_read: Vec<NodeId>,
    missing: Vec<NodeId>,
    all_seen: bool,
    held_back: Option<Duration>,
    took: Duration,
}

/// A rebuild read and counted, its locks still to settle apart from the
/// member ([`RebuildJob::settle`], the heavy part: for another thread,
/// while the member answers).
#[derive(Debug)]
pub struct RebuildJob {
    counted: Counted,
    generation: u64,
    /// Each member's locks that came with its read rather than through
    /// the feed.
    locks: Vec<Vec<Lock>>,
    /// Sabotage: the reports settle as if none were read.
    skip: bool,
    hold_new_grants_until: Option<MonoTime>,
    now: MonoTime,
}

/// A rebuild whose locks settled, for [`Member::finish_rebuild`].
#[derive(Debug)]
pub struct SettledRebuild {
    counted: Counted,
    settled: Result<Settled, RebuildError>,
}

impl RebuildJob {
    /// Closes the attempt's `feed` (the locks settled as they arrived)
    /// with the locks that came with the reads: a table of their own.
    pub fn settle(self, mut feed: RebuildFeed) -> SettledRebuild {
        for locks in self.locks {
            feed.add(locks, self.now);
        }
        let mut settling = feed.into_settling();
        if self.skip {
            settling.clear();
        }
        let from = RebuildFrom {
            generation: self.generation,
            epoch: self.counted.term,
            locks: Vec::new(),
            hold_new_grants_until: self.hold_new_grants_until,
            seen_all: self.counted.all_seen,
        };
        SettledRebuild {
            settled: settling.finish(from, self.now),
            counted: self.counted,
        }
    }
}

impl Member {
    /// Where a rebuild's reports settle as they arrive: from here on, the
    /// releases this member hears are applied when the table is put in
    /// place (a report read before its release is not kept).
    pub fn start_feed(&mut self) -> RebuildFeed {
        let kinds_unread = self.config().sabotage.kinds_unread;
        RebuildFeed::new(self.table.begin_rebuild().settling(), kinds_unread)
    }

    /// The reads of a rebuild starting at `now` of `members` (every member
    /// of the latest configuration, learners and this one included, and
    /// the members that left lately): until the rebuild timeout, a failed
    /// read read again while it matters. In strict mode only for a
    /// [`STRAGGLER_SHARE`] of the timeout: a member missed costs a hold,
    /// which renewals outlast, while a dead member waited for to the
    /// timeout costs every holder its renewals meanwhile.
    pub fn start_reads(&mut self, members: &[NodeId], now: MonoTime) -> Reads {
        let timeout = self.config().rebuild_timeout;
        let copies = self.counted_copies(now);
        let reads = Reads::new(
            members,
            copies,
            self.config().lease.max,
            now + timeout,
            timeout,
        );
        match self.config().rebuild_mode {
            RebuildMode::Strict => reads.reread_for(timeout / STRAGGLER_SHARE, timeout),
            RebuildMode::Proceed => reads,
        }
    }

    /// Until when rebuilds read a member that left the configuration at
    /// `now`, or count it missing: it may hold the only other record of a
    /// lock for as long as a lease runs, and a rebuild under way as it
    /// left reads for up to the rebuild timeout more.
    pub fn departed_until(&self, now: MonoTime) -> MonoTime {
        now + self.config().lease.max + self.config().rebuild_timeout
    }

    /// Rebuilds the table for `input.term` from what was read, unless
    /// leadership or the table moved on meanwhile: [`Member::start_feed`],
    /// [`Member::begin_rebuild`], [`RebuildJob::settle`] and
    /// [`Member::finish_rebuild`] at once.
    pub fn rebuild(
        &mut self,
        input: RebuildInput,
        guard: &Guard,
        now: MonoTime,
    ) -> Result<RebuildDone, Attempt> {
        let feed = self.start_feed();
        let job = self.begin_rebuild(input, guard, now)?;
        self.finish_rebuild(job.settle(feed), guard, now)
    }

    /// Counts what a rebuild for `input.term` read, and takes what settling
    /// its locks needs of the table, unless leadership moved on.
    ///
    /// Every grant answered to a client is on record with `copies`
    /// members: a rebuild that missed fewer has read every one of them.
    /// Otherwise a lease granted before this rebuild that it may not have
    /// seen ends by `now +` [`at_risk_for`] (at most the longest lease);
    /// an old speaker missing from the rebuild may have granted until its
    /// guard ran out, at most one leader lease before this term began:
    /// strict mode holds new grants back that long.
    pub fn begin_rebuild(
        &mut self,
        mut input: RebuildInput,
        guard: &Guard,
        now: MonoTime,
    ) -> Result<RebuildJob, Attempt> {
        let skip = self.config().sabotage.skip_rebuild;
        if skip {
            input.reads.clear();
            input.missing.clear();
        }
        let our_lease = self.config().lease.max;
        let mut longest_lease = our_lease;
        let mut fewest_copies = self.counted_copies(now);
        let mut members_read = Vec::with_capacity(input.reads.len());
        let mut locks = Vec::with_capacity(input.reads.len());
        // The members read that count as missing restarted lately: how
        // long each has been up.
        let mut restarted: Vec<Duration> = Vec::new();
        for read in input.reads {
            if input.missing.contains(&read.member) {
                restarted.push(read.uptime.unwrap_or_default());
            }
            members_read.push(read.member);
            if read.max_lease != our_lease {
                tracing::error!(
                    member = read.member,
                    theirs_ms = read.max_lease.as_millis() as u64,
                    ours_ms = our_lease.as_millis() as u64,
                    "members run with different --max-lease: the strict hold covers the longest \
                     of the members read, not of a missing one; run one value cluster-wide"
                );
            }
            longest_lease = longest_lease.max(read.max_lease);
            if read.copies < fewest_copies {
                tracing::info!(
                    member = read.member,
                    theirs = read.copies,
                    ours = fewest_copies,
                    "a member counts fewer copies (a grant made before the count rose, or \
                     another --copies): the rebuild counts on the fewest of the members read"
                );
            }
            fewest_copies = fewest_copies.min(read.copies);
            locks.push(read.locks);
        }
        let missing = input.missing;
        let all_seen = missing.len() < fewest_copies;
        let held_back = match self.config().rebuild_mode {
            RebuildMode::Strict if !all_seen => Some(
                at_risk_for(&missing, &restarted, fewest_copies, longest_lease)
                    + self.longest_leader_lease(),
            ),
            _ => None,
        };
        let term = input.term;
        self.still_leading(term, guard)?;
        Ok(RebuildJob {
            counted: Counted {
                term,
                members_read,
                missing,
                all_seen,
                held_back,
                took: input.took,
            },
            generation: input.generation,
            locks,
            skip,
            hold_new_grants_until: held_back.map(|hold| now + hold),
            now,
        })
    }

    /// Puts a settled rebuild's table in place, unless leadership or the
    /// table moved on while it settled, and reports what it did.
    pub fn finish_rebuild(
        &mut self,
        settled: SettledRebuild,
        guard: &Guard,
        now: MonoTime,
    ) -> Result<RebuildDone, Attempt> {
        let SettledRebuild { counted, settled } = settled;
        let Counted {
            term,
            mut members_read,
            mut missing,
            all_seen,
            held_back,
            took,
        } = counted;
        self.still_leading(term, guard)?;
        let rebuilt = settled
            .and_then(|settled| self.table.install(settled, now))
            .map_err(|e| match e {
                RebuildError::Stale(_) => {
                    Attempt::Failed("the table was dropped again during the rebuild")
                }
                // Another node spoke in a later term: Raft will depose this one.
                RebuildError::NewerTerm { .. } => {
                    Attempt::Failed("a member reported a lock of a later term")
                }
                e => Attempt::CannotSpeak(e.to_string()),
            })?;
        missing.sort_unstable();
        members_read.sort_unstable();
        // A member read but restarted lately counts as missing: its memory
        // of its clients' locks is incomplete. The report names it once,
        // as missing, and says why.
        let (members_restarted, members_read): (Vec<NodeId>, Vec<NodeId>) = members_read
            .into_iter()
            .partition(|m| missing.binary_search(m).is_ok());
        let report = RebuildReport {
            term,
            members_read,
            members_missing: missing,
            members_restarted,
            all_seen,
            locks: rebuilt.locks as u64,
            conflicts: rebuilt.lost.len() as u64,
            held_back_ms: held_back.map_or(0, |d| d.as_millis() as u64),
            took_ms: took.as_millis() as u64,
        };
        tracing::info!(?report, "failover report: lock table rebuilt");
        self.last_rebuild = Some(report.clone());
        self.renewed_in_hold.clear();
        let mut lost: BTreeMap<NodeId, Vec<Lock>> = BTreeMap::new();
        for lock in rebuilt.lost {
            lost.entry(lock.node).or_default().push(lock);
        }
        Ok(RebuildDone { report, lost })
    }

    /// Whether this member still speaks for `term`, as Raft last said.
    fn still_leading(&self, term: u64, guard: &Guard) -> Result<(), Attempt> {
        if guard.leader_term() != Some(term) || self.speaking != Some(term) {
            tracing::info!(term, "rebuild discarded: leadership moved on");
            return Err(Attempt::Failed("leadership moved on during the rebuild"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
