//! The peer routes the Raft network uses (all `POST`, bodies in [`crate::codec`]).

/// `AppendEntriesRequest` → `Result<AppendEntriesResponse, RaftError>`.
pub const APPEND: &str = "/internal/raft/append";
/// `VoteRequest` → `Result<VoteResponse, RaftError>`.
pub const VOTE: &str = "/internal/raft/vote";
/// `VoteRequest` (pre-vote) → `Result<VoteResponse, RaftError>`.
pub const PRE_VOTE: &str = "/internal/raft/pre-vote";
/// `(Vote, SnapshotMeta, Vec<u8>)` → `Result<SnapshotResponse, Fatal>`.
pub const SNAPSHOT: &str = "/internal/raft/snapshot";
/// `TransferLeaderRequest` → `Result<TransferLeaderResponse, Fatal>`.
pub const TRANSFER_LEADER: &str = "/internal/raft/transfer-leader";

/// A node on a new data directory asks the cluster to remove its id's old
/// one (`serve --rejoin`); the identity guard lets this one route through
/// for the sender's own id though the directory is not the one it knows.
pub const RETIRE_SELF: &str = "/internal/retire-self";

/// The content type of every peer RPC body.
pub const CONTENT_TYPE: &str = "application/octet-stream";
