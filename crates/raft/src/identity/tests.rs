use std::collections::BTreeSet;
use std::sync::Arc;

use axum::http::HeaderMap;
use axum::http::HeaderValue;
use axum::http::StatusCode;

use crate::ids::NodeId;
use crate::log_store::LogStore;
use crate::routes;

use super::stamp::{KIND_CLUSTER, KIND_STORE};
use super::*;

fn identity(node: NodeId) -> (tempfile::TempDir, LogStore, Identity) {
    let dir = tempfile::tempdir().unwrap();
    let store = LogStore::open(dir.path(), node).unwrap();
    let identity = store.identity();
    (dir, store, identity)
}

/// A member behind the log (it applied a pin of member 2's old
/// directory; the log goes on to a new one) takes the leader's entries
/// from member 2's new directory, so that it can catch up, and still
/// refuses that directory's votes and everything else.
#[tokio::test]
async fn a_member_behind_the_log_takes_the_leaders_entries_but_no_vote() {
    use tower::ServiceExt;
    let (_dir, _store, me) = identity(1);
    let me = Arc::new(me);
    me.applied(1, BTreeSet::from([1, 2, 3])).await.unwrap();
    me.set_members([1, 2, 3]);
    me.pin(2, StoreId(7)).await.unwrap();
    let app = axum::Router::new()
        .route("/{*path}", axum::routing::post(|| async { "taken" }))
        .layer(axum::middleware::from_fn_with_state(Arc::clone(&me), guard));
    let from_new_directory = |path: &str| {
        let mut request = axum::http::Request::post(path)
            .body(axum::body::Body::empty())
            .unwrap();
        let stamp = Stamp {
            from: 2,
            store: StoreId(8),
            cluster: None,
        };
        stamp.write(request.headers_mut());
        request
    };
    for path in [routes::APPEND, routes::SNAPSHOT] {
        let answer = app.clone().oneshot(from_new_directory(path)).await.unwrap();
        assert_eq!(answer.status(), StatusCode::OK, "{path}");
    }
    for path in [routes::VOTE, routes::PRE_VOTE, "/internal/held"] {
        let answer = app.clone().oneshot(from_new_directory(path)).await.unwrap();
        assert_eq!(answer.status(), StatusCode::CONFLICT, "{path}");
    }
    assert_eq!(me.pinned(2), Some(StoreId(7)), "nothing taken as recorded");
}

#[test]
fn a_stamp_survives_its_headers() {
    let stamp = Stamp {
        from: 3,
        store: StoreId(0xabc),
        cluster: Some(ClusterId(u128::MAX)),
    };
    let mut headers = HeaderMap::new();
    stamp.write(&mut headers);
    assert_eq!(Stamp::read(&headers), Ok(stamp));
    headers.remove(CLUSTER_HEADER);
    assert_eq!(Stamp::read(&headers).unwrap().cluster, None);
    headers.insert(STORE_HEADER, HeaderValue::from_static("xyz"));
    assert_eq!(Stamp::read(&headers), Err(BadStamp(STORE_HEADER)));
    headers.remove(FROM_HEADER);
    assert_eq!(Stamp::read(&headers), Err(BadStamp(FROM_HEADER)));
}

#[tokio::test]
async fn a_member_is_known_by_the_store_it_first_showed() {
    let (_dir, _store, me) = identity(1);
    let first = Stamp {
        from: 2,
        store: StoreId(7),
        cluster: None,
    };
    me.admit(first).await.unwrap();
    me.admit(first).await.unwrap();
    let wiped = Stamp {
        store: StoreId(8),
        ..first
    };
    assert!(matches!(
        me.admit(wiped).await,
        Err(Refusal::StoreChanged {
            member: 2,
            known: StoreId(7),
            given: StoreId(8)
        })
    ));
    let impostor = Stamp {
        from: 1,
        store: StoreId(9),
        cluster: None,
    };
    assert!(matches!(
        me.admit(impostor).await,
        Err(Refusal::StoreChanged { member: 1, .. })
    ));
}

#[tokio::test]
async fn a_member_added_again_may_show_a_new_directory_once_and_the_old_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let two = |store| Stamp {
        from: 2,
        store: StoreId(store),
        cluster: None,
    };
    let wiped = |result: Result<(), Refusal>| {
        matches!(result, Err(Refusal::StoreChanged { member: 2, .. }))
    };
    let all = || BTreeSet::from([1, 2, 3]);
    let without_two = || BTreeSet::from([1, 3]);
    {
        let store = LogStore::open(dir.path(), 1).unwrap();
        let me = store.identity();
        me.applied(1, all()).await.unwrap();
        me.set_members(all());
        me.admit(two(7)).await.unwrap();
        assert!(wiped(me.admit(two(8)).await), "a wiped voter");
        // Removed: another directory is admitted, and not recorded.
        me.applied(10, without_two()).await.unwrap();
        me.set_members(without_two());
        me.admit(two(8)).await.unwrap();
        assert_eq!(me.recorded(2), Some(StoreId(7)));
        // Added again: its new directory replaces the old, once.
        me.applied(20, all()).await.unwrap();
        me.set_members(all());
        me.admit(two(8)).await.unwrap();
        assert_eq!(me.recorded(2), Some(StoreId(8)));
        assert!(matches!(
            me.admit(two(7)).await,
            Err(Refusal::Retired {
                member: 2,
                store: StoreId(7)
            })
        ));
        assert!(wiped(me.admit(two(9)).await), "wiped after its comeback");
        // Removed and added again on the same directory: shown again,
        // so a later wipe is a wipe.
        me.applied(30, without_two()).await.unwrap();
        me.applied(40, all()).await.unwrap();
        me.admit(two(8)).await.unwrap();
        assert!(wiped(me.admit(two(9)).await));
    }
    // The log applied again from the start after a restart adds no one
    // anew: what was recorded stands.
    let store = LogStore::open(dir.path(), 1).unwrap();
    let me = store.identity();
    me.applied(1, all()).await.unwrap();
    me.set_members(all());
    assert_eq!(me.recorded(2), Some(StoreId(8)));
    assert!(wiped(me.admit(two(9)).await));
    assert!(matches!(
        me.admit(two(7)).await,
        Err(Refusal::Retired { .. })
    ));
}

#[tokio::test]
async fn the_log_says_which_directory_a_member_is_on() {
    let dir = tempfile::tempdir().unwrap();
    let two = |store| Stamp {
        from: 2,
        store: StoreId(store),
        cluster: None,
    };
    let store = LogStore::open(dir.path(), 1).unwrap();
    let me = store.identity();
    me.applied(1, BTreeSet::from([1, 3])).await.unwrap();
    me.set_members([1, 3]);
    // A joiner's first word, before it is a member: admitted.
    me.admit(two(6)).await.unwrap();
    me.pin(2, StoreId(7)).await.unwrap();
    me.applied(5, BTreeSet::from([1, 2, 3])).await.unwrap();
    me.set_members([1, 2, 3]);
    assert_eq!(me.pinned(2), Some(StoreId(7)));
    me.admit(two(7)).await.unwrap();
    // Pinned: no other directory, not even after an addition.
    assert!(matches!(
        me.admit(two(8)).await,
        Err(Refusal::StoreChanged { member: 2, .. })
    ));
    assert!(me.admit(two(6)).await.is_err());
    // Removed, and added again on a new directory the log names.
    me.applied(8, BTreeSet::from([1, 3])).await.unwrap();
    me.set_members([1, 3]);
    me.pin(2, StoreId(9)).await.unwrap();
    me.applied(9, BTreeSet::from([1, 2, 3])).await.unwrap();
    me.set_members([1, 2, 3]);
    me.admit(two(9)).await.unwrap();
    assert!(matches!(
        me.admit(two(7)).await,
        Err(Refusal::Retired { .. })
    ));
    // This node's own id: the log vouches for this directory or not.
    me.pin(1, StoreId(1)).await.unwrap();
    assert!(!me.vouched.load(std::sync::atomic::Ordering::Relaxed));
    assert_eq!(me.pinned(1), None, "the log names another directory");
    me.pin(1, me.store()).await.unwrap();
    assert!(me.vouched.load(std::sync::atomic::Ordering::Relaxed));
    assert_eq!(me.pinned(1), Some(me.store()), "the log names this one");

    // A member recorded before this process applied its first
    // configuration (a first start) was not added since: a wipe is one.
    let dir = tempfile::tempdir().unwrap();
    let store = LogStore::open(dir.path(), 1).unwrap();
    let me = store.identity();
    me.admit(two(7)).await.unwrap();
    me.applied(1, BTreeSet::from([1, 2, 3])).await.unwrap();
    me.set_members([1, 2, 3]);
    assert!(matches!(
        me.admit(two(8)).await,
        Err(Refusal::StoreChanged { member: 2, .. })
    ));
}

#[tokio::test]
async fn whether_a_configuration_named_this_node_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = LogStore::open(dir.path(), 1).unwrap();
        let me = store.identity();
        assert_eq!(me.was_named(), Some(false), "a new directory");
        me.admit(Stamp {
            from: 2,
            store: StoreId(7),
            cluster: None,
        })
        .await
        .unwrap();
        assert_eq!(me.was_named(), Some(false));
        me.named().await.unwrap();
    }
    let store = LogStore::open(dir.path(), 1).unwrap();
    assert_eq!(store.identity().was_named(), Some(true));
}

#[tokio::test]
async fn the_first_cluster_learned_is_kept_and_others_refused() {
    let (_dir, _store, me) = identity(1);
    let peer = |cluster| Stamp {
        from: 2,
        store: StoreId(7),
        cluster: Some(ClusterId(cluster)),
    };
    me.admit(peer(5)).await.unwrap();
    assert_eq!(me.cluster(), Some(ClusterId(5)));
    assert_eq!(me.bootstrap().await.unwrap(), ClusterId(5));
    assert!(matches!(
        me.admit(peer(6)).await,
        Err(Refusal::ForeignCluster { .. })
    ));
}

#[tokio::test]
async fn what_was_learned_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (store_id, cluster) = {
        let store = LogStore::open(dir.path(), 1).unwrap();
        let me = store.identity();
        let cluster = me.bootstrap().await.unwrap();
        me.admit(Stamp {
            from: 2,
            store: StoreId(7),
            cluster: Some(cluster),
        })
        .await
        .unwrap();
        (me.store(), cluster)
    };
    let store = LogStore::open(dir.path(), 1).unwrap();
    let me = store.identity();
    assert_eq!(me.store(), store_id);
    assert_eq!(me.cluster(), Some(cluster));
    assert_eq!(me.recorded(2), Some(StoreId(7)));
    let other = LogStore::open(tempfile::tempdir().unwrap().path(), 1).unwrap();
    assert_ne!(other.identity().store(), store_id);
}

#[tokio::test]
async fn an_answer_saying_this_store_changed_refuses_this_node() {
    let (_dir, _store, me) = identity(2);
    let mut headers = HeaderMap::new();
    headers.insert(REFUSED_HEADER, HeaderValue::from_static(KIND_CLUSTER));
    let conflict = StatusCode::CONFLICT;
    assert!(me.check_answer(1, conflict, &headers).await.is_err());
    assert!(!me.is_refused());
    headers.insert(REFUSED_HEADER, HeaderValue::from_static(KIND_STORE));
    assert!(me.check_answer(1, conflict, &headers).await.is_err());
    assert!(me.is_refused());
}

#[tokio::test]
async fn an_answer_from_the_wrong_member_or_store_is_not_believed() {
    let (_dir, _store, me) = identity(1);
    let mut headers = HeaderMap::new();
    Stamp {
        from: 3,
        store: StoreId(7),
        cluster: None,
    }
    .write(&mut headers);
    let ok = StatusCode::OK;
    assert!(me.check_answer(2, ok, &headers).await.is_err());
    assert!(me.check_answer(3, ok, &headers).await.is_ok());
    assert!(me
        .check_answer(2, StatusCode::UNAUTHORIZED, &HeaderMap::new())
        .await
        .is_ok());
    let mut wiped = HeaderMap::new();
    Stamp {
        from: 3,
        store: StoreId(8),
        cluster: None,
    }
    .write(&mut wiped);
    assert!(me.check_answer(3, ok, &wiped).await.is_err());
    assert!(!me.is_refused());
}
