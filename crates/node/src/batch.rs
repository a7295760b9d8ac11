//! Forwarded calls that answer at once (acquires that do not wait,
//! releases, renews), sent to the speaker in batches: a busy follower makes
//! one request for however many of its clients asked while its earlier
//! batches were on their way, and the speaker answers them in one pass.

use std::sync::Arc;
use std::time::Duration;

use leasehold_api::{
    millis_floor, Body, ForwardAnswer, ForwardAnswers, ForwardBatch, ForwardCall, Granted, PeerLock,
};
use leasehold_protocol::Refusal;
use locktable::{LockId, LockInTransit};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::ApiError;
use crate::node::{Node, Pending};
use crate::queue::{cut_by_size, drain_in_batches, encoded_len, MAX_PART_BYTES};
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
        let stopping = || self.refused(Refusal::Stopping);
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

    /// Sends `batch` in as many requests as its size needs, at once.
    async fn send_batch(&self, batch: Vec<Pending>) {
        let parts = cut_by_size(batch, |(call, _)| encoded_len(call), MAX_PART_BYTES);
        futures::future::join_all(parts.into_iter().map(|part| self.send_part(part))).await;
    }

    async fn send_part(&self, batch: Vec<Pending>) {
        let (calls, replies): (Vec<_>, Vec<_>) = batch.into_iter().unzip();
        let count = calls.len();
        let answered = self
            .forward_raw(
                leasehold_api::routes::FORWARD_BATCH,
                &ForwardBatch { calls },
                Duration::ZERO,
            )
            .await
            .and_then(|bytes| {
                ForwardAnswers::read(&bytes)
                    .map_err(|e| crate::service::unanswered(format!("unreadable answer: {e}")))
            })
            .and_then(|answers| {
                if answers.len() == count {
                    Ok(answers)
                } else {
                    Err(ApiError::internal(format!(
                        "the speaker answered {} of {count} calls",
                        answers.len()
                    )))
                }
            });
        match answered {
            Ok(answers) => {
                // An answer this build cannot read (a newer speaker's)
                // fails its call alone, as a batch that did not read
                // fails all of them.
                for (reply, answer) in replies.into_iter().zip(answers) {
                    let _ = reply.send(answer.map_err(|why| {
                        crate::service::unanswered(format!("unreadable answer: {why}"))
                    }));
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
                .and_then(|id| match forwarded.unrenewed {
                    true => self.speak_take_back(&forwarded.name, id),
                    false => self.speak_release(&forwarded.name, id),
                })
                .map(|lock| ForwardAnswer::Lock(self.transit(&lock))),
            ForwardCall::Renew(forwarded) => self.serve_renew(forwarded).await,
            ForwardCall::ReleaseSet(forwarded) => self.serve_release_set(forwarded),
            call @ (ForwardCall::OpenSession(_)
            | ForwardCall::RenewSession(_)
            | ForwardCall::CloseSession(_)) => self.serve_session_call(call).await,
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
        let mut locks = match &forwarded.body.names {
            Some(names) => {
                let names = names.clone();
                self.speak_acquire_set(request, names, forwarded.node)
                    .await?
            }
            None => vec![self.speak_acquire(request, forwarded.node).await?],
        };
        let also = locks.split_off(1);
        Ok(ForwardAnswer::Granted(Granted {
            lock: self.transit(&locks[0]),
            served_ms: millis_floor(received.elapsed()),
            also: also.iter().map(|lock| self.transit(lock)).collect(),
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
        if let Some(data) = &forwarded.data {
            leasehold_api::validate_data(data)?;
        }
        let lock = self
            .speak_renew(
                &forwarded.name,
                id,
                lease,
                forwarded.node,
                record,
                forwarded.data,
            )
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

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_api::{AcquireBody, ForwardAcquire, MAX_BODY_BYTES, MAX_DATA_BYTES};

    fn acquire(data: usize) -> ForwardCall {
        ForwardCall::Acquire(ForwardAcquire {
            body: AcquireBody {
                name: Some("jobs/big".into()),
                data: Some("\u{1}".repeat(data)),
                ..AcquireBody::default()
            },
            node: 2,
        })
    }

    #[test]
    fn a_batch_is_cut_by_its_encoded_size_and_keeps_its_order() {
        // Each call's data escapes to six bytes a character: 256 of them
        // are far over what a member reads.
        let calls: Vec<(usize, ForwardCall)> = (0..MAX_BATCH)
            .map(|i| (i, acquire(MAX_DATA_BYTES)))
            .collect();
        let total: usize = calls.iter().map(|(_, c)| encoded_len(c)).sum();
        assert!(total > 10 * MAX_BODY_BYTES, "{total}");
        let parts = cut_by_size(calls, |(_, c)| encoded_len(c), MAX_PART_BYTES);
        assert!(parts.len() > 1);
        let mut order = Vec::new();
        for part in &parts {
            let body = serde_json::to_vec(&ForwardBatch {
                calls: part.iter().map(|(_, c)| c.clone()).collect(),
            })
            .unwrap();
            assert!(body.len() <= MAX_BODY_BYTES, "{} bytes", body.len());
            order.extend(part.iter().map(|(i, _)| *i));
        }
        assert_eq!(order, (0..MAX_BATCH).collect::<Vec<_>>());
        // Small calls stay in one request.
        let small: Vec<ForwardCall> = (0..MAX_BATCH).map(|_| acquire(0)).collect();
        assert_eq!(cut_by_size(small, encoded_len, MAX_PART_BYTES).len(), 1);
    }
}
