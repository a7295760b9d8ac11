//! Runs simulation seeds: `sim --seeds N [--start S]` or `sim --reproduce S`.

use std::process::ExitCode;

use leasehold_sim::{run, Config};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    let (start, count) = match value("--reproduce") {
        Some(seed) => (seed, 1),
        None => (
            value("--start").unwrap_or(0),
            value("--seeds").unwrap_or(1000),
        ),
    };
    let mut totals = (0usize, 0usize, 0usize, 0usize, 0usize);
    let mut failed = Vec::new();
    for seed in start..start + count {
        let config = Config::from_seed(seed);
        let report = run(seed, &config);
        totals.0 += report.grants;
        totals.1 += report.overlaps;
        totals.2 += report.explained;
        totals.3 += report.elections;
        totals.4 += report.crashes + report.pauses;
        if count == 1 || !report.ok() {
            println!("seed {seed}: {config:?}\n{report:#?}");
        }
        if !report.ok() {
            failed.push(seed);
        }
    }
    println!(
        "{count} seeds from {start}: {} grants, {} elections, {} crashes and pauses, {} overlaps ({} explained by rebuilds that missed members), {} seeds failed {:?}",
        totals.0, totals.3, totals.4, totals.1, totals.2, failed.len(), failed
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
