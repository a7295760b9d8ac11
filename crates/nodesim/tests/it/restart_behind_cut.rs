//! The restart wait, on the shipping code: a follower restarted while the
//! speaker is cut off from the other follower must not vote before the
//! speaker's guard, which counts on that follower's last acknowledgement,
//! has closed. With the wait switched off, two guards are open at once
//! (the premise check of `guards`) within a few seeds; with it, never.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_node::Sabotage;
use leasehold_nodesim::client::wait_for_speaker;
use leasehold_nodesim::cluster::{self, host, Options};
use leasehold_nodesim::guards::Guards;

/// Seeds each side runs.
const SEEDS: u64 = 16;

/// On a LAN-like network: cuts the speaker off from one follower; a
/// while later (drawn from the seed) crashes the other and cuts the
/// speaker off from it too, and restarts it 20 ms later, so that it hears
/// only the campaigning follower; runs on for 3 s. The guard violations
/// seen, and every term a guard was seen open for.
fn restart_behind_cut(seed: u64, sabotage: Sabotage) -> (Vec<String>, BTreeSet<u64>) {
    let dirs = tempfile::tempdir().unwrap();
    let options = Options::targeted(seed, sabotage, Duration::from_millis(2));
    let guards: Guards = options.guards.clone();
    let mut sim = cluster::build(&options, dirs.path());
    let speaker = Arc::new(Mutex::new(None));
    let found = Arc::clone(&speaker);
    sim.client("observer", async move {
        let s = wait_for_speaker(1).await;
        *found.lock().unwrap() = Some(s);
        // Keep the simulation going until the driver is done.
        tokio::time::sleep(Duration::from_secs(30)).await;
        Ok(())
    });
    let mut plan: Option<(u64, u64, Duration)> = None;
    let mut crashed = false;
    let mut bounced = false;
    loop {
        if sim.step().unwrap() {
            break;
        }
        let now = sim.elapsed();
        match plan {
            None => {
                if let Some(s) = *speaker.lock().unwrap() {
                    let others: Vec<u64> = (1..=3).filter(|n| *n != s).collect();
                    sim.partition(host(s), host(others[0]));
                    plan = Some((s, others[1], now));
                }
            }
            Some((s, restarted, cut_at)) => {
                let down_at = cut_at + Duration::from_millis(150 + seed * 37 % 300);
                if !crashed && now >= down_at {
                    sim.crash(host(restarted));
                    sim.partition(host(s), host(restarted));
                    crashed = true;
                }
                if crashed && !bounced && now >= down_at + Duration::from_millis(20) {
                    sim.bounce(host(restarted));
                    bounced = true;
                }
                if now >= cut_at + Duration::from_secs(3) {
                    break;
                }
            }
        }
    }
    (guards.violations(), guards.terms())
}

#[test]
fn without_the_restart_wait_two_guards_open_at_once() {
    let sabotage = Sabotage {
        no_restart_wait: true,
        ..Sabotage::NONE
    };
    let caught = (1..=SEEDS)
        .filter(|seed| !restart_behind_cut(*seed, sabotage).0.is_empty())
        .count();
    eprintln!("{caught} of {SEEDS} seeds caught the sabotage");
    assert!(caught > 0, "no seed of {SEEDS} caught the sabotage");
}

#[test]
fn with_the_restart_wait_no_two_guards_open_at_once() {
    for seed in 1..=SEEDS {
        let (violations, terms) = restart_behind_cut(seed, Sabotage::NONE);
        assert!(violations.is_empty(), "seed {seed}: {violations:#?}");
        // Not vacuous: the cut follower was elected, after the old
        // speaker's guard closed.
        assert!(terms.len() >= 2, "seed {seed}: no new speaker: {terms:?}");
    }
}
