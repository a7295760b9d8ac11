//! The stamp every peer message carries (who sent it, from which data
//! directory, in which cluster) and the header naming a refusal.

use axum::http::HeaderMap;
use axum::http::HeaderValue;

use crate::ids::{ClusterId, NodeId, StoreId};

/// The header naming the sending member's id.
pub const FROM_HEADER: &str = "x-leasehold-from";
/// The header carrying the sending member's store id (32 hex digits).
pub const STORE_HEADER: &str = "x-leasehold-store";
/// The header carrying the sender's cluster id (32 hex digits), once it has one.
pub const CLUSTER_HEADER: &str = "x-leasehold-cluster";
/// The header of a `409` refusal, naming its kind ([`Refusal::kind`]).
///
/// [`Refusal::kind`]: super::Refusal::kind
pub const REFUSED_HEADER: &str = "x-leasehold-refused";

/// What one peer message says about its sender.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct Stamp {
    /// The sender's node id.
    pub from: NodeId,
    /// The sender's data directory.
    pub store: StoreId,
    /// The sender's cluster, if it has learned one yet.
    pub cluster: Option<ClusterId>,
}

impl Stamp {
    /// Writes this stamp into `headers`.
    pub fn write(&self, headers: &mut HeaderMap) {
        headers.insert(FROM_HEADER, HeaderValue::from(self.from));
        headers.insert(STORE_HEADER, hex_value(self.store.0));
        if let Some(cluster) = self.cluster {
            headers.insert(CLUSTER_HEADER, hex_value(cluster.0));
        }
    }

    /// The stamp in `headers`, or why there is none.
    pub fn read(headers: &HeaderMap) -> Result<Stamp, BadStamp> {
        let text = |name: &'static str| -> Result<Option<&str>, BadStamp> {
            headers
                .get(name)
                .map(|v| v.to_str().map_err(|_| BadStamp(name)))
                .transpose()
        };
        let from = text(FROM_HEADER)?
            .ok_or(BadStamp(FROM_HEADER))?
            .parse()
            .map_err(|_| BadStamp(FROM_HEADER))?;
        let store = text(STORE_HEADER)?
            .ok_or(BadStamp(STORE_HEADER))
            .and_then(|s| parse_hex(s).ok_or(BadStamp(STORE_HEADER)))?;
        let cluster = text(CLUSTER_HEADER)?
            .map(|s| parse_hex(s).ok_or(BadStamp(CLUSTER_HEADER)))
            .transpose()?;
        Ok(Stamp {
            from,
            store: StoreId(store),
            cluster: cluster.map(ClusterId),
        })
    }
}

fn hex_value(v: u128) -> HeaderValue {
    HeaderValue::from_str(&format!("{v:032x}")).expect("hex digits are a valid header value")
}

fn parse_hex(s: &str) -> Option<u128> {
    (s.len() == 32)
        .then(|| u128::from_str_radix(s, 16).ok())
        .flatten()
}

/// A peer message without a readable [`Stamp`]: the named header is missing or malformed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("peer message without a valid {0} header")]
pub struct BadStamp(pub &'static str);

pub(super) const KIND_CLUSTER: &str = "cluster";
pub(super) const KIND_STORE: &str = "store";
/// The refusal of a member whose protocol version the cluster went past.
pub(super) const KIND_PROTOCOL: &str = "protocol";

/// What a refused sender learns from the `409` it got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedAs {
    /// The peer knew this node on another data directory: this node's
    /// directory is not the one the cluster knew.
    StoreChanged,
    /// The peer belongs to another cluster.
    ForeignCluster,
    /// The peer's cluster speaks a protocol version above what this node
    /// offers, or this node's above what the peer offers.
    Protocol,
    /// The peer could not record this node's identity (try again).
    Unrecorded,
}

impl RefusedAs {
    /// The refusal named in an answer's headers, if it is one.
    pub fn read(headers: &HeaderMap) -> Option<RefusedAs> {
        let kind = headers.get(REFUSED_HEADER)?.to_str().ok()?;
        Some(match kind {
            KIND_STORE => RefusedAs::StoreChanged,
            KIND_CLUSTER => RefusedAs::ForeignCluster,
            KIND_PROTOCOL => RefusedAs::Protocol,
            _ => RefusedAs::Unrecorded,
        })
    }
}
