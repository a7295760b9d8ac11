//! The late reads of the members a strict rebuild missed, as
//! `crates/node/src/speaker/late.rs` carries them out: once the table
//! serves with new grants held back, every member the rebuild counted
//! missing is read again, by the rebuild's term, each read lost tried
//! again a while later, for as long as the protocol wants it
//! (`Member::late_read_wanted`); each report arrived goes to
//! `Member::late_read`. The messages are the rebuild's own, under an id
//! of their own.

use locktable::{LockInTransit, NodeId};

use crate::config::timing::READ_AGAIN_AFTER_MS;
use crate::msg::{Event, ReportHeader};
use crate::speaker::member_read;
use crate::world::World;

impl World {
    /// Node `n` rebuilt for `term`, new grants held back, missing
    /// `missing`: it reads each of them again.
    pub(crate) fn start_late_reads(&mut self, n: NodeId, term: u64, missing: &[NodeId]) {
        self.next_attempt += 1;
        let id = self.next_attempt;
        self.nodes.get_mut(&n).expect("member").late_reads = Some((id, term));
        for &member in missing {
            if self.late_read_wanted(n, id, member).is_some() {
                self.send_read(n, term, id, member);
            }
        }
    }

    /// Whether `id` names node `n`'s late reads (the latest it started).
    fn are_late_reads(&self, n: NodeId, id: u64) -> bool {
        self.nodes[&n]
            .late_reads
            .is_some_and(|(late, _)| late == id)
    }

    /// The term of node `n`'s late reads `id`, if they are its latest and
    /// the protocol still wants `member` read.
    fn late_read_wanted(&self, n: NodeId, id: u64, member: NodeId) -> Option<u64> {
        let guard = self.guard(n);
        let node = self.nodes.get(&n)?;
        let (late, term) = node.late_reads?;
        let now = node.mono(self.t);
        (late == id && node.member.late_read_wanted(term, member, &guard, now)).then_some(term)
    }

    /// Whether `id` names node `n`'s late reads; if so, the read of
    /// `member` failed and is tried again a while later.
    pub(crate) fn late_read_failed(&mut self, n: NodeId, id: u64, member: NodeId) -> bool {
        if !self.are_late_reads(n, id) {
            return false;
        }
        if self.late_read_wanted(n, id, member).is_some() {
            self.note(|| format!("node {n}'s late read of node {member} fails, read again"));
            self.at(
                self.t + READ_AGAIN_AFTER_MS,
                Event::ReadAgain(n, id, member),
            );
        }
        true
    }

    /// Whether `id` names node `n`'s late reads; if so, `member` is read
    /// again, if still wanted.
    pub(crate) fn late_read_again(&mut self, n: NodeId, id: u64, member: NodeId) -> bool {
        if !self.are_late_reads(n, id) {
            return false;
        }
        if let Some(term) = self.late_read_wanted(n, id, member) {
            self.send_read(n, term, id, member);
        }
        true
    }

    /// A report arrived for `id`: taken back into the table if it is a
    /// late read node `n` still wants (`None` then, as for one it no longer
    /// wants); otherwise handed back, for the rebuild attempt `id`.
    pub(crate) fn late_report_arrived(
        &mut self,
        n: NodeId,
        from: NodeId,
        id: u64,
        header: ReportHeader,
        locks: Vec<LockInTransit>,
    ) -> Option<Vec<LockInTransit>> {
        if !self.are_late_reads(n, id) {
            return Some(locks);
        }
        let term = self.late_read_wanted(n, id, from)?;
        let guard = self.guard(n);
        let t = self.t;
        let node = self.nodes.get_mut(&n).expect("member");
        let now = node.mono(t);
        let locks = locks.into_iter().map(|l| l.arrive(now)).collect();
        let read = member_read(from, header, locks);
        let done = node.member.late_read(term, read, &guard, now);
        self.note(|| format!("node {n}: late read of node {from} for term {term}: {done:?}"));
        self.dispatch(n);
        None
    }
}
