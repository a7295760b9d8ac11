//! The bodies of the public routes that take one, each with its fields and checks.

use std::time::Duration;

use locktable::LockId;
use serde::{Deserialize, Serialize};

use super::bad_request::BadRequest;
use super::limits::MAX_WAIT_MS;
use super::read::{field, Body, Field, FieldKind};
use super::validate::{
    validate_addr, validate_data, validate_holder, validate_id, validate_kind, validate_member_id,
    validate_name, validate_new_name, validate_request_id, validate_set,
};

fn ms(v: Option<u64>) -> Option<Duration> {
    v.map(Duration::from_millis)
}

/// `POST /v1/locks/acquire`.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode,
)]
pub struct AcquireBody {
    /// The name to lock; absent when `names` is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The names of a set to lock all at once, in place of `name`: each
    /// once, at most [`crate::MAX_SET_NAMES`]; granted together or not at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub names: Option<Vec<String>>,
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
    /// Hold the name shared, beside other shared holders (a reader's
    /// lock); absent or false holds it alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<bool>,
    /// Hold one of this many permits of the name (a semaphore), from 1 to
    /// [`locktable::Kind::MAX_PERMITS`]; every holder and waiter of the
    /// name must ask the same count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permits: Option<u64>,
    /// The grant's lock-delay in milliseconds, at most a minute: once its
    /// lease runs out unreleased, the name stays closed this much longer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock_delay_ms: Option<u64>,
    /// The id of the session the lock is to hang off (`POST
    /// /v1/sessions/open`): it takes the session's lease, is renewed with
    /// it and ends with it (its `lock_delay_ms` after it); not with
    /// `lease_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
}

impl AcquireBody {
    /// What the grant is to hold of the name (validated: a permit count in
    /// range, not both shared and permits).
    pub fn kind(&self) -> locktable::Kind {
        match (self.shared, self.permits) {
            (_, Some(n)) => locktable::Kind::Permit(n.min(u64::from(u32::MAX)) as u32),
            (Some(true), None) => locktable::Kind::Shared,
            _ => locktable::Kind::Exclusive,
        }
    }

    /// Whether it asks for a set of names (`names`) rather than one.
    pub fn is_set(&self) -> bool {
        self.names.is_some()
    }

    /// The name asked for, "" when absent (a set's).
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or("")
    }

    /// The names asked for: `names`, or `name` alone.
    pub fn all_names(&self) -> Vec<String> {
        match &self.names {
            Some(names) => names.clone(),
            None => vec![self.name().to_string()],
        }
    }

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

    /// The lock-delay asked for; zero when absent.
    pub fn delay(&self) -> Duration {
        Duration::from_millis(self.lock_delay_ms.unwrap_or(0))
    }

    /// The session asked for, parsed (validated).
    pub fn session(&self) -> Option<LockId> {
        self.session.as_deref().and_then(|s| s.parse().ok())
    }
}

impl Body for AcquireBody {
    const FIELDS: &'static [Field] = &[
        field("name", FieldKind::Str, false),
        field("names", FieldKind::StrList, false),
        field("holder", FieldKind::Str, false),
        field("lease_ms", FieldKind::Millis, false),
        field("wait_ms", FieldKind::Millis, false),
        field("data", FieldKind::Str, false),
        field("request_id", FieldKind::Str, false),
        field("shared", FieldKind::Bool, false),
        field("permits", FieldKind::Count, false),
        field("lock_delay_ms", FieldKind::Millis, false),
        field("session", FieldKind::Str, false),
    ];

    fn validate(&self) -> Result<(), BadRequest> {
        match (&self.name, &self.names) {
            (None, None) => return Err(BadRequest::Missing("name")),
            (Some(_), Some(_)) => return Err(BadRequest::NameAndNames),
            (Some(name), None) => validate_new_name(name)?,
            (None, Some(names)) => validate_set(names)?,
        }
        validate_holder(self.holder())?;
        validate_kind(self.shared, self.permits)?;
        if self.delay() > locktable::Lock::MAX_DELAY {
            return Err(BadRequest::BadDelay);
        }
        if let Some(data) = &self.data {
            validate_data(data)?;
        }
        if let Some(request) = &self.request_id {
            validate_request_id(request)?;
        }
        if let Some(session) = &self.session {
            session
                .parse::<LockId>()
                .map_err(|_| BadRequest::BadSession)?;
            if self.lease_ms.is_some() {
                return Err(BadRequest::WithSession("lease_ms"));
            }
        }
        Ok(())
    }
}

/// `POST /v1/locks/renew`.
#[derive(
    Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode,
)]
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
#[derive(
    Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode,
)]
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
