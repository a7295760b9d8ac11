//! Liveness on the shipping code: once a partition of the speaker heals,
//! every node serves a grant within a stated bound, whichever way the
//! partition cut.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_node::RebuildMode;
use leasehold_nodesim::client::{grant_through, wait_for_speaker};
use leasehold_nodesim::cluster::{self, Options};

/// How long after the partition heals every node must have served a grant.
const BOUND: Duration = Duration::from_secs(10);
/// How long the speaker stays cut off.
const CUT: Duration = Duration::from_secs(5);

/// Which way the speaker is cut off from the other members.
#[derive(Debug, Clone, Copy)]
enum Cut {
    Both,
    /// Nothing the speaker sends arrives.
    SpeakerMute,
    /// Nothing sent to the speaker arrives.
    SpeakerDeaf,
}

fn serves_again_after_a_cut(cut: Cut, mode: RebuildMode, seed: u64) {
    let dirs = tempfile::tempdir().unwrap();
    let options = Options {
        seed,
        mode,
        ..Options::default()
    };
    let mut sim = cluster::build(&options, dirs.path());
    let healed_at: Arc<Mutex<Option<Duration>>> = Arc::default();
    let served: Arc<Mutex<Vec<(u64, Duration)>>> = Arc::default();

    let healed = Arc::clone(&healed_at);
    sim.client("chaos", async move {
        let s = wait_for_speaker(1).await;
        let (speaker, others) = (
            cluster::host(s),
            (1..=3).filter(|n| *n != s).map(cluster::host),
        );
        for other in others.clone() {
            match cut {
                Cut::Both => turmoil::partition(speaker.as_str(), other.as_str()),
                Cut::SpeakerMute => turmoil::partition_oneway(speaker.as_str(), other.as_str()),
                Cut::SpeakerDeaf => turmoil::partition_oneway(other.as_str(), speaker.as_str()),
            }
        }
        tokio::time::sleep(CUT).await;
        for other in others {
            turmoil::repair(speaker.as_str(), other.as_str());
        }
        *healed.lock().unwrap() = turmoil::sim_elapsed();
        Ok(())
    });

    for node in 1..=3u64 {
        let (healed, served) = (Arc::clone(&healed_at), Arc::clone(&served));
        sim.client(format!("client{node}"), async move {
            let since = loop {
                if let Some(at) = *healed.lock().unwrap() {
                    break at;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            };
            let name = format!("live/{node}");
            let at = grant_through(node, &name, since + BOUND * 3)
                .await
                .ok_or("never granted")?;
            served
                .lock()
                .unwrap()
                .push((node, at.saturating_sub(since)));
            Ok(())
        });
    }

    sim.run().unwrap();
    let served = served.lock().unwrap();
    assert_eq!(served.len(), 3, "every node served: {served:?}");
    for (node, after) in served.iter() {
        assert!(
            *after <= BOUND,
            "node {node} served {after:?} after the {cut:?} cut healed (bound {BOUND:?})"
        );
    }
}

#[test]
fn every_node_serves_again_after_the_speaker_is_cut_off_both_ways() {
    serves_again_after_a_cut(Cut::Both, RebuildMode::Proceed, 11);
}

#[test]
fn every_node_serves_again_after_the_speaker_cannot_send() {
    serves_again_after_a_cut(Cut::SpeakerMute, RebuildMode::Strict, 12);
}

#[test]
fn every_node_serves_again_after_the_speaker_cannot_hear() {
    serves_again_after_a_cut(Cut::SpeakerDeaf, RebuildMode::Proceed, 13);
}
