//! The HTTP server side of the Raft network: routes that feed peer RPCs to
//! the local [`Raft`] and answer the whole `Result`.
//!
//! The token check is not done here: the node wraps all of `/internal/`
//! with it (see [`crate::auth::token_matches`]).

use axum::body::Bytes;
use axum::extract::State;
use axum::http::header;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::response::Response;
use axum::routing::post;
use std::future::Future;

use axum::Router;
use openraft::raft::AppendEntriesRequest;
use openraft::raft::TransferLeaderRequest;
use openraft::raft::VoteRequest;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::codec;
use crate::routes;
use crate::types::Raft;
use crate::types::Snapshot;
use crate::types::SnapshotMeta;
use crate::types::TypeConfig;
use crate::types::Vote;

/// The Raft peer routes ([`crate::routes`]) served by `raft`.
pub fn raft_router(raft: Raft) -> Router {
    Router::new()
        .route(routes::APPEND, post(append))
        .route(routes::VOTE, post(vote))
        .route(routes::PRE_VOTE, post(pre_vote))
        .route(routes::SNAPSHOT, post(snapshot))
        .route(routes::TRANSFER_LEADER, post(transfer_leader))
        .with_state(raft)
}

fn reply<T: Serialize>(value: &T) -> Response {
    match codec::encode(value) {
        Ok(bytes) => ([(header::CONTENT_TYPE, routes::CONTENT_TYPE)], bytes).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Decodes the body as `Req`, runs `handle`, and encodes its answer.
async fn serve<Req, Resp, F, Fut>(body: Bytes, handle: F) -> Response
where
    Req: DeserializeOwned,
    Resp: Serialize,
    F: FnOnce(Req) -> Fut,
    Fut: Future<Output = Resp>,
{
    match codec::decode::<Req>(&body) {
        Ok(req) => reply(&handle(req).await),
        Err(e) => (StatusCode::BAD_REQUEST, format!("bad raft rpc body: {e}")).into_response(),
    }
}

async fn append(State(raft): State<Raft>, body: Bytes) -> Response {
    serve(body, |req: AppendEntriesRequest<TypeConfig>| async move {
        raft.append_entries(req).await
    })
    .await
}

async fn vote(State(raft): State<Raft>, body: Bytes) -> Response {
    serve(body, |req: VoteRequest<TypeConfig>| async move {
        raft.vote(req).await
    })
    .await
}

async fn pre_vote(State(raft): State<Raft>, body: Bytes) -> Response {
    serve(body, |req: VoteRequest<TypeConfig>| async move {
        raft.pre_vote(req).await
    })
    .await
}

async fn snapshot(State(raft): State<Raft>, body: Bytes) -> Response {
    serve(
        body,
        |(vote, meta, data): (Vote, SnapshotMeta, Vec<u8>)| async move {
            let snapshot = Snapshot {
                meta,
                snapshot: data,
            };
            raft.install_full_snapshot(vote, snapshot).await
        },
    )
    .await
}

async fn transfer_leader(State(raft): State<Raft>, body: Bytes) -> Response {
    serve(body, |req: TransferLeaderRequest<TypeConfig>| async move {
        raft.handle_transfer_leader(req).await
    })
    .await
}
