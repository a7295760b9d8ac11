//! A failover playground for test harnesses: `leasehold up` runs a local
//! cluster as child processes (`leasehold serve --chaos`), and
//! `leasehold chaos ...` breaks it on purpose: partitions, slow links and
//! healing through the nodes' fault plans, and kills, pauses, resumes and
//! restarts through the `up` process, which owns the children
//! (docs/harness.md).
//!
//! `up` keeps what `chaos` needs in its directory: `up.json` (the nodes,
//! their addresses and the cluster token), `faults.json` (the fault plans
//! set so far) and `control.sock`, where it takes one command a line.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use leasehold_raft::FaultPlan;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::process::{Child, Command};

/// The environment variable naming a running `up`'s directory.
pub const UP_ENV: &str = "LEASEHOLD_UP";

/// The environment variable in which `up` gives its nodes its pid: a node
/// started so dies when `up` does (`serve`'s parent-death signal).
pub const UP_PID_ENV: &str = "LEASEHOLD_UP_PID";

/// What `up` writes for `chaos`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UpState {
    /// The cluster token.
    pub token: String,
    /// The nodes by id.
    pub nodes: BTreeMap<u64, UpNode>,
}

/// One node of an `up` cluster.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct UpNode {
    /// Where it listens, `host:port`.
    pub addr: String,
    /// Its data directory.
    pub data_dir: PathBuf,
    /// Its log file (its stderr).
    pub log: PathBuf,
}

/// The file in the temporary directory naming the directory of the `up`
/// started last, for `chaos` run without `LEASEHOLD_UP`.
fn last_up_pointer() -> PathBuf {
    std::env::temp_dir().join("leasehold-up.last")
}

/// The directory of the `up` cluster `chaos` acts on.
fn up_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os(UP_ENV) {
        return Ok(PathBuf::from(dir));
    }
    std::fs::read_to_string(last_up_pointer())
        .map(|s| PathBuf::from(s.trim()))
        .map_err(|_| format!("no `leasehold up` is running here (set {UP_ENV} to its directory)"))
}

fn read_state(dir: &Path) -> Result<UpState, String> {
    let text = std::fs::read_to_string(dir.join("up.json"))
        .map_err(|e| format!("{}: {e} (is `leasehold up` running?)", dir.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}/up.json: {e}", dir.display()))
}

/// The local cluster `up` runs: its children, and how to start each again.
struct Cluster {
    dir: PathBuf,
    state: UpState,
    peers: String,
    /// Arguments added to every node's `serve` (`up ... -- ARGS`).
    serve_args: Vec<String>,
    children: BTreeMap<u64, Child>,
    /// The nodes stopped with SIGSTOP and not resumed since.
    paused: BTreeSet<u64>,
}

impl Cluster {
    /// Starts node `id` (again), keeping its data directory.
    fn spawn(&mut self, id: u64) -> Result<(), String> {
        let node = &self.state.nodes[&id];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&node.log)
            .map_err(|e| format!("{}: {e}", node.log.display()))?;
        let exe = std::env::current_exe().map_err(|e| format!("this program's path: {e}"))?;
        let child = Command::new(exe)
            .args(["serve", "--id", &id.to_string(), "--listen", &node.addr])
            .args(["--peers", &self.peers, "--chaos"])
            .args(&self.serve_args)
            .arg("--data-dir")
            .arg(&node.data_dir)
            .env("LEASEHOLD_CLUSTER_TOKEN", &self.state.token)
            .env(UP_PID_ENV, std::process::id().to_string())
            .env("LEASEHOLD_THREADS", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("starting node {id}: {e}"))?;
        self.children.insert(id, child);
        Ok(())
    }

    fn pid(&self, id: u64) -> Result<nix::unistd::Pid, String> {
        let child = self
            .children
            .get(&id)
            .ok_or_else(|| format!("node {id} is not running"))?;
        let pid = child.id().ok_or_else(|| format!("node {id} has exited"))?;
        Ok(nix::unistd::Pid::from_raw(
            i32::try_from(pid).map_err(|_| "a pid out of range".to_string())?,
        ))
    }

    fn signal(&self, id: u64, signal: nix::sys::signal::Signal) -> Result<(), String> {
        nix::sys::signal::kill(self.pid(id)?, signal).map_err(|e| format!("node {id}: {e}"))
    }

    /// `kill -9` of node `id`, waited for.
    async fn kill(&mut self, id: u64) -> Result<(), String> {
        let mut child = self
            .children
            .remove(&id)
            .ok_or_else(|| format!("node {id} is not running"))?;
        // A paused node dies as well as a running one.
        self.paused.remove(&id);
        let _ = child.start_kill();
        let _ = child.wait().await;
        Ok(())
    }

    /// The node that says it speaks, rebuilt, waiting up to 5 s for one.
    async fn speaker(&self) -> Result<u64, String> {
        for _ in 0..50 {
            if let Some(id) = self.speaker_once().await {
                return Ok(id);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err("no node speaks".to_string())
    }

    /// Carries out one control command; its answer.
    async fn command(&mut self, line: &str) -> Result<String, String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let node = |i: usize| -> Result<u64, String> {
            let word = words.get(i).ok_or("which node?")?;
            let id: u64 = word
                .parse()
                .map_err(|_| format!("{word:?} is not a node id"))?;
            if !self.state.nodes.contains_key(&id) {
                return Err(format!("there is no node {id}"));
            }
            Ok(id)
        };
        match words.first().copied() {
            Some("kill") => {
                let id = node(1)?;
                self.kill(id).await?;
                Ok(format!("killed node {id}"))
            }
            Some("pause") => {
                let id = node(1)?;
                self.signal(id, nix::sys::signal::Signal::SIGSTOP)?;
                self.paused.insert(id);
                Ok(format!("paused node {id}"))
            }
            Some("resume") => {
                let id = node(1)?;
                self.signal(id, nix::sys::signal::Signal::SIGCONT)?;
                self.paused.remove(&id);
                Ok(format!("resumed node {id}"))
            }
            Some("processes") => {
                let mut states = BTreeMap::new();
                for id in self.state.nodes.keys() {
                    let state = match self.children.get_mut(id) {
                        None => "killed".to_string(),
                        Some(child) => match child.try_wait() {
                            Ok(Some(status)) => format!("exited ({status})"),
                            _ if self.paused.contains(id) => "paused".to_string(),
                            _ => "running".to_string(),
                        },
                    };
                    states.insert(*id, state);
                }
                serde_json::to_string(&states).map_err(|e| e.to_string())
            }
            Some("restart") => {
                let id = node(1)?;
                if self.children.contains_key(&id) {
                    self.kill(id).await?;
                }
                self.spawn(id)?;
                Ok(format!("restarted node {id}"))
            }
            Some("kill-speaker") => {
                let id = self.speaker().await?;
                self.kill(id).await?;
                Ok(format!("killed node {id}, the speaker"))
            }
            Some(other) => Err(format!("unknown command {other:?}")),
            None => Err("an empty command".to_string()),
        }
    }

    /// Stops every node: SIGTERM to all (a speaker hands over), then
    /// `kill -9` of any still running after 10 s.
    async fn stop(&mut self) {
        for id in self.children.keys().copied().collect::<Vec<_>>() {
            let _ = self.signal(id, nix::sys::signal::Signal::SIGCONT);
            let _ = self.signal(id, nix::sys::signal::Signal::SIGTERM);
        }
        for (_, mut child) in std::mem::take(&mut self.children) {
            if tokio::time::timeout(Duration::from_secs(10), child.wait())
                .await
                .is_err()
            {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
        }
    }
}

/// `leasehold up`: `nodes` child processes on 127.0.0.1 from `base_port`
/// (0: each on a port the system chooses), their data under `data_dir` (a
/// temporary directory, removed at the end, if not given), each started
/// with `serve_args` added, until Ctrl-C or SIGTERM.
pub async fn up(
    nodes: u64,
    base_port: u16,
    data_dir: Option<PathBuf>,
    serve_args: Vec<String>,
) -> Result<(), String> {
    let temporary = data_dir.is_none();
    let dir = match data_dir {
        Some(dir) => dir,
        None => std::env::temp_dir().join(format!("leasehold-up-{}", std::process::id())),
    };
    let result = run_up(nodes, base_port, &dir, serve_args).await;
    if temporary {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let _ = std::fs::remove_file(dir.join("control.sock"));
    result
}

/// The nodes' addresses: from `base_port` on, each checked free, or with
/// `base_port` 0 each a port the system chose free just now.
fn node_addrs(nodes: u64, base_port: u16) -> Result<BTreeMap<u64, String>, String> {
    let mut addrs = BTreeMap::new();
    // Held until all are chosen, so that no two nodes get one port.
    let mut listeners = Vec::new();
    for i in 1..=nodes {
        let asked = match base_port {
            0 => "127.0.0.1:0".to_string(),
            base => format!("127.0.0.1:{}", u64::from(base) + i - 1),
        };
        let listener = std::net::TcpListener::bind(&asked)
            .map_err(|e| format!("cannot listen on {asked}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| format!("{asked}: {e}"))?;
        addrs.insert(i, addr.to_string());
        listeners.push(listener);
    }
    Ok(addrs)
}

async fn run_up(
    nodes: u64,
    base_port: u16,
    dir: &Path,
    serve_args: Vec<String>,
) -> Result<(), String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut interrupts = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    let mut terminates = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let addrs = node_addrs(nodes, base_port)?;
    let state = UpState {
        token: format!("{:032x}", rand::random::<u128>()),
        nodes: addrs
            .iter()
            .map(|(id, addr)| {
                let node = UpNode {
                    addr: addr.clone(),
                    data_dir: dir.join(format!("node-{id}")),
                    log: dir.join(format!("node-{id}.log")),
                };
                (*id, node)
            })
            .collect(),
    };
    let peers = addrs
        .iter()
        .map(|(id, addr)| format!("{id}={addr}"))
        .collect::<Vec<_>>()
        .join(",");
    // The cluster token is in up.json: for this user only.
    let write = |name: &str, text: String| {
        use std::os::unix::fs::OpenOptionsExt;
        let path = dir.join(name);
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
            .map_err(|e| format!("{}: {e}", path.display()))
    };
    write(
        "up.json",
        serde_json::to_string_pretty(&state).map_err(|e| e.to_string())?,
    )?;
    write("faults.json", "{}".to_string())?;
    let socket = dir.join("control.sock");
    let _ = std::fs::remove_file(&socket);
    let control = UnixListener::bind(&socket).map_err(|e| format!("{}: {e}", socket.display()))?;
    let _ = std::fs::write(last_up_pointer(), dir.display().to_string());

    let mut cluster = Cluster {
        dir: dir.to_path_buf(),
        state,
        peers,
        serve_args,
        children: BTreeMap::new(),
        paused: BTreeSet::new(),
    };
    for id in 1..=nodes {
        if let Err(e) = cluster.spawn(id) {
            cluster.stop().await;
            return Err(e);
        }
        println!("node {id}: http://{}", addrs[&id]);
    }
    println!("data and logs: {}", cluster.dir.display());
    println!(
        "chaos: leasehold chaos --help   ({UP_ENV}={})",
        cluster.dir.display()
    );
    println!("Ctrl-C to stop");
    let mut last_speaker = None;
    let mut watch = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = interrupts.recv() => break,
            _ = terminates.recv() => break,
            accepted = control.accept() => {
                if let Ok((stream, _)) = accepted {
                    serve_control(&mut cluster, stream).await;
                }
            }
            _ = watch.tick() => {
                if let Ok(speaker) = tokio::time::timeout(Duration::from_millis(400), cluster.speaker_once()).await {
                    if speaker.is_some() && speaker != last_speaker {
                        println!("speaker: node {}", speaker.unwrap_or_default());
                        last_speaker = speaker;
                    }
                }
            }
        }
    }
    cluster.stop().await;
    Ok(())
}

impl Cluster {
    /// The speaker, if one node says it speaks now (one look, no wait).
    async fn speaker_once(&self) -> Option<u64> {
        let http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_millis(300))
            .build()
            .ok()?;
        for (id, node) in &self.state.nodes {
            if !self.children.contains_key(id) {
                continue;
            }
            let url = format!("http://{}/v1/cluster", node.addr);
            let Ok(answer) = http.get(url).send().await else {
                continue;
            };
            if let Ok(view) = answer.json::<leasehold_api::ClusterAnswer>().await {
                if view.leader == Some(*id) && view.rebuilt {
                    return Some(*id);
                }
            }
        }
        None
    }
}

/// Reads one command from `stream` and answers it (`ok ...` or
/// `error ...`).
async fn serve_control(cluster: &mut Cluster, stream: UnixStream) {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    let mut read = BufReader::new(read);
    let reading = read.read_line(&mut line);
    if tokio::time::timeout(Duration::from_secs(5), reading)
        .await
        .is_err()
    {
        return;
    }
    let answer = match cluster.command(line.trim()).await {
        Ok(done) => format!("ok {done}\n"),
        Err(e) => format!("error {e}\n"),
    };
    let _ = write.write_all(answer.as_bytes()).await;
}

/// What `leasehold chaos` is asked to do.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ChaosCommand {
    /// Cut the links between nodes A and B, both ways.
    Partition {
        /// One node.
        a: u64,
        /// The other.
        b: u64,
    },
    /// Delay every message between nodes A and B, both ways, by MS.
    Slow {
        /// One node.
        a: u64,
        /// The other.
        b: u64,
        /// The delay (a duration: 200ms, 1s; a bare number is
        /// milliseconds; 0 takes it away).
        #[arg(value_parser = crate::duration::millis)]
        ms: u64,
    },
    /// Clear every partition and slow link.
    Heal,
    /// `kill -9` node N.
    Kill {
        /// The node.
        n: u64,
    },
    /// Stop node N (SIGSTOP), as a long GC pause or a frozen VM would.
    Pause {
        /// The node.
        n: u64,
    },
    /// Let a paused node N run again (SIGCONT).
    Resume {
        /// The node.
        n: u64,
    },
    /// Start node N again from its data directory (killed first if running).
    Restart {
        /// The node.
        n: u64,
    },
    /// `kill -9` whichever node speaks now.
    KillSpeaker,
    /// Node N answers every client call (locks, sessions) `503 no_leader`
    /// unserved, until `heal`: clients must move to another node.
    Refuse {
        /// The node.
        n: u64,
    },
    /// Node N holds back every answer to a client call by MS after
    /// serving it (0 takes it away).
    Lag {
        /// The node.
        n: u64,
        /// The delay (200ms, 1s; a bare number is milliseconds).
        #[arg(value_parser = crate::duration::millis)]
        ms: u64,
    },
    /// Node N serves the next client call and never answers it: an answer
    /// lost on its way (the client's retry must not do the call twice).
    LoseAnswer {
        /// The node.
        n: u64,
    },
    /// Show each node's process (running, paused, killed), its cut and
    /// slowed links, and the speaker.
    Status,
}

impl ChaosCommand {
    /// Why the command makes no sense, if it does not: a link from a node
    /// to itself.
    pub fn misuse(&self) -> Option<String> {
        match self {
            ChaosCommand::Partition { a, b } | ChaosCommand::Slow { a, b, .. } if a == b => {
                Some(format!("nodes {a} and {b} are one node: a link needs two"))
            }
            _ => None,
        }
    }
}

/// `leasehold chaos`: carries out `command` on the `up` cluster; what was
/// done, or why not.
pub async fn chaos(command: ChaosCommand) -> Result<String, String> {
    let dir = up_dir()?;
    let state = read_state(&dir)?;
    let line = match &command {
        ChaosCommand::Partition { a, b } => {
            return set_plans(&dir, &state, &[*a, *b], |plans| {
                plans.entry(*a).or_default().drop_to.insert(*b);
                plans.entry(*b).or_default().drop_to.insert(*a);
            })
            .await
            .map(|()| format!("nodes {a} and {b} cut off from each other"));
        }
        ChaosCommand::Slow { a, b, ms } => {
            return set_plans(&dir, &state, &[*a, *b], |plans| {
                for (from, to) in [(*a, *b), (*b, *a)] {
                    let plan = plans.entry(from).or_default();
                    if *ms == 0 {
                        plan.delay_to.remove(&to);
                    } else {
                        plan.delay_to.insert(to, *ms);
                    }
                }
            })
            .await
            .map(|()| format!("messages between nodes {a} and {b} delayed {ms} ms"));
        }
        ChaosCommand::Heal => {
            let all: Vec<u64> = state.nodes.keys().copied().collect();
            return set_plans(&dir, &state, &all, BTreeMap::clear)
                .await
                .map(|()| "every link healed".to_string());
        }
        ChaosCommand::Refuse { n } => {
            return set_plans(&dir, &state, &[*n], |plans| {
                plans.entry(*n).or_default().refuse_clients = true;
            })
            .await
            .map(|()| format!("node {n} answers client calls 503"));
        }
        ChaosCommand::Lag { n, ms } => {
            return set_plans(&dir, &state, &[*n], |plans| {
                plans.entry(*n).or_default().client_answer_lag_ms = *ms;
            })
            .await
            .map(|()| format!("node {n} holds answers to clients back {ms} ms"));
        }
        ChaosCommand::LoseAnswer { n } => {
            return set_plans(&dir, &state, &[*n], |plans| {
                plans.entry(*n).or_default().lose_next_answer = true;
            })
            .await
            .map(|()| format!("node {n} will serve its next client call and not answer it"));
        }
        ChaosCommand::Kill { n } => format!("kill {n}"),
        ChaosCommand::Pause { n } => format!("pause {n}"),
        ChaosCommand::Resume { n } => format!("resume {n}"),
        ChaosCommand::Restart { n } => format!("restart {n}"),
        ChaosCommand::KillSpeaker => "kill-speaker".to_string(),
        ChaosCommand::Status => {
            let processes = control(&dir, "processes").await?;
            let processes: BTreeMap<u64, String> = serde_json::from_str(&processes)
                .map_err(|e| format!("`up` answered {processes:?}: {e}"))?;
            return Ok(status_lines(&dir, &state, &processes).await);
        }
    };
    control(&dir, &line).await
}

/// The table `chaos status` prints: each node's process and links, then
/// who speaks, as the first running node that answers says.
async fn status_lines(dir: &Path, state: &UpState, processes: &BTreeMap<u64, String>) -> String {
    let plans: BTreeMap<u64, FaultPlan> = std::fs::read_to_string(dir.join("faults.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let mut lines = vec![format!(
        "{:<5} {:<22} {:<10} links",
        "node", "address", "process"
    )];
    for (id, node) in &state.nodes {
        let plan = plans.get(id).cloned().unwrap_or_default();
        let mut links: Vec<String> = plan
            .drop_to
            .iter()
            .map(|to| format!("cut off from {to}"))
            .collect();
        links.extend(
            plan.delay_to
                .iter()
                .map(|(to, ms)| format!("{ms} ms to {to}")),
        );
        if plan.refuse_clients {
            links.push("refuses clients".to_string());
        }
        if plan.client_answer_lag_ms > 0 {
            links.push(format!(
                "answers clients {} ms late",
                plan.client_answer_lag_ms
            ));
        }
        let process = processes.get(id).map_or("?", String::as_str);
        let links = if links.is_empty() {
            "ok".to_string()
        } else {
            links.join(", ")
        };
        lines.push(format!("{id:<5} {:<22} {process:<10} {links}", node.addr));
    }
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(500))
        .build();
    let mut speaker = "no running node answers".to_string();
    if let Ok(http) = http {
        for (id, node) in &state.nodes {
            if processes.get(id).map(String::as_str) != Some("running") {
                continue;
            }
            let url = format!("http://{}/v1/cluster?view=speaker", node.addr);
            let Ok(answer) = http.get(url).send().await else {
                continue;
            };
            if let Ok(view) = answer.json::<leasehold_api::ClusterAnswer>().await {
                speaker = match view.leader {
                    Some(leader) => {
                        format!("node {leader}, term {} (as node {id} sees it)", view.term)
                    }
                    None => format!("none (as node {id} sees it)"),
                };
                break;
            }
        }
    }
    lines.push(format!("speaker: {speaker}"));
    lines.join("\n")
}

/// Sends `line` to the `up` running in `dir` over its control socket: what
/// it did, or why not.
async fn control(dir: &Path, line: &str) -> Result<String, String> {
    let socket = dir.join("control.sock");
    let mut stream = UnixStream::connect(&socket)
        .await
        .map_err(|e| format!("{}: {e} (is `leasehold up` running?)", socket.display()))?;
    stream
        .write_all(format!("{line}\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut answer = String::new();
    BufReader::new(stream)
        .read_line(&mut answer)
        .await
        .map_err(|e| e.to_string())?;
    match answer.trim().split_once(' ') {
        Some(("ok", done)) => Ok(done.to_string()),
        Some(("error", why)) => Err(why.to_string()),
        _ => Err(format!("`up` answered {answer:?}")),
    }
}

/// Changes the fault plans of `faults.json` with `change`, and sends the
/// plans of `nodes` to them.
async fn set_plans(
    dir: &Path,
    state: &UpState,
    nodes: &[u64],
    change: impl FnOnce(&mut BTreeMap<u64, FaultPlan>),
) -> Result<(), String> {
    for id in nodes {
        if !state.nodes.contains_key(id) {
            return Err(format!("there is no node {id}"));
        }
    }
    let path = dir.join("faults.json");
    let mut plans: BTreeMap<u64, FaultPlan> = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    change(&mut plans);
    let http = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
        .map_err(|e| e.to_string())?;
    for id in nodes {
        let plan = plans.get(id).cloned().unwrap_or_default();
        let url = format!(
            "http://{}{}",
            state.nodes[id].addr,
            leasehold_api::routes::CHAOS
        );
        let answer = http
            .post(url)
            .header(leasehold_raft::TOKEN_HEADER, &state.token)
            .json(&plan)
            .send()
            .await
            .map_err(|e| format!("node {id}: {e}"))?;
        if !answer.status().is_success() {
            let status = answer.status();
            let body = answer.text().await.unwrap_or_default();
            return Err(format!("node {id}: {status} {body}"));
        }
    }
    // A lost answer is spent at the node, not sent again with a later plan.
    for plan in plans.values_mut() {
        plan.lose_next_answer = false;
    }
    let text = serde_json::to_string_pretty(&plans).map_err(|e| e.to_string())?;
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
}
