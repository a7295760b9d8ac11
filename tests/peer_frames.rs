//! Members calling each other over the binary transport (copies from the
//! speaker, batches from a follower), through a member's stall, a cut
//! link, and the speaker's crash after them: the connection is opened
//! again once the member answers, and every lock granted is held with its
//! fence (docs/design.md, "Members over the binary transport").

use crate::support;

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use support::{Cluster, PATIENCE};

const SEC: Duration = Duration::from_secs(1);

/// Members' calls served over frames by the nodes `ids`, summed.
pub(crate) async fn peer_calls(cluster: &Cluster, ids: &[u64]) -> f64 {
    let mut served = 0.0;
    for &id in ids {
        let series = "leasehold_binary_peer_calls_total";
        served += cluster.metric(id, series).await.unwrap_or(0.0);
    }
    served
}

/// A lock a test took: its name, fence and id, and the node it went
/// through.
struct Taken {
    name: String,
    fence: u64,
    id: String,
    via: u64,
}

/// Acquires `name` through node `via` (HTTP) with a minute's lease.
async fn take(cluster: &Cluster, via: u64, name: &str) -> Taken {
    let lock = cluster
        .must_acquire(via, name, json!({ "lease_ms": 60_000 }))
        .await;
    Taken {
        name: name.to_string(),
        fence: lock["fence"].as_u64().unwrap(),
        id: lock["id"].as_str().unwrap().to_string(),
        via,
    }
}

/// A cluster of three whose members call each other over frames (a
/// member's first calls go over HTTP while its connection opens): the
/// speaker, and the locks taken until copies and batches went over frames.
async fn calling_over_frames() -> (Cluster, u64, Vec<Taken>) {
    let cluster = Cluster::start(3).await;
    cluster.wait_protocol(support::SPEAKS).await;
    cluster.all_follow_one().await;
    let (speaker, _) = cluster.speaker().await;
    let others = cluster.others(speaker);
    let mut held = Vec::new();
    let start = Instant::now();
    loop {
        let i = held.len();
        for via in [speaker, others[0]] {
            held.push(take(&cluster, via, &format!("m/{via}/{i}")).await);
        }
        let copies = peer_calls(&cluster, &others).await;
        let batches = peer_calls(&cluster, &[speaker]).await;
        if copies > 0.0 && batches > 0.0 {
            return (cluster, speaker, held);
        }
        assert!(
            start.elapsed() < PATIENCE,
            "members' calls over frames: {copies} copies served, {batches} batches"
        );
    }
}

/// Releases, through the speaker, locks taken through it (their copies
/// are at `member`, which the speaker then tells) until a call over frames
/// reaches `member`.
async fn called_over_frames_again(
    cluster: &Cluster,
    speaker: u64,
    member: u64,
    held: &mut Vec<Taken>,
) {
    let before = peer_calls(cluster, &[member]).await;
    let mut released = 0;
    while peer_calls(cluster, &[member]).await <= before {
        let at = held.iter().position(|t| t.via == speaker);
        let Some(at) = at.filter(|_| released < 10) else {
            panic!("no call over frames reached member {member} again");
        };
        let Taken { name, id, .. } = held.remove(at);
        let release = json!({ "name": name, "id": id });
        let (status, body) = cluster.post(speaker, "/v1/locks/release", release).await;
        assert_eq!(status, 200, "{name}: {body}");
        released += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Kills the speaker; every lock of `held` is then held with its fence.
async fn all_held_after_the_speakers_crash(cluster: &mut Cluster, speaker: u64, held: &[Taken]) {
    cluster.kill(speaker);
    let (next, _) = cluster.speaker_other_than(Some(speaker)).await;
    for Taken { name, fence, .. } in held {
        let (status, body) = cluster
            .get(next, &format!("/v1/locks/{}", name.replace('/', "%2F")))
            .await;
        assert_eq!(status, 200, "{name}: {body}");
        assert_eq!(
            body["lock"]["fence"].as_u64(),
            Some(*fence),
            "{name}: {body}"
        );
    }
}

/// The member copies go to first stalls (SIGSTOP) while grants go on, and
/// wakes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_call_each_other_over_frames_through_a_stall_and_a_crash() {
    let (mut cluster, speaker, mut held) = calling_over_frames().await;
    let first = cluster.first_copy_holder(speaker);
    cluster.pause(first);
    for i in 0..3 {
        held.push(take(&cluster, speaker, &format!("m/stalled/{i}")).await);
    }
    tokio::time::sleep(2 * SEC).await;
    cluster.resume(first);
    tokio::time::sleep(2 * SEC).await;
    called_over_frames_again(&cluster, speaker, first, &mut held).await;
    all_held_after_the_speakers_crash(&mut cluster, speaker, &held).await;
}

/// A rule of this test's in the host's firewall: every TCP packet to or
/// from one of the test's own ports on loopback is dropped, until dropped.
struct Cut {
    port: String,
}

impl Cut {
    fn new(port: &str) -> Cut {
        let cut = Cut {
            port: port.to_string(),
        };
        for rule in cut.rules() {
            iptables("-A", &rule);
        }
        cut
    }

    fn rules(&self) -> [Vec<String>; 2] {
        let rule = |way: &str| {
            [
                "OUTPUT", "-o", "lo", "-p", "tcp", way, &self.port, "-j", "DROP",
            ]
            .map(String::from)
            .to_vec()
        };
        [rule("--dport"), rule("--sport")]
    }
}

impl Drop for Cut {
    fn drop(&mut self) {
        for rule in self.rules() {
            iptables("-D", &rule);
        }
    }
}

fn iptables(action: &str, rule: &[String]) {
    let out = Command::new("iptables")
        .arg(action)
        .args(rule)
        .output()
        .unwrap_or_else(|e| panic!("iptables (this test needs it, and root): {e}"));
    assert!(
        out.status.success(),
        "iptables {action} {rule:?} (this test needs root): {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Whether this test may change the host's firewall: as root, or always
/// under CI (where a missing tool is a failure, not a skip).
fn may_cut_links() -> bool {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    root || std::env::var_os("CI").is_some()
}

/// The link to the member copies go to first is cut (every packet to and
/// from its port dropped on loopback: its connections stall, nothing is
/// acknowledged) while grants go on, then healed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_call_each_other_over_frames_through_a_cut_link_and_a_crash() {
    if !may_cut_links() {
        eprintln!("skipped: cutting a link needs root (iptables)");
        return;
    }
    let (mut cluster, speaker, mut held) = calling_over_frames().await;
    let first = cluster.first_copy_holder(speaker);
    let port = cluster.addrs[&first]
        .rsplit(':')
        .next()
        .unwrap()
        .to_string();
    {
        let _cut = Cut::new(&port);
        for i in 0..3 {
            held.push(take(&cluster, speaker, &format!("m/cut/{i}")).await);
        }
        tokio::time::sleep(3 * SEC).await;
    }
    called_over_frames_again(&cluster, speaker, first, &mut held).await;
    all_held_after_the_speakers_crash(&mut cluster, speaker, &held).await;
}

/// `--peer-transport http` on every member: the members call each other
/// over HTTP alone (no member serves a call over frames) while copies and
/// forwarded batches go on, and a crash of the speaker after it keeps
/// every lock with its fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_told_to_call_over_http_never_open_frames_and_keep_locks_through_a_crash() {
    let mut cluster = Cluster::start_with(3, &["--peer-transport", "http"]).await;
    cluster.wait_protocol(support::SPEAKS).await;
    cluster.all_follow_one().await;
    let (speaker, _) = cluster.speaker().await;
    let others = cluster.others(speaker);
    let mut held = Vec::new();
    for i in 0..20 {
        for via in [speaker, others[0]] {
            held.push(take(&cluster, via, &format!("h/{via}/{i}")).await);
        }
    }
    for id in 1..=3 {
        let served = served_over_frames(&cluster, id).await;
        assert_eq!(served, Some(0.0), "node {id} served frames");
    }
    all_held_after_the_speakers_crash(&mut cluster, speaker, &held).await;
}

/// The members' calls node `id` served over frames, as its metrics show.
async fn served_over_frames(cluster: &Cluster, id: u64) -> Option<f64> {
    cluster
        .metric(id, "leasehold_binary_peer_calls_total")
        .await
}
