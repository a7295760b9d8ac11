//! The chaos suite's holds beside the plain one: a set of names, and a
//! name taken with a lock-delay and now and then abandoned.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold_client::{AcquireOptions, Client, Kind};
use rand::rngs::StdRng;
use rand::Rng;
use serde_json::json;

use crate::checker::History;
use crate::{Interval, LEASE, NAMES};

/// The name taken with a lock-delay.
pub(crate) const DELAYED: usize = NAMES;

/// Takes `chaos/4` with a lock-delay through one of the worker's nodes
/// over plain HTTP (the client library renews and releases on its own),
/// and either releases it after a short hold or abandons it: no renewal,
/// no release, as a holder that stalled (half of those renew once, late,
/// as a stalled holder waking up does). An abandoned lock's holder may
/// work until its lease ends on its own count (from its send); the name
/// must stay closed a delay longer, which the checker holds it to.
pub(crate) async fn hold_delayed(
    http: &reqwest::Client,
    urls: &[String],
    endpoints: &[u64],
    rng: &mut StdRng,
    seed: u64,
    log: &Arc<Mutex<History>>,
) -> Result<(), ()> {
    let url = &urls[rng.gen_range(0..urls.len())];
    let delay = Duration::from_millis(rng.gen_range(800..2000));
    let body = json!({
        "name": format!("chaos/{DELAYED}"),
        "lease_ms": rng.gen_range(500..1000),
        "lock_delay_ms": delay.as_millis() as u64,
        "wait_ms": rng.gen_range(0..3000),
        "holder": format!("w{seed}"),
    });
    let sent = Instant::now();
    let answer = http
        .post(format!("http://{url}/v1/locks/acquire"))
        .json(&body)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map_err(drop)?;
    if !answer.status().is_success() {
        return Err(());
    }
    let value: serde_json::Value = answer.json().await.map_err(drop)?;
    let start = Instant::now();
    let lock = &value["lock"];
    let (Some(ttl), Some(fence)) = (lock["ttl_ms"].as_u64(), lock["fence"].as_u64()) else {
        return Err(());
    };
    let served = value["served_ms"].as_u64().unwrap_or(0);
    let lease_ends = sent + Duration::from_millis(served + ttl);
    let (end, closed_until) = if rng.gen_bool(0.5) {
        if rng.gen_bool(0.5) {
            // A stalled holder that wakes up and renews late: refused,
            // and the name must stay closed all the same.
            tokio::time::sleep_until((lease_ends + Duration::from_millis(200)).into()).await;
            let renew = json!({ "name": lock["name"], "id": lock["id"] });
            let _ = http
                .post(format!("http://{url}/v1/locks/renew"))
                .json(&renew)
                .timeout(Duration::from_secs(5))
                .send()
                .await;
        }
        (lease_ends, lease_ends + delay)
    } else {
        let hold = Duration::from_millis(rng.gen_range(50..400));
        tokio::time::sleep_until((start + hold).min(lease_ends).into()).await;
        // The holder stops before it asks for the release.
        let end = Instant::now().min(lease_ends);
        let release = json!({ "name": lock["name"], "id": lock["id"] });
        let _ = http
            .post(format!("http://{url}/v1/locks/release"))
            .json(&release)
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        (end, end)
    };
    log.lock().unwrap().intervals.push(Interval {
        name: DELAYED,
        kind: Kind::Exclusive,
        fence,
        start,
        end,
        endpoints: endpoints.to_vec(),
        lost: false,
        loss: None,
        in_set: false,
        session: false,
        closed_until,
    });
    Ok(())
}

/// Takes `chaos/0` and `chaos/1` at once, in a random order, holds them a
/// while (stopping when the set is lost), and releases them; each lock
/// recorded as an interval of its own, ending when the set's holder
/// stops. A set granted otherwise than whole, or not in one step
/// (consecutive fences in the order asked), is recorded as broken (the
/// checker fails the run on it); what of it was granted is held and
/// judged all the same.
pub(crate) async fn hold_set(
    client: &Client,
    endpoints: &[u64],
    rng: &mut StdRng,
    seed: u64,
    log: &Arc<Mutex<History>>,
) -> Result<(), ()> {
    let mut names = [0usize, 1];
    if rng.gen_bool(0.5) {
        names.reverse();
    }
    let asked: Vec<String> = names.iter().map(|n| format!("chaos/{n}")).collect();
    let asked: Vec<&str> = asked.iter().map(String::as_str).collect();
    // A set waits longer than one name does: it needs both names free at
    // once, and the single holders of either would otherwise outlast its
    // wait so often that a short run grants no set to judge.
    let options = AcquireOptions::default()
        .lease(LEASE)
        .wait(Duration::from_millis(rng.gen_range(1000..6000)))
        .holder(format!("w{seed}"));
    let set = client.acquire_all(&asked, options).await.map_err(drop)?;
    let start = Instant::now();
    let granted: Vec<String> = set.locks().into_iter().map(|l| l.name).collect();
    let fences = set.fences();
    let one_step = fences.windows(2).all(|f| f[1] == f[0] + 1);
    if granted != asked || !one_step {
        log.lock().unwrap().sets_broken.push(format!(
            "asked {asked:?}, granted {granted:?} with fences {fences:?}"
        ));
    }
    let hold = Duration::from_millis(rng.gen_range(20..1500));
    let lost = tokio::select! {
        _ = tokio::time::sleep(hold) => false,
        _ = set.lost() => true,
    };
    let guards = set.guards();
    let end = guards
        .iter()
        .map(|g| g.lease_ends())
        .fold(Instant::now(), Instant::min);
    let records: Vec<Interval> = guards
        .iter()
        .map(|guard| Interval {
            name: chaos_name(guard.name()),
            kind: Kind::Exclusive,
            fence: guard.fence(),
            start,
            end,
            endpoints: endpoints.to_vec(),
            lost: lost && guard.is_lost(),
            loss: guard.loss(),
            in_set: true,
            session: false,
            closed_until: end,
        })
        .collect();
    let _ = set.release().await;
    log.lock().unwrap().intervals.extend(records);
    Ok(())
}

/// The number of a name the suite takes (`chaos/N`).
fn chaos_name(name: String) -> usize {
    let number = name.strip_prefix("chaos/").and_then(|n| n.parse().ok());
    number.unwrap_or_else(|| panic!("a name the suite does not take: {name}"))
}
