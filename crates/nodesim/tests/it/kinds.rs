//! Shared locks and semaphores in the shipping node, under faults: readers
//! beside readers and permits beside permits, never a writer beside
//! another holder nor more holders than permits, no renewed reader or
//! permit lost to one crash; and the checks are not blind to either.

use leasehold_node::{RebuildMode, Sabotage};
use leasehold_nodesim::run::{run, Focus, RunOptions};

/// How many seeds each run here takes (fewer in a debug build).
const SEEDS: u64 = if cfg!(debug_assertions) { 2 } else { 4 };

fn with_kinds(seed: u64) -> RunOptions {
    RunOptions {
        kinds: true,
        ..RunOptions::new(seed)
    }
}

fn switched(name: &str) -> Sabotage {
    let mut sabotage = Sabotage::NONE;
    assert!(sabotage.switch(name), "{name}");
    sabotage
}

#[test]
fn every_kind_keeps_its_promises_under_faults_in_both_modes() {
    for (mode, first) in [(RebuildMode::Proceed, 1), (RebuildMode::Strict, 1001)] {
        for seed in first..first + SEEDS {
            let outcome = run(&RunOptions {
                mode,
                ..with_kinds(seed)
            });
            outcome.assert_passed(&format!("seed {seed} ({mode:?}, kinds)"));
            assert!(outcome.grants() > 0, "seed {seed}: no grant at all");
        }
    }
    for seed in 1..=SEEDS {
        let outcome = run(&RunOptions {
            focus: Focus::SpeakerCrashes,
            ..with_kinds(seed)
        });
        outcome.assert_passed(&format!("seed {seed} (speaker crashes, kinds)"));
    }
}

/// A speaker that grants writers as readers lets a writer hold beside
/// others: the checks see it.
#[test]
fn a_writer_granted_as_a_reader_is_caught() {
    let caught = (1..=12).find(|&seed| {
        let outcome = run(&RunOptions {
            sabotage: switched("writers-shared"),
            ..with_kinds(seed)
        });
        !outcome.violations.is_empty()
    });
    assert!(
        caught.is_some(),
        "no seed of 12 caught writers granted as readers"
    );
}

/// A rebuild that takes every lock read for an exclusive one keeps one
/// holder of a name held shared or as permits and loses the others: the
/// renewal check sees it when the speaker crashes.
#[test]
fn a_rebuild_blind_to_kinds_is_caught() {
    let caught = (1..=16).find(|&seed| {
        let outcome = run(&RunOptions {
            focus: Focus::SpeakerCrashes,
            sabotage: switched("kinds-unread"),
            ..with_kinds(seed)
        });
        !outcome.violations.is_empty()
    });
    assert!(
        caught.is_some(),
        "no seed of 16 caught a rebuild blind to kinds"
    );
}

/// Shared locks and semaphores under the speaker paused (its clock jumped
/// when it wakes) and replaced on a wiped directory: the same promises.
#[test]
fn every_kind_keeps_its_promises_when_the_speaker_pauses_or_is_replaced() {
    for focus in [Focus::SpeakerPauses, Focus::SpeakerReplaces] {
        for seed in 1..=SEEDS {
            let outcome = run(&RunOptions {
                focus,
                ..with_kinds(seed)
            });
            outcome.assert_passed(&format!("seed {seed} ({focus:?}, kinds)"));
            assert!(outcome.grants() > 0, "seed {seed}: no grant at all");
        }
    }
}

/// A speaker that grants a permit request as one of a semaphore with a
/// permit more lets a third holder share a semaphore of two: the check of
/// the permits sees it (and only it: the seed keeps every other promise
/// with it, and every promise without it).
#[test]
fn a_semaphore_granted_past_its_permits_is_caught() {
    let caught = (1..=12).find_map(|seed| {
        let outcome = run(&RunOptions {
            sabotage: switched("permits-overfull"),
            ..with_kinds(seed)
        });
        let over = |v: &String| v.contains("(one of 2 permits)") && v.contains("beside 2 others");
        outcome
            .violations
            .iter()
            .any(over)
            .then_some((seed, outcome))
    });
    let (seed, outcome) = caught.expect("no seed of 12 caught a semaphore past its permits");
    assert!(
        outcome.violations.iter().all(|v| v.contains("permits")),
        "seed {seed}: {:#?}",
        outcome.violations
    );
    run(&with_kinds(seed)).assert_passed(&format!("seed {seed} (kinds, no sabotage)"));
}

fn with_sets(seed: u64) -> RunOptions {
    RunOptions {
        sets: true,
        ..RunOptions::new(seed)
    }
}

/// Sets of names beside single names, under every fault and under speaker
/// crashes: each set granted whole, and no name held twice.
#[test]
fn sets_are_granted_whole_and_exclusion_holds_under_faults() {
    for seed in 1..=SEEDS {
        for focus in [Focus::Mixed, Focus::SpeakerCrashes] {
            let outcome = run(&RunOptions {
                focus,
                ..with_sets(seed)
            });
            outcome.assert_passed(&format!("seed {seed} ({focus:?}, sets)"));
            assert!(outcome.grants() > 0, "seed {seed}: no grant at all");
        }
    }
}

/// A speaker that grants what it can of a set answers part of it: the
/// checks see it.
#[test]
fn a_set_granted_in_part_is_caught() {
    let caught = (1..=12).find(|&seed| {
        let outcome = run(&RunOptions {
            sabotage: switched("sets-partial"),
            ..with_sets(seed)
        });
        !outcome.violations.is_empty()
    });
    assert!(
        caught.is_some(),
        "no seed of 12 caught a set granted in part"
    );
}

fn with_delays(seed: u64) -> RunOptions {
    RunOptions {
        delays: true,
        ..RunOptions::new(seed)
    }
}

/// Lock-delays beside plain grants, under every fault and under speaker
/// crashes: no grant of a name inside a lapsed grant's delay.
#[test]
fn a_lapsed_names_delay_holds_under_faults() {
    for seed in 1..=SEEDS {
        for focus in [Focus::Mixed, Focus::SpeakerCrashes] {
            let outcome = run(&RunOptions {
                focus,
                ..with_delays(seed)
            });
            outcome.assert_passed(&format!("seed {seed} ({focus:?}, delays)"));
            assert!(outcome.grants() > 0, "seed {seed}: no grant at all");
        }
    }
}

/// A speaker that drops the lock-delay frees a lapsed name at once: the
/// checks see a grant inside the delay.
#[test]
fn a_speaker_ignoring_the_lock_delay_is_caught() {
    let caught = (1..=12).find(|&seed| {
        let outcome = run(&RunOptions {
            sabotage: switched("delay-ignored"),
            ..with_delays(seed)
        });
        !outcome.violations.is_empty()
    });
    assert!(
        caught.is_some(),
        "no seed of 12 caught a speaker ignoring the lock-delay"
    );
}

fn with_sessions(seed: u64) -> RunOptions {
    RunOptions {
        sessions: true,
        ..RunOptions::new(seed)
    }
}

/// Sessions beside plain grants, under every fault and under speaker
/// crashes: each lock of a session is held by one holder at a time, to
/// the end of its session's lease on the holder's count.
#[test]
fn a_sessions_locks_hold_under_faults() {
    for seed in 1..=SEEDS {
        for focus in [Focus::Mixed, Focus::SpeakerCrashes] {
            let outcome = run(&RunOptions {
                focus,
                ..with_sessions(seed)
            });
            outcome.assert_passed(&format!("seed {seed} ({focus:?}, sessions)"));
            assert!(outcome.grants() > 0, "seed {seed}: no grant at all");
        }
    }
}

/// A speaker that renews a session's grant but not its locks lets them
/// lapse while their holders count them held: the checks see two holders.
#[test]
fn a_speaker_not_following_a_sessions_renewal_is_caught() {
    let caught = (1..=8).find(|&seed| {
        let outcome = run(&RunOptions {
            sabotage: switched("session-locks-unfollowed"),
            ..with_sessions(seed)
        });
        !outcome.violations.is_empty()
    });
    assert!(
        caught.is_some(),
        "no seed of 8 caught a speaker not following a session's renewal"
    );
}

/// Sessions under the speaker paused (its clock jumped when it wakes) and
/// replaced on a wiped directory: each lock held by one holder at a time,
/// and free once its session ended.
#[test]
fn a_sessions_locks_hold_and_end_when_the_speaker_pauses_or_is_replaced() {
    for focus in [Focus::SpeakerPauses, Focus::SpeakerReplaces] {
        for seed in 1..=SEEDS {
            let outcome = run(&RunOptions {
                focus,
                ..with_sessions(seed)
            });
            outcome.assert_passed(&format!("seed {seed} ({focus:?}, sessions)"));
            assert!(outcome.grants() > 0, "seed {seed}: no grant at all");
        }
    }
}

/// A speaker that ends a closed session's grant alone and lets a session's
/// locks outlast its lapse keeps them past the session's end: the check
/// of sessions' ends sees a rival refused by one (and only it: the seed
/// keeps every other promise with it, and every promise without it).
#[test]
fn a_sessions_locks_kept_past_its_end_are_caught() {
    let caught = (1..=8).find_map(|seed| {
        let outcome = run(&RunOptions {
            sabotage: switched("session-end-leaves-locks"),
            ..with_sessions(seed)
        });
        let kept = |v: &String| v.contains(" of session ") && v.contains("refused an acquire");
        outcome
            .violations
            .iter()
            .any(kept)
            .then_some((seed, outcome))
    });
    let (seed, outcome) = caught.expect("no seed of 8 caught a session's locks kept past its end");
    assert!(
        outcome
            .violations
            .iter()
            .all(|v| v.contains(" of session ")),
        "seed {seed}: {:#?}",
        outcome.violations
    );
    run(&with_sessions(seed)).assert_passed(&format!("seed {seed} (sessions, no sabotage)"));
}
