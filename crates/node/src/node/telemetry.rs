//! What this node tells of itself: its metrics and its failover history.

use leasehold_raft::WatchReceiver;

use super::Node;

impl Node {
    /// Keeps `report` in this node's failover history, stamped with the
    /// wall clock now.
    pub(crate) fn record_rebuild(&self, report: leasehold_api::RebuildReport) {
        let since_epoch = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let at_unix_ms = u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX);
        self.metrics.rebuilds.inc();
        self.metrics
            .rebuild_duration
            .observe(report.took_ms as f64 / 1000.0);
        self.metrics
            .members_missing_at_rebuild
            .set(i64::try_from(report.members_missing.len()).unwrap_or(i64::MAX));
        let entry = leasehold_api::HistoryEntry {
            at: leasehold_api::format_rfc3339_ms(at_unix_ms),
            at_unix_ms,
            report,
        };
        let mut history = self.history.lock().unwrap_or_else(|e| e.into_inner());
        if history.len() == leasehold_api::HISTORY_LEN {
            history.pop_front();
        }
        history.push_back(entry);
    }

    /// Every metric, in the Prometheus text format (`openmetrics`: in
    /// OpenMetrics text), the gauges read now: each describes this moment.
    pub fn metrics_text(&self, openmetrics: bool) -> String {
        let speaks = self.is_leader() && self.is_rebuilt();
        let (locks, waiting) = {
            let state = self.state();
            let queues = state.member.queue_lengths().filter(|_| speaks);
            self.metrics.prefixes.set_queues(queues);
            state.member.table_size()
        };
        let m = &self.metrics;
        let as_gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        m.locks_held.set(if speaks { as_gauge(locks) } else { 0 });
        m.waiters.set(if speaks { as_gauge(waiting) } else { 0 });
        m.is_speaker.set(i64::from(speaks));
        if !speaks {
            m.members_missing_at_rebuild.set(0);
        }
        let raft = self.raft.metrics().borrow_watched().clone();
        m.raft_term
            .set(i64::try_from(raft.current_term).unwrap_or(i64::MAX));
        m.has_speaker.set(i64::from(raft.current_leader.is_some()));
        let members = match speaks {
            true => self.cluster().members,
            false => Vec::new(),
        };
        m.set_reachable(
            members
                .iter()
                .map(|member| (member.id, member.reachable != Some(false))),
        );
        match openmetrics {
            true => m.encode(),
            false => m.encode_prometheus(),
        }
    }

    /// This node's failover history, oldest first.
    pub fn history(&self) -> leasehold_api::HistoryAnswer {
        let speaks = self.is_leader() && self.state().member.is_rebuilt();
        let history = self.history.lock().unwrap_or_else(|e| e.into_inner());
        leasehold_api::HistoryAnswer {
            node: self.id(),
            rebuilds: history.iter().cloned().collect(),
            view: if speaks { "speaker" } else { "own" }.into(),
        }
    }

    /// Exports `elector`'s counts on this node's `/metrics`, labelled by
    /// election (`leasehold_election_leading`, `_has_leader`,
    /// `_leader_fence`, `_leader_changes_total`, `_terms_led_total`,
    /// `_leaderless_seconds_total`), read off [`Elector::stats`] when
    /// scraped.
    ///
    /// [`Elector::stats`]: leasehold_client::Elector::stats
    pub fn export_election(&self, elector: &leasehold_client::Elector) {
        self.metrics.elections.add(elector);
    }
}
