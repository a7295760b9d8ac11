use super::*;
use leasehold_api::Forgets;

fn release(name: &str, id: u128, ends_ms: u64) -> Release {
    Release {
        name: name.into(),
        id: LockId::from_u128(id),
        ends: MonoTime::from_nanos(ends_ms * 1_000_000),
        spread: false,
    }
}

fn ms(n: u64) -> MonoTime {
    MonoTime::from_nanos(n * 1_000_000)
}

#[test]
fn a_batch_is_a_forgets_body_with_the_time_each_lease_has_left() {
    let mut body = Body::new(MonoTime::from_nanos(2_000_000_000 - 1));
    assert!(body.add(&release("a", 1, 10_000)));
    assert!(body.add(&release("c", 3, 2_500)));
    let batch: Forgets = serde_json::from_slice(&body.finish()).unwrap();
    let got: Vec<(String, Option<u64>)> = batch
        .forgets
        .iter()
        .map(|f| (f.name.clone(), f.ttl_ms))
        .collect();
    // Rounded up: the receiver never keeps an id shorter than it must.
    assert_eq!(
        got,
        [("a".to_string(), Some(8_001)), ("c".to_string(), Some(501))]
    );
    assert_eq!(batch.forgets[0].id, LockId::from_u128(1).to_string());
}

#[test]
fn a_batch_stays_under_the_peer_body_limit() {
    let name = "n".repeat(500);
    let mut body = Body::new(ms(0));
    let taken = (0..1000)
        .take_while(|i| body.add(&release(&name, *i, 60_000)))
        .count();
    let body = body.finish();
    assert!(body.len() <= BATCH_BYTES, "{} bytes", body.len());
    let batch: Forgets = serde_json::from_slice(&body).unwrap();
    assert_eq!(batch.forgets.len(), taken);
    assert!(taken > 50 && taken < 1000, "{taken}");
}

/// Member 1's releases, with lanes to members 2 and 3, on a clock that
/// follows tokio's (paused in these tests).
struct Rig {
    releases: Releases,
    origin: tokio::time::Instant,
}

impl Rig {
    fn new() -> Rig {
        let releases = Releases::new(1);
        releases.set_members([(1, "a"), (2, "b"), (3, "c")]);
        Rig {
            releases,
            origin: tokio::time::Instant::now(),
        }
    }

    fn now(&self) -> MonoTime {
        MonoTime::from_nanos(1 << 40) + self.origin.elapsed()
    }

    fn elapsed_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    /// Releases lock `id` for member 2, its lease ending in `left`.
    fn release(&self, id: u128, left: Duration) {
        let now = self.now();
        let to = Members::only(2);
        self.releases
            .push(to, "x", LockId::from_u128(id), now + left, now);
    }
}

/// Each batch sent: when (ms since the start), to where, its ids.
type Sent = std::rc::Rc<std::cell::RefCell<Vec<(u64, String, Vec<u128>)>>>;

fn ids_of(body: &[u8]) -> Vec<u128> {
    let batch: Forgets = serde_json::from_slice(body).unwrap();
    batch
        .forgets
        .iter()
        .map(|f| f.id.parse::<LockId>().unwrap().as_u128())
        .collect()
}

/// What reached `addr`, each batch's time and ids.
fn to(sent: &Sent, addr: &str) -> Vec<(u64, Vec<u128>)> {
    let sent = sent.borrow();
    sent.iter()
        .filter(|(_, a, _)| a == addr)
        .map(|(t, _, ids)| (*t, ids.clone()))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_batch_not_taken_is_sent_again_with_backoff_until_taken_and_spread_once() {
    let rig = Rig::new();
    let stop = CancellationToken::new();
    let stop_tx = stop.clone();
    let sent: Sent = Default::default();
    let send = |addr: String, body: Vec<u8>| {
        let sent = sent.clone();
        let at = rig.elapsed_ms();
        async move {
            let mut sent = sent.borrow_mut();
            sent.push((at, addr.clone(), ids_of(&body)));
            let tries = sent.iter().filter(|(_, a, _)| *a == addr).count();
            if addr == "b" && tries <= 3 {
                Err("unreachable")
            } else {
                Ok(())
            }
        }
    };
    rig.release(7, Duration::from_secs(30));
    let sender = send_releases(&rig.releases, || rig.now(), send, stop);
    let script = async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        stop_tx.cancel();
    };
    tokio::join!(sender, script);
    assert_eq!(
        to(&sent, "b"),
        [(0, vec![7]), (50, vec![7]), (150, vec![7]), (350, vec![7])],
        "tried again after 50, 100, 200 ms; nothing sent once taken"
    );
    assert_eq!(to(&sent, "c"), [(0, vec![7])], "given to the other once");
}

#[tokio::test(start_paused = true)]
async fn a_release_whose_lease_ended_is_no_longer_sent() {
    let rig = Rig::new();
    let stop = CancellationToken::new();
    let stop_tx = stop.clone();
    let sent: Sent = Default::default();
    let send = |addr: String, body: Vec<u8>| {
        let sent = sent.clone();
        let at = rig.elapsed_ms();
        async move {
            sent.borrow_mut().push((at, addr, ids_of(&body)));
            Err::<(), _>("unreachable")
        }
    };
    // Ends after 2.5 s and 0.5 s, plus the clock-rate second.
    rig.release(1, Duration::from_millis(2_500));
    rig.release(2, Duration::from_millis(500));
    let sender = send_releases(&rig.releases, || rig.now(), send, stop);
    let script = async {
        tokio::time::sleep(Duration::from_secs(10)).await;
        stop_tx.cancel();
    };
    tokio::join!(sender, script);
    let to_b = to(&sent, "b");
    // Tries at 0, 50, 150, 350, 750, 1550, 2550 ms (the wait doubles
    // to 1 s); lock 2 is dropped once its lease and the second after
    // have passed (1.5 s), lock 1 likewise (3.5 s): nothing after.
    let times: Vec<u64> = to_b.iter().map(|(t, _)| *t).collect();
    assert_eq!(times, [0, 50, 150, 350, 750, 1550, 2550]);
    for (t, ids) in &to_b {
        assert_eq!(ids.contains(&2), *t < 1_500, "{to_b:?}");
        assert!(ids.contains(&1));
    }
    // Spread to c once, at b's first failure; c fails too, and its own
    // tries drop lock 2 alike.
    let to_c = to(&sent, "c");
    assert_eq!(to_c[0], (0, vec![1, 2]));
    for (t, ids) in &to_c {
        assert_eq!(ids.contains(&2), *t < 1_500, "{to_c:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_slow_members_releases_are_spread_as_they_come() {
    let rig = Rig::new();
    let stop = CancellationToken::new();
    let stop_tx = stop.clone();
    // The first batch to b takes 2 s to fail; later ones are taken at once.
    let sent: Sent = Default::default();
    let send = |addr: String, body: Vec<u8>| {
        let sent = sent.clone();
        let at = rig.elapsed_ms();
        async move {
            let first = {
                let mut sent = sent.borrow_mut();
                sent.push((at, addr.clone(), ids_of(&body)));
                sent.iter().filter(|(_, a, _)| *a == addr).count() == 1
            };
            if addr == "b" && first {
                tokio::time::sleep(Duration::from_secs(2)).await;
                Err("timed out")
            } else {
                Ok(())
            }
        }
    };
    rig.release(1, Duration::from_secs(30));
    let seen = std::cell::RefCell::new(Vec::new());
    let sender = send_releases(&rig.releases, || rig.now(), send, stop);
    let script = async {
        tokio::time::sleep(Duration::from_millis(40)).await;
        seen.borrow_mut().push(("40 ms", to(&sent, "c")));
        tokio::time::sleep(Duration::from_millis(20)).await;
        seen.borrow_mut().push(("60 ms", to(&sent, "c")));
        // While the member is slow, a new release is spread at once.
        rig.release(2, Duration::from_secs(30));
        tokio::time::sleep(Duration::from_millis(1)).await;
        seen.borrow_mut().push(("61 ms", to(&sent, "c")));
        // Once it takes a batch again, releases go to it alone.
        tokio::time::sleep(Duration::from_secs(3)).await;
        rig.release(3, Duration::from_secs(30));
        tokio::time::sleep(Duration::from_secs(1)).await;
        seen.borrow_mut().push(("4 s", to(&sent, "c")));
        stop_tx.cancel();
    };
    tokio::join!(sender, script);
    let spread_once = vec![(50, vec![1])];
    let spread_twice = vec![(50, vec![1]), (60, vec![2])];
    assert_eq!(
        seen.into_inner(),
        [
            ("40 ms", vec![]),
            ("60 ms", spread_once),
            ("61 ms", spread_twice.clone()),
            ("4 s", spread_twice)
        ]
    );
    let to_b: Vec<Vec<u128>> = to(&sent, "b").into_iter().map(|(_, ids)| ids).collect();
    assert_eq!(
        to_b,
        [vec![1], vec![1, 2], vec![3]],
        "the first batch, then 1 and 2, then 3"
    );
}

#[tokio::test(start_paused = true)]
async fn what_waits_behind_a_slow_batch_is_spread_when_it_goes_late() {
    let rig = Rig::new();
    let stop = CancellationToken::new();
    let stop_tx = stop.clone();
    // b never answers within the test: its first batch is under way
    // throughout, and what comes for it meanwhile waits behind it.
    let sent: Sent = Default::default();
    let send = |addr: String, body: Vec<u8>| {
        let sent = sent.clone();
        let at = rig.elapsed_ms();
        async move {
            sent.borrow_mut().push((at, addr.clone(), ids_of(&body)));
            if addr == "b" {
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
            Ok::<(), &str>(())
        }
    };
    rig.release(1, Duration::from_secs(30));
    let sender = send_releases(&rig.releases, || rig.now(), send, stop);
    let script = async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        rig.release(2, Duration::from_secs(30));
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop_tx.cancel();
    };
    tokio::join!(sender, script);
    assert_eq!(
        to(&sent, "c"),
        [(50, vec![1, 2])],
        "both spread once the batch under way is late"
    );
    assert_eq!(to(&sent, "b"), [(0, vec![1])]);
}

#[tokio::test(start_paused = true)]
async fn many_releases_go_in_batches_each_within_the_body_limit_in_order() {
    let rig = Rig::new();
    let stop = CancellationToken::new();
    let stop_tx = stop.clone();
    let sent: Sent = Default::default();
    let largest = std::cell::Cell::new(0);
    let send = |addr: String, body: Vec<u8>| {
        let sent = sent.clone();
        let at = rig.elapsed_ms();
        largest.set(largest.get().max(body.len()));
        async move {
            sent.borrow_mut().push((at, addr, ids_of(&body)));
            Ok::<(), &str>(())
        }
    };
    let name = "n".repeat(1_000);
    let now = rig.now();
    for id in 0..200 {
        let to = Members::only(2);
        let ends = now + Duration::from_secs(30);
        rig.releases
            .push(to, &name, LockId::from_u128(id), ends, now);
    }
    let sender = send_releases(&rig.releases, || rig.now(), send, stop);
    let script = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        stop_tx.cancel();
    };
    tokio::join!(sender, script);
    let batches = to(&sent, "b");
    assert!(batches.len() >= 4, "{} batches", batches.len());
    let all: Vec<u128> = batches.into_iter().flat_map(|(_, ids)| ids).collect();
    assert_eq!(all, (0..200).collect::<Vec<u128>>(), "each once, in order");
    assert!(largest.get() <= BATCH_BYTES, "{} bytes", largest.get());
    assert!(to(&sent, "c").is_empty());
}

#[tokio::test(start_paused = true)]
async fn a_stopped_sender_passes_on_what_it_holds_then_ends() {
    let rig = Rig::new();
    let stop = CancellationToken::new();
    let stop_tx = stop.clone();
    let taken = std::cell::RefCell::new(Vec::new());
    let send = |addr: String, _body: Vec<u8>| {
        let taken = &taken;
        let rig = &rig;
        async move {
            tokio::time::sleep(Duration::from_millis(30)).await;
            taken.borrow_mut().push((rig.elapsed_ms(), addr));
            Ok::<(), &str>(())
        }
    };
    rig.release(1, Duration::from_secs(30));
    let sender = send_releases(&rig.releases, || rig.now(), send, stop);
    let script = async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        stop_tx.cancel();
    };
    tokio::join!(sender, script);
    assert_eq!(taken.into_inner(), [(30, "b".to_string())], "finished");
    assert_eq!(rig.elapsed_ms(), 30, "and ended once it held nothing");
}

#[tokio::test(start_paused = true)]
async fn a_stopped_sender_gives_up_on_a_member_that_never_takes_them() {
    let rig = Rig::new();
    let stop = CancellationToken::new();
    let stop_tx = stop.clone();
    let send = |addr: String, _body: Vec<u8>| async move {
        match addr.as_str() {
            "b" => Err("unreachable"),
            _ => Ok(()),
        }
    };
    rig.release(1, Duration::from_secs(30));
    let sender = send_releases(&rig.releases, || rig.now(), send, stop);
    let script = async {
        tokio::time::sleep(Duration::from_millis(10)).await;
        stop_tx.cancel();
    };
    tokio::join!(sender, script);
    assert_eq!(
        rig.elapsed_ms(),
        10 + SEND_TIMEOUT.as_millis() as u64,
        "tried until the send timeout after the stop"
    );
}
