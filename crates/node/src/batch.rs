//! Forwarded calls that answer at once (acquires that do not wait,
//! releases, renews), sent to the speaker in batches: a busy follower makes
//! one request for however many of its clients asked while its earlier
//! batches were on their way, and the speaker answers them in one pass.

use std::sync::Arc;
use std::time::Duration;

use leasehold_api::{
    millis_floor, Body, ErrorCode, ForwardAnswer, ForwardAnswers, ForwardBatch, ForwardCall,
    Granted, PeerLock,
};
use locktable::{LockId, LockInTransit};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::node::{Node, Pending};
use crate::queue::drain_in_batches;
use crate::speak::AcquireRequest;

/// Most calls in one batch.
const MAX_BATCH: usize = 256;
/// Batches on their way at once; calls that come meanwhile wait for the
/// next.
const IN_FLIGHT: usize = 4;

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
    pub(crate) async fn send_batches(self: Arc<Self>, stop: CancellationToken) {
        let Some(rx) = self.batches.take_receiver() else {
            return;
        };
        let tasks = self.tasks.clone();
        drain_in_batches(rx, MAX_BATCH, IN_FLIGHT, stop, &tasks, move |batch| {
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

fn parse_id(id: &str) -> Result<LockId, ApiError> {
    Ok(id.parse()?)
}
