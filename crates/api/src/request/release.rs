//! `POST /v1/locks/release`: one lock by `name` and `id`, or a set of
//! them (`locks`) released in one call.

use std::fmt;

use locktable::LockId;
use serde::de::{Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::bad_request::BadRequest;
use super::limits::{MAX_SET_BYTES, MAX_SET_NAMES};
use super::read::{field, Body, Field, FieldKind};
use super::validate::{validate_id, validate_name};

/// A lock named by its name and its grant's id: an item of a release's
/// `locks`. Read from a JSON object only; its other fields are skipped,
/// so the `locks` of a set's grant may be sent back as they came.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, bincode::Encode, bincode::Decode,
)]
pub struct LockRef {
    /// The name locked.
    pub name: String,
    /// The grant's id.
    pub id: String,
}

impl LockRef {
    /// The lock `name` held under `id`.
    pub fn new(name: impl Into<String>, id: impl Into<String>) -> Self {
        LockRef {
            name: name.into(),
            id: id.into(),
        }
    }
}

/// Read as the checked path reads it: an object (never an array, which
/// serde's derived reader would take field by field), the last of a
/// repeated key counting, unknown keys skipped.
impl<'de> Deserialize<'de> for LockRef {
    fn deserialize<D: Deserializer<'de>>(reader: D) -> Result<Self, D::Error> {
        reader.deserialize_map(LockRefVisitor)
    }
}

struct LockRefVisitor;

impl<'de> Visitor<'de> for LockRefVisitor {
    type Value = LockRef;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(r#"a lock, {"name": string, "id": string}"#)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut members: A) -> Result<LockRef, A::Error> {
        let (mut name, mut id) = (None, None);
        while let Some(key) = members.next_key::<String>()? {
            match key.as_str() {
                "name" => name = Some(members.next_value::<String>()?),
                "id" => id = Some(members.next_value::<String>()?),
                _ => {
                    members.next_value::<IgnoredAny>()?;
                }
            }
        }
        let name = name.ok_or_else(|| serde::de::Error::missing_field("name"))?;
        let id = id.ok_or_else(|| serde::de::Error::missing_field("id"))?;
        Ok(LockRef { name, id })
    }
}

/// `POST /v1/locks/release`: the lock `name` held under `id`, or, in
/// their place, the set `locks`, released all in one call.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode,
)]
pub struct ReleaseBody {
    /// The name locked; absent when `locks` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The grant's id; absent when `locks` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The locks of a set to release in one call, in place of `name` and
    /// `id`: 1 to [`MAX_SET_NAMES`], each name once, the names at most
    /// [`MAX_SET_BYTES`] together (the bounds of an acquire's `names`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locks: Option<Vec<LockRef>>,
}

impl ReleaseBody {
    /// The release of the lock `name` held under `id`.
    pub fn one(name: impl Into<String>, id: impl Into<String>) -> Self {
        ReleaseBody {
            name: Some(name.into()),
            id: Some(id.into()),
            locks: None,
        }
    }

    /// The release of every lock of `locks` in one call.
    pub fn set(locks: Vec<LockRef>) -> Self {
        ReleaseBody {
            locks: Some(locks),
            ..ReleaseBody::default()
        }
    }

    /// Whether it releases a set (`locks`) rather than one lock.
    pub fn is_set(&self) -> bool {
        self.locks.is_some()
    }

    /// The name released, "" when absent (a set's).
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }

    /// The id released, "" when absent (a set's).
    pub fn id(&self) -> &str {
        self.id.as_deref().unwrap_or("")
    }

    /// The id, parsed.
    pub fn lock_id(&self) -> Result<LockId, BadRequest> {
        match &self.id {
            Some(id) => validate_id(id),
            None => Err(BadRequest::Missing("id")),
        }
    }

    /// The locks released: `locks`, or `name` and `id` alone.
    pub fn all_locks(&self) -> Vec<LockRef> {
        match &self.locks {
            Some(locks) => locks.clone(),
            None => vec![LockRef::new(self.name(), self.id())],
        }
    }
}

impl Body for ReleaseBody {
    const FIELDS: &'static [Field] = &[
        field("name", FieldKind::Str, false),
        field("id", FieldKind::Str, false),
        field("locks", FieldKind::LockList, false),
    ];

    fn validate(&self) -> Result<(), BadRequest> {
        match (&self.locks, &self.name, &self.id) {
            (Some(_), Some(_), _) | (Some(_), None, Some(_)) => Err(BadRequest::NameAndLocks),
            (Some(locks), None, None) => validate_release_set(locks).map(drop),
            (None, None, _) => Err(BadRequest::Missing("name")),
            (None, Some(_), None) => Err(BadRequest::Missing("id")),
            (None, Some(name), Some(id)) => {
                validate_name(name)?;
                validate_id(id).map(drop)
            }
        }
    }
}

/// Checks the locks of a set's release: 1 to [`MAX_SET_NAMES`] of them,
/// their names at most [`MAX_SET_BYTES`] together, each name a held
/// lock's ([`validate_name`]) and named once, each id a lock id; answers
/// the ids, parsed, in order.
pub fn validate_release_set(locks: &[LockRef]) -> Result<Vec<LockId>, BadRequest> {
    if locks.is_empty() || locks.len() > MAX_SET_NAMES {
        return Err(BadRequest::ReleaseSize);
    }
    let bytes: usize = locks.iter().map(|l| l.name.len()).sum();
    if bytes > MAX_SET_BYTES {
        return Err(BadRequest::NamesTooLong {
            field: "locks",
            len: bytes,
            max: MAX_SET_BYTES,
        });
    }
    // A name may come more than once (a semaphore's permits, the same lock
    // twice): each is released if held under its id, so a lock named twice
    // is released once and its second item is not held.
    let mut ids = Vec::with_capacity(locks.len());
    for lock in locks {
        validate_name(&lock.name)?;
        ids.push(validate_id(&lock.id)?);
    }
    Ok(ids)
}
