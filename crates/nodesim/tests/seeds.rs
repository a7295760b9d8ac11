//! Seeded runs of the shipping node with faults on one member at a time:
//! every check passes, in both rebuild modes; and the checks are not blind.

use leasehold_node::RebuildMode;
use leasehold_nodesim::run::{run, RunOptions};

/// How many seeds each mode runs here; `scripts/nodesim` runs any number.
const SEEDS: u64 = 4;

fn seeds_pass(mode: RebuildMode, first: u64) {
    for seed in first..first + SEEDS {
        let outcome = run(&RunOptions {
            mode,
            ..RunOptions::new(seed)
        });
        assert!(
            outcome.violations.is_empty(),
            "seed {seed} ({mode:?}): {:#?}\nfaults: {:#?}",
            outcome.violations,
            outcome.faults
        );
        assert!(outcome.grants() > 0, "seed {seed}: no grant at all");
    }
}

#[test]
fn seeds_pass_in_proceed_mode() {
    seeds_pass(RebuildMode::Proceed, 1);
}

#[test]
fn seeds_pass_in_strict_mode() {
    seeds_pass(RebuildMode::Strict, 1001);
}

/// Not blind: with one copy, crashes of the speaker lose locks its own
/// clients held, and the checks see it within a few seeds (about 40 % of
/// seeds fail; 16 in a row passing would be a blind checker).
#[test]
fn with_one_copy_speaker_crashes_are_caught() {
    let caught = (1..=16).find(|seed| {
        let outcome = run(&RunOptions {
            copies: Some(1),
            speaker_crashes_only: true,
            ..RunOptions::new(*seed)
        });
        !outcome.violations.is_empty()
    });
    assert!(caught.is_some(), "no seed of 16 caught the sabotage");
}
