//! The node's peer routes under `/internal/` (Raft's are in
//! `leasehold_raft::routes`): each path, with the body it takes and the
//! answer it gives. All `POST`, bodies in JSON unless said otherwise; a
//! refusal is an [`ErrorBody`](crate::ErrorBody).

/// Every peer route starts with this: the cluster token guards all of it.
pub const PREFIX: &str = "/internal";

/// [`ReportRequest`](crate::ReportRequest) → the member's `Held` and
/// `Granted`, a stream of length-prefixed bincode frames.
pub const HELD: &str = "/internal/held";
/// What every route of a call forwarded to the speaker starts with.
pub const FORWARD_PREFIX: &str = "/internal/forward/";
/// [`ForwardAcquire`](crate::ForwardAcquire) → [`Granted`](crate::Granted):
/// an acquire that may wait.
pub const FORWARD_ACQUIRE: &str = "/internal/forward/acquire";
/// [`ForwardBatch`](crate::ForwardBatch) →
/// [`ForwardAnswers`](crate::ForwardAnswers): calls answered at once.
pub const FORWARD_BATCH: &str = "/internal/forward/batch";
/// [`ForwardGet`](crate::ForwardGet) → `Option<`[`PeerLock`](crate::PeerLock)`>`.
pub const FORWARD_GET: &str = "/internal/forward/get";
/// [`ForwardList`](crate::ForwardList) → `Vec<`[`PeerLock`](crate::PeerLock)`>`.
pub const FORWARD_LIST: &str = "/internal/forward/list";
/// [`Forgets`](crate::Forgets) → `{}`.
pub const FORGET: &str = "/internal/forget";
/// [`Lost`](crate::Lost) → `{}`.
pub const LOST: &str = "/internal/lost";
/// [`Copies`](crate::Copies) → `{}`.
pub const COPIES: &str = "/internal/copies";
/// [`SessionCopy`](crate::SessionCopy) → [`SessionCopied`](crate::SessionCopied):
/// a session's grant renewed, renewing the member's copies of its locks.
pub const SESSION_COPY: &str = "/internal/session-copy";
/// [`Handover`](crate::Handover) → `{}`: a member that is leaving hands
/// its records to the speaker, which copies each live lock again to the
/// members staying.
pub const HANDOVER: &str = "/internal/handover";
/// [`HandedOver`](crate::HandedOver) → `{}`: the speaker tells a member
/// that a departed member handed its records over, so no rebuild needs to
/// read it.
pub const HANDED_OVER: &str = "/internal/handed-over";
/// [`MemberChange`](crate::MemberChange) →
/// [`ClusterAnswer`](crate::ClusterAnswer): a membership change a member
/// forwards to the speaker.
pub const MEMBERS: &str = "/internal/members";
/// [`MemberChange`](crate::MemberChange) →
/// [`ClusterAnswer`](crate::ClusterAnswer): a node started with `--join`
/// asks a member to add it; forwarded to the speaker.
pub const JOIN: &str = "/internal/join";
/// [`Removed`](crate::Removed) → `{}`: the speaker tells a member it
/// removed, which then stops serving.
pub const REMOVED: &str = "/internal/removed";
/// No body → `{}`: whether the member admits the sender's identity.
pub const IDENTITY: &str = "/internal/identity";
/// `leasehold_raft::FaultPlan` → `{}`: an operator's route (token only, no
/// identity), served by a node started with `--chaos`.
pub const CHAOS: &str = "/internal/chaos";
/// The speaker's view of the cluster, asked by a member for a caller of
/// `GET /v1/cluster?view=speaker` → [`ClusterAnswer`](crate::ClusterAnswer).
pub const CLUSTER: &str = "/internal/cluster";
/// The speaker's failover history, asked by a member for a caller of
/// `GET /v1/cluster/history?view=speaker` →
/// [`HistoryAnswer`](crate::HistoryAnswer).
pub const HISTORY: &str = "/internal/history";
