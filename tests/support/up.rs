//! A cluster of `leasehold up`, as clients/conformance/README.md starts it:
//! `leasehold up --base-port 0` in a temporary directory, with TLS and an
//! ACL when the scenario asks, ready once every node's `/readyz` is 200.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::make_certs;

/// How long a cluster may take to be ready.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// A running `up` and what the steps need of it.
pub(crate) struct UpCluster {
    child: Child,
    /// The temporary directory (`D` in the README).
    pub(crate) dir: tempfile::TempDir,
    /// Each node's `host:port`, by id.
    pub(crate) addrs: std::collections::BTreeMap<u64, String>,
    /// The CA of a TLS cluster.
    pub(crate) ca: Option<PathBuf>,
}

impl Drop for UpCluster {
    fn drop(&mut self) {
        // SIGTERM stops every node; then wait, or kill after 10 s.
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(10) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl UpCluster {
    /// Starts the cluster `spec` (a scenario's `cluster`) describes:
    /// `nodes` (3), `tls`, `acl` (the file's text), `serve_args`.
    pub(crate) async fn start(spec: &Value) -> UpCluster {
        let dir = tempfile::tempdir().unwrap();
        let nodes = spec["nodes"].as_u64().unwrap_or(3);
        let mut serve_args: Vec<String> = Vec::new();
        let mut ca = None;
        if spec["tls"].as_bool() == Some(true) {
            let certs = dir.path().join("tls");
            make_certs(&certs, &["node"]);
            let file = |name: &str| certs.join(name).display().to_string();
            serve_args.extend([
                "--tls-cert".into(),
                file("node.pem"),
                "--tls-key".into(),
                file("node-key.pem"),
                "--tls-ca".into(),
                file("ca.pem"),
            ]);
            ca = Some(certs.join("ca.pem"));
        }
        if let Some(args) = spec["serve_args"].as_array() {
            serve_args.extend(args.iter().filter_map(|a| a.as_str().map(str::to_string)));
        }
        if let Some(acl) = spec["acl"].as_str() {
            let path = dir.path().join("acl.toml");
            std::fs::write(&path, acl).unwrap();
            serve_args.extend(["--acl".into(), path.display().to_string()]);
        }
        let up_dir = dir.path().join("up");
        let mut command = Command::new(env!("CARGO_BIN_EXE_leasehold"));
        command
            .args(["up", "--nodes", &nodes.to_string(), "--base-port", "0"])
            .arg("--data-dir")
            .arg(&up_dir);
        if !serve_args.is_empty() {
            command.arg("--").args(&serve_args);
        }
        let child = command
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut cluster = UpCluster {
            child,
            dir,
            addrs: Default::default(),
            ca,
        };
        cluster.wait_ready().await;
        cluster
    }

    /// `kill -9` of the `up` process itself (dropping the cluster reaps it).
    pub(crate) fn kill_up(&self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
    }

    /// The directory `chaos` is pointed at.
    pub(crate) fn up_dir(&self) -> PathBuf {
        self.dir.path().join("up")
    }

    async fn wait_ready(&mut self) {
        let start = Instant::now();
        let state: Value = loop {
            if let Some(state) = std::fs::read_to_string(self.up_dir().join("up.json"))
                .ok()
                .and_then(|t| serde_json::from_str(&t).ok())
            {
                break state;
            }
            assert!(start.elapsed() < READY_WITHIN, "no up.json");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        for (id, node) in state["nodes"].as_object().unwrap() {
            let addr = node["addr"].as_str().unwrap().to_string();
            self.addrs.insert(id.parse().unwrap(), addr);
        }
        let mut http = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(2));
        let scheme = match &self.ca {
            Some(ca) => {
                let pem = std::fs::read(ca).unwrap();
                http = http
                    .tls_built_in_root_certs(false)
                    .add_root_certificate(reqwest::Certificate::from_pem(&pem).unwrap());
                "https"
            }
            None => "http",
        };
        let http = http.build().unwrap();
        for addr in self.addrs.values() {
            loop {
                let ready = http.get(format!("{scheme}://{addr}/readyz")).send().await;
                if ready.is_ok_and(|r| r.status() == 200) {
                    break;
                }
                assert!(
                    start.elapsed() < READY_WITHIN,
                    "node {addr} not ready in {READY_WITHIN:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }

    /// `leasehold chaos ARGS` against this cluster.
    pub(crate) fn chaos(&self, args: &[String]) -> Result<String, String> {
        let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .arg("chaos")
            .args(args)
            .env("LEASEHOLD_UP", self.up_dir())
            .output()
            .map_err(|e| e.to_string())?;
        match out.status.success() {
            true => Ok(String::from_utf8_lossy(&out.stdout).into_owned()),
            false => Err(format!(
                "leasehold chaos {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            )),
        }
    }
}
