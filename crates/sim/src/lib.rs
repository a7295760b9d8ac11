//! A deterministic simulation of leasehold's speaker protocol: the real
//! lock table (`locktable`) on every node, with the node's role logic
//! around it (leader changes, drop, rebuild with generations, forwarding,
//! expiry, the leader-lease guard), under a simulated clock and network that
//! loses, delays and reorders messages, and nodes that crash, restart and
//! pause. Everything comes from one seed, so a failure replays exactly.
//!
//! Raft itself is an oracle here: it elects a new leader, in a higher term,
//! only once the old leader's lease has run out (followers refuse votes
//! until then), and it tells the nodes by lossy, delayed heartbeats. What
//! is simulated for real is everything leasehold adds on top.

mod world;

pub use world::{run, Config, Report, Sabotage};
