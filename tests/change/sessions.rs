//! An operator's change while a client's session holds locks, followed by
//! a crash: growth from one node (two sessions, one renewed through the
//! first node, one through the nodes that joined), a membership change (a
//! node added, the session's own node removed, a dead member replaced),
//! and a clean restart of the speaker whose client holds the session. Each
//! renews the session throughout, while a rival asks for its names: no
//! rival is granted one, and after the crash every lock of the session is
//! held with its id and fence, and the session renews with all of them.

use std::time::Duration;

use super::wait_for_voters;
use crate::support::sessions::{held_everywhere, open, renew_holding, take, Keeper, Kept};
use crate::support::{self, Cluster, PATIENCE, SPEAKS, TOKEN};

/// `DELETE /v1/cluster/members/{id}` through `via`: the operator removes
/// a member.
async fn remove(cluster: &Cluster, via: u64, id: u64) {
    let (status, body) = support::answer(
        cluster
            .http
            .delete(cluster.url(via, &format!("/v1/cluster/members/{id}")))
            .header("x-leasehold-token", TOKEN)
            .timeout(Duration::from_secs(60)),
    )
    .await;
    assert_eq!(status, 200, "remove {id} through {via}: {body}");
}

/// The addresses of `ids`.
fn addrs(cluster: &Cluster, ids: &[u64]) -> Vec<String> {
    ids.iter().map(|id| cluster.addrs[id].clone()).collect()
}

/// The addresses of every node started so far, the dead and removed ones
/// too (a rival asking there is refused a connection).
fn every_addr(cluster: &Cluster) -> Vec<String> {
    cluster.addrs.values().cloned().collect()
}

/// Nothing the keeper saw was lost or granted twice, and it renewed.
fn nothing_lost(kept: &Kept, at_least: usize) {
    assert!(kept.twice.is_empty(), "granted twice: {:?}", kept.twice);
    assert!(kept.lost.is_empty(), "the session lost: {:?}", kept.lost);
    assert!(
        kept.renewed >= at_least,
        "the client hardly renewed: {kept:?}"
    );
}

/// Growth from one node while sessions hold locks: a single node grants
/// two sessions and their locks with one record each; two nodes join, the
/// clients renewing throughout: one through the first node, the speaker
/// (its records are copied once the cluster has grown), the other at last
/// through the third node (every record of it moves there). Renewed past
/// a lease, so that every lock holds by its session's renewals alone; then
/// the speaker is killed. The next speaker keeps every lock with its id
/// and fence, refuses them to a rival through every node, and both
/// sessions renew on with all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn growth_from_one_node_with_sessions_held_then_a_speaker_crash_loses_none_of_their_locks() {
    const TTL: Duration = Duration::from_secs(4);
    let mut cluster = Cluster::start(1).await;
    cluster.wait_protocol(SPEAKS).await;
    let near = open(&cluster, 1, TTL.as_millis() as u64).await;
    let near_locks = take(&cluster, 1, &near, &["grown/n1", "grown/n2"]).await;
    let moved = open(&cluster, 1, TTL.as_millis() as u64).await;
    let moved_locks = take(&cluster, 1, &moved, &["grown/m1", "grown/m2", "grown/m3"]).await;
    let first = addrs(&cluster, &[1]);
    let near_keeper = Keeper::start(&near, &near_locks, TTL / 5, first.clone(), first.clone());
    let moved_keeper = Keeper::start(&moved, &moved_locks, TTL / 5, first.clone(), first);
    cluster.spawn_joining(2);
    wait_for_voters(&cluster, 1, &[1, 2]).await;
    // The client moves to the node that joined: every record moves there.
    moved_keeper.renew_through(addrs(&cluster, &[2]));
    renew_holding(&cluster, 2, &moved, &moved_locks).await;
    cluster.spawn_joining(3);
    wait_for_voters(&cluster, 1, &[1, 2, 3]).await;
    moved_keeper.renew_through(addrs(&cluster, &[3]));
    renew_holding(&cluster, 3, &moved, &moved_locks).await;
    for keeper in [&near_keeper, &moved_keeper] {
        keeper.rivals_through(every_addr(&cluster));
    }
    // Past a lease of renewals through them.
    tokio::time::sleep(TTL + Duration::from_secs(1)).await;
    renew_holding(&cluster, 1, &near, &near_locks).await;
    renew_holding(&cluster, 3, &moved, &moved_locks).await;

    let (speaker, _) = cluster.speaker().await;
    cluster.kill(speaker);
    let (next, _) = cluster.speaker_other_than(Some(speaker)).await;
    // A client whose node died moves to another.
    let moved_via = if speaker == 3 { next } else { 3 };
    let near_via = if speaker == 1 { next } else { 1 };
    moved_keeper.renew_through(addrs(&cluster, &[moved_via]));
    near_keeper.renew_through(addrs(&cluster, &[near_via]));
    held_everywhere(&cluster, &near_locks).await;
    held_everywhere(&cluster, &moved_locks).await;
    renew_holding(&cluster, near_via, &near, &near_locks).await;
    renew_holding(&cluster, moved_via, &moved, &moved_locks).await;
    // Another lease of renewals with the new speaker.
    tokio::time::sleep(TTL + Duration::from_secs(1)).await;
    nothing_lost(&near_keeper.stop().await, 10);
    nothing_lost(&moved_keeper.stop().await, 10);
    held_everywhere(&cluster, &near_locks).await;
    held_everywhere(&cluster, &moved_locks).await;
    renew_holding(&cluster, near_via, &near, &near_locks).await;
    renew_holding(&cluster, moved_via, &moved, &moved_locks).await;
}

/// A membership change while a session holds locks taken through every
/// node: a node is added, then the session's own node (where every record
/// of it is, the client renewing through it) is removed cleanly and hands
/// its records over, and the speaker is killed before the client renews
/// through another node: the handed-over records are all that is left
/// beside the dead speaker's table. The client moves to the new node; the
/// dead speaker is replaced (removed, and a new node joins); then the
/// speaker of now is killed too. After each crash every lock of the
/// session is held with its id and fence and refused to a rival through
/// every node, and the session renews with all of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_membership_change_with_a_session_held_then_speaker_crashes_lose_none_of_its_locks() {
    const TTL: Duration = Duration::from_secs(10);
    let mut cluster = Cluster::start(3).await;
    cluster.wait_protocol(SPEAKS).await;
    let (speaker, _) = cluster.speaker().await;
    let f = cluster.others(speaker);
    let (own, other) = (f[0], f[1]);
    let session = open(&cluster, own, TTL.as_millis() as u64).await;
    let mut locks = take(&cluster, own, &session, &["member/a", "member/b"]).await;
    locks.extend(take(&cluster, other, &session, &["member/c"]).await);
    locks.extend(take(&cluster, speaker, &session, &["member/d"]).await);
    renew_holding(&cluster, own, &session, &locks).await;
    let keeper = Keeper::start(
        &session,
        &locks,
        Duration::from_secs(1),
        addrs(&cluster, &[own]),
        every_addr(&cluster),
    );

    // A node is added.
    cluster.spawn_joining(4);
    wait_for_voters(&cluster, speaker, &[1, 2, 3, 4]).await;
    keeper.rivals_through(every_addr(&cluster));
    // Past a lease of renewals through the session's node: every lock
    // holds by the session's renewals alone, its records all there.
    tokio::time::sleep(TTL + Duration::from_secs(1)).await;
    renew_holding(&cluster, own, &session, &locks).await;

    // The session's node is removed: it hands its records over and stops.
    // The client, its node gone, renews nowhere until it moves.
    remove(&cluster, speaker, own).await;
    keeper.renew_through(Vec::new());
    assert_eq!(cluster.wait_exit(own, PATIENCE), Some(0), "{own} stops");
    let mut voters: Vec<u64> = [1, 2, 3, 4].into_iter().filter(|v| *v != own).collect();
    wait_for_voters(&cluster, speaker, &voters).await;
    cluster.kill(speaker);
    let (next, _) = cluster.speaker_other_than(Some(speaker)).await;
    held_everywhere(&cluster, &locks).await;
    // The client moves to the node added.
    renew_holding(&cluster, 4, &session, &locks).await;
    keeper.renew_through(addrs(&cluster, &[4]));

    // The dead speaker is replaced: removed, and a new node joins.
    remove(&cluster, next, speaker).await;
    voters.retain(|v| *v != speaker);
    wait_for_voters(&cluster, next, &voters).await;
    cluster.spawn_joining(5);
    voters.push(5);
    wait_for_voters(&cluster, next, &voters).await;
    keeper.rivals_through(every_addr(&cluster));
    tokio::time::sleep(TTL + Duration::from_secs(1)).await;
    renew_holding(&cluster, 4, &session, &locks).await;

    // Then the speaker of now is killed.
    let (speaker, _) = cluster.speaker().await;
    cluster.kill(speaker);
    let (next, _) = cluster.speaker_other_than(Some(speaker)).await;
    let via = if speaker == 4 { next } else { 4 };
    keeper.renew_through(addrs(&cluster, &[via]));
    held_everywhere(&cluster, &locks).await;
    renew_holding(&cluster, via, &session, &locks).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let kept = keeper.stop().await;
    nothing_lost(&kept, 15);
    held_everywhere(&cluster, &locks).await;
}

/// Clean restarts (SIGTERM) of the speaker until node `want` speaks (each
/// hands leadership to the most caught-up member, the highest id of
/// equals), at most four; answers the speaker.
async fn restart_the_speaker_until(cluster: &mut Cluster, want: u64) -> u64 {
    for _ in 0..4 {
        let (speaker, _) = cluster.speaker().await;
        if speaker == want {
            return speaker;
        }
        assert_eq!(cluster.terminate(speaker, PATIENCE), Some(0), "{speaker}");
        cluster.spawn(speaker);
        cluster.all_follow_one().await;
    }
    cluster.speaker().await.0
}

/// A clean restart (SIGTERM) of the speaker while its own client holds a
/// session: the locks taken through every node move to the speaker with
/// the session's renewals (copied, as its own client's records are, to
/// the next member in id order), and are renewed past a lease; the
/// speaker is stopped with SIGTERM (it hands leadership and its records
/// over) and started again, and the new speaker is killed before the
/// client renews again. Every lock of the session is held with its id and
/// fence, refused to a rival through every node, and the session renews
/// with all of them through the restarted node.
///
/// The speaker is node 2 (clean restarts make it so, when they can): it
/// hands leadership to node 3, the member that keeps its client's copies,
/// so that after node 3's crash what node 2 handed over is the only record
/// left of the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_restart_of_the_speaker_holding_its_clients_session_then_a_crash_loses_none_of_its_locks(
) {
    const TTL: Duration = Duration::from_secs(12);
    let mut cluster = Cluster::start(3).await;
    cluster.wait_protocol(SPEAKS).await;
    let speaker = restart_the_speaker_until(&mut cluster, 2).await;
    let f = cluster.others(speaker);
    let session = open(&cluster, speaker, TTL.as_millis() as u64).await;
    let mut locks = take(&cluster, speaker, &session, &["clean/a", "clean/b"]).await;
    locks.extend(take(&cluster, f[0], &session, &["clean/c"]).await);
    locks.extend(take(&cluster, f[1], &session, &["clean/d"]).await);
    renew_holding(&cluster, speaker, &session, &locks).await;
    let keeper = Keeper::start(
        &session,
        &locks,
        Duration::from_secs(1),
        addrs(&cluster, &[speaker]),
        every_addr(&cluster),
    );
    tokio::time::sleep(TTL + Duration::from_secs(1)).await;
    renew_holding(&cluster, speaker, &session, &locks).await;

    // The client waits for its node while it restarts.
    keeper.renew_through(Vec::new());
    assert_eq!(
        cluster.terminate(speaker, PATIENCE),
        Some(0),
        "the speaker stops cleanly: {}",
        cluster.log(speaker)
    );
    cluster.spawn(speaker);
    cluster.all_follow_one().await;
    let (next, _) = cluster.speaker_other_than(Some(speaker)).await;
    eprintln!("the speaker {speaker} handed over to {next}");
    cluster.kill(next);
    let (after, _) = cluster.speaker_other_than(Some(next)).await;
    held_everywhere(&cluster, &locks).await;
    renew_holding(&cluster, speaker, &session, &locks).await;
    keeper.renew_through(addrs(&cluster, &[speaker]));
    if after != speaker {
        renew_holding(&cluster, after, &session, &locks).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let kept = keeper.stop().await;
    nothing_lost(&kept, 10);
    held_everywhere(&cluster, &locks).await;
}
