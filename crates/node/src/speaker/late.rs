//! The late reads of the members a strict rebuild missed: once the table
//! serves with new grants held back, each member the rebuild counted
//! missing is read again by the rebuild's term, a failed read tried again
//! a while later (backing off to [`LATE_READ_AT_MOST`]), for as long as
//! the protocol wants it ([`Member::late_read_wanted`]: this node still
//! speaks for the term and the hold runs); its report is taken back into
//! the table ([`Member::late_read`]).
//!
//! [`Member::late_read_wanted`]: leasehold_protocol::Member::late_read_wanted
//! [`Member::late_read`]: leasehold_protocol::Member::late_read

use std::sync::Arc;
use std::time::Duration;

use leasehold_protocol::READ_AGAIN_AFTER;
use locktable::NodeId;
use tokio::time::Instant;
use tracing::Instrument;

use super::{member_read, read_member};
use crate::node::Node;

/// The longest wait between two late reads of one member.
const LATE_READ_AT_MOST: Duration = Duration::from_millis(500);

/// Starts a task per member in `missing` (at the address each had) that
/// reads it again for `term` while the protocol wants it.
pub(super) fn start(node: &Arc<Node>, term: u64, missing: Vec<(NodeId, String)>) {
    for (id, addr) in missing {
        let reader = Arc::clone(node);
        node.tasks
            .spawn(read_late(reader, term, id, addr).in_current_span());
    }
}

/// Whether this node still wants member `id` read for `term`.
fn wanted(node: &Node, term: u64, id: NodeId) -> bool {
    let guard = node.guard();
    let now = node.clock.now();
    node.state().member.late_read_wanted(term, id, &guard, now)
}

/// Reads member `id` for `term` until it answers or is no longer wanted;
/// each read bounded by a quarter of the rebuild timeout.
async fn read_late(node: Arc<Node>, term: u64, id: NodeId, addr: String) {
    let mut wait = READ_AGAIN_AFTER;
    while wanted(&node, term, id) {
        let deadline = Instant::now() + node.config.rebuild_timeout / 4;
        let node = Arc::clone(&node);
        let (_, _, report) = read_member(
            Arc::clone(&node),
            id,
            addr.clone(),
            term,
            deadline,
            None,
            None,
        )
        .await;
        match report {
            Ok(report) => {
                let read = member_read(id, report);
                let guard = node.guard();
                let now = node.clock.now();
                let mut state = node.state();
                if let Ok(done) = state.member.late_read(term, read, &guard, now) {
                    node.dispatch(&mut state);
                    if done.taken_back + done.merged > 0 {
                        node.changed(&state);
                    }
                }
                return;
            }
            Err(e) => {
                tracing::debug!(member = id, term, "a late read failed: {e}");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(LATE_READ_AT_MOST);
            }
        }
    }
}
