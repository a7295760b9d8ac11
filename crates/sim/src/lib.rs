//! A deterministic simulation of leasehold's speaker protocol: the real
//! lock table (`locktable`) on every node, with the node's role logic
//! around it (drop on every change of term, rebuild with ReadIndex and
//! every member's report, each failed read tried again within the rebuild
//! timeout, retries while the term lasts, step-down,
//! forwarding, renewals, copies, expiry, the leader-lease guard), under a
//! simulated clock and network that loses, delays and reorders messages,
//! and nodes that crash, restart, pause, are cut off and shut down
//! gracefully. Everything comes from one seed, so a failure replays
//! exactly.
//!
//! Copies (`copies`) are modelled as the node makes them: a grant or
//! renewal is answered only once `copies` members hold a record of it, a
//! rebuild that misses fewer members has seen every grant (no strict hold,
//! nothing excused), and releases reach the copy holders. Holders renew
//! through their node (`renew`), moving to another when it does not answer.
//!
//! Raft is modelled as openraft 0.10.0-alpha.37 behaves, not as the guard
//! wishes (`raft`): votes carry leases that followers honour and restarts
//! and transfers lose, a leader keeps its term without a quorum, ReadIndex
//! gives up after one leader lease. The checker (`check`) looks at holders
//! (no overlap, fences in order), renewed locks (none lost while fewer
//! members failed than there are copies), speakers (none grants once a
//! later term has a leader) and liveness (every node serves again after
//! the last fault heals).

mod check;
mod client;
mod config;
mod copies;
mod faults;
mod node;
mod raft;
mod renew;
mod speaker;
mod world;

pub use check::Report;
pub use config::{liveness_bound_ms, Config, Sabotage, Scenario};
pub use world::run;
