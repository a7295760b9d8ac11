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
    let pending: VecDeque<Release> = [
        release("a", 1, 10_000),
        // Ended more than the clock-rate second ago: passed over.
        release("b", 2, 500),
        release("c", 3, 2_500),
    ]
    .into();
    let (body, taken) = encode(&pending, MonoTime::from_nanos(2_000_000_000 - 1));
    assert_eq!(taken, 3);
    let batch: Forgets = serde_json::from_slice(&body.unwrap()).unwrap();
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

    let (body, taken) = encode(&[release("b", 2, 500)].into(), ms(1_500));
    assert_eq!((body, taken), (None, 1), "nothing left to send");
}

#[test]
fn a_batch_stays_under_the_peer_body_limit() {
    let name = "n".repeat(500);
    let pending: VecDeque<Release> = (0..1000).map(|i| release(&name, i, 60_000)).collect();
    let (body, taken) = encode(&pending, ms(0));
    let body = body.unwrap();
    assert!(body.len() <= BATCH_BYTES, "{} bytes", body.len());
    let batch: Forgets = serde_json::from_slice(&body).unwrap();
    assert_eq!(batch.forgets.len(), taken);
    assert!(taken > 50 && taken < 1000, "{taken}");
}

/// A sender for member 2 of members 1 (this node), 2 and 3, on a
/// clock that follows tokio's (paused in these tests); the receiver of
/// member 3's queue shows what was spread.
struct Rig {
    outbox: Outbox,
    rx: std::cell::RefCell<Option<mpsc::UnboundedReceiver<Release>>>,
    spread_rx: std::cell::RefCell<mpsc::UnboundedReceiver<Release>>,
    origin: tokio::time::Instant,
}

impl Rig {
    fn new() -> Rig {
        let outbox = Outbox::new(1);
        let rx = outbox.open(2, "b").into();
        let spread_rx = outbox.open(3, "c").unwrap().into();
        Rig {
            outbox,
            rx,
            spread_rx,
            origin: tokio::time::Instant::now(),
        }
    }

    fn now(&self) -> MonoTime {
        MonoTime::from_nanos(1 << 40) + self.origin.elapsed()
    }

    /// Releases lock `id` for member 2, its lease ending in `left`.
    fn release(&self, id: u128, left: Duration) {
        let ends = self.now() + left;
        let to = Members::only(2);
        self.outbox.push(to, "x", LockId::from_u128(id), ends);
    }

    fn spread_ids(&self) -> Vec<u128> {
        let mut rx = self.spread_rx.borrow_mut();
        std::iter::from_fn(|| rx.try_recv().ok())
            .map(|r| r.id.as_u128())
            .collect()
    }
}

/// When each batch was sent (ms since the start) and its ids.
type Sent = std::rc::Rc<std::cell::RefCell<Vec<(u64, Vec<u128>)>>>;

fn ids_of(body: &[u8]) -> Vec<u128> {
    let batch: Forgets = serde_json::from_slice(body).unwrap();
    batch
        .forgets
        .iter()
        .map(|f| f.id.parse::<LockId>().unwrap().as_u128())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_batch_not_taken_is_sent_again_with_backoff_until_taken() {
    let rig = Rig::new();
    let stop = CancellationToken::new();
    let stop_tx = stop.clone();
    let sent: Sent = Default::default();
    let origin = rig.origin;
    let send = |body: Vec<u8>| {
        let sent = sent.clone();
        async move {
            let mut sent = sent.borrow_mut();
            sent.push((origin.elapsed().as_millis() as u64, ids_of(&body)));
            if sent.len() <= 3 {
                Err("unreachable")
            } else {
                Ok(())
            }
        }
    };
    rig.release(7, Duration::from_secs(30));
    let rx = rig.rx.borrow_mut().take().unwrap();
    let sender = send_releases(&rig.outbox, 2, || rig.now(), send, rx, stop);
    let script = async {
        tokio::time::sleep(Duration::from_secs(5)).await;
        stop_tx.cancel();
    };
    tokio::join!(sender, script);
    let sent = sent.borrow().clone();
    assert_eq!(
        sent,
        [(0, vec![7]), (50, vec![7]), (150, vec![7]), (350, vec![7])],
        "tried again after 50, 100, 200 ms; nothing sent once taken"
    );
    assert_eq!(rig.spread_ids(), [7], "given to the others once");
}

#[tokio::test(start_paused = true)]
async fn a_release_whose_lease_ended_is_no_longer_sent() {
    let rig = Rig::new();
    let stop = CancellationToken::new();
    let stop_tx = stop.clone();
    let sent: Sent = Default::default();
    let origin = rig.origin;
    let send = |body: Vec<u8>| {
        let sent = sent.clone();
        async move {
            sent.borrow_mut()
                .push((origin.elapsed().as_millis() as u64, ids_of(&body)));
            Err::<(), _>("unreachable")
        }
    };
    // Ends after 2.5 s and 0.5 s, plus the clock-rate second.
    rig.release(1, Duration::from_millis(2_500));
    rig.release(2, Duration::from_millis(500));
    let rx = rig.rx.borrow_mut().take().unwrap();
    let sender = send_releases(&rig.outbox, 2, || rig.now(), send, rx, stop);
    let script = async {
        tokio::time::sleep(Duration::from_secs(10)).await;
        stop_tx.cancel();
    };
    tokio::join!(sender, script);
    let sent = sent.borrow().clone();
    // Tries at 0, 50, 150, 350, 750, 1550, 2550 ms (the wait doubles
    // to 1 s); lock 2 is dropped once its lease and the second after
    // have passed (1.5 s), lock 1 likewise (3.5 s): nothing after.
    let times: Vec<u64> = sent.iter().map(|(t, _)| *t).collect();
    assert_eq!(times, [0, 50, 150, 350, 750, 1550, 2550]);
    for (t, ids) in &sent {
        assert_eq!(ids.contains(&2), *t < 1_500, "{sent:?}");
        assert!(ids.contains(&1));
    }
    assert_eq!(rig.spread_ids(), [1, 2]);
}

#[tokio::test(start_paused = true)]
async fn a_slow_members_releases_are_spread_as_they_come() {
    let rig = Rig::new();
    let stop = CancellationToken::new();
    let stop_tx = stop.clone();
    // The first batch takes 2 s to fail; later ones are taken at once.
    let calls = std::cell::Cell::new(0);
    let send = |_body: Vec<u8>| {
        calls.set(calls.get() + 1);
        let first = calls.get() == 1;
        async move {
            if first {
                tokio::time::sleep(Duration::from_secs(2)).await;
                Err("timed out")
            } else {
                Ok(())
            }
        }
    };
    rig.release(1, Duration::from_secs(30));
    let rx = rig.rx.borrow_mut().take().unwrap();
    let spread = std::cell::RefCell::new(Vec::new());
    let sender = send_releases(&rig.outbox, 2, || rig.now(), send, rx, stop);
    let script = async {
        tokio::time::sleep(Duration::from_millis(40)).await;
        spread.borrow_mut().push(("40 ms", rig.spread_ids()));
        tokio::time::sleep(Duration::from_millis(20)).await;
        spread.borrow_mut().push(("60 ms", rig.spread_ids()));
        // While the member is slow, a new release is spread at once.
        rig.release(2, Duration::from_secs(30));
        tokio::time::sleep(Duration::from_millis(1)).await;
        spread.borrow_mut().push(("61 ms", rig.spread_ids()));
        // Once it takes a batch again, releases go to it alone.
        tokio::time::sleep(Duration::from_secs(3)).await;
        rig.release(3, Duration::from_secs(30));
        tokio::time::sleep(Duration::from_secs(1)).await;
        spread.borrow_mut().push(("4 s", rig.spread_ids()));
        stop_tx.cancel();
    };
    tokio::join!(sender, script);
    assert_eq!(
        spread.into_inner(),
        [
            ("40 ms", vec![]),
            ("60 ms", vec![1]),
            ("61 ms", vec![2]),
            ("4 s", vec![])
        ]
    );
    assert_eq!(calls.get(), 3, "the first batch, then 1 and 2, then 3");
}

#[tokio::test]
async fn a_release_goes_to_its_members_and_is_spread_to_the_others_once() {
    let outbox = Outbox::new(1);
    assert!(outbox.open(1, "a").is_none(), "no queue to this node");
    let mut rx: Vec<_> = [2, 3].map(|m| outbox.open(m, "b").unwrap()).into();
    assert!(outbox.open(2, "b").is_none(), "one queue per member");
    let id = LockId::from_u128(5);
    outbox.push(Members::only(2).with(Members::only(1)), "x", id, ms(9));
    let to_two = rx[0].try_recv().unwrap();
    assert!(!to_two.spread && to_two.id == id && to_two.ends == ms(9));
    assert!(rx[1].try_recv().is_err());
    // Node 2 did not take it: everyone else but this node gets it.
    outbox.spread(2, &to_two);
    assert!(rx[0].try_recv().is_err());
    let to_three = rx[1].try_recv().unwrap();
    assert!(to_three.spread && to_three.name == "x");
}

#[tokio::test]
async fn a_member_added_again_elsewhere_gets_a_new_queue_and_a_closed_one_ends() {
    let outbox = Outbox::new(1);
    let mut old = outbox.open(2, "b:1").unwrap();
    let mut moved = outbox.open(2, "b:2").expect("a queue to the new address");
    let id = LockId::from_u128(5);
    outbox.push(Members::only(2), "x", id, ms(9));
    assert!(moved.try_recv().is_ok());
    assert!(old.recv().await.is_none(), "the old address's sender ends");
    outbox.close(2);
    assert!(moved.recv().await.is_none(), "a closed queue's sender ends");
    outbox.push(Members::only(2), "x", id, ms(9));
}
