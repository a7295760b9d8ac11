//! Seeded runs of the shipping node with faults on one member at a time:
//! every check passes, in both rebuild modes; and the checks are not blind.

use leasehold_node::{RebuildMode, Sabotage};
use leasehold_nodesim::run::{run, Focus, RunOptions};

/// How many seeds each mode runs here (fewer in a debug build, which CI's
/// release runs of `scripts/nodesim`, 60 a mode, back); the script runs
/// any number.
const SEEDS: u64 = if cfg!(debug_assertions) { 2 } else { 4 };

fn seeds_pass(mode: RebuildMode, first: u64) {
    for seed in first..first + SEEDS {
        let outcome = run(&RunOptions {
            mode,
            ..RunOptions::new(seed)
        });
        outcome.assert_passed(&format!("seed {seed} ({mode:?})"));
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
            focus: Focus::SpeakerCrashes,
            ..RunOptions::new(*seed)
        });
        !outcome.violations.is_empty()
    });
    assert!(caught.is_some(), "no seed of 16 caught the sabotage");
}

/// Pauses of the speaker (as SIGSTOP): a paused speaker wakes with its
/// table and its queued requests; the guard keeps it from answering any
/// from that table once its lease has run out. Without the guard the
/// checks see it within a few seeds; with it, none fails.
#[test]
fn paused_speakers_grant_nothing_on_waking_and_without_the_guard_do() {
    let seeds = 1..=12;
    for seed in seeds.clone() {
        let outcome = run(&RunOptions {
            focus: Focus::SpeakerPauses,
            ..RunOptions::new(seed)
        });
        outcome.assert_passed(&format!("seed {seed}"));
    }
    let sabotage = Sabotage {
        no_grant_guard: true,
        ..Sabotage::NONE
    };
    let caught = seeds.clone().find(|seed| {
        let outcome = run(&RunOptions {
            focus: Focus::SpeakerPauses,
            sabotage,
            ..RunOptions::new(*seed)
        });
        !outcome.violations.is_empty()
    });
    assert!(caught.is_some(), "no seed of {seeds:?} caught the sabotage");
}
