//! The one binary codec: bincode 2 through serde, standard configuration.
//!
//! Used for the log store's records and for every peer RPC body, so the
//! encoding of a type is the same on disk and on the wire; and, by
//! [`encode_fields_into`] and [`decode_fields`], for the bodies of the
//! binary transport's frames ([`crate::wire`]). It lives in this crate, not
//! beside openraft, so the client builds it; `leasehold_raft::codec`
//! re-exports it.
//!
//! Two layouts, one configuration (bincode's standard: variable-length
//! integers, length-prefixed strings and sequences):
//! - [`encode`] / [`decode`] go through serde, for types written for this
//!   codec (log entries, votes, report locks);
//! - [`encode_fields_into`] / [`decode_fields`] go through bincode's own
//!   derive (`bincode::Encode`, `bincode::Decode`), which writes every field
//!   in the order declared whatever its serde attributes say: the API's
//!   JSON types skip absent fields (`skip_serializing_if`), flatten and
//!   untag, which a format without field names cannot read back through
//!   serde.
//!
//! A body too large to hold at once (a member's rebuild report of a million
//! locks) travels as a *chunked stream* ([`ChunkWriter`], [`ChunkReader`]):
//! frames of at most a given size, each its length (4 bytes, little endian)
//! then its body. The first frame carries a header, the next ones items,
//! and the last one how many items came, so a stream cut short at a frame
//! boundary is told from a whole one:
//!
//! ```text
//! frame  = len: u32 LE, body (len bytes, len <= the limit)
//! body   = 0u8, header        the first frame, once (bytes after the
//!                             header's fields are skipped: a newer
//!                             build may append fields)
//!        | 1u8, item, item…   as many as fit in the limit (at least one)
//!        | 2u8, count: u64    the last frame: the items sent
//! ```

use serde::de::DeserializeOwned;
use serde::Serialize;

/// Largest body [`decode`] accepts, a guard against absurd length prefixes.
pub const MAX_DECODE_BYTES: usize = 64 * 1024 * 1024;

/// An encoding or decoding failure.
#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    /// The value could not be encoded.
    #[error("encode: {0}")]
    Encode(#[from] bincode::error::EncodeError),
    /// The bytes are not a valid encoding of the expected type.
    #[error("decode: {0}")]
    Decode(#[from] bincode::error::DecodeError),
    /// A valid value was followed by unread bytes.
    #[error("decode: {0} trailing bytes")]
    TrailingBytes(usize),
    /// A frame of a chunked stream says it is longer than the reader's
    /// limit.
    #[error("decode: a frame of {len} bytes is over the limit of {limit}")]
    FrameTooLarge {
        /// The length the frame announced.
        len: usize,
        /// The reader's limit.
        limit: usize,
    },
    /// One value alone encodes to more than a frame may hold.
    #[error("encode: a value of {len} bytes does not fit in a frame of {limit}")]
    ItemTooLarge {
        /// The value's encoded length (with its frame's kind byte).
        len: usize,
        /// The writer's limit.
        limit: usize,
    },
    /// A chunked stream ended before its last frame.
    #[error("decode: the stream ended before its last frame ({pending} bytes of a frame unread)")]
    Truncated {
        /// Bytes of an incomplete frame left when the stream ended.
        pending: usize,
    },
    /// A frame that does not belong where it came (an unknown kind, items
    /// before the header, anything after the last frame).
    #[error("decode: unexpected frame: {0}")]
    UnexpectedFrame(&'static str),
    /// The last frame counts other than the items that came.
    #[error("decode: the stream said {said} items, {got} came")]
    CountMismatch {
        /// The count in the last frame.
        said: u64,
        /// The items decoded.
        got: u64,
    },
}

impl From<CodecError> for std::io::Error {
    fn from(e: CodecError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidData, e)
    }
}

fn config() -> impl bincode::config::Config {
    bincode::config::standard().with_limit::<MAX_DECODE_BYTES>()
}

/// Encodes `value`.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>, CodecError> {
    Ok(bincode::serde::encode_to_vec(value, config())?)
}

/// Decodes a `T` that must fill `bytes` exactly.
pub fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    let (value, read) = bincode::serde::decode_from_slice(bytes, config())?;
    if read != bytes.len() {
        return Err(CodecError::TrailingBytes(bytes.len() - read));
    }
    Ok(value)
}

/// Decodes a `T` from the start of `bytes`, skipping what follows: fields
/// a newer build appended to a stream's header.
pub fn decode_prefix<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CodecError> {
    Ok(bincode::serde::decode_from_slice(bytes, config())?.0)
}

/// Encodes `value` field by field (its `bincode::Encode`), appending to
/// `out`.
pub fn encode_fields_into<T: bincode::Encode>(
    value: &T,
    out: &mut Vec<u8>,
) -> Result<(), CodecError> {
    bincode::encode_into_std_write(value, out, config())?;
    Ok(())
}

/// Decodes a `T` (its `bincode::Decode`) that must fill `bytes` exactly,
/// allocating at most `LIMIT` bytes for its strings and sequences together:
/// a length prefix claiming more is refused before anything is allocated,
/// so a few bytes can never cost more than `LIMIT`.
pub fn decode_fields<T: bincode::Decode<()>, const LIMIT: usize>(
    bytes: &[u8],
) -> Result<T, CodecError> {
    let config = bincode::config::standard().with_limit::<LIMIT>();
    let (value, read) = bincode::decode_from_slice(bytes, config)?;
    if read != bytes.len() {
        return Err(CodecError::TrailingBytes(bytes.len() - read));
    }
    Ok(value)
}

/// The kind byte that starts a frame's body.
const HEADER: u8 = 0;
const ITEMS: u8 = 1;
const END: u8 = 2;
/// Bytes of a frame's length prefix.
const PREFIX: usize = 4;

/// Writes a chunked stream: a header, then items in frames of at most
/// `limit` bytes, then the count. The frames are kept apart, so each can be
/// sent (and freed) on its own.
#[derive(Debug)]
pub struct ChunkWriter {
    limit: usize,
    frames: Vec<Vec<u8>>,
    /// The items frame being filled: its prefix, kind byte and items.
    open: Vec<u8>,
    items: u64,
}

impl ChunkWriter {
    /// A stream whose first frame carries `header`, with frames of at most
    /// `limit` bytes (prefix not counted).
    pub fn new<H: Serialize + ?Sized>(header: &H, limit: usize) -> Result<Self, CodecError> {
        let mut first = vec![0; PREFIX];
        first.push(HEADER);
        bincode::serde::encode_into_std_write(header, &mut first, config())?;
        let mut writer = ChunkWriter {
            limit,
            frames: Vec::new(),
            open: Vec::new(),
            items: 0,
        };
        writer.close(first)?;
        Ok(writer)
    }

    /// Adds `item`, in the open frame if it fits, else in a new one.
    pub fn push<T: Serialize + ?Sized>(&mut self, item: &T) -> Result<(), CodecError> {
        if self.open.is_empty() {
            self.open.extend_from_slice(&[0; PREFIX]);
            self.open.push(ITEMS);
        }
        let before = self.open.len();
        bincode::serde::encode_into_std_write(item, &mut self.open, config())?;
        if self.open.len() - PREFIX > self.limit {
            // The item with its frame's kind byte.
            let len = self.open.len() - before + 1;
            if len > self.limit {
                self.open.truncate(before);
                return Err(CodecError::ItemTooLarge {
                    len,
                    limit: self.limit,
                });
            }
            // Close the frame without this item, which starts the next.
            let mut next = Vec::with_capacity(self.open.capacity());
            next.extend_from_slice(&[0; PREFIX]);
            next.push(ITEMS);
            next.extend_from_slice(&self.open[before..]);
            self.open.truncate(before);
            let full = std::mem::replace(&mut self.open, next);
            self.close(full)?;
        }
        self.items += 1;
        Ok(())
    }

    /// The frames closed so far, in order, taken out of the writer: a
    /// stream can be sent as it is written.
    pub fn take_closed(&mut self) -> std::vec::Drain<'_, Vec<u8>> {
        self.frames.drain(..)
    }

    /// Closes the stream with its count, and gives its frames in order
    /// (those not taken before).
    pub fn finish(mut self) -> Result<Vec<Vec<u8>>, CodecError> {
        if !self.open.is_empty() {
            let open = std::mem::take(&mut self.open);
            self.close(open)?;
        }
        let mut last = vec![0; PREFIX];
        last.push(END);
        bincode::serde::encode_into_std_write(self.items, &mut last, config())?;
        self.close(last)?;
        Ok(self.frames)
    }

    /// Writes the length into `frame`'s prefix and keeps it.
    fn close(&mut self, mut frame: Vec<u8>) -> Result<(), CodecError> {
        let len = frame.len() - PREFIX;
        if len > self.limit {
            return Err(CodecError::ItemTooLarge {
                len,
                limit: self.limit,
            });
        }
        let prefix = u32::try_from(len).map_err(|_| CodecError::ItemTooLarge {
            len,
            limit: self.limit,
        })?;
        frame[..PREFIX].copy_from_slice(&prefix.to_le_bytes());
        frame.shrink_to_fit();
        self.frames.push(frame);
        Ok(())
    }
}

/// One frame of a chunked stream, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Chunk<H, T> {
    /// The first frame.
    Header(H),
    /// Items, in the order they were written.
    Items(Vec<T>),
}

/// One frame of a chunked stream read by [`ChunkReader::next_frame`]: its
/// items were handed over one by one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<H> {
    /// The first frame.
    Header(H),
    /// A frame of this many items.
    Items(usize),
}

/// Where a [`ChunkReader`] is in its stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Header,
    Items,
    Nothing,
}

/// Reads a chunked stream as its bytes arrive, in pieces of any size: no
/// more than one frame (and the piece that completed it) is held at once.
#[derive(Debug)]
pub struct ChunkReader<H, T> {
    limit: usize,
    unread: Unread,
    expect: Expect,
    items: u64,
    _types: std::marker::PhantomData<fn() -> (H, T)>,
}

impl<H: DeserializeOwned, T: DeserializeOwned> ChunkReader<H, T> {
    /// A reader that refuses frames over `limit` bytes.
    pub fn new(limit: usize) -> Self {
        ChunkReader {
            limit,
            unread: Unread::default(),
            expect: Expect::Header,
            items: 0,
            _types: std::marker::PhantomData,
        }
    }

    /// Takes in the stream's next bytes.
    pub fn push(&mut self, bytes: &[u8]) {
        self.unread.push(bytes);
    }

    /// The next whole frame, or `None` until more bytes come (or after the
    /// last frame). The last frame is checked, not returned.
    pub fn next_chunk(&mut self) -> Result<Option<Chunk<H, T>>, CodecError> {
        let mut items = Vec::new();
        Ok(match self.next_frame(&mut |item| items.push(item))? {
            Some(Frame::Header(header)) => Some(Chunk::Header(header)),
            Some(Frame::Items(_)) => Some(Chunk::Items(items)),
            None => None,
        })
    }

    /// As [`ChunkReader::next_chunk`], each item of an items frame handed
    /// to `item` as it is decoded (no list of the frame's items is made):
    /// the frame is answered as [`Frame::Items`], its count. On an error,
    /// the items of the frame handed before it must be dropped with it.
    pub fn next_frame(&mut self, item: &mut dyn FnMut(T)) -> Result<Option<Frame<H>>, CodecError> {
        loop {
            let unread = self.unread.bytes();
            let Some(prefix) = unread.first_chunk::<PREFIX>() else {
                return Ok(None);
            };
            let len = u32::from_le_bytes(*prefix) as usize;
            if len > self.limit {
                return Err(CodecError::FrameTooLarge {
                    len,
                    limit: self.limit,
                });
            }
            if unread.len() < PREFIX + len {
                return Ok(None);
            }
            let body = &self.unread.take(PREFIX + len)[PREFIX..];
            let Some((&kind, body)) = body.split_first() else {
                return Err(CodecError::UnexpectedFrame("an empty frame"));
            };
            match (kind, self.expect) {
                (_, Expect::Nothing) => {
                    return Err(CodecError::UnexpectedFrame("a frame after the last"))
                }
                (HEADER, Expect::Header) => {
                    self.expect = Expect::Items;
                    // A newer build may append fields to its header.
                    return Ok(Some(Frame::Header(decode_prefix(body)?)));
                }
                (HEADER, _) => return Err(CodecError::UnexpectedFrame("a second header")),
                (_, Expect::Header) => {
                    return Err(CodecError::UnexpectedFrame("a frame before the header"))
                }
                (ITEMS, Expect::Items) => {
                    let count = decode_items(body, item)?;
                    self.items += count as u64;
                    return Ok(Some(Frame::Items(count)));
                }
                (END, Expect::Items) => {
                    let said: u64 = decode(body)?;
                    if said != self.items {
                        return Err(CodecError::CountMismatch {
                            said,
                            got: self.items,
                        });
                    }
                    self.expect = Expect::Nothing;
                    // Anything after the last frame is an error at `finish`.
                    continue;
                }
                _ => return Err(CodecError::UnexpectedFrame("an unknown kind of frame")),
            }
        }
    }

    /// Says the stream ended: an error unless its last frame came and
    /// nothing followed it.
    pub fn finish(&mut self) -> Result<(), CodecError> {
        if self.next_chunk()?.is_some() {
            return Err(CodecError::UnexpectedFrame("a frame unread at the end"));
        }
        let pending = self.unread.len();
        match (self.expect, pending) {
            (Expect::Nothing, 0) => Ok(()),
            (Expect::Nothing, n) => Err(CodecError::TrailingBytes(n)),
            (_, pending) => Err(CodecError::Truncated { pending }),
        }
    }
}

/// The bytes a reader of a stream was fed and has not read yet: the
/// pieces as they came, the bytes read let go once they are half of what
/// is kept (or all of it), so a reader holds what it has not read and
/// little more.
#[derive(Debug, Default)]
pub(crate) struct Unread {
    buf: Vec<u8>,
    /// Where the unread bytes of `buf` start.
    start: usize,
}

impl Unread {
    /// Keeps `bytes` after those unread.
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        if self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start > self.buf.len() / 2 {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The bytes unread.
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// The first `n` unread bytes (there must be as many), marked read.
    pub(crate) fn take(&mut self, n: usize) -> &[u8] {
        let at = self.start;
        self.start += n;
        &self.buf[at..self.start]
    }

    /// How many bytes are unread.
    pub(crate) fn len(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Lets every byte go, its memory too.
    pub(crate) fn free(&mut self) {
        *self = Unread::default();
    }
}

/// The items that fill an items frame's body, one after another, each
/// handed to `each`; how many there were.
fn decode_items<T: DeserializeOwned>(
    mut body: &[u8],
    each: &mut dyn FnMut(T),
) -> Result<usize, CodecError> {
    if body.is_empty() {
        return Err(CodecError::UnexpectedFrame("an items frame without items"));
    }
    let mut count = 0;
    while !body.is_empty() {
        let (item, read) = bincode::serde::decode_from_slice(body, config())?;
        if read == 0 {
            return Err(CodecError::UnexpectedFrame("an item of no bytes"));
        }
        each(item);
        count += 1;
        body = &body[read..];
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_strictness() {
        let v: (u64, String, Option<Vec<u8>>) = (7, "x".into(), Some(vec![1, 2, 3]));
        let bytes = encode(&v).unwrap();
        assert_eq!(decode::<(u64, String, Option<Vec<u8>>)>(&bytes).unwrap(), v);

        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            decode::<(u64, String, Option<Vec<u8>>)>(&longer),
            Err(CodecError::TrailingBytes(1))
        ));
        assert!(decode::<(u64, String, Option<Vec<u8>>)>(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode::<String>(&[0xff, 0xff, 0xff, 0xff]).is_err());
    }

    type Reader = ChunkReader<(u64, String), String>;
    /// The headers and the item frames read.
    type Read = (Vec<(u64, String)>, Vec<Vec<String>>);

    /// Reads `bytes` handed over in pieces of `piece` bytes.
    fn read(bytes: &[u8], piece: usize, limit: usize) -> Result<Read, CodecError> {
        let mut reader = Reader::new(limit);
        let (mut headers, mut chunks) = (Vec::new(), Vec::new());
        for part in bytes.chunks(piece.max(1)) {
            reader.push(part);
            while let Some(chunk) = reader.next_chunk()? {
                match chunk {
                    Chunk::Header(h) => headers.push(h),
                    Chunk::Items(items) => chunks.push(items),
                }
            }
        }
        reader.finish()?;
        Ok((headers, chunks))
    }

    fn items() -> Vec<String> {
        (0..200).map(|i| "x".repeat(i % 37)).collect()
    }

    fn stream(items: &[String], limit: usize) -> Vec<Vec<u8>> {
        let mut writer = ChunkWriter::new(&(7u64, "head".to_string()), limit).unwrap();
        for item in items {
            writer.push(item).unwrap();
        }
        writer.finish().unwrap()
    }

    #[test]
    fn a_header_a_newer_build_appended_fields_to_reads_as_the_fields_known() {
        let newer = (7u64, "head".to_string(), 99u32, "later".to_string());
        let mut writer = ChunkWriter::new(&newer, 100).unwrap();
        for item in items() {
            writer.push(&item).unwrap();
        }
        let bytes = writer.finish().unwrap().concat();
        let (headers, chunks) = read(&bytes, 13, 100).unwrap();
        assert_eq!(headers, vec![(7, "head".to_string())]);
        assert_eq!(chunks.concat(), items());
        assert!(
            decode::<(u64, String)>(&encode(&newer).unwrap()).is_err(),
            "a whole value still must fill its bytes"
        );
    }

    #[test]
    fn a_chunked_stream_keeps_every_frame_within_the_limit_and_reads_back_in_any_pieces() {
        let items = items();
        let frames = stream(&items, 100);
        assert!(frames.len() > 10);
        for frame in &frames {
            assert!(frame.len() <= 100 + PREFIX);
            assert_eq!(
                u32::from_le_bytes(frame[..4].try_into().unwrap()) as usize,
                frame.len() - PREFIX
            );
        }
        let bytes = frames.concat();
        for piece in [1, 3, 7, 64, 1000, bytes.len()] {
            let (headers, chunks) = read(&bytes, piece, 100).unwrap();
            assert_eq!(headers, vec![(7, "head".to_string())]);
            assert!(chunks.iter().all(|c| !c.is_empty()));
            assert_eq!(chunks.concat(), items, "pieces of {piece}");
        }
        // No items: a header and the count.
        let (headers, chunks) = read(&stream(&[], 100).concat(), 5, 100).unwrap();
        assert_eq!((headers.len(), chunks.len()), (1, 0));
    }

    #[test]
    fn a_reader_refuses_frames_over_its_limit_before_reading_them() {
        let bytes = stream(&items(), 100).concat();
        assert!(matches!(
            read(&bytes, 1000, 50),
            Err(CodecError::FrameTooLarge { limit: 50, .. })
        ));
        let mut reader = Reader::new(1 << 20);
        reader.push(&u32::MAX.to_le_bytes());
        assert!(matches!(
            reader.next_chunk(),
            Err(CodecError::FrameTooLarge { len, .. }) if len == u32::MAX as usize
        ));
    }

    #[test]
    fn a_writer_refuses_an_item_larger_than_a_frame() {
        let mut writer = ChunkWriter::new(&(), 100).unwrap();
        writer.push("small").unwrap();
        assert!(matches!(
            writer.push(&"y".repeat(200)),
            Err(CodecError::ItemTooLarge { limit: 100, .. })
        ));
        assert!(matches!(
            ChunkWriter::new(&"z".repeat(200), 100),
            Err(CodecError::ItemTooLarge { .. })
        ));
    }

    #[test]
    fn a_cut_stream_is_truncated_and_a_garbled_one_never_panics() {
        let items = items();
        let bytes = stream(&items, 100).concat();
        for cut in 0..bytes.len() {
            assert!(
                matches!(
                    read(&bytes[..cut], 9, 100),
                    Err(CodecError::Truncated { .. })
                ),
                "cut at {cut}"
            );
        }
        for at in 0..bytes.len() {
            for flip in [0x01, 0x80, 0xFF] {
                let mut garbled = bytes.clone();
                garbled[at] ^= flip;
                if let Ok((_, chunks)) = read(&garbled, 13, 100) {
                    // Only a byte inside an item's text can change unseen.
                    assert_eq!(chunks.concat().len(), items.len(), "{flip:#x} at {at}");
                }
            }
        }
    }

    #[test]
    fn frames_out_of_place_are_refused() {
        let frames = stream(&["a".to_string()], 100);
        let [header, items, end] = &frames[..] else {
            panic!("{} frames", frames.len())
        };
        let cases: [(&str, Vec<&[u8]>); 5] = [
            ("items first", vec![items, header, end]),
            ("two headers", vec![header, header, items, end]),
            ("after the end", vec![header, items, end, items]),
            ("count", vec![header, items, items, end]),
            ("empty frame", vec![header, &[0, 0, 0, 0], end]),
        ];
        for (what, parts) in cases {
            let err = read(&parts.concat(), 1000, 100).expect_err(what);
            assert!(
                matches!(
                    err,
                    CodecError::UnexpectedFrame(_) | CodecError::CountMismatch { said: 1, got: 2 }
                ),
                "{what}: {err}"
            );
        }
        let mut unknown = items.clone();
        unknown[PREFIX] = 9;
        assert!(matches!(
            read(&[header.as_slice(), &unknown, end].concat(), 1000, 100),
            Err(CodecError::UnexpectedFrame(_))
        ));
        let mut longer = frames.concat();
        longer.push(0);
        assert!(matches!(
            read(&longer, 1000, 100),
            Err(CodecError::TrailingBytes(1))
        ));
    }
}
