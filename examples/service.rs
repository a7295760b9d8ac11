//! A service instance that embeds a leasehold node and elects a leader
//! among its instances with the leader elector: the shape of a real
//! service, and what `tests/embedded_service.rs` runs three of, pausing
//! and stopping them.
//!
//! ```text
//! service --id N --peers 1=HOST:PORT,2=..,3=.. --dir DIR [--lease-ms 2000]
//!         [--go FILE] [--on-sigterm resign|shutdown]
//! ```
//!
//! It campaigns once `--go` exists (at once without it). While it leads it
//! works in steps of 20 ms, checking its leadership before each. It prints
//! one line per event, each with the wall clock in milliseconds since the
//! epoch: `started FENCE T`, `work FENCE T`, `stopped T`, `leader VALUE T`
//! (`-` for none). On SIGTERM it resigns and then shuts its node down, or
//! (`--on-sigterm shutdown`) shuts its node down first, which resigns too.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold_node::NodeConfig;
use tokio::signal::unix::{signal, SignalKind};
use tokio_util::sync::CancellationToken;

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis())
}

struct Args {
    id: u64,
    peers: BTreeMap<u64, String>,
    dir: PathBuf,
    lease: Duration,
    go: Option<PathBuf>,
    shutdown_first: bool,
}

fn args() -> Result<Args, String> {
    let mut args = std::env::args().skip(1);
    let (mut id, mut peers, mut dir) = (None, BTreeMap::new(), None);
    let (mut lease, mut go, mut shutdown_first) = (Duration::from_secs(2), None, false);
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--id" => id = Some(value()?.parse().map_err(|e| format!("--id: {e}"))?),
            "--peers" => {
                for peer in value()?.split(',') {
                    let (id, addr) = peer.split_once('=').ok_or("--peers: ID=HOST:PORT,..")?;
                    let id = id.parse().map_err(|e| format!("--peers: {e}"))?;
                    peers.insert(id, addr.to_string());
                }
            }
            "--dir" => dir = Some(PathBuf::from(value()?)),
            "--lease-ms" => {
                let ms = value()?.parse().map_err(|e| format!("--lease-ms: {e}"))?;
                lease = Duration::from_millis(ms);
            }
            "--go" => go = Some(PathBuf::from(value()?)),
            "--on-sigterm" => shutdown_first = value()? == "shutdown",
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Args {
        id: id.ok_or("--id is required")?,
        dir: dir.ok_or("--dir is required")?,
        peers,
        lease,
        go,
        shutdown_first,
    })
}

fn main() -> ExitCode {
    let args = match args() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("service: {e}");
            return ExitCode::from(64);
        }
    };
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(serve(args))
}

async fn serve(args: Args) -> ExitCode {
    let Some(addr) = args.peers.get(&args.id).cloned() else {
        eprintln!("service: --id {} is not in --peers", args.id);
        return ExitCode::from(64);
    };
    let config = NodeConfig::new(
        args.id,
        args.peers.clone(),
        args.dir.join(format!("node-{}", args.id)),
        "service-example",
    );
    let listener = match tokio::net::TcpListener::bind(&addr).await {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("service: {addr}: {e}");
            return ExitCode::from(69);
        }
    };
    let running = match leasehold_node::start(config, listener).await {
        Ok(running) => running,
        Err(e) => {
            eprintln!("service: {e}");
            return ExitCode::from(69);
        }
    };
    let me = format!("instance-{}", args.id);
    let elector = running
        .node()
        .client()
        .elector("service/leader", &me)
        .lease(args.lease)
        .on_started_leading(|leading| async move {
            println!("started {} {}", leading.fence(), now_ms());
            // Check before every step: a pause past the lease ends here.
            // A step is stamped with the time it was checked at: a pause
            // between the check and the print is not a step begun after
            // the pause (the fence guards such a step's tail).
            loop {
                let checked = now_ms();
                if leading.check().is_err() {
                    break;
                }
                println!("work {} {checked}", leading.fence());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .on_stopped_leading(|| println!("stopped {}", now_ms()))
        .on_new_leader(|leader| {
            let value = leader.and_then(|l| l.data.as_deref()).unwrap_or("-");
            println!("leader {value} {}", now_ms());
        })
        .build();

    if let Some(go) = &args.go {
        while !go.exists() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let stop = CancellationToken::new();
    let electing = tokio::spawn({
        let (elector, stop) = (elector.clone(), stop.clone());
        async move { elector.run(stop).await }
    });
    let mut sigterm = signal(SignalKind::terminate()).expect("a SIGTERM handler");
    sigterm.recv().await;
    if args.shutdown_first {
        running.shutdown().await;
        stop.cancel();
        let _ = electing.await;
    } else {
        stop.cancel();
        let _ = electing.await;
        running.shutdown().await;
    }
    println!("exiting {}", now_ms());
    ExitCode::SUCCESS
}
