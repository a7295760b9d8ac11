//! The first bytes of a binary connection: the magic that tells it from
//! HTTP on the node's one port, and the version each side speaks.

/// The first eight bytes of a binary connection, from either side.
///
/// `0x89` first, as PNG's signature: no HTTP method starts with it (they
/// are ASCII letters), nor a TLS record (`0x14` to `0x17`), nor HTTP/2's
/// preface (`PRI`); a high bit stripped, a line ending rewritten or a
/// stream cut at the first `^Z` spoils it, so a mangled stream is told at
/// once. An older node's HTTP server answers it `400` and closes.
pub const MAGIC: [u8; 8] = [0x89, b'L', b'H', b'F', b'\r', b'\n', 0x1a, b'\n'];

/// Bytes of a preamble: [`MAGIC`], then the version byte.
pub const PREAMBLE_LEN: usize = MAGIC.len() + 1;

/// The ALPN protocol name that selects the binary transport under TLS
/// (beside `http/1.1`); the preamble still opens the stream inside TLS.
pub const ALPN: &[u8] = b"leasehold";

/// A version of the binary transport: its frame kinds and the layout of
/// every body they carry.
pub type Version = u8;

/// The highest version this build speaks.
///
/// - 1: the frames of [`super::Request`] and [`super::Answer`], their
///   bodies as this build lays them out.
/// - 2: a listing names the free names requests wait for
///   ([`super::kind::LOCKS_AWAITED`]); a node answers a connection of
///   version 1 without them.
/// - 3: members' calls ([`super::kind::PEER`], [`super::kind::PEER_REPLY`]).
pub const SPEAKS: Version = 3;

/// The first version that carries members' calls
/// ([`super::Request::Peer`]).
pub const PEER_CALLS: Version = 3;

/// The lowest version this build speaks.
pub const OLDEST: Version = 1;

/// The version a node answers when it speaks none of the caller's: it then
/// closes the connection.
pub const NONE: Version = 0;

/// What the first bytes of a connection say it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sniff {
    /// The binary transport: the bytes start with [`MAGIC`].
    Binary,
    /// Anything else (HTTP, TLS): the bytes cannot start [`MAGIC`].
    Other,
    /// Too few bytes to tell: all of them start [`MAGIC`] so far.
    NeedMore,
}

/// What a connection that started with `first` is; decided at the first
/// byte that differs from [`MAGIC`] (for HTTP, the very first), so a
/// server never waits on an HTTP client for bytes it will not send.
pub fn sniff(first: &[u8]) -> Sniff {
    let n = first.len().min(MAGIC.len());
    if first[..n] != MAGIC[..n] {
        Sniff::Other
    } else if n < MAGIC.len() {
        Sniff::NeedMore
    } else {
        Sniff::Binary
    }
}

/// A preamble that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PreambleError {
    /// The bytes do not start with [`MAGIC`].
    #[error("not the leasehold binary transport (no magic)")]
    NotBinary,
    /// A caller offered version 0, which is no version.
    #[error("the caller offered version 0")]
    NoVersion,
    /// The caller speaks only versions older than this build's oldest.
    #[error("the caller speaks version {offered} at most; this node speaks {oldest} to {speaks}")]
    TooOld {
        /// The highest version the caller offered.
        offered: Version,
        /// This build's oldest.
        oldest: Version,
        /// This build's highest.
        speaks: Version,
    },
    /// The node speaks none of the versions the caller offered.
    #[error("the node speaks none of the versions up to {offered}")]
    Refused {
        /// What the caller offered.
        offered: Version,
    },
    /// The node chose a version the caller cannot speak (above its offer,
    /// or below its oldest).
    #[error("the node chose version {chosen}, which was not offered (up to {offered})")]
    NotOffered {
        /// What the caller offered.
        offered: Version,
        /// What the node chose.
        chosen: Version,
    },
}

/// The preamble saying `version`: what a caller sends first (the highest
/// version it speaks), and what a node answers (the version chosen).
pub const fn preamble(version: Version) -> [u8; PREAMBLE_LEN] {
    let mut out = [0; PREAMBLE_LEN];
    let mut i = 0;
    while i < MAGIC.len() {
        out[i] = MAGIC[i];
        i += 1;
    }
    out[MAGIC.len()] = version;
    out
}

/// The version a preamble at the start of `bytes` says, or `None` until
/// [`PREAMBLE_LEN`] bytes came. The bytes after it are the first frames.
pub fn read_preamble(bytes: &[u8]) -> Result<Option<Version>, PreambleError> {
    match sniff(bytes) {
        Sniff::Other => Err(PreambleError::NotBinary),
        _ if bytes.len() < PREAMBLE_LEN => Ok(None),
        _ => Ok(Some(bytes[MAGIC.len()])),
    }
}

/// A node's choice for a caller that offered `offered`: the highest version
/// both speak, as members choose theirs (`leasehold_raft::version`: each
/// offers its highest, the lower is spoken). An error is answered with a
/// preamble of [`NONE`], and the connection closed.
pub fn choose(offered: Version, speaks: Version) -> Result<Version, PreambleError> {
    match offered {
        NONE => Err(PreambleError::NoVersion),
        v if v < OLDEST => Err(PreambleError::TooOld {
            offered,
            oldest: OLDEST,
            speaks,
        }),
        v => Ok(v.min(speaks)),
    }
}

/// A caller's check of the version the node chose for its offer of
/// `offered`: the version the connection speaks from then on.
pub fn accept(offered: Version, chosen: Version) -> Result<Version, PreambleError> {
    match chosen {
        NONE => Err(PreambleError::Refused { offered }),
        v if v > offered || v < OLDEST => Err(PreambleError::NotOffered { offered, chosen }),
        v => Ok(v),
    }
}
