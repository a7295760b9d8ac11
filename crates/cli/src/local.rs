//! `leasehold up` and `leasehold serve`: run nodes.

use std::path::PathBuf;
use std::time::Duration;

use clap::ValueEnum;
use leasehold_node::{
    NodeConfig, PeerTransport, RebuildMode, RunningNode, StartError, ValidConfig,
};
use leasehold_raft::RaftTimings;
use locktable::LeaseRule;

/// What a rebuild that missed members does.
#[derive(Clone, Copy, ValueEnum)]
pub enum Mode {
    /// Serve with what was read.
    Proceed,
    /// Also hold new grants back for the longest lease.
    Strict,
}

impl From<RebuildMode> for Mode {
    fn from(mode: RebuildMode) -> Self {
        match mode {
            RebuildMode::Proceed => Mode::Proceed,
            RebuildMode::Strict => Mode::Strict,
        }
    }
}

/// How a node calls its members.
#[derive(Clone, Copy, ValueEnum)]
pub enum PeerWire {
    /// Copies, forgets, losses and forwarded batches over one framed
    /// connection to each member; the rest over HTTP.
    Frames,
    /// Every call over HTTP/1.1.
    Http,
}

impl From<PeerWire> for PeerTransport {
    fn from(wire: PeerWire) -> Self {
        match wire {
            PeerWire::Frames => PeerTransport::Frames,
            PeerWire::Http => PeerTransport::Http,
        }
    }
}

impl From<Mode> for RebuildMode {
    fn from(mode: Mode) -> Self {
        match mode {
            Mode::Proceed => RebuildMode::Proceed,
            Mode::Strict => RebuildMode::Strict,
        }
    }
}

/// A default of the node's, as the flags give it: whole milliseconds.
fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The flags of `serve`.
#[derive(clap::Args)]
pub struct ServeArgs {
    /// This node's id.
    #[arg(long)]
    pub id: u64,
    /// The address to listen on, host:port.
    #[arg(long)]
    pub listen: String,
    /// Every member, this one included: 1=host:port,2=host:port,... Needed
    /// only to form a new cluster: a restarted member reads its members
    /// from its data directory.
    #[arg(long, value_parser = parse_peer, value_delimiter = ',', conflicts_with = "join")]
    peers: Vec<(u64, String)>,
    /// Members of a running cluster to ask to add this node
    /// (host:port,...), instead of --peers (docs/operations.md).
    #[arg(long, value_delimiter = ',')]
    join: Vec<String>,
    /// On a new (empty) data directory: if the cluster knows this id on
    /// another one (the old disk was lost), ask it to remove that one and
    /// join again under this id (docs/operations.md). Harmless on a
    /// directory that is not new, or on a cluster's first start.
    #[arg(long)]
    rejoin: bool,
    /// The address the other members reach this node at (default:
    /// --listen); with --join, the address it is added under.
    #[arg(long)]
    advertise: Option<String>,
    /// Where the Raft vote and log are kept.
    #[arg(long)]
    data_dir: PathBuf,
    /// The operators' secret (membership changes; any right under --acl),
    /// and the members' too unless --peer-token is given.
    #[arg(long, env = "LEASEHOLD_CLUSTER_TOKEN", hide_env_values = true)]
    cluster_token: String,
    /// The members' own secret for the peer routes, apart from the
    /// operators' cluster token (docs/security.md, "Peer tokens").
    #[arg(long, env = "LEASEHOLD_PEER_TOKEN", hide_env_values = true)]
    peer_token: Option<String>,
    /// Peer tokens also taken from members, never sent: for a rotation,
    /// one member at a time (comma-separated).
    #[arg(
        long,
        env = "LEASEHOLD_PEER_TOKEN_ACCEPT",
        hide_env_values = true,
        value_delimiter = ','
    )]
    peer_token_accept: Vec<String>,
    /// The lease of a request naming none (a duration: 500ms, 10s, 2m; a
    /// bare number is milliseconds; default: 30s, or --max-lease if that
    /// is shorter).
    #[arg(long, value_parser = crate::duration::millis)]
    default_lease: Option<u64>,
    /// The longest one HTTP call is held waiting (a duration): an
    /// acquire's wait and a watch's are cut to it, and the client asks
    /// again. Set it under the idle timeout of a proxy or load balancer in
    /// front of the nodes. At most and by default 10m (a watch waits at
    /// most 60s anyway).
    #[arg(long, value_parser = crate::duration::millis, default_value_t = leasehold_api::MAX_WAIT_MS)]
    max_wait: u64,
    /// The longest lease granted (a duration, as --default-lease).
    #[arg(long, value_parser = crate::duration::millis, default_value_t = millis(LeaseRule::MAX_LEASE))]
    max_lease: u64,
    /// The longest a new speaker waits for the members' reports (a
    /// duration).
    #[arg(long, value_parser = crate::duration::millis, default_value_t = millis(NodeConfig::DEFAULT_REBUILD_TIMEOUT))]
    rebuild_timeout: u64,
    /// What a rebuild that missed members does.
    #[arg(long, value_enum, default_value_t = RebuildMode::default().into())]
    rebuild_mode: Mode,
    /// How this node calls its members: `frames` (copies, forgets and
    /// forwarded batches on one framed connection to each member) or
    /// `http` (every call over HTTP/1.1, to rule the frames out when
    /// bisecting a problem). Members of either setting work together.
    #[arg(long, value_enum, default_value_t = PeerWire::Frames)]
    peer_transport: PeerWire,
    /// A TOML file of the tokens the public API asks for
    /// (docs/security.md); without it the API is open.
    #[arg(long, env = "LEASEHOLD_ACL")]
    acl: Option<PathBuf>,
    /// This node's certificate chain (PEM): the node serves HTTPS on its
    /// port and talks HTTPS to its members (docs/security.md). Read again
    /// on SIGHUP.
    #[arg(long, env = "LEASEHOLD_TLS_CERT", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// This node's private key (PEM), with --tls-cert.
    #[arg(long, env = "LEASEHOLD_TLS_KEY", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// The CA (PEM) members' certificates are verified against; with it,
    /// members speak mutual TLS (a peer shows its certificate as a client
    /// too). Without it, members' certificates are verified against the
    /// public roots. Ignored (with a warning) without --tls-cert: the
    /// client commands read the same LEASEHOLD_TLS_CA.
    #[arg(long, env = "LEASEHOLD_TLS_CA")]
    tls_ca: Option<PathBuf>,
    /// Accept fault injection on /internal/chaos (chaos tests only).
    #[arg(long, hide = true)]
    chaos: bool,
    /// The largest frame of a rebuild report, in bytes; the same on every
    /// member (tests set it low to read a report in many frames).
    #[arg(long, hide = true, default_value_t = NodeConfig::DEFAULT_REPORT_FRAME_BYTES)]
    report_frame_bytes: usize,
    /// How many members know of every grant before its client hears of it
    /// (at most a quorum; default 2, or 1 for a single node): a lock
    /// survives the loss of fewer members than this.
    #[arg(long)]
    copies: Option<usize>,
    /// How many `/`-separated segments of a lock's name label its metrics
    /// by prefix (`jobs/` for `jobs/42` at 1); 0 exports none. At most
    /// 100 prefixes get series of their own (docs/operations.md).
    #[arg(long, default_value_t = NodeConfig::DEFAULT_METRICS_PREFIX_DEPTH)]
    metrics_prefix_depth: usize,
    /// The highest protocol version this node offers (default: its
    /// build's). Kept below the build's on every member, it holds the
    /// cluster at that version, so that a downgrade stays open
    /// (docs/operations.md, "Upgrades").
    #[arg(long, default_value_t = leasehold_raft::version::SPEAKS)]
    protocol: leasehold_raft::version::Protocol,
    /// Raft's heartbeat interval (a duration); the same on every member
    /// (docs/operations.md, "Timings").
    #[arg(long, value_parser = crate::duration::millis, default_value_t = RaftTimings::default().heartbeat_ms)]
    heartbeat_interval: u64,
    /// The shortest election timeout (a duration); the same on every member.
    #[arg(long, value_parser = crate::duration::millis, default_value_t = RaftTimings::default().election_min_ms)]
    election_timeout_min: u64,
    /// The longest election timeout (a duration), which is also the speaker's
    /// leader lease; the same on every member.
    #[arg(long, value_parser = crate::duration::millis, default_value_t = RaftTimings::default().election_max_ms)]
    election_timeout_max: u64,
    /// A TOML file of these flags (`max-lease = 4000`): a flag wins over
    /// its LEASEHOLD_* variable, which wins over the file.
    #[arg(long, env = "LEASEHOLD_CONFIG")]
    config: Option<PathBuf>,
    /// Worker threads of the node's runtime (default: one per core). Set
    /// it lower when nodes share a machine's cores (docs/operations.md).
    #[arg(long, env = "LEASEHOLD_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    pub threads: Option<u16>,
}

fn parse_peer(s: &str) -> Result<(u64, String), String> {
    let (id, addr) = s
        .split_once('=')
        .ok_or_else(|| format!("{s:?}: expected ID=HOST:PORT"))?;
    let id = id
        .trim()
        .parse()
        .map_err(|_| format!("{s:?}: {id:?} is not a node id"))?;
    if !addr.contains(':') {
        return Err(format!("{s:?}: {addr:?} is not host:port"));
    }
    Ok((id, addr.trim().to_string()))
}

impl ServeArgs {
    /// Refuses to start a new data directory with neither `--peers` nor
    /// `--join`: only a restarted member finds its members in its data
    /// directory. (A wiped one would otherwise form a cluster of its own
    /// under an id the real cluster knows.)
    pub fn check_members(&self) -> Result<(), String> {
        if !self.peers.is_empty() || !self.join.is_empty() {
            return Ok(());
        }
        match leasehold_raft::LogStore::read_node_id(&self.data_dir) {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err(format!(
                "{} holds no node yet: give --peers to form a cluster, or --join to join one",
                self.data_dir.display()
            )),
            Err(e) => Err(format!("cannot read {}: {e}", self.data_dir.display())),
        }
    }

    /// The node configuration these flags ask for (not yet validated), or
    /// why the `--acl` file cannot be used.
    pub fn config(&self) -> Result<NodeConfig, String> {
        let mut config = self.flags();
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            let files = leasehold_tls::TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: self.tls_ca.clone(),
            };
            let tls = leasehold_tls::Tls::load(files).map_err(|e| format!("TLS: {e}"))?;
            config = config.with_tls(std::sync::Arc::new(tls));
        } else if let Some(ca) = &self.tls_ca {
            tracing::warn!(
                ca = %ca.display(),
                "--tls-ca (or LEASEHOLD_TLS_CA) is ignored without --tls-cert and --tls-key: \
                 this node serves plain HTTP"
            );
        } else if !is_loopback(&self.listen) {
            tracing::warn!(
                listen = %self.listen,
                "no TLS on a non-loopback address: requests, locks and the cluster token \
                 cross the network in clear (give --tls-cert and --tls-key; docs/security.md)"
            );
        }
        let Some(path) = &self.acl else {
            if !is_loopback(&self.listen) {
                tracing::warn!(
                    listen = %self.listen,
                    "the public API is open on a non-loopback address: anyone who reaches \
                     it may list, take and release every lock (give --acl; docs/security.md)"
                );
            }
            return Ok(config);
        };
        let acl = leasehold_acl::Acl::load(path).map_err(|e| format!("--acl: {e}"))?;
        for token in acl.in_clear() {
            tracing::warn!(
                token = %token,
                "the --acl file keeps this token's secret in clear: prefer secret_sha256"
            );
        }
        Ok(config.with_acl(acl))
    }

    fn flags(&self) -> NodeConfig {
        let peers = if self.peers.is_empty() {
            let own = self
                .advertise
                .clone()
                .unwrap_or_else(|| self.listen.clone());
            vec![(self.id, own)]
        } else {
            self.peers.clone()
        };
        NodeConfig::new(self.id, peers, &self.data_dir, &self.cluster_token)
            .with_peer_token(self.peer_token.clone(), self.peer_token_accept.clone())
            .with_join(self.join.clone())
            .with_rejoin(self.rejoin)
            .with_lease(LeaseRule {
                default: Duration::from_millis(
                    self.default_lease
                        .unwrap_or(millis(LeaseRule::DEFAULT_LEASE).min(self.max_lease)),
                ),
                max: Duration::from_millis(self.max_lease),
            })
            .with_rebuild_timeout(Duration::from_millis(self.rebuild_timeout))
            .with_max_wait(Duration::from_millis(self.max_wait))
            .with_timings(RaftTimings {
                heartbeat_ms: self.heartbeat_interval,
                election_min_ms: self.election_timeout_min,
                election_max_ms: self.election_timeout_max,
            })
            .with_rebuild_mode(self.rebuild_mode.into())
            .with_chaos(self.chaos)
            .with_report_frame_bytes(self.report_frame_bytes)
            .with_copies(self.copies)
            .with_protocol(self.protocol)
            .with_metrics_prefix_depth(self.metrics_prefix_depth)
            .with_peer_transport(self.peer_transport.into())
    }
}

/// Whether `listen` (host:port) is a loopback address.
fn is_loopback(listen: &str) -> bool {
    match listen.parse::<std::net::SocketAddr>() {
        Ok(addr) => addr.ip().is_loopback(),
        Err(_) => listen.starts_with("localhost:"),
    }
}

async fn start<C>(config: C, listen: &str) -> Result<RunningNode, Failure>
where
    C: TryInto<ValidConfig>,
    StartError: From<C::Error>,
{
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    leasehold_node::start(config, listener)
        .await
        .map_err(|e| Failure {
            code: if e.is_protocol() {
                crate::hold::exit::USAGE
            } else {
                1
            },
            message: format!("node did not start: {e}"),
        })
}

/// Why a node stopped, and the exit status that says so: 64 when it cannot
/// speak its cluster's protocol version, 1 for anything else.
#[derive(Debug)]
pub struct Failure {
    /// What went wrong.
    pub message: String,
    /// The exit status.
    pub code: u8,
}

impl From<String> for Failure {
    fn from(message: String) -> Self {
        Failure { message, code: 1 }
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Says at start which leases a renewing holder keeps across one crash,
/// and warns when the default lease is shorter (docs/reliability.md,
/// "Liveness: the bound").
fn warn_of_short_leases(config: &NodeConfig) {
    let kept = config.shortest_lease_kept();
    let bound_ms = config.failover_bound().as_millis() as u64;
    if config.lease.default < kept {
        tracing::warn!(
            default_lease_ms = config.lease.default.as_millis() as u64,
            failover_bound_ms = bound_ms,
            "a holder renewing every third of its lease keeps it across one crash only if the \
             lease is at least {} ms with these timings; shorter leases may run out while a new \
             speaker takes over",
            kept.as_millis()
        );
    } else {
        tracing::info!(
            failover_bound_ms = bound_ms,
            "leases of {} ms or more, renewed every third, survive one crash",
            kept.as_millis()
        );
    }
}

/// A node `leasehold up` started (it names itself in
/// [`crate::playground::UP_PID_ENV`]) dies with it, however `up` ends: a
/// harness that kills `up` leaves no node behind.
fn die_with_up() {
    let Some(up) = std::env::var(crate::playground::UP_PID_ENV)
        .ok()
        .and_then(|p| p.parse::<i32>().ok())
    else {
        return;
    };
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    // `up` ended before the line above: nothing would signal this node.
    if nix::unistd::getppid().as_raw() != up {
        std::process::exit(0);
    }
}

/// `leasehold serve`: runs the node `args` ask for, `config` being their
/// configuration, checked.
pub async fn serve(args: &ServeArgs, config: ValidConfig) -> Result<(), Failure> {
    die_with_up();
    // Listened for from before the node starts, and through every reload:
    // a signal that came while nothing listened would be lost (or, before
    // tokio's handler is set, kill the process).
    use tokio::signal::unix::{signal, SignalKind};
    let listen = |kind| signal(kind).map_err(|e| format!("cannot listen for signals: {e}"));
    let mut hangups = listen(SignalKind::hangup())?;
    let mut interrupts = listen(SignalKind::interrupt())?;
    let mut terminates = listen(SignalKind::terminate())?;
    warn_of_short_leases(&config);
    let node = start(config, &args.listen).await?;
    let scheme = if args.tls_cert.is_some() {
        "https"
    } else {
        "http"
    };
    tracing::info!(addr = %node.addr(), id = args.id, scheme, "serving");
    loop {
        let signal = tokio::select! {
            Some(()) = interrupts.recv() => "SIGINT",
            Some(()) = terminates.recv() => "SIGTERM",
            why = node.failed() => {
                tracing::error!(%why, "this node cannot go on: exiting");
                let code = if node.cannot_speak_cluster() { crate::hold::exit::USAGE } else { 1 };
                return Err(Failure { message: why, code });
            }
            () = node.removed() => {
                tracing::warn!("this node was removed from the cluster: stopping");
                node.shutdown().await;
                return Ok(());
            }
            Some(()) = hangups.recv() => {
                match node.reload_tls() {
                    Ok(true) => tracing::info!("SIGHUP: TLS certificate, key and CA read again"),
                    Ok(false) => tracing::info!("SIGHUP: nothing to reload (no TLS)"),
                    Err(e) => tracing::error!(%e, "SIGHUP: TLS files not reloaded; the ones in use stay"),
                }
                continue;
            }
        };
        tracing::info!(signal, "stopping");
        node.shutdown().await;
        return Ok(());
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    /// `serve`'s flags on their own.
    #[derive(Parser)]
    struct Serve {
        #[command(flatten)]
        args: ServeArgs,
    }

    /// `serve`'s flags for a one-node cluster, and `extra`: its
    /// configuration.
    fn config_of(extra: &[&str]) -> NodeConfig {
        let mut args = vec![
            "serve",
            "--id=1",
            "--listen=127.0.0.1:1",
            "--peers=1=127.0.0.1:1",
            "--data-dir=data",
            "--cluster-token=secret",
        ];
        args.extend_from_slice(extra);
        Serve::try_parse_from(args).unwrap().args.config().unwrap()
    }

    #[test]
    fn serve_without_optional_flags_runs_the_nodes_defaults() {
        assert_eq!(
            config_of(&[]),
            NodeConfig::new(1, [(1, "127.0.0.1:1")], "data", "secret")
        );
    }

    /// `--max-lease` alone, shorter than the default lease, runs: the
    /// default lease is then the longest lease.
    #[test]
    fn a_max_lease_below_the_default_lease_lowers_the_default() {
        let serve = |extra: &[&str]| ValidConfig::try_from(config_of(extra)).map(|c| c.lease);
        let short = serve(&["--max-lease=4000"]).unwrap();
        assert_eq!(short.default, Duration::from_millis(4000));
        assert_eq!(short.max, Duration::from_millis(4000));
        let long = serve(&["--max-lease=60000"]).unwrap();
        assert_eq!(long.default, LeaseRule::DEFAULT_LEASE);
        assert!(
            serve(&["--max-lease=4000", "--default-lease=5000"]).is_err(),
            "a default above the maximum, given, is refused"
        );
    }
}
