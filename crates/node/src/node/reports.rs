//! What this node tells a rebuilding speaker: its report (a header, then
//! its clients' locks and what it granted), in frames for another node and
//! for itself, or whole for itself when frames fail.

use std::sync::Arc;

use leasehold_raft::codec::CodecError;
use tokio::time::Instant;

use super::Node;
use crate::report::{self, Layout, LockSink, MemberReport, ReportHeader, ReportReader, Sessioned};

impl Node {
    /// What this node tells a rebuilding speaker of itself: how long it has
    /// been up, and whether this is its first start.
    fn report_header(&self) -> ReportHeader {
        // Its own statement: the state's lock is released before the
        // copies are read under it again.
        let max_lease = self.state().member.config().lease.max;
        ReportHeader {
            node: self.id(),
            uptime_ms: self.clock.uptime().as_millis() as u64,
            first_start: self.first_start,
            max_lease_ms: u64::try_from(max_lease.as_millis()).unwrap_or(u64::MAX),
            copies: self.reported_copies(),
            departed: self.departed_with_time_left(),
        }
    }

    /// This node's report read by itself as the rebuilding speaker: its
    /// clients' locks and what it granted, on its own clock as they are.
    pub(crate) fn own_report(&self) -> MemberReport {
        let locks = self.state().member.own_report(self.clock.now());
        MemberReport {
            header: self.report_header(),
            count: locks.len(),
            locks,
            frames: 0,
            store: None,
            decoding: std::time::Duration::ZERO,
        }
    }

    /// This node's report read by itself as the rebuilding speaker, its
    /// locks handed to `sink` frame by frame as they are decoded, as
    /// another member's are: encoded under the state's lock where blocking
    /// work runs ([`Node::report_frames`], the lock held only while the
    /// frames are written, a tenth of the time making every lock anew under
    /// it takes), and decoded here as each frame comes, each frame's leases
    /// counted from then (never earlier than they end on this clock), in
    /// the layout that carries everything ([`Layout::WHOLE`]). The settle
    /// makes room for every lock at once.
    pub(crate) async fn own_report_fed(
        self: &Arc<Self>,
        mut sink: Box<dyn LockSink>,
    ) -> Result<MemberReport, String> {
        sink.expect(self.state().member.report_len());
        // Not the cluster's layout: during a rolling upgrade it may be one
        // that drops what this node's own records hold.
        let layout = Layout::WHOLE;
        let (to, mut frames) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
        let node = Arc::clone(self);
        let encode = leasehold_raft::blocking::unblock(move || {
            node.report_frames(layout, &mut |frame| {
                let _ = to.send(frame);
            })
        });
        let clock = self.clock;
        let limit = self.config.report_frame_bytes;
        let mut reader =
            ReportReader::new(limit, layout, move || clock.now()).feeding(self.id(), sink);
        let decode = async {
            while let Some(frame) = frames.recv().await {
                reader.push(&frame)?;
            }
            Ok::<_, CodecError>(())
        };
        let (encoded, decoded) = tokio::join!(encode, decode);
        encoded
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())?;
        decoded.map_err(|e| e.to_string())?;
        reader.finish().map_err(|e| e.to_string())
    }

    /// This node's report to another, rebuilding, node: the header, then
    /// its clients' locks and what it granted, in frames of at most
    /// `--report-frame-bytes`, each handed to `emit` as soon as it is whole
    /// (sent while the rest is encoded).
    ///
    /// The clients' locks are encoded where they are kept, under the node's
    /// lock: the frames are the only copy made of them. Each lock's time
    /// left is counted from before the first frame, so a lock read from a
    /// later frame, counted from that frame's arrival, ends no earlier than
    /// it does here.
    pub(crate) fn report_frames(
        &self,
        layout: Layout,
        emit: &mut dyn FnMut(Vec<u8>),
    ) -> Result<(), CodecError> {
        let header = self.report_header();
        let started = Instant::now();
        let now = self.clock.now();
        let (mut frames, mut bytes) = (0, 0);
        let mut counted = |frame: Vec<u8>| {
            frames += 1;
            bytes += frame.len();
            emit(frame);
        };
        let state = self.state();
        let (held, granted) = state.member.report(now);
        let held = held.map(|l| Sessioned::held(l, now));
        let granted = granted.iter().map(|l| Sessioned::of(l, now));
        let encoded = report::encode_each(
            &header,
            held.chain(granted),
            layout,
            self.config.report_frame_bytes,
            &mut counted,
        );
        drop(state);
        if encoded.is_ok() {
            tracing::info!(
                frames,
                bytes,
                locked_ms = started.elapsed().as_millis() as u64,
                "report encoded for a rebuilding speaker"
            );
        }
        encoded
    }
}
