//! The fault injector: one fault at a time (kills, pauses, partitions,
//! slow links, clock steps, replacements), healed before the next; and the
//! membership's growth to five and shrinking back to three.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

use crate::support::{self, Cluster};
use crate::{current_speaker, serves_again, set_plan, Fault, Faults, Run, MAX_LEASE_MS, NODES};

/// The fault injector: one fault at a time, healed before the next.
pub(crate) async fn inject(
    cluster: Arc<Mutex<Cluster>>,
    addrs: BTreeMap<u64, String>,
    run: &Run,
    stop: Instant,
) -> Vec<Fault> {
    let mut rng = StdRng::seed_from_u64(run.seed ^ 0xFA17);
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let base = &run.base;
    if run.faults == Faults::GrowAndShrink {
        return grow_and_shrink(&cluster, &http).await;
    }
    let mut faults = Vec::new();
    // Every mixed run replaces a member at least once, by its middle.
    let halfway = Instant::now() + (stop - Instant::now()) / 2;
    let mut replaced = false;
    tokio::time::sleep(Duration::from_millis(500)).await;
    while Instant::now() + Duration::from_secs(4) < stop {
        let mut node = rng.gen_range(1..=NODES);
        let mut kind = rng.gen_range(0..7);
        if !replaced && Instant::now() >= halfway && run.faults == Faults::Mixed {
            kind = 6;
        }
        if kind == 6 && rng.gen_bool(0.5) {
            node = current_speaker(&http, &addrs).await.unwrap_or(node);
        }
        if run.faults == Faults::SpeakerKills {
            // Holders take and renew their locks a while first.
            tokio::time::sleep(Duration::from_millis(2 * MAX_LEASE_MS)).await;
            node = current_speaker(&http, &addrs).await.unwrap_or(node);
            kind = 0;
        }
        let others: Vec<u64> = (1..=NODES).filter(|&n| n != node).collect();
        let length = Duration::from_millis(rng.gen_range(300..3000));
        let at = Instant::now();
        let kind = match kind {
            0 => {
                cluster.lock().unwrap().kill(node);
                tokio::time::sleep(length).await;
                cluster.lock().unwrap().spawn(node);
                "kill-restart"
            }
            1 => {
                cluster.lock().unwrap().pause(node);
                tokio::time::sleep(length).await;
                cluster.lock().unwrap().resume(node);
                "pause"
            }
            2 => {
                set_plan(&http, &addrs[&node], base, json!({"drop_to": others})).await;
                for o in &others {
                    set_plan(&http, &addrs[o], base, json!({"drop_to": [node]})).await;
                }
                tokio::time::sleep(length).await;
                for n in 1..=NODES {
                    set_plan(&http, &addrs[&n], base, json!({})).await;
                }
                "partition"
            }
            3 => {
                let to = others[rng.gen_range(0..others.len())];
                set_plan(&http, &addrs[&node], base, json!({"drop_to": [to]})).await;
                tokio::time::sleep(length).await;
                set_plan(&http, &addrs[&node], base, json!({})).await;
                "one-way-partition"
            }
            4 => {
                let delay = rng.gen_range(10..80);
                set_plan(&http, &addrs[&node], base, json!({"delay_ms": delay})).await;
                tokio::time::sleep(length).await;
                set_plan(&http, &addrs[&node], base, json!({})).await;
                "slow-link"
            }
            6 => {
                replace(&cluster, &http, &addrs, node).await;
                replaced = true;
                "member-replace"
            }
            _ => {
                let step: i64 = if rng.gen_bool(0.5) {
                    3_600_000
                } else {
                    -3_600_000
                };
                set_plan(&http, &addrs[&node], base, json!({"wall_step_ms": step})).await;
                tokio::time::sleep(length).await;
                set_plan(&http, &addrs[&node], base, json!({})).await;
                "wall-clock-step"
            }
        };
        let restarted = kind == "kill-restart" || kind == "member-replace";
        if restarted && base.as_object().is_some_and(|b| !b.is_empty()) {
            // A restarted node starts without the run's plan.
            set_plan(&http, &addrs[&node], base, json!({})).await;
        }
        let until = Instant::now();
        let served_again = serves_again(&http, &addrs).await;
        faults.push(Fault {
            at,
            until,
            kind,
            nodes: vec![node],
            served_again,
        });
        tokio::time::sleep(Duration::from_millis(rng.gen_range(200..1500))).await;
    }
    faults
}

/// A machine replaced: `node` is removed through another member (the
/// speaker too, which hands over), stops by itself, and joins again under
/// its id with its data directory wiped. The membership shrinks by one and
/// grows back while the clients work; each step must finish within
/// [`support::PATIENCE`].
async fn replace(
    cluster: &Arc<Mutex<Cluster>>,
    http: &reqwest::Client,
    addrs: &BTreeMap<u64, String>,
    node: u64,
) {
    let via = &addrs[&(node % NODES + 1)];
    remove(cluster, http, via, node).await;
    cluster.lock().unwrap().rejoin_wiped(node);
    wait_voting(http, via, node).await;
}

/// Removes `node` through the member at `via` (`DELETE
/// /v1/cluster/members/{id}`, asked again while a change or a speaker
/// change is under way), and waits until it has exited by itself.
async fn remove(cluster: &Arc<Mutex<Cluster>>, http: &reqwest::Client, via: &str, node: u64) {
    let start = Instant::now();
    loop {
        let answer = http
            .delete(format!("http://{via}/v1/cluster/members/{node}"))
            .header("x-leasehold-token", support::TOKEN)
            .timeout(Duration::from_secs(60))
            .send()
            .await;
        match answer.map(|a| a.status().as_u16()) {
            // 404: an earlier try whose answer was lost removed it.
            Ok(200) | Ok(404) => break,
            // A change or a speaker change under way, or the voters left
            // not yet answering the speaker after the last fault.
            other => assert!(
                start.elapsed() < support::PATIENCE,
                "node {node} was not removed: {other:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let code =
        tokio::task::block_in_place(|| cluster.lock().unwrap().wait_exit(node, support::PATIENCE));
    assert_eq!(code, Some(0), "removed node {node} did not stop by itself");
}

/// Waits until the member at `via` shows `node` voting, with no change
/// under way.
async fn wait_voting(http: &reqwest::Client, via: &str, node: u64) {
    let start = Instant::now();
    loop {
        let view = http
            .get(format!("http://{via}/v1/cluster"))
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        if let Ok(view) = view {
            let view: serde_json::Value = view.json().await.unwrap_or_default();
            let voter = view["members"].as_array().is_some_and(|members| {
                members
                    .iter()
                    .any(|m| m["id"] == json!(node) && m["role"] == json!("voter"))
            });
            if voter && view["changing"] == json!(false) {
                return;
            }
        }
        assert!(
            start.elapsed() < support::PATIENCE,
            "node {node} did not come to vote"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The membership changes of [`Faults::GrowAndShrink`]: nodes 4 and 5 join
/// (`--join`), then the speaker is removed, then the highest member other
/// than the speaker; a longest lease before each change, so that holders
/// hold across every one. Each change is recorded as a fault on the node
/// it adds or removes, with how soon after it every member served.
async fn grow_and_shrink(cluster: &Arc<Mutex<Cluster>>, http: &reqwest::Client) -> Vec<Fault> {
    let lease = Duration::from_millis(MAX_LEASE_MS);
    let live = || {
        let cluster = cluster.lock().unwrap();
        let live: BTreeMap<u64, String> = cluster
            .live()
            .into_iter()
            .map(|id| (id, cluster.addrs[&id].clone()))
            .collect();
        live
    };
    let mut faults = Vec::new();
    let record = |faults: &mut Vec<Fault>, at, kind, node, served_again| {
        faults.push(Fault {
            at,
            until: Instant::now(),
            kind,
            nodes: vec![node],
            served_again,
        })
    };
    for node in [4, 5] {
        tokio::time::sleep(lease).await;
        let at = Instant::now();
        cluster.lock().unwrap().spawn_joining(node);
        wait_voting(http, &live()[&1], node).await;
        let served = serves_again(http, &live()).await;
        record(&mut faults, at, "member-add", node, served);
    }
    for step in 0..2 {
        tokio::time::sleep(lease).await;
        let members = live();
        let speaker = current_speaker(http, &members).await.expect("a speaker");
        let node = match step {
            0 => speaker,
            _ => *members.keys().filter(|n| **n != speaker).max().unwrap(),
        };
        let at = Instant::now();
        let via = members.iter().find(|(n, _)| **n != node).unwrap().1.clone();
        remove(cluster, http, &via, node).await;
        let served = serves_again(http, &live()).await;
        record(&mut faults, at, "member-remove", node, served);
    }
    assert_eq!(live().len(), 3, "the cluster shrank back to three");
    faults
}
