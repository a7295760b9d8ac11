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

use std::time::Duration;

use locktable::LockId;
use serde::de::{
    DeserializeOwned, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Longest `name`, in bytes of UTF-8.
pub const MAX_NAME_BYTES: usize = 512;
/// Longest `holder`, in bytes of UTF-8.
pub const MAX_HOLDER_BYTES: usize = 256;
/// Longest `data`, in bytes of UTF-8.
pub const MAX_DATA_BYTES: usize = 4096;
/// Longest `request_id`, in bytes.
pub const MAX_REQUEST_ID_BYTES: usize = 128;
/// Largest request body the server reads; a larger one is answered `413
/// too_large`.
///
/// 64 KiB: JSON escaping can make a field up to six times its bytes
/// (`\u0000`), so a body whose name, holder and data are all at their limits
/// and fully escaped (about 29 KiB) still fits, with room for whitespace.
pub const MAX_BODY_BYTES: usize = 64 * 1024;
/// Longest wait an acquire is given, in milliseconds: 10 minutes, the seed's
/// longest lease. A longer `wait_ms` is clamped to it, not refused.
pub const MAX_WAIT_MS: u64 = 600_000;
/// How long a node keeps a connection open without a whole request head
/// (from its start, or its last answer) or a body it waits for; an
/// embedded node may set its own.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a client keeps an idle connection to a node: well under
/// [`IDLE_TIMEOUT`], so it never sends a request on one the node is
/// closing.
pub const IDLE_KEPT: Duration = Duration::from_secs(20);
const _: () = assert!(IDLE_KEPT.as_secs() + 5 <= IDLE_TIMEOUT.as_secs());
/// Locks listed when the query names no `limit`.
pub const DEFAULT_LIST_LIMIT: usize = 1000;
/// Most locks one listing returns; a larger `limit` is clamped to it.
pub const MAX_LIST_LIMIT: usize = 10_000;

/// A request refused: the `400 bad_request` message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BadRequest {
    /// The body is not JSON.
    #[error("malformed JSON: {0}")]
    Malformed(String),
    /// The body is JSON but not an object.
    #[error("the body must be a JSON object")]
    NotAnObject,
    /// A required field is absent (or null).
    #[error("missing field `{0}`")]
    Missing(&'static str),
    /// A field has the wrong JSON type.
    #[error("field `{field}` must be {expected}")]
    WrongType {
        /// The field.
        field: &'static str,
        /// What it must be, e.g. "a string".
        expected: &'static str,
    },
    /// A duration is negative.
    #[error("field `{0}` must not be negative")]
    Negative(&'static str),
    /// A duration or id is not a JSON integer (a fraction, an exponent,
    /// `1.0`).
    #[error("field `{0}` must be an integer{unit}", unit = if *.0 == "id" { "" } else { " number of milliseconds" })]
    NotInteger(&'static str),
    /// A duration or count does not fit in 64 bits.
    #[error("field `{0}` does not fit in 64 bits")]
    TooBig(&'static str),
    /// The name is empty.
    #[error("field `name` must not be empty")]
    EmptyName,
    /// A new lock's name that cannot travel as one path segment, or be
    /// told apart from another in a listing: `.`, `..`, a control
    /// character, leading or trailing whitespace.
    #[error("field `name` {0}: such a lock could not be read or released by name")]
    NameCannotTravel(&'static str),
    /// A string is over its limit.
    #[error("field `{field}` is {len} bytes, more than the {max} allowed")]
    TooLong {
        /// The field.
        field: &'static str,
        /// Its length in bytes.
        len: usize,
        /// The most allowed.
        max: usize,
    },
    /// A member id of 0.
    #[error("field `id` must be a member id of 1 or more")]
    ZeroMemberId,
    /// A member's address is not `host:port`.
    #[error("field `addr` must be host:port, with a port from 1 to 65535")]
    BadAddr,
    /// The id is not a ULID.
    #[error("field `id` is not a lock id (26 characters of Crockford base32 expected)")]
    BadId,
    /// A request id that is empty or holds a character outside printable
    /// ASCII.
    #[error("field `request_id` must be 1 to 128 characters of printable ASCII, no spaces")]
    BadRequestId,
    /// A query string parameter is malformed.
    #[error("query parameter `{field}`: {problem}")]
    BadQuery {
        /// The parameter, or "query" for the string as a whole.
        field: &'static str,
        /// What is wrong.
        problem: &'static str,
    },
    /// Anything else serde refused (a backstop; the checks above come first).
    #[error("invalid body: {0}")]
    Invalid(String),
}

/// The JSON type a field must have.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum FieldKind {
    /// A string.
    Str,
    /// Integer milliseconds: a JSON integer from 0 to `u64::MAX`.
    Millis,
    /// A member id: a JSON integer from 0 to `u64::MAX` (0 is refused
    /// when the body is validated).
    MemberId,
}

/// One field of a body, as [`parse_body`] checks it before serde reads it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// The JSON key.
    pub name: &'static str,
    /// Its type.
    pub kind: FieldKind,
    /// Whether it must be present and not null.
    pub required: bool,
}

const fn field(name: &'static str, kind: FieldKind, required: bool) -> Field {
    Field {
        name,
        kind,
        required,
    }
}

/// A request body [`read_body`] can read: its fields, and the checks of
/// their values.
pub trait Body: DeserializeOwned {
    /// The fields, checked for presence and type in this order.
    const FIELDS: &'static [Field];
    /// The checks of the values, once the types are right.
    fn validate(&self) -> Result<(), BadRequest>;
}

/// Reads a request body and checks its values: [`read_body`], then
/// [`Body::validate`].
pub fn parse_body<T: Body>(bytes: &[u8]) -> Result<T, BadRequest> {
    let body: T = read_body(bytes)?;
    body.validate()?;
    Ok(body)
}

/// Reads a request body: JSON, of the right shape. Its values are left to
/// [`Body::validate`], which the node runs on every request, however it
/// came.
///
/// The server checks the size ([`MAX_BODY_BYTES`]) before calling this.
///
/// A well-formed object is read in one pass straight into `T`; anything
/// serde refuses is read again field by field (as [`parse_body_checked`]
/// does) for the message naming the field. The one pass accepts only what
/// the checked path accepts (serde's derived reader takes strings for
/// strings and unsigned 64-bit integers for milliseconds, reads `-0` as a
/// float, and refuses a repeated key, which the checked path then reads
/// last-wins); a test holds the two to the same answers.
pub fn read_body<T: Body>(bytes: &[u8]) -> Result<T, BadRequest> {
    // serde would also read a struct from an array: only objects go first.
    let object = bytes
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
        == Some(&b'{');
    if object {
        if let Ok(body) = serde_json::from_slice::<T>(bytes) {
            return Ok(body);
        }
    }
    read_body_checked(bytes)
}

/// Reads a request body field by field, and checks its values: the path
/// that names what is wrong. Fields the body type does not name are
/// skipped unread, as serde's derived reader skips them.
pub fn parse_body_checked<T: Body>(bytes: &[u8]) -> Result<T, BadRequest> {
    let body: T = read_body_checked(bytes)?;
    body.validate()?;
    Ok(body)
}

/// [`parse_body_checked`] without the check of the values.
fn read_body_checked<T: Body>(bytes: &[u8]) -> Result<T, BadRequest> {
    let mut reader = serde_json::Deserializer::from_slice(bytes);
    let top = TopLevel(T::FIELDS)
        .deserialize(&mut reader)
        .and_then(|top| reader.end().map(|()| top))
        .map_err(|e| BadRequest::Malformed(e.to_string()))?;
    let Some(map) = top else {
        return Err(BadRequest::NotAnObject);
    };
    check_fields(&map, T::FIELDS)?;
    serde_json::from_value(Value::Object(map)).map_err(|e| BadRequest::Invalid(e.to_string()))
}

/// Reads a body's top level: the values of the named fields (the last of a
/// repeated key) if it is an object, `None` if it is anything else.
struct TopLevel(&'static [Field]);

impl<'de> DeserializeSeed<'de> for TopLevel {
    type Value = Option<Map<String, Value>>;

    fn deserialize<D: Deserializer<'de>>(self, reader: D) -> Result<Self::Value, D::Error> {
        reader.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for TopLevel {
    type Value = Option<Map<String, Value>>;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut members: A) -> Result<Self::Value, A::Error> {
        let mut known = Map::new();
        while let Some(key) = members.next_key::<String>()? {
            if self.0.iter().any(|f| f.name == key) {
                let value = members.next_value::<Value>()?;
                known.insert(key, value);
            } else {
                members.next_value::<IgnoredAny>()?;
            }
        }
        Ok(Some(known))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Self::Value, A::Error> {
        while items.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
}

fn check_fields(map: &Map<String, Value>, fields: &[Field]) -> Result<(), BadRequest> {
    for f in fields {
        match map.get(f.name) {
            None | Some(Value::Null) if f.required => return Err(BadRequest::Missing(f.name)),
            None | Some(Value::Null) => {}
            Some(v) => check_kind(f, v)?,
        }
    }
    Ok(())
}

fn check_kind(f: &Field, v: &Value) -> Result<(), BadRequest> {
    match f.kind {
        FieldKind::Str if v.is_string() => Ok(()),
        FieldKind::Str => Err(BadRequest::WrongType {
            field: f.name,
            expected: "a string",
        }),
        FieldKind::Millis | FieldKind::MemberId => {
            let Value::Number(n) = v else {
                return Err(BadRequest::WrongType {
                    field: f.name,
                    expected: match f.kind {
                        FieldKind::MemberId => "an integer member id",
                        _ => "an integer number of milliseconds",
                    },
                });
            };
            if n.is_u64() {
                Ok(())
            } else if n.is_i64() {
                Err(BadRequest::Negative(f.name))
            } else {
                // A float, or an integer too large for i64/u64 (serde_json
                // reads those as floats).
                let x = n.as_f64().unwrap_or(f64::NAN);
                let integral = x.is_finite() && x.fract() == 0.0;
                let text = n.to_string();
                let written_as_integer = !text.contains(['.', 'e', 'E']);
                // serde_json reads `-0` as -0.0: negative too.
                if x.is_sign_negative() {
                    Err(BadRequest::Negative(f.name))
                } else if written_as_integer || (integral && x >= 18_446_744_073_709_551_616.0) {
                    Err(BadRequest::TooBig(f.name))
                } else {
                    Err(BadRequest::NotInteger(f.name))
                }
            }
        }
    }
}

/// Checks a lock name: 1 to [`MAX_NAME_BYTES`] bytes.
pub fn validate_name(name: &str) -> Result<(), BadRequest> {
    if name.is_empty() {
        return Err(BadRequest::EmptyName);
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

/// Parses a lock id.
pub fn validate_id(id: &str) -> Result<LockId, BadRequest> {
    id.parse().map_err(|_| BadRequest::BadId)
}

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

fn ms(v: Option<u64>) -> Option<Duration> {
    v.map(Duration::from_millis)
}

/// `POST /v1/locks/acquire`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AcquireBody {
    /// The name to lock.
    pub name: String,
    /// Who asks, for the reader of a listing; absent means "".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// The lease asked for, in milliseconds; absent or 0 means the node's
    /// default, longer than its maximum is clamped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
    /// How long to wait for a lock held by another, in milliseconds; absent
    /// or 0 fails at once, longer than [`MAX_WAIT_MS`] is clamped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_ms: Option<u64>,
    /// Data to keep with the lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// The caller's name for this acquisition, the same on each retry of
    /// it: a retry of a call that was granted is answered with that grant
    /// (renewed) instead of `409 held` against the caller's own lock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl AcquireBody {
    /// The holder, "" when absent.
    pub fn holder(&self) -> &str {
        self.holder.as_deref().unwrap_or("")
    }

    /// The lease asked for, for [`locktable::LeaseRule::lease`] to default and clamp.
    pub fn lease(&self) -> Option<Duration> {
        ms(self.lease_ms)
    }

    /// The wait, clamped to [`MAX_WAIT_MS`]; zero when absent.
    pub fn wait(&self) -> Duration {
        Duration::from_millis(self.wait_ms.unwrap_or(0).min(MAX_WAIT_MS))
    }
}

impl Body for AcquireBody {
    const FIELDS: &'static [Field] = &[
        field("name", FieldKind::Str, true),
        field("holder", FieldKind::Str, false),
        field("lease_ms", FieldKind::Millis, false),
        field("wait_ms", FieldKind::Millis, false),
        field("data", FieldKind::Str, false),
        field("request_id", FieldKind::Str, false),
    ];

    fn validate(&self) -> Result<(), BadRequest> {
        validate_new_name(&self.name)?;
        validate_holder(self.holder())?;
        if let Some(data) = &self.data {
            validate_data(data)?;
        }
        if let Some(request) = &self.request_id {
            validate_request_id(request)?;
        }
        Ok(())
    }
}

/// `POST /v1/locks/release`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseBody {
    /// The name locked.
    pub name: String,
    /// The grant's id.
    pub id: String,
}

impl ReleaseBody {
    /// The id, parsed.
    pub fn lock_id(&self) -> Result<LockId, BadRequest> {
        validate_id(&self.id)
    }
}

impl Body for ReleaseBody {
    const FIELDS: &'static [Field] = &[
        field("name", FieldKind::Str, true),
        field("id", FieldKind::Str, true),
    ];

    fn validate(&self) -> Result<(), BadRequest> {
        validate_name(&self.name)?;
        validate_id(&self.id).map(drop)
    }
}

/// `POST /v1/locks/renew`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenewBody {
    /// The name locked.
    pub name: String,
    /// The grant's id.
    pub id: String,
    /// The new lease, in milliseconds; absent means the lease the lock had,
    /// 0 the node's default; longer than its maximum is clamped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ms: Option<u64>,
    /// New data for the lock in place of what it kept (an election's
    /// leader proclaiming a new value); absent keeps the data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
}

impl RenewBody {
    /// The id, parsed.
    pub fn lock_id(&self) -> Result<LockId, BadRequest> {
        validate_id(&self.id)
    }

    /// The lease asked for, for [`locktable::LeaseRule::lease`] to default and clamp.
    pub fn lease(&self) -> Option<Duration> {
        ms(self.lease_ms)
    }
}

impl Body for RenewBody {
    const FIELDS: &'static [Field] = &[
        field("name", FieldKind::Str, true),
        field("id", FieldKind::Str, true),
        field("lease_ms", FieldKind::Millis, false),
        field("data", FieldKind::Str, false),
    ];

    fn validate(&self) -> Result<(), BadRequest> {
        validate_name(&self.name)?;
        if let Some(data) = &self.data {
            validate_data(data)?;
        }
        validate_id(&self.id).map(drop)
    }
}

/// `POST /v1/cluster/members`: a member to add.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddMemberBody {
    /// Its id: not a member's (one removed may be added again).
    pub id: u64,
    /// Where the members reach it, `host:port`.
    pub addr: String,
    /// Its data directory's id (32 hex digits), as the node itself showed
    /// it in its join: set by the member the join came to, never taken
    /// from an operator's request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub store: Option<String>,
}

/// The most bytes of a member's address.
pub const MAX_ADDR_BYTES: usize = 256;

impl Body for AddMemberBody {
    const FIELDS: &'static [Field] = &[
        field("id", FieldKind::MemberId, true),
        field("addr", FieldKind::Str, true),
        field("store", FieldKind::Str, false),
    ];

    fn validate(&self) -> Result<(), BadRequest> {
        validate_member_id(self.id)?;
        validate_addr(&self.addr)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn acquire(json: &str) -> Result<AcquireBody, BadRequest> {
        parse_body(json.as_bytes())
    }

    fn refused(json: &str) -> (BadRequest, String) {
        let e = acquire(json).expect_err(json);
        let msg = e.to_string();
        (e, msg)
    }

    #[test]
    fn a_good_acquire() {
        let b = acquire(
            r#"{"name":"jobs/42","holder":"w","lease_ms":5000,"wait_ms":0,"data":"d","future":1}"#,
        )
        .unwrap();
        assert_eq!(b.name, "jobs/42");
        assert_eq!(b.holder(), "w");
        assert_eq!(b.lease(), Some(Duration::from_secs(5)));
        assert_eq!(b.wait(), Duration::ZERO);
        let min = acquire(r#"{"name":"a","holder":null,"lease_ms":null}"#).unwrap();
        assert_eq!(
            (min.holder(), min.lease(), min.wait()),
            ("", None, Duration::ZERO)
        );
        let long = acquire(r#"{"name":"a","wait_ms":18446744073709551615}"#).unwrap();
        assert_eq!(long.wait(), Duration::from_millis(MAX_WAIT_MS));
        // The serialized form leaves absent fields out and reads back.
        let text = serde_json::to_string(&min).unwrap();
        assert_eq!(text, r#"{"name":"a"}"#);
    }

    /// A new lock's name must travel as one path segment and show as one
    /// row: dot segments, control characters and edge whitespace are
    /// refused at acquire; a held lock's calls check only the length, so
    /// that one granted before the rule is still renewed and released.
    #[test]
    fn names_that_cannot_travel_are_refused_at_acquire_only() {
        for name in [".", "..", "a\nb", "a\u{7}", " a", "a ", "\ta"] {
            let json = serde_json::json!({ "name": name }).to_string();
            let (e, msg) = refused(&json);
            assert!(
                matches!(e, BadRequest::NameCannotTravel(_)),
                "{name:?}: {e:?}"
            );
            assert!(msg.contains("could not be read or released"), "{msg}");
            let renew = serde_json::json!({ "name": name, "id": "00000000000000000000000001" });
            let renew: RenewBody = parse_body(renew.to_string().as_bytes()).unwrap();
            assert_eq!(renew.name, name);
        }
        for fine in ["a.b", "...", "jobs/42", "a b", "ünï"] {
            let json = serde_json::json!({ "name": fine }).to_string();
            assert_eq!(acquire(&json).unwrap().name, fine);
        }
    }

    #[test]
    fn malformed_and_not_objects() {
        for bad in ["", "{", "{\"name\":", "nope", "{\"name\":\"a\",}", "\u{1}"] {
            assert!(
                matches!(refused(bad).0, BadRequest::Malformed(_)),
                "{bad:?}"
            );
            assert!(refused(bad).1.starts_with("malformed JSON"));
        }
        for bad in ["[]", "\"a\"", "1", "null"] {
            assert_eq!(refused(bad).0, BadRequest::NotAnObject);
        }
        // Lone surrogates are not UTF-8.
        assert!(matches!(
            refused(r#"{"name":"\ud800"}"#).0,
            BadRequest::Malformed(_)
        ));
    }

    #[test]
    fn missing_and_wrong_types_name_the_field() {
        assert_eq!(refused("{}").0, BadRequest::Missing("name"));
        assert_eq!(refused(r#"{"name":null}"#).1, "missing field `name`");
        for (json, field) in [
            (r#"{"name":1}"#, "name"),
            (r#"{"name":["a"]}"#, "name"),
            (r#"{"name":"a","holder":7}"#, "holder"),
            (r#"{"name":"a","data":{}}"#, "data"),
            (r#"{"name":"a","lease_ms":"5"}"#, "lease_ms"),
            (r#"{"name":"a","wait_ms":true}"#, "wait_ms"),
        ] {
            let (e, msg) = refused(json);
            assert!(matches!(e, BadRequest::WrongType { .. }), "{json}");
            assert!(msg.contains(&format!("`{field}`")), "{msg}");
        }
    }

    #[test]
    fn bad_durations_name_the_field_and_fault() {
        for (json, want) in [
            (
                r#"{"name":"a","lease_ms":-1}"#,
                BadRequest::Negative("lease_ms"),
            ),
            (
                r#"{"name":"a","wait_ms":-1.5}"#,
                BadRequest::Negative("wait_ms"),
            ),
            (
                r#"{"name":"a","lease_ms":-99999999999999999999}"#,
                BadRequest::Negative("lease_ms"),
            ),
            (
                r#"{"name":"a","lease_ms":1.5}"#,
                BadRequest::NotInteger("lease_ms"),
            ),
            (
                r#"{"name":"a","lease_ms":1.0}"#,
                BadRequest::NotInteger("lease_ms"),
            ),
            (
                r#"{"name":"a","wait_ms":1e3}"#,
                BadRequest::NotInteger("wait_ms"),
            ),
            (
                r#"{"name":"a","lease_ms":18446744073709551616}"#,
                BadRequest::TooBig("lease_ms"),
            ),
            (
                r#"{"name":"a","wait_ms":99999999999999999999999999999}"#,
                BadRequest::TooBig("wait_ms"),
            ),
            (
                r#"{"name":"a","wait_ms":1e300}"#,
                BadRequest::TooBig("wait_ms"),
            ),
        ] {
            assert_eq!(refused(json).0, want, "{json}");
        }
        assert_eq!(
            refused(r#"{"name":"a","lease_ms":-1}"#).1,
            "field `lease_ms` must not be negative"
        );
        assert_eq!(
            refused(r#"{"name":"a","lease_ms":18446744073709551616}"#).1,
            "field `lease_ms` does not fit in 64 bits"
        );
        assert_eq!(
            refused(r#"{"name":"a","lease_ms":1.5}"#).1,
            "field `lease_ms` must be an integer number of milliseconds"
        );
        // The edge that fits.
        let b = acquire(r#"{"name":"a","lease_ms":18446744073709551615}"#).unwrap();
        assert_eq!(b.lease_ms, Some(u64::MAX));
        // serde_json cannot tell `-0` from -0.0; both are refused.
        assert_eq!(
            refused(r#"{"name":"a","lease_ms":-0}"#).0,
            BadRequest::Negative("lease_ms")
        );
    }

    #[test]
    fn sizes() {
        assert_eq!(refused(r#"{"name":""}"#).0, BadRequest::EmptyName);
        let ok = format!(r#"{{"name":"{}"}}"#, "n".repeat(MAX_NAME_BYTES));
        assert!(acquire(&ok).is_ok());
        // 171 three-byte characters: 513 bytes.
        let multi = format!(r#"{{"name":"{}"}}"#, "€".repeat(171));
        assert_eq!(
            refused(&multi).0,
            BadRequest::TooLong {
                field: "name",
                len: 513,
                max: MAX_NAME_BYTES
            }
        );
        let holder = format!(r#"{{"name":"a","holder":"{}"}}"#, "h".repeat(257));
        assert_eq!(
            refused(&holder).1,
            "field `holder` is 257 bytes, more than the 256 allowed"
        );
        let holder_ok = format!(r#"{{"name":"a","holder":"{}"}}"#, "h".repeat(256));
        assert!(acquire(&holder_ok).is_ok());
        let data = format!(r#"{{"name":"a","data":"{}"}}"#, "d".repeat(4097));
        assert!(refused(&data).1.contains("`data`"));
        let data_ok = format!(r#"{{"name":"a","data":"{}"}}"#, "d".repeat(4096));
        assert!(acquire(&data_ok).is_ok());
    }

    #[test]
    fn worst_case_escaped_body_fits_the_body_limit() {
        let esc = |n| "\\u0000".repeat(n);
        // A name escaped as fully, of a printable character (a new lock's
        // name holds no control character).
        let body = format!(
            r#"{{"name":"{}","holder":"{}","lease_ms":18446744073709551615,"wait_ms":18446744073709551615,"data":"{}"}}"#,
            "\\u0041".repeat(MAX_NAME_BYTES),
            esc(MAX_HOLDER_BYTES),
            esc(MAX_DATA_BYTES)
        );
        assert!(body.len() <= MAX_BODY_BYTES);
        assert!(acquire(&body).is_ok());
    }

    #[test]
    fn release_and_renew() {
        let id = LockId::from_u128(12345).to_string();
        let r: ReleaseBody =
            parse_body(format!(r#"{{"name":"a","id":"{id}"}}"#).as_bytes()).unwrap();
        assert_eq!(r.lock_id(), Ok(LockId::from_u128(12345)));
        let e = parse_body::<ReleaseBody>(br#"{"name":"a","id":"nope"}"#).unwrap_err();
        assert_eq!(e, BadRequest::BadId);
        assert!(e.to_string().contains("`id`"));
        assert_eq!(
            parse_body::<ReleaseBody>(br#"{"name":"a"}"#).unwrap_err(),
            BadRequest::Missing("id")
        );
        assert!(matches!(
            parse_body::<ReleaseBody>(br#"{"name":"a","id":5}"#).unwrap_err(),
            BadRequest::WrongType { field: "id", .. }
        ));
        let n: RenewBody =
            parse_body(format!(r#"{{"name":"a","id":"{id}","lease_ms":100}}"#).as_bytes()).unwrap();
        assert_eq!(n.lease(), Some(Duration::from_millis(100)));
        assert_eq!(
            parse_body::<RenewBody>(
                format!(r#"{{"name":"a","id":"{id}","lease_ms":-5}}"#).as_bytes()
            )
            .unwrap_err(),
            BadRequest::Negative("lease_ms")
        );
        assert_eq!(
            parse_body::<RenewBody>(format!(r#"{{"name":"","id":"{id}"}}"#).as_bytes())
                .unwrap_err(),
            BadRequest::EmptyName
        );
    }

    #[test]
    fn name_checks_for_paths() {
        assert!(validate_name("jobs/42").is_ok());
        assert_eq!(validate_name(""), Err(BadRequest::EmptyName));
        assert!(validate_name(&"x".repeat(513)).is_err());
        assert_eq!(validate_id("x"), Err(BadRequest::BadId));
    }
}
