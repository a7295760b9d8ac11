//! The client conformance suite (clients/conformance) run with the Rust
//! client: each scenario of `scenarios.json` is a module here with a test
//! over each of the client's transports (`binary`: frames only, no
//! fallback; `http`: HTTP/1.1 and JSON), each against a cluster of its
//! own, and a scenario the file lists that no test runs fails
//! `every_scenario_is_run`.

mod steps;

use leasehold_client::TransportKind;
use serde_json::Value;

const SCENARIOS: &str = include_str!("../../clients/conformance/scenarios.json");

fn scenarios() -> Vec<Value> {
    let file: Value = serde_json::from_str(SCENARIOS).expect("scenarios.json is JSON");
    file["scenarios"]
        .as_array()
        .expect("a list of scenarios")
        .clone()
}

/// Runs scenario `id` whole with clients over `transport`, failing at its
/// first step that differs.
async fn run(id: &str, transport: TransportKind) {
    if std::env::var("CONFORMANCE_ONLY").is_ok_and(|only| !id.contains(&only)) {
        return;
    }
    let scenario = scenarios()
        .into_iter()
        .find(|s| s["id"] == id)
        .unwrap_or_else(|| panic!("no scenario {id}"));
    let env: std::collections::HashMap<String, String> = scenario["env"]
        .as_object()
        .map(|vars| {
            vars.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    let cluster = crate::support::up::UpCluster::start(&scenario["cluster"]).await;
    let mut run = steps::Run::new(cluster, env, transport);
    for (i, step) in scenario["steps"].as_array().unwrap().iter().enumerate() {
        if let Err(why) = run.step(step).await {
            panic!("scenario {id}, step {i} ({step}): {why}");
        }
    }
}

/// A `CONFORMANCE_ONLY` that no scenario's id contains runs none: that
/// fails, rather than passing with nothing run.
#[test]
fn conformance_only_names_a_scenario() {
    if let Ok(only) = std::env::var("CONFORMANCE_ONLY") {
        let named = scenarios()
            .iter()
            .any(|s| s["id"].as_str().is_some_and(|id| id.contains(&only)));
        assert!(named, "no scenario's id contains CONFORMANCE_ONLY={only:?}");
    }
}

macro_rules! scenarios {
    ($($test:ident => $id:literal,)*) => {
        $(
            mod $test {
                use leasehold_client::TransportKind;

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn binary() {
                    super::run($id, TransportKind::Binary).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn http() {
                    super::run($id, TransportKind::Http).await;
                }
            }
        )*

        #[test]
        fn every_scenario_is_run() {
            let run: Vec<&str> = vec![$($id),*];
            for scenario in scenarios() {
                let id = scenario["id"].as_str().unwrap();
                assert!(run.contains(&id), "scenario {id} has no test here");
            }
        }
    };
}

scenarios! {
    try_acquire_held_then_free => "try-acquire-held-then-free",
    blocking_acquire_served_on_release => "blocking-acquire-served-on-release",
    blocking_acquire_wait_runs_out => "blocking-acquire-wait-runs-out",
    renewal_keeps_the_lock => "renewal-keeps-the-lock",
    renewal_follows_its_schedule => "renewal-follows-its-schedule",
    renewal_schedule_checked_before_sending => "renewal-schedule-checked-before-sending",
    loss_refused_is_signalled => "loss-refused-is-signalled",
    loss_lapsed_counted_from_the_send => "loss-lapsed-counted-from-the-send",
    moves_on_no_answer => "moves-on-no-answer",
    moves_on_503 => "moves-on-503",
    endpoints_dead_and_alive => "endpoints-dead-and-alive",
    retry_is_idempotent => "retry-is-idempotent",
    release_retry_is_idempotent => "release-retry-is-idempotent",
    fences_grow_across_a_speaker_change => "fences-grow-across-a-speaker-change",
    fenced_release => "fenced-release",
    with_lock_runs_and_releases => "with-lock-runs-and-releases",
    with_lock_cancelled_on_loss => "with-lock-cancelled-on-loss",
    election_campaign_resign_observe => "election-campaign-resign-observe",
    election_gives_up_and_loses => "election-gives-up-and-loses",
    shared_locks => "shared-locks",
    semaphore => "semaphore",
    sets_all_or_nothing => "sets-all-or-nothing",
    sessions => "sessions",
    session_moves_on_no_answer => "session-moves-on-no-answer",
    lock_delay_keeps_the_name_closed => "lock-delay-keeps-the-name-closed",
    tokens_and_tls => "tokens-and-tls",
}
