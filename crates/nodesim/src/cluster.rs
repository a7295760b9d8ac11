//! A simulated cluster: one turmoil host per node, each running the node's
//! own start path on a data directory that survives the host's crashes. A
//! node removed from the cluster shuts down and its host stops, as
//! `leasehold serve` exits; restarted marked in [`Rejoins`], the host wipes
//! the directory and joins the cluster again under the same id.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_node::{Clock, NodeConfig, RebuildMode, Sabotage, Seams};
use locktable::LeaseRule;

use crate::guards::Guards;
use crate::leaders::Leaders;
use crate::net::{SimListener, SimTransport};
use crate::pauses::Pauses;

/// The port every simulated node listens on.
pub const PORT: u16 = 7700;

/// The cluster token of every simulated cluster.
pub const TOKEN: &str = "simulated-cluster-token";

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
    /// Which hosts start next on a wiped data directory, joining.
    pub rejoins: Rejoins,
    /// The longest a message takes between hosts (turmoil draws each
    /// delay up to it, most of them short): 100 ms by default, a slow and
    /// jittery network; a LAN's is a millisecond or two.
    pub max_latency: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            nodes: 3,
            seed: 1,
            mode: RebuildMode::default(),
            copies: None,
            lease: LeaseRule::default(),
            duration: Duration::from_secs(120),
            sabotage: Sabotage::NONE,
            guards: Guards::default(),
            leaders: Leaders::default(),
            pauses: Pauses::default(),
            rejoins: Rejoins::default(),
            max_latency: Duration::from_millis(100),
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
    let peers: Vec<(u64, String)> = (1..=options.nodes).map(|id| (id, addr(id))).collect();
    for id in 1..=options.nodes {
        let config = NodeConfig::new(id, peers.clone(), dirs.join(host(id)), TOKEN)
            .with_rebuild_mode(options.mode)
            .with_copies(options.copies)
            .with_lease(options.lease);
        let watch = Watch {
            sabotage: options.sabotage,
            guards: options.guards.clone(),
            leaders: options.leaders.clone(),
            pauses: options.pauses.clone(),
            rejoins: options.rejoins.clone(),
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
    rejoins: Rejoins,
}

/// The hosts to start next on a wiped data directory, joining the cluster
/// through the other members (`--join`) under their old id: a machine
/// rebuilt after its node was removed.
#[derive(Debug, Default, Clone)]
pub struct Rejoins(Arc<Mutex<BTreeSet<u64>>>);

impl Rejoins {
    /// Node `id`'s host starts next wiped, joining.
    pub fn wipe_and_join(&self, id: u64) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).insert(id);
    }

    /// Node `config`'s configuration as its host starts now: a joining
    /// one on a wiped directory if it was marked, else `config`.
    fn starting(&self, config: NodeConfig) -> std::io::Result<NodeConfig> {
        let marked = self
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&config.id);
        if !marked {
            return Ok(config);
        }
        if config.data_dir.exists() {
            std::fs::remove_dir_all(&config.data_dir)?;
        }
        let me = config.id;
        let join = config
            .peers
            .iter()
            .filter(|(id, _)| **id != me)
            .map(|(_, addr)| addr.clone())
            .collect();
        let alone = [(me, addr(me))].into();
        Ok(NodeConfig {
            peers: alone,
            ..config.with_join(join)
        })
    }
}

/// A node's life on its host: started as `leasehold serve` starts it, and
/// serving until the host crashes or the node is removed (it then shuts
/// down, and the host stops), in a set of tasks the driver can pause
/// ([`Pauses`]). Outside that set, as a kernel would, the host accepts
/// connections into a queue the node takes them from; and its guard and
/// leadership are sampled.
async fn serve(config: NodeConfig, watch: Watch) -> turmoil::Result {
    let id = config.id;
    let config = watch.rejoins.starting(config)?;
    let (listener, accepting) = SimListener::bind(PORT).await?.queued()?;
    let seams = Seams {
        clock: Clock::tokio(),
        transport: Arc::new(SimTransport),
        sabotage: watch.sabotage,
    };
    let (started_tx, started) = tokio::sync::oneshot::channel();
    let life = async move {
        let running = leasehold_node::start_with(config, listener, seams).await?;
        let _ = started_tx.send(Arc::clone(running.node()));
        // The node runs until the host crashes, or until it is removed.
        running.removed().await;
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
