//! Sets of members as bits, for who may keep a record of a lock.

/// Members of the cluster as bits: bit `i` is the `i`-th member in id
/// order. Copy, and no allocation: the release path builds one per
/// release.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Members(u64);

impl Members {
    /// Every member.
    pub const ALL: Members = Members(u64::MAX);

    /// No member.
    pub const NONE: Members = Members(0);

    /// The `index`-th member alone; every member past the 64th (no
    /// narrower set is kept for them).
    pub fn only(index: usize) -> Members {
        if index >= 64 {
            Members::ALL
        } else {
            Members(1 << index)
        }
    }

    /// Both sets.
    pub fn with(self, other: Members) -> Members {
        Members(self.0 | other.0)
    }

    /// Whether the `index`-th member is in the set; a member past the
    /// 64th always is.
    pub fn contains(self, index: usize) -> bool {
        index >= 64 || self.0 & (1 << index) != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_bits() {
        assert_eq!(Members::only(0).with(Members::only(2)), Members(0b101));
        assert!(Members(0b010).contains(1) && !Members(0b010).contains(0));
        assert!(Members(0).contains(64), "past the 64th: always");
        assert_eq!(Members::only(70), Members::ALL);
    }
}
