//! One long-lived connection for frames to one node: many calls in
//! flight at once, each under a request id of its own, answered in any
//! order. Two tasks drive it: the writer drains the queue of encoded
//! frames into one buffer per write (the calls made while a write was
//! under way go out together in the next), and the reader feeds a
//! [`FrameDecoder`] and hands each answer to the call waiting under its
//! id.
//!
//! Shutdown: dropping the [`Connection`] (the transport's, and every
//! call's, handle) stops both tasks and closes the socket; so do the
//! connection breaking, the node refusing its token, and no call for
//! [`Limits::idle`]. Every call pending then fails: no answer if its frame
//! went to the socket, not sent if it never did (a refused token fails
//! them with the node's refusal).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use leasehold_api::wire::{encode_frame, Answer, Frame, FrameDecoder, FrameError, Request};
use leasehold_api::{ErrorBody, ErrorCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt, ReadHalf, WriteHalf};
use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::dial::{Dialed, Stream, TOKEN_ID};
use crate::transport::CallError;

/// A write gathers the frames queued up to this many bytes.
const MAX_BATCH: usize = 256 * 1024;

/// Bytes asked of the socket per read.
const READ_BUFFER: usize = 64 * 1024;

/// How long the writer tries to close its side of the socket politely
/// (TLS's `close_notify`) on the way out.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(1);

/// How much a connection takes on.
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    /// A connection with no call for this long is closed.
    pub(crate) idle: Duration,
    /// The calls in flight at once; more wait for one to end.
    pub(crate) max_in_flight: usize,
}

/// A call that did not get its answer.
#[derive(Debug)]
pub(super) enum Failure {
    /// The connection was closed before the call was sent on it: nothing
    /// was sent, and a new connection may carry it.
    Closed,
    /// The call failed.
    Call(CallError),
}

/// A connection for frames, its tasks running.
pub(super) struct Connection {
    shared: Arc<Shared>,
    writes: mpsc::UnboundedSender<(u64, Vec<u8>)>,
    _stop: DropGuard,
}

/// What the connection's tasks and its calls share.
struct Shared {
    /// `host:port`, for messages.
    node: String,
    calls: Mutex<Calls>,
    /// Set once the connection closes (as `Calls::closed`), read without
    /// the lock.
    closed: AtomicBool,
    next_id: AtomicU64,
    room: Semaphore,
    stop: CancellationToken,
    idle: Duration,
}

/// The calls waiting for their answers.
struct Calls {
    waiting: HashMap<u64, Waiter>,
    /// Why the connection closed, once it has.
    closed: Option<String>,
    /// When the last call ended, while none is waiting.
    idle_since: Instant,
    /// The token's answer is still to come.
    token_pending: bool,
}

/// A call waiting for its answer.
struct Waiter {
    answer: oneshot::Sender<Result<Answer, CallError>>,
    /// Its frame went to the socket.
    sent: bool,
}

/// Why a connection closes.
enum Closing {
    /// It broke, or was closed: calls sent get no answer, the others are
    /// not sent.
    Broke(String),
    /// The node refused its token: every call is refused so.
    Refused(ErrorBody),
}

impl Connection {
    /// Runs a connection over `dialed` to `node` (`host:port`).
    pub(super) fn start(dialed: Dialed, node: String, limits: &Limits) -> Connection {
        let Dialed {
            stream,
            read,
            token_sent,
        } = dialed;
        let (input, output) = tokio::io::split(stream);
        let shared = Arc::new(Shared::new(node, limits, token_sent));
        let (writes, queue) = mpsc::unbounded_channel();
        leasehold_tasks::spawn(reader(Arc::clone(&shared), input, read));
        leasehold_tasks::spawn(writer(Arc::clone(&shared), output, queue));
        Connection {
            _stop: shared.stop.clone().drop_guard(),
            shared,
            writes,
        }
    }

    /// Whether calls may still be made on it.
    pub(super) fn is_open(&self) -> bool {
        !self.shared.closed.load(Ordering::Acquire)
    }

    /// The node's answer to `request`, by `deadline`, as it came (an
    /// error answer, of any kind).
    pub(super) async fn call(
        &self,
        request: &Request,
        deadline: Instant,
    ) -> Result<Answer, Failure> {
        let shared = &self.shared;
        let _room = match tokio::time::timeout_at(deadline, shared.room.acquire()).await {
            Ok(Ok(permit)) => permit,
            Ok(Err(_)) => return Err(Failure::Closed),
            Err(_) => {
                return Err(Failure::Call(CallError::NotSent(format!(
                    "timed out waiting for room among the calls in flight to {}",
                    shared.node
                ))))
            }
        };
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let mut frame = Vec::new();
        encode_frame(id, request, &mut frame).map_err(|e| Failure::Call(unsendable(e)))?;
        let answer = shared.wait_for(id)?;
        let mut waiting = Waiting {
            shared,
            id,
            answered: false,
        };
        // The writer is gone only once the connection closed, which
        // answered the call already.
        let _ = self.writes.send((id, frame));
        match tokio::time::timeout_at(deadline, answer).await {
            Ok(Ok(answer)) => {
                waiting.answered = true;
                answer.map_err(Failure::Call)
            }
            Ok(Err(_)) => Err(Failure::Call(CallError::NoAnswer(format!(
                "the connection to {} closed",
                shared.node
            )))),
            Err(_) => {
                waiting.answered = true;
                let sent = shared.forget(id).is_none_or(|w| w.sent);
                let why = format!("timed out ({})", shared.node);
                Err(Failure::Call(if sent {
                    CallError::NoAnswer(why)
                } else {
                    CallError::NotSent(why)
                }))
            }
        }
    }
}

/// A call's place among those waiting, given up if the call is (dropped
/// by its caller, timed out).
struct Waiting<'a> {
    shared: &'a Shared,
    id: u64,
    answered: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.shared.forget(self.id);
        }
    }
}

/// A request that cannot be a frame, refused as the node would refuse it.
fn unsendable(e: FrameError) -> CallError {
    let code = match e {
        FrameError::TooLarge { .. } => ErrorCode::TooLarge,
        _ => ErrorCode::BadRequest,
    };
    CallError::Api(ErrorBody::new(code, e.to_string()))
}

impl Shared {
    fn new(node: String, limits: &Limits, token_pending: bool) -> Shared {
        Shared {
            node,
            calls: Mutex::new(Calls {
                waiting: HashMap::new(),
                closed: None,
                idle_since: Instant::now(),
                token_pending,
            }),
            closed: AtomicBool::new(false),
            next_id: AtomicU64::new(TOKEN_ID + 1),
            room: Semaphore::new(limits.max_in_flight),
            stop: CancellationToken::new(),
            idle: limits.idle,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Calls> {
        self.calls.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where the answer to the call `id` will come.
    fn wait_for(&self, id: u64) -> Result<oneshot::Receiver<Result<Answer, CallError>>, Failure> {
        let mut calls = self.lock();
        if calls.closed.is_some() {
            return Err(Failure::Closed);
        }
        let (answer, receiver) = oneshot::channel();
        let waiter = Waiter {
            answer,
            sent: false,
        };
        calls.waiting.insert(id, waiter);
        Ok(receiver)
    }

    /// The call `id` no longer waits.
    fn forget(&self, id: u64) -> Option<Waiter> {
        let mut calls = self.lock();
        let waiter = calls.waiting.remove(&id);
        if calls.waiting.is_empty() {
            calls.idle_since = Instant::now();
        }
        waiter
    }

    /// Hands `frame` to the call waiting under its id (none: it gave up).
    fn answer(&self, frame: Frame<Answer>) {
        if frame.id == TOKEN_ID && self.lock().token_pending {
            match frame.message {
                Answer::Done => self.lock().token_pending = false,
                Answer::Error(refusal) => self.close(Closing::Refused(refusal)),
                other => self.close(Closing::Broke(format!(
                    "{} answered the token with {other:?}",
                    self.node
                ))),
            }
            return;
        }
        if let Some(waiter) = self.forget(frame.id) {
            let _ = waiter.answer.send(Ok(frame.message));
        }
    }

    /// Fails the call whose answer could not be read.
    fn unreadable(&self, id: u64, e: &FrameError) {
        let why = format!("an unreadable answer from {}: {e}", self.node);
        if id == TOKEN_ID && self.lock().token_pending {
            self.close(Closing::Broke(why));
        } else if let Some(waiter) = self.forget(id) {
            let _ = waiter.answer.send(Err(CallError::NoAnswer(why)));
        }
    }

    /// Appends to `batch` the frames of `queued` whose calls still wait,
    /// and marks them sent: a call that gave up before its frame was
    /// taken (timed out, dropped) is not sent at all, as it was told.
    fn take_sendable(&self, queued: &mut Vec<(u64, Vec<u8>)>, batch: &mut Vec<u8>) {
        let mut calls = self.lock();
        for (id, frame) in queued.drain(..) {
            if let Some(waiter) = calls.waiting.get_mut(&id) {
                waiter.sent = true;
                batch.extend_from_slice(&frame);
            }
        }
    }

    /// When the connection is to close for want of calls, if none comes
    /// meanwhile; `None` once it has closed (for that, or another reason).
    fn idle_until(&self) -> Option<Instant> {
        let now = Instant::now();
        let until = {
            let calls = self.lock();
            if calls.closed.is_some() {
                return None;
            }
            if !calls.waiting.is_empty() {
                return Some(now + self.idle);
            }
            calls.idle_since + self.idle
        };
        if until > now {
            return Some(until);
        }
        self.close(Closing::Broke(format!(
            "the connection to {} was idle",
            self.node
        )));
        None
    }

    /// Closes the connection (once): fails every call waiting, stops the
    /// tasks.
    fn close(&self, closing: Closing) {
        let waiting = {
            let mut calls = self.lock();
            if calls.closed.is_some() {
                return;
            }
            calls.closed = Some(match &closing {
                Closing::Broke(why) => why.clone(),
                Closing::Refused(refusal) => refusal.message.clone(),
            });
            self.closed.store(true, Ordering::Release);
            std::mem::take(&mut calls.waiting)
        };
        self.room.close();
        self.stop.cancel();
        for (_, waiter) in waiting {
            let failure = match &closing {
                Closing::Refused(refusal) => CallError::Api(refusal.clone()),
                Closing::Broke(why) if waiter.sent => CallError::NoAnswer(why.clone()),
                Closing::Broke(why) => CallError::NotSent(why.clone()),
            };
            let _ = waiter.answer.send(Err(failure));
        }
    }
}

/// Reads answers and hands each to its call, until the connection closes.
async fn reader(shared: Arc<Shared>, mut input: ReadHalf<Box<dyn Stream>>, first: Vec<u8>) {
    let mut decoder = FrameDecoder::<Answer>::new();
    decoder.feed(&first);
    let mut buffer = vec![0; READ_BUFFER];
    let why = loop {
        if let Err(why) = drain(&shared, &mut decoder) {
            break why;
        }
        let read = tokio::select! {
            _ = shared.stop.cancelled() => return,
            read = input.read(&mut buffer) => read,
        };
        match read {
            Ok(0) => {
                break match decoder.finish() {
                    Ok(()) => format!("{} closed the connection", shared.node),
                    Err(e) => format!("{} closed the connection: {e}", shared.node),
                }
            }
            Ok(n) => decoder.feed(&buffer[..n]),
            Err(e) => break format!("reading from {}: {e}", shared.node),
        }
    };
    shared.close(Closing::Broke(why));
}

/// Hands out every whole answer `decoder` holds; why the stream cannot
/// be followed, if it cannot.
fn drain(shared: &Shared, decoder: &mut FrameDecoder<Answer>) -> Result<(), String> {
    loop {
        match decoder.poll() {
            Ok(Some(frame)) => shared.answer(frame),
            Ok(None) => return Ok(()),
            Err(e) if e.is_fatal() => return Err(format!("from {}: {e}", shared.node)),
            Err(e) => {
                if let Some(id) = e.id() {
                    shared.unreadable(id, &e);
                }
            }
        }
    }
}

/// Writes the frames queued, as many at once as are there, until the
/// connection closes; closes it once idle. Shuts the socket's sending
/// side down on the way out.
async fn writer(
    shared: Arc<Shared>,
    mut output: WriteHalf<Box<dyn Stream>>,
    mut queue: mpsc::UnboundedReceiver<(u64, Vec<u8>)>,
) {
    let mut batch = Vec::with_capacity(READ_BUFFER);
    let mut queued = Vec::new();
    let idle = tokio::time::sleep(shared.idle);
    tokio::pin!(idle);
    loop {
        let (id, frame) = tokio::select! {
            _ = shared.stop.cancelled() => break,
            next = queue.recv() => match next {
                Some(next) => next,
                None => break,
            },
            _ = &mut idle => match shared.idle_until() {
                Some(until) => {
                    idle.as_mut().reset(until);
                    continue;
                }
                None => break,
            },
        };
        let mut bytes = frame.len();
        queued.push((id, frame));
        while bytes < MAX_BATCH {
            let Ok((id, frame)) = queue.try_recv() else {
                break;
            };
            bytes += frame.len();
            queued.push((id, frame));
        }
        batch.clear();
        shared.take_sendable(&mut queued, &mut batch);
        if batch.is_empty() {
            continue;
        }
        let written = async {
            output.write_all(&batch).await?;
            output.flush().await
        };
        if let Err(e) = written.await {
            shared.close(Closing::Broke(format!("writing to {}: {e}", shared.node)));
            break;
        }
    }
    // Bounded: a node that reads nothing more cannot hold the task.
    let _ = tokio::time::timeout(SHUTDOWN_TIMEOUT, output.shutdown()).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call that gave up while its frame waited in the queue is not
    /// sent: it was told so (`NotSent`), so the node must never act on it.
    #[test]
    fn a_frame_whose_call_gave_up_is_not_written() {
        let limits = Limits {
            idle: Duration::from_secs(1),
            max_in_flight: 4,
        };
        let shared = Shared::new("node".into(), &limits, false);
        let _kept = shared.wait_for(1).unwrap();
        let _gone = shared.wait_for(2).unwrap();
        let gave_up = shared.forget(2).expect("waiting");
        assert!(!gave_up.sent);
        let mut queued = vec![(1, vec![1, 1]), (2, vec![2, 2])];
        let mut batch = Vec::new();
        shared.take_sendable(&mut queued, &mut batch);
        assert_eq!(batch, [1, 1]);
        assert!(queued.is_empty());
        assert!(shared.forget(1).expect("waiting").sent);
    }
}
