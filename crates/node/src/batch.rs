//! Forwarded calls that answer at once (acquires that do not wait,
//! releases, renews), sent to the speaker in batches: a busy follower makes
//! one request for however many of its clients asked while its earlier
//! batches were on their way, and the speaker answers them in one pass.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold_api::{
    millis_floor, Body, ErrorCode, ForwardAnswer, ForwardAnswers, ForwardBatch, ForwardCall,
    Granted, PeerLock,
};
use locktable::{LockId, LockInTransit};
use tokio::sync::{mpsc, oneshot, watch, Semaphore};

use crate::error::ApiError;
use crate::node::{AcquireRequest, Node};

/// Most calls in one batch.
const MAX_BATCH: usize = 256;
/// Batches on their way at once; calls that come meanwhile wait for the
/// next.
const IN_FLIGHT: usize = 4;

type Reply = oneshot::Sender<Result<ForwardAnswer, ApiError>>;

/// A forwarded call waiting for a batch, and where its answer goes.
pub(crate) type Pending = (ForwardCall, Reply);

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

impl Node {
    /// Sends `call` to the speaker in the next batch, and waits for its
    /// answer.
    pub(crate) async fn forward_call(&self, call: ForwardCall) -> Result<ForwardAnswer, ApiError> {
        let (tx, rx) = oneshot::channel();
        let stopping = || ApiError::new(ErrorCode::NotRebuilt, "the node is stopping");
        if !self.batches.push((call, tx)) {
            return Err(stopping());
        }
        rx.await.map_err(|_| stopping())?
    }

    /// Sends the queued calls in batches until `stop`.
    pub(crate) async fn send_batches(self: Arc<Self>, stop: watch::Receiver<bool>) {
        let Some(rx) = self.batches.take_receiver() else {
            return;
        };
        drain_in_batches(rx, MAX_BATCH, IN_FLIGHT, stop, move |batch| {
            let node = Arc::clone(&self);
            async move { node.send_batch(batch).await }
        })
        .await;
    }

    async fn send_batch(&self, batch: Vec<Pending>) {
        let (calls, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        let count = calls.len();
        let answered = self
            .forward::<_, ForwardAnswers>(
                leasehold_api::routes::FORWARD_BATCH,
                &ForwardBatch { calls },
                Duration::ZERO,
            )
            .await
            .and_then(|a| {
                if a.answers.len() == count {
                    Ok(a.answers)
                } else {
                    Err(ApiError::internal(format!(
                        "the speaker answered {} of {count} calls",
                        a.answers.len()
                    )))
                }
            });
        match answered {
            Ok(answers) => {
                for (reply, answer) in replies.into_iter().zip(answers) {
                    let _ = reply.send(Ok(answer));
                }
            }
            Err(e) => {
                for reply in replies {
                    let _ = reply.send(Err(e.clone()));
                }
            }
        }
    }

    /// Serves a forwarded call as the speaker. In a batch (`may_wait`
    /// false) an acquire does not wait; `received` is when the request
    /// came, for the time an acquire was held.
    pub(crate) async fn serve_forwarded(
        self: &Arc<Self>,
        call: ForwardCall,
        received: Instant,
        may_wait: bool,
    ) -> ForwardAnswer {
        let answer = match call {
            ForwardCall::Acquire(forwarded) => {
                self.serve_acquire(forwarded, received, may_wait).await
            }
            ForwardCall::Release(forwarded) => parse_id(&forwarded.id)
                .and_then(|id| self.speak_release(&forwarded.name, id))
                .map(|lock| ForwardAnswer::Lock(self.transit(&lock))),
            ForwardCall::Renew(forwarded) => self.serve_renew(forwarded).await,
        };
        answer.unwrap_or_else(|e| ForwardAnswer::Refused(*e.body))
    }

    async fn serve_acquire(
        &self,
        forwarded: leasehold_api::ForwardAcquire,
        received: Instant,
        may_wait: bool,
    ) -> Result<ForwardAnswer, ApiError> {
        forwarded.body.validate()?;
        let mut request = AcquireRequest::from(&forwarded.body);
        if !may_wait {
            request.wait = Duration::ZERO;
        }
        let lock = self.speak_acquire(request, forwarded.node).await?;
        Ok(ForwardAnswer::Granted(Granted {
            lock: self.transit(&lock),
            served_ms: millis_floor(received.elapsed()),
        }))
    }

    async fn serve_renew(
        &self,
        forwarded: leasehold_api::ForwardRenew,
    ) -> Result<ForwardAnswer, ApiError> {
        let id = parse_id(&forwarded.id)?;
        let now = self.clock.now();
        let record = forwarded
            .record
            .map(LockInTransit::try_from)
            .transpose()?
            .map(|l| l.arrive(now));
        let lease = forwarded.lease_ms.map(Duration::from_millis);
        let lock = self
            .speak_renew(&forwarded.name, id, lease, forwarded.node, record)
            .await?;
        Ok(ForwardAnswer::Lock(self.transit(&lock)))
    }

    /// A lock as it travels to a peer, as of now.
    pub(crate) fn transit(&self, lock: &locktable::Lock) -> PeerLock {
        PeerLock::from(lock.in_transit(self.clock.now()))
    }
}

/// Takes the items of `rx` in batches of at most `max` (see [`next_batch`])
/// and hands each batch to `send` in a task of its own, with at most
/// `in_flight` under way at once (items that come meanwhile wait for the
/// next batch), until `rx` closes or `stop` changes.
pub(crate) async fn drain_in_batches<T, F, Fut>(
    mut rx: mpsc::UnboundedReceiver<T>,
    max: usize,
    in_flight: usize,
    mut stop: watch::Receiver<bool>,
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
            _ = stop.changed() => return,
        };
        let Some(batch) = next_batch(&mut rx, max, &mut stop).await else {
            return;
        };
        let sent = send(batch);
        tokio::spawn(async move {
            sent.await;
            drop(permit);
        });
    }
}

/// Waits for the next item on `rx`, then takes whatever else is already
/// queued, up to `max` in all; `None` once `rx` closes or `stop` changes.
pub(crate) async fn next_batch<T>(
    rx: &mut mpsc::UnboundedReceiver<T>,
    max: usize,
    stop: &mut watch::Receiver<bool>,
) -> Option<Vec<T>> {
    let first = tokio::select! {
        next = rx.recv() => next?,
        _ = stop.changed() => return None,
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

fn parse_id(id: &str) -> Result<LockId, ApiError> {
    Ok(id.parse()?)
}
