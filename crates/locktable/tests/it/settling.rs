//! A rebuild settled as its reports arrive, frame by frame
//! ([`locktable::Settling`]): a name found held shared or as permits only
//! after some of its reports settled as exclusive grants is settled as if
//! every one of its reports had waited for the end, and frames settled at
//! their own arrival keep what was live then.

use std::collections::BTreeSet;

use locktable::{Fence, Kind, LeaseRule, Lock, RebuildFrom, Table};
use proptest::prelude::*;

use crate::common::*;

const NAMES: [&str; 3] = ["a", "b", "c"];

/// A grant: its name, kind, term, place in the term, and start.
fn grant() -> impl Strategy<Value = (usize, u8, u64, u64, bool, u64)> {
    (
        0..NAMES.len(),
        0..3u8,
        1..4u64,
        1..5u64,
        any::<bool>(),
        0..8u64,
    )
}

fn kind(k: u8) -> Kind {
    match k {
        0 => Kind::Exclusive,
        1 => Kind::Shared,
        _ => Kind::Permit(2),
    }
}

/// Reports of `grants`: the grant each names, a start no earlier than
/// the grant's and an end, in the order given.
fn reports(grants: &[(usize, u8, u64, u64, bool, u64)], order: &[(usize, u64, u64)]) -> Vec<Lock> {
    order
        .iter()
        .map(|&(g, later_start, end)| {
            let (name, k, term, at, seen_all, start) = grants[g % grants.len()];
            let mut fence = Fence::new(term, at + 8 * g as u64);
            if seen_all {
                fence = Fence(fence.0 | Fence::SEEN_ALL);
            }
            Lock {
                kind: kind(k),
                ..held_lock(
                    NAMES[name],
                    g as u128 + 1,
                    1,
                    t(start + later_start),
                    t(20 + end),
                    fence.0,
                )
            }
        })
        .collect()
}

/// Each name's holders and the ids lost, after rebuilding from `locks`
/// taken in as `frames` (each a count of reports).
fn settled(locks: Vec<Lock>, frames: &[usize]) -> (Vec<BTreeSet<u128>>, BTreeSet<u128>) {
    let mut table = Table::new(LeaseRule::default());
    table.drop_table(t(9));
    let mut settling = table.begin_rebuild().settling();
    let mut rest = locks.into_iter();
    for &n in frames {
        settling.add(rest.by_ref().take(n).collect(), t(10));
    }
    let from = RebuildFrom {
        generation: table.generation(),
        epoch: 4,
        locks: rest.collect(),
        hold_new_grants_until: None,
        seen_all: false,
    };
    let rebuilt = table
        .install(settling.finish(from, t(10)).unwrap(), t(10))
        .unwrap();
    let holders = NAMES
        .iter()
        .map(|name| {
            let held = table.holders(name, t(10)).unwrap();
            held.iter().map(|l| l.id.as_u128()).collect()
        })
        .collect();
    let lost = rebuilt.lost.iter().map(|l| l.id.as_u128()).collect();
    (holders, lost)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(600))]

    /// Whether a name's first report held shared comes first or after
    /// exclusive reports of it that already settled, the rebuild keeps the
    /// same holders and loses the same grants: the ones settled early are
    /// handed to the name's settling whole, kept and lost alike.
    #[test]
    fn a_name_found_shared_midway_settles_as_if_found_shared_first(
        grants in proptest::collection::vec(grant(), 1..7),
        order in proptest::collection::vec((0..7usize, 0..3u64, 0..9u64), 1..16),
        frames in proptest::collection::vec(0..5usize, 0..5),
    ) {
        let late = reports(&grants, &order);
        // The same reports, each name's first non-exclusive one moved to
        // the front.
        let mut early = late.clone();
        for name in NAMES {
            if let Some(at) = early.iter().position(|l| l.name == name && l.kind != Kind::Exclusive) {
                let first = early.remove(at);
                early.insert(0, first);
            }
        }
        prop_assert_eq!(settled(late.clone(), &frames), settled(early, &[]));
        // Frames at one instant settle as the whole list at once.
        prop_assert_eq!(settled(late.clone(), &frames), settled(late, &[]));
    }
}

/// A frame's reports are settled at their arrival: a lease that ended
/// before its frame arrived is left out, one live then is kept (and ends
/// in the table), and the released ids of the basis are left out of every
/// frame.
#[test]
fn each_frame_is_settled_at_its_arrival() {
    let mut table = Table::new(LeaseRule::default());
    table.drop_table(t(0));
    let gone = held_lock("gone", 1, 2, t(0), t(4), Fence::new(1, 1).0);
    let live = held_lock("live", 2, 2, t(0), t(8), Fence::new(1, 2).0);
    let released = held_lock("released", 3, 2, t(0), t(30), Fence::new(1, 3).0);
    table.forget(
        "released",
        released.id,
        std::time::Duration::from_secs(30),
        t(1),
    );
    let mut settling = table.begin_rebuild().settling();
    settling.add(vec![live.clone(), released.clone()], t(5));
    settling.add(vec![gone], t(6));
    assert_eq!(settling.reports(), 3);
    let from = RebuildFrom {
        generation: table.generation(),
        epoch: 2,
        locks: vec![],
        hold_new_grants_until: None,
        seen_all: false,
    };
    let settled = settling.finish(from, t(7)).unwrap();
    let out = table.install(settled, t(7)).unwrap();
    assert_eq!(out.locks, 1);
    assert_eq!(table.get("live", t(7)).unwrap(), Some(live));
    assert_eq!(table.get("released", t(7)).unwrap(), None);
    assert_eq!(table.get("gone", t(7)).unwrap(), None);
}

/// Room made for the locks a member says its report holds is bounded: a
/// figure it got wrong costs at most `MOST_RESERVED` reports' room, never
/// a capacity overflow.
#[test]
fn room_for_a_reported_figure_is_bounded() {
    let mut table = Table::new(LeaseRule::default());
    table.drop_table(t(0));
    let mut settling = table.begin_rebuild().settling();
    settling.reserve(usize::MAX);
    settling.reserve(3);
    settling.add(
        vec![held_lock("a", 1, 2, t(0), t(30), Fence::new(1, 1).0)],
        t(1),
    );
    let from = RebuildFrom {
        generation: table.generation(),
        epoch: 2,
        locks: vec![],
        hold_new_grants_until: None,
        seen_all: false,
    };
    let out = table
        .install(settling.finish(from, t(1)).unwrap(), t(1))
        .unwrap();
    assert_eq!(out.locks, 1);
}
