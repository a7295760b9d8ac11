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

/// The most bytes of items one peer request carries: a member reads no
/// body over `MAX_BODY_BYTES`, less the request's own brackets and commas.
/// One item alone always fits (a lock's name, holder and data are bounded
/// far below).
pub(crate) const MAX_PART_BYTES: usize = leasehold_api::MAX_BODY_BYTES - 1024;

/// Counts the bytes written to it.
struct Counted(usize);

impl std::io::Write for Counted {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The bytes of `item` in a JSON list, its comma included.
pub(crate) fn encoded_len<T: serde::Serialize>(item: &T) -> usize {
    let mut counted = Counted(0);
    let _ = serde_json::to_writer(&mut counted, item);
    counted.0 + 1
}

/// Cuts `items` into parts of at most `limit` bytes each (as `len` counts
/// them), in order; an item alone over the limit is a part of its own.
pub(crate) fn cut_by_size<T>(
    items: Vec<T>,
    len: impl Fn(&T) -> usize,
    limit: usize,
) -> Vec<Vec<T>> {
    let mut cut = Vec::new();
    let mut part = Vec::new();
    let mut bytes = 0;
    for item in items {
        let size = len(&item);
        if !part.is_empty() && bytes + size > limit {
            cut.push(std::mem::take(&mut part));
            bytes = 0;
        }
        bytes += size;
        part.push(item);
    }
    if !part.is_empty() {
        cut.push(part);
    }
    cut
}
