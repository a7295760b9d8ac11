//! What the simulation's test files share.

// Each test file uses its share of these.
#![allow(dead_code)]

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

/// Runs `seed` of `scenario` in strict mode with `flags` of the kinds'
/// and sessions' switches on, its trace cleared (a failure prints the
/// report without it).
pub fn strict_with(scenario: Scenario, seed: u64, flags: &[Flag]) -> Report {
    let mut config = Config::scenario(seed, scenario);
    config.strict = true;
    for flag in flags {
        match flag {
            Flag::Kinds => config.kinds = true,
            Flag::Sets => config.sets = true,
            Flag::Sessions => config.sessions = true,
            Flag::SessionCopies => config.session_copies = true,
            Flag::SessionReclaim => config.session_reclaim = true,
            Flag::Delays => config.delays = true,
        }
    }
    let mut report = run(seed, &config);
    report.trace.clear();
    report
}

/// A switch of [`Config`] a test turns on.
#[derive(Clone, Copy)]
pub enum Flag {
    /// Semaphores and shared locks (`Config::kinds`).
    Kinds,
    /// Sets of names (`Config::sets`).
    Sets,
    /// Sessions (`Config::sessions`).
    Sessions,
    /// Copies of a session's grant (`Config::session_copies`).
    SessionCopies,
    /// Sessions taken back by their renewals (`Config::session_reclaim`).
    SessionReclaim,
    /// Lock-delays (`Config::delays`).
    Delays,
}

/// Sessions with their copies and take-back, and lock-delays.
pub const SESSIONS_AND_DELAYS: &[Flag] = &[
    Flag::Sessions,
    Flag::SessionCopies,
    Flag::SessionReclaim,
    Flag::Delays,
];

/// Every switch.
pub const EVERY_FLAG: &[Flag] = &[
    Flag::Kinds,
    Flag::Sets,
    Flag::Sessions,
    Flag::SessionCopies,
    Flag::SessionReclaim,
    Flag::Delays,
];
