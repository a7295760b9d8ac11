//! The openraft messages and errors that cross the wire survive the codec.

use std::collections::BTreeMap;

use leasehold_raft::codec::decode;
use leasehold_raft::codec::encode;
use leasehold_raft::errors::Fatal;
use leasehold_raft::errors::RaftError;
use leasehold_raft::*;
use openraft::entry::RaftEntry;
use openraft::raft::AppendEntriesRequest;
use openraft::raft::AppendEntriesResponse;
use openraft::raft::SnapshotResponse;
use openraft::raft::TransferLeaderRequest;
use openraft::raft::TransferLeaderResponse;
use openraft::raft::VoteRequest;
use openraft::raft::VoteResponse;
use openraft::Membership;

/// Encodes, decodes, and compares the debug forms (not every message is `PartialEq`).
fn round_trip<T>(v: &T)
where
    T: serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let bytes = encode(v).unwrap();
    let back: T = decode(&bytes).unwrap();
    assert_eq!(format!("{back:?}"), format!("{v:?}"));
}

fn membership() -> Membership<u64, BasicNode> {
    let nodes: BTreeMap<u64, BasicNode> = (1..=3)
        .map(|i| {
            (
                i,
                BasicNode {
                    addr: format!("127.0.0.1:{}", 7700 + i),
                },
            )
        })
        .collect();
    Membership::new(vec![nodes.keys().copied().collect()], nodes).unwrap()
}

#[test]
fn app_types() {
    round_trip(&Command::Noop);
    round_trip(&CommandResponse);
    assert_eq!(Command::Noop.to_string(), "noop");
}

#[test]
fn append_entries() {
    let req = AppendEntriesRequest::<TypeConfig> {
        vote: Vote::new_committed(3, 1),
        prev_log_id: Some(LogId::new_term_index(2, 4)),
        leader_commit: Some(LogId::new_term_index(2, 3)),
        entries: vec![
            Entry::new_blank(LogId::new_term_index(3, 5)),
            Entry::new_normal(LogId::new_term_index(3, 6), Command::Noop),
            Entry::new_membership(LogId::new_term_index(3, 7), membership()),
        ],
    };
    round_trip(&req);

    let answers: Vec<Result<AppendEntriesResponse<TypeConfig>, RaftError>> = vec![
        Ok(AppendEntriesResponse::Success),
        Ok(AppendEntriesResponse::PartialSuccess(Some(
            LogId::new_term_index(3, 6),
        ))),
        Ok(AppendEntriesResponse::PartialSuccess(None)),
        Ok(AppendEntriesResponse::Conflict),
        Ok(AppendEntriesResponse::HigherVote(Vote::new(4, 2))),
        Err(RaftError::Fatal(Fatal::Stopped)),
        Err(RaftError::Fatal(Fatal::Panicked)),
    ];
    for a in &answers {
        round_trip(a);
    }
}

#[test]
fn votes_snapshot_transfer() {
    let mut req =
        VoteRequest::<TypeConfig>::new(Vote::new(5, 2), Some(LogId::new_term_index(4, 9)));
    round_trip(&req);
    req.leadership_transfer = true;
    round_trip(&req);
    round_trip(&Ok::<_, RaftError>(VoteResponse::<TypeConfig>::new(
        Vote::new_committed(5, 2),
        None,
        true,
    )));

    let meta = SnapshotMeta {
        last_log_id: Some(LogId::new_term_index(4, 9)),
        last_membership: StoredMembership::new(Some(LogId::new_term_index(1, 1)), membership()),
    };
    round_trip(&(Vote::new_committed(5, 2), meta, Vec::<u8>::new()));
    round_trip(&Ok::<_, Fatal>(SnapshotResponse::<TypeConfig>::new(
        Vote::new_committed(5, 2),
    )));

    round_trip(&TransferLeaderRequest::<TypeConfig>::new(
        Vote::new_committed(5, 2),
        3,
        Some(LogId::new_term_index(5, 10)),
    ));
    round_trip(&Ok::<TransferLeaderResponse<TypeConfig>, Fatal>(Ok(())));
}

#[test]
fn storage_error_survives() {
    use openraft::errors::ErrorSource;
    let source = openraft::impls::BoxedErrorSource::from_string("disk gone");
    let err = openraft::StorageError::<TypeConfig>::read_vote(source);
    let v: Result<(), RaftError> = Err(RaftError::Fatal(Fatal::StorageError(err)));
    let back: Result<(), RaftError> = decode(&encode(&v).unwrap()).unwrap();
    assert!(back.unwrap_err().to_string().contains("disk gone"));
}
