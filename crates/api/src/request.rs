//! What clients send, and its validation: the one place a request is judged.
//!
//! A body is read by [`read_body`] and its values checked by
//! [`Body::validate`] ([`parse_body`] does both); each refuses with a
//! [`BadRequest`] naming the field and the fault: malformed JSON, a body
//! that is not an object, a missing or mistyped field, a negative,
//! fractional or oversize duration (the reader), an empty or oversize name,
//! an oversize holder or data, an id that is not a ULID (the check).
//! Unknown fields are skipped unread (forward compatibility);
//! `null` for an optional field means it is absent. When a key appears twice
//! the last one counts.

mod bad_request;
mod bodies;
mod limits;
mod read;
mod release;
mod sessions;
mod validate;

pub use bad_request::BadRequest;
pub use bodies::{AcquireBody, AddMemberBody, RenewBody};
pub use limits::{
    DEFAULT_LIST_LIMIT, IDLE_KEPT, IDLE_TIMEOUT, MAX_ADDR_BYTES, MAX_BODY_BYTES, MAX_DATA_BYTES,
    MAX_HOLDER_BYTES, MAX_LIST_LIMIT, MAX_NAME_BYTES, MAX_REQUEST_ID_BYTES, MAX_SET_BYTES,
    MAX_SET_NAMES, MAX_WAIT_MS,
};
pub use read::{parse_body, parse_body_checked, read_body, Body, Field, FieldKind};
pub use release::{validate_release_set, LockRef, ReleaseBody};
pub use sessions::{format_digest, parse_digest, SessionBody, SessionOpenBody};
pub(crate) use validate::max_len;
pub use validate::{
    validate_addr, validate_data, validate_holder, validate_id, validate_member_id, validate_name,
    validate_new_name, validate_request_id, validate_set,
};

#[cfg(test)]
mod tests;
