//! The checks of a body's values, field by field.

use locktable::LockId;

use super::bad_request::BadRequest;
use super::limits::{
    MAX_ADDR_BYTES, MAX_DATA_BYTES, MAX_HOLDER_BYTES, MAX_NAME_BYTES, MAX_REQUEST_ID_BYTES,
    MAX_SET_BYTES, MAX_SET_NAMES,
};

/// Checks a lock name: 1 to [`MAX_NAME_BYTES`] bytes.
pub fn validate_name(name: &str) -> Result<(), BadRequest> {
    if name.is_empty() {
        return Err(BadRequest::EmptyName);
    }
    if locktable::is_session_name(name) {
        return Err(BadRequest::NameCannotTravel("is a session's"));
    }
    max_len("name", name, MAX_NAME_BYTES)
}

/// Checks the name of a lock to be granted: [`validate_name`], and none
/// of what a path segment or a listing cannot carry ([`BadRequest::NameCannotTravel`]).
/// Calls on a lock already held check [`validate_name`] only, so that a
/// lock granted before this rule can still be renewed and released.
pub fn validate_new_name(name: &str) -> Result<(), BadRequest> {
    validate_name(name)?;
    if name == "." || name == ".." {
        return Err(BadRequest::NameCannotTravel("is a dot segment"));
    }
    if name.chars().any(char::is_control) {
        return Err(BadRequest::NameCannotTravel("holds a control character"));
    }
    if name.trim() != name {
        return Err(BadRequest::NameCannotTravel(
            "starts or ends with whitespace",
        ));
    }
    Ok(())
}

/// Checks the names of a set: 1 to [`MAX_SET_NAMES`] of them, at most
/// [`MAX_SET_BYTES`] together, each a new lock's name
/// ([`validate_new_name`]) and named once.
pub fn validate_set(names: &[String]) -> Result<(), BadRequest> {
    if names.is_empty() || names.len() > MAX_SET_NAMES {
        return Err(BadRequest::SetSize);
    }
    let bytes: usize = names.iter().map(String::len).sum();
    if bytes > MAX_SET_BYTES {
        return Err(BadRequest::TooLong {
            field: "names",
            len: bytes,
            max: MAX_SET_BYTES,
        });
    }
    let mut seen = std::collections::HashSet::with_capacity(names.len());
    for name in names {
        validate_new_name(name)?;
        if !seen.insert(name.as_str()) {
            return Err(BadRequest::SetRepeats(name.clone()));
        }
    }
    Ok(())
}

/// Checks a holder: at most [`MAX_HOLDER_BYTES`] bytes.
pub fn validate_holder(holder: &str) -> Result<(), BadRequest> {
    max_len("holder", holder, MAX_HOLDER_BYTES)
}

/// Checks lock data: at most [`MAX_DATA_BYTES`] bytes.
pub fn validate_data(data: &str) -> Result<(), BadRequest> {
    max_len("data", data, MAX_DATA_BYTES)
}

/// Checks a request id: 1 to [`MAX_REQUEST_ID_BYTES`] characters of
/// printable ASCII without spaces (what a UUID, a ULID or a counter is).
pub fn validate_request_id(request: &str) -> Result<(), BadRequest> {
    let printable = request.bytes().all(|b| b.is_ascii_graphic());
    if request.is_empty() || request.len() > MAX_REQUEST_ID_BYTES || !printable {
        return Err(BadRequest::BadRequestId);
    }
    Ok(())
}

/// Checks what an acquisition asks to hold: permits from 1 to
/// [`locktable::Kind::MAX_PERMITS`], and not shared besides.
pub fn validate_kind(shared: Option<bool>, permits: Option<u64>) -> Result<(), BadRequest> {
    match (shared, permits) {
        (_, Some(n)) if n == 0 || n > u64::from(locktable::Kind::MAX_PERMITS) => {
            Err(BadRequest::BadPermits)
        }
        (Some(true), Some(_)) => Err(BadRequest::SharedPermits),
        _ => Ok(()),
    }
}

/// Parses a lock id.
pub fn validate_id(id: &str) -> Result<LockId, BadRequest> {
    id.parse().map_err(|_| BadRequest::BadId)
}

/// Checks that `s`, the value of `field`, is at most `max` bytes.
pub(crate) fn max_len(field: &'static str, s: &str, max: usize) -> Result<(), BadRequest> {
    if s.len() > max {
        Err(BadRequest::TooLong {
            field,
            len: s.len(),
            max,
        })
    } else {
        Ok(())
    }
}

/// Checks a member id: 1 or more.
pub fn validate_member_id(id: u64) -> Result<(), BadRequest> {
    if id == 0 {
        return Err(BadRequest::ZeroMemberId);
    }
    Ok(())
}

/// Checks a member's address: `host:port`, with a port from 1 to 65535.
pub fn validate_addr(addr: &str) -> Result<(), BadRequest> {
    max_len("addr", addr, MAX_ADDR_BYTES)?;
    let port = addr
        .rsplit_once(':')
        .map(|(host, port)| (host, port.parse::<u16>()));
    match port {
        Some((host, Ok(port))) if !host.is_empty() && port > 0 && !host.contains('/') => Ok(()),
        _ => Err(BadRequest::BadAddr),
    }
}
