//! Members' calls over frames (`Request::Peer`, version 3): served by the
//! node's peer routes as the same request over HTTP is, their checks
//! included; nothing else is served so.

use leasehold_api::wire::{self, Answer, PeerCall, PeerReply, Request};
use leasehold_api::ErrorCode;

use super::{error, start_with, Conn, PATIENCE, TOKEN};

/// A call to `path` with `headers` and no body.
fn peer(path: &str, headers: &[(&str, &str)]) -> Request {
    Request::Peer(PeerCall {
        path: path.into(),
        headers: headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
            .collect(),
        body: Vec::new(),
    })
}

fn reply(answer: Answer) -> PeerReply {
    match answer {
        Answer::Peer(reply) => reply,
        other => panic!("not a member's reply: {other:?}"),
    }
}

const WITH_TOKEN: &[(&str, &str)] = &[(leasehold_raft::TOKEN_HEADER, TOKEN)];

#[tokio::test]
async fn a_members_call_is_answered_as_its_http_request_is() {
    let node = start_with(|c| c).await;
    let http = |token: Option<&str>| {
        let mut post = node
            .http
            .post(format!("http://{}/internal/forget", node.addr))
            .timeout(PATIENCE);
        if let Some(token) = token {
            post = post.header(leasehold_raft::TOKEN_HEADER, token);
        }
        post
    };
    let mut conn = Conn::open(&node.addr).await;

    // Past the token, the identity guard: no stamp, refused alike.
    let over_http = http(Some(TOKEN)).send().await.unwrap();
    let framed = reply(conn.call(1, peer("/internal/forget", WITH_TOKEN)).await);
    assert_eq!(framed.status, over_http.status().as_u16());
    assert_eq!(framed.status, 400);
    assert!(framed
        .headers
        .iter()
        .any(|(n, v)| n == "content-type" && v == b"application/json"));
    assert_eq!(framed.body, over_http.bytes().await.unwrap().to_vec());

    // Without the cluster token: refused as over HTTP.
    let over_http = http(None).send().await.unwrap();
    let framed = reply(conn.call(2, peer("/internal/forget", &[])).await);
    assert_eq!(framed.status, 401);
    assert_eq!(framed.status, over_http.status().as_u16());
    let wrong = [(leasehold_raft::TOKEN_HEADER, "not-the-token")];
    assert_eq!(
        reply(conn.call(3, peer("/internal/forget", &wrong)).await).status,
        401
    );

    // Only the short peer routes members call over frames: not a client's
    // route, no route, nor a report's (which streams megabytes).
    for (id, path) in [
        (4, "/v1/locks/acquire"),
        (5, "/internalx"),
        (6, "/internal/no-such"),
        (9, leasehold_api::routes::HELD),
        (10, "/internal/raft/append"),
    ] {
        assert_eq!(
            error(conn.call(id, peer(path, WITH_TOKEN)).await),
            ErrorCode::BadRequest,
            "{path}"
        );
    }
    // A header HTTP could not carry.
    assert_eq!(
        error(
            conn.call(7, peer("/internal/forget", &[("bad name", "v")]))
                .await
        ),
        ErrorCode::BadRequest
    );
    // The connection goes on.
    assert_eq!(conn.call(8, Request::Ping).await, Answer::Done);
}

#[tokio::test]
async fn a_connection_of_an_earlier_version_is_refused_members_calls_and_goes_on() {
    let node = start_with(|c| c).await;
    let (mut conn, chosen) = Conn::offer(&node.addr, wire::PEER_CALLS - 1).await;
    assert_eq!(chosen, wire::preamble(wire::PEER_CALLS - 1));
    assert_eq!(
        error(conn.call(1, peer("/internal/forget", WITH_TOKEN)).await),
        ErrorCode::BadRequest
    );
    assert_eq!(conn.call(2, Request::Ping).await, Answer::Done);
}

#[tokio::test]
async fn with_an_acl_a_members_call_needs_the_cluster_token_not_a_token_frame() {
    let acl = leasehold_acl::Acl::parse(&format!(
        "[[token]]\nname = \"reader\"\nsecret_sha256 = \"{}\"\nread = [\"jobs/\"]\n",
        leasehold_acl::sha256_hex(b"reader-secret")
    ))
    .unwrap();
    let node = start_with(|c| c.with_acl(acl)).await;
    let mut conn = Conn::open(&node.addr).await;
    // No token frame: a client's call is refused, a member's passes the
    // token's check (to the identity guard's: no stamp).
    assert_eq!(
        error(conn.call(1, super::acquire("jobs/1")).await),
        ErrorCode::Unauthorized
    );
    assert_eq!(
        reply(conn.call(2, peer("/internal/forget", WITH_TOKEN)).await).status,
        400
    );
    // A client's token does not open the peer routes.
    let said = conn
        .call(3, Request::Token(wire::Token("reader-secret".into())))
        .await;
    assert_eq!(said, Answer::Done);
    assert_eq!(
        reply(conn.call(4, peer("/internal/forget", &[])).await).status,
        401
    );
}
