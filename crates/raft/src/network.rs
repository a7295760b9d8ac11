//! The HTTP client side of the Raft network.
//!
//! One pooled `reqwest::Client` is shared by every peer connection. Each
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
use std::sync::Arc;
use std::time::Duration;

use openraft::error::NetworkError;
use openraft::error::RPCError;
use openraft::error::ReplicationClosed;
use openraft::error::StreamingError;
use openraft::error::Timeout;
use openraft::error::Unreachable;

use crate::faults::Faults;
use crate::identity::Identity;
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
use reqwest::header::HeaderValue;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::auth::TOKEN_HEADER;
use crate::codec;
use crate::routes;
use crate::types::errors::Fatal;
use crate::types::errors::RaftError;
use crate::types::BasicNode;
use crate::types::NodeId;
use crate::types::Snapshot;
use crate::types::TypeConfig;
use crate::types::Vote;

/// Why the network could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum NetworkInitError {
    /// The cluster token cannot be sent as an HTTP header value.
    #[error("cluster token is not a valid HTTP header value")]
    BadToken,
    /// The HTTP client could not be built.
    #[error("http client: {0}")]
    Client(#[from] reqwest::Error),
}

/// Creates peer connections; give one to `Raft::new` / `Raft::build`.
#[derive(Debug, Clone)]
pub struct NetworkFactory {
    client: reqwest::Client,
    token: HeaderValue,
    identity: Arc<Identity>,
    faults: Faults,
}

impl NetworkFactory {
    /// A factory for the node `identity` names, sending `cluster_token` and
    /// its stamp with every request and checking every answer's stamp.
    pub fn new(
        identity: Arc<Identity>,
        cluster_token: &str,
        faults: Faults,
    ) -> Result<Self, NetworkInitError> {
        let mut token =
            HeaderValue::from_str(cluster_token).map_err(|_| NetworkInitError::BadToken)?;
        token.set_sensitive(true);
        let client = reqwest::Client::builder()
            .no_proxy()
            .tcp_nodelay(true)
            .pool_idle_timeout(Duration::from_secs(60))
            .build()?;
        Ok(Self {
            client,
            token,
            identity,
            faults,
        })
    }
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> Self::Network {
        PeerClient {
            client: self.client.clone(),
            token: self.token.clone(),
            base_url: format!("http://{}", node.addr),
            identity: Arc::clone(&self.identity),
            target,
            faults: self.faults.clone(),
        }
    }
}

/// A connection to one peer (cheap: the HTTP client is shared and pooled).
#[derive(Debug, Clone)]
pub struct PeerClient {
    client: reqwest::Client,
    token: HeaderValue,
    base_url: String,
    identity: Arc<Identity>,
    target: NodeId,
    faults: Faults,
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
        self.faults
            .before_send(self.target)
            .await
            .map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))?;
        let body = codec::encode(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let url = format!("{}{}", self.base_url, path);
        let classify = |e: reqwest::Error| -> RPCError<TypeConfig> {
            if e.is_connect() {
                RPCError::Unreachable(Unreachable::new(&e))
            } else if e.is_timeout() {
                RPCError::Timeout(Timeout {
                    action,
                    id: self.identity.node(),
                    target: self.target,
                    timeout,
                })
            } else {
                RPCError::Network(NetworkError::new(&e))
            }
        };
        let mut headers = reqwest::header::HeaderMap::new();
        self.identity.stamp().write(&mut headers);
        let resp = self
            .client
            .post(url)
            .timeout(timeout)
            .header(TOKEN_HEADER, self.token.clone())
            .headers(headers)
            .header(reqwest::header::CONTENT_TYPE, routes::CONTENT_TYPE)
            .body(body)
            .send()
            .await
            .map_err(classify)?;
        // An answer from a member on another data directory than the one
        // this node knew (a wiped one forgot its votes) is not counted.
        if let Err(why) = self
            .identity
            .check_answer(self.target, resp.status(), resp.headers())
            .await
        {
            return Err(RPCError::Unreachable(Unreachable::from_string(why)));
        }
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(classify)?;
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
