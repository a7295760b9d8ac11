//! The axum middleware in front of the peer routes ([`guard`]).

use std::sync::Arc;

use axum::extract::Request;
use axum::extract::State;
use axum::http::header;
use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::response::Response;

use crate::ids::NodeId;
use crate::routes;

use super::admission::Refusal;
use super::node::Identity;
use super::stamp::{Stamp, KIND_PROTOCOL, REFUSED_HEADER};

/// The peer server's middleware: admits each request's stamp (refusing a
/// stranger with `409`, a request without a stamp with `400`, both with a
/// JSON body) and stamps every answer. Put it inside the token check, so
/// nothing unauthenticated is recorded.
///
/// A leader's entries (`append`, `snapshot`) are the one exception: they
/// are taken even from a directory that what this node has applied of the
/// log names otherwise. Such a node is behind the log (a member removed and
/// added again under its id on a new directory since the entry it applied
/// last), and only those entries can bring it up to date; refusing them
/// would keep it behind for good. Raft's own term check refuses a stale
/// leader's entries, and a leader's entries count nothing towards a vote or
/// a commit: the votes, and every answer, are still checked.
pub async fn guard(
    State(identity): State<Arc<Identity>>,
    request: Request,
    next: Next,
) -> Response {
    let from_leader = matches!(request.uri().path(), routes::APPEND | routes::SNAPSHOT);
    let retiring = request.uri().path() == routes::RETIRE_SELF;
    let refused = match Stamp::read(request.headers()) {
        Err(e) => Some((StatusCode::BAD_REQUEST, "bad_request", None, e.to_string())),
        Ok(stamp) => match identity.admit(stamp).await {
            Ok(()) => match identity.read_versions(stamp.from, request.headers()) {
                Ok(()) => {
                    identity.terms.read(stamp.from, request.headers(), false);
                    None
                }
                Err(why) => Some((
                    StatusCode::CONFLICT,
                    "wrong_member",
                    Some(KIND_PROTOCOL),
                    why,
                )),
            },
            Err(Refusal::StoreChanged { member, .. } | Refusal::Retired { member, .. })
                if from_leader && member != identity.node() =>
            {
                identity.note_behind(member);
                None
            }
            // A new directory asking that its own id's old one be removed:
            // the route asks nothing else of it (and a retired directory,
            // an old one, may not).
            Err(Refusal::StoreChanged { member, .. })
                if retiring && member == stamp.from && member != identity.node() =>
            {
                None
            }
            Err(e @ Refusal::Store(_)) => Some((
                StatusCode::SERVICE_UNAVAILABLE,
                "internal",
                Some(e.kind()),
                e.to_string(),
            )),
            Err(e) => {
                identity.warn_once(stamp.from, e.kind(), &e);
                Some((
                    StatusCode::CONFLICT,
                    "wrong_member",
                    Some(e.kind()),
                    e.to_string(),
                ))
            }
        },
    };
    let mut response = match refused {
        None => next.run(request).await,
        Some((status, code, kind, message)) => {
            let body = serde_json::json!({ "error": code, "message": message }).to_string();
            let mut response =
                (status, [(header::CONTENT_TYPE, "application/json")], body).into_response();
            if let Some(kind) = kind {
                response
                    .headers_mut()
                    .insert(REFUSED_HEADER, HeaderValue::from_static(kind));
            }
            response
        }
    };
    identity.stamp().write(response.headers_mut());
    identity.terms.write(response.headers_mut());
    identity.versions.write(response.headers_mut());
    response
}

impl Identity {
    /// Logs, once per member, that a leader's entries came from a
    /// directory the log as applied here names otherwise (see [`guard`]).
    fn note_behind(&self, member: NodeId) {
        let first = self
            .warned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert((member, "behind"));
        if first {
            tracing::info!(
                member,
                "taking the leader's entries from a data directory the log applied here \
                 names otherwise: this node is behind the log"
            );
        }
    }
}
