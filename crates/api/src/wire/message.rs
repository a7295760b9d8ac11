//! What frames carry: every call of the HTTP API and every answer it
//! gives, each under its kind byte.

use crate::codec::{decode_fields, encode_fields_into, CodecError};
use crate::{
    AcquireBody, AddMemberBody, ClusterAnswer, ErrorBody, HistoryAnswer, ListQuery, LockAnswer,
    LocksAnswer, ReleaseBody, RenewBody, SessionAnswer, SessionBody, SessionClosed,
    SessionOpenBody, Watch,
};

use super::frame::{
    Message, MAX_ANSWER_ALLOC, MAX_ANSWER_BODY, MAX_PEER_ALLOC, MAX_PEER_BODY, MAX_REQUEST_ALLOC,
    MAX_REQUEST_BODY,
};
use super::preamble::Version;

/// The kind bytes. Requests take `0x01` to `0x3f`, answers `0x80` to
/// `0xbf` and `0xff` (an error); `0x40` to `0x7f` and `0xc0` to `0xfe` are
/// the members' own calls and answers.
pub mod kind {
    /// [`super::Request::Acquire`].
    pub const ACQUIRE: u8 = 0x01;
    /// [`super::Request::Release`].
    pub const RELEASE: u8 = 0x02;
    /// [`super::Request::Renew`].
    pub const RENEW: u8 = 0x03;
    /// [`super::Request::OpenSession`].
    pub const OPEN_SESSION: u8 = 0x04;
    /// [`super::Request::RenewSession`].
    pub const RENEW_SESSION: u8 = 0x05;
    /// [`super::Request::CloseSession`].
    pub const CLOSE_SESSION: u8 = 0x06;
    /// [`super::Request::Get`].
    pub const GET: u8 = 0x07;
    /// [`super::Request::List`].
    pub const LIST: u8 = 0x08;
    /// [`super::Request::Cluster`].
    pub const CLUSTER: u8 = 0x09;
    /// [`super::Request::History`].
    pub const HISTORY: u8 = 0x0a;
    /// [`super::Request::AddMember`].
    pub const ADD_MEMBER: u8 = 0x0b;
    /// [`super::Request::RemoveMember`].
    pub const REMOVE_MEMBER: u8 = 0x0c;
    /// [`super::Request::Token`].
    pub const TOKEN: u8 = 0x0d;
    /// [`super::Request::Ping`].
    pub const PING: u8 = 0x0e;
    /// [`super::Request::Peer`] (version 3).
    pub const PEER: u8 = 0x40;

    /// [`super::Answer::Lock`].
    pub const LOCK: u8 = 0x81;
    /// [`super::Answer::Locks`] with no names awaited: the layout of
    /// version 1, its `locks` and `total`.
    pub const LOCKS: u8 = 0x82;
    /// [`super::Answer::Session`].
    pub const SESSION: u8 = 0x83;
    /// [`super::Answer::SessionClosed`].
    pub const SESSION_CLOSED: u8 = 0x84;
    /// [`super::Answer::Cluster`].
    pub const CLUSTER_ANSWER: u8 = 0x85;
    /// [`super::Answer::History`].
    pub const HISTORY_ANSWER: u8 = 0x86;
    /// [`super::Answer::Done`].
    pub const DONE: u8 = 0x87;
    /// [`super::Answer::Locks`] with names awaited (version 2): `locks`,
    /// `total` and `awaited`.
    pub const LOCKS_AWAITED: u8 = 0x88;
    /// [`super::Answer::Peer`] (version 3).
    pub const PEER_REPLY: u8 = 0xc0;
    /// [`super::Answer::Error`].
    pub const ERROR: u8 = 0xff;

    /// Every request kind.
    pub const REQUESTS: [u8; 15] = [
        ACQUIRE,
        RELEASE,
        RENEW,
        OPEN_SESSION,
        RENEW_SESSION,
        CLOSE_SESSION,
        GET,
        LIST,
        CLUSTER,
        HISTORY,
        ADD_MEMBER,
        REMOVE_MEMBER,
        TOKEN,
        PING,
        PEER,
    ];
    /// Every answer kind.
    pub const ANSWERS: [u8; 10] = [
        LOCK,
        LOCKS,
        SESSION,
        SESSION_CLOSED,
        CLUSTER_ANSWER,
        HISTORY_ANSWER,
        DONE,
        ERROR,
        LOCKS_AWAITED,
        PEER_REPLY,
    ];
}

/// `GET /v1/locks/{name}`, with the watch its query may ask
/// (`?wait_ms=&after_fence=&after_data=`).
#[derive(Debug, Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct GetQuery {
    /// The name looked up.
    pub name: String,
    /// Wait for the lock to change, as `wait_ms` asks.
    pub watch: Option<Watch>,
}

/// Whose view `GET /v1/cluster` and `/v1/cluster/history` answer
/// (`?view=`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub enum View {
    /// The answering node's own (`view=own`, or none).
    #[default]
    Own,
    /// The speaker's, asked of it by the answering node (`view=speaker`).
    Speaker,
}

/// `headers` as a frame of a member's call or its answer carries them:
/// each name with its value's bytes, in order.
pub fn peer_headers(headers: &http::HeaderMap) -> Vec<(String, Vec<u8>)> {
    headers
        .iter()
        .map(|(name, value)| (name.as_str().to_string(), value.as_bytes().to_vec()))
        .collect()
}

/// A frame's headers as HTTP's, the inverse of [`peer_headers`]; `None`
/// when a name or a value is not one HTTP allows.
pub fn header_map(headers: Vec<(String, Vec<u8>)>) -> Option<http::HeaderMap> {
    let mut map = http::HeaderMap::with_capacity(headers.len());
    for (name, value) in headers {
        let name = http::HeaderName::from_bytes(name.as_bytes()).ok()?;
        let value = http::HeaderValue::from_bytes(&value).ok()?;
        map.append(name, value);
    }
    Some(map)
}

/// A member's call to another, carried whole in a frame: what its HTTP
/// request would be, so the member that takes it serves it with the same
/// routes and checks (cluster token, identity stamp, versions) as over
/// HTTP. Shown without its headers' values: one of them is the cluster
/// token.
#[derive(Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct PeerCall {
    /// The route, under `/internal/`.
    pub path: String,
    /// The request's headers, each name with its value's bytes.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The request's body.
    pub body: Vec<u8>,
}

impl std::fmt::Debug for PeerCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerCall")
            .field("path", &self.path)
            .field("headers", &names(&self.headers))
            .field("body_len", &self.body.len())
            .finish()
    }
}

/// The names of `headers`, without their values.
fn names(headers: &[(String, Vec<u8>)]) -> Vec<&str> {
    headers.iter().map(|(name, _)| name.as_str()).collect()
}

/// A peer route's answer, carried whole in a frame: its status, headers
/// and body as its HTTP answer would have them.
#[derive(Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct PeerReply {
    /// The HTTP status.
    pub status: u16,
    /// The answer's headers, each name with its value's bytes.
    pub headers: Vec<(String, Vec<u8>)>,
    /// The answer's body.
    pub body: Vec<u8>,
}

impl std::fmt::Debug for PeerReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PeerReply")
            .field("status", &self.status)
            .field("headers", &names(&self.headers))
            .field("body_len", &self.body.len())
            .finish()
    }
}

/// A bearer token, as [`Request::Token`] carries it: shown as `<token>`,
/// never its text, so a request logged or printed keeps it secret. Laid
/// out as its text.
#[derive(Clone, PartialEq, Eq, bincode::Encode, bincode::Decode)]
pub struct Token(pub String);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<token>)")
    }
}

/// A call, as a client sends it: one for each route of the HTTP API a
/// client calls, with the same values, and two of the connection's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `POST /v1/locks/acquire` → [`Answer::Lock`].
    Acquire(AcquireBody),
    /// `POST /v1/locks/release` → [`Answer::Lock`].
    Release(ReleaseBody),
    /// `POST /v1/locks/renew` → [`Answer::Lock`].
    Renew(RenewBody),
    /// `POST /v1/sessions/open` → [`Answer::Session`].
    OpenSession(SessionOpenBody),
    /// `POST /v1/sessions/renew` → [`Answer::Session`].
    RenewSession(SessionBody),
    /// `POST /v1/sessions/close` → [`Answer::SessionClosed`].
    CloseSession(SessionBody),
    /// `GET /v1/locks/{name}` → [`Answer::Lock`], or `not_held`.
    Get(GetQuery),
    /// `GET /v1/locks?prefix=&limit=` → [`Answer::Locks`].
    List(ListQuery),
    /// `GET /v1/cluster` → [`Answer::Cluster`].
    Cluster(View),
    /// `GET /v1/cluster/history` → [`Answer::History`].
    History(View),
    /// `POST /v1/cluster/members` → [`Answer::Cluster`].
    AddMember(AddMemberBody),
    /// `DELETE /v1/cluster/members/{id}` → [`Answer::Cluster`].
    RemoveMember(u64),
    /// The bearer token the connection's later calls are made with, as
    /// `Authorization: Bearer` for each HTTP request → [`Answer::Done`],
    /// or `unauthorized`. The node reads no frame after it before it is
    /// applied.
    Token(Token),
    /// Whether the connection is alive → [`Answer::Done`]: a client keeps
    /// an idle connection open with it.
    Ping,
    /// A member's call to a peer route (`/internal/...`), as its HTTP
    /// request would carry it → [`Answer::Peer`] (version 3).
    Peer(PeerCall),
}

/// An answer, as a node sends it: the HTTP API's, with the same values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A lock (`200 {"lock": ...}`).
    Lock(LockAnswer),
    /// A listing.
    Locks(LocksAnswer),
    /// A session opened or renewed.
    Session(SessionAnswer),
    /// A session closed.
    SessionClosed(SessionClosed),
    /// The cluster.
    Cluster(ClusterAnswer),
    /// The failover history.
    History(HistoryAnswer),
    /// Done, nothing to say ([`Request::Token`], [`Request::Ping`]).
    Done,
    /// A peer route's answer to a [`Request::Peer`], as its HTTP answer
    /// would carry it (its errors included).
    Peer(PeerReply),
    /// A failure, with its code (the HTTP status follows from it).
    Error(ErrorBody),
}

impl Answer {
    /// This answer as a connection of `version` carries it: what that
    /// version has no place for is left out (a listing's `awaited` below
    /// version 2).
    pub fn in_version(mut self, version: Version) -> Answer {
        if let Answer::Locks(a) = &mut self {
            if version < 2 {
                a.awaited.clear();
            }
        }
        self
    }
}

impl Request {
    /// Whether `answer` is of the kind this request is answered with (an
    /// error answers any).
    pub fn answered_by(&self, answer: &Answer) -> bool {
        matches!(
            (self, answer),
            (_, Answer::Error(_))
                | (
                    Request::Acquire(_) | Request::Release(_) | Request::Renew(_) | Request::Get(_),
                    Answer::Lock(_)
                )
                | (Request::List(_), Answer::Locks(_))
                | (
                    Request::OpenSession(_) | Request::RenewSession(_),
                    Answer::Session(_)
                )
                | (Request::CloseSession(_), Answer::SessionClosed(_))
                | (
                    Request::Cluster(_) | Request::AddMember(_) | Request::RemoveMember(_),
                    Answer::Cluster(_)
                )
                | (Request::History(_), Answer::History(_))
                | (Request::Token(_) | Request::Ping, Answer::Done)
                | (Request::Peer(_), Answer::Peer(_))
        )
    }
}

/// A request body decoded, its allocations bounded.
fn request<T: bincode::Decode<()>>(body: &[u8]) -> Result<T, CodecError> {
    decode_fields::<T, MAX_REQUEST_ALLOC>(body)
}

/// An answer body decoded, its allocations bounded.
fn answer<T: bincode::Decode<()>>(body: &[u8]) -> Result<T, CodecError> {
    decode_fields::<T, MAX_ANSWER_ALLOC>(body)
}

impl Message for Request {
    const MAX_BODY: usize = MAX_REQUEST_BODY;

    fn max_body(k: u8) -> usize {
        match k {
            kind::PEER => MAX_PEER_BODY,
            _ => MAX_REQUEST_BODY,
        }
    }

    fn is_kind(k: u8) -> bool {
        kind::REQUESTS.contains(&k)
    }

    fn kind(&self) -> u8 {
        match self {
            Request::Acquire(_) => kind::ACQUIRE,
            Request::Release(_) => kind::RELEASE,
            Request::Renew(_) => kind::RENEW,
            Request::OpenSession(_) => kind::OPEN_SESSION,
            Request::RenewSession(_) => kind::RENEW_SESSION,
            Request::CloseSession(_) => kind::CLOSE_SESSION,
            Request::Get(_) => kind::GET,
            Request::List(_) => kind::LIST,
            Request::Cluster(_) => kind::CLUSTER,
            Request::History(_) => kind::HISTORY,
            Request::AddMember(_) => kind::ADD_MEMBER,
            Request::RemoveMember(_) => kind::REMOVE_MEMBER,
            Request::Token(_) => kind::TOKEN,
            Request::Ping => kind::PING,
            Request::Peer(_) => kind::PEER,
        }
    }

    fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), CodecError> {
        match self {
            Request::Acquire(b) => encode_fields_into(b, out),
            Request::Release(b) => encode_fields_into(b, out),
            Request::Renew(b) => encode_fields_into(b, out),
            Request::OpenSession(b) => encode_fields_into(b, out),
            Request::RenewSession(b) | Request::CloseSession(b) => encode_fields_into(b, out),
            Request::Get(q) => encode_fields_into(q, out),
            Request::List(q) => encode_fields_into(q, out),
            Request::Cluster(v) | Request::History(v) => encode_fields_into(v, out),
            Request::AddMember(b) => encode_fields_into(b, out),
            Request::RemoveMember(id) => encode_fields_into(id, out),
            Request::Token(token) => encode_fields_into(token, out),
            Request::Ping => Ok(()),
            Request::Peer(call) => encode_fields_into(call, out),
        }
    }

    fn decode_body(k: u8, body: &[u8]) -> Result<Self, CodecError> {
        Ok(match k {
            kind::ACQUIRE => Request::Acquire(request(body)?),
            kind::RELEASE => Request::Release(request(body)?),
            kind::RENEW => Request::Renew(request(body)?),
            kind::OPEN_SESSION => Request::OpenSession(request(body)?),
            kind::RENEW_SESSION => Request::RenewSession(request(body)?),
            kind::CLOSE_SESSION => Request::CloseSession(request(body)?),
            kind::GET => Request::Get(request(body)?),
            kind::LIST => Request::List(request(body)?),
            kind::CLUSTER => Request::Cluster(request(body)?),
            kind::HISTORY => Request::History(request(body)?),
            kind::ADD_MEMBER => Request::AddMember(request(body)?),
            kind::REMOVE_MEMBER => Request::RemoveMember(request(body)?),
            kind::TOKEN => Request::Token(request(body)?),
            kind::PING => {
                request::<()>(body)?;
                Request::Ping
            }
            kind::PEER => Request::Peer(decode_fields::<_, MAX_PEER_ALLOC>(body)?),
            _ => return Err(CodecError::UnexpectedFrame("an unknown kind of request")),
        })
    }
}

impl Message for Answer {
    const MAX_BODY: usize = MAX_ANSWER_BODY;

    fn is_kind(k: u8) -> bool {
        kind::ANSWERS.contains(&k)
    }

    fn kind(&self) -> u8 {
        match self {
            Answer::Lock(_) => kind::LOCK,
            Answer::Locks(a) if a.awaited.is_empty() => kind::LOCKS,
            Answer::Locks(_) => kind::LOCKS_AWAITED,
            Answer::Session(_) => kind::SESSION,
            Answer::SessionClosed(_) => kind::SESSION_CLOSED,
            Answer::Cluster(_) => kind::CLUSTER_ANSWER,
            Answer::History(_) => kind::HISTORY_ANSWER,
            Answer::Done => kind::DONE,
            Answer::Peer(_) => kind::PEER_REPLY,
            Answer::Error(_) => kind::ERROR,
        }
    }

    fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), CodecError> {
        match self {
            Answer::Lock(a) => encode_fields_into(a, out),
            Answer::Locks(a) if a.awaited.is_empty() => {
                encode_fields_into(&(&a.locks, &a.total), out)
            }
            Answer::Locks(a) => encode_fields_into(&(&a.locks, &a.total, &a.awaited), out),
            Answer::Session(a) => encode_fields_into(a, out),
            Answer::SessionClosed(a) => encode_fields_into(a, out),
            Answer::Cluster(a) => encode_fields_into(a, out),
            Answer::History(a) => encode_fields_into(a, out),
            Answer::Done => Ok(()),
            Answer::Peer(reply) => encode_fields_into(reply, out),
            Answer::Error(e) => encode_fields_into(e, out),
        }
    }

    fn decode_body(k: u8, body: &[u8]) -> Result<Self, CodecError> {
        Ok(match k {
            kind::LOCK => Answer::Lock(answer(body)?),
            kind::LOCKS => {
                let (locks, total) = answer(body)?;
                Answer::Locks(LocksAnswer {
                    locks,
                    total,
                    awaited: Vec::new(),
                })
            }
            kind::LOCKS_AWAITED => {
                let (locks, total, awaited) = answer(body)?;
                Answer::Locks(LocksAnswer {
                    locks,
                    total,
                    awaited,
                })
            }
            kind::SESSION => Answer::Session(answer(body)?),
            kind::SESSION_CLOSED => Answer::SessionClosed(answer(body)?),
            kind::CLUSTER_ANSWER => Answer::Cluster(answer(body)?),
            kind::HISTORY_ANSWER => Answer::History(answer(body)?),
            kind::DONE => {
                answer::<()>(body)?;
                Answer::Done
            }
            kind::PEER_REPLY => Answer::Peer(answer(body)?),
            kind::ERROR => Answer::Error(answer(body)?),
            _ => return Err(CodecError::UnexpectedFrame("an unknown kind of answer")),
        })
    }
}
