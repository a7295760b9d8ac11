//! Routine change as a fault kind: each change an operator makes (replace
//! a member in place, grow from one node, remove a member, remove the
//! speaker, lower timings one member at a time, a rolling upgrade of the
//! protocol), followed by
//! one fault of the speaker at a seeded moment: every promise holds. That
//! the checks see each change's sabotage (the mechanism it needs switched
//! off) is run in release, in `.ci/run` (`scripts/nodesim --change KIND
//! --sabotage S --expect-failure`): in a debug build it takes minutes.

use leasehold_node::RebuildMode;
use leasehold_nodesim::run::{run, Change, Focus, RunOptions};

#[test]
fn every_change_then_a_fault_keeps_every_promise() {
    let modes = [RebuildMode::Proceed, RebuildMode::Strict];
    for (seed, (name, change)) in (1..).zip(Change::ALL) {
        // One seed each here, the modes in turn; `.ci/run` runs more.
        let mode = modes[seed as usize % 2];
        {
            let outcome = run(&RunOptions {
                mode,
                focus: Focus::Change(change),
                ..RunOptions::new(seed)
            });
            outcome.assert_passed(&format!("{name}, seed {seed} ({mode:?})"));
            assert!(outcome.grants() > 0, "{name}, seed {seed}: no grant at all");
            assert!(
                outcome.faults.iter().any(|f| f.contains("change over")),
                "{name}, seed {seed}: the change never ended: {:#?}",
                outcome.faults
            );
        }
    }
}
