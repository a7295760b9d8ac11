//! CI's share of the simulation: a thousand seeds, each a different cluster
//! size, mode, loss rate and fault schedule. A failure names its seed;
//! `cargo run -p leasehold-sim --release -- --reproduce SEED` replays it.

use leasehold_sim::{run, Config, Sabotage};

#[test]
fn a_thousand_seeds_keep_every_promise() {
    let seeds = std::env::var("SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000u64);
    let mut grants = 0;
    let mut failures = Vec::new();
    for seed in 0..seeds {
        let report = run(seed, &Config::from_seed(seed));
        grants += report.grants;
        if !report.ok() {
            failures.push((
                seed,
                report.unexplained.clone(),
                report.fence_inversions.clone(),
            ));
        }
    }
    assert!(
        grants > seeds as usize,
        "the workload made too few grants to judge ({grants})"
    );
    assert!(
        failures.is_empty(),
        "seeds that broke a promise: {failures:#?}"
    );
}

#[test]
fn a_seed_replays_exactly() {
    let a = run(42, &Config::from_seed(42));
    let b = run(42, &Config::from_seed(42));
    assert_eq!(
        (a.grants, a.overlaps, a.elections, a.lost_messages),
        (b.grants, b.overlaps, b.elections, b.lost_messages)
    );
}

/// The checker is not blind: break a rule the protocol depends on, and some
/// seeds must fail.
#[test]
fn a_broken_protocol_is_caught() {
    // A lapsed leader lease shows only when a paused or cut-off speaker
    // takes a request before it hears of the new term: rare in a random
    // run, so look until a seed catches it.
    const SEEDS: u64 = 3000;
    for sabotage in [Sabotage::SkipRebuild, Sabotage::IgnoreLeaderLease] {
        let caught = (0..SEEDS).any(|seed| {
            let mut config = Config::from_seed(seed);
            config.sabotage = Some(sabotage);
            config.strict = true;
            !run(seed, &config).ok()
        });
        assert!(caught, "{sabotage:?} went unnoticed in {SEEDS} seeds");
    }
}

/// Seeds that once broke a promise, kept as regressions. 181787: a deposed
/// speaker that had not heard of the new term granted to a waiter when the
/// new speaker's Forget arrived (Forget no longer hands a name over). 87554
/// showed, in
/// proceed mode, an older grant surfacing after a newer one (a documented
/// consequence of a missing member, which the fence turns away); the others
/// failed because a rebuild counted reported leases from when it sent its
/// reads: the new speaker's table then ended a lease before its holder's
/// own count did, and granted the name again. A speaker must count a
/// reported lease from when the report *arrived* (its table errs long), a
/// holder from when it *sent* (its view errs short).
#[test]
fn seeds_that_once_failed() {
    for seed in [
        13351, 20422, 35361, 38867, 49445, 66302, 87554, 95884, 97028, 181787,
    ] {
        let report = run(seed, &Config::from_seed(seed));
        assert!(report.ok(), "seed {seed}: {report:#?}");
    }
}
