//! What runs beside the driver in a run: the clients taking, renewing and
//! releasing locks through random nodes, the observer noting who speaks,
//! a probe per node once the faults heal, and the operator carrying out a
//! change's steps; and what they share with the driver.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::{Method, StatusCode};
use locktable::{Kind, LeaseRule};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use crate::change::Doing;
use crate::client::{grant_through, CALL};
use crate::cluster;
use crate::history::{now, Call, Event, History};
use crate::net::call;

mod session;

/// What the driver and the clients share.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    /// What the clients saw.
    pub(crate) history: History,
    /// The speaker the observer saw last.
    pub(crate) speaker: Option<u64>,
    /// When the last fault healed.
    pub(crate) healed: Option<Duration>,
    /// The step of a change under way, and whose turn it is.
    pub(crate) change: Option<Doing>,
    /// The members, as the changes made them.
    pub(crate) members: BTreeSet<u64>,
}

/// The observer: asks the members in turn who speaks, and notes the
/// speaker it is told, until the faults heal.
pub(crate) async fn observe(nodes: u64, observer: Arc<Mutex<Shared>>) {
    let mut ask = 1;
    while observer.lock().unwrap().healed.is_none() {
        if let Some(s) = crate::client::speaker(ask).await {
            observer.lock().unwrap().speaker = Some(s);
        }
        ask = ask % nodes + 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The operator: carries out the steps of a change whose turn is its own
/// ([`Doing::operate`]), and notes who is a member as removals and joins
/// end.
pub(crate) async fn operator(nodes: u64, shared: Arc<Mutex<Shared>>) {
    let mut via = 0;
    loop {
        let (doing, healed) = {
            let shared = shared.lock().unwrap();
            (shared.change, shared.healed.is_some())
        };
        match doing {
            None if healed => return,
            Some(step) if step.operators() => {
                let (moved, asked) = step.operate(via, nodes).await;
                via = asked;
                let mut shared = shared.lock().unwrap();
                if shared.change == doing {
                    shared.change = moved;
                    match (step, moved) {
                        (Doing::Removing(id), None) => {
                            shared.members.remove(&id);
                        }
                        (Doing::Joining(id), None) => {
                            shared.members.insert(id);
                        }
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An answer through one of the nodes.
struct Through {
    /// The node that answered.
    node: u64,
    /// When the call that it answered was sent.
    sent: Duration,
    status: StatusCode,
    answer: Value,
    /// No node was tried before it: no earlier try may have been carried
    /// out with its answer lost.
    first: bool,
}

/// A client's calls through one node after another (in a random order)
/// until one answers other than `503` or not at all; `None` when none did.
async fn through_any(rng: &mut StdRng, nodes: u64, path: &str, body: &Value) -> Option<Through> {
    let mut order: Vec<u64> = (1..=nodes).collect();
    order.shuffle(rng);
    for (tried, node) in order.into_iter().enumerate() {
        let sent = now();
        match call(
            &cluster::addr(node),
            Method::POST,
            path,
            Some(body.clone()),
            CALL,
        )
        .await
        {
            Ok((StatusCode::SERVICE_UNAVAILABLE, _)) | Err(_) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok((status, answer)) => {
                return Some(Through {
                    node,
                    sent,
                    status,
                    answer,
                    first: tried == 0,
                })
            }
        }
    }
    None
}

/// The lock of a grant or renewal answered at `sent`: its id, its fence
/// and the end of its lease on the holder's count (`served_ms` is absent
/// from a renewal's answer: 0); what is missing or wrong, if the answer is
/// not one.
fn answered_lock(
    sent: Duration,
    name: &str,
    answer: &Value,
) -> Result<(String, u64, Duration), String> {
    let lock = &answer["lock"];
    let (Some(id), Some(fence), Some(ttl)) = (
        lock["id"].as_str(),
        lock["fence"].as_u64(),
        lock["ttl_ms"].as_u64(),
    ) else {
        return Err(format!(
            "an answer without a lock's id, fence and ttl_ms: {answer}"
        ));
    };
    if lock["name"] != json!(name) {
        return Err(format!("asked for {name}, answered {answer}"));
    }
    let served = answer["served_ms"].as_u64().unwrap_or(0);
    Ok((
        id.to_string(),
        fence,
        sent + Duration::from_millis(served + ttl),
    ))
}

/// A refusal naming the holder (`409 held`) of an acquire of `name` sent at
/// `sent`, as the history keeps it; `None` for any other answer.
fn held_refusal(name: &str, sent: Duration, status: StatusCode, answer: &Value) -> Option<Event> {
    let holder = answer["lock"]["id"].as_str()?;
    (status == StatusCode::CONFLICT).then(|| Event::Refused {
        name: name.to_string(),
        holder: holder.to_string(),
        sent,
        at: now(),
    })
}

/// A name of each kind, at random: an exclusive lock, a name readers
/// hold shared (a writer now and then), or a semaphore of two permits.
fn pick_kind(rng: &mut StdRng) -> (String, Kind) {
    match rng.gen_range(0..3) {
        0 => ("jobs/0".into(), Kind::Exclusive),
        1 if rng.gen_bool(0.7) => ("docs/0".into(), Kind::Shared),
        1 => ("docs/0".into(), Kind::Exclusive),
        _ => ("pool/0".into(), Kind::Permit(2)),
    }
}

/// What a client draws its work from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Draws {
    /// Its random numbers' seed.
    pub(crate) seed: u64,
    /// Names of every kind ([`crate::run::RunOptions::kinds`]).
    pub(crate) kinds: bool,
    /// Sets of names now and then ([`crate::run::RunOptions::sets`]).
    pub(crate) sets: bool,
    /// Lock-delays now and then ([`crate::run::RunOptions::delays`]).
    pub(crate) delays: bool,
    /// Sessions now and then ([`crate::run::RunOptions::sessions`]).
    pub(crate) sessions: bool,
}

/// The locks of a set's grant answered at `sent`, each as
/// [`answered_lock`] reads one; what is wrong if it is not the set whole:
/// a lock per name, in the order asked, with consecutive fences (granted
/// in one step).
fn answered_set(
    sent: Duration,
    names: &[String],
    answer: &Value,
) -> Result<Vec<(String, u64, Duration)>, String> {
    let Some(locks) = answer["locks"].as_array() else {
        return Err(format!("a set's grant without its locks: {answer}"));
    };
    if locks.len() != names.len() {
        return Err(format!("asked for the set {names:?}, granted {answer}"));
    }
    let held = names
        .iter()
        .zip(locks)
        .map(|(name, lock)| {
            let one = json!({"lock": lock, "served_ms": answer["served_ms"]});
            answered_lock(sent, name, &one)
        })
        .collect::<Result<Vec<_>, String>>()?;
    if !held.windows(2).all(|w| w[1].1 == w[0].1 + 1) {
        return Err(format!("a set granted in more than one step: {answer}"));
    }
    Ok(held)
}

/// Takes both exclusive names at once, in a random order, and holds them
/// as [`work`] holds one: renewed side by side, then released or left to
/// expire. A lock of the set found gone ends the set: the others are
/// released.
async fn hold_set(
    client: usize,
    nodes: u64,
    longest: u64,
    rng: &mut StdRng,
    shared: &Arc<Mutex<Shared>>,
) {
    let mut names = vec!["jobs/0".to_string(), "jobs/1".to_string()];
    names.shuffle(rng);
    let lease_ms: u64 = rng.gen_range(longest / 2..=longest);
    let body = json!({"names": names, "holder": format!("client{client}"), "lease_ms": lease_ms});
    let Some(Through {
        node,
        sent,
        status,
        answer,
        ..
    }) = through_any(rng, nodes, "/v1/locks/acquire", &body).await
    else {
        return;
    };
    if status != StatusCode::OK {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(20..150))).await;
        return;
    }
    let mut held = match answered_set(sent, &names, &answer) {
        Ok(held) => held,
        Err(why) => {
            shared.lock().unwrap().history.push(Event::Malformed(why));
            return;
        }
    };
    let call = |name: &str, id: &str, node, sent| Call {
        client,
        node,
        name: name.to_string(),
        id: id.to_string(),
        sent,
        at: now(),
    };
    for (name, (id, fence, ends)) in names.iter().zip(&held) {
        shared.lock().unwrap().history.push(Event::Held {
            call: call(name, id, node, sent),
            kind: Kind::Exclusive,
            fence: *fence,
            ends: *ends,
            renewal: false,
            delay: Duration::ZERO,
        });
    }
    let mut kept = true;
    for _ in 0..rng.gen_range(0..6) {
        tokio::time::sleep(Duration::from_millis(lease_ms / 3)).await;
        if held.iter().any(|(_, _, ends)| now() >= *ends) {
            kept = false;
            break;
        }
        for (name, (id, _, ends)) in names.iter().zip(held.iter_mut()) {
            let body = json!({"name": name, "id": id, "lease_ms": lease_ms});
            match through_any(rng, nodes, "/v1/locks/renew", &body).await {
                Some(Through {
                    node,
                    sent,
                    status: StatusCode::OK,
                    answer,
                    ..
                }) => {
                    let (renewed, fence, until) = match answered_lock(sent, name, &answer) {
                        Ok(lock) => lock,
                        Err(why) => {
                            shared.lock().unwrap().history.push(Event::Malformed(why));
                            return;
                        }
                    };
                    if renewed != *id {
                        let why = format!("renewed {id}, answered {answer}");
                        shared.lock().unwrap().history.push(Event::Malformed(why));
                        return;
                    }
                    *ends = until;
                    shared.lock().unwrap().history.push(Event::Held {
                        call: call(name, id, node, sent),
                        kind: Kind::Exclusive,
                        fence,
                        ends: until,
                        renewal: true,
                        delay: Duration::ZERO,
                    });
                }
                Some(Through {
                    node,
                    sent,
                    status: StatusCode::NOT_FOUND,
                    ..
                }) => {
                    let gone = call(name, id, node, sent);
                    shared.lock().unwrap().history.push(Event::NotHeld(gone));
                    kept = false;
                }
                _ => {}
            }
        }
        if !kept {
            break;
        }
    }
    if !kept || rng.gen_bool(0.7) {
        for (name, (id, _, _)) in names.iter().zip(&held) {
            shared.lock().unwrap().history.push(Event::Released {
                name: name.clone(),
                id: id.clone(),
                sent: now(),
            });
            let body = json!({"name": name, "id": id});
            if let Some(Through {
                node,
                sent,
                status: StatusCode::NOT_FOUND,
                first: true,
                ..
            }) = through_any(rng, nodes, "/v1/locks/release", &body).await
            {
                if kept {
                    let gone = call(name, id, node, sent);
                    shared.lock().unwrap().history.push(Event::NotHeld(gone));
                }
            }
        }
    } else {
        let last = held
            .iter()
            .map(|(_, _, ends)| *ends)
            .max()
            .unwrap_or_default();
        tokio::time::sleep(last.saturating_sub(now())).await;
    }
}

/// One client's work until the faults have healed and a little after:
/// take a random name with a lease of half the longest to the longest,
/// hold it for a while renewing a third of a lease apart, then release it
/// or let it expire.
pub(crate) async fn work(
    client: usize,
    nodes: u64,
    lease: LeaseRule,
    draws: Draws,
    shared: Arc<Mutex<Shared>>,
) {
    let Draws {
        seed,
        kinds,
        sets,
        delays,
        sessions,
    } = draws;
    let longest = u64::try_from(lease.max.as_millis()).unwrap_or(u64::MAX);
    let mut rng = StdRng::seed_from_u64(seed);
    let done = |shared: &Arc<Mutex<Shared>>| {
        shared
            .lock()
            .unwrap()
            .healed
            .is_some_and(|h| now() > h + Duration::from_secs(3))
    };
    while !done(&shared) {
        if sets && rng.gen_bool(0.3) {
            hold_set(client, nodes, longest, &mut rng, &shared).await;
            continue;
        }
        if sessions && rng.gen_bool(0.4) {
            session::hold_session(client, nodes, (longest, delays), &mut rng, &shared).await;
            continue;
        }
        let (name, kind) = match kinds {
            false => (format!("jobs/{}", rng.gen_range(0..2)), Kind::Exclusive),
            true => pick_kind(&mut rng),
        };
        let lease_ms: u64 = rng.gen_range(longest / 2..=longest);
        let mut body =
            json!({"name": name, "holder": format!("client{client}"), "lease_ms": lease_ms});
        match kind {
            Kind::Shared => body["shared"] = json!(true),
            Kind::Permit(n) => body["permits"] = json!(n),
            Kind::Exclusive => {}
        }
        let delay = if delays && rng.gen_bool(0.5) {
            Duration::from_millis(rng.gen_range(longest / 8..=longest / 2))
        } else {
            Duration::ZERO
        };
        if !delay.is_zero() {
            body["lock_delay_ms"] = json!(delay.as_millis() as u64);
        }
        let Some(Through {
            node,
            sent,
            status,
            answer,
            ..
        }) = through_any(&mut rng, nodes, "/v1/locks/acquire", &body).await
        else {
            continue;
        };
        if status != StatusCode::OK {
            if let Some(refused) = held_refusal(&name, sent, status, &answer) {
                shared.lock().unwrap().history.push(refused);
            }
            tokio::time::sleep(Duration::from_millis(rng.gen_range(20..150))).await;
            continue;
        }
        let (id, fence, mut ends) = match answered_lock(sent, &name, &answer) {
            Ok(lock) => lock,
            Err(why) => {
                shared.lock().unwrap().history.push(Event::Malformed(why));
                return;
            }
        };
        let held = |node, sent| Call {
            client,
            node,
            name: name.clone(),
            id: id.clone(),
            sent,
            at: now(),
        };
        shared.lock().unwrap().history.push(Event::Held {
            call: held(node, sent),
            kind,
            fence,
            ends,
            renewal: false,
            delay,
        });
        let renewals = rng.gen_range(0..6);
        let mut kept = true;
        for _ in 0..renewals {
            tokio::time::sleep(Duration::from_millis(lease_ms / 3)).await;
            if now() >= ends {
                kept = false;
                break;
            }
            let body = json!({"name": name, "id": id, "lease_ms": lease_ms});
            match through_any(&mut rng, nodes, "/v1/locks/renew", &body).await {
                Some(Through {
                    node,
                    sent,
                    status: StatusCode::OK,
                    answer,
                    ..
                }) => {
                    let renewed = answered_lock(sent, &name, &answer).and_then(|lock| match lock {
                        (renewed, ..) if renewed != id => {
                            Err(format!("renewed {id}, answered {answer}"))
                        }
                        lock => Ok(lock),
                    });
                    let (_, fence, until) = match renewed {
                        Ok(lock) => lock,
                        Err(why) => {
                            shared.lock().unwrap().history.push(Event::Malformed(why));
                            return;
                        }
                    };
                    ends = until;
                    shared.lock().unwrap().history.push(Event::Held {
                        call: held(node, sent),
                        kind,
                        fence,
                        ends,
                        renewal: true,
                        delay,
                    });
                }
                Some(Through {
                    node,
                    sent,
                    status: StatusCode::NOT_FOUND,
                    ..
                }) => {
                    shared
                        .lock()
                        .unwrap()
                        .history
                        .push(Event::NotHeld(held(node, sent)));
                    kept = false;
                    break;
                }
                _ => {}
            }
        }
        if kept && rng.gen_bool(0.7) {
            shared.lock().unwrap().history.push(Event::Released {
                name: name.clone(),
                id: id.clone(),
                sent: now(),
            });
            let body = json!({"name": name, "id": id});
            // A release answered not_held while the lease still ran was a
            // lock lost; unless an earlier try may have released it.
            if let Some(Through {
                node,
                sent,
                status: StatusCode::NOT_FOUND,
                first: true,
                ..
            }) = through_any(&mut rng, nodes, "/v1/locks/release", &body).await
            {
                shared
                    .lock()
                    .unwrap()
                    .history
                    .push(Event::NotHeld(held(node, sent)));
            }
        } else {
            // Let it expire: wait out the lease on the holder's count.
            let left = ends.saturating_sub(now());
            tokio::time::sleep(left).await;
        }
    }
}

/// Once the faults have healed, takes a fresh name through `node`, if it
/// is a member, until it is granted, and notes when.
pub(crate) async fn probe(node: u64, bound: Duration, shared: Arc<Mutex<Shared>>) {
    let healed = loop {
        if let Some(h) = shared.lock().unwrap().healed {
            break h;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    if !shared.lock().unwrap().members.contains(&node) {
        return;
    }
    let name = format!("probe/{node}");
    if let Some(at) = grant_through(node, &name, healed + bound * 3).await {
        shared
            .lock()
            .unwrap()
            .history
            .push(Event::Served { node, healed, at });
    }
}
