//! Sets of names granted all at once: in one step with consecutive fences,
//! first in first out over every name, and never two sets waiting for each
//! other.

use crate::common::*;

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use locktable::{AcquireError, AcquiredSet, Answer, Kind, Lock, LockId, Request, Table, WaiterId};
use proptest::prelude::*;

fn set(names: &[&str], first_id: u128, wait: Duration) -> Vec<Request> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| waiting(req(name, first_id + i as u128, 1), wait))
        .collect()
}

fn granted_set(result: Result<AcquiredSet, AcquireError>) -> Vec<Lock> {
    match result {
        Ok(AcquiredSet::Granted(locks)) => locks,
        other => panic!("expected a grant, got {other:?}"),
    }
}

fn set_waiter(result: Result<AcquiredSet, AcquireError>) -> WaiterId {
    match result {
        Ok(AcquiredSet::Waiting(w)) => w,
        other => panic!("expected to wait, got {other:?}"),
    }
}

fn names(locks: &[Lock]) -> Vec<&str> {
    locks.iter().map(|l| l.name.as_str()).collect()
}

/// The locks an answer granted, the set's first name first.
fn answered(answer: &Answer) -> Vec<Lock> {
    let first = answer.result.clone().expect("a grant");
    std::iter::once(first).chain(answer.also.clone()).collect()
}

fn consecutive(locks: &[Lock]) -> bool {
    locks.windows(2).all(|w| w[1].fence.0 == w[0].fence.0 + 1)
}

#[test]
fn a_free_set_is_granted_at_once_with_consecutive_fences_in_the_order_asked() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let locks = granted_set(table.acquire_set(set(&["c", "a", "b"], 10, SEC), t(0)));
    assert_eq!(names(&locks), ["c", "a", "b"]);
    assert!(consecutive(&locks), "{locks:?}");
    for lock in &locks {
        assert_eq!(table.get(&lock.name, t(0)).unwrap().as_ref(), Some(lock));
    }
}

#[test]
fn a_set_waits_for_its_held_name_and_nobody_overtakes_it_on_the_free_ones() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let b = granted(table.acquire(req("b", 1, 1), t(0)));
    let s = set_waiter(table.acquire_set(set(&["a", "b"], 10, 60 * SEC), t(0)));
    assert!(
        table.get("a", t(0)).unwrap().is_none(),
        "nothing is granted yet"
    );
    let queue = table.waiting_for("b", t(0)).first;
    assert_eq!(queue.len(), 1);
    assert_eq!(
        queue[0].with,
        ["a"],
        "a listing shows the set's other names"
    );
    assert_eq!(
        table.acquire(req("a", 2, 1), t(0)),
        Err(AcquireError::Awaited("a".into())),
        "a try on a free name the set waits for does not overtake it"
    );
    let behind = match table.acquire(waiting(req("a", 3, 1), 60 * SEC), t(0)) {
        Ok(locktable::Acquired::Waiting(w)) => w,
        other => panic!("expected to wait, got {other:?}"),
    };
    table.release("b", b.id, t(1)).unwrap();
    let answers = table.take_answers();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0].waiter, s);
    let locks = answered(&answers[0]);
    assert_eq!(names(&locks), ["a", "b"]);
    assert!(consecutive(&locks));
    assert!(locks[0].fence > b.fence);
    table.release("a", locks[0].id, t(2)).unwrap();
    let answers = table.take_answers();
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].waiter, behind);
    assert_eq!(answers[0].result.as_ref().unwrap().id, LockId::from_u128(3));
}

#[test]
fn a_listing_shows_the_free_names_a_set_waits_for_until_it_is_granted() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let c = granted(table.acquire(req("q/c", 1, 1), t(0)));
    set_waiter(table.acquire_set(set(&["q/c", "q/b", "q/a", "r/x"], 10, 60 * SEC), t(0)));
    let listing = table.listing("q/", 10, t(1)).unwrap();
    assert_eq!(names(&listing.locks), ["q/c"], "a listing shows held names");
    assert_eq!(listing.waiters, [1]);
    let awaited: Vec<(&str, usize)> = listing
        .awaited
        .iter()
        .map(|a| (a.name.as_str(), a.count))
        .collect();
    assert_eq!(
        awaited,
        [("q/a", 1), ("q/b", 1)],
        "and, in name order under the prefix, the free ones requests wait for"
    );
    let queued = &listing.awaited[0].first[0];
    assert_eq!(queued.with, ["q/c", "q/b", "r/x"], "the set's other names");
    assert_eq!(queued.since, t(0));
    assert_eq!(
        table.listing("q/", 1, t(1)).unwrap().awaited.len(),
        1,
        "at most the limit"
    );
    assert!(table.listing("z", 10, t(1)).unwrap().awaited.is_empty());

    table.release("q/c", c.id, t(2)).unwrap();
    assert_eq!(table.take_answers().len(), 1, "the set is granted");
    let listing = table.listing("", 10, t(2)).unwrap();
    assert!(listing.awaited.is_empty(), "{:?}", listing.awaited);
    assert_eq!(names(&listing.locks), ["q/a", "q/b", "q/c", "r/x"]);
}

#[test]
fn two_sets_asking_in_opposite_orders_are_granted_one_after_the_other() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let held = granted(table.acquire(req("b", 1, 1), t(0)));
    let first = set_waiter(table.acquire_set(set(&["a", "b"], 10, 60 * SEC), t(0)));
    let second = set_waiter(table.acquire_set(set(&["b", "a"], 20, 60 * SEC), t(0)));
    table.release("b", held.id, t(1)).unwrap();
    let answers = table.take_answers();
    assert_eq!(
        answers.iter().map(|a| a.waiter).collect::<Vec<_>>(),
        [first]
    );
    for lock in answered(&answers[0]) {
        table.release(&lock.name, lock.id, t(2)).unwrap();
    }
    let answers = table.take_answers();
    assert_eq!(
        answers.iter().map(|a| a.waiter).collect::<Vec<_>>(),
        [second]
    );
    assert_eq!(names(&answered(&answers[0])), ["b", "a"]);
}

#[test]
fn a_set_that_stops_waiting_leaves_every_queue_and_lets_the_requests_behind_it_go() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let b = granted(table.acquire(req("b", 1, 1), t(0)));
    let s = set_waiter(table.acquire_set(set(&["a", "b"], 10, 60 * SEC), t(0)));
    let behind = match table.acquire(waiting(req("a", 3, 1), 60 * SEC), t(0)) {
        Ok(locktable::Acquired::Waiting(w)) => w,
        other => panic!("expected to wait, got {other:?}"),
    };
    assert!(
        table.cancel("b", s, t(1)),
        "cancelled through any of its names"
    );
    let answers = table.take_answers();
    assert_eq!(answers.len(), 1);
    assert_eq!(answers[0].waiter, behind, "a is free once the set is gone");
    assert_eq!(table.waiting(), 0);
    table.release("b", b.id, t(2)).unwrap();
    assert!(
        table.take_answers().is_empty(),
        "the set left b's queue too"
    );
}

#[test]
fn a_set_whose_wait_runs_out_is_told_who_holds_and_leaves_every_queue() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let c = granted(table.acquire(req("c", 1, 1), t(0)));
    let s = set_waiter(table.acquire_set(set(&["a", "c"], 10, 2 * SEC), t(0)));
    let behind = match table.acquire(waiting(req("a", 3, 1), 60 * SEC), t(0)) {
        Ok(locktable::Acquired::Waiting(w)) => w,
        other => panic!("expected to wait, got {other:?}"),
    };
    table.poll(t(3));
    let answers = table.take_answers();
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!(answers[0].waiter, s);
    assert_eq!(
        answers[0].result,
        Err(AcquireError::Held(Box::new(c.clone())))
    );
    assert_eq!(answers[1].waiter, behind);
    assert!(answers[1].result.is_ok());
    assert_eq!(table.waiting(), 0);
}

#[test]
fn a_set_of_readers_joins_readers_and_waits_behind_a_writer() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let reader = {
        let mut r = req("a", 1, 1);
        r.kind = Kind::Shared;
        granted(table.acquire(r, t(0)))
    };
    let mut readers = set(&["a", "b"], 10, 60 * SEC);
    readers.iter_mut().for_each(|r| r.kind = Kind::Shared);
    let locks = granted_set(table.acquire_set(readers.clone(), t(0)));
    assert_eq!(table.holders("a", t(0)).unwrap().len(), 2);
    let writer = match table.acquire(waiting(req("b", 5, 1), 60 * SEC), t(0)) {
        Ok(locktable::Acquired::Waiting(w)) => w,
        other => panic!("expected to wait, got {other:?}"),
    };
    let mut later = set(&["a", "b"], 20, 60 * SEC);
    later.iter_mut().for_each(|r| r.kind = Kind::Shared);
    let s = set_waiter(table.acquire_set(later, t(0)));
    table.release("b", locks[1].id, t(1)).unwrap();
    let answers = table.take_answers();
    assert_eq!(
        answers.iter().map(|a| a.waiter).collect::<Vec<_>>(),
        [writer]
    );
    let w = answers[0].result.clone().unwrap();
    table.release("b", w.id, t(2)).unwrap();
    let answers = table.take_answers();
    assert_eq!(answers.iter().map(|a| a.waiter).collect::<Vec<_>>(), [s]);
    assert_eq!(
        table.holders("a", t(2)).unwrap().len(),
        3,
        "{reader:?} and two sets"
    );
}

#[test]
fn a_bad_set_or_a_kind_that_does_not_match_is_refused_and_nothing_is_taken() {
    let mut table = rebuilt_table(1, vec![], t(0));
    assert_eq!(table.acquire_set(vec![], t(0)), Err(AcquireError::BadSet));
    assert_eq!(
        table.acquire_set(set(&["a", "a"], 1, SEC), t(0)),
        Err(AcquireError::BadSet)
    );
    let one_id = vec![req("a", 5, 1), req("b", 5, 1)];
    assert_eq!(
        table.acquire_set(one_id, t(0)),
        Err(AcquireError::BadSet),
        "two grants under one id would be one record"
    );
    let mut sem = req("b", 1, 1);
    sem.kind = Kind::Permit(2);
    granted(table.acquire(sem, t(0)));
    assert_eq!(
        table.acquire_set(set(&["a", "b"], 10, SEC), t(0)),
        Err(AcquireError::KindMismatch(Kind::Permit(2)))
    );
    assert!(table.get("a", t(0)).unwrap().is_none());
    assert_eq!(table.waiting(), 0);
}

#[test]
fn a_set_without_a_wait_is_refused_with_the_first_holder_and_takes_nothing() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let b = granted(table.acquire(req("b", 1, 1), t(0)));
    assert_eq!(
        table.acquire_set(set(&["a", "b", "c"], 10, Duration::ZERO), t(0)),
        Err(AcquireError::Held(Box::new(b)))
    );
    assert!(table.get("a", t(0)).unwrap().is_none());
    assert!(table.get("c", t(0)).unwrap().is_none());
}

#[test]
fn a_dropped_table_answers_a_waiting_set_once_and_a_release_from_elsewhere_turns_it_away() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let b = granted(table.acquire(req("b", 1, 1), t(0)));
    let s = set_waiter(table.acquire_set(set(&["a", "b", "c"], 10, 60 * SEC), t(0)));
    table.drop_table(t(1));
    let answers = table.take_answers();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0].waiter, s);

    let mut table = rebuilt_table(1, vec![], t(0));
    let b2 = granted(table.acquire(req("b", 1, 1), t(0)));
    assert_eq!(b2.id, b.id);
    let s = set_waiter(table.acquire_set(set(&["a", "b", "c"], 10, 60 * SEC), t(0)));
    table.forget("b", b2.id, SEC, t(1));
    let answers = table.take_answers();
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0].waiter, s);
    assert_eq!(table.waiting(), 0, "out of a's and c's queues too");
}

#[test]
fn a_member_of_a_set_is_released_alone() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let locks = granted_set(table.acquire_set(set(&["a", "b"], 10, SEC), t(0)));
    table.release("a", locks[0].id, t(1)).unwrap();
    assert!(table.get("a", t(1)).unwrap().is_none());
    assert_eq!(table.get("b", t(1)).unwrap().as_ref(), Some(&locks[1]));
}

#[test]
fn fences_running_out_refuse_a_set_whole() {
    // A table of a term whose counter is nearly spent: rebuilt from a
    // grant at the top of the term's fences.
    let top = locktable::Fence::new(1, (1 << locktable::Fence::COUNTER_BITS) - 3);
    let mut old = held_lock("z", 99, 1, t(0), t(100), top.0);
    old.kind = Kind::Exclusive;
    let mut table = rebuilt_table_as(1, vec![old], t(0), true);
    assert_eq!(
        table.acquire_set(set(&["a", "b", "c"], 10, SEC), t(0)),
        Err(AcquireError::FencesExhausted)
    );
    assert!(table.get("a", t(0)).unwrap().is_none());
    granted_set(table.acquire_set(set(&["a", "b"], 10, SEC), t(0)));
}

/// One step of a random run of single and set requests.
#[derive(Debug, Clone)]
enum Op {
    One {
        name: usize,
        shared: bool,
        wait: bool,
    },
    Set {
        names: Vec<usize>,
        shared: bool,
        wait: bool,
    },
    Release {
        pick: usize,
    },
    Cancel {
        pick: usize,
    },
    Advance {
        ms: u64,
    },
}

const NAMES: [&str; 4] = ["a", "b", "c", "d"];

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..4usize, any::<bool>(), any::<bool>())
            .prop_map(|(name, shared, wait)| Op::One { name, shared, wait }),
        3 => (Just(vec![0usize, 1, 2, 3]).prop_shuffle(), 2..=4usize, any::<bool>(), any::<bool>())
            .prop_map(|(all, n, shared, wait)| Op::Set { names: all[..n].to_vec(), shared, wait }),
        3 => (0..16usize).prop_map(|pick| Op::Release { pick }),
        1 => (0..16usize).prop_map(|pick| Op::Cancel { pick }),
        1 => (100..3_000u64).prop_map(|ms| Op::Advance { ms }),
    ]
}

/// What the run asked, to check the table's answers against.
struct Run {
    table: Table,
    now: locktable::MonoTime,
    next_id: u128,
    /// Arrival number and names (with kinds) of each request still waiting.
    waiting: HashMap<WaiterId, (u64, Vec<(String, Kind)>)>,
    arrivals: u64,
    held: Vec<Lock>,
    answered: HashSet<WaiterId>,
}

impl Run {
    fn check_answers(&mut self) {
        for answer in self.table.take_answers() {
            assert!(
                self.answered.insert(answer.waiter),
                "answered twice: {answer:?}"
            );
            let (arrival, asked) = self.waiting.remove(&answer.waiter).expect("a waiter");
            let Ok(first) = &answer.result else {
                assert!(answer.also.is_empty());
                continue;
            };
            let locks: Vec<Lock> = std::iter::once(first.clone())
                .chain(answer.also.clone())
                .collect();
            let got: Vec<(String, Kind)> = locks.iter().map(|l| (l.name.clone(), l.kind)).collect();
            assert_eq!(got, asked, "a set is granted whole, in the order asked");
            assert!(consecutive(&locks), "one step: {locks:?}");
            for (name, _) in &asked {
                let earlier = self
                    .waiting
                    .values()
                    .any(|(a, names)| *a < arrival && names.iter().any(|(n, _)| n == name));
                assert!(
                    !earlier,
                    "{name} went to a later request than one still waiting"
                );
            }
            self.held.extend(locks);
        }
    }

    fn check_holders(&self) {
        for name in NAMES {
            let holders = self.table.holders(name, self.now).unwrap();
            if holders.iter().any(|l| l.kind == Kind::Exclusive) {
                assert_eq!(
                    holders.len(),
                    1,
                    "a writer beside another holder: {holders:?}"
                );
            }
        }
        // No request waits that heads every queue it is in and fits.
        let head = |name: &str| {
            self.waiting
                .iter()
                .filter(|(_, (_, names))| names.iter().any(|(n, _)| n == name))
                .min_by_key(|(_, (a, _))| *a)
                .map(|(w, _)| *w)
        };
        for (w, (_, names)) in &self.waiting {
            let ready = names.iter().all(|(name, kind)| {
                let holders = self.table.holders(name, self.now).unwrap();
                head(name) == Some(*w) && holders.iter().all(|h| kind.compatible(h.kind))
            });
            assert!(!ready, "{names:?} heads its queues and fits, yet waits");
        }
        let anyone_holds = NAMES
            .iter()
            .any(|n| !self.table.holders(n, self.now).unwrap().is_empty());
        assert!(
            anyone_holds || self.table.waiting() == 0,
            "requests wait while nobody holds anything: stuck"
        );
        assert_eq!(
            self.table.waiting(),
            self.waiting.len(),
            "waiting() counts each request once, a set too"
        );
    }

    fn request(&mut self, name: usize, shared: bool, wait: bool) -> Request {
        self.next_id += 1;
        let mut r = req(NAMES[name], self.next_id, 1);
        r.kind = if shared {
            Kind::Shared
        } else {
            Kind::Exclusive
        };
        r.wait = if wait { 5 * SEC } else { Duration::ZERO };
        r.lease = Some(4 * SEC);
        r
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn sets_and_single_names_are_served_in_order_whole_and_never_stuck(ops in proptest::collection::vec(op(), 1..60)) {
        let mut run = Run {
            table: rebuilt_table(1, vec![], t(0)),
            now: t(0),
            next_id: 0,
            waiting: HashMap::new(),
            arrivals: 0,
            held: Vec::new(),
            answered: HashSet::new(),
        };
        for op in ops {
            match op {
                Op::One { name, shared, wait } => {
                    let r = run.request(name, shared, wait);
                    let asked = vec![(r.name.clone(), r.kind)];
                    match run.table.acquire(r, run.now) {
                        Ok(locktable::Acquired::Granted(lock)) => run.held.push(lock),
                        Ok(locktable::Acquired::Waiting(w)) => {
                            run.arrivals += 1;
                            run.waiting.insert(w, (run.arrivals, asked));
                        }
                        Err(_) => {}
                    }
                }
                Op::Set { names, shared, wait } => {
                    let requests: Vec<Request> =
                        names.iter().map(|&n| run.request(n, shared, wait)).collect();
                    let asked: Vec<(String, Kind)> =
                        requests.iter().map(|r| (r.name.clone(), r.kind)).collect();
                    match run.table.acquire_set(requests, run.now) {
                        Ok(AcquiredSet::Granted(locks)) => {
                            prop_assert!(consecutive(&locks));
                            run.held.extend(locks);
                        }
                        Ok(AcquiredSet::Waiting(w)) => {
                            run.arrivals += 1;
                            run.waiting.insert(w, (run.arrivals, asked));
                        }
                        Err(_) => {}
                    }
                }
                Op::Release { pick } => {
                    if !run.held.is_empty() {
                        let lock = run.held.remove(pick % run.held.len());
                        let _ = run.table.release(&lock.name, lock.id, run.now);
                    }
                }
                Op::Cancel { pick } => {
                    let mut ids: Vec<(WaiterId, String)> = run
                        .waiting
                        .iter()
                        .map(|(w, (_, names))| (*w, names.last().unwrap().0.clone()))
                        .collect();
                    ids.sort();
                    if !ids.is_empty() {
                        let (w, name) = ids[pick % ids.len()].clone();
                        prop_assert!(run.table.cancel(&name, w, run.now));
                        run.waiting.remove(&w);
                        run.answered.insert(w);
                    }
                }
                Op::Advance { ms } => {
                    run.now = run.now + Duration::from_millis(ms);
                    run.table.poll(run.now);
                    run.held.retain(|l| l.expires > run.now);
                }
            }
            run.check_answers();
            run.check_holders();
        }
        // Everyone lets go: every request still waiting is served in turn.
        while !run.held.is_empty() {
            let lock = run.held.remove(0);
            run.table.release(&lock.name, lock.id, run.now).unwrap();
            run.check_answers();
            run.check_holders();
        }
        prop_assert!(run.waiting.is_empty(), "left waiting: {:?}", run.waiting);
    }
}

/// A release heard from elsewhere (`forget`) turns away the requests
/// waiting for its name, a set among them; the set leaves its other
/// names' queues, and a request behind it on a free name is served then,
/// not left waiting for a name nobody holds (found by the second reader).
#[test]
fn a_set_turned_away_by_a_forget_lets_the_request_behind_it_on_another_name_go() {
    let mut table = rebuilt_table(1, vec![], t(0));
    let a = granted(table.acquire(req("a", 1, 1), t(0)));
    let s = set_waiter(table.acquire_set(set(&["a", "b"], 10, 60 * SEC), t(0)));
    let behind = match table.acquire(waiting(req("b", 20, 1), 60 * SEC), t(0)) {
        Ok(locktable::Acquired::Waiting(w)) => w,
        other => panic!("expected to wait, got {other:?}"),
    };
    table.forget("a", a.id, SEC, t(1));
    let answers = table.take_answers();
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert_eq!(answers[0].waiter, s);
    assert!(answers[0].result.is_err());
    assert_eq!(answers[1].waiter, behind);
    assert_eq!(
        answers[1].result.as_ref().map(|l| l.id),
        Ok(LockId::from_u128(20))
    );
    assert_eq!(table.waiting(), 0);
}

/// A set waiting in every one of its names' queues is one request waiting,
/// as `waiting()` (the waiters gauge) counts it.
#[test]
fn a_waiting_set_counts_once() {
    let mut table = rebuilt_table(1, vec![], t(0));
    granted(table.acquire(req("b", 1, 1), t(0)));
    set_waiter(table.acquire_set(set(&["a", "b", "c"], 10, 10 * SEC), t(0)));
    assert_eq!(table.waiting(), 1, "one set, waiting in three queues");
    table
        .acquire(waiting(req("a", 20, 1), 10 * SEC), t(0))
        .unwrap();
    assert_eq!(table.waiting(), 2);
}
