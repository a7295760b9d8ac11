//! The rebuild retry, on the shipping code: a speaker that hears no
//! member from the moment it is elected, for longer than openraft's
//! ReadIndex waits (one leader lease), while its heartbeats still keep the
//! followers from campaigning, keeps its term with its first rebuild
//! failed. Only trying the rebuild
//! again serves grants after the cut heals; without the retry the node
//! answers `503` for the rest of its term.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_node::Sabotage;
use leasehold_nodesim::client::grant_through;
use leasehold_nodesim::cluster::{self, host, Options};
use leasehold_nodesim::leaders::Leaders;

/// Seeds each side runs.
const SEEDS: u64 = 12;
/// How soon after the cut heals every node must serve a grant.
const BOUND: Duration = Duration::from_secs(10);

/// What one run saw.
struct Blip {
    /// The speaker cut off, and its term.
    cut: (u64, u64),
    /// Whether it still led that term at the end of the run.
    kept_its_term: bool,
    /// Whether its table was rebuilt when the cut healed (its first
    /// rebuild got through before the cut).
    rebuilt_at_heal: bool,
    /// The nodes that served a grant within [`BOUND`] of the heal.
    served: BTreeSet<u64>,
}

/// On a network of up to 10 ms a message: as soon as the first speaker's
/// node leads a term, nothing sent to it arrives for 400 to 900 ms (drawn
/// from the seed): its heartbeats still arrive, so no follower campaigns,
/// but no acknowledgement comes back, so its ReadIndex gives up. Then
/// every node must serve a grant within [`BOUND`].
fn quorum_blip(seed: u64, sabotage: Sabotage) -> Blip {
    let dirs = tempfile::tempdir().unwrap();
    let options = Options::targeted(seed, sabotage, Duration::from_millis(10));
    let leaders: Leaders = options.leaders.clone();
    let mut sim = cluster::build(&options, dirs.path());
    let healed: Arc<Mutex<Option<Duration>>> = Arc::default();
    let served: Arc<Mutex<BTreeSet<u64>>> = Arc::default();
    for node in 1..=3u64 {
        let (healed, served) = (Arc::clone(&healed), Arc::clone(&served));
        sim.client(format!("probe{node}"), async move {
            let at = loop {
                if let Some(at) = *healed.lock().unwrap() {
                    break at;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            };
            if grant_through(node, &format!("probe/{node}"), at + BOUND)
                .await
                .is_some()
            {
                served.lock().unwrap().insert(node);
            }
            Ok(())
        });
    }
    let length = Duration::from_millis(400 + seed * 53 % 500);
    let mut cut: Option<(u64, u64, Duration)> = None;
    let mut repaired = false;
    let mut rebuilt_at_heal = false;
    while !sim.step().unwrap() {
        let now = sim.elapsed();
        match cut {
            None => {
                if let Some(&(speaker, term)) = leaders.leading().first() {
                    for other in (1..=3).filter(|n| *n != speaker) {
                        sim.partition_oneway(host(other), host(speaker));
                    }
                    cut = Some((speaker, term, now));
                }
            }
            Some((speaker, _, at)) if !repaired && now >= at + length => {
                for other in (1..=3).filter(|n| *n != speaker) {
                    sim.repair(host(speaker), host(other));
                }
                repaired = true;
                rebuilt_at_heal = leaders.rebuilt(speaker);
                *healed.lock().unwrap() = Some(now);
            }
            _ => {}
        }
    }
    let (speaker, term, _) = cut.expect("a speaker was elected");
    let served = served.lock().unwrap().clone();
    Blip {
        cut: (speaker, term),
        kept_its_term: leaders.leading().contains(&(speaker, term)),
        rebuilt_at_heal,
        served,
    }
}

#[test]
fn without_the_rebuild_retry_a_speaker_that_kept_its_term_never_serves() {
    let sabotage = Sabotage {
        no_rebuild_retry: true,
        ..Sabotage::NONE
    };
    let caught = (1..=SEEDS)
        .map(|seed| quorum_blip(seed, sabotage))
        .filter(|blip| blip.served.len() < 3 && blip.kept_its_term)
        .count();
    eprintln!("{caught} of {SEEDS} seeds caught the sabotage");
    assert!(caught > 0, "no seed of {SEEDS} caught the sabotage");
}

/// The same seeds with the retry: every node serves, and in most seeds the
/// speaker was still not rebuilt when the cut healed (its first rebuild
/// failed or had not ended).
#[test]
fn with_the_rebuild_retry_every_node_serves_after_the_blip() {
    let mut unrebuilt = 0;
    for seed in 1..=SEEDS {
        let blip = quorum_blip(seed, Sabotage::NONE);
        assert_eq!(
            blip.served,
            BTreeSet::from([1, 2, 3]),
            "seed {seed}: speaker {:?} cut off",
            blip.cut
        );
        unrebuilt += usize::from(!blip.rebuilt_at_heal && blip.kept_its_term);
    }
    eprintln!("{unrebuilt} of {SEEDS} speakers not rebuilt at the heal");
    assert!(
        2 * unrebuilt > SEEDS as usize,
        "the cut came after the first rebuild in most seeds: {unrebuilt} of {SEEDS}"
    );
}
