//! The log store: openraft's conformance suite, restart durability, identity.

use leasehold_raft::*;
use openraft::entry::RaftEntry;
use openraft::storage::IOFlushed;
use openraft::storage::RaftLogStorage;
use openraft::testing::log::StoreBuilder;
use openraft::testing::log::Suite;
use openraft::RaftLogReader;
use openraft::StorageError;
use tempfile::TempDir;

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachine), StorageError<TypeConfig>> {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = LogStore::open(dir.path(), 0).expect("open store");
        Ok((dir, store, StateMachine::new()))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance_suite() {
    Suite::test_all(Builder)
        .await
        .expect("openraft storage suite");
}

fn blank(term: u64, index: u64) -> Entry {
    Entry::new_blank(LogId::new_term_index(term, index))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vote_log_and_committed_survive_restart() {
    let dir = tempfile::tempdir().unwrap();
    let vote = Vote::new_committed(3, 2);
    {
        let mut store = LogStore::open(dir.path(), 2).unwrap();
        assert_eq!(store.node_id(), 2);
        assert_eq!(store.read_vote().await.unwrap(), None);
        store.save_vote(&vote).await.unwrap();
        store
            .append((0..5).map(|i| blank(1, i)), IOFlushed::noop())
            .await
            .unwrap();
        store
            .append([blank(3, 5)], IOFlushed::noop())
            .await
            .unwrap();
        store
            .save_committed(Some(LogId::new_term_index(1, 4)))
            .await
            .unwrap();
    }
    let mut store = LogStore::open(dir.path(), 2).unwrap();
    assert_eq!(store.read_vote().await.unwrap(), Some(vote));
    assert_eq!(
        store.read_committed().await.unwrap(),
        Some(LogId::new_term_index(1, 4))
    );
    let entries = store.try_get_log_entries(0..).await.unwrap();
    assert_eq!(entries.len(), 6);
    assert_eq!(entries[5].log_id(), LogId::new_term_index(3, 5));
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(LogId::new_term_index(3, 5)));
    assert_eq!(state.last_purged_log_id, None);

    // The reader openraft hands to replication sees the same log.
    let mut reader = store.get_log_reader().await;
    assert_eq!(reader.try_get_log_entries(2..4).await.unwrap().len(), 2);
    assert_eq!(reader.read_vote().await.unwrap(), Some(vote));

    // Truncation is durable too.
    store
        .truncate_after(Some(LogId::new_term_index(1, 3)))
        .await
        .unwrap();
    drop(reader);
    drop(store);
    let mut store = LogStore::open(dir.path(), 2).unwrap();
    let state = store.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(LogId::new_term_index(1, 3)));
}

#[test]
fn data_dir_keeps_its_node_id() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(LogStore::read_node_id(dir.path()).unwrap(), None);
    drop(LogStore::open(dir.path(), 1).unwrap());
    assert_eq!(LogStore::read_node_id(dir.path()).unwrap(), Some(1));
    match LogStore::open(dir.path(), 2) {
        Err(StoreError::NodeIdMismatch { stored, given, .. }) => {
            assert_eq!((stored, given), (1, 2));
        }
        other => panic!("expected NodeIdMismatch, got {other:?}"),
    }
    // The right id still opens it.
    assert_eq!(LogStore::open(dir.path(), 1).unwrap().node_id(), 1);
}

#[test]
fn one_process_per_data_dir() {
    let dir = tempfile::tempdir().unwrap();
    let _first = LogStore::open(dir.path(), 1).unwrap();
    assert!(matches!(
        LogStore::open(dir.path(), 1),
        Err(StoreError::Db { .. })
    ));
}
