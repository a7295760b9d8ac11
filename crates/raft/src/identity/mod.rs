//! Who a peer is: the cluster a data directory belongs to, and which data
//! directory each member runs on.
//!
//! Raft's safety rests on every member remembering its vote and log. A
//! member whose data directory was wiped (or swapped for another one) comes
//! back having forgotten both, and could vote twice in one term. So every
//! data directory is named when it is created (its *store id*, random), the
//! cluster is named when it forms (its *cluster id*, made by the member
//! that bootstraps it, learned by the others from the first peer message
//! that carries it), and every member records, durably, the store id each
//! other member first showed it.
//!
//! Every peer request and every answer carries the sender's [`Stamp`]
//! (headers [`FROM_HEADER`], [`STORE_HEADER`], [`CLUSTER_HEADER`]). A
//! receiver that knows another cluster id refuses with
//! [`Refusal::ForeignCluster`]; one that recorded another store id for that
//! member refuses with [`Refusal::StoreChanged`]. The same checks apply to
//! answers, so a vote answered from a wiped directory is never counted. A
//! refused request is answered `409` with the kind in [`REFUSED_HEADER`].
//!
//! `StoreChanged` is decisive: the member that hears it about itself knows
//! its own directory is not the one the cluster knew, and stops
//! ([`Identity::refused`]). `ForeignCluster` is not: either side may be the
//! stray one, so both refuse each other's traffic and log it, and only a
//! quorum of members saying so at start stops a node.

mod admission;
mod applied;
mod guard;
mod lifecycle;
mod node;
mod records;
mod stamp;
#[cfg(test)]
mod tests;

pub use crate::ids::{ClusterId, StoreId};
pub use admission::Refusal;
pub use guard::guard;
pub use node::Identity;
pub(crate) use records::Recorded;
pub use stamp::{BadStamp, RefusedAs, Stamp};
pub use stamp::{CLUSTER_HEADER, FROM_HEADER, REFUSED_HEADER, STORE_HEADER};
