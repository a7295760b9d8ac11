//! Replacements of the speaker, in the simulation: while clients take,
//! renew and release locks, the speaker is removed through the API (it
//! hands over and its host stops), then its host starts again on a wiped
//! data directory and joins under the same id; and again, each episode.
//! No lock whose holder renews is lost, no two holders overlap, fences
//! increase, and every node serves again after, in both rebuild modes.

use leasehold_node::RebuildMode;
use leasehold_nodesim::run::{run, Focus, RunOptions};

#[test]
fn replacing_the_speaker_again_and_again_keeps_every_promise() {
    for (mode, seed) in [(RebuildMode::Proceed, 1), (RebuildMode::Strict, 1001)] {
        let outcome = run(&RunOptions {
            mode,
            focus: Focus::SpeakerReplaces,
            ..RunOptions::new(seed)
        });
        outcome.assert_passed(&format!("seed {seed} ({mode:?})"));
        let replaced = outcome
            .faults
            .iter()
            .filter(|f| f.contains("Replace"))
            .count();
        assert!(replaced >= 3, "seed {seed}: {:#?}", outcome.faults);
        assert!(outcome.grants() > 0, "seed {seed}: no grant at all");
    }
}
