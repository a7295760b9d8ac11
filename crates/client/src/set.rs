//! A set of locks granted together ([`crate::Client::acquire_all`]), held
//! and lost as one.

use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::guard::LockGuard;
use crate::release::release_together;
use crate::Lock;

/// Locks granted together, one guard each, renewed side by side (their
/// renewals leave together, and a node forwards them to the speaker in one
/// batch). The set counts as lost the moment any of its locks is: its
/// [`LockSet::lost_token`] is cancelled then, and the work it guards is to
/// stop. Dropping the set releases every lock in the background.
pub struct LockSet {
    guards: Vec<LockGuard>,
    lost: CancellationToken,
    watch: tokio::task::JoinHandle<()>,
}

impl LockSet {
    /// Watches `guards` (at least one): the first loss among them is the
    /// set's.
    pub(crate) fn new(guards: Vec<LockGuard>) -> LockSet {
        let lost = CancellationToken::new();
        let each: Vec<CancellationToken> = guards.iter().map(LockGuard::lost_token).collect();
        let set_lost = lost.clone();
        let watch = leasehold_tasks::spawn(async move {
            let any =
                futures::future::select_all(each.iter().map(|token| Box::pin(token.cancelled())));
            tokio::select! {
                _ = any => set_lost.cancel(),
                _ = set_lost.cancelled() => {}
            }
        });
        LockSet {
            guards,
            lost,
            watch,
        }
    }

    /// The locks, in the order asked, as last granted or renewed.
    pub fn locks(&self) -> Vec<Lock> {
        self.guards.iter().map(LockGuard::lock).collect()
    }

    /// The guards of the locks, in the order asked.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The fence of each lock, in the order asked.
    pub fn fences(&self) -> Vec<u64> {
        self.guards.iter().map(LockGuard::fence).collect()
    }

    /// A token cancelled the moment any lock of the set is lost, or its
    /// lease is about to lapse unrenewed on this client's clock.
    pub fn lost_token(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Whether any lock of the set is lost, judged now.
    pub fn is_lost(&self) -> bool {
        if self.guards.iter().any(LockGuard::is_lost) {
            self.lost.cancel();
        }
        self.lost.is_cancelled()
    }

    /// [`Error::Lost`] if any lock of the set is lost, judged now.
    pub fn check(&self) -> Result<(), Error> {
        if self.is_lost() {
            return Err(Error::Lost);
        }
        Ok(())
    }

    /// Resolves once any lock of the set is lost.
    pub async fn lost(&self) {
        self.lost.cancelled().await
    }

    /// Stops renewing and releases every lock in one call
    /// (`POST /v1/locks/release` with `locks`), tried node after node
    /// while a lease runs; against a node of a build before set releases,
    /// one call per lock, at once. `Err(Error::Lost)` if any lock was lost
    /// (not held any more); the others are released all the same.
    ///
    /// The release runs in a task of its own: a caller that stops waiting
    /// for it (a timeout around it) does not stop it, as a guard's release
    /// goes on once asked; the locks, renewed no more, would otherwise stay
    /// held until their leases ran out.
    pub async fn release(mut self) -> Result<(), Error> {
        let guards = std::mem::take(&mut self.guards);
        let task = leasehold_tasks::spawn(release_guards(guards));
        task.await.unwrap_or(Err(Error::Lost))
    }
}

/// Hands `guards` over and releases their locks in one call
/// ([`LockSet::release`]).
async fn release_guards(guards: Vec<LockGuard>) -> Result<(), Error> {
    let Some(transport) = guards.first().map(LockGuard::transport) else {
        return Ok(());
    };
    let handed = futures::future::join_all(guards.into_iter().map(LockGuard::hand_over)).await;
    let mut lost = Ok(());
    let mut held = Vec::with_capacity(handed.len());
    for each in handed {
        match each {
            Ok(lock) => held.push(lock),
            Err(e) => lost = lost.and(Err(e)),
        }
    }
    if held.is_empty() {
        return lost;
    }
    let released = release_together(&*transport, &held).await;
    lost.and(released)
}

impl Drop for LockSet {
    fn drop(&mut self) {
        // The guards release themselves as they drop.
        self.watch.abort();
    }
}

impl std::fmt::Debug for LockSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockSet")
            .field(
                "names",
                &self.guards.iter().map(LockGuard::name).collect::<Vec<_>>(),
            )
            .field("fences", &self.fences())
            .finish_non_exhaustive()
    }
}
