//! CI's share of the simulation: a thousand seeds of the mixed faults, each
//! a different cluster size, mode, copies, loss rate and fault schedule,
//! some seeds of every targeted scenario, and the sabotaged protocols each
//! caught. A
//! failure names its seed; `scripts/sim --reproduce SEED --trace` replays it
//! (add `--scenario` and `--sabotage` as the test names them).

mod common;

use common::with_sessions;
use leasehold_sim::{run, Config, Report, Sabotage, Scenario};

/// The protocol's sabotage with the switches `names` set.
fn switched(names: &[&str]) -> Sabotage {
    let mut sabotage = Sabotage::NONE;
    for name in names {
        assert!(sabotage.switch(name), "{name}");
    }
    sabotage
}

fn seeds(default: u64) -> u64 {
    std::env::var("SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn failures(scenario: Scenario, seeds: std::ops::Range<u64>) -> (usize, Vec<(u64, Report)>) {
    let mut grants = 0;
    let mut failed = Vec::new();
    for seed in seeds {
        let mut report = run(seed, &Config::scenario(seed, scenario));
        grants += report.grants;
        if !report.ok() {
            report.trace.clear();
            failed.push((seed, report));
        }
    }
    (grants, failed)
}

#[test]
fn a_thousand_seeds_keep_every_promise() {
    let count = seeds(1000);
    let (grants, failed) = failures(Scenario::Mixed, 0..count);
    assert!(
        grants > count as usize * 10,
        "the workload made too few grants to judge ({grants})"
    );
    assert!(failed.is_empty(), "seeds that broke a promise: {failed:#?}");
}

/// The targeted scenarios are no harsher than the protocol allows: without
/// sabotage, every promise holds in them too.
#[test]
fn every_scenario_keeps_every_promise() {
    for scenario in Scenario::TARGETED {
        let (grants, failed) = failures(scenario, 0..40);
        assert!(
            grants > 400,
            "{scenario:?}: too few grants to judge ({grants})"
        );
        assert!(failed.is_empty(), "{scenario:?}: {failed:#?}");
    }
}

/// Everything comes from the seed: two runs of one seed trace the same
/// events (the table's hash maps are seeded at random in every process, so
/// nothing may depend on their order).
#[test]
fn a_seed_replays_exactly() {
    // Seeds where a table turns several waiters away at once (their
    // answers come in hash order): with the order left to the hash maps,
    // each would diverge about half the time.
    let mixed = [42, 82, 148, 173].map(|seed| (seed, Scenario::Mixed));
    let paused = [34, 41, 43, 50, 63, 70].map(|seed| (seed, Scenario::SpeakerPauses));
    // Copies, renewals moving between nodes, and a crash with copies
    // queued.
    let crashes = [15, 442].map(|seed| (seed, Scenario::SpeakerCrashes));
    for (seed, scenario) in mixed.into_iter().chain(paused).chain(crashes) {
        let mut config = Config::scenario(seed, scenario);
        config.trace = true;
        let (a, b) = (run(seed, &config), run(seed, &config));
        assert!(a.trace.len() > 20, "a trace to compare");
        assert_eq!(a.trace, b.trace, "seed {seed} replays");
        assert_eq!(
            (a.grants, a.overlaps, a.elections, a.lost_messages, a.sim_ms),
            (b.grants, b.overlaps, b.elections, b.lost_messages, b.sim_ms)
        );
    }
}

/// The first seed below `bound` whose run, with `sabotage`, fails `caught`.
fn first_caught(
    scenario: Scenario,
    sabotage: Sabotage,
    bound: u64,
    caught: impl Fn(&Report) -> bool,
) -> Option<u64> {
    first_caught_with(scenario, sabotage, None, bound, caught)
}

/// [`first_caught`], with `copies` instead of each seed's own.
fn first_caught_with(
    scenario: Scenario,
    sabotage: Sabotage,
    copies: Option<usize>,
    bound: u64,
    caught: impl Fn(&Report) -> bool,
) -> Option<u64> {
    let seed = (0..bound).find(|&seed| {
        let mut config = Config::scenario(seed, scenario);
        config.sabotage = sabotage;
        config.copies = copies.unwrap_or(config.copies);
        caught(&run(seed, &config))
    });
    println!("{sabotage:?} in {scenario:?} ({copies:?} copies): first caught at seed {seed:?}");
    seed
}

/// The checker is not blind: a new speaker that serves from an empty table
/// lets two clients hold one name (strict mode allows no overlap at all).
#[test]
fn skipping_the_rebuild_is_caught_by_exclusion() {
    let caught = (0..100).find(|&seed| {
        let mut config = Config::from_seed(seed);
        config.sabotage = switched(&["skip-rebuild"]);
        config.strict = true;
        !run(seed, &config).unexplained.is_empty()
    });
    println!("SkipRebuild: first caught at seed {caught:?}");
    assert!(caught.is_some(), "SkipRebuild went unnoticed in 100 seeds");
}

/// The checker's proceed-mode excuse is not blind either: it excuses only
/// overlaps near a rebuild that missed as many members as there are copies.
/// A speaker serving from an empty table having read every member is no
/// such rebuild, so the overlaps it makes stay unexplained in proceed mode
/// too (an excuse widened to every proceed-mode overlap fails this test).
#[test]
fn skipping_the_rebuild_is_caught_in_proceed_mode_too() {
    let caught = (0..100).find(|&seed| {
        let mut config = Config::from_seed(seed);
        config.sabotage = switched(&["skip-rebuild"]);
        config.strict = false;
        !run(seed, &config).unexplained.is_empty()
    });
    println!("SkipRebuild (proceed): first caught at seed {caught:?}");
    assert!(caught.is_some(), "SkipRebuild went unnoticed in 100 seeds");
}

/// A speaker paused for longer than a strict hold wakes to requests queued
/// while it slept; without the guard it grants them from its old table, to
/// clients of names the new speaker has granted since. With copies those
/// grants never reach a client (the members, read by the new term, refuse
/// the copies and the forwarded answers): the overlap shows with one copy.
#[test]
fn ignoring_the_leader_lease_is_caught_by_exclusion() {
    let overlap = first_caught_with(
        Scenario::SpeakerPauses,
        switched(&["guard"]),
        Some(1),
        50,
        |r| !r.unexplained.is_empty(),
    );
    assert!(overlap.is_some(), "no overlap in 50 seeds");
    let deposed = first_caught(Scenario::SpeakerPauses, switched(&["guard"]), 20, |r| {
        !r.deposed_grants.is_empty()
    });
    assert!(deposed.is_some(), "no deposed grant in 20 seeds");
}

/// Finding 1: a leader whose ReadIndex gave up during a quorum blip keeps
/// its term when the blip ends; without retries it serves 503 for as long
/// as the term lasts, and the liveness check must say so.
#[test]
fn no_rebuild_retry_is_caught_by_liveness() {
    let caught = first_caught(
        Scenario::QuorumBlip,
        switched(&["rebuild-retry"]),
        20,
        |r| !r.liveness.is_empty(),
    );
    assert!(
        caught.is_some(),
        "NoRebuildRetry went unnoticed in 20 seeds"
    );
}

/// Finding 2: a follower that restarts votes at once (openraft reloads its
/// vote with a zero lease), so a follower cut off from the speaker can be
/// elected while the speaker's guard still counts on the restarted
/// follower's last acknowledgement. Without the restart wait a deposed
/// speaker can grant, and the exclusion check must say so.
#[test]
fn no_restart_wait_is_caught_by_exclusion() {
    let caught = first_caught(
        Scenario::RestartBehindCut,
        switched(&["restart-wait"]),
        20,
        |r| !r.deposed_speakers.is_empty() || !r.deposed_grants.is_empty(),
    );
    assert!(caught.is_some(), "NoRestartWait went unnoticed in 20 seeds");
}

/// A regression for a bug the simulation once found: a rebuild that counts
/// reported leases from when it sent its reads ends a lease early when a
/// report comes late (here a speaker that dozed off until its successor's
/// read arrived), and grants the name while its holder still holds it, in
/// strict mode too. Counted from each report's arrival, the table errs long.
/// With copies, the copy holder's report is on time and keeps the lease
/// long enough: the bug shows with one copy.
#[test]
fn counting_reports_from_the_read_is_caught_by_exclusion() {
    let caught = first_caught_with(
        Scenario::SlowReports,
        switched(&["count-from-send"]),
        Some(1),
        30,
        |r| !r.unexplained.is_empty(),
    );
    assert!(caught.is_some(), "CountFromSend went unnoticed in 30 seeds");
}

/// Issue 11: a speaker that answers its own client before the copy is
/// acknowledged, and crashes right after (the copy still in its queue),
/// leaves the grant on no live member: the next speaker sees every member
/// but the crashed one, counts the rebuild as complete, and answers the
/// holder's next renewal "not held" although only one member failed.
#[test]
fn unacked_copies_are_caught_by_the_renewal_property() {
    let caught = first_caught(
        Scenario::SpeakerCrashes,
        switched(&["unacked-copies"]),
        20,
        |r| !r.lost_locks.is_empty(),
    );
    assert!(caught.is_some(), "UnackedCopies went unnoticed in 20 seeds");
}

/// Issue 1 of the copies work: a rebuild that read each member once missed
/// two members to one crash and one lost read, counted itself incomplete
/// and, in proceed mode, answered the holder's next renewal "not held"
/// although only one member failed. Reading a failed member again within
/// the rebuild timeout (2201560) keeps it; the checker no longer excuses
/// losses to lost reads, and catches the node that read once.
#[test]
fn reading_each_member_once_is_caught_by_the_renewal_property() {
    let caught = first_caught(
        Scenario::SpeakerCrashes,
        switched(&["read-once"]),
        1000,
        |r| !r.lost_locks.is_empty(),
    );
    assert!(caught.is_some(), "ReadOnce went unnoticed in 1000 seeds");
}

/// In strict mode either fix of 2201560 alone keeps such locks: a renewal
/// refused during the strict hold ("unavailable", the node's 503) moves on
/// to the member the rebuild missed, which reclaims the lock from its
/// record. The node before it, which read each member once and answered
/// "not held" during the hold, lost them (seed 244 of speaker crashes,
/// strict, the first).
#[test]
fn the_strict_node_before_the_read_fixes_is_caught_by_the_renewal_property() {
    let lost = |seed: u64, sabotage: Sabotage| {
        let mut config = Config::scenario(seed, Scenario::SpeakerCrashes);
        config.strict = true;
        config.sabotage = sabotage;
        !run(seed, &config).lost_locks.is_empty()
    };
    let caught = (0..1000).find(|&seed| lost(seed, switched(&["read-once", "not-held-in-hold"])));
    println!("ReadOnce and NotHeldInHold, strict: first caught at seed {caught:?}");
    let seed = caught.expect("the old node went unnoticed in 1000 strict seeds");
    assert!(
        !lost(seed, switched(&["read-once"])),
        "reads once, 503 in the hold: kept"
    );
    assert!(
        !lost(seed, switched(&["not-held-in-hold"])),
        "reads again: kept"
    );
    assert!(!lost(seed, Sabotage::NONE), "the node now: kept");
}

/// Runs `seeds` of `scenario` with names of every kind (readers beside
/// writers, semaphores of two), `sabotage` switched on.
fn with_kinds(scenario: Scenario, seed: u64, sabotage: Sabotage) -> Report {
    let mut config = Config::scenario(seed, scenario);
    config.kinds = true;
    config.sabotage = sabotage;
    run(seed, &config)
}

/// Shared locks and semaphores keep their promises under every fault: no
/// writer beside another holder, never more holders than permits, no
/// renewed reader or permit lost to fewer crashes than copies, and the
/// cluster serves again once the faults heal.
#[test]
fn every_kind_keeps_its_promises_under_every_fault() {
    let scenarios = std::iter::once((Scenario::Mixed, seeds(300)))
        .chain(Scenario::TARGETED.into_iter().map(|s| (s, 20)));
    for (scenario, count) in scenarios {
        let mut grants = 0;
        let mut failed = Vec::new();
        for seed in 0..count {
            let mut report = with_kinds(scenario, seed, Sabotage::NONE);
            grants += report.grants;
            if !report.ok() {
                report.trace.clear();
                failed.push((seed, report));
            }
        }
        assert!(
            grants > count as usize * 10,
            "{scenario:?}: too few grants to judge ({grants})"
        );
        assert!(failed.is_empty(), "{scenario:?}: {failed:#?}");
    }
}

/// The checker sees a writer beside other holders: a speaker that grants
/// writers as readers is caught.
#[test]
fn a_writer_granted_as_a_reader_is_caught() {
    let caught = (0..200).find(|&seed| {
        let report = with_kinds(Scenario::Mixed, seed, switched(&["writers-shared"]));
        !report.unexplained.is_empty()
    });
    println!("writers-shared: first caught at seed {caught:?}");
    assert!(
        caught.is_some(),
        "writers granted as readers went unnoticed"
    );
}

/// A rebuild that takes every lock read for an exclusive one (as a member
/// of a build before kinds reports it) keeps one reader or permit of a
/// name and loses the others: the renewal property catches it.
#[test]
fn a_rebuild_blind_to_kinds_is_caught() {
    let caught = (0..500).find(|&seed| {
        let report = with_kinds(Scenario::SpeakerCrashes, seed, switched(&["kinds-unread"]));
        !report.lost_locks.is_empty()
    });
    println!("kinds-unread: first caught at seed {caught:?}");
    let seed = caught.expect("a rebuild blind to kinds went unnoticed in 500 seeds");
    assert!(
        with_kinds(Scenario::SpeakerCrashes, seed, Sabotage::NONE).ok(),
        "seed {seed} keeps every promise without the sabotage"
    );
}

/// More holders than permits are caught: a speaker that grants a permit
/// request as one of a semaphore with one permit more (`permits-overfull`)
/// lets a third holder share a semaphore of two, under the mixed faults
/// and every targeted scenario; each seed that catches it passes without
/// the sabotage.
#[test]
fn a_semaphore_granted_past_its_permits_is_caught_under_every_fault() {
    let sabotage = switched(&["permits-overfull"]);
    for scenario in std::iter::once(Scenario::Mixed).chain(Scenario::TARGETED) {
        let caught = (0..100).find(|&seed| {
            let report = with_kinds(scenario, seed, sabotage);
            report
                .unexplained
                .iter()
                .any(|v| v.contains("is holder 3 of"))
        });
        println!("permits-overfull in {scenario:?}: first caught at seed {caught:?}");
        let seed = caught.expect("a semaphore past its permits went unnoticed in 100 seeds");
        assert!(
            with_kinds(scenario, seed, Sabotage::NONE).ok(),
            "{scenario:?}: seed {seed} keeps every promise without the sabotage"
        );
    }
}

/// Runs `seed` of `scenario` with lock-delays (half the grants ask for one),
/// `sabotage` switched on.
fn with_delays(scenario: Scenario, seed: u64, sabotage: Sabotage) -> Report {
    let mut config = Config::scenario(seed, scenario);
    config.delays = true;
    config.sabotage = sabotage;
    run(seed, &config)
}

/// Every mixed seed (300 by default) and 20 of each targeted scenario
/// pass, each run by `run_one`.
fn every_scenario_passes(run_one: impl Fn(Scenario, u64) -> Report) {
    let scenarios = std::iter::once((Scenario::Mixed, seeds(300)))
        .chain(Scenario::TARGETED.into_iter().map(|s| (s, 20)));
    for (scenario, count) in scenarios {
        let mut failed = Vec::new();
        for seed in 0..count {
            let mut report = run_one(scenario, seed);
            if !report.ok() {
                report.trace.clear();
                failed.push((seed, report));
            }
        }
        assert!(failed.is_empty(), "{scenario:?}: {failed:#?}");
    }
}

/// A lease that ran out unreleased keeps its name closed for its delay
/// under every fault: no grant of the name before the holder's lease end
/// plus the delay, in both rebuild modes' scenarios.
#[test]
fn a_lapsed_names_delay_holds_under_every_fault() {
    every_scenario_passes(|scenario, seed| with_delays(scenario, seed, Sabotage::NONE));
}

/// The checker sees a name granted inside a delay: a speaker that drops the
/// lock-delay is caught.
#[test]
fn a_speaker_ignoring_the_lock_delay_is_caught() {
    let caught = (0..200)
        .find(|&seed| !with_delays(Scenario::Mixed, seed, switched(&["delay-ignored"])).ok());
    println!("delay-ignored: first caught at seed {caught:?}");
    assert!(
        caught.is_some(),
        "a speaker ignoring the delay went unnoticed"
    );
}

/// Locks of sessions ask for a lock-delay too (half of them, with
/// `delays`): a session left to lapse keeps each of its locks' names closed
/// for its delay, in both rebuild modes under every fault; and a speaker
/// that drops the delay is caught on a lock of a session.
#[test]
fn a_lapsed_sessions_delays_hold_under_every_fault_and_dropping_them_is_caught() {
    let with = |scenario, seed, strict, sabotage| {
        let mut config = Config::scenario(seed, scenario);
        config.sessions = true;
        config.delays = true;
        config.strict = strict;
        config.sabotage = sabotage;
        run(seed, &config)
    };
    for strict in [false, true] {
        every_scenario_passes(|scenario, seed| with(scenario, seed, strict, Sabotage::NONE));
    }
    let caught = (0..300).find(|&seed| {
        with(Scenario::Mixed, seed, true, switched(&["delay-ignored"]))
            .unexplained
            .iter()
            .any(|v| v.contains("held in a session"))
    });
    println!("delay-ignored on a lock of a session: first caught at seed {caught:?}");
    assert!(
        caught.is_some(),
        "a speaker ignoring a session lock's delay went unnoticed"
    );
}

/// Runs `seed` of `scenario` with sets of names now and then, `sabotage`
/// switched on.
fn with_sets(scenario: Scenario, seed: u64, sabotage: Sabotage) -> Report {
    let mut config = Config::scenario(seed, scenario);
    config.sets = true;
    config.sabotage = sabotage;
    run(seed, &config)
}

/// Sets of names beside single names keep their promises under every
/// fault: each set answered whole (every name asked, in order, with
/// consecutive fences) or not at all, and no name held twice.
#[test]
fn sets_are_granted_whole_and_exclusion_holds_under_every_fault() {
    every_scenario_passes(|scenario, seed| with_sets(scenario, seed, Sabotage::NONE));
}

/// A speaker that grants what it can of a set, one name at a time, is
/// caught: a set answered in part.
#[test]
fn a_set_granted_in_part_is_caught() {
    let caught = (0..200).find(|&seed| {
        let report = with_sets(Scenario::Mixed, seed, switched(&["sets-partial"]));
        report
            .unexplained
            .iter()
            .any(|v| v.starts_with("a set not granted whole"))
    });
    println!("sets-partial: first caught at seed {caught:?}");
    assert!(caught.is_some(), "a set granted in part went unnoticed");
}

/// Sessions beside plain holders keep their promises under the mixed
/// faults (300 seeds by default) and every targeted scenario (20 seeds), in
/// both rebuild modes: each lock of a session, held to the end of its
/// session's lease on the holder's count as each renewal of the session
/// leaves it, has one holder at a time, and none whose session its holder
/// kept renewing is lost to fewer failed members than copies.
#[test]
fn a_sessions_locks_end_with_it_and_have_one_holder_under_faults() {
    let scenarios: Vec<(Scenario, u64)> = std::iter::once((Scenario::Mixed, seeds(300)))
        .chain(Scenario::TARGETED.into_iter().map(|s| (s, 20)))
        .collect();
    for strict in [false, true] {
        for &(scenario, count) in &scenarios {
            let (mut grants, mut in_sessions, mut failed) = (0, 0, Vec::new());
            for seed in 0..count {
                let mut report = with_sessions(scenario, seed, strict, Sabotage::NONE);
                grants += report.grants;
                in_sessions += report.session_grants;
                if !report.ok() {
                    report.trace.clear();
                    failed.push((seed, report));
                }
            }
            assert!(
                in_sessions > count as usize && in_sessions * 10 > grants,
                "{scenario:?} (strict {strict}): too few locks of sessions to judge \
                 ({in_sessions} of {grants})"
            );
            assert!(
                failed.is_empty(),
                "{scenario:?} (strict {strict}): {failed:#?}"
            );
        }
    }
}

/// Sessions whose copies are renewed by the session's copy (protocol 7:
/// the session's grant with the count and digest of its locks; a member
/// keeping other locks is sent them all) keep the same promises, under the
/// mixed faults (300 seeds by default) and every targeted scenario (20
/// seeds), in both rebuild modes.
#[test]
fn sessions_renewed_by_the_sessions_copy_keep_their_promises_under_faults() {
    let scenarios: Vec<(Scenario, u64)> = std::iter::once((Scenario::Mixed, seeds(300)))
        .chain(Scenario::TARGETED.into_iter().map(|s| (s, 20)))
        .collect();
    for strict in [false, true] {
        for &(scenario, count) in &scenarios {
            let failed: Vec<(u64, Report)> = (0..count)
                .filter_map(|seed| {
                    let mut config = Config::scenario(seed, scenario);
                    config.sessions = true;
                    config.session_copies = true;
                    config.strict = strict;
                    let mut report = run(seed, &config);
                    report.trace.clear();
                    (!report.ok()).then_some((seed, report))
                })
                .collect();
            assert!(
                failed.is_empty(),
                "{scenario:?} (strict {strict}): {failed:#?}"
            );
        }
    }
}

/// Sessions a rebuild missed taken back from the renewing node's records
/// (protocol 7, `--session-reclaim`) keep the same promises, under the
/// mixed faults (300 seeds by default) and every targeted scenario (20
/// seeds), in both rebuild modes; the mixed seeds do take sessions back
/// with their locks (13 of 300 strict seeds and 19 of 300 proceed seeds
/// when written).
#[test]
fn sessions_taken_back_from_a_nodes_records_keep_their_promises_under_faults() {
    let scenarios: Vec<(Scenario, u64)> = std::iter::once((Scenario::Mixed, seeds(300)))
        .chain(Scenario::TARGETED.into_iter().map(|s| (s, 20)))
        .collect();
    for strict in [false, true] {
        for &(scenario, count) in &scenarios {
            let (mut taken_back, mut failed) = (0, Vec::new());
            for seed in 0..count {
                let mut config = Config::scenario(seed, scenario);
                config.sessions = true;
                config.session_copies = true;
                config.session_reclaim = true;
                config.strict = strict;
                config.trace = scenario == Scenario::Mixed;
                let mut report = run(seed, &config);
                taken_back += report
                    .trace
                    .iter()
                    .filter(|l| l.contains("back from node") && l.ends_with("Ok(())"))
                    .count();
                report.trace.clear();
                if !report.ok() {
                    failed.push((seed, report));
                }
            }
            assert!(
                failed.is_empty(),
                "{scenario:?} (strict {strict}): {failed:#?}"
            );
            if scenario == Scenario::Mixed && count >= 100 {
                assert!(
                    taken_back > 0,
                    "strict {strict}: no session taken back in {count} seeds"
                );
            }
        }
    }
}

/// A speaker that renews a session's grant but not its locks
/// (`session-locks-unfollowed`) is caught: a lock lapses at the speaker
/// while its holder's count, renewed with the session, runs; another
/// client is granted the name, or the next renewal's records lack the lock.
#[test]
fn a_speaker_renewing_a_session_but_not_its_locks_is_caught() {
    let sabotage = switched(&["session-locks-unfollowed"]);
    for strict in [false, true] {
        let caught = (0..20).find(|&seed| {
            let report = with_sessions(Scenario::Mixed, seed, strict, sabotage);
            !report.unexplained.is_empty() || !report.lost_locks.is_empty()
        });
        println!("session-locks-unfollowed (strict {strict}): first caught at seed {caught:?}");
        let seed = caught.expect("a session's locks left unrenewed went unnoticed in 20 seeds");
        assert!(
            with_sessions(Scenario::Mixed, seed, strict, Sabotage::NONE).ok(),
            "seed {seed} keeps every promise without the sabotage"
        );
    }
}

/// A session's locks end with it, by the check that looks for them after
/// its end (`Report::session_locks_kept`): a speaker that ends a closed
/// session's grant alone and lets its locks outlast its lapse
/// (`session-end-leaves-locks`) is caught, in both rebuild modes, under
/// the mixed faults and every targeted scenario; a lock named the holder
/// after its close was answered, and one after its lease ran out, each
/// seen; and each seed that catches it passes without the sabotage (the
/// same seeds keep every other promise with it: only this check sees it).
#[test]
fn a_sessions_locks_kept_past_its_end_are_caught_under_every_fault() {
    let sabotage = switched(&["session-end-leaves-locks"]);
    let (mut closed, mut lapsed) = (0, 0);
    for strict in [false, true] {
        for scenario in std::iter::once(Scenario::Mixed).chain(Scenario::TARGETED) {
            let caught = (0..100).find_map(|seed| {
                let report = with_sessions(scenario, seed, strict, sabotage);
                let kept = &report.session_locks_kept;
                closed += kept
                    .iter()
                    .filter(|v| v.contains("close was answered"))
                    .count();
                lapsed += kept.iter().filter(|v| v.contains("lease ran out")).count();
                (!kept.is_empty()).then_some((seed, report))
            });
            let seed = caught.as_ref().map(|(seed, _)| *seed);
            println!(
                "session-end-leaves-locks in {scenario:?} (strict {strict}): first caught at \
                 seed {seed:?}"
            );
            let (seed, report) =
                caught.expect("a session's locks kept past its end went unnoticed");
            let others = [
                &report.unexplained,
                &report.fence_inversions,
                &report.deposed_grants,
                &report.deposed_speakers,
                &report.lost_locks,
                &report.liveness,
            ];
            assert!(
                others.iter().all(|v| v.is_empty()),
                "{scenario:?} (strict {strict}): seed {seed} broke another promise: {others:?}"
            );
            assert!(
                with_sessions(scenario, seed, strict, Sabotage::NONE).ok(),
                "{scenario:?} (strict {strict}): seed {seed} keeps every promise without the \
                 sabotage"
            );
        }
    }
    assert!(closed > 0 && lapsed > 0, "closed {closed}, lapsed {lapsed}");
}

/// A session's close hands its names on, its locks in id order (not the
/// table's hash order): seeds where a close handed two names to waiting
/// requests at once replay exactly (each diverged about half the time).
#[test]
fn a_seed_with_sessions_replays_exactly() {
    let seeds = [
        (58, Scenario::Mixed, None),
        (15, Scenario::SpeakerCrashes, Some(true)),
    ];
    for (seed, scenario, strict) in seeds {
        let mut config = Config::scenario(seed, scenario);
        config.sessions = true;
        config.strict = strict.unwrap_or(config.strict);
        config.trace = true;
        let runs: Vec<Report> = (0..4).map(|_| run(seed, &config)).collect();
        assert!(
            runs[0].session_grants > 0,
            "seed {seed} holds locks in sessions"
        );
        for other in &runs[1..] {
            assert_eq!(runs[0].trace, other.trace, "seed {seed} replays");
        }
    }
}
