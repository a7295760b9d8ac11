//! A simulated cluster: one turmoil host per node, each running the node's
//! own start path on a data directory that survives the host's crashes. A
//! node removed from the cluster, stopped cleanly (as by SIGTERM) or failed
//! (a protocol it cannot speak) shuts down and its host stops, as
//! `leasehold serve` exits. What the driver asks of the hosts is in
//! [`Hosts`]: which wait before their first start, which start next on a
//! wiped directory joining the cluster under the same id, which stop
//! cleanly, and the settings (timings, protocol) each starts with.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_node::{Clock, NodeConfig, RaftTimings, RebuildMode, Sabotage, Seams};
use leasehold_raft::version::Protocol;
use locktable::LeaseRule;

use crate::guards::Guards;
use crate::leaders::Leaders;
pub use crate::net::TOKEN;
use crate::net::{SimListener, SimTransport};
use crate::pauses::Pauses;

/// The port every simulated node listens on.
pub const PORT: u16 = 7700;

/// The host name of node `id`.
pub fn host(id: u64) -> String {
    format!("n{id}")
}

/// The `host:port` of node `id`.
pub fn addr(id: u64) -> String {
    format!("n{id}:{PORT}")
}

/// What a simulated cluster is made of.
#[derive(Debug, Clone)]
pub struct Options {
    /// Nodes, with ids from 1.
    pub nodes: u64,
    /// How many of them form the cluster at the start (ids from 1): the
    /// others' hosts wait until [`Hosts::start`] and then join it.
    pub initial: u64,
    /// The seed of every random choice turmoil makes.
    pub seed: u64,
    /// How the speaker rebuilds after missing members.
    pub mode: RebuildMode,
    /// `--copies` (`None`: the default).
    pub copies: Option<usize>,
    /// The default and longest leases.
    pub lease: LeaseRule,
    /// The longest simulated time a run may take.
    pub duration: Duration,
    /// Safety mechanisms every node runs without (the checks' self-test).
    pub sabotage: Sabotage,
    /// Where the hosts sample their nodes' guards.
    pub guards: Guards,
    /// Where the hosts sample which term their nodes lead.
    pub leaders: Leaders,
    /// Which hosts are paused.
    pub pauses: Pauses,
    /// What the driver asks of the hosts.
    pub hosts: Hosts,
    /// Raft's timings every node starts with (until [`Hosts::settle`]).
    pub timings: RaftTimings,
    /// `--protocol` of every node (until [`Hosts::settle`]); `None`: the
    /// build's own.
    pub protocol: Option<Protocol>,
    /// The longest a message takes between hosts (turmoil draws each
    /// delay up to it, most of them short): 100 ms by default, a slow and
    /// jittery network; a LAN's is a millisecond or two.
    pub max_latency: Duration,
    /// An application embedding every node, run on the node's host beside
    /// it: paused with the host, gone when it crashes.
    pub app: Option<App>,
}

/// What an application embedding a node runs, given the node's id and the
/// node (its client is `node.client()`).
#[derive(Clone)]
pub struct App(pub Arc<dyn Fn(u64, Arc<leasehold_node::Node>) -> AppLife + Send + Sync>);

/// An embedding application's life on its host.
pub type AppLife = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("App")
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            nodes: 3,
            initial: 3,
            seed: 1,
            mode: RebuildMode::default(),
            copies: None,
            lease: LeaseRule::default(),
            duration: Duration::from_secs(120),
            sabotage: Sabotage::NONE,
            guards: Guards::default(),
            leaders: Leaders::default(),
            pauses: Pauses::default(),
            hosts: Hosts::default(),
            timings: RaftTimings::default(),
            protocol: None,
            max_latency: Duration::from_millis(100),
            app: None,
        }
    }
}

impl Options {
    /// A targeted run's cluster: `seed`, the knobs of `sabotage`, messages
    /// of at most `max_latency`, and a minute of simulated time at most.
    pub fn targeted(seed: u64, sabotage: Sabotage, max_latency: Duration) -> Self {
        Options {
            seed,
            sabotage,
            duration: Duration::from_secs(60),
            max_latency,
            ..Options::default()
        }
    }
}

/// A simulation with one host per node of `options`, each keeping its
/// data under `dirs`. Clients are the caller's to add.
///
/// Seeds this thread's [`entropy`](leasehold_raft::entropy) with the
/// options' seed, so the nodes' ids and openraft's election timeouts
/// replay with it, and runs the nodes' blocking work (the store's writes)
/// inline on it: run the simulation on this thread. With
/// `LEASEHOLD_SIM_LOG` set (`RUST_LOG` syntax), prints the nodes' log
/// lines ([`trace`](crate::trace)).
pub fn build<'a>(options: &Options, dirs: &Path) -> turmoil::Sim<'a> {
    if let Ok(filter) = std::env::var(crate::trace::ENV) {
        crate::trace::init(&filter);
    }
    leasehold_raft::entropy::seed(options.seed);
    leasehold_raft::blocking::run_inline();
    leasehold_raft::tasks::spawn_locally();
    let mut sim = turmoil::Builder::new()
        .simulation_duration(options.duration)
        .rng_seed(options.seed)
        // Connections queued behind a held link arrive at once when it is
        // released; turmoil panics when a listener's queue overflows.
        .tcp_capacity(1 << 16)
        .max_message_latency(options.max_latency)
        .tick_duration(crate::guards::EVERY)
        .build();
    let peers: Vec<(u64, String)> = (1..=options.initial).map(|id| (id, addr(id))).collect();
    for id in 1..=options.nodes {
        if id > options.initial {
            options.hosts.hold_back_and_join(id);
        }
        let config = NodeConfig::new(id, peers.clone(), dirs.join(host(id)), TOKEN)
            .with_rebuild_mode(options.mode)
            .with_copies(options.copies)
            .with_lease(options.lease)
            .with_timings(options.timings);
        let config = match options.protocol {
            Some(protocol) => config.with_protocol(protocol),
            None => config,
        };
        let watch = Watch {
            sabotage: options.sabotage,
            guards: options.guards.clone(),
            leaders: options.leaders.clone(),
            pauses: options.pauses.clone(),
            hosts: options.hosts.clone(),
            peers: (1..=options.nodes).map(addr).collect(),
            app: options.app.clone(),
        };
        sim.host(host(id), move || serve(config.clone(), watch.clone()));
    }
    sim
}

/// What a host shares with the driver.
#[derive(Debug, Clone)]
struct Watch {
    sabotage: Sabotage,
    guards: Guards,
    leaders: Leaders,
    pauses: Pauses,
    hosts: Hosts,
    /// Every host's address, for a joiner to ask.
    peers: Vec<String>,
    /// The application embedding the node, if any.
    app: Option<App>,
}

/// A node's settings a host starts it with from some moment on: a
/// restart with other flags (a timing change, an upgrade).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Settings {
    /// Raft's timings; `None`: as before.
    pub timings: Option<RaftTimings>,
    /// `--protocol`; `None`: as before.
    pub protocol: Option<Protocol>,
}

/// What the driver asks of the hosts, each read by the host as its node
/// starts and while it runs.
#[derive(Debug, Default, Clone)]
pub struct Hosts(Arc<Mutex<Plans>>);

#[derive(Debug, Default)]
struct Plans {
    /// Hosts that wait before their first start.
    held: BTreeSet<u64>,
    /// Hosts that start next on a wiped directory, joining.
    rejoin: BTreeSet<u64>,
    /// Hosts whose node is to stop cleanly, as SIGTERM stops it.
    stop: BTreeSet<u64>,
    /// Settings each host starts its node with from now on.
    settings: BTreeMap<u64, Settings>,
    /// Nodes that stopped by themselves, and why.
    failures: Vec<String>,
}

impl Hosts {
    fn plans(&self) -> std::sync::MutexGuard<'_, Plans> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Node `id`'s host starts next wiped, joining (a machine rebuilt
    /// after its node was removed).
    pub fn wipe_and_join(&self, id: u64) {
        self.plans().rejoin.insert(id);
    }

    /// Node `id`'s host waits until [`Hosts::start`], then joins: a member
    /// the cluster grows by.
    fn hold_back_and_join(&self, id: u64) {
        let mut plans = self.plans();
        plans.held.insert(id);
        plans.rejoin.insert(id);
    }

    /// Node `id`'s host, held back, starts now.
    pub fn start(&self, id: u64) {
        self.plans().held.remove(&id);
    }

    /// Node `id` stops cleanly (its host then stops): a SIGTERM.
    pub fn stop(&self, id: u64) {
        self.plans().stop.insert(id);
    }

    /// Node `id` starts with `settings` from its next start on.
    pub fn settle(&self, id: u64, settings: Settings) {
        let mut plans = self.plans();
        let now = plans.settings.entry(id).or_default();
        now.timings = settings.timings.or(now.timings);
        now.protocol = settings.protocol.or(now.protocol);
    }

    /// The nodes that stopped by themselves (a protocol version they
    /// cannot speak, a Raft core that stopped), in words: none should.
    pub fn failures(&self) -> Vec<String> {
        self.plans().failures.clone()
    }

    fn failed(&self, id: u64, why: String) {
        self.plans()
            .failures
            .push(format!("n{id} stopped by itself: {why}"));
    }

    async fn wait_until_started(&self, id: u64) {
        while self.plans().held.contains(&id) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    async fn wait_for_stop(&self, id: u64) {
        loop {
            if self.plans().stop.remove(&id) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Node `config`'s configuration as its host starts now: with the
    /// settings it was given, and a joining one on a wiped directory
    /// (asking `peers`) if it was marked, else `config`.
    fn starting(&self, config: NodeConfig, peers: &[String]) -> std::io::Result<NodeConfig> {
        let (marked, settings) = {
            let mut plans = self.plans();
            plans.stop.remove(&config.id);
            let settings = plans.settings.get(&config.id).copied().unwrap_or_default();
            (plans.rejoin.remove(&config.id), settings)
        };
        let config = match settings.timings {
            Some(timings) => config.with_timings(timings),
            None => config,
        };
        let config = match settings.protocol {
            Some(protocol) => config.with_protocol(protocol),
            None => config,
        };
        if !marked {
            return Ok(config);
        }
        if config.data_dir.exists() {
            std::fs::remove_dir_all(&config.data_dir)?;
        }
        let me = config.id;
        let join = peers
            .iter()
            .filter(|peer| **peer != addr(me))
            .cloned()
            .collect();
        let alone = [(me, addr(me))].into();
        Ok(NodeConfig {
            peers: alone,
            ..config.with_join(join)
        })
    }
}

/// A node's life on its host: started as `leasehold serve` starts it (once
/// the host is no longer held back), and serving until the host crashes,
/// the node is removed or stopped cleanly (it then shuts down, and the
/// host stops) or fails (it cannot speak its cluster's protocol), in a set
/// of tasks the driver can pause ([`Pauses`]). Outside that set, as a kernel would, the host accepts
/// connections into a queue the node takes them from; and its guard and
/// leadership are sampled.
async fn serve(config: NodeConfig, watch: Watch) -> turmoil::Result {
    let id = config.id;
    watch.hosts.wait_until_started(id).await;
    let config = watch.hosts.starting(config, &watch.peers)?;
    let hosts = watch.hosts.clone();
    let (listener, accepting) = SimListener::bind(PORT).await?.queued()?;
    let seams = Seams {
        clock: Clock::tokio(),
        transport: Arc::new(SimTransport),
        sabotage: watch.sabotage,
    };
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let app = watch.app.clone();
    let life = async move {
        let running = match leasehold_node::start_with(config, listener, seams).await {
            Ok(running) => running,
            // As `leasehold serve` exits 64: the host stops.
            Err(e) if e.is_protocol() => {
                hosts.failed(id, e.to_string());
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        let _ = started_tx.send(Arc::clone(running.node()));
        if let Some(App(app)) = &app {
            // In the host's set of tasks, as the node's own.
            leasehold_raft::tasks::spawn(app(id, Arc::clone(running.node())));
        }
        // The node runs until the host crashes, or until it is removed,
        // stopped or fails.
        tokio::select! {
            _ = running.removed() => {}
            _ = hosts.wait_for_stop(id) => {}
            why = running.failed() => {
                hosts.failed(id, why);
                return Ok(());
            }
        }
        running.shutdown().await;
        Ok::<(), leasehold_node::StartError>(())
    };
    let samples = async {
        if let Ok(node) = started.await {
            tokio::join!(
                watch.guards.watch(id, Arc::clone(&node)),
                watch.leaders.watch(id, node),
            );
        }
    };
    let outside = async { tokio::join!(samples, accepting) };
    tokio::select! {
        life = watch.pauses.run(id, life) => life?,
        _ = outside => {}
    }
    Ok(())
}
