//! The command line against a real cluster: `lock` passes exit codes on,
//! refuses when held, signals its command when the lock is lost; `elect`
//! runs one leader at a time; `locks` and `status` show the cluster.

mod support;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use support::{Cluster, PATIENCE};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_runs_the_command_and_passes_its_exit_status_on() {
    let cluster = Cluster::start(3).await;
    let out = run(leasehold(
        &cluster,
        &[1, 2, 3],
        &["lock", "cli/a", "--", "sh", "-c", "exit 7"],
    ));
    assert_eq!(
        out.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run(leasehold(&cluster, &[2], &["lock", "cli/a", "--", "true"]));
    assert_eq!(out.status.code(), Some(0));
    // Released when the command ended: nothing left.
    let (status, _) = cluster.get(1, "/v1/locks/cli%2Fa").await;
    assert_eq!(status, 404);
    let out = run(leasehold(
        &cluster,
        &[1],
        &["lock", "cli/a", "--", "/no/such/program"],
    ));
    assert_eq!(out.status.code(), Some(127));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_refuses_when_held_and_locks_lists_the_holder() {
    let cluster = Cluster::start(3).await;
    let mut holder = leasehold(
        &cluster,
        &[1],
        &["lock", "cli/held", "--holder", "first", "--", "sleep", "30"],
    )
    .stdin(Stdio::null())
    .spawn()
    .unwrap();
    let start = Instant::now();
    loop {
        let (status, _) = cluster.get(1, "/v1/locks/cli%2Fheld").await;
        if status == 200 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // -n fails at once, as `flock -n` does; --wait takes a bound with
    // units; --conflict-exit chooses the status, as `flock -E` does.
    let out = run(leasehold(
        &cluster,
        &[2],
        &["lock", "cli/held", "-n", "--", "true"],
    ));
    assert_eq!(
        out.status.code(),
        Some(73),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("first"));
    let waited = Instant::now();
    let out = run(leasehold(
        &cluster,
        &[2],
        &[
            "lock",
            "cli/held",
            "--wait",
            "1s",
            "--conflict-exit",
            "5",
            "--",
            "true",
        ],
    ));
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(waited.elapsed() >= Duration::from_secs(1));
    let out = run(leasehold(
        &cluster,
        &[2],
        &["lock", "cli/held", "--wait", "ten", "--", "true"],
    ));
    assert_eq!(
        out.status.code(),
        Some(64),
        "a bad duration is a usage error"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not a duration"));
    // By default it waits, as flock, `etcdctl lock` and `consul lock` do:
    // the holder goes, and the waiting command runs.
    let mut waiting = leasehold(
        &cluster,
        &[2],
        &["lock", "cli/held", "--lease", "5s", "--", "true"],
    )
    .stdin(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(waiting.try_wait().unwrap().is_none(), "it waits while held");

    let out = run(leasehold(&cluster, &[3], &["locks"]));
    assert!(out.status.success());
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("cli/held") && table.contains("first"),
        "{table}"
    );

    // -o json: one document each, the API's shapes.
    let out = run(leasehold(&cluster, &[3], &["locks", "-o", "json"]));
    assert!(out.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let listed = doc["locks"].as_array().unwrap();
    assert!(
        listed
            .iter()
            .any(|l| l["name"] == json!("cli/held") && l["holder"] == json!("first")),
        "{doc}"
    );
    let out = run(leasehold(
        &cluster,
        &[2],
        &["get", "cli/held", "-o", "json"],
    ));
    assert!(out.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["lock"]["holder"], json!("first"), "{doc}");
    let out = run(leasehold(
        &cluster,
        &[2],
        &["get", "cli/free", "-o", "json"],
    ));
    assert_eq!(out.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc, json!({ "lock": null }));

    let out = run(leasehold(&cluster, &[3], &["status"]));
    assert!(out.status.success());
    let status = String::from_utf8_lossy(&out.stdout);
    assert!(
        status.contains("speaker: node") && status.contains("rebuilt: true"),
        "{status}"
    );
    // Three voters, and how far behind each is (the speaker answers).
    assert_eq!(status.matches(" voter ").count(), 3, "{status}");
    assert_eq!(status.matches("entries behind").count(), 3, "{status}");

    holder.kill().unwrap();
    let _ = holder.wait();
    // The holder died without releasing: the waiter gets the lock once its
    // lease is over, and runs its command.
    let status = tokio::task::spawn_blocking(move || waiting.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "{status:?}");
}

/// `lock NAME` without a command holds the lock and prints it until
/// interrupted, as `etcdctl lock NAME` does; Ctrl-C releases it (exit 0).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_without_a_command_holds_until_interrupted() {
    let cluster = Cluster::start(3).await;
    let mut holding = leasehold(&cluster, &[1, 2, 3], &["lock", "cli/hold"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(holding.stdout.take().unwrap());
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut stdout, &mut line).unwrap();
        line
    })
    .await
    .unwrap();
    assert!(
        line.starts_with("cli/hold ") && line.contains("fence"),
        "{line}"
    );
    let (status, _) = cluster.get(1, "/v1/locks/cli%2Fhold").await;
    assert_eq!(status, 200, "held while it runs");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(holding.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = tokio::task::spawn_blocking(move || holding.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(0));
    let (status, _) = cluster.get(1, "/v1/locks/cli%2Fhold").await;
    assert_eq!(status, 404, "released on Ctrl-C");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_signals_its_command_and_exits_non_zero_when_the_lock_is_lost() {
    let mut cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    let follower = cluster.live().into_iter().find(|&i| i != speaker).unwrap();
    let marker = cluster.dir.path().join("got-term");
    let script = format!(
        "trap 'echo term > {}; exit 0' TERM; while true; do sleep 0.1; done",
        marker.display()
    );
    // This holder can reach only one node, which then dies.
    let mut holder = leasehold(
        &cluster,
        &[follower],
        &[
            "lock", "cli/lost", "--lease", "2000", "--", "sh", "-c", &script,
        ],
    )
    .stdin(Stdio::null())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    let start = Instant::now();
    loop {
        let (status, _) = cluster.get(speaker, "/v1/locks/cli%2Flost").await;
        if status == 200 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.kill(follower);
    let status = tokio::task::spawn_blocking(move || holder.wait())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status.code(), Some(75));
    assert_eq!(
        std::fs::read_to_string(&marker).unwrap().trim(),
        "term",
        "the command got SIGTERM"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn elect_runs_one_leader_at_a_time() {
    let cluster = Cluster::start(3).await;
    let log = cluster.dir.path().join("leaders.log");
    let script = format!(
        "echo start $0 >> {log}; sleep 0.5; echo end $0 >> {log}",
        log = log.display()
    );
    let mut candidates = Vec::new();
    for i in 0..3u64 {
        candidates.push(
            leasehold(
                &cluster,
                &[1 + i % 3],
                &[
                    "elect",
                    "cli/leader",
                    "--value",
                    &format!("c{i}"),
                    "--",
                    "sh",
                    "-c",
                    &script,
                    &format!("c{i}"),
                ],
            )
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
        );
    }
    for mut c in candidates {
        let status = tokio::task::spawn_blocking(move || c.wait())
            .await
            .unwrap()
            .unwrap();
        assert!(status.success());
    }
    let lines: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(lines.len(), 6, "{lines:?}");
    for pair in lines.chunks(2) {
        let who = pair[0].strip_prefix("start ").unwrap();
        assert_eq!(
            pair[1],
            format!("end {who}"),
            "leaders never overlap: {lines:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_leaders_process_dies_its_command_dies_and_another_leads_within_a_lease() {
    let cluster = Cluster::start(3).await;
    let pid_file = cluster.dir.path().join("first.pid");
    let script = format!("echo $$ > {}; exec sleep 60", pid_file.display());
    let mut first = leasehold(
        &cluster,
        &[1, 2, 3],
        &[
            "elect", "cli/dies", "--lease", "2000", "--value", "first", "--", "sh", "-c", &script,
        ],
    )
    .stdin(Stdio::null())
    .spawn()
    .unwrap();
    let start = Instant::now();
    while !pid_file.exists()
        || std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .is_empty()
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the first candidate never led"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let command_pid = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .to_string();
    let second_log = cluster.dir.path().join("second.log");
    let second_script = format!("echo led > {}", second_log.display());
    let second = leasehold(
        &cluster,
        &[2, 3],
        &[
            "elect",
            "cli/dies",
            "--lease",
            "2000",
            "--value",
            "second",
            "--",
            "sh",
            "-c",
            &second_script,
        ],
    )
    .stdin(Stdio::null())
    .spawn()
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The leader's process dies without a word.
    first.kill().unwrap();
    let killed_at = Instant::now();
    let _ = first.wait();
    let mut second = second;
    let status = tokio::task::spawn_blocking(move || second.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success());
    assert_eq!(std::fs::read_to_string(&second_log).unwrap().trim(), "led");
    // Within a lease of the death (generously: 3 leases on a loaded machine).
    assert!(
        killed_at.elapsed() < Duration::from_secs(6),
        "took {:?}",
        killed_at.elapsed()
    );
    // And the dead leader's command did not outlive it.
    let alive = std::path::Path::new("/proc").join(&command_pid).exists()
        && !std::fs::read_to_string(format!("/proc/{command_pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ");
    assert!(!alive, "the command of a dead leader must not run on");
}

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

/// `status` right after the speaker is killed, the dead node listed
/// first: it answers from whichever node answers first, well within the
/// client's timeouts, and never names a dead speaker without saying that
/// it does not answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_answers_at_once_after_the_speaker_dies() {
    let mut cluster = Cluster::start(3).await;
    let (speaker, _) = cluster.speaker().await;
    let mut order = vec![speaker];
    order.extend(cluster.others(speaker));
    cluster.kill(speaker);
    let start = Instant::now();
    loop {
        let started = Instant::now();
        let out = run(leasehold(&cluster, &order, &["status"]));
        let took = started.elapsed();
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        assert!(
            took < Duration::from_secs(8),
            "status took {took:?} (each node is given a second)"
        );
        assert!(
            stdout.contains(&format!("{speaker}  ")),
            "the dead node is listed: {stdout}"
        );
        match out.status.code() {
            // Until the survivors elect another, no speaker serves: said,
            // and exit 69, as `etcdctl endpoint health` fails.
            Some(69) => assert!(
                stderr.contains("did not answer") || stderr.contains("no speaker"),
                "{stderr}"
            ),
            Some(0) => {
                assert!(
                    !stdout.contains(&format!("speaker: node {speaker} ")),
                    "a dead speaker is never shown serving: {stdout}"
                );
                break;
            }
            other => panic!("status exited {other:?}: {stdout}{stderr}"),
        }
        assert!(start.elapsed() < PATIENCE, "never a serving speaker");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// A speaker cut off from the other members still answers clients, and
/// says it speaks in its old term: `status` never shows it, whichever
/// endpoint answers first, but the speaker of the highest term a quorum
/// backs; `-o json` says the same in one document. With a quorum down,
/// no speaker serves: exit 69.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_speaker_a_quorum_backs_never_a_cut_off_one() {
    let mut cluster = Cluster::start_with(3, &["--chaos"]).await;
    let (old, _) = cluster.speaker().await;
    let others = cluster.others(old);
    cluster.set_plan(old, json!({"drop_to": others})).await;
    for id in &others {
        cluster.set_plan(*id, json!({"drop_to": [old]})).await;
    }
    let (new, _) = cluster.speaker_other_than(Some(old)).await;
    let mut order = vec![old];
    order.extend(others.iter().copied());
    for _ in 0..5 {
        let out = run(leasehold(&cluster, &order, &["status"]));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{stdout}");
        assert!(
            stdout.starts_with(&format!("speaker: node {new} ")),
            "the backed speaker, not the cut-off node {old}: {stdout}"
        );
    }
    let out = run(leasehold(&cluster, &order, &["status", "-o", "json"]));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["serving"], json!(true), "{doc}");
    assert_eq!(doc["speaker"], json!(new), "{doc}");
    assert_eq!(doc["view"]["node"], json!(new), "{doc}");
    // A quorum down: no speaker serves.
    for id in others {
        cluster.kill(id);
    }
    let out = run(leasehold(&cluster, &order, &["status"]));
    assert_eq!(
        out.status.code(),
        Some(69),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `serve --config FILE`: its keys are the flags' names; a flag wins over
/// its `LEASEHOLD_*` variable, which wins over the file, which wins over
/// the default; an unknown key is refused with its name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_reads_a_config_file_under_the_environment_and_the_flags() {
    let dir = tempfile::tempdir().unwrap();
    let addr = support::free_addr();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "max-lease = 4000\nmax-leese = 5000\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--config"])
        .arg(&bad)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{stderr}");
    assert!(stderr.contains("max-leese"), "{stderr}");

    let file = dir.path().join("node.toml");
    std::fs::write(
        &file,
        format!(
            "id = 1\nlisten = \"{addr}\"\npeers = [\"1={addr}\"]\ncluster_token = \"t\"\n\
             max-lease = 4000\ndefault-lease = 3000\n"
        ),
    )
    .unwrap();
    let mut node = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["serve", "--config"])
        .arg(&file)
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--max-lease", "4800"])
        .env("LEASEHOLD_MAX_LEASE", "4400")
        .env("LEASEHOLD_DEFAULT_LEASE", "2000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let acquire = |name: &'static str, lease: Option<u64>| {
        let http = http.clone();
        let url = format!("http://{addr}/v1/locks/acquire");
        async move {
            let mut body = serde_json::json!({ "name": name });
            if let Some(lease) = lease {
                body["lease_ms"] = lease.into();
            }
            let start = Instant::now();
            loop {
                if let Ok(r) = http.post(&url).json(&body).send().await {
                    if r.status() == 200 {
                        let v: serde_json::Value = r.json().await.unwrap();
                        return v["lock"]["lease_ms"].as_u64().unwrap();
                    }
                }
                assert!(start.elapsed() < support::PATIENCE, "never served");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let default = acquire("cfg/default", None).await;
    let longest = acquire("cfg/long", Some(60_000)).await;
    let _ = node.kill();
    let _ = node.wait();
    assert_eq!(default, 2000, "the environment wins over the file");
    assert_eq!(longest, 4800, "the flag wins over the environment");
}

/// Reads lines from `child`'s stdout until one contains `wanted`.
fn read_until(child: &mut std::process::Child, wanted: &str) -> String {
    use std::io::BufRead;
    let stdout = child.stdout.as_mut().expect("piped stdout");
    let mut lines = std::io::BufReader::new(stdout).lines();
    let mut seen = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        seen.push_str(&line);
        seen.push('\n');
        if line.contains(wanted) {
            return seen;
        }
    }
    panic!("no line with {wanted:?} in:\n{seen}");
}

/// The commands people know from etcdctl and consul: `get`, `unlock`,
/// `elect --observe` and `elect --wait`, with exit codes for what went
/// wrong, and a lease the cluster shortened said out loud.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_unlock_observe_and_wait_as_operators_use_them() {
    let cluster = Cluster::start_with(3, &["--max-lease", "5000", "--default-lease", "5000"]).await;
    let all = [1, 2, 3];

    let out = run(leasehold(
        &cluster,
        &all,
        &["lock", "cli/clamp", "--lease", "9000", "--", "true"],
    ));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("granted a 5000 ms lease"), "{stderr}");
    for bad in [
        vec!["lock", "cli/x", "--lease", "1", "--", "true"],
        vec!["lock", "cli/x", "--endpoints", "::bad::", "--", "true"],
    ] {
        let out = run(leasehold(&cluster, &all, &bad));
        assert_eq!(
            out.status.code(),
            Some(64),
            "{bad:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // An operator frees a lock someone holds.
    let mut holder = leasehold(
        &cluster,
        &all,
        &["lock", "cli/op", "--holder", "h1", "--", "sleep", "30"],
    )
    .stdin(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let start = Instant::now();
    let out = loop {
        let out = run(leasehold(&cluster, &all, &["get", "cli/op"]));
        if out.status.code() == Some(0) {
            break out;
        }
        assert!(start.elapsed() < support::PATIENCE, "never held");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(String::from_utf8_lossy(&out.stdout).contains("h1"));
    let out = run(leasehold(&cluster, &all, &["unlock", "cli/op"]));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("released cli/op"));
    assert_eq!(
        holder.wait().unwrap().code(),
        Some(75),
        "its holder learns it lost the lock"
    );
    let out = run(leasehold(&cluster, &all, &["get", "cli/op"]));
    assert_eq!(out.status.code(), Some(1));
    let out = run(leasehold(&cluster, &all, &["unlock", "cli/none"]));
    assert_eq!(out.status.code(), Some(1));

    // A leader; an observer sees it; a second candidate gives up after
    // its wait.
    let mut leader = leasehold(
        &cluster,
        &all,
        &["elect", "cli/e", "--value", "first", "--", "sleep", "30"],
    )
    .stdin(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let mut observer = leasehold(&cluster, &all, &["elect", "cli/e", "--observe"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    read_until(&mut observer, "leader: first");
    let out = run(leasehold(
        &cluster,
        &all,
        &[
            "elect", "cli/e", "--value", "second", "--wait", "500", "--", "true",
        ],
    ));
    assert_eq!(
        out.status.code(),
        Some(73),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // SIGTERM: the leader stops its command and resigns.
    let pid = leader.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let _ = leader.wait();
    let _ = observer.kill();
    let _ = observer.wait();
}

/// `member` honours `--timeout` and names why no node could make the
/// change.
#[test]
fn member_gives_up_within_its_timeout_naming_the_cause() {
    let dead = support::free_addr();
    let started = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "member",
            "remove",
            "3",
            "--timeout",
            "2s",
            "--endpoints",
            &dead,
        ])
        .args(["--cluster-token", "t"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "{stderr}");
    assert!(stderr.contains("connection refused"), "{stderr}");
    assert!(stderr.contains("within 2s"), "{stderr}");
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
}
