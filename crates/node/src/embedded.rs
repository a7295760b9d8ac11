//! The client's transport to a node in this process: the same calls as over
//! HTTP, without HTTP to itself.

use std::sync::Arc;
use std::time::Duration;

use leasehold_api::{
    AcquireBody, ClusterAnswer, ErrorCode, LockView, LocksAnswer, ReleaseBody, RenewBody, Watch,
};
use leasehold_client::{BoxFuture, CallError, Client, SessionCall, SetReleased, Transport};
use locktable::Lock;

use crate::error::ApiError;
use crate::node::Node;

/// A [`Transport`] to a node running in this process.
pub struct Embedded {
    node: Arc<Node>,
}

impl Embedded {
    /// The transport to `node`.
    pub fn new(node: Arc<Node>) -> Self {
        Embedded { node }
    }
}

impl Node {
    /// A client that talks to this node in-process. The locks it takes
    /// (elections included) belong to this process: a shutdown
    /// ([`crate::RunningNode::shutdown`]) releases them first.
    pub fn client(self: &Arc<Self>) -> Client {
        Client::with_transport(Arc::new(Embedded::new(Arc::clone(self))))
    }

    fn held_here(&self, lock: &LockView) {
        let mut local = self.local_locks.lock().unwrap_or_else(|p| p.into_inner());
        local.insert(lock.id.clone(), lock.name.clone());
    }

    fn no_longer_held_here(&self, id: &str) {
        let mut local = self.local_locks.lock().unwrap_or_else(|p| p.into_inner());
        local.remove(id);
    }

    /// Releases every lock this process's own clients hold, through the
    /// speaker (this node, or another member), so that others may take
    /// them (an election's next leader) at once instead of a lease later.
    /// Answers how many were released.
    pub(crate) async fn release_local_locks(self: &Arc<Self>) -> usize {
        let local =
            std::mem::take(&mut *self.local_locks.lock().unwrap_or_else(|p| p.into_inner()));
        let mut released = 0;
        for (id, name) in local {
            if locktable::is_session_name(&name) {
                let body = leasehold_api::SessionBody {
                    id,
                    ..Default::default()
                };
                let closed = tokio::time::timeout(LOCAL_RELEASE, self.close_session(body)).await;
                if let Ok(Ok((_, locks))) = closed {
                    released += 1 + locks as usize;
                }
                continue;
            }
            let body = ReleaseBody::one(name.clone(), id);
            match tokio::time::timeout(LOCAL_RELEASE, self.release(body)).await {
                Ok(Ok(_)) => released += 1,
                Ok(Err(e)) => {
                    tracing::debug!(%name, e = %e.body.message, "shutdown: a local lock was not released")
                }
                Err(_) => {
                    tracing::info!(%name, "shutdown: releasing a local lock took too long; it ends with its lease")
                }
            }
        }
        released
    }
}

/// How long a shutdown gives the release of one of its process's locks.
const LOCAL_RELEASE: Duration = Duration::from_secs(2);

fn refused(e: ApiError) -> CallError {
    CallError::Api(*e.body)
}

async fn within<T>(
    timeout: Duration,
    call: impl std::future::Future<Output = Result<T, ApiError>>,
) -> Result<T, CallError> {
    match tokio::time::timeout(timeout, call).await {
        Ok(result) => result.map_err(refused),
        Err(_) => Err(CallError::NoAnswer("timed out".into())),
    }
}

impl Embedded {
    fn view(&self, lock: &Lock) -> LockView {
        self.node.view(lock)
    }
}

/// The views of a listing's locks, each with its waiters and their queue
/// as `node` sees them now.
pub(crate) fn listed(
    listing: locktable::Listing,
    node: &Node,
    view: impl Fn(&Lock) -> LockView,
) -> Vec<LockView> {
    let mut queues = listing.queues.into_iter();
    let mut also = listing.also.into_iter();
    listing
        .locks
        .iter()
        .zip(listing.waiters.iter().copied().chain(std::iter::repeat(0)))
        .map(|(lock, waiters)| LockView {
            waiters: waiters as u64,
            queue: queues
                .next()
                .unwrap_or_default()
                .iter()
                .map(|q| node.queued_view(q))
                .collect(),
            others: also.next().unwrap_or_default().iter().map(&view).collect(),
            ..view(lock)
        })
        .collect()
}

/// The free names requests wait for in `awaited`, as `node` sees them now.
pub(crate) fn awaited_views(
    awaited: Vec<locktable::Awaited>,
    node: &Node,
) -> Vec<leasehold_api::AwaitedView> {
    awaited
        .into_iter()
        .map(|a| awaited_view(a.name, a.count, &a.first, node))
        .collect()
}

/// The free name `name` that `count` requests wait for, the first of them
/// `first`, as `node` sees them now.
pub(crate) fn awaited_view(
    name: String,
    count: usize,
    first: &[locktable::Queued],
    node: &Node,
) -> leasehold_api::AwaitedView {
    leasehold_api::AwaitedView {
        name,
        waiters: count as u64,
        queue: first.iter().map(|q| node.queued_view(q)).collect(),
    }
}

/// `lock` as `view` shows it, with the name's other holders and the
/// requests waiting for it, if known, as `node` sees them now.
pub(crate) fn with_waiting(
    lock: &Lock,
    waiting: Option<locktable::Waiting>,
    node: &Node,
    view: impl Fn(&Lock) -> LockView,
) -> LockView {
    let Some(waiting) = waiting else {
        return view(lock);
    };
    LockView {
        waiters: waiting.count as u64,
        queue: waiting.first.iter().map(|q| node.queued_view(q)).collect(),
        others: waiting.others.iter().map(&view).collect(),
        ..view(lock)
    }
}

impl Transport for Embedded {
    fn acquire(
        &self,
        body: AcquireBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<(LockView, Duration), CallError>> {
        Box::pin(async move {
            let started = tokio::time::Instant::now();
            let lock = within(timeout, self.node.acquire(body)).await?;
            let view = self.view(&lock);
            self.node.held_here(&view);
            Ok((view, started.elapsed()))
        })
    }

    fn acquire_set(
        &self,
        body: AcquireBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<(Vec<LockView>, Duration), CallError>> {
        Box::pin(async move {
            let started = tokio::time::Instant::now();
            let locks = within(timeout, self.node.acquire_locks(body)).await?;
            let views: Vec<LockView> = locks.iter().map(|lock| self.view(lock)).collect();
            for view in &views {
                self.node.held_here(view);
            }
            Ok((views, started.elapsed()))
        })
    }

    fn release(
        &self,
        body: ReleaseBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<LockView, CallError>> {
        Box::pin(async move {
            let id = body.id().to_string();
            let released = within(timeout, self.node.release(body)).await;
            if released.is_ok()
                || matches!(&released, Err(CallError::Api(e)) if e.error == ErrorCode::NotHeld)
            {
                self.node.no_longer_held_here(&id);
            }
            Ok(self.view(&released?))
        })
    }

    fn release_set(
        &self,
        body: ReleaseBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<SetReleased, CallError>> {
        Box::pin(async move {
            let asked = body.all_locks();
            let released = within(timeout, self.node.release_set(body)).await;
            if released.is_ok()
                || matches!(&released, Err(CallError::Api(e)) if e.error == ErrorCode::NotHeld)
            {
                for lock in &asked {
                    self.node.no_longer_held_here(&lock.id);
                }
            }
            let released = released?;
            let views = released.locks.iter().map(|l| self.view(l)).collect();
            Ok((views, released.not_held))
        })
    }

    fn renew(
        &self,
        body: RenewBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<LockView, CallError>> {
        Box::pin(async move {
            let lock = within(timeout, self.node.renew(body)).await?;
            Ok(self.view(&lock))
        })
    }

    fn get(
        &self,
        name: String,
        watch: Option<Watch>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Option<LockView>, CallError>> {
        Box::pin(async move {
            let (lock, waiting) = match watch {
                None => {
                    let (lock, waiting) = within(timeout, self.node.get_waiting(&name)).await?;
                    (lock, Some(waiting))
                }
                Some(_) => (within(timeout, self.node.get(&name, watch)).await?, None),
            };
            Ok(lock.map(|l| with_waiting(&l, waiting, &self.node, |l| self.view(l))))
        })
    }

    fn list(
        &self,
        prefix: String,
        limit: usize,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<LocksAnswer, CallError>> {
        Box::pin(async move {
            let limit = limit.clamp(1, leasehold_api::MAX_LIST_LIMIT);
            let mut listing = within(timeout, self.node.list(&prefix, limit)).await?;
            let awaited = awaited_views(std::mem::take(&mut listing.awaited), &self.node);
            let total = listing.total.map(|t| t as u64);
            Ok(LocksAnswer {
                locks: listed(listing, &self.node, |l| self.view(l)),
                total,
                awaited,
            })
        })
    }

    fn cluster(&self, _timeout: Duration) -> BoxFuture<'_, Result<ClusterAnswer, CallError>> {
        Box::pin(async move { Ok(self.node.cluster()) })
    }

    fn session(
        &self,
        call: SessionCall,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<leasehold_api::SessionAnswer, CallError>> {
        Box::pin(async move {
            let started = tokio::time::Instant::now();
            let node = &self.node;
            let view = |lock: &Lock, locks| node.session_view(lock, locks);
            let (session, held) = match call {
                SessionCall::Open(body) => {
                    let lock = within(timeout, node.open_session(body)).await?;
                    let mut local = node.local_locks.lock().unwrap_or_else(|p| p.into_inner());
                    local.insert(lock.id.to_string(), lock.name.clone());
                    (view(&lock, None), None)
                }
                SessionCall::Renew(body) => {
                    let renewed = within(timeout, node.renew_session(body)).await?;
                    let held = renewed
                        .held
                        .map(|ids| ids.iter().map(ToString::to_string).collect());
                    (view(&renewed.session, Some(renewed.locks)), held)
                }
                SessionCall::Close(body) => {
                    let id = body.id.clone();
                    let (lock, locks) = within(timeout, node.close_session(body)).await?;
                    node.no_longer_held_here(&id);
                    (view(&lock, Some(locks)), None)
                }
            };
            Ok(leasehold_api::SessionAnswer {
                session,
                served_ms: leasehold_api::millis_floor(started.elapsed()),
                held,
            })
        })
    }
}
