//! Where leasehold's tasks run: on tokio's scheduler in production, or on
//! the current `LocalSet` once [`spawn_locally`] was called on this thread.
//!
//! A simulator runs each host's node (and an application embedding it)
//! inside a `LocalSet` of its own and calls [`spawn_locally`]: every task
//! the node, its HTTP server, openraft and the client start then stays in
//! that set, so that the host can be paused (the set not polled while time
//! goes on, as SIGSTOP stops a process) without its tasks running
//! elsewhere meanwhile.

use std::cell::Cell;
use std::future::Future;

use tokio::task::JoinHandle;

thread_local! {
    static LOCAL: Cell<bool> = const { Cell::new(false) };
}

/// Spawns every later task asked for on this thread onto the current
/// `LocalSet` (which must exist where [`spawn`] is called).
pub fn spawn_locally() {
    LOCAL.set(true);
}

/// Starts `task` where this thread's tasks run (see [`spawn_locally`]).
pub fn spawn<F>(task: F) -> JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    if LOCAL.get() {
        tokio::task::spawn_local(task)
    } else {
        tokio::spawn(task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[tokio::test]
    async fn a_local_task_runs_only_while_its_set_is_polled() {
        // Without the switch a task runs on the scheduler, set or no set.
        spawn(async {}).await.unwrap();
        spawn_locally();
        let local = tokio::task::LocalSet::new();
        let ran = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&ran);
        local.spawn_local(async move {
            spawn(async move { flag.store(true, Ordering::SeqCst) });
        });
        tokio::task::yield_now().await;
        assert!(!ran.load(Ordering::SeqCst), "the set was not polled");
        local.await;
        assert!(ran.load(Ordering::SeqCst));
        LOCAL.set(false);
    }
}
