//! A cluster of real `leasehold serve` processes on loopback, for tests:
//! ports probed at run time, a temporary directory, every process killed
//! when the cluster is dropped.

#![allow(dead_code)] // each test file uses a part

pub mod browser;
pub mod sessions;
pub mod up;

use std::collections::BTreeMap;
use std::io::Write;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// The line a node's log file gets at each start of the node.
const STARTED: &str = "--- started ---\n";

pub const TOKEN: &str = "test-token-0123456789";

/// The protocol version this build speaks.
pub const SPEAKS: u64 = leasehold_raft::version::SPEAKS as u64;

/// The protocol header a peer request made by a test carries: this
/// build's, in a cluster that agreed on it (a request without it is an
/// earlier build's, refused once the cluster agreed).
pub const PROTOCOL_STAMP: &str = "speaks=8; cluster=8";

#[test]
fn the_protocol_stamp_is_this_builds() {
    assert_eq!(
        PROTOCOL_STAMP,
        format!("speaks={SPEAKS}; cluster={SPEAKS}"),
        "raise the stamp with the build's protocol version"
    );
}

/// Generous: correctness is asserted, not speed.
pub const PATIENCE: Duration = Duration::from_secs(30);

pub struct Cluster {
    pub dir: tempfile::TempDir,
    pub addrs: BTreeMap<u64, String>,
    procs: BTreeMap<u64, Child>,
    extra_args: Vec<String>,
    /// Flags given to one node only.
    node_args: BTreeMap<u64, Vec<String>>,
    /// The nodes started with `--join` (and the addresses they ask), not
    /// `--peers`.
    joining: BTreeMap<u64, Vec<String>>,
    pub http: reqwest::Client,
    /// `http`, or `https` for a cluster run with TLS.
    pub scheme: &'static str,
    /// The binary each node runs, where not this build's.
    binaries: BTreeMap<u64, PathBuf>,
}

/// `127.0.0.1:PORT` on a port nobody listens on (free when probed).
pub fn free_addr() -> String {
    format!("127.0.0.1:{}", free_port())
}

/// A port nobody listens on (free when probed).
pub fn free_port() -> u16 {
    free_ports(1)
}

/// The first of `n` consecutive ports nobody listens on (free when
/// probed), below the kernel's range of ephemeral ports: a port the kernel
/// handed out for a probe is one it may hand to an outgoing connection (a
/// client's, a node's) before the node meant to listen there binds it.
/// Each test process starts at a place of its own in the range and never
/// hands out a port twice.
pub fn free_ports(n: u16) -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const FLOOR: u32 = 10_000;
    let ceiling = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .filter(|low| *low > FLOOR + 1_000)
        .unwrap_or(32_768);
    let span = ceiling - FLOOR - u32::from(n);
    let start = std::process::id().wrapping_mul(7_919) % span;
    loop {
        let taken = NEXT.fetch_add(u32::from(n), Ordering::Relaxed);
        let base = (FLOOR + (start + taken) % span) as u16;
        if (0..n).all(|i| TcpListener::bind(("127.0.0.1", base + i)).is_ok()) {
            return base;
        }
    }
}

impl Cluster {
    /// Starts `n` nodes and waits until one speaks.
    pub async fn start(n: u64) -> Cluster {
        Self::start_with(n, &[]).await
    }

    /// Starts `n` nodes with extra `serve` flags.
    pub async fn start_with(n: u64, extra: &[&str]) -> Cluster {
        Self::start_each(n, extra, |_| Vec::new()).await
    }

    /// Starts `n` nodes with extra `serve` flags, and flags for each node.
    pub async fn start_each(
        n: u64,
        extra: &[&str],
        per_node: impl Fn(u64) -> Vec<String>,
    ) -> Cluster {
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        Self::start_over(n, extra, per_node, http, "http").await
    }

    /// Starts `n` nodes serving HTTPS with the certificates in `certs`
    /// (`scripts/make-certs certs node-1 ... node-n`): `node-ID.pem` and
    /// `node-ID-key.pem`, verified against `ca.pem` (mutual TLS between
    /// members); the test's client trusts that CA.
    pub async fn start_tls(n: u64, certs: &std::path::Path, extra: &[&str]) -> Cluster {
        let per_node = |id: u64| tls_flags(certs, id);
        let http = https_client(certs);
        Self::start_over(n, extra, per_node, http, "https").await
    }

    async fn start_over(
        n: u64,
        extra: &[&str],
        per_node: impl Fn(u64) -> Vec<String>,
        http: reqwest::Client,
        scheme: &'static str,
    ) -> Cluster {
        Self::start_running(n, extra, per_node, http, scheme, BTreeMap::new()).await
    }

    async fn start_running(
        n: u64,
        extra: &[&str],
        per_node: impl Fn(u64) -> Vec<String>,
        http: reqwest::Client,
        scheme: &'static str,
        binaries: BTreeMap<u64, PathBuf>,
    ) -> Cluster {
        let addrs: BTreeMap<u64, String> = (1..=n)
            .map(|id| (id, format!("127.0.0.1:{}", free_port())))
            .collect();
        let mut cluster = Cluster {
            dir: tempfile::tempdir().unwrap(),
            addrs,
            procs: BTreeMap::new(),
            extra_args: extra.iter().map(|s| s.to_string()).collect(),
            node_args: (1..=n).map(|id| (id, per_node(id))).collect(),
            joining: BTreeMap::new(),
            http,
            scheme,
            binaries,
        };
        for id in 1..=n {
            cluster.spawn(id);
        }
        cluster.all_follow_one().await;
        cluster
    }

    /// Waits until node `via` answers a cluster whose voters are `voters`,
    /// with no change under way; answers that view.
    pub async fn wait_for_voters(&self, via: u64, voters: &[u64]) -> Value {
        let start = Instant::now();
        loop {
            let (status, c) = self.get(via, "/v1/cluster").await;
            if status == 200 && c["changing"] == json!(false) {
                let mut seen: Vec<u64> = c["members"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .filter(|m| m["role"] == json!("voter"))
                    .map(|m| m["id"].as_u64().unwrap())
                    .collect();
                seen.sort_unstable();
                if seen == voters {
                    return c;
                }
            }
            assert!(
                start.elapsed() < PATIENCE,
                "node {via} never showed voters {voters:?}: last {c}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Starts `n` nodes running `binary` (another build's `leasehold`).
    pub async fn start_built(n: u64, binary: &std::path::Path, extra: &[&str]) -> Cluster {
        let http = reqwest::Client::builder().no_proxy().build().unwrap();
        let binaries = (1..=n).map(|id| (id, binary.to_path_buf())).collect();
        Self::start_running(n, extra, |_| Vec::new(), http, "http", binaries).await
    }

    /// Node `id` runs this build from its next start on.
    pub fn run_this_build(&mut self, id: u64) {
        self.binaries.remove(&id);
    }

    /// Sets the flags node `id` alone is started with from now on.
    pub fn set_node_args(&mut self, id: u64, args: Vec<String>) {
        self.node_args.insert(id, args);
    }

    pub fn data_dir(&self, id: u64) -> PathBuf {
        self.dir.path().join(format!("node-{id}"))
    }

    /// Starts (or restarts) node `id` from its data directory.
    pub fn spawn(&mut self, id: u64) {
        let peers: Vec<String> = self.addrs.iter().map(|(i, a)| format!("{i}={a}")).collect();
        // Appended to across restarts: a failing test shows what the node
        // did before it was stopped and started again.
        let path = self.dir.path().join(format!("node-{id}.log"));
        let mut log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        let _ = log.write_all(STARTED.as_bytes());
        let members: Vec<String> = match self.joining.get(&id) {
            Some(join) if join.is_empty() => Vec::new(),
            Some(join) => vec!["--join".to_string(), join.join(",")],
            None => vec!["--peers".to_string(), peers.join(",")],
        };
        let binary = self
            .binaries
            .get(&id)
            .cloned()
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_leasehold")));
        let child = Command::new(binary)
            .arg("serve")
            .args(["--id", &id.to_string()])
            .args(["--listen", &self.addrs[&id]])
            .args(members)
            .arg("--data-dir")
            .arg(self.data_dir(id))
            .args(["--cluster-token", TOKEN])
            .args(&self.extra_args)
            .args(self.node_args.get(&id).into_iter().flatten())
            .env("RUST_LOG", "info,openraft=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start leasehold serve");
        self.procs.insert(id, child);
    }

    /// Starts a new node `id` on a port of its own with `--join`, asking
    /// every node started so far to add it.
    pub fn spawn_joining(&mut self, id: u64) {
        let join: Vec<String> = self.addrs.values().cloned().collect();
        self.addrs.insert(id, format!("127.0.0.1:{}", free_port()));
        self.joining.insert(id, join);
        self.spawn(id);
    }

    /// Starts node `id` again on its address with its data directory
    /// wiped, joining through the other nodes: a machine rebuilt after its
    /// removal, added again under its old id.
    pub fn rejoin_wiped(&mut self, id: u64) {
        let others: Vec<u64> = self.addrs.keys().copied().filter(|o| *o != id).collect();
        self.rejoin_wiped_through(id, &others);
    }

    /// As [`Cluster::rejoin_wiped`], asking the nodes `through` (in turn).
    pub fn rejoin_wiped_through(&mut self, id: u64, through: &[u64]) {
        self.kill(id);
        let _ = std::fs::remove_dir_all(self.data_dir(id));
        let join: Vec<String> = through.iter().map(|o| self.addrs[o].clone()).collect();
        self.joining.insert(id, join);
        self.spawn(id);
    }

    /// Restarts node `id` from its data directory with neither `--peers`
    /// nor `--join`: its members are in its log.
    pub fn restart_bare(&mut self, id: u64) {
        self.kill(id);
        self.joining.insert(id, Vec::new());
        self.spawn(id);
    }

    pub fn pid(&self, id: u64) -> u32 {
        self.procs[&id].id()
    }

    /// kill -9.
    pub fn kill(&mut self, id: u64) {
        if let Some(mut child) = self.procs.remove(&id) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits up to `patience` for node `id` to exit by itself; answers its
    /// exit code (`None` if it did not exit, or died by a signal). The node
    /// is no longer counted live either way.
    pub fn wait_exit(&mut self, id: u64, patience: Duration) -> Option<i32> {
        let start = Instant::now();
        let mut child = self.procs.remove(&id)?;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status.code();
            }
            if start.elapsed() > patience {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn signal(&self, id: u64, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.pid(id).to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// SIGTERM, as systemd stops a service; waits up to `patience` for the
    /// node to exit and answers its exit code.
    pub fn terminate(&mut self, id: u64, patience: Duration) -> Option<i32> {
        self.signal(id, "-TERM");
        self.wait_exit(id, patience)
    }

    /// SIGSTOP: a long pause, as a GC or a frozen VM.
    pub fn pause(&self, id: u64) {
        self.signal(id, "-STOP");
    }

    /// SIGCONT.
    pub fn resume(&self, id: u64) {
        self.signal(id, "-CONT");
    }

    pub fn url(&self, id: u64, path: &str) -> String {
        format!("{}://{}{}", self.scheme, self.addrs[&id], path)
    }

    /// What node `id` logged since it was last started.
    pub fn log(&self, id: u64) -> String {
        let log = std::fs::read_to_string(self.dir.path().join(format!("node-{id}.log")))
            .unwrap_or_default();
        match log.rfind(STARTED) {
            Some(at) => log[at + STARTED.len()..].to_string(),
            None => log,
        }
    }

    /// The value of the series `series` (its name and labels, as
    /// `/metrics` writes them) at node `id`, if it is there.
    pub async fn metric(&self, id: u64, series: &str) -> Option<f64> {
        let text = self
            .http
            .get(self.url(id, "/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines().find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
    }

    /// GET, returning (status, JSON body). It carries the cluster token,
    /// which a node run with `--acl` takes for any right (others ignore it
    /// on the public routes).
    pub async fn get(&self, id: u64, path: &str) -> (u16, Value) {
        answer(
            self.http
                .get(self.url(id, path))
                .header("x-leasehold-token", TOKEN)
                .timeout(Duration::from_secs(10)),
        )
        .await
    }

    /// POST a raw body, returning (status, JSON body).
    pub async fn post_raw(
        &self,
        id: u64,
        path: &str,
        body: impl Into<reqwest::Body>,
    ) -> (u16, Value) {
        let request = self
            .http
            .post(self.url(id, path))
            .header("content-type", "application/json")
            .body(body)
            .timeout(Duration::from_secs(40));
        answer(request).await
    }

    pub async fn post(&self, id: u64, path: &str, body: Value) -> (u16, Value) {
        self.post_raw(id, path, body.to_string()).await
    }

    /// POST, retrying while the cluster answers 503 or not at all (a
    /// speaker change), until `PATIENCE` runs out.
    pub async fn post_settled(&self, id: u64, path: &str, body: Value) -> (u16, Value) {
        let start = Instant::now();
        loop {
            let (status, value) = self.post(id, path, body.clone()).await;
            if (status != 503 && status != 0) || start.elapsed() > PATIENCE {
                return (status, value);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Renews through node `id` as a client does: every `every`, and after
    /// a 503 or no answer again within the lease (a speaker change). The
    /// task panics on a refusal, or once `lease` has passed since the last
    /// renewal that succeeded: the holder would have lost its lock.
    pub fn keep_renewing(
        &self,
        id: u64,
        path: &str,
        body: Value,
        every: Duration,
        lease: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let url = self.url(id, path);
        let http = self.http.clone();
        tokio::spawn(async move {
            let mut renewed = Instant::now();
            loop {
                tokio::time::sleep(every).await;
                loop {
                    let sent = Instant::now();
                    let (status, answer) = answer(
                        http.post(&url)
                            .json(&body)
                            .timeout(lease.saturating_sub(renewed.elapsed())),
                    )
                    .await;
                    if status == 200 {
                        renewed = sent;
                        break;
                    }
                    assert!(
                        status == 503 || status == 0,
                        "renewal refused: {status} {answer}"
                    );
                    eprintln!("renewal answered {status} {answer}; again");
                    assert!(
                        renewed.elapsed() < lease,
                        "no renewal within the lease; last answer {status} {answer}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        })
    }

    pub async fn acquire(&self, via: u64, name: &str, extra: Value) -> (u16, Value) {
        let mut body = json!({ "name": name });
        if let Value::Object(map) = extra {
            body.as_object_mut().unwrap().extend(map);
        }
        self.post_settled(via, "/v1/locks/acquire", body).await
    }

    /// Acquires, expecting a grant; returns the lock.
    pub async fn must_acquire(&self, via: u64, name: &str, extra: Value) -> Value {
        let (status, body) = self.acquire(via, name, extra).await;
        assert_eq!(status, 200, "acquire {name} via node {via}: {body}");
        body["lock"].clone()
    }

    /// Waits until some node reports itself the rebuilt speaker, and
    /// returns its id and the term.
    pub async fn speaker(&self) -> (u64, u64) {
        self.speaker_other_than(None).await
    }

    pub async fn speaker_other_than(&self, not: Option<u64>) -> (u64, u64) {
        let start = Instant::now();
        loop {
            for &id in self.procs.keys() {
                if Some(id) == not {
                    continue;
                }
                let (status, c) = self.get(id, "/v1/cluster").await;
                if status == 200 && c["leader"] == json!(id) && c["rebuilt"] == json!(true) {
                    return (id, c["term"].as_u64().unwrap());
                }
            }
            assert!(start.elapsed() < PATIENCE, "no speaker within {PATIENCE:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until every running node names the speaker as the leader (a
    /// node lets Raft run a leader lease after it starts, and learns the
    /// leader from its first heartbeat). On a loaded machine leadership may
    /// move while the nodes learn it: then they are waited for to follow
    /// the new speaker.
    pub async fn all_follow_one(&self) {
        let start = Instant::now();
        loop {
            let (speaker, _) = self.speaker().await;
            let mut behind = None;
            for &id in self.procs.keys() {
                let (status, c) = self.get(id, "/v1/cluster").await;
                if status != 200 || c["leader"] != json!(speaker) {
                    behind = Some(id);
                    break;
                }
            }
            let Some(id) = behind else {
                return;
            };
            assert!(
                start.elapsed() < PATIENCE,
                "node {id} does not follow the speaker {speaker}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Sets node `id`'s fault plan (the node runs with `--chaos`).
    pub async fn set_plan(&self, id: u64, plan: Value) {
        let (status, answer) = answer(
            self.http
                .post(self.url(id, "/internal/chaos"))
                .header("x-leasehold-token", TOKEN)
                .json(&plan)
                .timeout(Duration::from_secs(5)),
        )
        .await;
        assert_eq!(status, 200, "fault plan for node {id}: {answer}");
    }

    /// The running nodes.
    /// Waits until every live node says the cluster agreed on protocol
    /// `protocol`: the view of the last node asked.
    pub async fn wait_protocol(&self, protocol: u64) -> Value {
        let start = Instant::now();
        loop {
            let mut last = Value::Null;
            let mut all = true;
            for id in self.live() {
                let (status, view) = self.get(id, "/v1/cluster").await;
                all &= status == 200 && view["protocol"] == json!(protocol);
                last = view;
            }
            if all {
                return last;
            }
            assert!(
                start.elapsed() < PATIENCE,
                "the cluster never agreed on protocol {protocol}: {last}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    pub fn live(&self) -> Vec<u64> {
        self.procs.keys().copied().collect()
    }

    /// The running nodes other than `id` (the speaker's followers).
    pub fn others(&self, id: u64) -> Vec<u64> {
        self.procs.keys().copied().filter(|&n| n != id).collect()
    }

    /// The member the speaker `speaker` sends its copies to first: the
    /// next running one after it in id order.
    pub fn first_copy_holder(&self, speaker: u64) -> u64 {
        let others = self.others(speaker);
        others
            .iter()
            .copied()
            .find(|&n| n > speaker)
            .unwrap_or(others[0])
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for child in self.procs.values_mut() {
            let _ = Command::new("kill")
                .args(["-CONT", &child.id().to_string()])
                .status();
            let _ = child.kill();
            let _ = child.wait();
        }
        if std::thread::panicking() {
            // Every node's, those stopped or killed before too; openraft's
            // own lines (its retries to a dead peer flood a log) left out.
            for id in self.addrs.keys() {
                let log = std::fs::read_to_string(self.dir.path().join(format!("node-{id}.log")))
                    .unwrap_or_default();
                let ours: Vec<&str> = log.lines().filter(|l| !l.contains("openraft::")).collect();
                eprintln!("--- node {id} log (last lines, openraft's left out) ---");
                for line in &ours[ours.len().saturating_sub(150)..] {
                    eprintln!("{line}");
                }
            }
        }
    }
}

/// Sends `request`: (status, JSON body), or (0, null) with no answer.
/// Makes a test CA in `dir` (kept if there) and a certificate of its for
/// each of `names`, with `scripts/make-certs`.
pub fn make_certs(dir: &std::path::Path, names: &[&str]) {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/make-certs");
    let status = Command::new("bash")
        .arg(script)
        .arg(dir)
        .args(names)
        .status()
        .expect("run scripts/make-certs (needs openssl)");
    assert!(status.success(), "scripts/make-certs failed");
}

/// The `serve` flags of node `id` with the certificates in `certs`.
pub fn tls_flags(certs: &std::path::Path, id: u64) -> Vec<String> {
    let file = |name: String| certs.join(name).display().to_string();
    vec![
        "--tls-cert".into(),
        file(format!("node-{id}.pem")),
        "--tls-key".into(),
        file(format!("node-{id}-key.pem")),
        "--tls-ca".into(),
        file("ca.pem".into()),
    ]
}

/// An HTTP client trusting only the CA in `certs`.
pub fn https_client(certs: &std::path::Path) -> reqwest::Client {
    let pem = std::fs::read(certs.join("ca.pem")).unwrap();
    let ca = reqwest::Certificate::from_pem(&pem).unwrap();
    reqwest::Client::builder()
        .no_proxy()
        .tls_built_in_root_certs(false)
        .add_root_certificate(ca)
        .build()
        .unwrap()
}

pub async fn answer(request: reqwest::RequestBuilder) -> (u16, Value) {
    match request.send().await {
        Ok(r) => {
            let status = r.status().as_u16();
            (status, r.json().await.unwrap_or(Value::Null))
        }
        Err(_) => (0, Value::Null),
    }
}

/// The fence of a lock as JSON.
pub fn fence(lock: &Value) -> u64 {
    lock["fence"].as_u64().expect("fence")
}

/// The term a fence was granted in.
pub fn fence_term(lock: &Value) -> u64 {
    fence(lock) >> 40
}
