//! The kinds' promises, each shown to be checked: a short run of the
//! contended workload (readers and writers of `chaos/2`, two permits of
//! `chaos/3`, sets of `chaos/0` and `chaos/1`) under mixed faults in
//! strict mode keeps every promise, and with the speaker breaking one of
//! them (the chaos fault plan's sabotage) the checker must see that one
//! broken. The three self-tests share one clean run (they differ only in
//! the sabotage): the first of them to run makes it.

use serde_json::json;
use tokio::sync::OnceCell;

use crate::checker::Checked;
use crate::{env_u64, run, Faults, Run, Workload, ONE_AT_A_TIME};

/// A self-test's runs are short: each sabotage is seen within seconds.
const SECONDS: u64 = 6;

/// A short strict run of the contended workload under mixed faults, with
/// `base` (a sabotage, or nothing) on every node.
fn short(seed: u64, base: serde_json::Value) -> Run {
    Run {
        mode: "strict",
        seconds: SECONDS,
        seed,
        base,
        faults: Faults::Mixed,
        workload: Workload::Contended,
    }
}

/// The kinds a clean run must have granted for the self-tests to judge.
const JUDGED: [&str; 3] = ["shared", "permit", "in_set"];

/// The clean short run, made once for the suite's run (with the seed of
/// the self-test that made it: its report says which), and every promise
/// kept in it. A short run under faults grants a kind only now and then
/// (runs in CI granted no reader in six seconds while a writer held the
/// readers' name for seconds; writers of it now hold briefly): a run that granted none
/// of one of [`JUDGED`] is followed by another seed, at most
/// [`SABOTAGED_RUNS`] in all, each keeping every promise.
async fn clean(seed: u64) -> &'static Checked {
    static CLEAN: OnceCell<Checked> = OnceCell::const_new();
    let clean = CLEAN
        .get_or_init(|| async move {
            let mut next = 0;
            loop {
                let checked = run(short(seed + next, json!({}))).await;
                checked.assert_kept();
                let missing = JUDGED
                    .into_iter()
                    .find(|kind| checked.report["grants_by_kind"][*kind].as_u64() <= Some(0));
                match missing {
                    Some(kind) if next + 1 < SABOTAGED_RUNS => {
                        eprintln!(
                            "chaos: the clean run granted no {kind}; seed {}",
                            seed + next + 1
                        );
                        next += 1;
                    }
                    _ => return checked,
                }
            }
        })
        .await;
    for kind in JUDGED {
        let granted = clean.report["grants_by_kind"][kind].as_u64();
        assert!(
            granted > Some(0),
            "no {kind} grant to judge: {}",
            clean.report
        );
    }
    clean
}

/// Runs the short workload with `sabotage` on every node until `caught`
/// says the checker saw it broken, for at most [`SABOTAGED_RUNS`] seeds
/// from `seed`; returns the last run's result. A short run under faults
/// grants a kind only now and then (one run in CI granted two sets in six
/// seconds, none of them beside a holder of either name), so one run that
/// shows nothing is no proof the checker is blind; three are.
async fn sabotaged_until(
    seed: u64,
    sabotage: serde_json::Value,
    caught: impl Fn(&Checked) -> bool,
) -> Checked {
    let mut last = run(short(seed, sabotage.clone())).await;
    for next in 1..SABOTAGED_RUNS {
        if caught(&last) {
            break;
        }
        eprintln!(
            "chaos: the sabotage {sabotage} went unseen; seed {}",
            seed + next
        );
        last = run(short(seed + next, sabotage.clone())).await;
    }
    last
}

/// How many short runs a sabotage has to show itself.
const SABOTAGED_RUNS: u64 = 3;

/// Never a writer beside another holder: the clean run keeps it; with the
/// speaker granting exclusive requests as shared ones (`writers_shared`)
/// the checker must see a writer held beside another holder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_is_held_alone_and_granting_it_shared_is_caught() {
    let seed = env_u64("CHAOS_SEED", rand::random::<u32>() as u64);
    eprintln!("chaos, writers: seed {seed}");
    let _alone = ONE_AT_A_TIME.lock().await;
    clean(seed).await;
    let sabotaged = sabotaged_until(seed, json!({"writers_shared": true}), |c| {
        c.writer_beside > 0
    })
    .await;
    assert!(
        sabotaged.writer_beside > 0,
        "a speaker granting writers as readers held none beside another holder: {}",
        sabotaged.report
    );
}

/// A set all or nothing: the clean run grants every set whole, in one
/// step; with the speaker granting what of a set is free (`sets_partial`)
/// the checker must see a set granted in part.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_is_granted_whole_and_granting_it_in_part_is_caught() {
    let seed = env_u64("CHAOS_SEED", rand::random::<u32>() as u64);
    eprintln!("chaos, sets: seed {seed}");
    let _alone = ONE_AT_A_TIME.lock().await;
    clean(seed).await;
    let sabotaged = sabotaged_until(seed, json!({"sets_partial": true}), |c| {
        !c.sets_broken.is_empty()
    })
    .await;
    assert!(
        !sabotaged.sets_broken.is_empty(),
        "a speaker granting sets in part granted none in part: {}",
        sabotaged.report
    );
}

/// Never more holders than permits: the clean run keeps `chaos/3` to its
/// two; with the speaker admitting one permit past the count
/// (`permits_overfull`) the checker must see a third holder beside two.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_held_up_to_the_count_and_one_past_it_is_caught() {
    let seed = env_u64("CHAOS_SEED", rand::random::<u32>() as u64);
    eprintln!("chaos, permits: seed {seed}");
    let _alone = ONE_AT_A_TIME.lock().await;
    clean(seed).await;
    let sabotaged = sabotaged_until(seed, json!({"permits_overfull": true}), |c| {
        c.permits_overfull > 0
    })
    .await;
    assert!(
        sabotaged.permits_overfull > 0,
        "a speaker admitting a permit past the count held none past it: {}",
        sabotaged.report
    );
}
