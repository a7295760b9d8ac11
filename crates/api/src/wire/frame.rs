//! A frame: its header, its limits, its errors, and how one is written.

use crate::codec::CodecError;
use crate::error::{ErrorBody, ErrorCode};

/// Bytes of a frame's header: the body's length (`u32`, little endian),
/// the kind (`u8`), the request id (`u64`, little endian).
pub const HEADER_LEN: usize = 4 + 1 + 8;

/// The largest body of a request frame: the HTTP API's body limit.
pub const MAX_REQUEST_BODY: usize = crate::MAX_BODY_BYTES;

/// The largest body of a member's call ([`super::Request::Peer`]): the
/// HTTP API's body limit, and room for the request's route and headers
/// (token, identity stamp, terms, versions) beside it. A member sends a
/// larger call over HTTP.
pub const MAX_PEER_BODY: usize = crate::MAX_BODY_BYTES + 16 * 1024;

/// The most a member's call's decoding may allocate: four times its limit,
/// as [`MAX_REQUEST_ALLOC`].
pub const MAX_PEER_ALLOC: usize = 4 * MAX_PEER_BODY;

/// The largest body of an answer frame: the codec's limit. An answer is
/// not bounded by the request limit (a listing of
/// [`crate::MAX_LIST_LIMIT`] locks with their data is megabytes); a node
/// answers `too_large` in place of an answer over it.
pub const MAX_ANSWER_BODY: usize = crate::codec::MAX_DECODE_BYTES;

/// The most a request body's decoding may allocate: four times the body
/// limit, as bincode counts it (a value's size in memory: 8 bytes for an
/// integer that took one on the wire, 24 for each string of a list). A
/// length prefix claiming more is refused before anything is allocated.
pub const MAX_REQUEST_ALLOC: usize = 4 * MAX_REQUEST_BODY;

/// The most an answer body's decoding may allocate, as
/// [`MAX_REQUEST_ALLOC`] for requests.
pub const MAX_ANSWER_ALLOC: usize = 4 * MAX_ANSWER_BODY;

/// What a frame carries: one kind of message for each direction
/// ([`super::Request`], [`super::Answer`]).
pub trait Message: Sized {
    /// The largest body a frame of these messages may carry, but for the
    /// kinds [`Message::max_body`] gives another.
    const MAX_BODY: usize;

    /// The largest body a frame of `kind` may carry.
    fn max_body(kind: u8) -> usize {
        let _ = kind;
        Self::MAX_BODY
    }

    /// Whether `kind` is a kind of this message.
    fn is_kind(kind: u8) -> bool;

    /// The kind byte of this message's frame.
    fn kind(&self) -> u8;

    /// Appends the body to `out`.
    fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), CodecError>;

    /// The message of a frame of `kind` (one [`Message::is_kind`] accepts)
    /// with `body`.
    fn decode_body(kind: u8, body: &[u8]) -> Result<Self, CodecError>;
}

/// One frame: a message, and the request id it carries (a request's,
/// chosen by the caller; an answer's, the request's it answers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame<M> {
    /// The request id.
    pub id: u64,
    /// The message.
    pub message: M,
}

/// A frame that could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The frame's body is longer than its direction's limit. Fatal: the
    /// frame is not read (nor its body buffered), and the stream cannot be
    /// followed past it.
    #[error("a frame (kind {kind:#04x}, id {id}) of {len} bytes is over the limit of {limit}")]
    TooLarge {
        /// Its request id.
        id: u64,
        /// Its kind.
        kind: u8,
        /// The body length it announced (or, writing, had).
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// The frame's kind is none this version knows. Not fatal: the whole
    /// frame was read and skipped, and the next one follows.
    #[error("a frame of unknown kind {kind:#04x} (id {id})")]
    UnknownKind {
        /// Its request id.
        id: u64,
        /// Its kind.
        kind: u8,
    },
    /// The frame's body is not a valid encoding of its kind's message (or,
    /// writing, could not be encoded). Not fatal: the frame was read whole
    /// and skipped.
    #[error("the body of a frame (kind {kind:#04x}, id {id}): {error}")]
    Body {
        /// Its request id.
        id: u64,
        /// Its kind.
        kind: u8,
        /// Why it could not be read.
        error: CodecError,
    },
    /// The stream ended inside a frame (or inside its header).
    #[error("the stream ended inside a frame ({pending} bytes of it came)")]
    Truncated {
        /// The bytes of the incomplete frame that came.
        pending: usize,
    },
}

impl FrameError {
    /// Whether the connection cannot go on: no frame after this one can be
    /// read.
    pub fn is_fatal(&self) -> bool {
        matches!(
            self,
            FrameError::TooLarge { .. } | FrameError::Truncated { .. }
        )
    }

    /// The request id of the frame at fault, when its header was read.
    pub fn id(&self) -> Option<u64> {
        match self {
            FrameError::TooLarge { id, .. }
            | FrameError::UnknownKind { id, .. }
            | FrameError::Body { id, .. } => Some(*id),
            FrameError::Truncated { .. } => None,
        }
    }

    /// What a node answers a request frame that failed so, as the HTTP API
    /// answers the same fault: `too_large` (then it closes the
    /// connection), `bad_request` for an unknown kind or a body it cannot
    /// read. A cut-off frame has no one to answer.
    pub fn answer(&self) -> Option<ErrorBody> {
        let code = match self {
            FrameError::TooLarge { .. } => ErrorCode::TooLarge,
            FrameError::UnknownKind { .. } | FrameError::Body { .. } => ErrorCode::BadRequest,
            FrameError::Truncated { .. } => return None,
        };
        Some(ErrorBody::new(code, self.to_string()))
    }
}

/// Appends the frame of `message` with request id `id` to `out`. A body
/// over [`Message::max_body`] is refused (`out` is left as it was), so a
/// sender never writes what its reader must refuse.
pub fn encode_frame<M: Message>(id: u64, message: &M, out: &mut Vec<u8>) -> Result<(), FrameError> {
    let start = out.len();
    let kind = message.kind();
    out.extend_from_slice(&[0; 4]);
    out.push(kind);
    out.extend_from_slice(&id.to_le_bytes());
    if let Err(error) = message.encode_body(out) {
        out.truncate(start);
        return Err(FrameError::Body { id, kind, error });
    }
    let len = out.len() - start - HEADER_LEN;
    let limit = M::max_body(kind);
    let fits = u32::try_from(len).ok().filter(|_| len <= limit);
    let Some(prefix) = fits else {
        out.truncate(start);
        return Err(FrameError::TooLarge {
            id,
            kind,
            len,
            limit,
        });
    };
    out[start..start + 4].copy_from_slice(&prefix.to_le_bytes());
    Ok(())
}

/// A frame's header, read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Header {
    pub(super) len: usize,
    pub(super) kind: u8,
    pub(super) id: u64,
}

impl Header {
    /// The header at the start of `bytes`, if it came whole.
    pub(super) fn read(bytes: &[u8]) -> Option<Header> {
        let header = bytes.first_chunk::<HEADER_LEN>()?;
        let (len, rest) = header.split_at(4);
        let (kind, id) = rest.split_at(1);
        Some(Header {
            len: u32::from_le_bytes(len.try_into().ok()?) as usize,
            kind: kind[0],
            id: u64::from_le_bytes(id.try_into().ok()?),
        })
    }
}
