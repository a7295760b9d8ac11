//! What a member tells a rebuilding speaker: its clients' locks and its own
//! grants, in bincode (a million locks must cross in well under the
//! rebuild timeout; JSON took longer than that).
//!
//! A report is a chunked stream ([`leasehold_raft::codec::ChunkWriter`]):
//! a [`ReportHeader`] frame, then the locks in frames of at most
//! `--report-frame-bytes`, then the count. The speaker decodes each frame
//! as it arrives and counts its locks' leases from that frame's arrival, so
//! it never holds more than one frame of a report's bytes, however many
//! locks the member holds.

use std::time::Duration;

use leasehold_api::ReportRequest;
use leasehold_raft::codec::{ChunkReader, ChunkWriter, CodecError, Frame};
use locktable::{Fence, HeldLock, Kind, Lock, LockId, LockInTransit, MonoTime, NodeId};
use serde::{Deserialize, Serialize};

/// What a member says of itself, ahead of its locks.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ReportHeader {
    /// The reporting node.
    pub(crate) node: NodeId,
    /// How long the reporting process has been up.
    pub(crate) uptime_ms: u64,
    /// Whether this process is the node's first (its data directory was
    /// new): such a node has forgotten nothing.
    pub(crate) first_start: bool,
    /// The reporting node's `--max-lease`, in milliseconds: a strict hold
    /// and the restart rule use the longest lease any member may have
    /// granted or counted.
    pub(crate) max_lease_ms: u64,
    /// The reporting node's `--copies`: a rebuild counts every grant seen
    /// only when fewer members are missing than the fewest copies any
    /// member read makes.
    pub(crate) copies: u64,
    /// The members that left the cluster lately, as the reporting node saw
    /// them go: a rebuild reads them too (a speaker that joined or
    /// restarted since did not see them go).
    pub(crate) departed: Vec<Departed>,
}

/// A member that left the cluster lately, and for how much longer it may
/// hold the only other record of a lock.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Departed {
    /// Its id.
    pub(crate) node: NodeId,
    /// Its address.
    pub(crate) addr: String,
    /// How long it stays departed, in milliseconds.
    pub(crate) left_ms: u64,
}

/// One lock of a report: times as durations (nanoseconds). Sent with
/// borrowed strings (`S = &str`), received with owned ones; both encode
/// alike. This is the layout of protocol 0 and 1; from protocol 2 a report
/// asked for revisions sends [`Revised`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ReportLock<S = String> {
    name: S,
    id: u128,
    node: NodeId,
    holder: S,
    fence: u64,
    lease_ns: u64,
    ttl_ns: u64,
    held_ns: u64,
    data: Option<S>,
}

/// A lock of a report with its data's revision (protocol 2): the fields of
/// [`ReportLock`], then the revision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Revised<S = String> {
    lock: ReportLock<S>,
    data_rev: u32,
}

/// A lock of a report with its kind (protocol 3): the fields of
/// [`Revised`], then the kind as [`locktable::Kind::to_bits`] numbers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Kinded<S = String> {
    revised: Revised<S>,
    kind: u32,
}

/// A lock of a report with its lock-delay (protocol 5): the fields of
/// [`Kinded`], then the delay. `ttl_ns` counts the record's time left, the
/// delay included.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Delayed<S = String> {
    kinded: Kinded<S>,
    delay_ns: u64,
}

/// A lock of a report with its session (protocol 6): the fields of
/// [`Delayed`], then the session's id, if it hangs off one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Sessioned<S = String> {
    delayed: Delayed<S>,
    session: Option<u128>,
}

/// Which layout a report's locks take: the one the reading speaker's
/// cluster speaks, so every member of it reads and writes alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Layout {
    /// Protocol 0 and 1: [`ReportLock`].
    Plain,
    /// Protocol 2: [`Revised`].
    Revised,
    /// Protocol 3 and 4: [`Kinded`].
    Kinded,
    /// Protocol 5: [`Delayed`].
    Delayed,
    /// Protocol 6: [`Sessioned`].
    Sessioned,
}

impl Layout {
    /// The layout that carries everything a lock holds: the one a node
    /// reads its own report in, whatever its cluster speaks (nothing of
    /// its own records is dropped on the way to its own table).
    pub(crate) const WHOLE: Layout = Layout::Sessioned;
}

impl Layout {
    /// The layout a cluster speaking `version` reports in.
    pub(crate) fn of_cluster(version: leasehold_raft::version::Protocol) -> Layout {
        use leasehold_raft::version::{DATA_REVS, LOCK_DELAYS, LOCK_KINDS, SESSIONS};
        if version >= SESSIONS {
            Layout::Sessioned
        } else if version >= LOCK_DELAYS {
            Layout::Delayed
        } else if version >= LOCK_KINDS {
            Layout::Kinded
        } else if version >= DATA_REVS {
            Layout::Revised
        } else {
            Layout::Plain
        }
    }

    /// The layout a read asks for.
    pub(crate) fn asked(read: &ReportRequest) -> Layout {
        match (read.revs, read.kinds, read.delays, read.sessions) {
            (_, _, _, true) => Layout::Sessioned,
            (_, _, true, false) => Layout::Delayed,
            (_, true, false, false) => Layout::Kinded,
            (true, false, false, false) => Layout::Revised,
            (false, false, false, false) => Layout::Plain,
        }
    }

    /// The read that asks for this layout, for the speaker of `term`.
    pub(crate) fn request(self, term: u64) -> ReportRequest {
        ReportRequest {
            term,
            revs: self >= Layout::Revised,
            kinds: self >= Layout::Kinded,
            delays: self >= Layout::Delayed,
            sessions: self == Layout::Sessioned,
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl<'a> Sessioned<&'a str> {
    /// `lock` as it leaves at `now`, its strings borrowed.
    pub(crate) fn of(lock: &'a Lock, now: MonoTime) -> Self {
        Sessioned {
            delayed: Delayed::of(lock, now),
            session: lock.session.map(LockId::as_u128),
        }
    }

    /// A lock of this node's `Held` as it leaves at `now`, read where it is
    /// kept.
    pub(crate) fn held(lock: HeldLock<'a>, now: MonoTime) -> Self {
        Sessioned {
            session: lock.session().map(LockId::as_u128),
            delayed: Delayed::held(lock, now),
        }
    }
}

impl<'a> Delayed<&'a str> {
    /// `lock` as it leaves at `now`, its strings borrowed.
    pub(crate) fn of(lock: &'a Lock, now: MonoTime) -> Self {
        Delayed {
            kinded: Kinded::of(lock, now),
            delay_ns: nanos(lock.delay),
        }
    }

    /// A lock of this node's `Held` as it leaves at `now`, read where it is
    /// kept.
    pub(crate) fn held(lock: HeldLock<'a>, now: MonoTime) -> Self {
        Delayed {
            delay_ns: nanos(lock.delay()),
            kinded: Kinded::held(lock, now),
        }
    }
}

impl<'a> Kinded<&'a str> {
    /// `lock` as it leaves at `now`, its strings borrowed.
    pub(crate) fn of(lock: &'a Lock, now: MonoTime) -> Self {
        let revised: Revised<&str> = Revised {
            lock: ReportLock {
                name: &lock.name,
                id: lock.id.as_u128(),
                node: lock.node,
                holder: &lock.holder,
                fence: lock.fence.0,
                lease_ns: nanos(lock.lease),
                ttl_ns: nanos(lock.ttl(now)),
                held_ns: nanos(lock.held_for(now)),
                data: lock.data.as_deref(),
            },
            data_rev: lock.data_rev,
        };
        Kinded {
            revised,
            kind: lock.kind.to_bits(),
        }
    }

    /// A lock of this node's `Held` as it leaves at `now`, read where it is
    /// kept.
    pub(crate) fn held(lock: HeldLock<'a>, now: MonoTime) -> Self {
        let revised = Revised {
            lock: ReportLock {
                name: lock.name(),
                id: lock.id().as_u128(),
                node: lock.node(),
                holder: lock.holder(),
                fence: lock.fence().0,
                lease_ns: nanos(lock.lease()),
                ttl_ns: nanos(lock.ttl(now)),
                held_ns: nanos(lock.held_for(now)),
                data: lock.data(),
            },
            data_rev: lock.data_rev(),
        };
        Kinded {
            revised,
            kind: lock.kind().to_bits(),
        }
    }
}

impl From<Sessioned> for LockInTransit {
    fn from(Sessioned { delayed, session }: Sessioned) -> Self {
        LockInTransit {
            session: session.map(LockId::from_u128),
            ..LockInTransit::from(delayed)
        }
    }
}

impl From<Delayed> for LockInTransit {
    fn from(Delayed { kinded, delay_ns }: Delayed) -> Self {
        LockInTransit {
            delay: Duration::from_nanos(delay_ns),
            ..LockInTransit::from(kinded)
        }
    }
}

impl From<Kinded> for LockInTransit {
    fn from(Kinded { revised, kind }: Kinded) -> Self {
        LockInTransit {
            kind: Kind::from_bits(kind),
            ..LockInTransit::from(revised)
        }
    }
}

impl From<Revised> for LockInTransit {
    fn from(Revised { lock: l, data_rev }: Revised) -> Self {
        LockInTransit {
            session: Default::default(),
            delay: Default::default(),
            name: l.name,
            id: LockId::from_u128(l.id),
            node: l.node,
            holder: l.holder,
            fence: Fence(l.fence),
            kind: Kind::Exclusive,
            lease: Duration::from_nanos(l.lease_ns),
            ttl: Duration::from_nanos(l.ttl_ns),
            held_for: Duration::from_nanos(l.held_ns),
            data: l.data,
            data_rev,
        }
    }
}

impl From<ReportLock> for LockInTransit {
    fn from(lock: ReportLock) -> Self {
        LockInTransit::from(Revised { lock, data_rev: 0 })
    }
}

/// Encodes a report: `header`, then `locks` in frames of at most `limit`
/// bytes each, then their count. Each frame is its own buffer. The locks
/// take the `layout` the reader asked for (its cluster's).
#[cfg(test)]
pub(crate) fn encode<'a>(
    header: &ReportHeader,
    locks: impl IntoIterator<Item = Sessioned<&'a str>>,
    layout: Layout,
    limit: usize,
) -> Result<Vec<Vec<u8>>, CodecError> {
    let mut frames = Vec::new();
    encode_each(header, locks, layout, limit, &mut |frame| {
        frames.push(frame)
    })?;
    Ok(frames)
}

/// As [`encode`], each frame handed to `emit` as soon as it is whole, so a
/// report is sent (and read) while the rest is encoded. On an error the
/// frames emitted are a stream without its end, which its reader refuses.
pub(crate) fn encode_each<'a>(
    header: &ReportHeader,
    locks: impl IntoIterator<Item = Sessioned<&'a str>>,
    layout: Layout,
    limit: usize,
    emit: &mut dyn FnMut(Vec<u8>),
) -> Result<(), CodecError> {
    let mut writer = ChunkWriter::new(header, limit)?;
    for lock in locks {
        match layout {
            Layout::Sessioned => writer.push(&lock)?,
            Layout::Delayed => writer.push(&lock.delayed)?,
            Layout::Kinded => writer.push(&lock.delayed.kinded)?,
            Layout::Revised => writer.push(&lock.delayed.kinded.revised)?,
            Layout::Plain => writer.push(&lock.delayed.kinded.revised.lock)?,
        }
        writer.take_closed().for_each(&mut *emit);
    }
    writer.finish()?.into_iter().for_each(emit);
    Ok(())
}

/// A member's report as the speaker took it in: its locks on the speaker's
/// clock.
#[derive(Debug, Default)]
pub(crate) struct MemberReport {
    /// What the member said of itself.
    pub(crate) header: ReportHeader,
    /// Its locks, each lease counted from the arrival of its frame (none
    /// if they were fed elsewhere as they came: [`ReportReader::feeding`]).
    pub(crate) locks: Vec<Lock>,
    /// How many locks came.
    pub(crate) count: usize,
    /// How many frames of locks came (0 for the speaker's own report taken
    /// whole).
    pub(crate) frames: usize,
    /// The data directory the answer's peer stamp named (`None` for the
    /// speaker's own report).
    pub(crate) store: Option<leasehold_raft::identity::StoreId>,
    /// The time spent decoding its frames, of the whole read's.
    pub(crate) decoding: std::time::Duration,
}

/// The HTTP header with which a member says how many locks its report
/// holds, about (counted as it starts): the reader makes room for them at
/// once. Without it (a member of an older build), room grows as they come.
pub(crate) const REPORT_LOCKS_HEADER: &str = "x-leasehold-report-locks";

/// Where a report's locks go frame by frame as they are decoded.
pub(crate) trait LockSink: Send {
    /// The member said its report holds about `locks` locks.
    fn expect(&mut self, locks: usize) {
        let _ = locks;
    }

    /// A whole frame's `locks`, counted from its arrival at `now`.
    fn take(&mut self, locks: Vec<Lock>, now: MonoTime);
}

impl<F: FnMut(Vec<Lock>, MonoTime) + Send> LockSink for F {
    fn take(&mut self, locks: Vec<Lock>, now: MonoTime) {
        self(locks, now)
    }
}

/// Takes a report in as its bytes arrive: each frame is decoded once whole
/// and its locks put on this node's clock, so only the frame being received
/// is held as bytes.
pub(crate) struct ReportReader<C> {
    stream: Stream,
    /// Reads the lease clock when bytes arrive.
    clock: C,
    report: Option<MemberReport>,
    frames: usize,
    /// The locks of the report, or of the frame being decoded when fed.
    locks: Vec<Lock>,
    count: usize,
    /// The member the report must be of, and where each whole frame's
    /// locks go.
    feed: Option<(NodeId, Box<dyn LockSink>)>,
    decoding: std::time::Duration,
}

impl<C: FnMut() -> MonoTime> ReportReader<C> {
    /// A reader refusing frames over `limit` bytes, counting leases from
    /// `clock`'s reading when each part of the report arrives; its locks
    /// carry revisions if `revs` (as asked of the member).
    pub(crate) fn new(limit: usize, layout: Layout, clock: C) -> Self {
        ReportReader {
            stream: match layout {
                Layout::Sessioned => Stream::Sessioned(ChunkReader::new(limit)),
                Layout::Delayed => Stream::Delayed(ChunkReader::new(limit)),
                Layout::Kinded => Stream::Kinded(ChunkReader::new(limit)),
                Layout::Revised => Stream::Revised(ChunkReader::new(limit)),
                Layout::Plain => Stream::Plain(ChunkReader::new(limit)),
            },
            clock,
            report: None,
            frames: 0,
            locks: Vec::new(),
            count: 0,
            feed: None,
            decoding: std::time::Duration::ZERO,
        }
    }

    /// Hands each whole frame's locks to `sink` as it is decoded rather
    /// than keeping them in the report, once the report's header said it
    /// is `member`'s: a report of another node is refused before any of
    /// its locks goes anywhere.
    pub(crate) fn feeding(mut self, member: NodeId, sink: Box<dyn LockSink>) -> Self {
        self.feed = Some((member, sink));
        self
    }

    /// The member the report's header named, once it came.
    pub(crate) fn reported_by(&self) -> Option<NodeId> {
        self.report.as_ref().map(|r| r.header.node)
    }

    /// Takes in bytes of the report that just arrived: the locks of every
    /// frame they complete are counted from now (the reader's clock is
    /// read here, so no caller can count them from anything else).
    ///
    /// The member measured each lease's time left when it wrote the frame,
    /// before the frame arrived; counting from the frame's own arrival puts
    /// the lease's end no earlier than the member's (a later frame of the
    /// same report is counted from later, never from the first frame's
    /// arrival, which would end its leases early).
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Result<(), CodecError> {
        self.stream.push(bytes);
        let arrived = (self.clock)();
        let started = std::time::Instant::now();
        let decoded = self.decode(arrived);
        self.decoding += started.elapsed();
        decoded
    }

    /// Decodes every frame now whole, its locks counted from `arrived`.
    fn decode(&mut self, arrived: MonoTime) -> Result<(), CodecError> {
        loop {
            // Each lock goes straight into the list: unless fed, a frame's
            // locks are never a list of their own, whose memory would be
            // let go and taken again for every frame.
            let locks = &mut self.locks;
            let mut take = |lock: LockInTransit| locks.push(lock.arrive(arrived));
            let Some(chunk) = self.stream.next_frame(&mut take)? else {
                return Ok(());
            };
            match chunk {
                Frame::Header(header) => {
                    let of = header.node;
                    self.report = Some(MemberReport {
                        header,
                        ..MemberReport::default()
                    });
                    if self.feed.as_ref().is_some_and(|(member, _)| *member != of) {
                        return Err(CodecError::UnexpectedFrame("a report of another member"));
                    }
                }
                Frame::Items(count) => {
                    self.frames += 1;
                    self.count += count;
                    if let Some((_, sink)) = &mut self.feed {
                        sink.take(std::mem::take(&mut self.locks), arrived);
                    }
                }
            }
        }
    }

    /// The whole report, once its bytes ended: an error if the stream was
    /// cut short or malformed.
    pub(crate) fn finish(mut self) -> Result<MemberReport, CodecError> {
        self.stream.finish()?;
        let mut report = self
            .report
            .ok_or(CodecError::UnexpectedFrame("a stream without a header"))?;
        report.locks = self.locks;
        report.count = self.count;
        report.frames = self.frames;
        report.decoding = self.decoding;
        Ok(report)
    }
}

/// A report's frames as they are read, in the layout asked for.
enum Stream {
    Plain(ChunkReader<ReportHeader, ReportLock>),
    Revised(ChunkReader<ReportHeader, Revised>),
    Kinded(ChunkReader<ReportHeader, Kinded>),
    Delayed(ChunkReader<ReportHeader, Delayed>),
    Sessioned(ChunkReader<ReportHeader, Sessioned>),
}

impl Stream {
    fn push(&mut self, bytes: &[u8]) {
        match self {
            Stream::Plain(r) => r.push(bytes),
            Stream::Revised(r) => r.push(bytes),
            Stream::Kinded(r) => r.push(bytes),
            Stream::Delayed(r) => r.push(bytes),
            Stream::Sessioned(r) => r.push(bytes),
        }
    }

    /// The next whole frame, its locks handed to `lock` as they are
    /// decoded.
    fn next_frame(
        &mut self,
        lock: &mut dyn FnMut(LockInTransit),
    ) -> Result<Option<Frame<ReportHeader>>, CodecError> {
        match self {
            Stream::Plain(r) => r.next_frame(&mut |l| lock(l.into())),
            Stream::Revised(r) => r.next_frame(&mut |l| lock(l.into())),
            Stream::Kinded(r) => r.next_frame(&mut |l| lock(l.into())),
            Stream::Delayed(r) => r.next_frame(&mut |l| lock(l.into())),
            Stream::Sessioned(r) => r.next_frame(&mut |l| lock(l.into())),
        }
    }

    fn finish(&mut self) -> Result<(), CodecError> {
        match self {
            Stream::Plain(r) => r.finish(),
            Stream::Revised(r) => r.finish(),
            Stream::Kinded(r) => r.finish(),
            Stream::Delayed(r) => r.finish(),
            Stream::Sessioned(r) => r.finish(),
        }
    }
}

#[cfg(test)]
mod tests;
