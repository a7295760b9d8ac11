//! The task that ends leases on time.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::node::Node;

/// Ends leases and waits on time: sleeps until the table's next deadline or
/// until the table changes.
pub(crate) async fn run_expiry(node: Arc<Node>, stop: CancellationToken) {
    loop {
        node.expiry_armed
            .store(0, std::sync::atomic::Ordering::Release);
        let next = node.poll();
        let sleep = match next {
            Some(at) => at
                .saturating_duration_since(node.clock.now())
                .min(Duration::from_millis(500)),
            None => Duration::from_millis(500),
        };
        let wake_at = node.clock.now() + sleep;
        node.expiry_armed
            .store(wake_at.as_nanos(), std::sync::atomic::Ordering::Release);
        tokio::select! {
            _ = tokio::time::sleep(sleep) => {}
            _ = node.table_changed.notified() => {}
            _ = stop.cancelled() => return,
        }
    }
}
