//! What the simulation's test files share.

use leasehold_sim::{run, Config, Report, Sabotage, Scenario};

/// Runs `seed` of `scenario` with sessions now and then, in strict mode or
/// not, `sabotage` switched on.
pub fn with_sessions(scenario: Scenario, seed: u64, strict: bool, sabotage: Sabotage) -> Report {
    let mut config = Config::scenario(seed, scenario);
    config.sessions = true;
    config.strict = strict;
    config.sabotage = sabotage;
    run(seed, &config)
}
