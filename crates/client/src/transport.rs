//! How the client reaches the cluster: over HTTP to a list of endpoints, or
//! in-process to an embedded node. Both answer the same calls.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leasehold_api::{
    AcquireBody, ClusterAnswer, ErrorBody, ErrorCode, LockAnswer, LockRef, LockView, LocksAnswer,
    ReleaseBody, RenewBody, SessionAnswer, SessionBody, SessionOpenBody, Watch,
};
use serde::de::DeserializeOwned;

/// A boxed future, as the transport's calls return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a set's release answers ([`Transport::release_set`]): the locks
/// released, in the order asked, and those not held under their ids.
pub type SetReleased = (Vec<LockView>, Vec<LockRef>);

/// A call that failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// A node answered with an error.
    #[error("{}: {}", .0.error, .0.message)]
    Api(ErrorBody),
    /// No node answered (timed out, or the connection broke after the
    /// request was sent): the outcome is unknown.
    #[error("no answer: {0}")]
    NoAnswer(String),
    /// The request never reached a node (the connection could not be
    /// made): nothing was done.
    #[error("not sent: {0}")]
    NotSent(String),
}

/// A way to make the API's calls.
pub trait Transport: Send + Sync + 'static {
    /// `POST /v1/locks/acquire`: the lock, and how long the node held the
    /// request before answering.
    fn acquire(
        &self,
        body: AcquireBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<(LockView, Duration), CallError>>;
    /// `POST /v1/locks/acquire` with `names`: every lock of the set, in the
    /// order asked, and how long the node held the request. A transport
    /// that does not carry sets refuses them (`400 bad_request`), which
    /// this default does.
    fn acquire_set(
        &self,
        body: AcquireBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<(Vec<LockView>, Duration), CallError>> {
        let _ = (body, timeout);
        Box::pin(async {
            Err(CallError::Api(ErrorBody {
                error: leasehold_api::ErrorCode::BadRequest,
                message: "this transport does not carry sets of names".into(),
                lock: None,
            }))
        })
    }
    /// `POST /v1/locks/release`.
    fn release(
        &self,
        body: ReleaseBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<LockView, CallError>>;
    /// `POST /v1/locks/release` with `locks`: the locks released, in the
    /// order asked, and those not held under their ids (`404 not_held`
    /// when none was). A transport that does not carry a set's release
    /// refuses it (`400 bad_request`), which this default does: the
    /// client then releases one lock per call.
    fn release_set(
        &self,
        body: ReleaseBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<SetReleased, CallError>> {
        let _ = (body, timeout);
        Box::pin(async {
            Err(CallError::Api(ErrorBody {
                error: leasehold_api::ErrorCode::BadRequest,
                message: "this transport does not carry a set's release".into(),
                lock: None,
            }))
        })
    }
    /// `POST /v1/locks/renew`.
    fn renew(
        &self,
        body: RenewBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<LockView, CallError>>;
    /// `GET /v1/locks/{name}`, waiting up to `watch.0` for the fence to
    /// differ from `watch.1` if given.
    fn get(
        &self,
        name: String,
        watch: Option<Watch>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Option<LockView>, CallError>>;
    /// `GET /v1/locks?prefix=&limit=`.
    fn list(
        &self,
        prefix: String,
        limit: usize,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Vec<LockView>, CallError>>;
    /// `GET /v1/cluster`.
    fn cluster(&self, timeout: Duration) -> BoxFuture<'_, Result<ClusterAnswer, CallError>>;
    /// `POST /v1/sessions/open`, `/renew` or `/close`: the session (for a
    /// close, as it was, with `locks` the count released). A transport that
    /// does not carry sessions refuses them (`400 bad_request`), which this
    /// default does.
    fn session(
        &self,
        call: SessionCall,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<SessionAnswer, CallError>> {
        let _ = (call, timeout);
        Box::pin(async {
            Err(CallError::Api(ErrorBody {
                error: leasehold_api::ErrorCode::BadRequest,
                message: "this transport does not carry sessions".into(),
                lock: None,
            }))
        })
    }
    /// Says the node last used did not serve (no answer, or no speaker):
    /// the next call should try another.
    fn move_on(&self) {}
    /// How many endpoints calls may go to (a caller with a deadline gives
    /// each a share of it).
    fn endpoints(&self) -> usize {
        1
    }
}

/// A call on a session.
#[derive(Debug, Clone)]
pub enum SessionCall {
    /// `POST /v1/sessions/open`.
    Open(SessionOpenBody),
    /// `POST /v1/sessions/renew`.
    Renew(SessionBody),
    /// `POST /v1/sessions/close`.
    Close(SessionBody),
}

/// The API over HTTP, to whichever of several endpoints answers.
pub struct HttpTransport {
    endpoints: Vec<String>,
    current: AtomicUsize,
    http: reqwest::Client,
}

/// Endpoints that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// No endpoint was given.
    #[error("no endpoints given")]
    None,
    /// The HTTP client could not be built.
    #[error("http client: {0}")]
    Http(#[from] reqwest::Error),
    /// The token cannot go in a header (a control character, say).
    #[error("the token is not a valid header value")]
    Token,
    /// The CA given holds no certificate it could read.
    #[error("the TLS CA holds no PEM certificate")]
    NoCa,
    /// An endpoint that is no `host:port` or `http(s)://host:port`.
    #[error("{0:?} is not an endpoint (host:port, or http(s)://host:port): {1}")]
    Invalid(String, String),
}

/// How an [`HttpTransport`] talks to the nodes, beyond where.
#[derive(Clone, Default)]
pub struct HttpOptions {
    /// Sent with every request as `Authorization: Bearer <token>`, for a
    /// cluster run with `--acl`.
    pub token: Option<String>,
    /// The CA (PEM) the nodes' certificates are verified against, for a
    /// cluster run with TLS: the only roots trusted then, and endpoints
    /// given as bare `host:port` are reached with `https://`.
    pub tls_ca_pem: Option<Vec<u8>>,
}

/// Shows whether a token and a CA are set, never the token.
impl std::fmt::Debug for HttpOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpOptions")
            .field("token", &self.token.as_ref().map(|_| "<set>"))
            .field("tls_ca_pem", &self.tls_ca_pem.as_ref().map(Vec::len))
            .finish()
    }
}

/// `http`, trusting only the CA certificates in `pem` (PEM, one or more)
/// to verify the nodes it reaches over TLS.
pub fn trust_only(
    mut http: reqwest::ClientBuilder,
    pem: &[u8],
) -> Result<reqwest::ClientBuilder, EndpointError> {
    let roots = reqwest::Certificate::from_pem_bundle(pem)?;
    if roots.is_empty() {
        return Err(EndpointError::NoCa);
    }
    http = http.tls_built_in_root_certs(false);
    for root in roots {
        http = http.add_root_certificate(root);
    }
    Ok(http)
}

/// Where a process starts in its list of `n` endpoints: chosen at random,
/// so that clients given the same list do not all go to the first node (and
/// all lose it at once when it dies).
fn first_endpoint(n: usize) -> usize {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (random % n as u64) as usize
}

impl HttpTransport {
    /// A transport to `endpoints` (`http://host:port` or `host:port`),
    /// starting at a random one and moving to the next when one fails.
    pub fn new(
        endpoints: impl IntoIterator<Item = impl Into<String>>,
    ) -> Result<Self, EndpointError> {
        Self::authorized(endpoints, None)
    }

    /// As [`HttpTransport::new`], every request carrying `token` (if given)
    /// as `Authorization: Bearer <token>`, for a cluster run with `--acl`.
    pub fn authorized(
        endpoints: impl IntoIterator<Item = impl Into<String>>,
        token: Option<&str>,
    ) -> Result<Self, EndpointError> {
        let options = HttpOptions {
            token: token.map(str::to_string),
            ..HttpOptions::default()
        };
        Self::with_options(endpoints, &options)
    }

    /// As [`HttpTransport::new`], with `options` (a token, a TLS CA).
    pub fn with_options(
        endpoints: impl IntoIterator<Item = impl Into<String>>,
        options: &HttpOptions,
    ) -> Result<Self, EndpointError> {
        let scheme = match options.tls_ca_pem {
            Some(_) => "https://",
            None => "http://",
        };
        let endpoints: Vec<String> = endpoints
            .into_iter()
            .map(Into::into)
            .map(|e: String| {
                let e = e.trim().trim_end_matches('/').to_string();
                if e.contains("://") {
                    e
                } else {
                    format!("{scheme}{e}")
                }
            })
            .filter(|e| {
                e.split_once("://")
                    .is_some_and(|(_, rest)| !rest.is_empty())
            })
            .collect();
        if endpoints.is_empty() {
            return Err(EndpointError::None);
        }
        for endpoint in &endpoints {
            match reqwest::Url::parse(endpoint) {
                Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {}
                Ok(url) => {
                    let why = format!("{} has no host, or is not http(s)", url.as_str());
                    return Err(EndpointError::Invalid(endpoint.clone(), why));
                }
                Err(e) => return Err(EndpointError::Invalid(endpoint.clone(), e.to_string())),
            }
        }
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(token) = &options.token {
            let mut bearer = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| EndpointError::Token)?;
            bearer.set_sensitive(true);
            headers.insert(reqwest::header::AUTHORIZATION, bearer);
        }
        let mut http = reqwest::Client::builder()
            .default_headers(headers)
            .no_proxy()
            .tcp_nodelay(true)
            .pool_idle_timeout(leasehold_api::IDLE_KEPT)
            .connect_timeout(Duration::from_secs(2));
        if let Some(pem) = &options.tls_ca_pem {
            http = trust_only(http, pem)?;
        }
        Ok(HttpTransport {
            current: AtomicUsize::new(first_endpoint(endpoints.len())),
            endpoints,
            http: http.build()?,
        })
    }

    /// The endpoint calls go to now: its place in the rotation, and its URL.
    fn base(&self) -> (usize, &str) {
        let at = self.current.load(Ordering::Relaxed);
        (at, &self.endpoints[at % self.endpoints.len()])
    }

    /// Sends `request`, made for the endpoint at place `at`. A call the
    /// endpoint did not serve (no answer, or an error worth retrying
    /// elsewhere) moves the rotation on from that place only: callers
    /// failing at once move it once, not once each, and never back onto
    /// the endpoint that failed.
    async fn send<T: DeserializeOwned>(
        &self,
        (at, request): (usize, reqwest::RequestBuilder),
    ) -> Result<T, CallError> {
        let result = self.exchange(request).await;
        // A refusal about the call itself is an answer; no speaker, a
        // failed node, or one that does not know this client is not.
        let served = match &result {
            Err(CallError::NoAnswer(_) | CallError::NotSent(_)) => false,
            Err(CallError::Api(e)) => matches!(
                e.error,
                ErrorCode::Held | ErrorCode::NotHeld | ErrorCode::BadRequest | ErrorCode::TooLarge
            ),
            Ok(_) => true,
        };
        if !served {
            move_on_from(&self.current, at);
        }
        result
    }

    async fn exchange<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<T, CallError> {
        let response = request.send().await.map_err(|e| {
            if e.is_connect() {
                CallError::NotSent(request_failure(&e))
            } else {
                CallError::NoAnswer(request_failure(&e))
            }
        })?;
        let status = response.status();
        let ok = status.is_success();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| CallError::NoAnswer(e.to_string()))?;
        if ok {
            serde_json::from_slice(&bytes)
                .map_err(|e| CallError::NoAnswer(format!("unreadable answer: {e}")))
        } else {
            let body = ErrorBody::read(status.as_u16(), &bytes)
                .map_err(|e| CallError::NoAnswer(format!("unreadable error answer: {e}")))?;
            Err(CallError::Api(body))
        }
    }

    fn post<B: serde::Serialize>(
        &self,
        path: &str,
        body: &B,
        timeout: Duration,
    ) -> (usize, reqwest::RequestBuilder) {
        let (at, base) = self.base();
        let request = self
            .http
            .post(format!("{base}{path}"))
            .json(body)
            .timeout(timeout);
        (at, request)
    }

    fn get_url(&self, path: &str, timeout: Duration) -> (usize, reqwest::RequestBuilder) {
        let (at, base) = self.base();
        (at, self.http.get(format!("{base}{path}")).timeout(timeout))
    }
}

/// What went wrong with a request, named as an operator reads it first
/// ("connection refused", "TLS handshake failed", "timed out"), then the
/// error and its causes.
pub fn request_failure(e: &reqwest::Error) -> String {
    let mut chain = vec![e.to_string()];
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        chain.push(s.to_string());
        source = s.source();
    }
    let all = chain.join(": ");
    let lower = all.to_ascii_lowercase();
    let named = if lower.contains("connection refused") {
        Some("connection refused")
    } else if lower.contains("certificate") || lower.contains("tls") || lower.contains("handshake")
    {
        Some("TLS handshake failed")
    } else if e.is_timeout() {
        Some("timed out")
    } else if lower.contains("dns") || lower.contains("failed to lookup") {
        Some("the host name does not resolve")
    } else {
        None
    };
    match named {
        Some(named) => format!("{named} ({all})"),
        None => all,
    }
}

/// Moves the rotation `current` on from place `at`, unless another caller
/// that failed there moved it already.
fn move_on_from(current: &AtomicUsize, at: usize) {
    let _ = current.compare_exchange(at, at.wrapping_add(1), Ordering::Relaxed, Ordering::Relaxed);
}

/// Percent-encodes a name as one path segment.
fn segment(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Transport for HttpTransport {
    fn session(
        &self,
        call: SessionCall,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<SessionAnswer, CallError>> {
        Box::pin(async move {
            match call {
                SessionCall::Open(body) => {
                    self.send(self.post("/v1/sessions/open", &body, timeout))
                        .await
                }
                SessionCall::Renew(body) => {
                    self.send(self.post("/v1/sessions/renew", &body, timeout))
                        .await
                }
                SessionCall::Close(body) => {
                    let closed: leasehold_api::SessionClosed = self
                        .send(self.post("/v1/sessions/close", &body, timeout))
                        .await?;
                    Ok(SessionAnswer {
                        session: closed.session,
                        served_ms: 0,
                        held: None,
                    })
                }
            }
        })
    }

    fn acquire(
        &self,
        body: AcquireBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<(LockView, Duration), CallError>> {
        Box::pin(async move {
            let answer: LockAnswer = self
                .send(self.post("/v1/locks/acquire", &body, timeout))
                .await?;
            Ok((answer.lock, Duration::from_millis(answer.served_ms)))
        })
    }

    fn acquire_set(
        &self,
        body: AcquireBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<(Vec<LockView>, Duration), CallError>> {
        Box::pin(async move {
            let answer: LockAnswer = self
                .send(self.post("/v1/locks/acquire", &body, timeout))
                .await?;
            let served = Duration::from_millis(answer.served_ms);
            Ok((answer.locks.unwrap_or_else(|| vec![answer.lock]), served))
        })
    }

    fn release(
        &self,
        body: ReleaseBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<LockView, CallError>> {
        Box::pin(async move {
            let answer: LockAnswer = self
                .send(self.post("/v1/locks/release", &body, timeout))
                .await?;
            Ok(answer.lock)
        })
    }

    fn release_set(
        &self,
        body: ReleaseBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<SetReleased, CallError>> {
        Box::pin(async move {
            let answer: LockAnswer = self
                .send(self.post("/v1/locks/release", &body, timeout))
                .await?;
            let released = answer.locks.unwrap_or_else(|| vec![answer.lock]);
            Ok((released, answer.not_held.unwrap_or_default()))
        })
    }

    fn renew(
        &self,
        body: RenewBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<LockView, CallError>> {
        Box::pin(async move {
            let answer: LockAnswer = self
                .send(self.post("/v1/locks/renew", &body, timeout))
                .await?;
            Ok(answer.lock)
        })
    }

    fn get(
        &self,
        name: String,
        watch: Option<Watch>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Option<LockView>, CallError>> {
        Box::pin(async move {
            let mut path = format!("/v1/locks/{}", segment(&name));
            if let Some(watch) = watch {
                path.push_str(&format!(
                    "?wait_ms={}&after_fence={}",
                    watch.wait.as_millis(),
                    watch.after_fence
                ));
                if let Some(tag) = watch.after_data {
                    path.push_str(&format!("&after_data={tag}"));
                }
            }
            match self.send::<LockAnswer>(self.get_url(&path, timeout)).await {
                Ok(answer) => Ok(Some(answer.lock)),
                Err(CallError::Api(e)) if e.error == leasehold_api::ErrorCode::NotHeld => Ok(None),
                Err(e) => Err(e),
            }
        })
    }

    fn list(
        &self,
        prefix: String,
        limit: usize,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Vec<LockView>, CallError>> {
        Box::pin(async move {
            let path = format!("/v1/locks?prefix={}&limit={limit}", segment(&prefix));
            let answer: LocksAnswer = self.send(self.get_url(&path, timeout)).await?;
            Ok(answer.locks)
        })
    }

    fn cluster(&self, timeout: Duration) -> BoxFuture<'_, Result<ClusterAnswer, CallError>> {
        Box::pin(async move { self.send(self.get_url("/v1/cluster", timeout)).await })
    }

    /// Nothing: a call the endpoint did not serve has moved on already,
    /// from the place that failed (`send`).
    fn move_on(&self) {}

    fn endpoints(&self) -> usize {
        self.endpoints.len()
    }
}

#[cfg(test)]
mod tests {
    use super::{first_endpoint, move_on_from};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Callers that fail on one endpoint at once move on once: with two
    /// endpoints, moving once per failure would land back on the dead one.
    #[test]
    fn concurrent_failures_move_on_once() {
        let current = AtomicUsize::new(4);
        move_on_from(&current, 4);
        move_on_from(&current, 4);
        assert_eq!(current.load(Ordering::Relaxed), 5);
        move_on_from(&current, 5);
        assert_eq!(current.load(Ordering::Relaxed), 6);
    }

    #[test]
    fn clients_start_at_every_endpoint() {
        let mut seen = [0usize; 3];
        for _ in 0..300 {
            seen[first_endpoint(3)] += 1;
        }
        assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
        assert_eq!(first_endpoint(1), 0);
    }
}
