//! Review of the rebuild settled as its reports arrive: what happens to a
//! grant that lost, early in the reads, to one whose lease ended, lapsed
//! or was released before the reads were over. The rebuild that settled
//! every report at the end of the reads kept it; settled as the reports
//! come, it must too: nothing holds the grant it lost to any more.

use std::time::Duration;

use locktable::{Fence, Kind, LeaseRule, Lock, RebuildFrom, Table};

use crate::common::*;

/// Rebuilds a table from `frames`, each taken in at its own arrival, the
/// reads over at `end`: each name's holders at `end`, and the ids lost.
fn as_they_come(frames: Vec<(Vec<Lock>, u64)>, end: u64) -> (Vec<(String, u128)>, Vec<u128>) {
    let mut table = Table::new(LeaseRule::default());
    table.drop_table(t(0));
    let mut settling = table.begin_rebuild().settling();
    for (locks, at) in frames {
        settling.add(locks, t(at));
    }
    let from = RebuildFrom {
        generation: table.generation(),
        epoch: 4,
        locks: vec![],
        hold_new_grants_until: None,
        seen_all: false,
    };
    let rebuilt = table
        .install(settling.finish(from, t(end)).unwrap(), t(end))
        .unwrap();
    outcome(&table, rebuilt.lost, end)
}

/// The same reports settled at once at the end of the reads, as before.
fn at_the_end(frames: Vec<(Vec<Lock>, u64)>, end: u64) -> (Vec<(String, u128)>, Vec<u128>) {
    let mut table = Table::new(LeaseRule::default());
    table.drop_table(t(0));
    let from = RebuildFrom {
        generation: table.generation(),
        epoch: 4,
        locks: frames.into_iter().flat_map(|(locks, _)| locks).collect(),
        hold_new_grants_until: None,
        seen_all: false,
    };
    let rebuilt = table.rebuild(from, t(end)).unwrap();
    outcome(&table, rebuilt.lost, end)
}

fn outcome(table: &Table, lost: Vec<Lock>, end: u64) -> (Vec<(String, u128)>, Vec<u128>) {
    let mut held = Vec::new();
    for name in ["n", "p"] {
        for l in table.holders(name, t(end)).unwrap() {
            held.push((l.name.clone(), l.id.as_u128()));
        }
    }
    held.sort();
    (held, lost.iter().map(|l| l.id.as_u128()).collect())
}

/// Two grants of `n` made apart (terms 1 and 2, neither having seen every
/// grant): the older, held the longest, ends at 6 s; the younger is live
/// to 30 s.
fn apart() -> (Lock, Lock) {
    let older = held_lock("n", 1, 1, t(0), t(6), Fence::new(1, 1).0);
    let younger = held_lock("n", 2, 2, t(2), t(30), Fence::new(2, 1).0);
    (older, younger)
}

/// Both live when they arrive; by the end of the reads the older one's
/// lease has ended. Nobody holds it: the younger must be kept, and its
/// holder not told it lost.
#[test]
fn a_grant_lost_to_one_that_ended_before_the_reads_did_is_kept() {
    let (older, younger) = apart();
    let frames = vec![(vec![older], 5), (vec![younger], 5)];
    let expected = at_the_end(frames.clone(), 7);
    assert_eq!(expected, (vec![("n".into(), 2)], vec![]));
    assert_eq!(as_they_come(frames, 7), expected);
}

/// Same with a lock-delay: the older one's lease ran out (lapsed) before
/// the reads ended; a live grant is kept over a lapsed one.
#[test]
fn a_grant_lost_to_one_that_lapsed_before_the_reads_ended_is_kept() {
    let (mut older, younger) = apart();
    older.delay = Duration::from_secs(20);
    older.expires = t(26);
    let frames = vec![(vec![older], 5), (vec![younger], 5)];
    let expected = at_the_end(frames.clone(), 7);
    assert_eq!(expected.0, vec![("n".into(), 2)]);
    assert_eq!(as_they_come(frames, 7), expected);
}

/// Permits: a grant whose lease ended before the reads did takes no
/// permit from the live ones.
#[test]
fn a_permit_that_ended_before_the_reads_did_takes_none_of_the_count() {
    let permit = |id: u128, term: u64, from: u64, to: u64| Lock {
        kind: Kind::Permit(2),
        ..held_lock("p", id, 1, t(from), t(to), Fence::new(term, 1).0)
    };
    let frames = vec![
        (vec![permit(1, 1, 0, 6)], 5),
        (vec![permit(2, 2, 1, 30), permit(3, 3, 2, 30)], 5),
    ];
    let expected = at_the_end(frames.clone(), 7);
    assert_eq!(expected, (vec![("p".into(), 2), ("p".into(), 3)], vec![]));
    assert_eq!(as_they_come(frames, 7), expected);
}

/// A release heard during the reads (after the basis was taken) of the
/// grant kept: the table leaves it out, and the grant it beat, which a
/// rebuild settled at the end of the reads kept, must not be lost for it.
#[test]
fn a_grant_lost_to_one_released_during_the_reads_is_kept() {
    let (older, younger) = apart();
    let mut table = Table::new(LeaseRule::default());
    table.drop_table(t(0));
    let mut settling = table.begin_rebuild().settling();
    settling.add(vec![older.clone(), younger.clone()], t(3));
    // The older one's holder releases it; this node hears of it.
    table.forget("n", older.id, Duration::from_secs(3), t(4));
    let from = RebuildFrom {
        generation: table.generation(),
        epoch: 4,
        locks: vec![],
        hold_new_grants_until: None,
        seen_all: false,
    };
    let rebuilt = table
        .install(settling.finish(from, t(5)).unwrap(), t(5))
        .unwrap();
    let held: Vec<u128> = table
        .holders("n", t(5))
        .unwrap()
        .iter()
        .map(|l| l.id.as_u128())
        .collect();
    let lost: Vec<u128> = rebuilt.lost.iter().map(|l| l.id.as_u128()).collect();
    assert_eq!((held, lost), (vec![2], vec![]));
}
