//! Why a request is refused.

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
    #[error("field `{0}` must be an integer{unit}", unit = if matches!(*.0, "id" | "permits") { "" } else { " number of milliseconds" })]
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
    /// A lock-delay over a minute.
    #[error("field `lock_delay_ms` must be at most {} (a minute)", locktable::Lock::MAX_DELAY.as_millis())]
    BadDelay,
    /// A permit count out of range.
    #[error("field `permits` must be from 1 to {}", locktable::Kind::MAX_PERMITS)]
    BadPermits,
    /// Both `shared` and `permits`: a name is a lock or a semaphore.
    #[error("fields `shared` and `permits` cannot both be given: a name is held as a lock (shared or not) or as permits of a semaphore")]
    SharedPermits,
    /// Both `name` and `names`: one name, or a set of them.
    #[error("fields `name` and `names` cannot both be given: one name, or a set of them")]
    NameAndNames,
    /// A set of no name, or of more than [`super::MAX_SET_NAMES`].
    #[error("field `names` must hold 1 to {} names", super::MAX_SET_NAMES)]
    SetSize,
    /// A set names one name twice.
    #[error("field `names` holds {0:?} twice: a set names each name once")]
    SetRepeats(String),
    /// Both `locks` and `name` or `id`: one lock, or a set of them.
    #[error("field `locks` cannot be given with `name` or `id`: one lock, or a set of them")]
    NameAndLocks,
    /// A set's release of no lock, or of more than [`super::MAX_SET_NAMES`].
    #[error("field `locks` must hold 1 to {} locks", super::MAX_SET_NAMES)]
    ReleaseSize,
    /// The names of a set over their limit together.
    #[error("the names of field `{field}` are {len} bytes together, more than the {max} allowed")]
    NamesTooLong {
        /// The field.
        field: &'static str,
        /// Their length in bytes, together.
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
    /// A lock of a session asked with a field the session decides for it.
    #[error(
        "field `{0}` cannot be given with `session`: a lock of a session has its session's lease"
    )]
    WithSession(&'static str),
    /// The session is not a ULID.
    #[error("field `session` is not a session id (26 characters of Crockford base32 expected)")]
    BadSession,
    /// A digest that is not 32 hexadecimal digits.
    #[error("field `digest` must be 32 hexadecimal digits")]
    BadDigest,
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
