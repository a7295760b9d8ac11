//! The API over HTTP/1.1 and JSON: [`HttpTransport`] to a list of
//! endpoints, and the exchange of one request with one endpoint that it
//! (and [`crate::FrameTransport`]'s fallback) makes.

use std::time::Duration;

use leasehold_api::wire::{Answer, Request, View};
use leasehold_api::ErrorBody;
use serde::de::DeserializeOwned;

use crate::calls::{over_exchange, Exchange};
use crate::endpoints::{bases, EndpointError, Rotation};
use crate::transport::CallError;

/// How a transport talks to the nodes, beyond where: over HTTP
/// ([`HttpTransport`]) or frames ([`crate::FrameTransport`]) alike.
#[derive(Clone, Default)]
pub struct HttpOptions {
    /// Sent with every request as `Authorization: Bearer <token>` (over
    /// frames, once per connection, as its first frame), for a cluster run
    /// with `--acl`.
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

/// The API over HTTP, to whichever of several endpoints answers.
pub struct HttpTransport {
    endpoints: Rotation<String>,
    http: Http,
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
        let bases = bases(endpoints, options.tls_ca_pem.is_some())?;
        Ok(HttpTransport {
            endpoints: Rotation::new(bases),
            http: Http::new(options)?,
        })
    }
}

impl Exchange for HttpTransport {
    async fn exchange(&self, request: Request, timeout: Duration) -> Result<Answer, CallError> {
        let (at, base) = self.endpoints.current();
        let result = self.http.exchange(base, request, timeout).await;
        self.endpoints.answered(at, &result);
        result
    }

    fn endpoint_count(&self) -> usize {
        self.endpoints.len()
    }
}

over_exchange!(HttpTransport);

/// One HTTP client (its connections pooled) for every endpoint: the
/// exchange of a request with the endpoint named.
pub(crate) struct Http {
    client: reqwest::Client,
}

impl Http {
    /// A client with `options`' token on every request, trusting only
    /// their CA if given.
    pub(crate) fn new(options: &HttpOptions) -> Result<Http, EndpointError> {
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
        Ok(Http {
            client: http.build()?,
        })
    }

    /// `request` sent to the node at `base` as its route, and the JSON
    /// answered read back as the request's kind of answer.
    pub(crate) async fn exchange(
        &self,
        base: &str,
        request: Request,
        timeout: Duration,
    ) -> Result<Answer, CallError> {
        let call = route(&self.client, base, &request)?.timeout(timeout);
        let bytes = send(call).await?;
        let answer = match request {
            Request::Acquire(_) | Request::Release(_) | Request::Renew(_) | Request::Get(_) => {
                Answer::Lock(json(&bytes)?)
            }
            Request::List(_) => Answer::Locks(json(&bytes)?),
            Request::OpenSession(_) | Request::RenewSession(_) => Answer::Session(json(&bytes)?),
            Request::CloseSession(_) => Answer::SessionClosed(json(&bytes)?),
            Request::Cluster(_) | Request::AddMember(_) | Request::RemoveMember(_) => {
                Answer::Cluster(json(&bytes)?)
            }
            Request::History(_) => Answer::History(json(&bytes)?),
            Request::Token(_) | Request::Ping => Answer::Done,
            Request::Peer(_) => {
                return Err(CallError::Api(ErrorBody::new(
                    leasehold_api::ErrorCode::BadRequest,
                    "a member's call has no client's HTTP route",
                )))
            }
        };
        Ok(answer)
    }
}

/// The HTTP request of `request` to the node at `base`: its route, its
/// query, its JSON body. The connection's own frames (a token, a ping)
/// have no route.
fn route(
    http: &reqwest::Client,
    base: &str,
    request: &Request,
) -> Result<reqwest::RequestBuilder, CallError> {
    let post = |path: &str| http.post(format!("{base}{path}"));
    let get = |path: &str| http.get(format!("{base}{path}"));
    let view = |view: &View| match view {
        View::Own => "",
        View::Speaker => "?view=speaker",
    };
    Ok(match request {
        Request::Acquire(body) => post("/v1/locks/acquire").json(body),
        Request::Release(body) => post("/v1/locks/release").json(body),
        Request::Renew(body) => post("/v1/locks/renew").json(body),
        Request::OpenSession(body) => post("/v1/sessions/open").json(body),
        Request::RenewSession(body) => post("/v1/sessions/renew").json(body),
        Request::CloseSession(body) => post("/v1/sessions/close").json(body),
        Request::Get(query) => {
            let mut path = format!("/v1/locks/{}", segment(&query.name));
            if let Some(watch) = &query.watch {
                path.push_str(&format!(
                    "?wait_ms={}&after_fence={}",
                    watch.wait.as_millis(),
                    watch.after_fence
                ));
                if let Some(tag) = watch.after_data {
                    path.push_str(&format!("&after_data={tag}"));
                }
            }
            get(&path)
        }
        Request::List(query) => {
            let mut params = Vec::new();
            if let Some(prefix) = &query.prefix {
                params.push(format!("prefix={}", segment(prefix)));
            }
            if let Some(limit) = query.limit {
                params.push(format!("limit={limit}"));
            }
            get(&format!("/v1/locks?{}", params.join("&")))
        }
        Request::Cluster(v) => get(&format!("/v1/cluster{}", view(v))),
        Request::History(v) => get(&format!("/v1/cluster/history{}", view(v))),
        Request::AddMember(body) => post("/v1/cluster/members").json(body),
        Request::RemoveMember(id) => http.delete(format!("{base}/v1/cluster/members/{id}")),
        Request::Token(_) | Request::Ping | Request::Peer(_) => {
            return Err(CallError::Api(ErrorBody::new(
                leasehold_api::ErrorCode::BadRequest,
                "a connection's own frame, or a member's call, has no client's HTTP route",
            )))
        }
    })
}

/// The body of a successful answer to `request`; a failure's
/// [`ErrorBody`] as [`CallError::Api`].
async fn send(request: reqwest::RequestBuilder) -> Result<bytes::Bytes, CallError> {
    let response = request.send().await.map_err(|e| {
        if e.is_connect() {
            CallError::NotSent(request_failure(&e))
        } else {
            CallError::NoAnswer(request_failure(&e))
        }
    })?;
    let status = response.status();
    let bytes = response
        .bytes()
        .await
        .map_err(|e| CallError::NoAnswer(e.to_string()))?;
    if status.is_success() {
        return Ok(bytes);
    }
    let body = ErrorBody::read(status.as_u16(), &bytes)
        .map_err(|e| CallError::NoAnswer(format!("unreadable error answer: {e}")))?;
    Err(CallError::Api(body))
}

/// A successful answer's JSON.
fn json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, CallError> {
    serde_json::from_slice(bytes)
        .map_err(|e| CallError::NoAnswer(format!("unreadable answer: {e}")))
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
    named_failure(&chain.join(": "), e.is_timeout())
}

/// `all`, the text of a failure and its causes, with what it is named
/// first when it is one an operator knows by name.
pub(crate) fn named_failure(all: &str, timed_out: bool) -> String {
    let lower = all.to_ascii_lowercase();
    let named = if lower.contains("connection refused") {
        Some("connection refused")
    } else if lower.contains("certificate") || lower.contains("tls") || lower.contains("handshake")
    {
        Some("TLS handshake failed")
    } else if timed_out {
        Some("timed out")
    } else if lower.contains("dns") || lower.contains("failed to lookup") {
        Some("the host name does not resolve")
    } else {
        None
    };
    match named {
        Some(named) => format!("{named} ({all})"),
        None => all.to_string(),
    }
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
