//! The hung leader, in the simulation: three instances of an application
//! embed the shipping node (one per host) and run the client's leader
//! elector over the in-process client. The instance that leads, on the
//! host whose node speaks, is paused as SIGSTOP pauses a process (node,
//! elector and work alike) for 5 s and for 30 s. Another instance leads,
//! and every running instance observes it, within the lease plus the
//! failover bound of the pause; the resumed one runs no work on its old
//! term (its work checks `leading.check()` before each step, as the docs
//! tell); work never runs on two terms at once.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_node::RebuildMode;
use leasehold_nodesim::cluster::{self, App, Options};
use leasehold_nodesim::history::now;
use leasehold_nodesim::run::{liveness_bound, LEASE};
use tokio_util::sync::CancellationToken;

/// The election's lease (at most the cluster's longest).
const ELECTION_LEASE: Duration = Duration::from_secs(3);

/// What the instances did, in simulated time.
#[derive(Debug, Default)]
struct Seen {
    /// Each step of leader work: (when, host, fence).
    work: Vec<(Duration, u64, u64)>,
    /// Each leader an instance observed: (when, host, fence).
    observed: Vec<(Duration, u64, Option<u64>)>,
    /// The paused host, and when its pause began and ended.
    pause: Option<(u64, Duration, Duration)>,
}

/// Each host's application: waits until its node knows a speaker; the
/// instance beside the speaker campaigns at once, the others 3 s later,
/// so that the leader is the one hosting the speaker. Its work records a
/// step every 100 ms while `leading.check()` passes.
fn app(seen: Arc<Mutex<Seen>>) -> App {
    App(Arc::new(move |id, node| {
        let seen = Arc::clone(&seen);
        Box::pin(async move {
            while node.speaker().is_none() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            if node.speaker() != Some(id) {
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
            let (working, observing) = (Arc::clone(&seen), Arc::clone(&seen));
            let elector = node
                .client()
                .elector("svc/leader", &format!("n{id}"))
                .lease(ELECTION_LEASE)
                .on_started_leading(move |leading| {
                    let seen = Arc::clone(&working);
                    async move {
                        while leading.check().is_ok() {
                            seen.lock().unwrap().work.push((now(), id, leading.fence()));
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                })
                .on_new_leader(move |leader| {
                    let fence = leader.map(|l| l.fence);
                    observing.lock().unwrap().observed.push((now(), id, fence));
                })
                .build();
            let _ = elector.run(CancellationToken::new()).await;
        })
    }))
}

/// Runs the scenario with a pause of `pause`; what went wrong, if anything.
fn pause_the_leader(seed: u64, pause: Duration, mode: RebuildMode) -> Result<(), String> {
    let dirs = tempfile::tempdir().unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let options = Options {
        seed,
        mode,
        lease: LEASE,
        duration: Duration::from_secs(30) + pause + Duration::from_secs(30),
        max_latency: Duration::from_millis(10),
        app: Some(app(Arc::clone(&seen))),
        ..Options::default()
    };
    let pauses = options.pauses.clone();
    let mut sim = cluster::build(&options, dirs.path());
    let driver = Arc::clone(&seen);
    sim.client("driver", async move {
        // Once the leader has worked a while, it and its host are paused.
        let leader = loop {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let seen = driver.lock().unwrap();
            if seen.work.len() >= 10 {
                break seen.work.last().unwrap().1;
            }
        };
        let began = now();
        pauses.pause(leader);
        tokio::time::sleep(pause).await;
        pauses.resume(leader);
        driver.lock().unwrap().pause = Some((leader, began, now()));
        tokio::time::sleep(Duration::from_secs(20)).await;
        Ok(())
    });
    sim.run().map_err(|e| e.to_string())?;

    let seen = seen.lock().unwrap();
    let (paused, began, resumed) = seen.pause.ok_or("the leader was never paused")?;
    let bound = ELECTION_LEASE + liveness_bound(LEASE);
    let before = seen
        .work
        .iter()
        .filter(|(at, host, _)| *at < began && *host == paused)
        .map(|(_, _, fence)| *fence)
        .max()
        .ok_or("the paused host led no work before its pause")?;
    // Work never runs on two terms at once: fences only rise in time.
    for pair in seen.work.windows(2) {
        if pair[1].2 < pair[0].2 {
            return Err(format!(
                "work ran on an older term after a newer one: {pair:?}"
            ));
        }
    }
    // The resumed instance runs no work on its old term.
    if let Some(stale) = seen
        .work
        .iter()
        .find(|(at, host, fence)| *at >= began && *host == paused && *fence == before)
    {
        return Err(format!(
            "the paused leader worked on its old term after resuming at {resumed:?}: {stale:?}"
        ));
    }
    // Another instance leads within the bound.
    let next = seen
        .work
        .iter()
        .find(|(_, host, fence)| *host != paused && *fence > before)
        .ok_or("no other instance ever led")?;
    if next.0 > began + bound {
        return Err(format!(
            "the next leader worked {:?} after the pause began (bound {bound:?}): {next:?}",
            next.0 - began
        ));
    }
    // Every running instance observes the new leader within the bound.
    for host in (1..=3).filter(|h| *h != paused) {
        let saw = seen
            .observed
            .iter()
            .find(|(_, h, fence)| *h == host && fence.is_some_and(|f| f > before));
        match saw {
            Some((at, _, _)) if *at <= began + bound => {}
            other => {
                return Err(format!(
                    "instance {host} observed the next leader late or never: {other:?} \
                     (pause began {began:?}, bound {bound:?})"
                ))
            }
        }
    }
    Ok(())
}

#[test]
fn a_leader_hosting_the_speaker_paused_5_s_is_succeeded_and_runs_no_stale_work() {
    pause_the_leader(1, Duration::from_secs(5), RebuildMode::Proceed).unwrap();
}

#[test]
fn a_leader_hosting_the_speaker_paused_30_s_is_succeeded_and_runs_no_stale_work() {
    pause_the_leader(2, Duration::from_secs(30), RebuildMode::Strict).unwrap();
}
