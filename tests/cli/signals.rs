//! How `lock` stops its command: SIGTERM passed on, SIGKILL before the
//! lease ends, the whole process group, at once on a refused renewal.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::leasehold;
use crate::support::Cluster;

/// Whether process `pid` runs (a zombie does not count).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => !stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

fn signal(pid: u32, sig: &str) {
    let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
}

/// Kills what a test started (the `leasehold` process, its command and
/// any descendant recorded) if still running when the test ends, passed
/// or failed.
struct Reap(Vec<u32>);

impl Drop for Reap {
    fn drop(&mut self) {
        for &pid in &self.0 {
            if running(pid) {
                signal(pid, "-KILL");
            }
        }
    }
}

/// The pid a command wrote to `path`.
async fn read_pid(path: &std::path::Path) -> u32 {
    let start = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Ok(pid) = text.trim().parse() {
                return pid;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no pid in {}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The exit status of `child` if it exits within `patience`.
async fn exit_within(
    child: &mut std::process::Child,
    patience: Duration,
) -> Option<std::process::ExitStatus> {
    let start = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Some(status);
        }
        if start.elapsed() > patience {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Whether `pid` stops running within `patience`.
async fn gone_within(pid: u32, patience: Duration) -> bool {
    let start = Instant::now();
    while running(pid) {
        if start.elapsed() > patience {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

/// A script that records its pid, then ignores SIGTERM and SIGINT (it
/// notes a SIGTERM in `marker`) and runs until killed.
fn stubborn(pid_file: &std::path::Path, marker: &std::path::Path) -> String {
    format!(
        "echo $$ > {}; trap 'echo term > {}' TERM; trap '' INT; while :; do sleep 0.2; done",
        pid_file.display(),
        marker.display()
    )
}

/// Runs `leasehold lock NAME --lease LEASE_MS -- sh -c SCRIPT` through
/// `nodes`, its stderr to `stderr` (or nowhere), and waits until the script
/// wrote a pid (its own, or a child's) to `pid_file`: the holder, a reaper
/// that kills both in the end, and that pid.
async fn lock_running(
    cluster: &Cluster,
    nodes: &[u64],
    (name, lease_ms): (&str, &str),
    script: &str,
    pid_file: &std::path::Path,
    stderr: Option<&std::path::Path>,
) -> (std::process::Child, Reap, u32) {
    let args = ["lock", name, "--lease", lease_ms, "--", "sh", "-c", script];
    let err = match stderr {
        Some(path) => Stdio::from(std::fs::File::create(path).unwrap()),
        None => Stdio::null(),
    };
    let holder = leasehold(cluster, nodes, &args)
        .stdin(Stdio::null())
        .stderr(err)
        .spawn()
        .unwrap();
    let mut reap = Reap(vec![holder.id()]);
    let pid = read_pid(pid_file).await;
    reap.0.push(pid);
    (holder, reap, pid)
}

/// A [`stubborn`] command under `leasehold lock NAME --lease LEASE_MS`
/// through `nodes`: the holder, its reaper, the command's pid, the file it
/// notes SIGTERM in, and the file leasehold's stderr goes to.
struct Stubborn {
    holder: std::process::Child,
    _reap: Reap,
    command: u32,
    marker: std::path::PathBuf,
    stderr: std::path::PathBuf,
}

async fn lock_stubborn(cluster: &Cluster, nodes: &[u64], name_lease: (&str, &str)) -> Stubborn {
    let pid_file = cluster.dir.path().join("cmd.pid");
    let marker = cluster.dir.path().join("got-term");
    let stderr = cluster.dir.path().join("lock.err");
    let script = stubborn(&pid_file, &marker);
    let (holder, _reap, command) = lock_running(
        cluster,
        nodes,
        name_lease,
        &script,
        &pid_file,
        Some(&stderr),
    )
    .await;
    Stubborn {
        holder,
        _reap,
        command,
        marker,
        stderr,
    }
}

/// Ctrl-C passes on as SIGTERM to the command; a command that ignores it
/// is SIGKILLed before the lease (as it stood) ends, not waited on forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_stops_a_command_that_ignores_sigterm_before_the_lease_ends() {
    let cluster = Cluster::start(3).await;
    let Stubborn {
        mut holder,
        _reap,
        command,
        marker,
        stderr,
    } = lock_stubborn(&cluster, &[1, 2, 3], ("cli/ctrl-c", "2000")).await;

    signal(holder.id(), "-INT");
    let status = exit_within(&mut holder, Duration::from_secs(20)).await;
    let said = std::fs::read_to_string(&stderr).unwrap_or_default();
    eprintln!("{said}");
    assert!(
        status.is_some(),
        "leasehold still waits on its command after Ctrl-C: {said}"
    );
    assert!(!running(command), "the command outlived leasehold: {said}");
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap_or_default().trim(),
        "term",
        "Ctrl-C reached the command as SIGTERM"
    );
    assert!(
        !status.unwrap().success(),
        "a killed command's status is a failure"
    );
    assert!(said.contains("before the lease ends"), "{said}");
    // One story: when SIGKILL comes, then that it came; no promise of a
    // margin the renewals went on to move.
    let promised: u64 = said
        .split("SIGKILL in ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("when SIGKILL comes is not said: {said}"));
    assert!(promised <= 2000, "{said}");
    assert!(!said.contains("at the latest"), "{said}");
}

/// On a lapsed lock the command gets SIGTERM at once and SIGKILL before
/// the lease ends: it is dead before anyone else can take the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lock_kills_a_command_that_ignores_sigterm_before_the_lease_ends() {
    let mut cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    let follower = cluster.live().into_iter().find(|&i| i != speaker).unwrap();
    // This holder can reach only one node, which then dies.
    let Stubborn {
        mut holder,
        _reap,
        command,
        marker,
        stderr,
    } = lock_stubborn(&cluster, &[follower], ("cli/lapse", "2000")).await;

    cluster.kill(follower);
    // Take the lock as soon as the cluster lets anyone: the command must
    // already be dead by then.
    let start = Instant::now();
    loop {
        let (status, _) = cluster
            .acquire(speaker, "cli/lapse", serde_json::json!({"lease_ms": 2000}))
            .await;
        if status == 200 {
            assert!(
                !running(command),
                "the cluster granted the lock to another while the command ran"
            );
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(30));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let status = exit_within(&mut holder, Duration::from_secs(20)).await;
    let said = std::fs::read_to_string(&stderr).unwrap_or_default();
    eprintln!("{said}");
    assert_eq!(status.and_then(|s| s.code()), Some(75), "{said}");
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap_or_default().trim(),
        "term",
        "the command got SIGTERM first"
    );
    // SIGKILL was sent before the lease ended on the client's own clock.
    assert!(said.contains("before the lease ends"), "{said}");
    assert!(!said.contains("after the lease ended"), "{said}");
}

/// The command runs in its own process group and the whole group is
/// stopped: a grandchild that ignores SIGTERM does not outlive a lost lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lock_stops_the_commands_children_too() {
    let mut cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    let follower = cluster.live().into_iter().find(|&i| i != speaker).unwrap();
    let pid_file = cluster.dir.path().join("grandchild.pid");
    // The shell dies of SIGTERM; its child ignores it.
    let script = format!(
        "(trap '' TERM; exec sleep 60) & echo $! > {}; wait",
        pid_file.display()
    );
    let (mut holder, _reap, grandchild) = lock_running(
        &cluster,
        &[follower],
        ("cli/group", "2000"),
        &script,
        &pid_file,
        None,
    )
    .await;
    assert!(running(grandchild));

    cluster.kill(follower);
    let status = exit_within(&mut holder, Duration::from_secs(20)).await;
    assert_eq!(status.and_then(|s| s.code()), Some(75));
    assert!(
        gone_within(grandchild, Duration::from_secs(2)).await,
        "the command's child outlived the lock"
    );
}

/// A refused renewal (an operator released the lock: another may hold it
/// already) stops the command at once, without waiting for the old lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_renewal_stops_the_command_at_once() {
    let cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    // A 30 s lease: renewed every 10 s, so the old lease ends 20 s or more
    // after a release that comes between two renewals.
    let Stubborn {
        mut holder,
        _reap,
        command,
        marker: _,
        stderr,
    } = lock_stubborn(&cluster, &[1, 2, 3], ("cli/refused", "30000")).await;

    // An operator releases it by name and id.
    let (status, body) = cluster.get(speaker, "/v1/locks/cli%2Frefused").await;
    assert_eq!(status, 200, "{body}");
    let id = body["lock"]["id"].clone();
    let (status, body) = cluster
        .post_settled(
            speaker,
            "/v1/locks/release",
            serde_json::json!({"name": "cli/refused", "id": id}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let released = Instant::now();

    // The next renewal (within 10 s) is refused; then the command dies
    // within seconds, well before the old lease's end (20 s on).
    let status = exit_within(&mut holder, Duration::from_secs(40)).await;
    let took = released.elapsed();
    let said = std::fs::read_to_string(&stderr).unwrap_or_default();
    eprintln!("{said}");
    assert_eq!(status.and_then(|s| s.code()), Some(75), "{said}");
    assert!(!running(command), "{said}");
    assert!(
        took < Duration::from_secs(15),
        "the command ran {took:?} after its lock was released: {said}"
    );
    assert!(said.contains("refused"), "{said}");
    // The client library's lines read as the command's own.
    assert!(
        said.contains("leasehold: warning: renewal refused: the lock is lost"),
        "{said}"
    );
    assert!(
        !said.contains(" WARN "),
        "a tracing line among the command's: {said}"
    );
}
