//! `lock` and `elect` as a shell uses them: exit codes passed on, a held
//! lock refused, one leader at a time, a dead leader's command stopped.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;

use super::{exit_within, leasehold, run, Stderr};
use crate::support::Cluster;

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
    // Who waits, under the lock it waits for.
    assert!(
        table.contains("    1. ") && table.contains("for a lease of 5.0s"),
        "{table}"
    );

    // -o json: one document each, the API's shapes.
    let out = run(leasehold(&cluster, &[3], &["locks", "-o", "json"]));
    assert!(out.status.success());
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let listed = doc["locks"].as_array().unwrap();
    assert!(
        listed.iter().any(|l| l["name"] == json!("cli/held")
            && l["holder"] == json!("first")
            && l["waiters"] == json!(1)
            && l["queue"][0]["lease_ms"] == json!(5000)),
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
    assert_eq!(doc["lock"]["queue"][0]["lease_ms"], json!(5000), "{doc}");
    let out = run(leasehold(&cluster, &[2], &["get", "cli/held"]));
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("first") && shown.contains("    1. "),
        "the holder and who waits: {shown}"
    );
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
    // The speaker shows the grant before its holder hears of it: a kill
    // in between would leave the holder asking for it again, not holding.
    let mut stderr = Stderr::watch(&mut holder);
    let stderr = tokio::task::spawn_blocking(move || {
        stderr.wait_for("leasehold: holding cli/lost", Duration::from_secs(30));
        stderr
    })
    .await
    .unwrap();
    let (status, _) = cluster.get(speaker, "/v1/locks/cli%2Flost").await;
    assert_eq!(status, 200, "held while its command runs");
    cluster.kill(follower);
    let (status, mut stderr) = tokio::task::spawn_blocking(move || {
        let mut stderr = stderr;
        let status = exit_within(&mut holder, &mut stderr, Duration::from_secs(60));
        (status, stderr)
    })
    .await
    .unwrap();
    assert_eq!(status.code(), Some(75), "{}", stderr.text());
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

/// `lock --shared` runs readers together, `lock --permits N` at most N at
/// once, a name held as another kind exits with the conflict status, and
/// `locks` shows each holder with its mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_and_permit_locks_run_together_and_locks_shows_their_mode() {
    let cluster = Cluster::start(3).await;
    // Two readers, and two holders of a semaphore of two, each through a
    // node of its own.
    let holds = [
        (1, "--shared", "cli/doc", "r1"),
        (2, "--shared", "cli/doc", "r2"),
        (2, "--permits=2", "cli/gpu", "p1"),
        (3, "--permits=2", "cli/gpu", "p2"),
    ];
    let mut held: Vec<_> = holds
        .iter()
        .map(|&(node, kind, name, holder)| {
            let args = ["lock", kind, name, "--holder", holder, "--", "sleep", "30"];
            leasehold(&cluster, &[node], &args)
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    let start = Instant::now();
    let listing = loop {
        let out = run(leasehold(&cluster, &[3], &["locks", "--prefix", "cli/"]));
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        if ["r1", "r2", "p1", "p2"].iter().all(|h| text.contains(h)) {
            break text;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(listing.contains("MODE"), "{listing}");
    assert_eq!(listing.matches("shared").count(), 2, "{listing}");
    assert_eq!(listing.matches("permit 2/2").count(), 2, "{listing}");

    // Both permits are taken: a third waits no longer than asked.
    let out = run(leasehold(
        &cluster,
        &[1],
        &["lock", "--permits", "2", "cli/gpu", "-n", "--", "true"],
    ));
    assert_eq!(
        out.status.code(),
        Some(73),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Another kind is refused with the conflict status, and says why.
    let out = run(leasehold(
        &cluster,
        &[1],
        &["lock", "--permits", "3", "cli/gpu", "--", "true"],
    ));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(73), "{err}");
    assert!(err.contains("permits"), "{err}");
    let out = run(leasehold(
        &cluster,
        &[1],
        &["lock", "--permits", "0", "cli/x", "--", "true"],
    ));
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("permits"));
    let out = run(leasehold(
        &cluster,
        &[1],
        &["lock", "--shared", "--permits", "2", "cli/x", "--", "true"],
    ));
    assert_ne!(out.status.code(), Some(0));

    // An operator's unlock releases every reader.
    let out = run(leasehold(&cluster, &[2], &["unlock", "cli/doc"]));
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert_eq!(said.matches("released cli/doc").count(), 2, "{said}");
    let (status, body) = cluster.get(3, "/v1/locks/cli%2Fdoc").await;
    assert_eq!(status, 404, "{body}");

    for child in &mut held {
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// `lock A B -- CMD` holds both names while the command runs and releases
/// both after; a set one of whose names is held takes none of them and
/// exits with the conflict status; a name twice is a usage error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_of_several_names_holds_all_or_none() {
    let cluster = Cluster::start(3).await;
    let mut holder = leasehold(
        &cluster,
        &[2],
        &[
            "lock", "cli/s1", "cli/s2", "--holder", "set", "--", "sleep", "30",
        ],
    )
    .stdin(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let start = Instant::now();
    loop {
        let (a, _) = cluster.get(1, "/v1/locks/cli%2Fs1").await;
        let (b, _) = cluster.get(1, "/v1/locks/cli%2Fs2").await;
        if (a, b) == (200, 200) {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "{a} {b}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let out = run(leasehold(
        &cluster,
        &[3],
        &["lock", "cli/free", "cli/s2", "-n", "--", "true"],
    ));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(73), "{err}");
    assert!(err.contains("cli/s2"), "{err}");
    let (status, _) = cluster.get(1, "/v1/locks/cli%2Ffree").await;
    assert_eq!(status, 404, "nothing of a refused set is taken");

    let out = run(leasehold(
        &cluster,
        &[1],
        &["lock", "cli/x", "cli/x", "--", "true"],
    ));
    assert_ne!(out.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).contains("twice"));

    holder.kill().unwrap();
    let _ = holder.wait();
    let out = run(leasehold(
        &cluster,
        &[1],
        &["lock", "cli/t1", "cli/t2", "--", "sh", "-c", "exit 5"],
    ));
    assert_eq!(
        out.status.code(),
        Some(5),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in ["cli%2Ft1", "cli%2Ft2"] {
        let (status, _) = cluster.get(1, &format!("/v1/locks/{name}")).await;
        assert_eq!(status, 404, "{name} released once the command ended");
    }
}

/// `lock --lock-delay`: the holder (without a command, so nothing outlives
/// it) killed with SIGKILL (no release), its
/// lease runs out and `get` shows the name closed; another `lock` is
/// refused until the delay ends, then granted. A clean exit releases at
/// once, and a delay over a minute is a usage error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holders_name_stays_closed_for_its_lock_delay() {
    let cluster = Cluster::start(3).await;
    cluster.wait_protocol(crate::support::SPEAKS).await;
    let args = ["lock", "--lease", "1s", "--lock-delay", "6s", "cli/delayed"];
    let mut holder = leasehold(&cluster, &[2], &args)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        let (status, _) = cluster.get(1, "/v1/locks/cli%2Fdelayed").await;
        if status == 200 {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(20), "never granted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let granted = Instant::now();
    holder.kill().unwrap();
    holder.wait().unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let out = run(leasehold(&cluster, &[3], &["get", "cli/delayed"]));
    let said = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        said.contains("closed"),
        "the lapsed name is shown closed: {said}"
    );
    let out = run(leasehold(
        &cluster,
        &[3],
        &["lock", "-n", "cli/delayed", "--", "true"],
    ));
    assert_eq!(out.status.code(), Some(73), "still closed");
    let out = run(leasehold(
        &cluster,
        &[1],
        &["lock", "--wait", "30s", "cli/delayed", "--", "true"],
    ));
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        granted.elapsed() >= Duration::from_millis(6500),
        "granted again {:?} after the first grant was seen, within its lease and delay (7 s)",
        granted.elapsed()
    );

    let args = ["lock", "--lock-delay", "30s", "cli/clean", "--", "true"];
    assert_eq!(run(leasehold(&cluster, &[1], &args)).status.code(), Some(0));
    let out = run(leasehold(
        &cluster,
        &[2],
        &["lock", "-n", "cli/clean", "--", "true"],
    ));
    assert_eq!(out.status.code(), Some(0), "a clean exit released at once");
    let out = run(leasehold(
        &cluster,
        &[1],
        &["lock", "--lock-delay", "61s", "cli/x", "--", "true"],
    ));
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--lock-delay"));
}

/// `locks` shows the session a lock hangs off, in a column of its own that
/// appears only when some lock is in a session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_shows_the_session_of_a_lock_in_one() {
    let cluster = Cluster::start(3).await;
    cluster.wait_protocol(crate::support::SPEAKS).await;
    cluster.must_acquire(1, "cli/plain", json!({})).await;
    let out = run(leasehold(&cluster, &[3], &["locks"]));
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        table.contains("cli/plain") && !table.contains("SESSION"),
        "{table}"
    );

    let session = crate::support::sessions::open(&cluster, 2, 30000).await;
    let id = session["id"].as_str().expect("an id").to_owned();
    crate::support::sessions::take(&cluster, 2, &session, &["cli/in-session"]).await;
    let out = run(leasehold(&cluster, &[3], &["locks"]));
    let table = String::from_utf8_lossy(&out.stdout).to_string();
    let header = table.lines().next().unwrap_or_default();
    assert!(header.ends_with("SESSION"), "{table}");
    let line = |name: &str| {
        table
            .lines()
            .find(|l| l.starts_with(name))
            .map(str::to_owned)
    };
    let in_session = line("cli/in-session").unwrap_or_default();
    assert!(in_session.ends_with(&id), "{table}");
    let plain = line("cli/plain").unwrap_or_default();
    assert!(plain.ends_with(" -"), "{table}");
}

/// `--transport` (or `LEASEHOLD_TRANSPORT`) chooses how the commands
/// reach the nodes; each reaches the cluster, and an unknown one is bad
/// usage.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_transport_reaches_the_cluster() {
    let cluster = Cluster::start(3).await;
    for transport in ["auto", "binary", "http"] {
        let name = format!("cli/over-{transport}");
        let flag = ["lock", &name, "--transport", transport, "--", "true"];
        let out = run(leasehold(&cluster, &[1, 2, 3], &flag));
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "--transport {transport}: {said}"
        );
        let mut get = leasehold(&cluster, &[1, 2, 3], &["get", &name]);
        get.env("LEASEHOLD_TRANSPORT", transport);
        let out = run(get);
        let said = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(1),
            "released, over {transport}: {said}"
        );
    }
    let bogus = ["get", "cli/x", "--transport", "pigeon"];
    let out = run(leasehold(&cluster, &[1], &bogus));
    assert_eq!(out.status.code(), Some(64));
}

/// `locks` shows a free name a set waits for (kept free for it) as a row
/// of its own with its queue, over either transport, and `-o json` as the
/// API's `awaited`; `lock -n` of such a name exits as if it were held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_shows_the_free_names_a_set_waits_for() {
    let cluster = Cluster::start(3).await;
    cluster.wait_protocol(crate::support::SPEAKS).await;
    cluster.must_acquire(1, "cli/aw-held", json!({})).await;
    let set =
        json!({"names": ["cli/aw-held", "cli/aw-free"], "holder": "the-set", "wait_ms": 60000});
    let (http, url) = (cluster.http.clone(), cluster.url(2, "/v1/locks/acquire"));
    let waiting = tokio::spawn(async move {
        let _ = http.post(url).json(&set).send().await;
    });
    let start = Instant::now();
    for transport in ["binary", "http"] {
        let table = loop {
            let args = ["locks", "--prefix", "cli/aw-", "--transport", transport];
            let out = run(leasehold(&cluster, &[3], &args));
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            if text.contains("cli/aw-free") {
                break text;
            }
            assert!(start.elapsed() < Duration::from_secs(20), "{text}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let free = table
            .lines()
            .position(|l| l.starts_with("cli/aw-free"))
            .unwrap();
        let lines: Vec<&str> = table.lines().collect();
        assert!(
            lines[free].contains("(free, kept for the requests waiting for it)")
                && lines[free].trim_end().ends_with('1'),
            "over {transport}: {table}"
        );
        assert!(
            lines[free + 1].contains("1. the-set (node 2)")
                && lines[free + 1].contains("together with cli/aw-held"),
            "over {transport}: {table}"
        );
    }
    // A get of the free name says who waits for it, and exits 1.
    for transport in ["binary", "http"] {
        let args = ["get", "cli/aw-free", "--transport", transport];
        let out = run(leasehold(&cluster, &[3], &args));
        let text = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(
            text.contains("cli/aw-free is not held, but 1 request waits for it")
                && text.contains("1. the-set (node 2)"),
            "over {transport}: {text}"
        );
    }
    // `lock -n` of the free name is refused as a held one is (exit 73),
    // saying why: nobody holds it, an earlier request waits for it.
    for transport in ["binary", "http"] {
        let args = ["lock", "cli/aw-free", "-n", "--transport", transport];
        let out = run(leasehold(&cluster, &[3], &args));
        let text = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(73), "over {transport}: {text}");
        assert!(
            text.contains("cli/aw-free is free, but earlier requests wait for it"),
            "over {transport}: {text}"
        );
    }
    let out = run(leasehold(
        &cluster,
        &[3],
        &["get", "cli/aw-free", "-o", "json"],
    ));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["lock"], json!(null), "{doc}");
    assert_eq!(
        doc["awaited"]["queue"][0]["holder"],
        json!("the-set"),
        "{doc}"
    );
    let out = run(leasehold(&cluster, &[3], &["locks", "-o", "json"]));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["awaited"][0]["name"], json!("cli/aw-free"), "{doc}");
    assert_eq!(
        doc["awaited"][0]["queue"][0]["holder"],
        json!("the-set"),
        "{doc}"
    );
    waiting.abort();
}
