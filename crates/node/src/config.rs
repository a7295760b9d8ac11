//! A node's configuration, validated in one place before anything binds.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use leasehold_api::IDLE_KEPT;
use leasehold_raft::RaftTimings;
use locktable::{LeaseRule, NodeId};

pub use leasehold_protocol::RebuildMode;

/// One node's settings. Build one with [`NodeConfig::new`] (the settings
/// every node must be given) and the `with_` setters; what is not set is
/// what `leasehold serve` runs with when its flag is not given. Its
/// `Debug` leaves the cluster token out.
#[derive(Clone, PartialEq, Eq)]
pub struct NodeConfig {
    /// This node's id.
    pub id: NodeId,
    /// Every member's id and `host:port`, this node's included.
    pub peers: BTreeMap<NodeId, String>,
    /// Where the Raft vote and log are kept.
    pub data_dir: PathBuf,
    /// The operators' secret: membership changes, and any right under
    /// `--acl`; also the members' credential unless `peer_token` is set.
    pub cluster_token: String,
    /// The members' own credential for the peer routes (`--peer-token`):
    /// sent on every peer request and asked of every one. `None`: the
    /// cluster token serves as both.
    pub peer_token: Option<String>,
    /// Other peer credentials taken but never sent (`--peer-token-accept`),
    /// for a rotation one member at a time.
    pub peer_tokens_accepted: Vec<String>,
    /// The default and longest leases.
    pub lease: LeaseRule,
    /// The longest one HTTP call is held waiting (`--max-wait`): an
    /// acquire's `wait_ms` and a watch's are cut to it, and the caller asks
    /// again (the clients do). At most `leasehold_api::MAX_WAIT_MS`.
    pub max_wait: Duration,
    /// The longest a new speaker waits for the members' reports (once
    /// those read hold a record of every grant, a quarter of it more).
    pub rebuild_timeout: Duration,
    /// What a rebuild that missed members does.
    pub rebuild_mode: RebuildMode,
    /// Raft's heartbeat and election timeouts.
    pub timings: RaftTimings,
    /// Lets `/internal/chaos` inject faults (partitions, slow links, wall
    /// clock steps): for chaos tests only.
    pub chaos: bool,
    /// The largest frame of a report: a member cuts its report into frames
    /// no larger, and a rebuilding speaker refuses a larger one. The same
    /// on every member ([`NodeConfig::DEFAULT_REPORT_FRAME_BYTES`] unless a
    /// test wants many frames from few locks).
    pub report_frame_bytes: usize,
    /// How many members hold a record of every grant and renewal before
    /// its client hears of it (`--copies`): `None` is 2, or 1 for a single
    /// node; at most a quorum of `peers`.
    pub copies: Option<usize>,
    /// Members of a running cluster (`host:port`) to ask to add this node
    /// (`--join`), instead of forming a cluster of `peers`: `peers` then
    /// names this node alone, at the address the others reach it.
    pub join: Vec<String>,
    /// On a new data directory, whether to replace this id's old one
    /// (`--rejoin`): a cluster that knows the id on another directory (the
    /// old one was lost) is asked to remove it, and the node joins again
    /// through `join`, or else the other `peers`.
    pub rejoin: bool,
    /// The tokens the public API asks for (`--acl`); `None`: open.
    pub acl: Option<std::sync::Arc<leasehold_acl::Acl>>,
    /// TLS on the node's port and to its members (`--tls-cert`,
    /// `--tls-key`, `--tls-ca`); `None`: plain HTTP.
    pub tls: Option<std::sync::Arc<leasehold_tls::Tls>>,
    /// How long a connection to the node's port may go without sending a
    /// whole request head, idle between requests included, before the node
    /// closes it ([`NodeConfig::DEFAULT_IDLE_TIMEOUT`]).
    pub idle_timeout: Duration,
    /// The highest protocol version this node offers (`--protocol`): the
    /// build's own unless an operator holds the cluster at a lower one to
    /// keep a downgrade open.
    pub protocol: leasehold_raft::version::Protocol,
    /// How many `/`-separated segments of a name label its metrics by
    /// prefix (`--metrics-prefix-depth`, 1 by default: `jobs/` for
    /// `jobs/42`); 0 exports none.
    pub metrics_prefix_depth: usize,
    /// How this node calls its members (`--peer-transport`).
    pub peer_transport: PeerTransport,
}

/// How a node calls its members.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PeerTransport {
    /// Copies, forgets, losses and forwarded batches over one framed
    /// connection to each member, the rest over HTTP/1.1 (docs/design.md,
    /// "Members over the binary transport").
    #[default]
    Frames,
    /// Every call over HTTP/1.1: the switch an operator bisecting a
    /// problem turns. The node still serves members' frames.
    Http,
}

impl std::fmt::Debug for NodeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeConfig")
            .field("id", &self.id)
            .field("peers", &self.peers)
            .field("data_dir", &self.data_dir)
            .field("cluster_token", &"<redacted>")
            .field(
                "peer_token",
                &self.peer_token.as_ref().map(|_| "<redacted>"),
            )
            .field("peer_tokens_accepted", &self.peer_tokens_accepted.len())
            .field("lease", &self.lease)
            .field("rebuild_timeout", &self.rebuild_timeout)
            .field("rebuild_mode", &self.rebuild_mode)
            .field("timings", &self.timings)
            .field("chaos", &self.chaos)
            .field("report_frame_bytes", &self.report_frame_bytes)
            .field("copies", &self.copies)
            .field("join", &self.join)
            .field("rejoin", &self.rejoin)
            .field("acl", &self.acl.as_ref().map(|_| "<tokens>"))
            .field("tls", &self.tls.is_some())
            .field("idle_timeout", &self.idle_timeout)
            .field("protocol", &self.protocol)
            .field("metrics_prefix_depth", &self.metrics_prefix_depth)
            .field("peer_transport", &self.peer_transport)
            .finish()
    }
}

/// A configuration that cannot run.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// This node's id is not among the peers.
    #[error("--id {0} is not in --peers")]
    NotAPeer(NodeId),
    /// The default lease is longer than the maximum.
    #[error("--default-lease must not exceed --max-lease")]
    DefaultAboveMax,
    /// A lease of zero.
    #[error("leases must be longer than zero")]
    ZeroLease,
    /// No cluster token.
    #[error("a cluster token is required (--cluster-token or LEASEHOLD_CLUSTER_TOKEN)")]
    NoToken,
    /// A peer token given empty.
    #[error("--peer-token and --peer-token-accept must not be empty")]
    EmptyPeerToken,
    /// A lease longer than leasehold counts.
    #[error("--max-lease must be at most {} ms (got {} ms)", MAX_LEASE_CAP.as_millis(), .0.as_millis())]
    LeaseTooLong(Duration),
    /// A rebuild timeout outside its range.
    #[error(
        "--rebuild-timeout must be between {} ms and {} ms (got {} ms)",
        REBUILD_TIMEOUT_RANGE.0.as_millis(),
        REBUILD_TIMEOUT_RANGE.1.as_millis(),
        .0.as_millis()
    )]
    RebuildTimeout(Duration),
    /// A protocol version this build does not speak.
    #[error(
        "--protocol must be between {oldest} and {speaks} (this build's range; got {0})",
        oldest = leasehold_raft::version::OLDEST,
        speaks = leasehold_raft::version::SPEAKS
    )]
    Protocol(leasehold_raft::version::Protocol),
    /// A report frame too small to carry the largest lock.
    #[error("--report-frame-bytes must be at least {min}", min = NodeConfig::MIN_REPORT_FRAME_BYTES)]
    ReportFrameTooSmall,
    /// Raft timings the guard cannot keep its promise with.
    #[error("Raft timings: {0}")]
    Timings(String),
    /// An idle timeout outside its range.
    #[error(
        "the idle timeout must be between {} s and {} s (got {:?})",
        IDLE_TIMEOUT_RANGE.0.as_secs(),
        IDLE_TIMEOUT_RANGE.1.as_secs(),
        .0
    )]
    IdleTimeout(Duration),
    /// `--max-wait` under a second: a waiting client would ask again and
    /// again.
    #[error("--max-wait must be at least 1s (got {0:?})")]
    MaxWaitTooShort(Duration),
    /// A number of copies no write could reach (or none at all).
    #[error("--copies must be between 1 and a quorum of the members ({quorum}), got {copies}")]
    Copies {
        /// The value given.
        copies: usize,
        /// A quorum of the members.
        quorum: usize,
    },
}

/// The longest `--max-lease` a node accepts: a day. Leases are counted in
/// nanoseconds on the monotonic clock; a day leaves every sum far from
/// overflow, and a lock held longer is a lock that should be renewed.
pub const MAX_LEASE_CAP: Duration = LeaseRule::LONGEST;

/// The range of [`NodeConfig::idle_timeout`]: a connection must have time
/// to send its head, and hyper adds the timeout to the clock's reading.
pub const IDLE_TIMEOUT_RANGE: (Duration, Duration) =
    (Duration::from_secs(1), Duration::from_secs(3600));

// The members' transport is a node's client like any other: it must drop
// an idle connection as early as one (`leasehold_api::IDLE_KEPT`).
const _: () = assert!(leasehold_raft::http1::IDLE_KEPT.as_secs() <= IDLE_KEPT.as_secs());

/// The range of `--rebuild-timeout`: long enough for one round trip, short
/// enough that a rebuild missing a member still ends.
pub const REBUILD_TIMEOUT_RANGE: (Duration, Duration) =
    (Duration::from_millis(10), Duration::from_secs(600));

impl NodeConfig {
    /// The longest a new speaker waits for the members' reports unless
    /// told otherwise (`--rebuild-timeout`).
    pub const DEFAULT_REBUILD_TIMEOUT: Duration = Duration::from_secs(2);
    /// The report frame size nodes run with: about 14 000 locks of short
    /// names a frame.
    pub const DEFAULT_REPORT_FRAME_BYTES: usize = 1 << 20;
    /// The name segments that label the metrics by prefix when none is
    /// given.
    pub const DEFAULT_METRICS_PREFIX_DEPTH: usize = 1;
    /// The smallest report frame allowed: room for the largest lock the API
    /// admits (a name, holder and data at their limits take under 5 KiB).
    pub const MIN_REPORT_FRAME_BYTES: usize = 64 << 10;
    /// The number of copies when none is given (fewer for a single node).
    pub const DEFAULT_COPIES: usize = leasehold_protocol::DEFAULT_COPIES;
    /// How long a connection may wait to send a whole request head, or
    /// sit idle between requests: a client that opens connections and
    /// sends no head (or one a byte at a time) holds none for longer
    /// (`leasehold_api::IDLE_TIMEOUT`; clients keep idle connections
    /// `leasehold_api::IDLE_KEPT`).
    pub const DEFAULT_IDLE_TIMEOUT: Duration = leasehold_api::IDLE_TIMEOUT;

    /// A node `id` of the cluster `peers` (every member's id and
    /// `host:port`, this node's included), keeping its vote and log in
    /// `data_dir`, with the cluster's secret `cluster_token`; every other
    /// setting at its default. Not checked until [`NodeConfig::validate`]
    /// (which `start` calls).
    pub fn new<A: Into<String>>(
        id: NodeId,
        peers: impl IntoIterator<Item = (NodeId, A)>,
        data_dir: impl Into<PathBuf>,
        cluster_token: impl Into<String>,
    ) -> Self {
        NodeConfig {
            id,
            peers: peers
                .into_iter()
                .map(|(id, addr)| (id, addr.into()))
                .collect(),
            data_dir: data_dir.into(),
            cluster_token: cluster_token.into(),
            peer_token: None,
            peer_tokens_accepted: Vec::new(),
            lease: LeaseRule::default(),
            max_wait: Duration::from_millis(leasehold_api::MAX_WAIT_MS),
            rebuild_timeout: Self::DEFAULT_REBUILD_TIMEOUT,
            rebuild_mode: RebuildMode::default(),
            timings: RaftTimings::default(),
            chaos: false,
            report_frame_bytes: Self::DEFAULT_REPORT_FRAME_BYTES,
            copies: None,
            join: Vec::new(),
            rejoin: false,
            acl: None,
            tls: None,
            idle_timeout: Self::DEFAULT_IDLE_TIMEOUT,
            protocol: leasehold_raft::version::SPEAKS,
            metrics_prefix_depth: Self::DEFAULT_METRICS_PREFIX_DEPTH,
            peer_transport: PeerTransport::default(),
        }
    }

    /// Calling the members over `peer_transport`.
    pub fn with_peer_transport(self, peer_transport: PeerTransport) -> Self {
        NodeConfig {
            peer_transport,
            ..self
        }
    }

    /// With metrics labelled by name prefixes of this many segments (0:
    /// none).
    pub fn with_metrics_prefix_depth(self, metrics_prefix_depth: usize) -> Self {
        NodeConfig {
            metrics_prefix_depth,
            ..self
        }
    }

    /// With this longest wait for a connection's next request head, within
    /// [`IDLE_TIMEOUT_RANGE`]. Not far above `leasehold_api::IDLE_KEPT`
    /// (20 s), the members' pooled connections and the client's may go out
    /// just as the node closes them, and a request on one is answered by
    /// no one.
    pub fn with_idle_timeout(self, idle_timeout: Duration) -> Self {
        NodeConfig {
            idle_timeout,
            ..self
        }
    }

    /// Replacing this id's lost data directory when this one is new
    /// (`--rejoin`; [`NodeConfig::rejoin`]).
    pub fn with_rejoin(self, rejoin: bool) -> Self {
        NodeConfig { rejoin, ..self }
    }

    /// Offering protocol versions up to `protocol` (`--protocol`).
    pub fn with_protocol(self, protocol: leasehold_raft::version::Protocol) -> Self {
        NodeConfig { protocol, ..self }
    }

    /// With these default and longest leases.
    pub fn with_lease(self, lease: LeaseRule) -> Self {
        NodeConfig { lease, ..self }
    }

    /// With this longest wait of one HTTP call ([`NodeConfig::max_wait`]),
    /// cut to `leasehold_api::MAX_WAIT_MS`.
    pub fn with_max_wait(self, max_wait: Duration) -> Self {
        NodeConfig {
            max_wait: max_wait.min(Duration::from_millis(leasehold_api::MAX_WAIT_MS)),
            ..self
        }
    }

    /// With this longest wait for the members' reports at a rebuild.
    pub fn with_rebuild_timeout(self, rebuild_timeout: Duration) -> Self {
        NodeConfig {
            rebuild_timeout,
            ..self
        }
    }

    /// With this answer to a rebuild that missed members.
    pub fn with_rebuild_mode(self, rebuild_mode: RebuildMode) -> Self {
        NodeConfig {
            rebuild_mode,
            ..self
        }
    }

    /// With these Raft heartbeat and election timeouts.
    pub fn with_timings(self, timings: RaftTimings) -> Self {
        NodeConfig { timings, ..self }
    }

    /// With the public API behind the tokens of `acl` (`--acl`).
    pub fn with_acl(self, acl: leasehold_acl::Acl) -> Self {
        NodeConfig {
            acl: Some(std::sync::Arc::new(acl)),
            ..self
        }
    }

    /// Serving HTTPS and talking HTTPS to members with `tls` (loaded
    /// already; [`crate::RunningNode::reload_tls`] reads its files again).
    pub fn with_tls(self, tls: std::sync::Arc<leasehold_tls::Tls>) -> Self {
        NodeConfig {
            tls: Some(tls),
            ..self
        }
    }

    /// With fault injection on `/internal/chaos` allowed or not.
    pub fn with_chaos(self, chaos: bool) -> Self {
        NodeConfig { chaos, ..self }
    }

    /// With this largest report frame (the same on every member).
    pub fn with_report_frame_bytes(self, report_frame_bytes: usize) -> Self {
        NodeConfig {
            report_frame_bytes,
            ..self
        }
    }

    /// With `token` as the members' own credential, and `accepted` taken
    /// from members too (a rotation under way).
    pub fn with_peer_token(self, token: Option<String>, accepted: Vec<String>) -> Self {
        NodeConfig {
            peer_token: token,
            peer_tokens_accepted: accepted,
            ..self
        }
    }

    /// The credential this node sends on its peer requests.
    pub fn sent_peer_token(&self) -> &str {
        self.peer_token.as_deref().unwrap_or(&self.cluster_token)
    }

    /// Whether `given` is a credential a member may send: the one this
    /// node sends, or one it also accepts (each compared in constant time).
    pub fn takes_peer_token(&self, given: &[u8]) -> bool {
        let sent = leasehold_raft::token_matches(self.sent_peer_token(), given);
        let other = self.peer_tokens_accepted.iter().fold(false, |any, t| {
            any | leasehold_raft::token_matches(t, given)
        });
        sent | other
    }

    /// With this many copies of every grant (`None`: the default).
    pub fn with_copies(self, copies: Option<usize>) -> Self {
        NodeConfig { copies, ..self }
    }

    /// Joins the running cluster of the members at `join` instead of
    /// forming one (see [`NodeConfig::join`]).
    pub fn with_join(self, join: Vec<String>) -> Self {
        NodeConfig { join, ..self }
    }

    /// A quorum of the members.
    pub fn quorum(&self) -> usize {
        self.peers.len() / 2 + 1
    }

    /// How many members must hold a record of a grant before its client
    /// hears of it.
    pub fn copies(&self) -> usize {
        self.copies_for(self.peers.len())
    }

    /// How many members must hold a record of a grant in a cluster of
    /// `members`: `--copies`, or 2 by default, never more than a quorum of
    /// them (a cluster that shrank, or a single node, keeps what it can).
    pub fn copies_for(&self, members: usize) -> usize {
        leasehold_protocol::copies_for(self.copies, members)
    }

    /// The longest a speaker's crash can leave the cluster without one that
    /// serves, once a quorum runs: the followers notice after the leader
    /// lease and an election timeout, and the new speaker's rebuild reads
    /// for at most `--rebuild-timeout` (proceed) or half of it (strict: a
    /// dead member is waited for a quarter, a slow one a quarter more).
    /// Round trips and a loaded machine come on top.
    pub fn failover_bound(&self) -> Duration {
        let election = 2 * self.timings.leader_lease();
        let rebuild = match self.rebuild_mode {
            RebuildMode::Strict => self.rebuild_timeout / 2,
            RebuildMode::Proceed => self.rebuild_timeout,
        };
        election + rebuild
    }

    /// The shortest lease a holder that renews when a third of it has
    /// passed (the Rust client's schedule) keeps across one crash: two
    /// thirds of it must outlast [`NodeConfig::failover_bound`].
    pub fn shortest_lease_kept(&self) -> Duration {
        self.failover_bound() * 3 / 2
    }

    /// Whether a member that refuses votes for `lease` after a heartbeat
    /// (its `--election-timeout-max`) can join a cluster that runs this
    /// node's heartbeats: the speaker's guard counts on the shortest lease
    /// any member runs with, and must still be renewed twice over by
    /// heartbeats. The error says what to change.
    pub fn honours_leader_lease(&self, lease: Duration) -> Result<(), String> {
        let heartbeat = Duration::from_millis(self.timings.heartbeat_ms);
        let margin = leasehold_protocol::LEASE_MARGIN;
        if lease.saturating_sub(margin) < 2 * heartbeat {
            return Err(format!(
                "the joining node runs --election-timeout-max {} ms: with this cluster's \
                 {} ms heartbeats the speaker's lease would not be renewed twice over; start \
                 it with the cluster's timings (at least {} ms)",
                lease.as_millis(),
                heartbeat.as_millis(),
                (2 * heartbeat + margin).as_millis()
            ));
        }
        Ok(())
    }

    /// Checks the settings hang together.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.peers.contains_key(&self.id) {
            return Err(ConfigError::NotAPeer(self.id));
        }
        if self.lease.default.is_zero() || self.lease.max.is_zero() {
            return Err(ConfigError::ZeroLease);
        }
        if self.lease.default > self.lease.max {
            return Err(ConfigError::DefaultAboveMax);
        }
        if self.lease.max > MAX_LEASE_CAP {
            return Err(ConfigError::LeaseTooLong(self.lease.max));
        }
        let (shortest, longest) = REBUILD_TIMEOUT_RANGE;
        if self.rebuild_timeout < shortest || self.rebuild_timeout > longest {
            return Err(ConfigError::RebuildTimeout(self.rebuild_timeout));
        }
        if self.peer_token.as_deref() == Some("")
            || self.peer_tokens_accepted.iter().any(String::is_empty)
        {
            return Err(ConfigError::EmptyPeerToken);
        }
        if self.cluster_token.is_empty() {
            return Err(ConfigError::NoToken);
        }
        let (shortest, longest) = IDLE_TIMEOUT_RANGE;
        if self.idle_timeout < shortest || self.idle_timeout > longest {
            return Err(ConfigError::IdleTimeout(self.idle_timeout));
        }
        if self.max_wait < Duration::from_secs(1) {
            return Err(ConfigError::MaxWaitTooShort(self.max_wait));
        }
        check_timings(&self.timings).map_err(ConfigError::Timings)?;
        if !(leasehold_raft::version::OLDEST..=leasehold_raft::version::SPEAKS)
            .contains(&self.protocol)
        {
            return Err(ConfigError::Protocol(self.protocol));
        }
        if self.report_frame_bytes < Self::MIN_REPORT_FRAME_BYTES {
            return Err(ConfigError::ReportFrameTooSmall);
        }
        let (copies, quorum) = (self.copies.unwrap_or(Self::DEFAULT_COPIES), self.quorum());
        // Without a list of the members (a node that joins, or restarts
        // from its data directory), the cluster's quorum is not known here.
        let members_known = self.join.is_empty() && self.peers.len() > 1;
        if copies == 0 || (copies > quorum && members_known) {
            return Err(ConfigError::Copies { copies, quorum });
        }
        Ok(())
    }
}

/// The shortest heartbeat interval: openraft times a replication request
/// out after one, and an HTTP round trip must fit well inside it.
pub const MIN_HEARTBEAT: Duration = Duration::from_millis(10);

/// Why `timings` cannot run: the speaker's guard grants until
/// [`leasehold_protocol::LEASE_MARGIN`] before its leader lease
/// (`election_timeout_max`) ends, counted from its last acknowledged
/// heartbeat; a lease not renewed twice over by heartbeats, or elections
/// begun before a few heartbeats were missed, would leave it barred or
/// deposed on every hiccup.
fn check_timings(t: &RaftTimings) -> Result<(), String> {
    let margin = u64::try_from(leasehold_protocol::LEASE_MARGIN.as_millis()).unwrap_or(u64::MAX);
    let min_heartbeat = u64::try_from(MIN_HEARTBEAT.as_millis()).unwrap_or(u64::MAX);
    if t.heartbeat_ms < min_heartbeat {
        return Err(format!(
            "--heartbeat-interval must be at least {min_heartbeat} ms (got {})",
            t.heartbeat_ms
        ));
    }
    if t.election_min_ms < 3 * t.heartbeat_ms {
        return Err(format!(
            "--election-timeout-min must be at least three heartbeats, {} ms (got {})",
            3 * t.heartbeat_ms,
            t.election_min_ms
        ));
    }
    if t.election_max_ms <= t.election_min_ms {
        return Err(format!(
            "--election-timeout-max must exceed --election-timeout-min ({} ms; got {})",
            t.election_min_ms, t.election_max_ms
        ));
    }
    let lease = t.election_max_ms.saturating_sub(margin);
    if lease < 2 * t.heartbeat_ms {
        return Err(format!(
            "--election-timeout-max must leave the speaker's lease ({} ms less a {margin} ms \
             margin) at least two heartbeats, {} ms (got {})",
            t.election_max_ms,
            2 * t.heartbeat_ms + margin,
            t.election_max_ms
        ));
    }
    t.config().map(|_| ()).map_err(|e| e.to_string())
}

/// A configuration that passed [`NodeConfig::validate`]: [`crate::start`]
/// runs one without checking it again.
#[derive(Debug, Clone)]
pub struct ValidConfig(NodeConfig);

impl TryFrom<NodeConfig> for ValidConfig {
    type Error = ConfigError;

    fn try_from(config: NodeConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(ValidConfig(config))
    }
}

impl ValidConfig {
    /// The configuration.
    pub fn into_inner(self) -> NodeConfig {
        self.0
    }
}

impl std::ops::Deref for ValidConfig {
    type Target = NodeConfig;

    fn deref(&self) -> &NodeConfig {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A valid configuration of a one-node cluster.
    fn single_node() -> NodeConfig {
        NodeConfig::new(1, [(1, "127.0.0.1:1")], "unused", "t")
    }

    #[test]
    fn a_report_frame_must_hold_the_largest_lock() {
        let mut config = single_node();
        assert_eq!(config.validate(), Ok(()));
        config.report_frame_bytes = NodeConfig::MIN_REPORT_FRAME_BYTES - 1;
        assert_eq!(config.validate(), Err(ConfigError::ReportFrameTooSmall));
        config.report_frame_bytes = NodeConfig::MIN_REPORT_FRAME_BYTES;
        assert_eq!(config.validate(), Ok(()));
    }

    #[test]
    fn a_max_wait_is_at_least_a_second_and_at_most_ten_minutes() {
        let with = |wait| single_node().with_max_wait(wait);
        assert_eq!(with(Duration::from_secs(1)).validate(), Ok(()));
        let short = Duration::from_millis(999);
        assert_eq!(
            with(short).validate(),
            Err(ConfigError::MaxWaitTooShort(short))
        );
        let long = with(Duration::from_secs(3600));
        assert_eq!(
            long.max_wait,
            Duration::from_millis(leasehold_api::MAX_WAIT_MS)
        );
        assert_eq!(long.validate(), Ok(()));
    }

    #[test]
    fn an_idle_timeout_leaves_time_for_a_head_and_does_not_overflow() {
        let with = |idle| single_node().with_idle_timeout(idle).validate();
        assert_eq!(with(NodeConfig::DEFAULT_IDLE_TIMEOUT), Ok(()));
        let (shortest, longest) = IDLE_TIMEOUT_RANGE;
        assert_eq!(with(shortest), Ok(()));
        assert_eq!(with(longest), Ok(()));
        for idle in [Duration::ZERO, Duration::from_millis(999), Duration::MAX] {
            assert_eq!(with(idle), Err(ConfigError::IdleTimeout(idle)));
        }
    }

    #[test]
    fn raft_timings_must_leave_the_guard_room() {
        let with = |heartbeat_ms, election_min_ms, election_max_ms| {
            single_node()
                .with_timings(RaftTimings {
                    heartbeat_ms,
                    election_min_ms,
                    election_max_ms,
                })
                .validate()
        };
        assert_eq!(with(50, 150, 300), Ok(()), "the defaults");
        assert_eq!(with(200, 1000, 2000), Ok(()), "a slow network's");
        for (hb, min, max, says) in [
            (5, 150, 300, "--heartbeat-interval"),
            (50, 100, 300, "three heartbeats"),
            (50, 300, 300, "must exceed"),
            (50, 150, 160, "two heartbeats"),
        ] {
            match with(hb, min, max) {
                Err(ConfigError::Timings(why)) => assert!(why.contains(says), "{why}"),
                other => panic!("{hb}/{min}/{max}: {other:?}"),
            }
        }
    }

    #[test]
    fn copies_default_to_two_and_never_exceed_a_quorum() {
        let mut config = single_node();
        assert_eq!(config.copies(), 1, "a single node is its only copy");
        assert_eq!(config.validate(), Ok(()));
        config.peers = (1..=5).map(|i| (i, format!("127.0.0.1:{i}"))).collect();
        assert_eq!(config.copies(), 2);
        config.copies = Some(3);
        assert_eq!(config.validate(), Ok(()));
        config.copies = Some(4);
        assert_eq!(
            config.validate(),
            Err(ConfigError::Copies {
                copies: 4,
                quorum: 3
            })
        );
        config.copies = Some(0);
        assert!(config.validate().is_err());
    }

    #[test]
    fn copies_follow_the_members_the_node_finds() {
        // A node restarted from its data directory names only itself: its
        // copies come from the members its log names, not from its flags.
        let mut config = single_node().with_copies(Some(2));
        assert_eq!(
            config.validate(),
            Ok(()),
            "the cluster's size is not known yet"
        );
        assert_eq!(config.copies_for(1), 1);
        assert_eq!(config.copies_for(3), 2);
        config.copies = None;
        assert_eq!(config.copies_for(5), 2);
        config.copies = Some(3);
        assert_eq!(config.copies_for(5), 3);
        assert_eq!(
            config.copies_for(3),
            2,
            "a cluster that shrank keeps what it can"
        );
    }

    #[test]
    fn the_debug_form_leaves_the_cluster_token_out() {
        let config = NodeConfig::new(1, [(1, "127.0.0.1:1")], "/tmp/x", "s3cr3t-token-value");
        let shown = format!("{config:?}");
        assert!(!shown.contains("s3cr3t-token-value"), "{shown}");
        assert!(shown.contains("<redacted>"));
        let valid = format!("{:?}", ValidConfig(config));
        assert!(!valid.contains("s3cr3t-token-value"), "{valid}");
    }

    #[test]
    fn a_joiner_must_run_a_lease_the_clusters_heartbeats_renew_twice() {
        let config = single_node();
        assert_eq!(
            config.honours_leader_lease(Duration::from_millis(300)),
            Ok(())
        );
        assert_eq!(
            config.honours_leader_lease(Duration::from_millis(175)),
            Ok(())
        );
        let refused = config
            .honours_leader_lease(Duration::from_millis(174))
            .unwrap_err();
        assert!(refused.contains("at least 175 ms"), "{refused}");
    }

    #[test]
    fn the_failover_bound_is_two_leader_leases_and_the_rebuild() {
        let config = single_node();
        assert_eq!(config.failover_bound(), Duration::from_millis(2_600));
        assert_eq!(config.shortest_lease_kept(), Duration::from_millis(3_900));
        let strict = config.with_rebuild_mode(RebuildMode::Strict);
        assert_eq!(strict.failover_bound(), Duration::from_millis(1_600));
    }

    #[test]
    fn a_peer_token_is_sent_and_taken_beside_those_a_rotation_accepts() {
        let config = single_node();
        assert_eq!(config.sent_peer_token(), config.cluster_token);
        assert!(config.takes_peer_token(config.cluster_token.as_bytes()));
        let config = config.with_peer_token(Some("peer-new".into()), vec!["peer-old".into()]);
        assert_eq!(config.sent_peer_token(), "peer-new");
        assert!(config.takes_peer_token(b"peer-new"));
        assert!(config.takes_peer_token(b"peer-old"));
        assert!(
            !config.takes_peer_token(config.cluster_token.as_bytes()),
            "the operators' token is no peer credential once one is set"
        );
        assert!(!config.takes_peer_token(b""));
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("peer-new") && !shown.contains("peer-old"),
            "{shown}"
        );
        let empty = single_node().with_peer_token(Some(String::new()), Vec::new());
        assert_eq!(empty.validate(), Err(ConfigError::EmptyPeerToken));
    }
}
