//! The binary transport's format (docs/design.md, "The binary transport:
//! frames"): the preamble that tells a connection from HTTP on the node's
//! one port, then frames, each a length, a kind, a request id and a body:
//! the HTTP API's own values ([`Request`], [`Answer`]), laid out by the
//! [codec](crate::codec). Pure: no I/O, no clock, no runtime.
//!
//! - [`preamble()`]: [`MAGIC`] and a version; [`sniff`] tells a
//!   connection from HTTP; the version each side speaks ([`choose`],
//!   [`accept`]).
//! - [`encode_frame`] writes a frame; a [`FrameDecoder`] reads them from
//!   bytes as they arrive, a [`FrameError`] for each fault.
//! - [`Request`] and [`Answer`]: every call and answer, under its
//!   [`kind`] byte.
//!
//! ```
//! use leasehold_api::wire::{encode_frame, Answer, FrameDecoder, Request};
//! use leasehold_api::RenewBody;
//!
//! let mut bytes = Vec::new();
//! encode_frame(7, &Request::Renew(RenewBody::default()), &mut bytes).unwrap();
//! encode_frame(8, &Request::Ping, &mut bytes).unwrap();
//! let mut node = FrameDecoder::<Request>::new();
//! node.feed(&bytes[..10]);
//! assert!(node.poll().unwrap().is_none()); // not all of the first frame yet
//! node.feed(&bytes[10..]);
//! assert_eq!(node.poll().unwrap().unwrap().id, 7);
//! assert_eq!(node.poll().unwrap().unwrap().message, Request::Ping);
//! assert!(node.poll().unwrap().is_none());
//! node.finish().unwrap();
//! # let _ = Answer::Done;
//! ```

mod decoder;
mod frame;
mod layout;
mod message;
mod preamble;
#[cfg(test)]
mod tests;

pub use decoder::FrameDecoder;
pub use frame::{
    encode_frame, Frame, FrameError, Message, HEADER_LEN, MAX_ANSWER_ALLOC, MAX_ANSWER_BODY,
    MAX_PEER_ALLOC, MAX_PEER_BODY, MAX_REQUEST_ALLOC, MAX_REQUEST_BODY,
};
pub use layout::MAX_NESTING;
pub use message::{
    header_map, kind, peer_headers, Answer, GetQuery, PeerCall, PeerReply, Request, Token, View,
};
pub use preamble::{
    accept, choose, preamble, read_preamble, sniff, PreambleError, Sniff, Version, ALPN, MAGIC,
    NONE, OLDEST, PEER_CALLS, PREAMBLE_LEN, SPEAKS,
};
