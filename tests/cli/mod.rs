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
