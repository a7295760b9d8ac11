//! Pausing a host as SIGSTOP pauses a process: its node's tasks (openraft,
//! the speaker, the HTTP server, its outgoing calls) stop running while
//! simulated time goes on; its clock jumps when it resumes, its timers
//! fire late, and what arrived meanwhile waits: connections in the host's
//! accept queue (filled outside the node's tasks, as a kernel fills it:
//! `net::SimListener::queued`), bytes in its sockets.
//!
//! Each host runs its node inside a `LocalSet` of its own, which
//! `leasehold_raft::tasks` makes every task of the node join; a paused
//! host's set is simply not polled. turmoil keeps stepping the host, so
//! its clock and its network go on.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

use tokio::task::LocalSet;

/// Which hosts are paused, by node id.
#[derive(Debug, Default, Clone)]
pub struct Pauses(Arc<Mutex<BTreeMap<u64, Pause>>>);

#[derive(Debug, Default)]
struct Pause {
    paused: bool,
    /// Woken when the host resumes.
    waker: Option<Waker>,
}

impl Pauses {
    /// Pauses node `id`'s host.
    pub fn pause(&self, id: u64) {
        self.lock().entry(id).or_default().paused = true;
    }

    /// Lets node `id`'s host run again.
    pub fn resume(&self, id: u64) {
        let mut pauses = self.lock();
        let pause = pauses.entry(id).or_default();
        pause.paused = false;
        if let Some(waker) = pause.waker.take() {
            waker.wake();
        }
    }

    /// Runs `life` (a node's, on its host) in a set of tasks of its own,
    /// polled only while node `id` is not paused. A host (re)starts
    /// running.
    pub async fn run<F: Future>(&self, id: u64, life: F) -> F::Output {
        self.resume(id);
        let tasks = LocalSet::new();
        Pausable {
            pauses: self.clone(),
            id,
            life: Box::pin(tasks.run_until(life)),
        }
        .await
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<u64, Pause>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A host's life, polled only while it is not paused.
struct Pausable<F> {
    pauses: Pauses,
    id: u64,
    life: Pin<Box<F>>,
}

impl<F: Future> Future for Pausable<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        {
            let mut pauses = self.pauses.lock();
            let pause = pauses.entry(self.id).or_default();
            if pause.paused {
                pause.waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
        }
        self.life.as_mut().poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn a_paused_host_runs_nothing_until_it_resumes() {
        leasehold_raft::tasks::spawn_locally();
        let pauses = Pauses::default();
        let ticks = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&ticks);
        let host = pauses.clone();
        let outer = tokio::task::LocalSet::new();
        outer
            .run_until(async move {
                tokio::task::spawn_local(async move {
                    host.run(1, async move {
                        // A task of the node's: it must stop with the host.
                        leasehold_raft::tasks::spawn(async move {
                            loop {
                                tokio::time::sleep(Duration::from_millis(10)).await;
                                counted.fetch_add(1, Ordering::SeqCst);
                            }
                        });
                        std::future::pending::<()>().await
                    })
                    .await
                });
                tokio::time::sleep(Duration::from_millis(105)).await;
                let before = ticks.load(Ordering::SeqCst);
                assert_eq!(before, 10);
                pauses.pause(1);
                tokio::time::sleep(Duration::from_millis(1_000)).await;
                assert_eq!(ticks.load(Ordering::SeqCst), before, "ran while paused");
                pauses.resume(1);
                tokio::time::sleep(Duration::from_millis(50)).await;
                assert!(ticks.load(Ordering::SeqCst) > before, "did not resume");
            })
            .await;
    }
}
