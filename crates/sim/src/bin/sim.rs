//! Runs simulation seeds:
//!
//! ```text
//! sim [--seeds N] [--start S] [--scenario mixed|pauses|restart-behind-cut|blip|acks-lost|slow-reports|speaker-crashes]
//!     [--sabotage RULE[,RULE...]] [--strict | --proceed] [--copies C] [--kinds] [--delays] [--sets] [--sessions]
//!     [--session-copies] [--session-reclaim]
//!
//! RULE: a switch of the protocol's `Sabotage` (guard, rebuild-retry,
//! restart-wait, term-fence, reread, skip-rebuild, skip-copies, short-hold,
//! count-from-send, unacked-copies, read-once, not-held-in-hold, ...).
//! sim --reproduce S [--trace] [...]
//! ```

use std::process::ExitCode;

use leasehold_sim::{liveness_bound_ms, run, Config, Sabotage, Scenario};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let text = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let value = |flag: &str| text(flag).and_then(|v| v.parse::<u64>().ok());
    let scenario = match text("--scenario").as_deref() {
        None | Some("mixed") => Scenario::Mixed,
        Some("pauses") => Scenario::SpeakerPauses,
        Some("restart-behind-cut") => Scenario::RestartBehindCut,
        Some("blip") => Scenario::QuorumBlip,
        Some("acks-lost") => Scenario::AcksLost,
        Some("slow-reports") => Scenario::SlowReports,
        Some("speaker-crashes") => Scenario::SpeakerCrashes,
        Some(other) => {
            eprintln!("unknown scenario {other}");
            return ExitCode::FAILURE;
        }
    };
    let mut sabotage = Sabotage::NONE;
    for name in text("--sabotage")
        .unwrap_or_default()
        .split(',')
        .filter(|n| !n.is_empty())
    {
        if !sabotage.switch(name) {
            let names: Vec<&str> = Sabotage::names().collect();
            eprintln!("unknown sabotage {name}: {}", names.join(", "));
            return ExitCode::FAILURE;
        }
    }
    let strict = args.iter().any(|a| a == "--strict");
    // Each seed draws its mode; these force one.
    let proceed = args.iter().any(|a| a == "--proceed");
    let kinds = args.iter().any(|a| a == "--kinds");
    let delays = args.iter().any(|a| a == "--delays");
    let sets = args.iter().any(|a| a == "--sets");
    let sessions = args.iter().any(|a| a == "--sessions");
    let session_copies = args.iter().any(|a| a == "--session-copies");
    let session_reclaim = args.iter().any(|a| a == "--session-reclaim");
    let trace = args.iter().any(|a| a == "--trace");
    let (start, count) = match value("--reproduce") {
        Some(seed) => (seed, 1),
        None => (
            value("--start").unwrap_or(0),
            value("--seeds").unwrap_or(1000),
        ),
    };
    let mut totals = Totals::default();
    let mut failed = Vec::new();
    for seed in start..start + count {
        let mut config = Config::scenario(seed, scenario);
        config.sabotage = sabotage;
        config.strict = (config.strict || strict) && !proceed;
        config.kinds = kinds;
        config.delays = delays;
        config.sets = sets;
        config.sessions = sessions;
        config.session_copies = session_copies;
        config.session_reclaim = session_reclaim;
        if let Some(copies) = value("--copies") {
            let quorum = config.nodes / 2 + 1;
            if copies == 0 || copies > quorum {
                eprintln!("seed {seed}: --copies {copies} is not within 1..={quorum}");
                return ExitCode::FAILURE;
            }
            config.copies = copies as usize;
        }
        config.trace = trace;
        let mut report = run(seed, &config);
        totals.add(
            &report,
            liveness_bound_ms(config.max_delay_ms, config.strict),
        );
        if count == 1 || !report.ok() {
            let trace = std::mem::take(&mut report.trace);
            println!("seed {seed}: {config:?}\n{report:#?}");
            for line in trace {
                println!("{line}");
            }
        }
        if !report.ok() {
            failed.push(seed);
        }
    }
    println!(
        "{count} seeds from {start} ({scenario:?}{}): {:.0} s simulated, {} faults \
         ({} crashes, {} graceful stops, {} pauses, {} partitions, {} quorum blips), \
         {} elections, {} failed rebuild attempts retried, {} step-downs, {} grants held{}; \
         {} overlaps ({} explained by rebuilds that missed as many members as copies); {} violations \
         (seeds with: {} overlaps, {} fence inversions, {} deposed grants, {} deposed open guards, {} lost locks, {} liveness); \
         {} renewed locks lost with as many members faulted as copies; \
         liveness worst case {} ms (bound {}..{} ms); {} seeds failed {:?}",
        if sabotage.is_none() {
            String::new()
        } else {
            format!(", sabotage {sabotage:?}")
        },
        totals.sim_ms as f64 / 1000.0,
        totals.faults,
        totals.crashes,
        totals.graceful,
        totals.pauses,
        totals.partitions,
        totals.blips,
        totals.elections,
        totals.failed_rebuilds,
        totals.step_downs,
        totals.grants,
        if sessions {
            format!(" ({} of them locks of sessions)", totals.session_grants)
        } else {
            String::new()
        },
        totals.overlaps,
        totals.explained,
        totals.violations,
        totals.unexplained,
        totals.inversions,
        totals.deposed,
        totals.deposed_guards,
        totals.lost,
        totals.liveness,
        totals.excused_losses,
        totals.liveness_ms,
        totals.bound_min,
        totals.bound_max,
        failed.len(),
        failed
    );
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

#[derive(Default)]
struct Totals {
    sim_ms: u64,
    faults: usize,
    crashes: usize,
    graceful: usize,
    pauses: usize,
    partitions: usize,
    blips: usize,
    elections: usize,
    failed_rebuilds: usize,
    step_downs: usize,
    grants: usize,
    session_grants: usize,
    overlaps: usize,
    explained: usize,
    violations: usize,
    unexplained: usize,
    inversions: usize,
    deposed: usize,
    deposed_guards: usize,
    lost: usize,
    excused_losses: usize,
    liveness: usize,
    liveness_ms: u64,
    bound_min: u64,
    bound_max: u64,
}

impl Totals {
    fn add(&mut self, r: &leasehold_sim::Report, bound: u64) {
        self.sim_ms += r.sim_ms;
        self.faults += r.faults();
        self.crashes += r.crashes;
        self.graceful += r.graceful_stops;
        self.pauses += r.pauses;
        self.partitions += r.partitions;
        self.blips += r.blips;
        self.elections += r.elections;
        self.failed_rebuilds += r.failed_rebuilds;
        self.step_downs += r.step_downs;
        self.grants += r.grants;
        self.session_grants += r.session_grants;
        self.overlaps += r.overlaps;
        self.explained += r.explained;
        self.violations += r.violations;
        self.unexplained += usize::from(!r.unexplained.is_empty());
        self.inversions += usize::from(!r.fence_inversions.is_empty());
        self.deposed += usize::from(!r.deposed_grants.is_empty());
        self.deposed_guards += usize::from(!r.deposed_speakers.is_empty());
        self.lost += usize::from(!r.lost_locks.is_empty());
        self.excused_losses += r.excused_losses;
        self.liveness += usize::from(!r.liveness.is_empty());
        self.liveness_ms = self.liveness_ms.max(r.liveness_ms);
        self.bound_min = if self.bound_min == 0 {
            bound
        } else {
            self.bound_min.min(bound)
        };
        self.bound_max = self.bound_max.max(bound);
    }
}
