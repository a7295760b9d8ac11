//! The status page at `GET /`, in a real browser: headless Chromium (the
//! Debian package; `.ci/run` installs it) loads a running cluster's page,
//! which must show the members, the speaker and a lock taken in the test,
//! its failovers on the speaker's page, and log nothing to the console.

mod support;

use std::process::Command;

use serde_json::json;
use support::Cluster;

/// The page at `url` as Chromium renders it after its scripts ran: the
/// DOM, and the console lines it logged.
fn render(url: &str) -> (String, Vec<String>) {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=4000",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(url)
        .output()
        .expect("headless Chromium (apt-get install chromium; .ci/run does)");
    assert!(out.status.success(), "chromium: {:?}", out.status);
    let console = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.contains(":CONSOLE"))
        .map(str::to_string)
        .collect();
    (String::from_utf8_lossy(&out.stdout).into_owned(), console)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_page_shows_members_the_speaker_and_a_lock_in_a_browser() {
    // The check of the console can fail: a script error is seen.
    let (_, console) = render("data:text/html,<script>no_such_function()</script>");
    assert!(
        console.iter().any(|l| l.contains("no_such_function")),
        "a console error must show: {console:?}"
    );

    let cluster = Cluster::start(3).await;
    let (speaker, term) = cluster.speaker().await;
    let follower = cluster.others(speaker)[0];
    cluster
        .must_acquire(
            follower,
            "page/taken-in-the-test",
            json!({"holder": "the-status-page-test", "lease_ms": 60000}),
        )
        .await;

    for (node, is_speaker) in [(follower, false), (speaker, true)] {
        let (dom, console) = render(&cluster.url(node, "/"));
        assert!(
            console.is_empty(),
            "node {node}'s page logged: {console:#?}"
        );
        assert!(
            dom.contains(&format!("speaker: node {speaker} · term {term}")),
            "node {node}'s page names the speaker:\n{dom}"
        );
        for addr in cluster.addrs.values() {
            assert!(dom.contains(addr.as_str()), "member {addr} missing:\n{dom}");
        }
        assert!(dom.contains("page/taken-in-the-test"), "the lock:\n{dom}");
        assert!(dom.contains("the-status-page-test"), "its holder:\n{dom}");
        assert!(
            dom.contains("<div id=\"errors\"></div>"),
            "no errors:\n{dom}"
        );
        if is_speaker {
            assert!(
                dom.contains("<tbody id=\"history\"><tr>"),
                "the speaker shows its rebuild:\n{dom}"
            );
        }
    }
}
