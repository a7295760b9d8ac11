//! Three processes, each embedding a leasehold node, elect a leader among
//! themselves through the same client types an HTTP client uses.
//!
//! `cargo run -p leasehold-node --example election` starts three copies of
//! itself; each runs a node in-process, campaigns, leads for a moment,
//! resigns, and stops once every process has led once.

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::process::{Command, ExitCode};
use std::time::Duration;

use futures::StreamExt;
use leasehold_client::CampaignOptions;
use leasehold_node::NodeConfig;

const ELECTION: &str = "example/leader";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("--member") => member(&args[2..]),
        _ => launch(),
    }
}

/// Starts three member processes on ports probed now, and waits for them.
fn launch() -> ExitCode {
    let ports: Vec<u16> = (0..3)
        .map(|_| {
            TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        })
        .collect();
    let peers: Vec<String> = ports
        .iter()
        .enumerate()
        .map(|(i, p)| format!("{}=127.0.0.1:{p}", i + 1))
        .collect();
    let dir = std::env::temp_dir().join(format!("leasehold-election-{}", std::process::id()));
    let me = std::env::current_exe().expect("own path");
    let children: Vec<_> = (1..=3)
        .map(|id| {
            Command::new(&me)
                .args([
                    "--member",
                    &id.to_string(),
                    &peers.join(","),
                    &dir.display().to_string(),
                ])
                .spawn()
                .expect("start a member")
        })
        .collect();
    let mut ok = true;
    for mut child in children {
        ok &= child.wait().map(|s| s.success()).unwrap_or(false);
    }
    let _ = std::fs::remove_dir_all(&dir);
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// One member: a node in this process, and a candidate using it.
fn member(args: &[String]) -> ExitCode {
    let id: u64 = args[0].parse().expect("id");
    let peers: BTreeMap<u64, String> = args[1]
        .split(',')
        .map(|p| {
            let (id, addr) = p.split_once('=').expect("id=addr");
            (id.parse().expect("id"), addr.to_string())
        })
        .collect();
    let config = NodeConfig::new(
        id,
        peers.clone(),
        std::path::Path::new(&args[2]).join(format!("node-{id}")),
        "example-token",
    );
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&peers[&id])
            .await
            .expect("listen");
        let running = leasehold_node::start(config, listener)
            .await
            .expect("start the node");
        let client = running.node().client();
        let me = format!("process-{id}");

        // Watch who leads until all three have.
        let watcher = client.clone();
        let everyone = tokio::spawn(async move {
            let mut seen = BTreeSet::new();
            let mut leaders = Box::pin(watcher.observe(ELECTION));
            while let Some(next) = leaders.next().await {
                if let Ok(Some(lock)) = next {
                    seen.insert(lock.data.unwrap_or_default());
                    if seen.len() == 3 {
                        return;
                    }
                }
            }
        });

        let options = CampaignOptions {
            lease: Some(Duration::from_secs(3)),
            ..Default::default()
        };
        let leadership = client
            .campaign(ELECTION, &me, options)
            .await
            .expect("campaign");
        println!("{me} leads (fence {})", leadership.fence());
        tokio::time::sleep(Duration::from_millis(500)).await;
        println!("{me} resigns");
        leadership.resign().await.expect("resign");

        let _ = tokio::time::timeout(Duration::from_secs(60), everyone).await;
        // Stay up a moment so the others can finish their turns too.
        tokio::time::sleep(Duration::from_secs(1)).await;
        running.shutdown().await;
    });
    ExitCode::SUCCESS
}
