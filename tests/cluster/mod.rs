//! A real cluster of `leasehold serve` processes: forming, granting,
//! forwarding, waiting, failover, pauses, restarts, auth and bad input.

mod delay;
mod failover;
mod grants;
mod kinds;
mod requests;
mod sessions;
mod set_release;
mod sets;

use crate::support::Cluster;

fn followers(cluster: &Cluster, speaker: u64) -> Vec<u64> {
    cluster.others(speaker)
}
