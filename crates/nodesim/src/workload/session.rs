//! A client's session: one lease that both exclusive names hang off,
//! renewed once for both, then closed or left to lapse. Each lock of it is
//! judged as any lock: held from its grant to the end of the session's
//! lease on the holder's count, renewed with the session; and the
//! session's end is kept (its close's answer, its lease's latest end) for
//! the check that its locks end with it.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::StatusCode;
use locktable::{Kind, LockId};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::Rng;
use serde_json::{json, Value};

use super::{answered_lock, held_refusal, through_any, Shared, Through};
use crate::history::{now, Call, Event};

/// One lock of the session as the client holds it: name, id, fence.
struct Held {
    name: String,
    id: String,
    fence: u64,
}

/// The end of the session's lease on the holder's count, from an answer
/// to a call sent at `sent`.
fn session_ends(sent: Duration, answer: &Value) -> Option<(String, Duration)> {
    let session = &answer["session"];
    let id = session["id"].as_str()?.to_string();
    let ttl = session["ttl_ms"].as_u64()?;
    let served = answer["served_ms"].as_u64().unwrap_or(0);
    Some((id, sent + Duration::from_millis(served + ttl)))
}

/// The digest of the ids of `locks` (32 hex digits), as a renewal sends it.
fn digest(locks: &[Held]) -> String {
    let digest = locks
        .iter()
        .filter_map(|l| l.id.parse::<LockId>().ok())
        .fold(0u128, |d, id| d ^ id.as_u128());
    format!("{digest:032x}")
}

/// Opens a session, takes both exclusive names in it (in a random order,
/// each through any node), renews it a third of a lease apart a few times,
/// then closes it or lets it lapse. A renewal refused ends every lock of
/// it; one whose answer lists the session's locks ends the ones missing.
///
/// With `delays`, half the locks ask for a lock-delay: the rule grants it
/// cut to the room the session's lease leaves within the longest lease, and
/// a session left to lapse keeps the name closed that long after its lease.
pub(super) async fn hold_session(
    client: usize,
    nodes: u64,
    (longest, delays): (u64, bool),
    rng: &mut StdRng,
    shared: &Arc<Mutex<Shared>>,
) {
    let push = |event| shared.lock().unwrap().history.push(event);
    let ttl_ms: u64 = rng.gen_range(longest / 2..=longest);
    let body = json!({"holder": format!("client{client}"), "ttl_ms": ttl_ms});
    let Some(Through {
        sent,
        status: StatusCode::OK,
        answer,
        ..
    }) = through_any(rng, nodes, "/v1/sessions/open", &body).await
    else {
        tokio::time::sleep(Duration::from_millis(rng.gen_range(20..150))).await;
        return;
    };
    let Some((session, mut ends)) = session_ends(sent, &answer) else {
        push(Event::Malformed(format!(
            "an open without its session: {answer}"
        )));
        return;
    };
    let call = |name: &str, id: &str, node, sent| Call {
        client,
        node,
        name: name.to_string(),
        id: id.to_string(),
        sent,
        at: now(),
    };
    let mut names = vec!["jobs/0".to_string(), "jobs/1".to_string()];
    names.shuffle(rng);
    let mut held: Vec<Held> = Vec::new();
    // Every lock granted in it, kept or not; when the speaker's lease of
    // it ends at the latest; whether a renewal may have been carried out
    // unanswered (then no one knows).
    let mut granted: Vec<(String, String, Duration)> = Vec::new();
    let lease = Duration::from_millis(ttl_ms);
    let mut lapsed_by = now() + lease;
    let mut in_doubt = false;
    for name in names {
        let mut body =
            json!({"name": name, "session": session, "holder": format!("client{client}")});
        // The delay the rule grants beside the session's lease, from what
        // was asked: not the answer's (a speaker that drops it is caught).
        let delay = match delays && rng.gen_bool(0.5) {
            true => {
                let asked = rng.gen_range(longest / 8..=longest / 2);
                body["lock_delay_ms"] = json!(asked);
                Duration::from_millis(asked.min(longest.saturating_sub(ttl_ms)))
            }
            false => Duration::ZERO,
        };
        let through = through_any(rng, nodes, "/v1/locks/acquire", &body).await;
        if let Some(Through {
            sent,
            status,
            answer,
            ..
        }) = &through
        {
            if let Some(refused) = held_refusal(&name, *sent, *status, answer) {
                push(refused);
            }
        }
        if let Some(Through {
            node,
            sent,
            status: StatusCode::OK,
            answer,
            ..
        }) = through
        {
            match answered_lock(sent, &name, &answer) {
                Ok((id, fence, lock_ends)) => {
                    push(Event::Held {
                        call: call(&name, &id, node, sent),
                        kind: Kind::Exclusive,
                        fence,
                        ends: lock_ends,
                        renewal: false,
                        delay,
                    });
                    granted.push((name.clone(), id.clone(), delay));
                    held.push(Held { name, id, fence });
                }
                Err(why) => {
                    push(Event::Malformed(why));
                    return;
                }
            }
        }
    }
    let mut kept = true;
    for _ in 0..rng.gen_range(0..6) {
        tokio::time::sleep(Duration::from_millis(ttl_ms / 3)).await;
        if now() >= ends {
            kept = false;
            break;
        }
        let body = json!({"id": session, "digest": digest(&held)});
        match through_any(rng, nodes, "/v1/sessions/renew", &body).await {
            Some(Through {
                node,
                sent,
                status: StatusCode::OK,
                answer,
                first,
            }) => {
                lapsed_by = lapsed_by.max(now() + lease);
                in_doubt |= !first;
                let Some((_, until)) = session_ends(sent, &answer) else {
                    push(Event::Malformed(format!(
                        "a renewal without its session: {answer}"
                    )));
                    return;
                };
                if let Some(ids) = answer["held"].as_array() {
                    let ids: Vec<&str> = ids.iter().filter_map(Value::as_str).collect();
                    held.retain(|lock| {
                        let kept = ids.contains(&lock.id.as_str());
                        if !kept {
                            push(Event::NotHeld(call(&lock.name, &lock.id, node, sent)));
                        }
                        kept
                    });
                }
                ends = until;
                for lock in &held {
                    push(Event::Held {
                        call: call(&lock.name, &lock.id, node, sent),
                        kind: Kind::Exclusive,
                        fence: lock.fence,
                        ends,
                        renewal: true,
                        delay: Duration::ZERO,
                    });
                }
            }
            Some(Through {
                node,
                sent,
                status: StatusCode::NOT_FOUND,
                first,
                ..
            }) => {
                in_doubt |= !first;
                for lock in &held {
                    push(Event::NotHeld(call(&lock.name, &lock.id, node, sent)));
                }
                kept = false;
                break;
            }
            _ => in_doubt = true,
        }
    }
    let mut closed = None;
    if kept && rng.gen_bool(0.7) {
        for lock in &held {
            push(Event::Released {
                name: lock.name.clone(),
                id: lock.id.clone(),
                sent: now(),
            });
        }
        let body = json!({"id": session});
        if let Some(Through {
            status: StatusCode::OK,
            ..
        }) = through_any(rng, nodes, "/v1/sessions/close", &body).await
        {
            closed = Some(now());
        }
    } else {
        tokio::time::sleep(ends.saturating_sub(now())).await;
    }
    push(Event::SessionEnded {
        session,
        locks: granted,
        closed,
        lapsed_by: (!in_doubt).then_some(lapsed_by),
    });
}
