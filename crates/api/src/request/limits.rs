//! The limits a request is held to.

use std::time::Duration;

/// Longest `name`, in bytes of UTF-8.
pub const MAX_NAME_BYTES: usize = 512;
/// Most names of one set (`names`).
pub const MAX_SET_NAMES: usize = 64;
/// Most bytes of UTF-8 the names of one set hold together: fully escaped
/// (six times), with every other field at its limit, a set's body still
/// fits in [`MAX_BODY_BYTES`] with room for what a follower wraps around
/// it when it forwards it.
pub const MAX_SET_BYTES: usize = 4096;
const _: () = assert!(
    6 * (MAX_SET_BYTES + MAX_HOLDER_BYTES + MAX_DATA_BYTES + MAX_REQUEST_ID_BYTES) + 1024
        <= MAX_BODY_BYTES
);
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

/// The most bytes of a member's address.
pub const MAX_ADDR_BYTES: usize = 256;
