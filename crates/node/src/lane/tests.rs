use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

const WAIT: Duration = Duration::from_secs(30);

type Sending = Pin<Box<dyn Future<Output = ()> + Send>>;

fn tasks() -> Tasks {
    Tasks::default()
}

/// A send that answers each item doubled once `open` is notified, and
/// records every batch it was given.
struct Wire {
    open: Notify,
    batches: Mutex<Vec<Vec<u32>>>,
    calls: AtomicUsize,
}

impl Wire {
    fn new() -> Arc<Self> {
        Arc::new(Wire {
            open: Notify::new(),
            batches: Mutex::new(Vec::new()),
            calls: AtomicUsize::new(0),
        })
    }

    /// A send that records its batch, waits for `open` when `gated`,
    /// then answers every item doubled, one by one.
    fn send(self: &Arc<Self>, gated: bool) -> impl FnOnce(Batch<u32, u32>) -> Sending {
        let wire = Arc::clone(self);
        move |mut batch| {
            Box::pin(async move {
                wire.calls.fetch_add(1, Ordering::SeqCst);
                wire.batches.lock().unwrap().push(batch.items().to_vec());
                if gated {
                    wire.open.notified().await;
                }
                for at in 0..batch.items().len() {
                    let doubled = batch.items()[at] * 2;
                    batch.answer(at, doubled);
                }
            })
        }
    }

    fn batches(&self) -> Vec<Vec<u32>> {
        self.batches.lock().unwrap().clone()
    }
}

/// A caller sending `item` down `lane` over `wire`, in a task.
fn spawn_caller(
    lane: &Arc<Lane<u32, u32>>,
    wire: &Arc<Wire>,
    item: u32,
    gated: bool,
) -> tokio::task::JoinHandle<Option<u32>> {
    let (lane, send) = (Arc::clone(lane), wire.send(gated));
    tokio::spawn(async move { lane.send(item, WAIT, &tasks(), send).await })
}

async fn until(what: impl Fn() -> bool) {
    for _ in 0..1000 {
        if what() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("never happened");
}

#[tokio::test]
async fn an_item_on_an_idle_lane_is_sent_at_once_by_its_caller() {
    let lane = Lane::new(8, 1);
    let wire = Wire::new();
    assert_eq!(
        lane.send(21, WAIT, &tasks(), wire.send(false)).await,
        Some(42)
    );
    assert_eq!(wire.batches(), vec![vec![21]]);
    assert_eq!(
        lane.send(5, WAIT, &tasks(), wire.send(false)).await,
        Some(10)
    );
    assert_eq!(lane.state().sending, 0, "the lane is idle again");
}

#[tokio::test]
async fn items_that_come_while_a_batch_is_out_go_together_in_the_next() {
    let lane = Lane::new(8, 1);
    let wire = Wire::new();
    let first = spawn_caller(&lane, &wire, 1, true);
    until(|| wire.calls.load(Ordering::SeqCst) == 1).await;
    let mut later = Vec::new();
    for item in 2..=5 {
        later.push(spawn_caller(&lane, &wire, item, false));
    }
    until(|| lane.state().waiting.len() == 4).await;
    wire.open.notify_one();
    assert_eq!(first.await.unwrap(), Some(2));
    for (item, caller) in (2..=5).zip(later) {
        assert_eq!(caller.await.unwrap(), Some(item * 2));
    }
    assert_eq!(wire.batches(), vec![vec![1], vec![2, 3, 4, 5]]);
    assert_eq!(lane.state().sending, 0);
}

#[tokio::test]
async fn up_to_in_flight_callers_send_at_once_and_the_rest_wait() {
    let lane = Lane::new(8, 2);
    let wire = Wire::new();
    let mut callers = Vec::new();
    for item in 1..=2 {
        callers.push(spawn_caller(&lane, &wire, item, true));
    }
    until(|| wire.calls.load(Ordering::SeqCst) == 2).await;
    for item in 3..=4 {
        callers.push(spawn_caller(&lane, &wire, item, false));
    }
    until(|| lane.state().waiting.len() == 2).await;
    wire.open.notify_waiters();
    for (item, caller) in (1..=4).zip(callers) {
        assert_eq!(caller.await.unwrap(), Some(item * 2));
    }
    assert_eq!(wire.batches().len(), 3, "{:?}", wire.batches());
    assert_eq!(wire.batches()[2], vec![3, 4]);
    assert_eq!(lane.state().sending, 0);
}

#[tokio::test]
async fn a_batch_holds_at_most_max_items() {
    let lane = Lane::new(2, 1);
    let wire = Wire::new();
    let first = spawn_caller(&lane, &wire, 1, true);
    until(|| wire.calls.load(Ordering::SeqCst) == 1).await;
    let mut later = Vec::new();
    for item in 2..=6 {
        later.push(spawn_caller(&lane, &wire, item, false));
        until(|| lane.state().waiting.len() == item as usize - 1).await;
    }
    wire.open.notify_one();
    first.await.unwrap();
    for caller in later {
        caller.await.unwrap();
    }
    assert_eq!(
        wire.batches(),
        vec![vec![1], vec![2, 3], vec![4, 5], vec![6]]
    );
}

#[tokio::test]
async fn a_sender_that_stops_waiting_still_finishes_its_batch_and_passes_the_lane_on() {
    let lane = Lane::new(8, 1);
    let wire = Wire::new();
    let first = spawn_caller(&lane, &wire, 1, true);
    until(|| wire.calls.load(Ordering::SeqCst) == 1).await;
    let second = spawn_caller(&lane, &wire, 2, true);
    let third = spawn_caller(&lane, &wire, 3, true);
    until(|| lane.state().waiting.len() == 2).await;
    wire.open.notify_one();
    assert_eq!(first.await.unwrap(), Some(2));
    // The second caller now sends [2, 3]; it stops waiting mid-batch.
    until(|| wire.calls.load(Ordering::SeqCst) == 2).await;
    let carrier_was_second = wire.batches()[1] == vec![2, 3];
    assert!(carrier_was_second, "{:?}", wire.batches());
    second.abort();
    let _ = second.await;
    wire.open.notify_one();
    assert_eq!(
        third.await.unwrap(),
        Some(6),
        "its batch finished without its sender"
    );
    until(|| lane.state().sending == 0).await;
    assert_eq!(
        lane.send(4, WAIT, &tasks(), wire.send(false)).await,
        Some(8)
    );
}

#[tokio::test]
async fn an_item_not_sent_within_its_wait_is_never_sent_and_the_lane_moves_on() {
    let lane = Lane::new(8, 1);
    let wire = Wire::new();
    let first = spawn_caller(&lane, &wire, 1, true);
    until(|| wire.calls.load(Ordering::SeqCst) == 1).await;
    let impatient = lane
        .send(2, Duration::from_millis(20), &tasks(), wire.send(false))
        .await;
    assert_eq!(impatient, None);
    let patient = spawn_caller(&lane, &wire, 3, false);
    until(|| lane.state().waiting.len() == 2).await;
    wire.open.notify_one();
    assert_eq!(first.await.unwrap(), Some(2));
    assert_eq!(patient.await.unwrap(), Some(6));
    assert_eq!(
        wire.batches(),
        vec![vec![1], vec![3]],
        "2 gave up and was not sent"
    );
    assert_eq!(lane.state().sending, 0);
}

#[tokio::test]
async fn a_turn_to_send_that_is_never_read_passes_the_lane_on() {
    let lane: Arc<Lane<u32, u32>> = Lane::new(8, 1);
    lane.state().sending = 1;
    let (tx, rx) = oneshot::channel();
    lane.state().waiting.push_back(Waiter { item: 7, turn: tx });
    let wire = Wire::new();
    let next = spawn_caller(&lane, &wire, 8, false);
    until(|| lane.state().waiting.len() == 2).await;
    Arc::clone(&lane).pass_on();
    // The first waiter got the turn (with the second's item) but its
    // caller is gone before reading it.
    drop(rx);
    assert_eq!(next.await.unwrap(), Some(16));
    assert_eq!(lane.state().sending, 0);
}
