//! Members gone from the configuration lately. One may hold the only
//! other record of a lock for as long as a lease of it runs: every rebuild
//! reads it (or counts it missing) until then
//! ([`crate::Member::departed_until`]), unless it handed its records over
//! as it left; and its id is not added again meanwhile, or the new member
//! would be read in its place, with nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use locktable::{MonoTime, NodeId};

/// The members that left, with their addresses and until when rebuilds
/// read them, and those that handed their records over as they left.
#[derive(Debug, Clone, Default)]
pub struct Departed {
    /// Member → (address, read until).
    gone: BTreeMap<NodeId, (String, MonoTime)>,
    /// Members that handed every record over, each until when another
    /// member's report may still name it departed.
    handed: BTreeMap<NodeId, MonoTime>,
}

/// A member that left, as a report names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gone {
    /// Its id.
    pub member: NodeId,
    /// Its address.
    pub addr: String,
    /// How long rebuilds still read it.
    pub left: Duration,
}

impl Departed {
    /// The configuration changed: `members` (with addresses) are the
    /// latest, `left` those of the one before that it does not name, read
    /// until `until`. A member named again is departed no more, nor
    /// counted as one that handed over.
    pub fn members_changed<'a>(
        &mut self,
        members: &[NodeId],
        left: impl IntoIterator<Item = (NodeId, &'a str)>,
        until: MonoTime,
    ) {
        for (member, addr) in left {
            self.gone.insert(member, (addr.to_string(), until));
        }
        self.gone.retain(|member, _| !members.contains(member));
        self.handed.retain(|member, _| !members.contains(member));
    }

    /// Takes `member` at `addr`, which another member saw leave, as
    /// departed until `until` (or longer, if known so already), unless it
    /// handed its records over; answers whether it was not known as
    /// departed (a rebuild under way reads it too).
    pub fn adopt(&mut self, member: NodeId, addr: &str, until: MonoTime, now: MonoTime) -> bool {
        self.handed.retain(|_, until| *until > now);
        if self.handed.contains_key(&member) {
            return false;
        }
        match self.gone.get_mut(&member) {
            Some((_, known)) => {
                *known = (*known).max(until);
                false
            }
            None => {
                self.gone.insert(member, (addr.to_string(), until));
                true
            }
        }
    }

    /// `member`, no longer a member, handed every record it kept over
    /// before it left: no rebuild needs to read it, nor take it as departed
    /// from another member's report until `until`. Answers whether it was
    /// departed (its releases may stop).
    pub fn handed_over(&mut self, member: NodeId, until: MonoTime) -> bool {
        self.handed.insert(member, until);
        self.gone.remove(&member).is_some()
    }

    /// The members a rebuild at `now` reads besides the configuration's
    /// (`members`): those that left and may still hold records, with their
    /// addresses; and those whose time ran out, which no rebuild reads any
    /// more (their releases may stop), forgotten.
    pub fn to_read(
        &mut self,
        members: &[NodeId],
        now: MonoTime,
    ) -> (Vec<(NodeId, String)>, Vec<NodeId>) {
        let mut ended = Vec::new();
        self.gone.retain(|member, (_, until)| {
            let reads = *until > now;
            if !reads && !members.contains(member) {
                ended.push(*member);
            }
            reads
        });
        let read = self
            .gone
            .iter()
            .filter(|(id, _)| !members.contains(id))
            .map(|(id, (addr, _))| (*id, addr.clone()))
            .collect();
        (read, ended)
    }

    /// The members that left and are still read at `now`, with how long
    /// more: what a report tells a rebuilding speaker.
    pub fn with_time_left(&self, now: MonoTime) -> Vec<Gone> {
        self.gone
            .iter()
            .filter(|(_, (_, until))| *until > now)
            .map(|(member, (addr, until))| Gone {
                member: *member,
                addr: addr.clone(),
                left: until.saturating_duration_since(now),
            })
            .collect()
    }

    /// How long until `member` may be added again, if it left lately: a
    /// rebuild reads what it held until then.
    pub fn added_again_in(&self, member: NodeId, now: MonoTime) -> Option<Duration> {
        let (_, until) = self.gone.get(&member)?;
        (*until > now).then(|| until.saturating_duration_since(now))
    }
}

/// How a rebuild takes a report from a member no configuration names
/// when its answer arrives (it left, or was removed while it was read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DepartedRead {
    /// As a member's: sabotaged (`departed-anywhere`), it is read as any
    /// member is.
    AsMember,
    /// As a restarted member's, whatever its data directory says: its
    /// records live in memory, and a process of it up for less than the
    /// longest lease may have started after it left (its replacement,
    /// started at once under its id at its address), so the hold counts
    /// from that process's start. Any record the one that left took ends
    /// within the longest lease of a later start; a process up longer is
    /// the one that left, or started after those records ended.
    Restarted,
    /// Not read: it answers from another data directory than the one it
    /// left with, so it holds none of the records the one that left took.
    Unread,
}

impl crate::Member {
    /// The configuration changed at `now`: `members` are the latest,
    /// `left` (with addresses) those of the one before that it does not
    /// name, read by rebuilds until [`crate::Member::departed_until`].
    pub fn members_left<'a>(
        &mut self,
        members: &[NodeId],
        left: impl IntoIterator<Item = (NodeId, &'a str)>,
        now: MonoTime,
    ) {
        let until = self.departed_until(now);
        self.departed.members_changed(members, left, until);
    }

    /// `member`, no longer in the configuration, handed every record it
    /// kept over before it left at `now` ([`Departed::handed_over`]).
    /// Answers whether it was departed (its releases may stop).
    pub fn departed_handed_over(&mut self, member: NodeId, now: MonoTime) -> bool {
        let until = self.departed_until(now);
        self.departed.handed_over(member, until)
    }

    /// The members a rebuild at `now` reads besides `members` (the
    /// configuration's), with their addresses, and those no rebuild reads
    /// any more, forgotten ([`Departed::to_read`]).
    pub fn departed_to_read(
        &mut self,
        members: &[NodeId],
        now: MonoTime,
    ) -> (Vec<(NodeId, String)>, Vec<NodeId>) {
        self.departed.to_read(members, now)
    }

    /// The members that left and are still read at `now`, with how long
    /// more: what this member's report tells a rebuilding speaker.
    pub fn departed_with_time_left(&self, now: MonoTime) -> Vec<Gone> {
        self.departed.with_time_left(now)
    }

    /// How long until `member` may be added again, if it left lately.
    pub fn added_again_in(&self, member: NodeId, now: MonoTime) -> Option<Duration> {
        self.departed.added_again_in(member, now)
    }

    /// How to take the report of a departed member that left with the
    /// data directory `left_with` and answers from `answers_from` (each a
    /// directory's id, if known).
    pub fn departed_read(
        &self,
        left_with: Option<u128>,
        answers_from: Option<u128>,
    ) -> DepartedRead {
        if self.config().sabotage.departed_anywhere {
            return DepartedRead::AsMember;
        }
        match (left_with, answers_from) {
            (Some(left), Some(now)) if left != now => DepartedRead::Unread,
            _ => DepartedRead::Restarted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> MonoTime {
        MonoTime::from_nanos((1 << 40) + ms * 1_000_000)
    }

    #[test]
    fn a_member_that_left_is_read_until_its_time_runs_out_then_its_releases_stop() {
        let mut d = Departed::default();
        d.members_changed(&[1, 2], [(3, "c:1")], at(100));
        assert_eq!(d.added_again_in(3, at(40)), Some(Duration::from_millis(60)));
        assert_eq!(
            d.to_read(&[1, 2], at(50)),
            (vec![(3, "c:1".into())], vec![])
        );
        assert_eq!(
            d.with_time_left(at(50)),
            vec![Gone {
                member: 3,
                addr: "c:1".into(),
                left: Duration::from_millis(50)
            }]
        );
        assert_eq!(d.to_read(&[1, 2], at(100)), (vec![], vec![3]));
        assert_eq!(d.added_again_in(3, at(100)), None);
        assert!(d.with_time_left(at(100)).is_empty());
    }

    #[test]
    fn a_departed_member_is_read_as_restarted_unless_it_answers_from_another_directory() {
        use crate::{MemberConfig, RebuildMode, Sabotage};
        let config = |sabotage| MemberConfig {
            id: 1,
            members: vec![1, 2],
            copy_to: vec![1, 2],
            copies: 2,
            lease: locktable::LeaseRule::default(),
            rebuild_mode: RebuildMode::Strict,
            leader_lease: Duration::from_secs(1),
            rebuild_timeout: Duration::from_secs(1),
            sabotage,
        };
        let m = crate::Member::new(config(Sabotage::NONE));
        assert_eq!(m.departed_read(Some(7), Some(7)), DepartedRead::Restarted);
        assert_eq!(m.departed_read(None, Some(7)), DepartedRead::Restarted);
        assert_eq!(m.departed_read(Some(7), None), DepartedRead::Restarted);
        assert_eq!(m.departed_read(Some(7), Some(8)), DepartedRead::Unread);
        let mut sabotage = Sabotage::NONE;
        sabotage.switch("departed-anywhere");
        let m = crate::Member::new(config(sabotage));
        assert_eq!(m.departed_read(Some(7), Some(8)), DepartedRead::AsMember);
    }

    #[test]
    fn a_member_added_again_is_read_as_a_member() {
        let mut d = Departed::default();
        d.members_changed(&[1, 2], [(3, "c:1")], at(100));
        d.members_changed(&[1, 2, 3], [], at(200));
        assert_eq!(d.to_read(&[1, 2, 3], at(50)), (vec![], vec![]));
        assert_eq!(d.added_again_in(3, at(50)), None);
    }

    #[test]
    fn one_that_handed_over_is_not_read_nor_adopted_from_a_report() {
        let mut d = Departed::default();
        d.members_changed(&[1, 2], [(3, "c:1")], at(100));
        assert!(d.handed_over(3, at(100)), "it was departed");
        assert_eq!(d.to_read(&[1, 2], at(10)), (vec![], vec![]));
        assert!(!d.adopt(3, "c:1", at(90), at(10)));
        assert!(
            d.adopt(3, "c:1", at(190), at(100)),
            "once the hand-over is old"
        );
    }

    #[test]
    fn a_report_extends_a_departure_never_shortens_it() {
        let mut d = Departed::default();
        assert!(d.adopt(4, "d:1", at(100), at(0)), "new to this member");
        assert!(!d.adopt(4, "d:1", at(50), at(0)));
        assert_eq!(d.added_again_in(4, at(0)), Some(Duration::from_millis(100)));
        assert!(!d.adopt(4, "d:1", at(150), at(0)));
        assert_eq!(d.added_again_in(4, at(0)), Some(Duration::from_millis(150)));
    }
}
