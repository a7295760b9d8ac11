//! Copies: every grant and renewal is known to `copies` members before its
//! client hears of it, so that no single crash loses a lock.
//!
//! A lock is on record with the speaker (its table and `Granted`) and with
//! the holder's node (its `Held`, once the answer reaches it). When those
//! are fewer than `copies` members (always for a client of the speaker
//! itself), the speaker sends the lock to more members, which keep it as a
//! *copy* until its lease ends, and answers only once they acknowledged it.
//!
//! A member refuses copies from a speaker of an older term than one it has
//! seen or been read by ([`crate::Member::take_copies`]): a copy is either
//! in the report a newer speaker reads, or refused (and then never answered
//! to its client).
//!
//! Every member a copy is sent to is noted with the lock before it is
//! sent, acknowledged or not ([`crate::Member::copy_sent`]), so that a
//! release (or a grant taken back) reaches every member that may keep one.

use std::collections::{BTreeSet, VecDeque};
use std::time::Duration;

use locktable::NodeId;

use crate::config::MemberConfig;
use crate::refusal::Refusal;

/// How long a member has to acknowledge a copy before another is tried;
/// a copy not sent by then is not sent at all.
pub const COPY_TIMEOUT: Duration = Duration::from_secs(1);

/// How long a copy may go unanswered before the next member is sent one
/// as well ([`CopyRound::hedge`]): a member that neither answers nor
/// refuses (paused, or behind a link that drops) then costs a grant or
/// renewal this long, not [`COPY_TIMEOUT`]. Every copy's timeout is one
/// fifth of a second on top of the round trips of a healthy cluster.
pub const COPY_HEDGE: Duration = Duration::from_millis(200);

/// How many members keep a record of every grant when `--copies` is not
/// given.
pub const DEFAULT_COPIES: usize = 2;

/// How many members must hold a record of a grant in a cluster of
/// `members`: `wanted` (`--copies`, or [`DEFAULT_COPIES`]), never more
/// than a quorum of them (a cluster that shrank, or a single node, keeps
/// what it can).
pub fn copies_for(wanted: Option<usize>, members: usize) -> usize {
    let quorum = members / 2 + 1;
    wanted.unwrap_or(DEFAULT_COPIES).min(quorum)
}

/// The copies a speaker makes of every grant, `wanted` (`--copies`) set,
/// with `copy_to` members a copy may go to (the voters of the latest and
/// the committed configuration) and `committed_voters` in the committed
/// one: as many as the members a copy may go to allow, and no fewer than
/// the committed configuration asks while a smaller one is not committed
/// (a grant made with fewer could be missed by a leader elected under the
/// committed one), never more than there are members to keep them.
pub fn copies_in(wanted: Option<usize>, copy_to: usize, committed_voters: usize) -> usize {
    copies_for(wanted, copy_to)
        .max(copies_for(wanted, committed_voters))
        .min(copy_to.max(1))
}

/// How many members beyond the speaker and the holder's node (one member
/// when they are the same) must acknowledge a copy.
pub fn copies_needed(copies: usize, speaker: NodeId, holder: NodeId) -> usize {
    let records = if holder == speaker { 1 } else { 2 };
    copies.saturating_sub(records)
}

/// The copies of one grant or renewal: how many members must acknowledge
/// one, which to try next, and which did.
#[derive(Debug, Clone)]
pub struct CopyRound {
    needed: usize,
    /// Members not tried yet, in the order to try them.
    candidates: VecDeque<NodeId>,
    acked: Vec<NodeId>,
    /// Copies sent and not answered yet.
    out: usize,
}

/// What to do after a member answered a copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyStep {
    /// Enough members acknowledged: answer the client.
    Done,
    /// Send a copy to this member too.
    SendTo(NodeId),
    /// Wait for the copies still out.
    Wait,
    /// No member is left to try and none is out: too few acknowledged.
    GiveUp,
}

impl CopyRound {
    /// The round for a lock held through `holder`: the members that may
    /// take a copy come after this member in id order (so that speakers
    /// spread their copies), `suspects` last.
    pub(crate) fn new(config: &MemberConfig, holder: NodeId, suspects: &BTreeSet<NodeId>) -> Self {
        let me = config.id;
        let mut order: Vec<NodeId> = config
            .copy_to
            .iter()
            .copied()
            .filter(|id| *id != holder && *id != me)
            .collect();
        let before_me = order.iter().take_while(|id| **id < me).count();
        order.rotate_left(before_me);
        order.sort_by_key(|id| suspects.contains(id));
        CopyRound {
            needed: copies_needed(config.copies, me, holder),
            candidates: order.into(),
            acked: Vec::new(),
            out: 0,
        }
    }

    /// How many members must acknowledge a copy; 0 when the holder's node
    /// and the speaker are records enough.
    pub fn needed(&self) -> usize {
        self.needed
    }

    /// The members to send the first copies to.
    pub fn start(&mut self) -> Vec<NodeId> {
        let first: Vec<NodeId> = self
            .candidates
            .drain(..self.needed.min(self.candidates.len()))
            .collect();
        self.out = first.len();
        first
    }

    /// `member` answered (or timed out: `acked` false).
    pub fn answered(&mut self, member: NodeId, acked: bool) -> CopyStep {
        self.out = self.out.saturating_sub(1);
        if acked {
            self.acked.push(member);
            if self.acked.len() >= self.needed {
                return CopyStep::Done;
            }
        } else if let Some(next) = self.candidates.pop_front() {
            self.out += 1;
            return CopyStep::SendTo(next);
        }
        if self.out == 0 {
            CopyStep::GiveUp
        } else {
            CopyStep::Wait
        }
    }

    /// A copy out went unanswered for [`COPY_HEDGE`]: the next member to
    /// send a copy to as well, if more acknowledgements are needed and a
    /// member is left to try. The copy out still counts if it is answered.
    pub fn hedge(&mut self) -> Option<NodeId> {
        if self.acked.len() >= self.needed {
            return None;
        }
        let next = self.candidates.pop_front()?;
        self.out += 1;
        Some(next)
    }

    /// The members that acknowledged.
    pub fn acked(&self) -> &[NodeId] {
        &self.acked
    }

    /// `Ok` once enough members acknowledged (`copies` is the setting, for
    /// the refusal's words).
    pub fn outcome(&self, copies: usize) -> Result<(), Refusal> {
        if self.acked.len() >= self.needed {
            Ok(())
        } else {
            Err(Refusal::TooFewCopies {
                reached: self.acked.len(),
                needed: self.needed,
                copies,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RebuildMode;
    use locktable::LeaseRule;

    fn config(members: u64, me: NodeId, copies: usize) -> MemberConfig {
        MemberConfig {
            id: me,
            members: (1..=members).collect(),
            copy_to: (1..=members).collect(),
            copies,
            lease: LeaseRule::default(),
            rebuild_mode: RebuildMode::Proceed,
            leader_lease: Duration::from_secs(1),
            rebuild_timeout: Duration::from_secs(1),
            sabotage: crate::Sabotage::NONE,
        }
    }

    fn order(round: &CopyRound) -> Vec<NodeId> {
        round.candidates.iter().copied().collect()
    }

    #[test]
    fn copies_are_at_most_a_quorum_and_fall_only_once_committed() {
        assert_eq!(copies_for(None, 5), 2);
        assert_eq!(copies_for(Some(3), 5), 3);
        assert_eq!(
            copies_for(Some(3), 3),
            2,
            "a cluster that shrank keeps what it can"
        );
        assert_eq!(copies_for(Some(2), 1), 1);
        // Five voters committed, three in the latest: still three copies.
        assert_eq!(copies_in(Some(3), 3, 5), 3);
        // Growing from one node: two as soon as the latest has three.
        assert_eq!(copies_in(None, 3, 1), 2);
        // Never more than the members a copy may go to.
        assert_eq!(copies_in(Some(3), 2, 5), 2);
        assert_eq!(copies_in(None, 0, 0), 1);
    }

    #[test]
    fn a_client_of_the_speaker_needs_one_copy_more() {
        assert_eq!(copies_needed(2, 1, 1), 1);
        assert_eq!(copies_needed(2, 1, 3), 0);
        assert_eq!(copies_needed(3, 1, 3), 1);
        assert_eq!(copies_needed(1, 1, 1), 0);
    }

    #[test]
    fn copies_go_to_the_members_after_the_speaker_then_to_suspects() {
        let c = config(5, 2, 3);
        let none = BTreeSet::new();
        assert_eq!(order(&CopyRound::new(&c, 2, &none)), vec![3, 4, 5, 1]);
        assert_eq!(order(&CopyRound::new(&c, 4, &none)), vec![3, 5, 1]);
        let suspects: BTreeSet<NodeId> = [3].into();
        assert_eq!(order(&CopyRound::new(&c, 2, &suspects)), vec![4, 5, 1, 3]);
    }

    #[test]
    fn a_failed_copy_is_sent_to_the_next_member_and_the_round_gives_up_when_none_is_left() {
        let c = config(3, 1, 2);
        let mut round = CopyRound::new(&c, 1, &BTreeSet::new());
        assert_eq!(round.needed(), 1);
        assert_eq!(round.start(), vec![2]);
        assert_eq!(round.answered(2, false), CopyStep::SendTo(3));
        assert!(round.outcome(2).is_err());
        assert_eq!(round.answered(3, false), CopyStep::GiveUp);
        assert_eq!(
            round.outcome(2),
            Err(Refusal::TooFewCopies {
                reached: 0,
                needed: 1,
                copies: 2
            })
        );

        let mut round = CopyRound::new(&c, 1, &BTreeSet::new());
        round.start();
        assert_eq!(round.answered(2, true), CopyStep::Done);
        assert_eq!(round.acked(), &[2]);
        assert_eq!(round.outcome(2), Ok(()));
    }

    #[test]
    fn with_two_out_one_failure_waits_for_the_other() {
        let c = config(3, 1, 3);
        let mut round = CopyRound::new(&c, 1, &BTreeSet::new());
        assert_eq!(round.needed(), 2);
        assert_eq!(round.start(), vec![2, 3]);
        assert_eq!(round.answered(2, false), CopyStep::Wait);
        assert_eq!(round.answered(3, true), CopyStep::GiveUp);
        assert!(round.outcome(3).is_err());
    }

    #[test]
    fn a_hedge_sends_to_the_next_member_and_either_acknowledgement_counts() {
        let c = config(3, 1, 2);
        let mut round = CopyRound::new(&c, 1, &BTreeSet::new());
        assert_eq!(round.start(), vec![2]);
        assert_eq!(round.hedge(), Some(3));
        assert_eq!(round.hedge(), None, "no member is left to try");
        assert_eq!(round.answered(3, true), CopyStep::Done);
        assert_eq!(round.acked(), &[3]);

        // The silent member answers after all: it counts as well.
        let mut round = CopyRound::new(&c, 1, &BTreeSet::new());
        round.start();
        assert_eq!(round.hedge(), Some(3));
        assert_eq!(round.answered(3, false), CopyStep::Wait);
        assert_eq!(round.answered(2, true), CopyStep::Done);
        assert_eq!(round.outcome(2), Ok(()));

        // Both fail: given up once neither is out.
        let mut round = CopyRound::new(&c, 1, &BTreeSet::new());
        round.start();
        round.hedge();
        assert_eq!(round.answered(2, false), CopyStep::Wait);
        assert_eq!(round.answered(3, false), CopyStep::GiveUp);

        // Enough acknowledged: nothing more is sent.
        let mut round = CopyRound::new(&c, 1, &BTreeSet::new());
        round.start();
        round.answered(2, true);
        assert_eq!(round.hedge(), None);
    }

    #[test]
    fn a_round_that_needs_none_is_done_before_it_starts() {
        let c = config(3, 1, 2);
        let mut round = CopyRound::new(&c, 2, &BTreeSet::new());
        assert_eq!(round.needed(), 0);
        assert!(round.start().is_empty());
        assert_eq!(round.outcome(2), Ok(()));
    }
}
