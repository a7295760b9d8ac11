//! Membership changes at runtime: adding and removing members, made by the
//! speaker through openraft's joint consensus (docs/design.md,
//! "Membership changes"), asked of any node.

mod change;
mod commit;
mod join;
mod removal;
mod upkeep;

pub(crate) use join::{join, retire_old_self};
pub(crate) use upkeep::pin_members;
