//! Reading a body: JSON of the right shape, read in one pass, or field by
//! field for a message that names what is wrong.

use serde::de::{
    DeserializeOwned, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor,
};
use serde_json::{Map, Value};

use super::bad_request::BadRequest;

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
    /// A count: a JSON integer from 0 to `u64::MAX` (its range is checked
    /// when the body is validated).
    Count,
    /// `true` or `false`.
    Bool,
    /// An array of strings.
    StrList,
    /// An array of locks, each an object with a string `name` and a string
    /// `id` (other keys skipped).
    LockList,
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

/// A [`Field`] as a body's `FIELDS` lists it.
pub(super) const fn field(name: &'static str, kind: FieldKind, required: bool) -> Field {
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
/// The server checks the size ([`MAX_BODY_BYTES`](super::MAX_BODY_BYTES)) before calling this.
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
    let Some(mut map) = top else {
        return Err(BadRequest::NotAnObject);
    };
    check_fields(&mut map, T::FIELDS)?;
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

fn check_fields(map: &mut Map<String, Value>, fields: &[Field]) -> Result<(), BadRequest> {
    for f in fields {
        match map.get_mut(f.name) {
            None | Some(Value::Null) if f.required => return Err(BadRequest::Missing(f.name)),
            None | Some(Value::Null) => {}
            Some(v) => {
                integral_as_integer(v);
                check_kind(f, v)?
            }
        }
    }
    Ok(())
}

/// A number written with a fraction or an exponent whose value is a whole
/// number from 0 to `u64::MAX` (`1000.0`, `1e3`) is that integer: JSON
/// Schema's `integer`, which the API's description gives, is a value, not
/// a spelling.
fn integral_as_integer(v: &mut Value) {
    let Value::Number(n) = v else { return };
    if n.is_u64() || n.is_i64() {
        return;
    }
    let x = n.as_f64().unwrap_or(f64::NAN);
    if x.is_finite()
        && x.fract() == 0.0
        && !x.is_sign_negative()
        && x < 18_446_744_073_709_551_616.0
    {
        *v = Value::from(x as u64);
    }
}

/// Whether `v` is an item of a [`FieldKind::LockList`]: an object with a
/// string `name` and a string `id`.
fn is_lock_ref(v: &Value) -> bool {
    v.as_object().is_some_and(|o| {
        ["name", "id"]
            .iter()
            .all(|k| o.get(*k).is_some_and(Value::is_string))
    })
}

fn check_kind(f: &Field, v: &Value) -> Result<(), BadRequest> {
    match f.kind {
        FieldKind::Str if v.is_string() => Ok(()),
        FieldKind::Str => Err(BadRequest::WrongType {
            field: f.name,
            expected: "a string",
        }),
        FieldKind::Bool if v.is_boolean() => Ok(()),
        FieldKind::Bool => Err(BadRequest::WrongType {
            field: f.name,
            expected: "true or false",
        }),
        FieldKind::StrList if v.as_array().is_some_and(|a| a.iter().all(Value::is_string)) => {
            Ok(())
        }
        FieldKind::StrList => Err(BadRequest::WrongType {
            field: f.name,
            expected: "an array of strings",
        }),
        FieldKind::LockList if v.as_array().is_some_and(|a| a.iter().all(is_lock_ref)) => Ok(()),
        FieldKind::LockList => Err(BadRequest::WrongType {
            field: f.name,
            expected: r#"an array of locks, each {"name": string, "id": string}"#,
        }),
        FieldKind::Millis | FieldKind::MemberId | FieldKind::Count => {
            let Value::Number(n) = v else {
                return Err(BadRequest::WrongType {
                    field: f.name,
                    expected: match f.kind {
                        FieldKind::MemberId => "an integer member id",
                        FieldKind::Count => "an integer",
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
