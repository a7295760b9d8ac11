use super::*;

fn at(ms: u64) -> MonoTime {
    MonoTime::from_nanos((1 << 40) + ms * 1_000_000)
}

/// Member 1's outbox with lanes to 2 and 3.
fn outbox() -> Outbox {
    let mut outbox = Outbox::new(1);
    assert!(outbox.open(2, "b"));
    assert!(outbox.open(3, "c"));
    outbox
}

fn release_for_two(outbox: &mut Outbox, id: u128, ends: MonoTime, now: MonoTime) {
    outbox.push(Members::only(2), "x", LockId::from_u128(id), ends, now);
}

/// Every batch ready at `now`, as (member, ids, spread flags).
fn batches(outbox: &mut Outbox, now: MonoTime) -> Vec<Batch> {
    std::iter::from_fn(|| outbox.poll_batch(now, |_| true)).collect()
}

fn ids(batch: &Batch) -> Vec<u128> {
    batch.releases.iter().map(|r| r.id.as_u128()).collect()
}

#[test]
fn a_release_goes_to_its_members_and_never_to_this_one() {
    let mut outbox = Outbox::new(1);
    assert!(!outbox.open(1, "a"), "no lane to this member");
    assert!(outbox.open(2, "b") && outbox.open(3, "c"));
    assert!(!outbox.open(2, "b"), "one lane per member");
    let to = Members::only(2).with(Members::only(1));
    outbox.push(to, "x", LockId::from_u128(5), at(9_000), at(0));
    let sent = batches(&mut outbox, at(0));
    assert_eq!(sent.len(), 1);
    assert_eq!((sent[0].member, sent[0].addr.as_str()), (2, "b"));
    assert_eq!(sent[0].releases[0].ends, at(9_000));
    assert!(!sent[0].releases[0].spread);
    assert!(
        batches(&mut outbox, at(0)).is_empty(),
        "one batch at a time"
    );
}

#[test]
fn a_batch_not_taken_is_spread_once_and_sent_again_after_a_doubling_wait() {
    let mut outbox = outbox();
    release_for_two(&mut outbox, 7, at(30_000), at(0));
    let mut waits = Vec::new();
    let mut now = 0;
    for _ in 0..3 {
        let sent = batches(&mut outbox, at(now));
        assert_eq!(sent.iter().map(|b| b.member).collect::<Vec<_>>(), [2]);
        let wait = outbox.answered(sent[0].key, false, at(now)).unwrap();
        waits.push(wait.as_millis());
        assert!(batches(&mut outbox, at(now)).iter().all(|b| b.member != 2));
        outbox.resume(sent[0].key);
        now += wait.as_millis() as u64;
    }
    assert_eq!(waits, [50, 100, 200]);
    let sent = batches(&mut outbox, at(now));
    assert_eq!(sent.len(), 1, "2 again; 3's batch is still under way");
    assert_eq!(outbox.answered(sent[0].key, true, at(now)), None);
    assert!(
        batches(&mut outbox, at(now)).is_empty(),
        "taken: nothing more"
    );
}

#[test]
fn the_spread_release_reaches_the_other_members_once() {
    let mut outbox = outbox();
    release_for_two(&mut outbox, 7, at(30_000), at(0));
    let first = batches(&mut outbox, at(0)).remove(0);
    outbox.answered(first.key, false, at(10));
    let to_three = batches(&mut outbox, at(10));
    assert_eq!(to_three.len(), 1);
    assert_eq!((to_three[0].member, ids(&to_three[0])), (3, vec![7]));
    assert!(to_three[0].releases[0].spread);
    outbox.answered(to_three[0].key, false, at(20));
    outbox.resume(first.key);
    let again = batches(&mut outbox, at(70));
    assert_eq!(again.len(), 1, "2 again; 3's failure spreads nothing more");
    assert_eq!(again[0].member, 2);
}

#[test]
fn a_release_whose_lease_ended_is_no_longer_sent() {
    let mut outbox = outbox();
    release_for_two(&mut outbox, 1, at(2_500), at(0));
    release_for_two(&mut outbox, 2, at(500), at(0));
    let sent = batches(&mut outbox, at(0)).remove(0);
    assert_eq!(ids(&sent), [1, 2]);
    outbox.answered(sent.key, false, at(0));
    outbox.resume(sent.key);
    // Lock 2's lease and the margin after it have passed.
    let sent = batches(&mut outbox, at(1_600));
    let to_two: Vec<&Batch> = sent.iter().filter(|b| b.member == 2).collect();
    assert_eq!(ids(to_two[0]), [1]);
    outbox.answered(to_two[0].key, false, at(1_600));
    outbox.resume(to_two[0].key);
    assert!(
        batches(&mut outbox, at(3_600)).is_empty(),
        "both ended: nothing to send to anyone"
    );
}

#[test]
fn a_slow_members_releases_are_spread_as_they_come_until_it_takes_one() {
    let mut outbox = outbox();
    release_for_two(&mut outbox, 1, at(30_000), at(0));
    let slow = batches(&mut outbox, at(0)).remove(0);
    assert!(batches(&mut outbox, at(40)).is_empty(), "not late yet");
    outbox.late(slow.key, at(50));
    let spread = batches(&mut outbox, at(50));
    assert_eq!((spread[0].member, ids(&spread[0])), (3, vec![1]));
    outbox.answered(spread[0].key, true, at(55));
    // While 2 is slow, a new release for it is spread at once.
    release_for_two(&mut outbox, 2, at(30_000), at(60));
    let spread = batches(&mut outbox, at(60));
    assert_eq!((spread[0].member, ids(&spread[0])), (3, vec![2]));
    outbox.answered(spread[0].key, true, at(61));
    assert_eq!(outbox.answered(slow.key, true, at(2_000)), None);
    let sent = batches(&mut outbox, at(2_000));
    assert_eq!((sent[0].member, ids(&sent[0])), (2, vec![2]));
    outbox.answered(sent[0].key, true, at(2_001));
    // Once it takes batches again, releases go to it alone.
    release_for_two(&mut outbox, 3, at(30_000), at(3_000));
    let sent = batches(&mut outbox, at(3_000));
    assert_eq!(sent.len(), 1);
    assert_eq!((sent[0].member, ids(&sent[0])), (2, vec![3]));
    outbox.late(sent[0].key + 1, at(3_100));
    outbox.answered(sent[0].key, true, at(3_100));
    outbox.late(sent[0].key, at(3_200));
    assert!(
        batches(&mut outbox, at(3_200)).is_empty(),
        "late after its answer: nothing"
    );
}

#[test]
fn a_batch_takes_what_fits_and_at_least_one() {
    let mut outbox = outbox();
    for id in 0..5 {
        release_for_two(&mut outbox, id, at(30_000), at(0));
    }
    let mut room = 0;
    let first = outbox
        .poll_batch(at(0), |_| {
            room += 1;
            room <= 2
        })
        .unwrap();
    assert_eq!(ids(&first), [0, 1], "the first goes, and one more fits");
    outbox.answered(first.key, true, at(1));
    let none_fit = outbox.poll_batch(at(1), |_| false).unwrap();
    assert_eq!(ids(&none_fit), [2], "a release too large alone goes alone");
}

#[test]
fn a_member_added_again_elsewhere_gets_a_new_lane_and_a_closed_one_drains_then_goes() {
    let mut outbox = Outbox::new(1);
    assert!(outbox.open(2, "b:1"));
    release_for_two(&mut outbox, 1, at(30_000), at(0));
    let old = batches(&mut outbox, at(0)).remove(0);
    assert!(outbox.open(2, "b:2"), "a lane to the new address");
    release_for_two(&mut outbox, 2, at(30_000), at(0));
    let sent = batches(&mut outbox, at(0));
    assert_eq!(sent.len(), 1);
    assert_eq!((sent[0].addr.as_str(), ids(&sent[0])), ("b:2", vec![2]));
    assert_eq!(outbox.members().collect::<Vec<_>>(), [2]);
    // The old lane still owes its batch: tried again at its address.
    outbox.answered(old.key, false, at(1));
    outbox.resume(old.key);
    let again = batches(&mut outbox, at(60));
    assert_eq!((again[0].addr.as_str(), ids(&again[0])), ("b:1", vec![1]));
    outbox.answered(again[0].key, true, at(61));
    outbox.answered(sent[0].key, true, at(61));
    assert_eq!(outbox.lanes.len(), 1, "the old lane went once drained");
    outbox.close(2);
    assert_eq!(outbox.lanes.len(), 1, "a member's lane is not closed");
    outbox.set_members([(1, "a")]);
    outbox.close(2);
    assert!(outbox.lanes.is_empty(), "a closed, empty lane goes at once");
    release_for_two(&mut outbox, 3, at(30_000), at(70));
    assert!(batches(&mut outbox, at(70)).is_empty());
}

#[test]
fn what_waits_behind_a_late_batch_is_spread_with_it() {
    let mut outbox = outbox();
    release_for_two(&mut outbox, 1, at(30_000), at(0));
    let slow = batches(&mut outbox, at(0)).remove(0);
    // Queued behind the batch under way, before the member is known slow.
    release_for_two(&mut outbox, 2, at(30_000), at(10));
    assert!(batches(&mut outbox, at(10)).is_empty());
    outbox.late(slow.key, at(50));
    let spread = batches(&mut outbox, at(50));
    assert_eq!(spread.len(), 1);
    assert_eq!((spread[0].member, ids(&spread[0])), (3, vec![1, 2]));
    assert!(spread[0].releases.iter().all(|r| r.spread));
    // Its failure spreads nothing twice.
    outbox.answered(spread[0].key, true, at(55));
    outbox.answered(slow.key, false, at(2_000));
    assert!(batches(&mut outbox, at(2_000)).is_empty(), "2 waits");
}

#[test]
fn batch_keys_start_after_the_number_given_and_never_go_back() {
    let mut outbox = outbox();
    outbox.number_from(100);
    release_for_two(&mut outbox, 1, at(30_000), at(0));
    let first = batches(&mut outbox, at(0)).remove(0);
    assert_eq!(first.key, 101);
    outbox.number_from(5);
    outbox.answered(first.key, true, at(1));
    release_for_two(&mut outbox, 2, at(30_000), at(1));
    assert_eq!(batches(&mut outbox, at(1)).remove(0).key, 102);
}

#[test]
fn a_closed_lane_that_fails_waits_tries_again_and_goes_once_taken() {
    let mut outbox = outbox();
    release_for_two(&mut outbox, 1, at(30_000), at(0));
    let first = batches(&mut outbox, at(0)).remove(0);
    outbox.set_members([(1, "a"), (3, "c")]);
    outbox.close(2);
    assert_eq!(outbox.members().collect::<Vec<_>>(), [3]);
    release_for_two(&mut outbox, 2, at(30_000), at(1));
    let wait = outbox.answered(first.key, false, at(1)).unwrap();
    let spread = batches(&mut outbox, at(1));
    assert_eq!((spread[0].member, ids(&spread[0])), (3, vec![1]));
    assert!(batches(&mut outbox, at(20)).is_empty(), "its wait runs");
    outbox.resume(first.key);
    let again = batches(&mut outbox, at(1 + wait.as_millis() as u64));
    assert_eq!((again[0].member, ids(&again[0])), (2, vec![1]));
    assert_eq!(outbox.lanes.len(), 2);
    outbox.answered(again[0].key, true, at(60));
    assert_eq!(outbox.lanes.len(), 1, "drained: the closed lane went");
    assert_eq!(outbox.lanes[0].member, 3);
}

#[test]
fn a_member_added_again_keeps_its_lane_when_its_old_departure_ends() {
    let mut outbox = Outbox::new(1);
    outbox.set_members([(1, "a"), (2, "b"), (3, "c")]);
    // 2 leaves: its lane stays open while rebuilds read it.
    outbox.set_members([(1, "a"), (3, "c")]);
    assert_eq!(outbox.members().collect::<Vec<_>>(), [2, 3]);
    // Added again at another address before its departure's end closed
    // its lane; that end comes after.
    outbox.set_members([(1, "a"), (2, "b:2"), (3, "c")]);
    outbox.close(2);
    release_for_two(&mut outbox, 5, at(30_000), at(0));
    let sent = batches(&mut outbox, at(0));
    assert_eq!(sent.len(), 1, "the new lane still takes releases");
    assert_eq!((sent[0].addr.as_str(), ids(&sent[0])), ("b:2", vec![5]));
    // Gone from the configuration, its lane closes at the end.
    outbox.set_members([(1, "a"), (3, "c")]);
    outbox.answered(sent[0].key, true, at(1));
    outbox.close(2);
    assert_eq!(outbox.members().collect::<Vec<_>>(), [3]);
}

#[test]
fn a_timer_of_an_earlier_batch_does_nothing_to_the_next_one() {
    let mut outbox = outbox();
    release_for_two(&mut outbox, 1, at(30_000), at(0));
    let first = batches(&mut outbox, at(0)).remove(0);
    outbox.answered(first.key, false, at(10));
    let spread = batches(&mut outbox, at(10)).remove(0);
    outbox.answered(spread.key, true, at(11));
    outbox.resume(first.key);
    release_for_two(&mut outbox, 2, at(30_000), at(60));
    let sent = batches(&mut outbox, at(60));
    let second = sent[0].clone();
    assert_eq!((second.member, ids(&second)), (2, vec![1, 2]));
    // 2 has not taken a batch since it failed: 3 is given the new one too.
    assert_eq!((sent[1].member, ids(&sent[1])), (3, vec![2]));
    outbox.answered(sent[1].key, true, at(61));
    // The first batch's late timer and its wait's end come after.
    outbox.late(first.key, at(70));
    outbox.resume(first.key);
    assert!(
        batches(&mut outbox, at(70)).is_empty(),
        "nothing spread, nothing sent beside the batch under way"
    );
    assert_eq!(
        outbox.answered(first.key, false, at(80)),
        None,
        "no such batch"
    );
    assert!(batches(&mut outbox, at(80)).is_empty());
    assert_eq!(outbox.answered(second.key, true, at(90)), None);
    assert!(outbox.is_empty());
}
