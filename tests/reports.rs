//! A member's rebuild report larger than one frame is read in full: the
//! report travels as a stream of bounded frames, merged as they arrive.
//!
//! The nodes run with the smallest frame allowed (64 KiB), so a few
//! thousand locks make a report of several frames, as a million locks do
//! with the default frame.

use crate::support;

use futures::StreamExt;
use serde_json::{json, Value};
use support::Cluster;

/// The frame size the nodes run with.
const FRAME_BYTES: usize = 64 * 1024;
/// Locks taken through each follower: a report of about 5 frames each.
const PER_FOLLOWER: usize = 4_000;

/// Takes `count` locks named `{prefix}{i}` through node `via`, 32 at a
/// time, and returns the first and the last granted.
async fn fill(cluster: &Cluster, via: u64, prefix: &str, count: usize) -> (Value, Value) {
    let mut locks: Vec<(usize, Value)> = futures::stream::iter(0..count)
        .map(|i| async move {
            let name = format!("{prefix}{i:06}");
            let lock = cluster
                .must_acquire(via, &name, json!({"lease_ms": 600_000, "holder": "filler"}))
                .await;
            (i, lock)
        })
        .buffer_unordered(32)
        .collect()
        .await;
    locks.sort_by_key(|(i, _)| *i);
    let last = locks.pop().expect("locks").1;
    let first = locks.swap_remove(0).1;
    (first, last)
}

/// The number in `field=N` on the first log line holding every one of
/// `marks` (colour codes left out).
fn logged(log: &str, marks: &[&str], field: &str) -> Option<u64> {
    let mut plain = String::with_capacity(log.len());
    let mut in_escape = false;
    for c in log.chars() {
        match (in_escape, c) {
            (false, '\u{1b}') => in_escape = true,
            (false, c) => plain.push(c),
            (true, 'm') => in_escape = false,
            (true, _) => {}
        }
    }
    let line = plain
        .lines()
        .find(|l| marks.iter().all(|m| l.contains(m)))?;
    let at = line.find(&format!(" {field}="))? + field.len() + 2;
    let digits: String = line[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_of_many_frames_is_read_in_full_at_a_rebuild() {
    let frame = FRAME_BYTES.to_string();
    let mut cluster = Cluster::start_with(3, &["--report-frame-bytes", &frame]).await;
    let (speaker, _) = cluster.speaker().await;
    let followers: Vec<u64> = cluster.others(speaker);
    // Half through each follower: whichever wins next reads the other's
    // record over the network.
    let mut taken = Vec::new();
    for &via in &followers {
        let prefix = format!("report-{via}-");
        taken.push((via, fill(&cluster, via, &prefix, PER_FOLLOWER).await));
    }

    cluster.kill(speaker);
    let (winner, _) = cluster.speaker_other_than(Some(speaker)).await;
    let (_, info) = cluster.get(winner, "/v1/cluster").await;
    let rebuild = &info["last_rebuild"];
    assert_eq!(rebuild["members_missing"], json!([speaker]), "{info}");
    assert_eq!(
        rebuild["locks"],
        json!(2 * PER_FOLLOWER),
        "every lock of both followers is kept: {info}"
    );

    // The other follower's record came over HTTP, in several frames.
    let (other, (first, last)) = taken
        .iter()
        .find(|(via, _)| *via != winner)
        .expect("a follower that did not win");
    let member = format!(" member={other} ");
    let frames = logged(&cluster.log(winner), &["member read", &member], "frames")
        .unwrap_or_else(|| panic!("no `member read` line for node {other} in node {winner}'s log"));
    assert!(
        frames >= 4,
        "node {other}'s report of {PER_FOLLOWER} locks came in {frames} frames"
    );
    for lock in [first, last] {
        let name = lock["name"].as_str().unwrap();
        let (status, body) = cluster.get(winner, &format!("/v1/locks/{name}")).await;
        assert_eq!(status, 200, "{name}: {body}");
        assert_eq!(body["lock"]["id"], lock["id"], "{name}");
        assert_eq!(body["lock"]["fence"], lock["fence"], "{name}");
    }
}
