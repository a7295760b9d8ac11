//! The chaos suite's session holds: a client opens a session and takes two
//! or three of the names the plain holders take in it, holds them while the
//! session renews in the background (each lock claimed until it is lost, or
//! the session's lease ends on the holder's count), and closes the session
//! or drops it; or, through plain HTTP, renews it a few times and abandons
//! it, as a holder that stalled (its locks claimed to the lease's end, and
//! lapsing with it). And the self-test: a speaker that renews a session but
//! not its locks must be caught.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold_client::{AcquireOptions, Client, Kind, SessionOptions};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::checker::{History, SessionEnd};
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
    log: &Arc<Mutex<History>>,
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
    let url = urls[rng.gen_range(0..urls.len())].clone();
    let (records, ended) = if rng.gen_bool(0.25) {
        abandon_http_session(&url, endpoints, rng, seed, workload, plan).await?
    } else {
        hold_library_session(client, endpoints, rng, seed, workload, plan).await?
    };
    let locks: Vec<(usize, u64)> = records.iter().map(|i| (i.name, i.fence)).collect();
    let mut log_now = log.lock().unwrap();
    log_now.intervals.extend(records);
    if let Some((how, due_free)) = ended {
        let probing = probe_ended(url, locks, how, due_free, log.clone());
        log_now.probes.push(tokio::spawn(probing));
    }
    Ok(())
}

/// Asks the nodes in turn, every 100 ms until `done`, which term their
/// speaker leads, and records each rise of the highest term seen with a
/// speaker known: after the last answer of the older term was asked for,
/// and by when the newer one's arrived. A new speaker's rebuild may read a
/// lock of a session from a member its end had not reached (it then runs
/// out on its own): the checker excuses a sighting near one.
pub(crate) async fn watch_terms(
    addrs: BTreeMap<u64, String>,
    done: CancellationToken,
    log: Arc<Mutex<History>>,
) {
    let http = reqwest::Client::new();
    let (mut highest, mut last_asked) = (0, Instant::now());
    for addr in addrs.values().cycle() {
        let asked = Instant::now();
        let answer = http
            .get(format!("http://{addr}/v1/cluster"))
            .timeout(Duration::from_millis(500))
            .send()
            .await;
        let view = match answer {
            Ok(answer) => answer.json::<serde_json::Value>().await.ok(),
            Err(_) => None,
        };
        let term = view
            .filter(|v| v["leader"].is_u64())
            .and_then(|v| v["term"].as_u64());
        if let Some(term) = term {
            if term > highest && highest > 0 {
                let change = (last_asked, Instant::now());
                log.lock().unwrap().speaker_changes.push(change);
            }
            if term >= highest {
                (highest, last_asked) = (term, asked);
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = done.cancelled() => return,
        }
    }
}

/// How long after a session's lease ran out on its holder's count its
/// locks may still be held: the speaker counts the lease from its own
/// grant or renewal, a little after the holder's send, and its expiry
/// task may run late on a loaded machine.
pub(crate) const LAPSE_MARGIN: Duration = Duration::from_millis(1000);

/// How the session of a hold ended, when the holder knows: `closed` (its
/// close answered) or `lapsed`, and from when its locks must be free.
type Ended = Option<(&'static str, Instant)>;

/// Once `due_free` has come, asks the node at `url` for each of `locks`'
/// names (retrying for up to two seconds while it answers neither the
/// lock nor `404`), and records whether the lock of that fence was among
/// the name's holders: the checker holds every sighting against the
/// promise that a session's locks end with it.
async fn probe_ended(
    url: String,
    locks: Vec<(usize, u64)>,
    how: &'static str,
    due_free: Instant,
    log: Arc<Mutex<History>>,
) {
    tokio::time::sleep_until(due_free.into()).await;
    let http = reqwest::Client::new();
    for (name, fence) in locks {
        let give_up = Instant::now() + Duration::from_secs(2);
        let seen_held = loop {
            let sent = Instant::now();
            let answer = http
                .get(format!("http://{url}/v1/locks/chaos%2F{name}"))
                .timeout(Duration::from_secs(2))
                .send()
                .await;
            let answer = match answer {
                Ok(a) if a.status().as_u16() == 404 => break Some(None),
                Ok(a) if a.status().is_success() => a.json::<serde_json::Value>().await.ok(),
                _ => None,
            };
            if let Some(answer) = answer {
                let lock = &answer["lock"];
                let others = lock["others"].as_array().into_iter().flatten();
                let held = std::iter::once(lock).chain(others);
                let fences: Vec<u64> = held.filter_map(|l| l["fence"].as_u64()).collect();
                break Some(fences.contains(&fence).then_some(sent));
            }
            if Instant::now() > give_up {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        if let Some(seen_held) = seen_held {
            log.lock().unwrap().session_ends.push(SessionEnd {
                name,
                fence,
                how,
                due_free,
                seen_held,
            });
        }
    }
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
) -> Result<(Vec<Interval>, Ended), ()> {
    let options = SessionOptions {
        ttl: Some(LEASE),
        holder: Some(format!("w{seed}")),
        ..Default::default()
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
                loss: lock.loss(),
                in_set: false,
                session: true,
                closed_until: end,
            }
        })
        .collect();
    let mut ended = None;
    if rng.gen_bool(0.65) {
        if session.close().await.is_ok() {
            ended = Some(("closed", Instant::now()));
        }
    } else {
        drop(session);
    }
    Ok((records, ended))
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
/// finds the session gone. Once every renewal sent was answered, the
/// session's end on the holder's count is known: its locks are to be free
/// [`LAPSE_MARGIN`] after it.
async fn abandon_http_session(
    url: &str,
    endpoints: &[u64],
    rng: &mut StdRng,
    seed: u64,
    workload: Workload,
    plan: Plan,
) -> Result<(Vec<Interval>, Ended), ()> {
    let http = &reqwest::Client::new();
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
    // The session's end on the holder's count, while every renewal sent
    // was answered (one unanswered may have been served).
    let mut lapses = Some(ends);
    for _ in 0..rng.gen_range(0..=2) {
        let due = (Instant::now() + LEASE / 3).min(ends - LEASE / 10);
        tokio::time::sleep_until(due.into()).await;
        match post(http, url, "/v1/sessions/renew", json!({"id": id})).await {
            Ok((sent, renewed)) => {
                let renewed_to = lease_end(sent, &renewed).map_or(ends, |e| e.max(ends));
                lapses = lapses.map(|_| renewed_to);
                let locks = renewed["session"]["locks"].as_u64().unwrap_or(0);
                if locks < held.len() as u64 {
                    lost = Some(Instant::now().min(ends));
                    break;
                }
                ends = renewed_to;
            }
            Err(404) => {
                lost = Some(Instant::now().min(ends));
                break;
            }
            // No answer, or "retry": the lease counted so far stands, and
            // the holder stalls.
            Err(_) => {
                lapses = None;
                break;
            }
        }
    }
    let end = lost.unwrap_or(ends);
    let ended = lapses.map(|at| ("lapsed", at + LAPSE_MARGIN));
    let records = held
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
        .collect();
    Ok((records, ended))
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

/// A session's locks end with it: half the clients hold names in sessions
/// (closed, dropped, or abandoned to lapse), the other half take the same
/// names, while the speaker is killed once; each lock of a session whose
/// close was answered is probed at once, and each of one abandoned once
/// its lease ran out on the holder's count plus [`LAPSE_MARGIN`]: no probe
/// may find it held. With the speaker's close ending a session's grant
/// alone and its renewals giving its locks a lease past its own (the
/// self-test), the probes must find them held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_locks_end_with_it_and_leaving_them_held_is_caught() {
    let seed = env_u64("CHAOS_SEED", rand::random::<u32>() as u64);
    eprintln!("chaos, session ends: seed {seed}");
    let sessions = |base| Run {
        mode: "strict",
        // One kill of the speaker, 8.5 s in (the other fault kinds are the
        // mixed run's: its contended workload holds names in sessions too).
        seconds: 14,
        seed,
        base,
        faults: Faults::SpeakerKills,
        workload: Workload::Sessions,
    };
    let _alone = ONE_AT_A_TIME.lock().await;
    let clean = run(sessions(json!({}))).await;
    clean.assert_kept();
    assert!(
        clean.report["session_locks_probed_after_close"]
            .as_u64()
            .unwrap_or(0)
            > 0,
        "no closed session's lock probed: {}",
        clean.report
    );
    let sabotaged = run(sessions(json!({"session_end_leaves_locks": true}))).await;
    assert!(
        !sabotaged.left_after_end.is_empty(),
        "a speaker leaving a session's locks held after its end was not seen: {}",
        sabotaged.report
    );
}
