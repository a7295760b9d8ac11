//! The shipping leasehold node under deterministic simulation.
//!
//! Each simulated host runs `leasehold_node::start_with`: openraft with its
//! real engine, the redb log store in a directory of the host's own that
//! outlives a crash, the speaker, the public HTTP API and the peer network.
//! Only the seams differ from production (`leasehold_node::Seams`): the
//! network is [turmoil]'s simulated TCP ([`net`]), and the lease clock is
//! tokio's, which turmoil moves. Simulated clients speak the public HTTP
//! API over the same network ([`net::call`]). Every random draw (store,
//! cluster and lock ids, openraft's election timeouts) comes from
//! `leasehold_raft::entropy`, which [`cluster::build`] seeds with the
//! simulation's seed, and a tokio clock's wall time starts at a fixed date.
//!
//! turmoil was chosen over madsim because it simulates at the level the
//! node already has seams for (tokio's clock, a TCP socket, a listener)
//! and needs no patched tokio: the node's dependencies (openraft, axum,
//! hyper, redb) build unchanged.
//!
//! [`run::run`] is one seeded run with faults; [`check::check`] reads what
//! its clients saw.

pub mod change;
pub mod check;
pub mod client;
pub mod cluster;
pub mod faults;
pub mod guards;
pub mod history;
pub mod leaders;
pub mod lease;
pub mod net;
pub mod pauses;
pub mod run;
pub mod trace;
mod workload;
