//! The names of what Raft and the identity check tell apart: members,
//! data directories and clusters. It uses no other module of this crate,
//! so every one of them can use it.

use std::fmt;

/// A node id.
pub type NodeId = u64;

/// Declares a random 128-bit name, shown as 32 hex digits.
macro_rules! hex_name {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(
            Copy, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
        )]
        pub struct $name(pub u128);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{:032x}", self.0)
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({self})", stringify!($name))
            }
        }
    };
}

hex_name!(
    /// A random name for one data directory, made when it is created.
    StoreId
);
hex_name!(
    /// A random name for one cluster, made when it is bootstrapped.
    ClusterId
);
