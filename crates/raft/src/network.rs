//! The HTTP client side of the Raft network.
//!
//! Every peer connection sends through the node's one [`PeerHttp`]. Each
//! RPC is a `POST` of a [`codec`]-encoded body to a route in
//! [`crate::routes`], with the cluster token header; the peer answers the
//! whole openraft `Result` encoded the same way, so openraft errors (such as
//! a higher vote) come back as values.
//!
//! Failures map to openraft's error kinds: no connection → `Unreachable`
//! (openraft backs off, see [`crate::raft_config`]), the request timing out →
//! `Timeout`, anything else (a bad status, an undecodable body) →
//! `NetworkError`. A peer whose Raft has stopped answers `Fatal`, which is
//! reported as `Unreachable`.

use std::future::Future;
use std::time::Duration;

use openraft::error::NetworkError;
use openraft::error::RPCError;
use openraft::error::ReplicationClosed;
use openraft::error::StreamingError;
use openraft::error::Timeout;
use openraft::error::Unreachable;

use openraft::network::RPCOption;
use openraft::raft::AppendEntriesRequest;
use openraft::raft::AppendEntriesResponse;
use openraft::raft::SnapshotResponse;
use openraft::raft::TransferLeaderRequest;
use openraft::raft::TransferLeaderResponse;
use openraft::raft::VoteRequest;
use openraft::raft::VoteResponse;
use openraft::OptionalSend;
use openraft::RPCTypes;
use openraft::RaftNetworkFactory;
use openraft::RaftNetworkV2;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::codec;
use crate::peer_http::{PeerBody, PeerHttp, SendError};
use crate::routes;
use crate::transport::TransportError;
use crate::types::errors::Fatal;
use crate::types::errors::RaftError;
use crate::types::BasicNode;
use crate::types::NodeId;
use crate::types::Snapshot;
use crate::types::TypeConfig;
use crate::types::Vote;

/// Creates peer connections; give one to `Raft::new` / `Raft::build`.
#[derive(Debug, Clone)]
pub struct NetworkFactory {
    http: PeerHttp,
}

impl NetworkFactory {
    /// A factory whose connections send through `http`.
    pub fn new(http: PeerHttp) -> Self {
        Self { http }
    }
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Self::Network {
        PeerClient {
            http: self.http.clone(),
            addr: node.addr.clone(),
            target,
        }
    }
}

/// A connection to one peer (cheap: the HTTP client is shared and pooled).
#[derive(Debug, Clone)]
pub struct PeerClient {
    http: PeerHttp,
    addr: String,
    target: NodeId,
}

impl PeerClient {
    /// POSTs `req` to `path` and decodes the answer as `Resp`.
    async fn call<Req, Resp>(
        &self,
        action: RPCTypes,
        path: &str,
        req: &Req,
        timeout: Duration,
    ) -> Result<Resp, RPCError<TypeConfig>>
    where
        Req: Serialize + ?Sized,
        Resp: DeserializeOwned,
    {
        let body = codec::encode(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let resp = self
            .http
            .post(
                Some(self.target),
                &self.addr,
                path,
                PeerBody::Codec(body),
                timeout,
            )
            .await;
        // Only a success counts as an answer: an error status (a proxy in
        // front of a dead member, a process not running Raft) is not the
        // member answering Raft.
        match &resp {
            Ok(r) if r.status.is_success() => self.http.reach().answered(self.target),
            Ok(r) => self
                .http
                .reach()
                .failed(self.target, &format_args!("HTTP {}", r.status)),
            Err(e) => self.http.reach().failed(self.target, e),
        }
        let resp = resp.map_err(|e| match e {
            SendError::Dropped(dropped) => RPCError::Unreachable(Unreachable::new(&dropped)),
            SendError::Transport(e) => self.failed(e, action, timeout),
            SendError::Stamp { reason, .. } => {
                RPCError::Unreachable(Unreachable::from_string(reason))
            }
        })?;
        let (status, bytes) = (resp.status, resp.body);
        if !status.is_success() {
            let text = String::from_utf8_lossy(&bytes[..bytes.len().min(256)]).into_owned();
            return Err(RPCError::Network(NetworkError::from_string(format!(
                "{path} on node {}: HTTP {status}: {text}",
                self.target
            ))));
        }
        codec::decode(&bytes).map_err(|e| RPCError::Network(NetworkError::new(&e)))
    }

    /// Calls a route whose answer is `Result<T, RaftError>`.
    async fn call_raft<Req, T>(
        &self,
        action: RPCTypes,
        path: &str,
        req: &Req,
        timeout: Duration,
    ) -> Result<T, RPCError<TypeConfig>>
    where
        Req: Serialize + ?Sized,
        T: DeserializeOwned,
    {
        let res: Result<T, RaftError> = self.call(action, path, req, timeout).await?;
        res.map_err(|e| self.remote_fatal(e.unwrap_fatal()))
    }

    /// The openraft error for a request `action` that got no whole answer:
    /// no connection is `Unreachable`, the `timeout` passing is `Timeout`,
    /// anything else a `NetworkError`.
    fn failed(
        &self,
        error: TransportError,
        action: RPCTypes,
        timeout: Duration,
    ) -> RPCError<TypeConfig> {
        match error {
            TransportError::Connect(_) => RPCError::Unreachable(Unreachable::new(&error)),
            TransportError::Timeout => RPCError::Timeout(Timeout {
                action,
                id: self.http.identity().node(),
                target: self.target,
                timeout,
            }),
            TransportError::Other(_) => RPCError::Network(NetworkError::new(&error)),
        }
    }

    /// A peer whose Raft stopped cannot serve: treat it as unreachable.
    fn remote_fatal(&self, fatal: Fatal) -> RPCError<TypeConfig> {
        RPCError::Unreachable(Unreachable::from_string(format!(
            "node {}: {fatal}",
            self.target
        )))
    }
}

impl RaftNetworkV2<TypeConfig> for PeerClient {
    type SnapshotData = Vec<u8>;

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call_raft(
            RPCTypes::AppendEntries,
            routes::APPEND,
            &rpc,
            option.soft_ttl(),
        )
        .await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call_raft(RPCTypes::Vote, routes::VOTE, &rpc, option.soft_ttl())
            .await
    }

    async fn pre_vote(
        &mut self,
        rpc: VoteRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<VoteResponse<TypeConfig>, RPCError<TypeConfig>> {
        self.call_raft(RPCTypes::Vote, routes::PRE_VOTE, &rpc, option.soft_ttl())
            .await
    }

    async fn full_snapshot(
        &mut self,
        vote: Vote,
        snapshot: Snapshot,
        cancel: impl Future<Output = ReplicationClosed> + OptionalSend + 'static,
        option: RPCOption,
    ) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
        let req = (vote, snapshot.meta, snapshot.snapshot);
        let call = self.call::<_, Result<SnapshotResponse<TypeConfig>, Fatal>>(
            RPCTypes::InstallSnapshot,
            routes::SNAPSHOT,
            &req,
            option.soft_ttl(),
        );
        tokio::select! {
            closed = cancel => Err(StreamingError::Closed(closed)),
            res = call => match res {
                Ok(Ok(resp)) => Ok(resp),
                Ok(Err(fatal)) => Err(StreamingError::from(self.remote_fatal(fatal))),
                Err(e) => Err(StreamingError::from(e)),
            },
        }
    }

    async fn transfer_leader(
        &mut self,
        req: TransferLeaderRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<TransferLeaderResponse<TypeConfig>, RPCError<TypeConfig>> {
        let res: Result<TransferLeaderResponse<TypeConfig>, Fatal> = self
            .call(
                RPCTypes::TransferLeader,
                routes::TRANSFER_LEADER,
                &req,
                option.soft_ttl(),
            )
            .await?;
        res.map_err(|fatal| self.remote_fatal(fatal))
    }
}
