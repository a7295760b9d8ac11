//! The Raft model against openraft's rules, one rule a test.

use super::*;

/// Three members whose Raft starts at `t = 300`; node 1 initializes the
/// cluster and leads term 1, and both followers accepted and
/// acknowledged its first heartbeat at once.
fn cluster() -> Vec<Raft> {
    let mut rafts: Vec<Raft> = (1..=3).map(|id| Raft::load(id, 3, None, id, 0)).collect();
    for raft in &mut rafts {
        raft.run(300);
    }
    deliver_all(&mut rafts, 300);
    rafts
}

/// Delivers every queued message (and their answers) at `now`.
fn deliver_all(rafts: &mut [Raft], now: u64) {
    loop {
        let mut queued = Vec::new();
        for raft in rafts.iter_mut() {
            let from = raft.id;
            queued.extend(raft.out.drain(..).map(|(to, m)| (from, to, m)));
        }
        if queued.is_empty() {
            return;
        }
        for (from, to, msg) in queued {
            rafts[to as usize - 1].handle(from, msg, now);
        }
    }
}

#[test]
fn a_new_cluster_elects_its_lowest_member() {
    let rafts = cluster();
    assert_eq!(rafts[0].leader_term(), Some(1));
    assert_eq!(rafts[1].current_leader(), Some(1));
    assert_eq!(rafts[0].last_quorum_acked(), Some(300));
}

#[test]
fn a_follower_refuses_votes_within_its_lease_and_grants_after() {
    let mut rafts = cluster();
    let asks = |term| RaftMsg::RequestVote {
        vote: Vote {
            term,
            node: 3,
            committed: false,
        },
        log: rafts_log(),
        transfer: false,
    };
    rafts[1].handle(3, asks(2), 300 + LEADER_LEASE_MS);
    assert!(matches!(
        rafts[1].out.pop(),
        Some((3, RaftMsg::VoteReply { granted: false, .. }))
    ));
    rafts[1].handle(3, asks(2), 300 + LEADER_LEASE_MS + 1);
    assert!(matches!(
        rafts[1].out.pop(),
        Some((3, RaftMsg::VoteReply { granted: true, .. }))
    ));
}

fn rafts_log() -> LogId {
    LogId { term: 1, index: 1 }
}

#[test]
fn a_restarted_member_votes_at_once() {
    let rafts = cluster();
    let store = rafts[1].persisted();
    let mut restarted = Raft::load(2, 3, Some(store), 9, 310);
    restarted.run(310);
    restarted.handle(
        3,
        RaftMsg::RequestVote {
            vote: Vote {
                term: 2,
                node: 3,
                committed: false,
            },
            log: rafts_log(),
            transfer: false,
        },
        311,
    );
    assert!(matches!(
        restarted.out.pop(),
        Some((3, RaftMsg::VoteReply { granted: true, .. }))
    ));
}

#[test]
fn a_leader_keeps_its_term_without_a_quorum_and_its_read_gives_up() {
    let mut rafts = cluster();
    assert!(rafts[0].start_read(7, 500));
    rafts[0].out.clear();
    for now in (500..=900).step_by(10) {
        rafts[0].tick(now);
        rafts[0].out.clear();
    }
    assert_eq!(rafts[0].reads_done, vec![(7, false)]);
    assert_eq!(rafts[0].leader_term(), Some(1));
    assert!(rafts[0].start_read(8, 900));
    deliver_all(&mut rafts, 905);
    assert_eq!(rafts[0].reads_done, vec![(7, false), (8, true)]);
    assert_eq!(rafts[0].last_quorum_acked(), Some(900));
}

#[test]
fn a_transfer_lets_its_target_win_within_the_lease() {
    let mut rafts = cluster();
    assert!(rafts[0].transfer_leader(2));
    assert!(
        !rafts[0].start_read(1, 405),
        "a leader handing over reads nothing"
    );
    deliver_all(&mut rafts, 410);
    assert_eq!(rafts[1].leader_term(), Some(2));
    assert_eq!(rafts[0].current_leader(), Some(2));
}

#[test]
fn a_follower_campaigns_a_lease_and_an_election_timeout_after_the_last_heartbeat() {
    let mut rafts = cluster();
    let follower = &mut rafts[1];
    let mut campaigned = None;
    for now in (310..2_000).step_by(10) {
        follower.tick(now);
        if follower
            .out
            .iter()
            .any(|(_, m)| matches!(m, RaftMsg::PreVote { .. }))
        {
            campaigned = Some(now);
            break;
        }
    }
    let at = campaigned.expect("it campaigns");
    assert!(
        at > 300 + LEADER_LEASE_MS + ELECTION_MIN_MS
            && at <= 300 + LEADER_LEASE_MS + ELECTION_MAX_MS + 10,
        "campaigned at {at}"
    );
}

#[test]
fn a_transfer_disables_the_followers_lease_for_every_candidate() {
    let mut rafts = cluster();
    assert!(rafts[0].transfer_leader(2));
    let (to, msg) = rafts[0].out.pop().expect("told node 3");
    assert_eq!(to, 3);
    rafts[2].handle(1, msg, 301);
    let leader = rafts[0].vote;
    // Node 3 accepted a heartbeat at 300, yet votes for node 2 at once,
    // and no heartbeat of the old leader gives its lease back.
    rafts[2].handle(
        1,
        RaftMsg::Append {
            vote: leader,
            log: rafts_log(),
            stamp: Stamp {
                time: 302,
                round: 9,
            },
        },
        302,
    );
    rafts[2].handle(
        2,
        RaftMsg::RequestVote {
            vote: Vote {
                term: 2,
                node: 2,
                committed: false,
            },
            log: rafts_log(),
            transfer: false,
        },
        303,
    );
    assert!(matches!(
        rafts[2].out.pop(),
        Some((2, RaftMsg::VoteReply { granted: true, .. }))
    ));
}
