//! The incremental frame decoder: bytes in, whole frames out, no I/O.

use std::marker::PhantomData;

use super::frame::{Frame, FrameError, Header, Message, HEADER_LEN};
use crate::codec::Unread;

/// Reads frames of `M` from a stream's bytes as they arrive, in pieces of
/// any size, as quinn-proto's connection does: [`FrameDecoder::feed`] what
/// the socket gave, then [`FrameDecoder::poll`] until `Ok(None)`; no I/O,
/// no clock.
///
/// Memory: it holds the bytes fed and not yet taken as frames, never more.
/// Nothing is allocated from what a header announces: a frame's body
/// over [`Message::max_body`] is refused as soon as its header is in,
/// before its bytes are kept, and a body's decoding allocates at most a
/// few times its limit ([`super::MAX_REQUEST_ALLOC`]). A driver that feeds at most `n` bytes between polls
/// drained to `Ok(None)` holds at most one frame's limit, a header and
/// `n` bytes.
#[derive(Debug)]
pub struct FrameDecoder<M> {
    unread: Unread,
    /// The fatal error met, answered again by every later poll.
    failed: Option<Failed>,
    _message: PhantomData<fn() -> M>,
}

/// A fatal error, kept to be answered again.
#[derive(Debug, Clone, Copy)]
struct Failed {
    id: u64,
    kind: u8,
    len: usize,
    limit: usize,
}

impl<M: Message> Default for FrameDecoder<M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<M: Message> FrameDecoder<M> {
    /// A decoder at the start of a stream of frames (after the preamble).
    pub fn new() -> Self {
        FrameDecoder {
            unread: Unread::default(),
            failed: None,
            _message: PhantomData,
        }
    }

    /// Takes in the stream's next bytes.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.failed.is_some() {
            return;
        }
        self.unread.push(bytes);
    }

    /// Bytes fed and not yet taken as frames.
    pub fn buffered(&self) -> usize {
        self.unread.len()
    }

    /// The next whole frame, `Ok(None)` until more bytes come. An error
    /// that is not [fatal](FrameError::is_fatal) skipped its frame: poll
    /// again for the next. After a fatal one, every poll answers it again.
    pub fn poll(&mut self) -> Result<Option<Frame<M>>, FrameError> {
        if let Some(f) = self.failed {
            return Err(too_large(f));
        }
        let Some(header) = Header::read(self.unread.bytes()) else {
            return Ok(None);
        };
        let Header { len, kind, id } = header;
        let limit = M::max_body(kind);
        if len > limit {
            let failed = Failed {
                id,
                kind,
                len,
                limit,
            };
            self.failed = Some(failed);
            // Nothing more is read: let the bytes go.
            self.unread.free();
            return Err(too_large(failed));
        }
        if self.unread.len() < HEADER_LEN + len {
            return Ok(None);
        }
        let body = &self.unread.take(HEADER_LEN + len)[HEADER_LEN..];
        if !M::is_kind(kind) {
            return Err(FrameError::UnknownKind { id, kind });
        }
        match M::decode_body(kind, body) {
            Ok(message) => Ok(Some(Frame { id, message })),
            Err(error) => Err(FrameError::Body { id, kind, error }),
        }
    }

    /// Says the stream ended, once [`FrameDecoder::poll`] answered
    /// `Ok(None)`: an error if it ended inside a frame (the bytes left are
    /// then that frame's beginning).
    pub fn finish(&self) -> Result<(), FrameError> {
        if let Some(f) = self.failed {
            return Err(too_large(f));
        }
        match self.buffered() {
            0 => Ok(()),
            pending => Err(FrameError::Truncated { pending }),
        }
    }
}

fn too_large(f: Failed) -> FrameError {
    FrameError::TooLarge {
        id: f.id,
        kind: f.kind,
        len: f.len,
        limit: f.limit,
    }
}
