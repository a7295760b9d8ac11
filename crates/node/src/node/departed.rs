//! Members gone from the roster lately: a rebuild still reads them (or
//! counts them missing) for as long as a lease of theirs may run, unless
//! they handed their records over as they left.

use std::time::Duration;

use locktable::NodeId;

use super::Node;

impl Node {
    /// The members gone from the roster lately, each with how long it
    /// stays departed: what this node's report tells a rebuilding speaker.
    pub(crate) fn departed_with_time_left(&self) -> Vec<crate::report::Departed> {
        let now = self.clock.now();
        let departed = self.departed.lock().unwrap_or_else(|p| p.into_inner());
        departed
            .iter()
            .filter(|(_, (_, until))| *until > now)
            .map(|(id, (addr, until))| crate::report::Departed {
                node: *id,
                addr: addr.clone(),
                left_ms: leasehold_api::millis_ceil(until.saturating_duration_since(now)),
            })
            .collect()
    }

    /// Takes `member` at `addr`, which another member saw leave the
    /// cluster, as departed for `left` more (or longer, if this node knew
    /// so already); answers whether it did not know it as departed.
    pub(crate) fn adopt_departed(&self, member: NodeId, addr: &str, left: Duration) -> bool {
        let now = self.clock.now();
        let until = now + left;
        {
            let mut handed = self.handed.lock().unwrap_or_else(|p| p.into_inner());
            handed.retain(|_, until| *until > now);
            if handed.contains_key(&member) {
                return false;
            }
        }
        let mut departed = self.departed.lock().unwrap_or_else(|p| p.into_inner());
        match departed.get_mut(&member) {
            Some((_, known)) => {
                *known = (*known).max(until);
                false
            }
            None => {
                departed.insert(member, (addr.to_string(), until));
                true
            }
        }
    }

    /// `member`, gone from the roster, handed every record it kept over
    /// before it left: no rebuild needs to read it (nor take it as
    /// departed from another member's report, for as long as that could
    /// name it).
    pub(crate) fn handed_over(&self, member: NodeId) {
        if self.roster().addr(member).is_some() {
            return;
        }
        let until = self.state().member.departed_until(self.clock.now());
        self.handed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(member, until);
        let was = self
            .departed
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&member);
        if was.is_some() {
            self.forgets.close(member);
            tracing::info!(
                member,
                "a member that left handed its records over: not read again"
            );
        }
    }

    /// The members gone from the roster within the longest lease (plus a
    /// rebuild's time), with their addresses: a rebuild reads them too.
    pub(crate) fn departed(&self) -> Vec<(NodeId, String)> {
        let now = self.clock.now();
        let roster = self.roster();
        let mut departed = self.departed.lock().unwrap_or_else(|p| p.into_inner());
        departed.retain(|member, (_, until)| {
            let reads = *until > now;
            if !reads && roster.addr(*member).is_none() {
                // No rebuild reads it any more: its releases may stop.
                self.forgets.close(*member);
            }
            reads
        });
        // A member added again since is read as a member, once.
        departed
            .iter()
            .filter(|(id, _)| roster.addr(**id).is_none())
            .map(|(id, (addr, _))| (*id, addr.clone()))
            .collect()
    }
}
