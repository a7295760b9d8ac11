//! A deterministic simulation of leasehold's speaker protocol. Every
//! simulated node drives `leasehold_protocol`, the crate `crates/node`
//! drives: a `Member` (its table, `Held`, copies, who may keep a record of
//! each lock, the grant guard, the rebuild, the follower's side) and a
//! `Leadership` (drop, rebuild, retry, step down), with the protocol's
//! `Reads` while a rebuild reads the members and a `CopyRound` while a
//! grant's copies are on their way. The simulation keeps no rule of its
//! own: it carries reads, reports, copies, forwards, releases and losses as
//! messages, calls the member's method when one arrives with that node's
//! clock, and builds each node's `Guard` from its model of Raft.
//!
//! What the simulation owns is the world around the protocol: a clock per
//! node, a network that loses, delays and reorders messages, nodes that
//! crash, restart, pause, are cut off and shut down gracefully, clients
//! that acquire, renew (moving to another node when theirs does not
//! answer) and release, or hold names in a session renewed as one
//! (`--sessions`), and a model of Raft as openraft 0.10.0-alpha.37
//! behaves, not as the guard wishes (`raft`): votes carry leases that
//! followers honour and restarts and transfers lose, a leader keeps its
//! term without a quorum, ReadIndex gives up after one leader lease.
//! Everything comes from one seed, so a failure replays exactly.
//!
//! The checker (`check`) looks at holders (no overlap, fences in order),
//! renewed locks (none lost while fewer members failed than there are
//! copies), speakers (none grants once a later term has a leader) and
//! liveness (every node serves again after the last fault heals). Each
//! switch of the protocol's [`Sabotage`] takes a safety mechanism out (in
//! the protocol, or in this driver where the switch breaks a driver's
//! duty), to show the checker catches it.

mod check;
mod client;
mod client_session;
mod client_state;
mod config;
mod copies;
mod faults;
mod history;
mod late_reads;
mod msg;
mod node;
mod raft;
mod releases;
mod serve;
mod sessions;
mod speaker;
mod world;

pub use config::{liveness_bound_ms, Config, Sabotage, Scenario};
pub use history::Report;
pub use world::run;
