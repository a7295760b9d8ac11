//! The node's tasks: tracked, so that a shutdown waits for them, and
//! started where `leasehold_raft::tasks` says (tokio's scheduler, or a
//! simulated host's own set, which the simulation can pause).

use std::future::Future;

use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;

/// The tasks a node started and has not seen end.
#[derive(Debug, Clone, Default)]
pub(crate) struct Tasks(TaskTracker);

impl Tasks {
    /// Starts `task`, tracked.
    pub(crate) fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        leasehold_raft::tasks::spawn(self.0.track_future(task))
    }

    /// Starts no more tasks' tracking to wait for: [`Tasks::wait`] ends
    /// once the tracked ones have.
    pub(crate) fn close(&self) -> bool {
        self.0.close()
    }

    /// Waits until every tracked task ended (once closed).
    pub(crate) async fn wait(&self) {
        self.0.wait().await
    }

    /// Tracked tasks still running.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}
