//! The checks run on every history: no two holders of a name overlap on
//! the holders' own conservative count unless both asked for kinds held
//! together (readers, permits of one semaphore), never more than a
//! semaphore's permits at once, a grant whose lease ran out unreleased
//! keeps its name closed for its lock-delay after the lease's end on its
//! holder's count, fences increase along each name's history
//! (between grants not held together), no lock is lost while its holder
//! renews in time, and every node serves again within the bound once the
//! faults heal; and a session's locks end with it: none is named the
//! holder in a refusal of an acquire sent after the session's close was
//! answered (but for a rebuild since), or after its lease ran out at the
//! latest plus [`SESSION_END_MARGIN`].
//!
//! The guard premise (two nodes never may grant at once) is checked on the
//! running nodes, by [`crate::guards`].
//!
//! The runs fault at most one member at a time and keep two copies of
//! every grant, so no rebuild misses as many members as there are copies:
//! the checks excuse nothing, in either rebuild mode; but for the changes
//! that lose a grant's every record before their fault (growth from one
//! node, a replacement in place), which run in strict mode and may lose a
//! lock but never grant it twice ([`Excuses`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use locktable::Kind;

#[cfg(test)]
use crate::history::Call;
use crate::history::{Event, History};
use crate::lease::LEASE;

/// One grant's time held on its holder's count: from each answer to the
/// end of the lease that answer gave, cut at the release.
#[derive(Debug, Default)]
struct Held {
    kind: Kind,
    fence: u64,
    first_granted: Duration,
    intervals: Vec<(Duration, Duration)>,
    released: Option<Duration>,
    delay: Duration,
}

/// How long past the latest end of a session's lease (its holder's latest
/// answer plus the lease asked) its locks may still hold at the speaker:
/// a record that counts a lease from its arrival (a copy, a report a
/// rebuild read) lengthens it by a message's latency, at most 100 ms on
/// the runs' network, and a few may follow each other within one lease;
/// and the expiry task frees a lapsed name at its next poll. The sabotage
/// `session-end-leaves-locks` keeps them up to a lease longer.
pub const SESSION_END_MARGIN: Duration = Duration::from_millis(500);

/// What the checks excuse.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Excuses {
    /// A lock answered not held while its lease ran: a run whose change
    /// loses as many records of a grant as it has copies (a grant made
    /// with one copy by a node that then crashes; a member stopped without
    /// handing over, then a crash) may lose it, and only exclusion is
    /// promised.
    pub losses: bool,
}

/// Every violation in `history`, in words; empty when it passed. `bound`
/// is how soon after the faults heal every node of `members` must serve.
pub fn check(
    history: &History,
    members: &BTreeSet<u64>,
    bound: Duration,
    excuses: Excuses,
) -> Vec<String> {
    let mut violations = Vec::new();
    let mut names: BTreeMap<&str, BTreeMap<&str, Held>> = BTreeMap::new();
    // The end of the lease each grant's holder last heard of.
    let mut ends: BTreeMap<&str, Duration> = BTreeMap::new();
    let mut served: BTreeMap<u64, Duration> = BTreeMap::new();
    for event in &history.events {
        match event {
            Event::Held {
                call,
                kind,
                fence,
                ends: until,
                renewal,
                delay,
            } => {
                let held = names
                    .entry(&call.name)
                    .or_default()
                    .entry(&call.id)
                    .or_default();
                if !renewal {
                    held.kind = *kind;
                    held.fence = *fence;
                    held.first_granted = call.at;
                    held.delay = *delay;
                } else if held.fence != *fence {
                    violations.push(format!(
                        "{}: renewal of {} answered fence {fence}, granted with {}",
                        call.name, call.id, held.fence
                    ));
                }
                held.intervals.push((call.at, *until));
                ends.insert(&call.id, *until);
            }
            Event::NotHeld(call) => {
                // The answer came while the lease still ran on the holder's
                // count, which ends no later than the speaker's: the
                // speaker answered while it should have held the lock.
                let lost = ends.get(call.id.as_str()).filter(|end| call.at < **end);
                if let Some(end) = lost.filter(|_| !excuses.losses) {
                    violations.push(format!(
                        "{}: {} lost: client {}'s renewal sent at {:?} was answered not_held \
                         by node {} at {:?}, its lease ending at {end:?}",
                        call.name, call.id, call.client, call.sent, call.node, call.at
                    ));
                }
            }
            Event::Released { name, id, sent } => {
                if let Some(held) = names
                    .get_mut(name.as_str())
                    .and_then(|n| n.get_mut(id.as_str()))
                {
                    held.released = Some(*sent);
                }
            }
            Event::Served { node, healed, at } => {
                served.insert(*node, at.saturating_sub(*healed));
            }
            Event::Malformed(why) => violations.push(why.clone()),
            Event::Refused { .. } | Event::SessionEnded { .. } | Event::Rebuilt { .. } => {}
        }
    }
    session_ends(history, &mut violations);
    for (name, grants) in &names {
        overlaps(name, grants, &mut violations);
        fences(name, grants, &mut violations);
    }
    for node in members {
        match served.get(node) {
            Some(after) if *after <= bound => {}
            Some(after) => violations.push(format!(
                "node {node} served {after:?} after the faults healed (bound {bound:?})"
            )),
            None => violations.push(format!("node {node} never served after the faults healed")),
        }
    }
    violations
}

/// Every lock of a session is free once the session ended: no acquire
/// sent after its close was answered, or after its lease ran out at the
/// latest plus [`SESSION_END_MARGIN`] and the lock's delay, is refused as
/// held by it. The close
/// is excused by a rebuild seen from the longest lease before it to the
/// refusal (a rebuilt table may take a released lock back from a record
/// that missed the release, until its lease ends); the lapse is not.
fn session_ends(history: &History, violations: &mut Vec<String>) {
    let mut ends = BTreeMap::new();
    let mut rebuilds = Vec::new();
    for event in &history.events {
        match event {
            Event::SessionEnded {
                session,
                locks,
                closed,
                lapsed_by,
            } => {
                for (name, id, delay) in locks {
                    let end = (session, closed, lapsed_by, *delay);
                    ends.insert((name.as_str(), id.as_str()), end);
                }
            }
            Event::Rebuilt { at, .. } => rebuilds.push(*at),
            _ => {}
        }
    }
    for event in &history.events {
        let Event::Refused {
            name,
            holder,
            sent,
            at,
        } = event
        else {
            continue;
        };
        let Some(&(session, closed, lapsed_by, delay)) =
            ends.get(&(name.as_str(), holder.as_str()))
        else {
            continue;
        };
        let rebuilt = |from: Duration| rebuilds.iter().any(|r| *r >= from && r <= at);
        let closed = closed.filter(|c| sent >= c && !rebuilt(c.saturating_sub(LEASE.max)));
        // A lapse leaves the name closed for the lock's delay.
        let lapsed = lapsed_by.filter(|l| *sent >= *l + SESSION_END_MARGIN + delay);
        let why = match (closed, lapsed) {
            (_, Some(l)) => format!("its lease ran out by {l:?} at the latest"),
            (Some(c), None) => format!("its close was answered at {c:?}"),
            (None, None) => continue,
        };
        violations.push(format!(
            "{name}: {holder} of session {session} refused an acquire sent at {sent:?} as its \
             holder, though {why}"
        ));
    }
}

/// The spans of time each grant of `name` was held, on its holder's
/// count, cut at its release; and, for a grant with a lock-delay, the delay
/// after its last lease's end on that count, when the name is closed as if
/// held, cut at a release sent meanwhile (the speaker's lease ends later
/// than the holder's count, so a release sent after that count may still
/// reach it while the lease runs, and free the name at once).
fn spans<'a>(grants: &'a BTreeMap<&str, Held>) -> Vec<(&'a str, Kind, Duration, Duration)> {
    grants
        .iter()
        .flat_map(|(id, held)| {
            let last_end = held.intervals.iter().map(|(_, to)| *to).max();
            let closed = last_end
                .filter(|_| !held.delay.is_zero())
                .map(|end| {
                    let until = (end + held.delay).min(held.released.unwrap_or(Duration::MAX));
                    (*id, held.kind, end, until)
                })
                .filter(|(_, _, from, until)| from < until);
            held.intervals
                .iter()
                .filter_map(move |(from, to)| {
                    let to = held.released.map_or(*to, |r| r.min(*to));
                    (from < &to).then_some((*id, held.kind, *from, to))
                })
                .chain(closed)
        })
        .collect()
}

/// Two grants of `name` whose times held meet, unless both are of kinds
/// held together; more grants held at once than a semaphore's permits.
fn overlaps(name: &str, grants: &BTreeMap<&str, Held>, violations: &mut Vec<String>) {
    let spans = spans(grants);
    for (i, (a, a_kind, a_from, a_to)) in spans.iter().enumerate() {
        for (b, b_kind, b_from, b_to) in &spans[i + 1..] {
            let meet = a != b && a_from < b_to && b_from < a_to;
            if meet && !a_kind.compatible(*b_kind) {
                violations.push(format!(
                    "{name}: {a} ({a_kind}) held {a_from:?}..{a_to:?} and {b} ({b_kind}) held \
                     {b_from:?}..{b_to:?}"
                ));
            }
        }
        // The grants held when `a`'s span began: at most the permits.
        let mut beside: Vec<&str> = spans
            .iter()
            .filter(|(b, b_kind, b_from, b_to)| {
                b != a && a_kind.compatible(*b_kind) && b_from <= a_from && a_from < b_to
            })
            .map(|(b, ..)| *b)
            .collect();
        beside.sort_unstable();
        beside.dedup();
        if beside.len() >= a_kind.limit() as usize {
            violations.push(format!(
                "{name}: {a} ({a_kind}) held from {a_from:?} beside {} others: {beside:?}",
                beside.len()
            ));
        }
    }
}

/// Grants of `name`, in the order they were first answered, whose fences
/// do not increase: of two that may be held together (readers, permits),
/// the answers may come in either order, so only grants that may not are
/// compared. A grant never held on its holder's count (every answer came
/// after the lease it told of had ended: it arrived late) has no fence
/// its holder uses, and is left out.
fn fences(name: &str, grants: &BTreeMap<&str, Held>, violations: &mut Vec<String>) {
    let mut order: Vec<(&Duration, &u64, &str, &Held)> = grants
        .iter()
        .filter(|(_, held)| held.intervals.iter().any(|(from, to)| from < to))
        .map(|(id, held)| (&held.first_granted, &held.fence, *id, held))
        .collect();
    order.sort_by_key(|(at, fence, id, _)| (**at, **fence, *id));
    for (i, (_, earlier, a, a_held)) in order.iter().enumerate() {
        for (_, later, b, b_held) in &order[i + 1..] {
            // Two grants that may be held together are not ordered by
            // fence: the speaker answers them in either order.
            if !a_held.kind.compatible(b_held.kind) && later <= earlier {
                violations.push(format!(
                    "{name}: {b} granted after {a} with fence {later}, not above {earlier}"
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: f64) -> Duration {
        Duration::from_secs_f64(secs)
    }

    fn call(name: &str, id: &str, sent: f64, at: f64) -> Call {
        Call {
            client: 0,
            node: 1,
            name: name.into(),
            id: id.into(),
            sent: s(sent),
            at: s(at),
        }
    }

    fn granted(name: &str, id: &str, fence: u64, at: f64, ends: f64) -> Event {
        Event::Held {
            call: call(name, id, at, at),
            kind: Kind::Exclusive,
            fence,
            ends: s(ends),
            renewal: false,
            delay: Duration::ZERO,
        }
    }

    fn delayed(name: &str, id: &str, fence: u64, at: f64, ends: f64, delay: f64) -> Event {
        let mut event = granted(name, id, fence, at, ends);
        if let Event::Held { delay: d, .. } = &mut event {
            *d = s(delay);
        }
        event
    }

    #[test]
    fn a_grant_inside_a_lapsed_grants_delay_is_caught_and_a_release_frees_at_once() {
        let inside = run(vec![
            delayed("a", "x", 1, 0.0, 2.0, 3.0),
            granted("a", "y", 2, 4.0, 6.0),
        ]);
        assert_eq!(inside.len(), 1, "{inside:?}");
        let after = run(vec![
            delayed("a", "x", 1, 0.0, 2.0, 3.0),
            granted("a", "y", 2, 5.0, 6.0),
        ]);
        assert!(after.is_empty(), "{after:?}");
        let released = run(vec![
            delayed("a", "x", 1, 0.0, 2.0, 3.0),
            Event::Released {
                name: "a".into(),
                id: "x".into(),
                sent: s(1.0),
            },
            granted("a", "y", 2, 1.5, 6.0),
        ]);
        assert!(released.is_empty(), "{released:?}");
        // A release sent after the holder's count of its lease ended may
        // still reach the speaker inside the lease: the name is closed
        // until then at most.
        let late = run(vec![
            delayed("a", "x", 1, 0.0, 2.0, 3.0),
            Event::Released {
                name: "a".into(),
                id: "x".into(),
                sent: s(2.5),
            },
            granted("a", "y", 2, 2.6, 6.0),
        ]);
        assert!(late.is_empty(), "{late:?}");
        let early = run(vec![
            delayed("a", "x", 1, 0.0, 2.0, 3.0),
            Event::Released {
                name: "a".into(),
                id: "x".into(),
                sent: s(2.5),
            },
            granted("a", "y", 2, 2.4, 6.0),
        ]);
        assert_eq!(early.len(), 1, "{early:?}");
    }

    fn served_all() -> Vec<Event> {
        (1..=3)
            .map(|node| Event::Served {
                node,
                healed: s(10.0),
                at: s(11.0),
            })
            .collect()
    }

    fn run(events: Vec<Event>) -> Vec<String> {
        let mut history = History::default();
        for e in events.into_iter().chain(served_all()) {
            history.push(e);
        }
        check(&history, &(1..=3).collect(), s(5.0), Excuses::default())
    }

    #[test]
    fn grants_one_after_another_pass() {
        let v = run(vec![
            granted("a", "x", 1, 0.0, 2.0),
            granted("a", "y", 2, 2.5, 4.0),
        ]);
        assert!(v.is_empty(), "{v:?}");
    }

    #[test]
    fn two_holders_at_once_are_caught() {
        let v = run(vec![
            granted("a", "x", 1, 0.0, 2.0),
            granted("a", "y", 2, 1.0, 3.0),
        ]);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("held"), "{v:?}");
    }

    #[test]
    fn a_release_ends_the_time_held() {
        let v = run(vec![
            granted("a", "x", 1, 0.0, 2.0),
            Event::Released {
                name: "a".into(),
                id: "x".into(),
                sent: s(0.5),
            },
            granted("a", "y", 2, 1.0, 3.0),
        ]);
        assert!(v.is_empty(), "{v:?}");
    }

    #[test]
    fn a_fence_that_does_not_increase_is_caught() {
        let v = run(vec![
            granted("a", "x", 5, 0.0, 1.0),
            granted("a", "y", 4, 2.0, 3.0),
        ]);
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("not above"), "{v:?}");
    }

    /// A grant answered after its lease had ended on its holder's count
    /// (it arrived late: the holder never held it) is no fence its holder
    /// uses: a lower fence answered so, after a higher one, is no
    /// violation (nodesim seed 100045 with --sessions: a session's lock
    /// granted as the session lapsed, answered after the next holder's).
    #[test]
    fn a_grant_that_arrived_after_its_lease_ended_has_no_fence_order() {
        let v = run(vec![
            granted("a", "x", 5, 1.0, 3.0),
            granted("a", "y", 4, 2.0, 1.5),
        ]);
        assert!(v.is_empty(), "{v:?}");
    }

    #[test]
    fn a_lock_lost_while_renewed_in_time_is_caught() {
        let lost = |sent: f64| {
            run(vec![
                granted("a", "x", 1, 0.0, 2.0),
                Event::NotHeld(call("a", "x", sent, sent + 0.1)),
            ])
        };
        assert_eq!(lost(1.0).len(), 1);
        // Answered after its lease ended on the holder's count (the renewal
        // may have reached the speaker too late): not a loss.
        assert!(lost(1.95).is_empty());
        assert!(lost(2.5).is_empty());
    }

    fn session_ended(closed: Option<f64>, lapsed_by: Option<f64>) -> Event {
        session_ended_with_delay(closed, lapsed_by, 0.0)
    }

    fn session_ended_with_delay(closed: Option<f64>, lapsed_by: Option<f64>, delay: f64) -> Event {
        Event::SessionEnded {
            session: "s".into(),
            locks: vec![("a".into(), "x".into(), s(delay))],
            closed: closed.map(s),
            lapsed_by: lapsed_by.map(s),
        }
    }

    fn refused(holder: &str, sent: f64) -> Event {
        Event::Refused {
            name: "a".into(),
            holder: holder.into(),
            sent: s(sent),
            at: s(sent + 0.1),
        }
    }

    #[test]
    fn a_sessions_lock_named_the_holder_after_its_end_is_caught() {
        let granted = || granted("a", "x", 1, 0.0, 2.0);
        // Refused by it before the close was answered, or by another
        // grant after: nothing to see.
        let before = run(vec![
            granted(),
            refused("x", 0.9),
            session_ended(Some(1.0), None),
        ]);
        assert!(before.is_empty(), "{before:?}");
        let other = run(vec![
            granted(),
            refused("y", 1.5),
            session_ended(Some(1.0), None),
        ]);
        assert!(other.is_empty(), "{other:?}");
        let closed = run(vec![
            granted(),
            session_ended(Some(1.0), None),
            refused("x", 1.5),
        ]);
        assert_eq!(closed.len(), 1, "{closed:?}");
        assert!(closed[0].contains("close was answered"), "{closed:?}");
        // A rebuild since may take the lock back until its lease ends.
        let rebuilt = run(vec![
            granted(),
            session_ended(Some(1.0), Some(2.0)),
            Event::Rebuilt {
                node: 1,
                at: s(1.2),
            },
            refused("x", 1.5),
        ]);
        assert!(rebuilt.is_empty(), "{rebuilt:?}");
        let lapsed = |sent: f64| {
            run(vec![
                granted(),
                session_ended(None, Some(2.0)),
                refused("x", sent),
            ])
        };
        assert!(lapsed(2.0 + SESSION_END_MARGIN.as_secs_f64() - 0.01).is_empty());
        let late = lapsed(2.0 + SESSION_END_MARGIN.as_secs_f64());
        assert_eq!(late.len(), 1, "{late:?}");
        assert!(late[0].contains("lease ran out"), "{late:?}");
        // A renewal in doubt: no end to judge the lapse by.
        let doubt = run(vec![
            granted(),
            session_ended(None, None),
            refused("x", 9.0),
        ]);
        assert!(doubt.is_empty(), "{doubt:?}");
        // A lock with a delay keeps its name closed that much longer after
        // a lapse, not after a close.
        let delayed = |closed: Option<f64>, sent: f64| {
            run(vec![
                granted(),
                session_ended_with_delay(closed, Some(2.0), 0.5),
                refused("x", sent),
            ])
        };
        let margin = SESSION_END_MARGIN.as_secs_f64();
        assert!(delayed(None, 2.5 + margin - 0.01).is_empty());
        assert_eq!(delayed(None, 2.5 + margin).len(), 1);
        assert_eq!(delayed(Some(1.0), 1.5).len(), 1);
    }

    #[test]
    fn a_node_that_serves_late_or_never_is_caught() {
        let mut history = History::default();
        history.push(Event::Served {
            node: 1,
            healed: s(10.0),
            at: s(20.0),
        });
        history.push(Event::Served {
            node: 2,
            healed: s(10.0),
            at: s(11.0),
        });
        let v = check(&history, &(1..=3).collect(), s(5.0), Excuses::default());
        assert_eq!(v.len(), 2, "{v:?}");
    }
}
