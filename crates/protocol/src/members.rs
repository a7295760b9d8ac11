//! Sets of members as bits, for who may keep a record of a lock.

use locktable::NodeId;

/// Members of the cluster as bits, keyed by node id: bit `id` is member
/// `id`, so a set means the same members whatever the configuration is
/// when it is read (members come and go). Copy, and no allocation: the
/// release path builds one per release. A member whose id is 64 or more has
/// no bit of its own: a set naming one names every member (a release then
/// goes to more members than it must, never to fewer).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Members(u64);

impl Members {
    /// Every member.
    pub const ALL: Members = Members(u64::MAX);

    /// No member.
    pub const NONE: Members = Members(0);

    /// Member `id` alone; every member if `id` has no bit.
    pub fn only(id: NodeId) -> Members {
        if id >= 64 {
            Members::ALL
        } else {
            Members(1 << id)
        }
    }

    /// Both sets.
    pub fn with(self, other: Members) -> Members {
        Members(self.0 | other.0)
    }

    /// Whether member `id` is in the set; a member with no bit always is.
    pub fn contains(self, id: NodeId) -> bool {
        id >= 64 || self.0 & (1 << id) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_bits_by_id() {
        assert_eq!(Members::only(0).with(Members::only(2)), Members(0b101));
        assert!(Members(0b010).contains(1) && !Members(0b010).contains(0));
        assert!(Members(0).contains(64), "no bit of its own: always");
        assert_eq!(Members::only(70), Members::ALL);
    }
}
