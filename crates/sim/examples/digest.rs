//! Prints one line per run of the fixed seeds (every scenario, without and
//! with the sabotages a driver could get wrong): each run's report without
//! its trace. A change that should not alter behaviour leaves the output
//! the same; compare it before and after:
//!
//! ```text
//! cargo run --release -p leasehold-sim --example digest -- 1000 > before.txt
//! ```

use leasehold_sim::{run, Config, Sabotage, Scenario};

fn main() {
    let mixed: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let mut scenarios = vec![(Scenario::Mixed, mixed)];
    for scenario in Scenario::TARGETED {
        scenarios.push((scenario, mixed / 5));
    }
    // Each set of switches, and whether it is run in strict mode.
    let sabotages: [(&[&str], bool); 8] = [
        (&[], false),
        (&["reread"], false),
        (&["read-once"], true),
        (&["short-hold"], true),
        (&["count-from-send"], false),
        (&["rebuild-retry"], false),
        (&["unacked-copies"], false),
        (&["skip-copies"], false),
    ];
    for (names, strict) in sabotages {
        let mut sabotage = Sabotage::NONE;
        for name in names {
            assert!(sabotage.switch(name), "no sabotage {name}");
        }
        for (scenario, seeds) in &scenarios {
            for seed in 0..*seeds {
                let mut config = Config::scenario(seed, *scenario);
                config.sabotage = sabotage;
                config.strict |= strict;
                let mut report = run(seed, &config);
                report.trace.clear();
                println!("{names:?} {scenario:?} {seed} {report:?}");
            }
        }
    }
}
