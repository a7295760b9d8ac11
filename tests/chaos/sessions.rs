//! The chaos suite's session holds: a client opens a session and takes two
//! or three of the names the plain holders take in it, holds them while the
//! session renews in the background (each lock claimed until it is lost, or
//! the session's lease ends on the holder's count), and closes the session
//! or drops it; or, through plain HTTP, renews it a few times and abandons
//! it, as a holder that stalled (its locks claimed to the lease's end, and
//! lapsing with it). And the self-test: a speaker that renews a session but
//! not its locks must be caught.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold_client::{AcquireOptions, Client, Kind, SessionOptions};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use serde_json::json;

use crate::{env_u64, kind_for, run, Faults, Interval, Run, Workload, LEASE, NAMES, ONE_AT_A_TIME};

/// A session's hold: the names taken in it, in order, and how long they
/// are held once taken.
struct Plan {
    names: Vec<usize>,
    hold: Duration,
}

/// One session's hold, as [`hold_library_session`] or
/// [`abandon_http_session`] (a quarter of them) makes it.
pub(crate) async fn hold_session(
    client: &Client,
    urls: &[String],
    endpoints: &[u64],
    rng: &mut StdRng,
    seed: u64,
    workload: Workload,
    log: &Arc<Mutex<Vec<Interval>>>,
) -> Result<(), ()> {
    let mut names: Vec<usize> = (0..NAMES).collect();
    names.shuffle(rng);
    names.truncate(rng.gen_range(2..=3));
    // One order for every session: two sessions never wait on each other
    // for long (a wait is bounded anyway).
    names.sort_unstable();
    // The self-test's sessions mostly outlive a lease, so that their locks
    // see renewals of the session.
    let long = if workload == Workload::Sessions {
        0.6
    } else {
        0.3
    };
    let hold = if rng.gen_bool(long) {
        Duration::from_millis(rng.gen_range(2500..6000))
    } else {
        Duration::from_millis(rng.gen_range(20..1500))
    };
    let plan = Plan { names, hold };
    let records = if rng.gen_bool(0.25) {
        abandon_http_session(urls, endpoints, rng, seed, workload, plan).await?
    } else {
        hold_library_session(client, endpoints, rng, seed, workload, plan).await?
    };
    log.lock().unwrap().extend(records);
    Ok(())
}

/// A session of the client library: its names taken one by one, held
/// until `plan.hold` passes after the last (each lock's claim ends at once
/// when it is lost, and never past the session's lease on the holder's
/// count), then the session closed, or dropped (which closes it in the
/// background).
async fn hold_library_session(
    client: &Client,
    endpoints: &[u64],
    rng: &mut StdRng,
    seed: u64,
    workload: Workload,
    plan: Plan,
) -> Result<Vec<Interval>, ()> {
    let options = SessionOptions {
        ttl: Some(LEASE),
        holder: Some(format!("w{seed}")),
    };
    let session = client.open_session(options).await.map_err(drop)?;
    let mut held = Vec::new();
    for name in plan.names {
        let kind = kind_for(name, workload, rng);
        let options = AcquireOptions {
            kind,
            ..AcquireOptions::default()
                .wait(Duration::from_millis(rng.gen_range(0..800)))
                .holder(format!("w{seed}"))
        };
        if let Ok(lock) = session.acquire(&format!("chaos/{name}"), options).await {
            held.push((name, kind, Instant::now(), lock));
        }
    }
    if held.is_empty() {
        let _ = session.close().await;
        return Err(());
    }
    let deadline = tokio::time::Instant::now() + plan.hold;
    // Each lock watched on its own: a renewal may find one lost alone.
    let watchers: Vec<_> = held
        .iter()
        .map(|(.., lock)| {
            let lost = lock.lost_token();
            tokio::spawn(async move {
                tokio::select! {
                    _ = tokio::time::sleep_until(deadline) => (Instant::now(), false),
                    _ = lost.cancelled() => (Instant::now(), true),
                }
            })
        })
        .collect();
    let mut stopped = Vec::new();
    for watcher in watchers {
        stopped.push(watcher.await.unwrap());
    }
    // The holder stopped using each lock then, or when the session's lease
    // ran out on its own count, whichever came first.
    let counted = session.lease_ends();
    let records = held
        .into_iter()
        .zip(stopped)
        .map(|((name, kind, start, lock), (at, lost))| {
            let end = at.min(counted).max(start);
            Interval {
                name,
                kind,
                fence: lock.fence(),
                start,
                end,
                endpoints: endpoints.to_vec(),
                lost,
                loss: None,
                in_set: false,
                session: true,
                closed_until: end,
            }
        })
        .collect();
    if rng.gen_bool(0.65) {
        let _ = session.close().await;
    } else {
        drop(session);
    }
    Ok(records)
}

/// Posts `body` to `path` on the node at `url`: the answer's JSON with
/// when the call was sent, or its status (0: no answer).
async fn post(
    http: &reqwest::Client,
    url: &str,
    path: &str,
    body: serde_json::Value,
) -> Result<(Instant, serde_json::Value), u16> {
    let sent = Instant::now();
    let answer = http
        .post(format!("http://{url}{path}"))
        .json(&body)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map_err(|_| 0u16)?;
    let status = answer.status().as_u16();
    if status != 200 {
        return Err(status);
    }
    answer.json().await.map(|v| (sent, v)).map_err(|_| 0)
}

/// When a session's lease ends on the holder's count, from an answer that
/// granted or renewed it: `served_ms + ttl_ms` after the call's send.
fn lease_end(sent: Instant, answer: &serde_json::Value) -> Option<Instant> {
    let ttl = answer["session"]["ttl_ms"].as_u64()?;
    let served = answer["served_ms"].as_u64().unwrap_or(0);
    Some(sent + Duration::from_millis(served + ttl))
}

/// A session over plain HTTP that is abandoned: opened, its names taken,
/// renewed zero to two times (a third of the lease apart), then neither
/// renewed nor closed, as a holder that stalled. Its locks are claimed to
/// the session's lease end on the holder's count (the last renewal's), and
/// no longer once a renewal counts fewer locks than were taken (lost) or
/// finds the session gone.
async fn abandon_http_session(
    urls: &[String],
    endpoints: &[u64],
    rng: &mut StdRng,
    seed: u64,
    workload: Workload,
    plan: Plan,
) -> Result<Vec<Interval>, ()> {
    let http = &reqwest::Client::new();
    let url = &urls[rng.gen_range(0..urls.len())];
    let holder = format!("w{seed}");
    let open = json!({"ttl_ms": LEASE.as_millis() as u64, "holder": holder});
    let (sent, opened) = post(http, url, "/v1/sessions/open", open)
        .await
        .map_err(drop)?;
    let id = opened["session"]["id"].as_str().ok_or(())?.to_owned();
    let mut ends = lease_end(sent, &opened).ok_or(())?;
    let mut held = Vec::new();
    for name in plan.names {
        let kind = kind_for(name, workload, rng);
        let mut body = json!({
            "name": format!("chaos/{name}"),
            "session": id,
            "wait_ms": rng.gen_range(0..800),
            "holder": holder,
        });
        match kind {
            Kind::Shared => body["shared"] = json!(true),
            Kind::Permit(n) => body["permits"] = json!(n),
            _ => {}
        }
        if let Ok((_, answer)) = post(http, url, "/v1/locks/acquire", body).await {
            if let Some(fence) = answer["lock"]["fence"].as_u64() {
                held.push((name, kind, fence, Instant::now()));
            }
        }
    }
    let mut lost = None;
    for _ in 0..rng.gen_range(0..=2) {
        let due = (Instant::now() + LEASE / 3).min(ends - LEASE / 10);
        tokio::time::sleep_until(due.into()).await;
        match post(http, url, "/v1/sessions/renew", json!({"id": id})).await {
            Ok((sent, renewed)) => {
                let locks = renewed["session"]["locks"].as_u64().unwrap_or(0);
                if locks < held.len() as u64 {
                    lost = Some(Instant::now().min(ends));
                    break;
                }
                ends = lease_end(sent, &renewed).map_or(ends, |e| e.max(ends));
            }
            Err(404) => {
                lost = Some(Instant::now().min(ends));
                break;
            }
            // No answer, or "retry": the lease counted so far stands, and
            // the holder stalls.
            Err(_) => break,
        }
    }
    let end = lost.unwrap_or(ends);
    Ok(held
        .into_iter()
        .map(|(name, kind, fence, start)| Interval {
            name,
            kind,
            fence,
            start,
            end: end.max(start),
            endpoints: endpoints.to_vec(),
            lost: lost.is_some(),
            loss: None,
            in_set: false,
            session: true,
            closed_until: end.max(start),
        })
        .collect())
}

/// Sessions under the speaker's death: half the clients hold two or three
/// names each in sessions (most outliving a lease, renewed in the
/// background; some abandoned to lapse), the other half take the same
/// names plainly, while the speaker is killed twice; in strict mode no
/// grant may overlap a lock of a session its holder still counts held.
/// With the speaker renewing sessions but not their locks (the self-test),
/// a session's lock lapses while its holder counts it held, another client
/// is granted the name, and the checker must see it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_locks_live_with_it_and_ignoring_its_renewal_is_caught() {
    let seed = env_u64("CHAOS_SEED", rand::random::<u32>() as u64);
    eprintln!("chaos, sessions: seed {seed}");
    let sessions = |base| Run {
        mode: "strict",
        seconds: 20,
        seed,
        base,
        faults: Faults::SpeakerKills,
        workload: Workload::Sessions,
    };
    let _alone = ONE_AT_A_TIME.lock().await;
    let checked = run(sessions(json!({}))).await;
    checked.assert_kept();
    assert!(
        checked.report["grants_by_kind"]["in_session"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "no lock of a session to judge: {}",
        checked.report
    );
    let sabotaged = run(sessions(json!({"ignore_session_renewal": true}))).await;
    assert!(
        sabotaged.unexplained_after_session > 0,
        "a speaker renewing sessions but not their locks granted none of them again: {}",
        sabotaged.report
    );
}
