//! The body layout of the two types a derive cannot lay out:
//! [`LockView`], whose `others` nest (bounded here, as JSON's reader
//! bounds nesting), and [`ErrorBody`], whose code travels as its text and
//! status, so a code a newer node added reads by its status, as over HTTP.
//! Every other type a frame carries derives `bincode::Encode` and
//! `bincode::Decode`: its fields in the order declared.
//!
//! Each impl names every field (a destructuring to write, a struct literal
//! to read): a field added to either type fails to compile here until its
//! place in the layout is written (and [`super::SPEAKS`] raised).

use bincode::de::Decoder;
use bincode::enc::Encoder;
use bincode::error::{DecodeError, EncodeError};
use bincode::{Decode, Encode};

use crate::error::{ErrorBody, ErrorCode};
use crate::lock::LockView;

/// How deep a lock's `others` may nest in a body (the node sends one
/// level; a lock's others have none).
pub const MAX_NESTING: usize = 8;

impl Encode for LockView {
    fn encode<E: Encoder>(&self, e: &mut E) -> Result<(), EncodeError> {
        let LockView {
            name,
            id,
            node,
            holder,
            fence,
            lease_ms,
            ttl_ms,
            acquired_at,
            expires_at,
            data,
            waiters,
            queue,
            mode,
            permits,
            others,
            lock_delay_ms,
            delay_left_ms,
            session,
        } = self;
        name.encode(e)?;
        id.encode(e)?;
        node.encode(e)?;
        holder.encode(e)?;
        fence.encode(e)?;
        lease_ms.encode(e)?;
        ttl_ms.encode(e)?;
        acquired_at.encode(e)?;
        expires_at.encode(e)?;
        data.encode(e)?;
        waiters.encode(e)?;
        queue.encode(e)?;
        mode.encode(e)?;
        permits.encode(e)?;
        others.encode(e)?;
        lock_delay_ms.encode(e)?;
        delay_left_ms.encode(e)?;
        session.encode(e)
    }
}

impl<Context> Decode<Context> for LockView {
    fn decode<D: Decoder<Context = Context>>(d: &mut D) -> Result<Self, DecodeError> {
        decode_view(d, 0)
    }
}
bincode::impl_borrow_decode!(LockView);

/// A lock whose `others` nest `depth` deep already.
fn decode_view<D: Decoder>(d: &mut D, depth: usize) -> Result<LockView, DecodeError> {
    Ok(LockView {
        name: Decode::decode(d)?,
        id: Decode::decode(d)?,
        node: Decode::decode(d)?,
        holder: Decode::decode(d)?,
        fence: Decode::decode(d)?,
        lease_ms: Decode::decode(d)?,
        ttl_ms: Decode::decode(d)?,
        acquired_at: Decode::decode(d)?,
        expires_at: Decode::decode(d)?,
        data: Decode::decode(d)?,
        waiters: Decode::decode(d)?,
        queue: Decode::decode(d)?,
        mode: Decode::decode(d)?,
        permits: Decode::decode(d)?,
        others: decode_others(d, depth + 1)?,
        lock_delay_ms: Decode::decode(d)?,
        delay_left_ms: Decode::decode(d)?,
        session: Decode::decode(d)?,
    })
}

/// A lock's `others` at nesting `depth`, laid out as any sequence: a
/// length, then the items.
fn decode_others<D: Decoder>(d: &mut D, depth: usize) -> Result<Vec<LockView>, DecodeError> {
    let len = u64::decode(d)?;
    let len = usize::try_from(len).map_err(|_| DecodeError::OutsideUsizeRange(len))?;
    if len > 0 && depth > MAX_NESTING {
        return Err(DecodeError::Other("a lock's others nest too deep"));
    }
    // Claimed before anything is allocated, as bincode's own sequences do.
    d.claim_container_read::<LockView>(len)?;
    let mut others = Vec::with_capacity(len);
    for _ in 0..len {
        d.unclaim_bytes_read(std::mem::size_of::<LockView>());
        others.push(decode_view(d, depth)?);
    }
    Ok(others)
}

impl Encode for ErrorBody {
    fn encode<E: Encoder>(&self, e: &mut E) -> Result<(), EncodeError> {
        // `awaited` is for HTTP: frames name the waiting requests in the
        // message.
        let ErrorBody {
            error,
            message,
            lock,
            awaited: _,
        } = self;
        error.as_str().encode(e)?;
        error.http_status().encode(e)?;
        message.encode(e)?;
        lock.encode(e)
    }
}

impl<Context> Decode<Context> for ErrorBody {
    fn decode<D: Decoder<Context = Context>>(d: &mut D) -> Result<Self, DecodeError> {
        let code = String::decode(d)?;
        let status = u16::decode(d)?;
        let message = String::decode(d)?;
        let lock = Decode::decode(d)?;
        Ok(match ErrorCode::parse(&code) {
            Some(error) => ErrorBody {
                lock,
                ..ErrorBody::new(error, message)
            },
            None => ErrorBody {
                lock,
                ..ErrorBody::unknown(&code, status, &message)
            },
        })
    }
}
bincode::impl_borrow_decode!(ErrorBody);
