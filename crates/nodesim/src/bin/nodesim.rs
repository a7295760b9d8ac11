//! Runs seeds of the whole-node simulation and prints what each came to.
//!
//! ```text
//! nodesim [--first S] [--seeds N] [--mode proceed|strict] [--copies C]
//!         [--trace] [--replay] [--expect-failure] [--speaker-crashes|--speaker-pauses|--speaker-replaces]
//!         [--change replace|grow|remove|remove-speaker|timings|protocol]
//!         [--sabotage NAME[,NAME]...] [--kinds] [--sets] [--delays] [--sessions]
//! ```
//!
//! `--sabotage` takes the names of `leasehold_node::Sabotage`'s
//! switches (guard, restart-wait, reread, rebuild-retry, term-fence,
//! copies-of-now, own-timings, departed-anywhere, no-handover, agree-alone,
//! skip-rebuild, skip-copies, ...), the simulation's alike; the ones the
//! node reads have an effect here.
//!
//! One line per seed (grants, faults, simulated time, the slowest node to
//! serve after the faults healed, a digest of what the clients saw); a
//! failing seed prints its violations and its faults, and `--trace` prints
//! every event of every seed, and before them every node's log lines
//! (`info`, or the filter in `LEASEHOLD_SIM_LOG`) with the simulated time
//! and the node that wrote them. `--replay` runs each seed twice and counts
//! the seeds whose second run differs. Exits non-zero when any seed
//! failed, or, with `--expect-failure` (for a sabotaged build), when none
//! did. `--speaker-crashes` makes every fault a crash of the speaker,
//! `--speaker-pauses` a pause of it, `--speaker-replaces` a replacement;
//! `--change KIND` makes a routine change and strikes the speaker once at a
//! seeded moment after one of its steps (`leasehold_nodesim::change`):
//! `replace` a member other than the speaker at once (wiped, same id and
//! address, as the removal is answered), then a crash; `grow` from one node
//! to three, a crash from when the first joiner votes (strict mode);
//! `remove` one of four members, then a crash; `timings` lowered on the
//! followers one at a time, then the speaker cut off; `protocol`, a rolling
//! upgrade from version 0, then a crash;
//! `--sabotage` switches a safety mechanism off in every node
//! (`leasehold_node::Sabotage`), for the checks' self-test. `--kinds` has
//! the clients take names of every kind (an exclusive one, one readers
//! share with a writer now and then, a semaphore of two permits); `--sets`
//! has them ask for both exclusive names at once now and then, and checks
//! each set is granted whole; `--delays` has half the grants ask for a
//! lock-delay, and checks a name whose lease ran out unreleased stays
//! closed for it; `--sessions` has clients hold both exclusive names in a
//! session now and then, renewed as one, and checks each lock of it as any
//! lock.

use std::process::ExitCode;

use leasehold_node::{RebuildMode, Sabotage};
use leasehold_nodesim::run::{run, Change, Focus, RunOptions};

fn main() -> ExitCode {
    let mut first = 1u64;
    let mut seeds = 10u64;
    let mut mode = RebuildMode::Proceed;
    let mut copies = None;
    let mut trace = false;
    let mut replay = false;
    let mut expect_failure = false;
    let mut focus = Focus::Mixed;
    let mut sabotage = Sabotage::NONE;
    let mut kinds = false;
    let mut sets = false;
    let mut delays = false;
    let mut sessions = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_default();
        match arg.as_str() {
            "--first" => first = value().parse().unwrap_or(first),
            "--seeds" => seeds = value().parse().unwrap_or(seeds),
            "--kinds" => kinds = true,
            "--sets" => sets = true,
            "--delays" => delays = true,
            "--sessions" => sessions = true,
            "--mode" => {
                mode = match value().as_str() {
                    "strict" => RebuildMode::Strict,
                    _ => RebuildMode::Proceed,
                }
            }
            "--copies" => copies = value().parse().ok(),
            "--trace" => trace = true,
            "--replay" => replay = true,
            "--expect-failure" => expect_failure = true,
            "--speaker-crashes" => focus = Focus::SpeakerCrashes,
            "--speaker-pauses" => focus = Focus::SpeakerPauses,
            "--speaker-replaces" => focus = Focus::SpeakerReplaces,
            "--change" => match Change::named(&value()) {
                Some(change) => focus = Focus::Change(change),
                None => {
                    eprintln!(
                        "nodesim: unknown change: replace, grow, remove, remove-speaker, timings or protocol"
                    );
                    return ExitCode::from(64);
                }
            },
            "--sabotage" => {
                for name in value().split(',').filter(|n| !n.is_empty()) {
                    if Sabotage::DRIVER_ONLY.contains(&name) {
                        eprintln!(
                            "nodesim: {name:?} breaks a duty of the protocol simulation's \
                             driver, which the node does not have: no effect here"
                        );
                        return ExitCode::from(64);
                    }
                    if !sabotage.switch(name) {
                        let names: Vec<&str> = Sabotage::names().collect();
                        eprintln!("nodesim: unknown sabotage {name:?}: {}", names.join(", "));
                        return ExitCode::from(64);
                    }
                }
            }
            other => {
                eprintln!("nodesim: unknown argument {other:?}");
                eprintln!(
                    "usage: nodesim [--first S] [--seeds N] [--mode proceed|strict] [--copies C] \
                     [--trace] [--replay] [--expect-failure] \
                     [--speaker-crashes|--speaker-pauses|--speaker-replaces] \
                     [--change replace|grow|remove|remove-speaker|timings|protocol] \
                     [--sabotage NAME[,NAME]...] [--kinds] [--sets] [--delays] [--sessions]"
                );
                return ExitCode::from(64);
            }
        }
    }
    if trace {
        let filter = std::env::var(leasehold_nodesim::trace::ENV);
        leasehold_nodesim::trace::init(filter.as_deref().unwrap_or("info,openraft=warn"));
    }
    let mut failed = 0;
    let mut diverged = 0;
    for seed in first..first + seeds {
        let options = RunOptions {
            mode,
            copies,
            focus,
            sabotage,
            kinds,
            sets,
            delays,
            sessions,
            ..RunOptions::new(seed)
        };
        let outcome = run(&options);
        let again = replay.then(|| run(&options).digest());
        diverged += usize::from(again.is_some_and(|d| d != outcome.digest()));
        println!(
            "seed {seed}: {} grants, {} faults, {:.1} s simulated, slowest to serve after healing {} ms, digest {:016x}{}, {} violations",
            outcome.grants(),
            outcome.faults.len(),
            outcome.simulated.as_secs_f64(),
            outcome.liveness_worst.as_millis(),
            outcome.digest(),
            match again {
                Some(d) if d != outcome.digest() => format!(" (replayed: {d:016x})"),
                Some(_) => " (replayed alike)".to_string(),
                None => String::new(),
            },
            outcome.violations.len()
        );
        if trace || !outcome.violations.is_empty() {
            for fault in &outcome.faults {
                println!("  fault {fault}");
            }
            if trace {
                for event in &outcome.history.events {
                    println!("  {event:?}");
                }
            }
            for violation in &outcome.violations {
                println!("  VIOLATION {violation}");
            }
        }
        failed += usize::from(!outcome.violations.is_empty());
    }
    if replay {
        println!("{diverged} of {seeds} seeds replayed differently");
    }
    println!("{failed} of {seeds} seeds failed");
    if (failed == 0) != expect_failure {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
