//! The command line against a real cluster: `lock` passes exit codes on,
//! refuses when held, signals its command when the lock is lost; `elect`
//! runs one leader at a time; `locks` and `status` show the cluster.

mod lock;
mod operators;
mod signals;
mod usage;

use std::process::{Command, Output, Stdio};

use crate::support::Cluster;

fn leasehold(cluster: &Cluster, nodes: &[u64], args: &[&str]) -> Command {
    let endpoints: Vec<String> = nodes.iter().map(|id| cluster.addrs[id].clone()).collect();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    cmd.args(args)
        .env("LEASEHOLD_ENDPOINTS", endpoints.join(","))
        .env("RUST_LOG", "warn");
    cmd
}

fn run(mut cmd: Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("run leasehold")
}

/// A child's stderr read on a thread of its own, so the child never blocks
/// on a full pipe, and a test can wait for a line before acting.
struct Stderr {
    lines: std::sync::mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Stderr {
    fn watch(child: &mut std::process::Child) -> Stderr {
        use std::io::BufRead;
        let pipe = child.stderr.take().expect("piped stderr");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(pipe).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Stderr {
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits up to `within` for a line starting with `prefix`; panics with
    /// what was printed otherwise.
    fn wait_for(&mut self, prefix: &str, within: std::time::Duration) {
        let end = std::time::Instant::now() + within;
        loop {
            let left = end.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    let found = line.starts_with(prefix);
                    self.seen.push(line);
                    if found {
                        return;
                    }
                }
                Err(_) => panic!("no line {prefix:?} on stderr; it printed:\n{}", self.text()),
            }
        }
    }

    /// Everything printed so far.
    fn text(&mut self) -> String {
        self.seen.extend(self.lines.try_iter());
        self.seen.join("\n")
    }
}

/// Waits up to `within` for the child to exit; kills it and panics with its
/// stderr otherwise.
fn exit_within(
    child: &mut std::process::Child,
    stderr: &mut Stderr,
    within: std::time::Duration,
) -> std::process::ExitStatus {
    let end = std::time::Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("wait for leasehold") {
            return status;
        }
        if std::time::Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "still running after {within:?}; it printed:\n{}",
                stderr.text()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
