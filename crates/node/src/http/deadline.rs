//! A request body with a deadline: one that has not arrived whole within
//! the connection's idle timeout of the first wait for it ends in an error,
//! which the route answers as a body it could not read (`400`). A body
//! already in hand when it is read never starts a timer.

use std::future::Future;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use axum::body::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};

/// The body of one request, cut off `within` after it first kept its
/// reader waiting.
pub(super) struct DeadlineBody {
    body: Incoming,
    within: Duration,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl DeadlineBody {
    /// `body`, to arrive within `within` of the first wait for it.
    pub(super) fn new(body: Incoming, within: Duration) -> Self {
        DeadlineBody {
            body,
            within,
            deadline: None,
        }
    }
}

/// A body that did not arrive in time.
#[derive(Debug, thiserror::Error)]
#[error("the body did not arrive within {0:?}")]
struct TooSlow(Duration);

impl Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.body).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let within = this.within;
        let deadline = this
            .deadline
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(within)));
        ready!(deadline.as_mut().poll(cx));
        Poll::Ready(Some(Err(TooSlow(within).into())))
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
