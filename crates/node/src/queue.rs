//! Queues of items one task sends on in batches: each batch takes what
//! came while the last ones were on their way.

use std::sync::{Arc, Mutex};

use crate::tasks::Tasks;
use tokio::sync::{mpsc, Semaphore};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// Items waiting for the one task that sends them on in batches.
pub(crate) struct Queue<T> {
    tx: mpsc::UnboundedSender<T>,
    /// The other end, taken by that task.
    rx: Mutex<Option<mpsc::UnboundedReceiver<T>>>,
}

impl<T> Queue<T> {
    pub(crate) fn new() -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        Queue {
            tx,
            rx: Mutex::new(Some(rx)),
        }
    }

    /// Queues `item`; false once the task is gone.
    pub(crate) fn push(&self, item: T) -> bool {
        self.tx.send(item).is_ok()
    }

    /// The receiving end, for the task that sends the batches; `None` once
    /// taken.
    pub(crate) fn take_receiver(&self) -> Option<mpsc::UnboundedReceiver<T>> {
        self.rx.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// Takes the items of `rx` in batches of at most `max` (see [`next_batch`])
/// and hands each batch to `send` in a task of its own, with at most
/// `in_flight` under way at once (items that come meanwhile wait for the
/// next batch), until `rx` closes or `stop` is cancelled. The sending
/// tasks are `tasks`'s.
pub(crate) async fn drain_in_batches<T, F, Fut>(
    mut rx: mpsc::UnboundedReceiver<T>,
    max: usize,
    in_flight: usize,
    stop: CancellationToken,
    tasks: &Tasks,
    mut send: F,
) where
    F: FnMut(Vec<T>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let in_flight = Arc::new(Semaphore::new(in_flight));
    loop {
        let permit = tokio::select! {
            permit = Arc::clone(&in_flight).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => return,
            },
            _ = stop.cancelled() => return,
        };
        let Some(batch) = next_batch(&mut rx, max, &stop).await else {
            return;
        };
        let sent = send(batch);
        tasks.spawn(
            async move {
                sent.await;
                drop(permit);
            }
            .in_current_span(),
        );
    }
}

/// Waits for the next item on `rx`, then takes whatever else is already
/// queued, up to `max` in all; `None` once `rx` closes or `stop` is cancelled.
pub(crate) async fn next_batch<T>(
    rx: &mut mpsc::UnboundedReceiver<T>,
    max: usize,
    stop: &CancellationToken,
) -> Option<Vec<T>> {
    let first = tokio::select! {
        next = rx.recv() => next?,
        _ = stop.cancelled() => return None,
    };
    let mut batch = vec![first];
    while batch.len() < max {
        match rx.try_recv() {
            Ok(next) => batch.push(next),
            Err(_) => break,
        }
    }
    Some(batch)
}
