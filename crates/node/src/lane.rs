//! A lane to one member with a group commit: a few batches at most are on
//! the wire, and no task of its own sends them. A caller whose item finds
//! a free place in the lane sends its item itself; callers that come while
//! every place is taken wait; when a batch is answered its place passes
//! to the first caller still waiting, which sends its own item with
//! everything else that waited. Every wake on the way is of a caller that
//! needed waking anyway.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::sync::oneshot;

use crate::tasks::Tasks;

/// One member's lane of items `T`, each answered with an `R`.
pub(crate) struct Lane<T, R> {
    state: Mutex<LaneState<T, R>>,
    /// Most items in one batch.
    max: usize,
    /// Most batches on their way at once.
    in_flight: usize,
}

struct LaneState<T, R> {
    /// Batches on their way, or about to be (each a caller's baton).
    sending: usize,
    waiting: VecDeque<Waiter<T, R>>,
}

/// A caller waiting with its item for an answer or for its turn to send.
struct Waiter<T, R> {
    item: T,
    turn: oneshot::Sender<Turn<T, R>>,
}

/// What a waiting caller hears.
enum Turn<T, R> {
    /// Its item went in another caller's batch, with this answer.
    Answered(R),
    /// It sends the next batch: its own item first, then those of the
    /// others the baton carries.
    Send { mine: T, baton: Baton<T, R> },
}

/// Where a caller's item is: its own to send, or waiting.
enum Place<T, R> {
    Sending(T),
    Waiting(oneshot::Receiver<Turn<T, R>>),
}

/// The right to send the lane's one batch, with the other callers whose
/// items go in it until the batch is made. Dropped, it puts back the items
/// not taken and passes the lane on (or leaves it idle), so a caller that
/// gives up mid-batch, or a turn never read, cannot leave the lane stuck
/// nor lose another's item.
struct Baton<T, R> {
    lane: Option<Arc<Lane<T, R>>>,
    others: Vec<Waiter<T, R>>,
}

impl<T, R> Drop for Baton<T, R> {
    fn drop(&mut self) {
        if let Some(lane) = self.lane.take() {
            lane.put_back(std::mem::take(&mut self.others));
            lane.pass_on();
        }
    }
}

impl<T, R> Lane<T, R> {
    /// An idle lane whose batches hold at most `max` items, with at most
    /// `in_flight` batches on their way at once (each at least one).
    pub(crate) fn new(max: usize, in_flight: usize) -> Arc<Self> {
        Arc::new(Lane {
            state: Mutex::new(LaneState {
                sending: 0,
                waiting: VecDeque::new(),
            }),
            max: max.max(1),
            in_flight: in_flight.max(1),
        })
    }

    fn state(&self) -> MutexGuard<'_, LaneState<T, R>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Gives the baton to the first caller still waiting, with the items of
    /// the next batch, or marks the lane idle when none waits.
    fn pass_on(self: Arc<Self>) {
        loop {
            let mut state = self.state();
            let Some(first) = pop_live(&mut state.waiting) else {
                state.sending -= 1;
                return;
            };
            let mut others = Vec::new();
            while others.len() + 1 < self.max {
                match pop_live(&mut state.waiting) {
                    Some(next) => others.push(next),
                    None => break,
                }
            }
            drop(state);
            let baton = Baton {
                lane: Some(Arc::clone(&self)),
                others,
            };
            let turn = Turn::Send {
                mine: first.item,
                baton,
            };
            let Err(Turn::Send { mut baton, .. }) = first.turn.send(turn) else {
                return;
            };
            // That caller gave up just now: its item is not sent, and the
            // others wait for the next in line.
            baton.lane = None;
            self.put_back(std::mem::take(&mut baton.others));
        }
    }

    /// Puts `others` back at the head of the queue, in their order.
    fn put_back(&self, others: Vec<Waiter<T, R>>) {
        let mut state = self.state();
        for waiter in others.into_iter().rev() {
            state.waiting.push_front(waiter);
        }
    }
}

/// The first waiter that has not given up; those that have are dropped.
fn pop_live<T, R>(waiting: &mut VecDeque<Waiter<T, R>>) -> Option<Waiter<T, R>> {
    while let Some(waiter) = waiting.pop_front() {
        if !waiter.turn.is_closed() {
            return Some(waiter);
        }
    }
    None
}

impl<T: Send + 'static, R: Send + 'static> Lane<T, R> {
    /// Sends `item` down the lane and answers its `R`: at once with `send`
    /// when the lane is idle, otherwise in a later batch, sent by whichever
    /// caller has the lane then (perhaps this one). `send` gets one
    /// [`Batch`] and answers its items as it hears of them.
    ///
    /// `None` when no answer came within `wait`: the item was not sent in
    /// time (it is then never sent), or its batch's send gave up on it.
    /// A caller that stops waiting does not stop a batch it sends: that
    /// finishes in a task of `tasks`.
    pub(crate) async fn send<F, Fut>(
        self: &Arc<Self>,
        item: T,
        wait: Duration,
        tasks: &Tasks,
        send: F,
    ) -> Option<R>
    where
        F: FnOnce(Batch<T, R>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let deadline = tokio::time::Instant::now() + wait;
        let place = {
            let mut state = self.state();
            if state.sending >= self.in_flight {
                let (tx, rx) = oneshot::channel();
                state.waiting.push_back(Waiter { item, turn: tx });
                Place::Waiting(rx)
            } else {
                state.sending += 1;
                Place::Sending(item)
            }
        };
        let (mine, mut baton) = match place {
            Place::Sending(item) => {
                let baton = Baton {
                    lane: Some(Arc::clone(self)),
                    others: Vec::new(),
                };
                (item, baton)
            }
            Place::Waiting(rx) => match tokio::time::timeout_at(deadline, rx).await {
                Ok(Ok(Turn::Answered(answer))) => return Some(answer),
                Ok(Ok(Turn::Send { mine, baton })) => (mine, baton),
                Ok(Err(_)) | Err(_) => return None,
            },
        };
        let (reply, mut answer) = oneshot::channel();
        let others = std::mem::take(&mut baton.others);
        let mut items = Vec::with_capacity(others.len() + 1);
        let mut replies = Vec::with_capacity(others.len() + 1);
        items.push(mine);
        replies.push(Some(Reply::Mine(reply)));
        for waiter in others {
            items.push(waiter.item);
            replies.push(Some(Reply::Waiter(waiter.turn)));
        }
        let batch = Batch {
            items,
            replies,
            _baton: baton,
        };
        let mut work = Finishing::new(send(batch), tasks.clone());
        let answered = tokio::time::timeout_at(deadline, async {
            tokio::select! {
                biased;
                answer = &mut answer => answer.ok(),
                () = &mut work => answer.await.ok(),
            }
        });
        answered.await.ok().flatten()
    }
}

/// The items of one batch, and where each answer goes. Holding it is
/// holding the lane: dropped, the lane passes on.
pub(crate) struct Batch<T, R> {
    items: Vec<T>,
    replies: Vec<Option<Reply<T, R>>>,
    _baton: Baton<T, R>,
}

/// Where one item's answer goes.
enum Reply<T, R> {
    /// To the caller sending the batch.
    Mine(oneshot::Sender<R>),
    /// To a caller waiting.
    Waiter(oneshot::Sender<Turn<T, R>>),
}

impl<T, R> Batch<T, R> {
    /// The items, the sending caller's first.
    pub(crate) fn items(&self) -> &[T] {
        &self.items
    }

    /// Whether the caller of item `at` still waits for its answer (it has
    /// not been answered, nor given up).
    pub(crate) fn is_awaited(&self, at: usize) -> bool {
        match self.replies.get(at) {
            Some(Some(Reply::Mine(tx))) => !tx.is_closed(),
            Some(Some(Reply::Waiter(tx))) => !tx.is_closed(),
            _ => false,
        }
    }

    /// Answers item `at` (once; later answers are ignored).
    pub(crate) fn answer(&mut self, at: usize, answer: R) {
        match self.replies.get_mut(at).and_then(Option::take) {
            Some(Reply::Mine(tx)) => {
                let _ = tx.send(answer);
            }
            Some(Reply::Waiter(tx)) => {
                let _ = tx.send(Turn::Answered(answer));
            }
            None => {}
        }
    }
}

/// A future its caller may stop waiting for without stopping it: dropped
/// before it is done, it finishes in a task of the node's, so the other
/// callers whose items share its batch still hear their answers.
struct Finishing {
    work: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    tasks: Tasks,
}

impl Finishing {
    fn new(work: impl Future<Output = ()> + Send + 'static, tasks: Tasks) -> Self {
        Finishing {
            work: Some(Box::pin(work)),
            tasks,
        }
    }
}

impl Future for Finishing {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(work) = self.work.as_mut() else {
            return Poll::Ready(());
        };
        ready!(work.as_mut().poll(cx));
        self.work = None;
        Poll::Ready(())
    }
}

impl Drop for Finishing {
    fn drop(&mut self) {
        if let Some(work) = self.work.take() {
            self.tasks.spawn(work);
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod batch_tests {
    use super::*;

    const WAIT: Duration = Duration::from_secs(30);

    #[tokio::test]
    async fn each_item_is_answered_when_its_part_is_and_not_when_the_batch_ends() {
        let lane: Arc<Lane<u32, u32>> = Lane::new(8, 1);
        let (go_on, until_told) = oneshot::channel::<()>();
        let (finished, done) = oneshot::channel::<()>();
        let answer = lane
            .send(
                1,
                WAIT,
                &Tasks::default(),
                move |mut batch: Batch<u32, u32>| async move {
                    batch.answer(0, 10);
                    let _ = until_told.await;
                    drop(batch);
                    let _ = finished.send(());
                },
            )
            .await;
        assert_eq!(answer, Some(10), "answered before the rest of the batch");
        assert_eq!(
            lane.state().sending,
            1,
            "the batch goes on, holding the lane"
        );
        go_on.send(()).unwrap();
        done.await.unwrap();
        assert!(
            lane.state().sending == 0,
            "the lane passed on when the batch ended"
        );
    }

    #[test]
    fn a_batch_sees_which_callers_still_wait_for_their_answer() {
        let (mine, _mine_rx) = oneshot::channel();
        let (gone, gone_rx) = oneshot::channel();
        let (waiting, _waiting_rx) = oneshot::channel();
        let mut batch: Batch<u32, u32> = Batch {
            items: vec![1, 2, 3],
            replies: vec![
                Some(Reply::Mine(mine)),
                Some(Reply::Waiter(gone)),
                Some(Reply::Waiter(waiting)),
            ],
            _baton: Baton {
                lane: None,
                others: Vec::new(),
            },
        };
        drop(gone_rx);
        assert_eq!(
            (0..4).map(|i| batch.is_awaited(i)).collect::<Vec<_>>(),
            [true, false, true, false]
        );
        batch.answer(2, 6);
        assert!(!batch.is_awaited(2), "answered");
    }
}
