//! The bodies of the session routes: open, renew, close.

use std::time::Duration;

use locktable::LockId;
use serde::{Deserialize, Serialize};

use super::bad_request::BadRequest;
use super::read::{field, Body, Field, FieldKind};
use super::validate::{validate_holder, validate_id};

/// `POST /v1/sessions/open`: a session, a lease that locks hang off.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode,
)]
pub struct SessionOpenBody {
    /// Who holds it, for the reader of a listing; absent means "".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<String>,
    /// The session's lease, in milliseconds; absent or 0 means the node's
    /// default, longer than its maximum is clamped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
}

impl SessionOpenBody {
    /// The holder, "" when absent.
    pub fn holder(&self) -> &str {
        self.holder.as_deref().unwrap_or("")
    }

    /// The lease asked for, for [`locktable::LeaseRule::lease`] to default
    /// and clamp.
    pub fn lease(&self) -> Option<Duration> {
        self.ttl_ms.map(Duration::from_millis)
    }
}

impl Body for SessionOpenBody {
    const FIELDS: &'static [Field] = &[
        field("holder", FieldKind::Str, false),
        field("ttl_ms", FieldKind::Millis, false),
    ];

    fn validate(&self) -> Result<(), BadRequest> {
        validate_holder(self.holder())
    }
}

/// `POST /v1/sessions/renew` and `POST /v1/sessions/close`: a session by
/// its id.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode,
)]
pub struct SessionBody {
    /// The session's id.
    pub id: String,
    /// A renewal's new lease, in milliseconds; absent means the lease it
    /// had, 0 the node's default; longer than its maximum is clamped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_ms: Option<u64>,
    /// A renewal's digest of the ids of the locks the caller holds in the
    /// session (32 hexadecimal digits: the exclusive or of the ids' 128
    /// bits): when it differs from the speaker's, the answer lists the
    /// locks the session holds (`held`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

impl SessionBody {
    /// The id, parsed.
    pub fn session_id(&self) -> Result<LockId, BadRequest> {
        validate_id(&self.id)
    }

    /// The lease asked for.
    pub fn lease(&self) -> Option<Duration> {
        self.ttl_ms.map(Duration::from_millis)
    }

    /// The digest, parsed.
    pub fn digest(&self) -> Result<Option<u128>, BadRequest> {
        self.digest.as_deref().map(parse_digest).transpose()
    }
}

/// A digest as 32 hexadecimal digits.
pub fn format_digest(digest: u128) -> String {
    format!("{digest:032x}")
}

/// The digest `text` names.
pub fn parse_digest(text: &str) -> Result<u128, BadRequest> {
    if text.len() != 32 {
        return Err(BadRequest::BadDigest);
    }
    u128::from_str_radix(text, 16).map_err(|_| BadRequest::BadDigest)
}

impl Body for SessionBody {
    const FIELDS: &'static [Field] = &[
        field("id", FieldKind::Str, true),
        field("ttl_ms", FieldKind::Millis, false),
        field("digest", FieldKind::Str, false),
    ];

    fn validate(&self) -> Result<(), BadRequest> {
        validate_id(&self.id)?;
        self.digest().map(drop)
    }
}
