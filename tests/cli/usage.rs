//! Bad usage said as such, before anything starts: durations, members,
//! ports, links, timeouts.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::support;

/// Every duration flag of `serve` is checked before anything starts: a
/// value the node cannot run with is a usage error (64) naming the flag.
#[test]
fn serve_refuses_durations_it_cannot_run_with() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&[&str], &str); 6] = [
        (&["--rebuild-timeout", "0"], "--rebuild-timeout"),
        (&["--rebuild-timeout", "999999999"], "--rebuild-timeout"),
        (&["--max-lease", "99999999999"], "--max-lease"),
        (&["--max-lease", "0"], "longer than zero"),
        (
            &["--default-lease", "5000", "--max-lease", "4000"],
            "--default-lease",
        ),
        (&["--threads", "0"], "--threads"),
    ];
    for (flags, says) in cases {
        let peers = ["--peers", "1=127.0.0.1:1"];
        let flags: Vec<&str> = peers.iter().chain(flags).copied().collect();
        serve_refuses_usage(dir.path(), &flags, says);
    }
}

/// `serve` with `flags` on a new data directory under `dir` exits 64 with
/// a message that says `says`, and creates nothing.
fn serve_refuses_usage(dir: &std::path::Path, flags: &[&str], says: &str) {
    let output = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--id", "1", "--listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(dir.join("node"))
        .args(["--cluster-token", "t"])
        .args(flags)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(64), "{flags:?}: {stderr}");
    assert!(stderr.contains(says), "{flags:?}: {stderr}");
    assert!(
        !dir.join("node").exists(),
        "{flags:?} created the data directory"
    );
}

/// A new data directory needs `--peers` (to form a cluster) or `--join`
/// (to join one), never both; only a restarted member may start with
/// neither.
#[test]
fn serve_needs_its_members_on_a_new_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&[&str], &str); 2] = [
        (&[], "--join"),
        (
            &["--peers", "1=127.0.0.1:1", "--join", "127.0.0.1:2"],
            "--join",
        ),
    ];
    for (flags, says) in cases {
        serve_refuses_usage(dir.path(), flags, says);
    }
}

/// `up` on a port already taken fails with the port's error, and leaves no
/// temporary data directory behind; logs go to stderr without colour codes
/// when it is not a terminal.
/// An empty name is the caller's mistake, said as such (not blamed on the
/// endpoint); a dead endpoint is reported within `--timeout`, naming the
/// cause.
#[test]
fn failures_name_their_cause_within_the_timeout() {
    let dead = support::free_addr();
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["get", "", "--endpoints", &dead])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("name"), "{stderr}");
    let started = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["get", "jobs/1", "--timeout", "1s", "--endpoints", &dead])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(stderr.contains("connection refused"), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// A link from a node to itself is refused as bad usage, before anything
/// is asked of a cluster.
#[test]
fn chaos_refuses_a_link_from_a_node_to_itself() {
    for args in [
        ["chaos", "partition", "1", "1"],
        ["chaos", "slow", "2", "2"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
            .args(args)
            .args(if args[1] == "slow" {
                &["100ms"][..]
            } else {
                &[][..]
            })
            .env("LEASEHOLD_UP", "/nonexistent")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
        assert!(stderr.contains("one node"), "{stderr}");
    }
}

#[test]
fn up_that_cannot_start_removes_its_temporary_directory() {
    // Node 1's port free, node 2's taken: node 1 starts (and makes its
    // directory) before node 2 fails.
    let base = support::free_ports(2);
    let taken = std::net::TcpListener::bind(("127.0.0.1", base + 1)).unwrap();
    let port = base + 1;
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["up", "--nodes", "2", "--base-port", &base.to_string()])
        .env("TMPDIR", tmp.path())
        .stdin(Stdio::null())
        .output()
        .expect("run leasehold up");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(69),
        "unavailable, as elsewhere: {stderr}"
    );
    assert!(stderr.contains(&port.to_string()), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "no ANSI codes: {stderr:?}");
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    drop(taken);
}
