//! The members' calls that every grant waits on (copies, forgets, forwarded
//! batches) over the binary transport: one long-lived connection per member,
//! many calls in flight on it at once, each carried whole in a frame
//! ([`leasehold_api::wire::PeerCall`]) and served by the member's own peer
//! routes, with the same token, stamps and versions as over HTTP.
//!
//! Everything else, and every call while no connection is up, goes over
//! [`Http1Transport`]: a member's first calls, calls to a member whose build
//! speaks no version with members' calls (told by its preamble, asked again
//! after [`NO_FRAMES_FOR`]), calls larger than a frame takes, Raft's own
//! messages, and the answers read as they arrive (a rebuild's report: a
//! million locks on the shared connection would hold every copy behind it).
//! docs/design.md, "Members over the binary transport".
//!
//! A connection is opened in the background the first time a member is
//! called; calls go over HTTP until it is up. It is closed, and opened again
//! [`RETRY_AFTER`] later, when the member closes it, a frame cannot be
//! read, a write fails or stalls, or a call gets no answer within its
//! timeout while nothing at all came on the connection (a stalled member,
//! a cut link: HTTP drops such a connection the same way). One nobody calls
//! for [`IDLE_KEPT`](crate::http1::IDLE_KEPT) is closed; one in use is
//! kept open by a ping every [`PING_EVERY`].

mod link;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use leasehold_api::routes as api_routes;
use leasehold_api::wire;
use leasehold_tls::Tls;
use tokio::time::Instant;

use crate::http1::Http1Transport;
use crate::transport::{PeerRequest, PeerResponse, StreamedResponse, Transport, TransportError};
use link::{Link, Sent};

/// How long after a lost connection, or a failed try, a member's calls go
/// over HTTP before a connection is tried again.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);
/// How long a member that took a connection but speaks no version with
/// members' calls (an older build) is called over HTTP only.
pub const NO_FRAMES_FOR: Duration = Duration::from_secs(60);
/// How long opening a connection (TCP, TLS, the preambles) may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How often a connection in use is pinged: well under the idle timeout
/// after which a member closes a connection that sends nothing.
pub const PING_EVERY: Duration = Duration::from_secs(10);

/// Whether calls to `path` go over the binary transport when they can: the
/// short calls every grant or release waits on. Calls that may wait long
/// (a forwarded acquire or watch), and every other route, keep to HTTP.
pub fn framed_route(path: &str) -> bool {
    matches!(
        path,
        api_routes::COPIES
            | api_routes::SESSION_COPY
            | api_routes::FORGET
            | api_routes::LOST
            | api_routes::FORWARD_BATCH
    )
}

/// Members' calls over the binary transport where it can, HTTP where not.
pub struct FramedTransport {
    http: Http1Transport,
    links: Arc<Links>,
}

impl std::fmt::Debug for FramedTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FramedTransport").finish_non_exhaustive()
    }
}

/// Each member's connection, by address.
struct Links {
    by_addr: Mutex<HashMap<String, Slot>>,
    tls: Option<Arc<Tls>>,
}

/// Where a member's connection stands.
enum Slot {
    /// Being opened; calls go over HTTP meanwhile.
    Opening,
    /// Open.
    Up(Arc<Link>),
    /// None; calls go over HTTP until `retry_at`.
    Down { retry_at: Instant },
}

impl FramedTransport {
    /// Over plain TCP.
    pub fn new() -> Self {
        Self::with(Http1Transport::new(), None)
    }

    /// Over TLS with `tls`'s configuration as it is when each connection is
    /// made (a reload closes the connections made before it).
    pub fn with_tls(tls: Arc<Tls>) -> Self {
        Self::with(Http1Transport::with_tls(Arc::clone(&tls)), Some(tls))
    }

    fn with(http: Http1Transport, tls: Option<Arc<Tls>>) -> Self {
        FramedTransport {
            http,
            links: Arc::new(Links {
                by_addr: Mutex::default(),
                tls,
            }),
        }
    }

    /// How many members a connection is open to.
    pub fn open_links(&self) -> usize {
        let links = self.links.lock();
        links
            .values()
            .filter(|slot| matches!(slot, Slot::Up(link) if !link.is_closed()))
            .count()
    }

    async fn send_framed(&self, request: PeerRequest) -> Result<PeerResponse, TransportError> {
        let framed = framed_route(&request.path) && request.body.len() <= wire::MAX_REQUEST_BODY;
        let link = if framed {
            Links::link(&self.links, &request.addr)
        } else {
            None
        };
        let Some(link) = link else {
            return self.http.send(request).await;
        };
        match link.call(request).await {
            Sent::Answered(answer) => answer,
            // The connection closed before the call was written: none of
            // it went, so it goes over HTTP.
            Sent::Unsent(request) => self.http.send(request).await,
        }
    }
}

impl Drop for FramedTransport {
    /// The node is gone: its connections close now, not once unused.
    fn drop(&mut self) {
        for slot in self.links.lock().values() {
            if let Slot::Up(link) = slot {
                link.close();
            }
        }
    }
}

impl Default for FramedTransport {
    fn default() -> Self {
        Self::new()
    }
}

impl Links {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        // Plain data: a panic elsewhere leaves it usable.
        self.by_addr.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn generation(&self) -> u64 {
        self.tls.as_ref().map_or(0, |tls| tls.generation())
    }

    /// The open connection to `addr`, or none (then one is opened in the
    /// background, unless one is being opened or it is not yet time).
    fn link(links: &Arc<Links>, addr: &str) -> Option<Arc<Link>> {
        let now = Instant::now();
        let generation = links.generation();
        let mut by_addr = links.lock();
        match by_addr.get(addr) {
            Some(Slot::Up(link)) if !link.is_closed() && link.generation() == generation => {
                return Some(Arc::clone(link));
            }
            // A reload: new calls go on a new connection; the calls in
            // flight on this one are answered on it (it closes once idle).
            Some(Slot::Up(link)) => link.retire(),
            Some(Slot::Opening) => return None,
            Some(Slot::Down { retry_at }) if now < *retry_at => return None,
            Some(Slot::Down { .. }) | None => {}
        }
        by_addr.insert(addr.to_string(), Slot::Opening);
        drop(by_addr);
        let links = Arc::clone(links);
        let addr = addr.to_string();
        tokio::spawn(async move {
            let opened = tokio::time::timeout(
                CONNECT_TIMEOUT,
                link::open(&addr, links.tls.as_deref(), generation),
            )
            .await
            .unwrap_or(Err(link::OpenError::Failed("timed out".into())));
            let slot = match opened {
                Ok(link) => {
                    tracing::debug!(%addr, "a connection for members' calls is open");
                    let slot = Slot::Up(Arc::clone(&link));
                    let ended = Arc::clone(&links);
                    let at = addr.clone();
                    tokio::spawn(async move {
                        link.run().await;
                        ended.ended(&at, &link);
                    });
                    slot
                }
                Err(e) => {
                    let retry = match e {
                        link::OpenError::Failed(_) => RETRY_AFTER,
                        link::OpenError::NoFrames(_) => NO_FRAMES_FOR,
                    };
                    tracing::debug!(%addr, %e, "members' calls go over HTTP for {retry:?}");
                    Slot::Down {
                        retry_at: Instant::now() + retry,
                    }
                }
            };
            links.lock().insert(addr, slot);
        });
        None
    }

    /// `link` to `addr` has closed: the next try waits [`RETRY_AFTER`], but
    /// for one closed unused, which the next call may open again at once.
    fn ended(&self, addr: &str, link: &Arc<Link>) {
        let mut by_addr = self.lock();
        if matches!(by_addr.get(addr), Some(Slot::Up(l)) if Arc::ptr_eq(l, link)) {
            if link.closed_unused() {
                by_addr.remove(addr);
            } else {
                by_addr.insert(
                    addr.to_string(),
                    Slot::Down {
                        retry_at: Instant::now() + RETRY_AFTER,
                    },
                );
            }
        }
    }
}

impl Transport for FramedTransport {
    fn send(&self, request: PeerRequest) -> BoxFuture<'_, Result<PeerResponse, TransportError>> {
        self.send_framed(request).boxed()
    }

    fn send_streamed(
        &self,
        request: PeerRequest,
    ) -> BoxFuture<'_, Result<StreamedResponse, TransportError>> {
        if framed_route(&request.path) {
            self.send_framed(request)
                .map(|r| r.map(StreamedResponse::from))
                .boxed()
        } else {
            self.http.send_streamed(request)
        }
    }
}
