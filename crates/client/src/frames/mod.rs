//! The API over the binary transport (docs/design.md, "The binary
//! transport: frames"): every call a frame on one long-lived connection
//! per node, many in flight at once; a node that does not serve frames
//! is called over HTTP instead, for a while.

mod connection;
mod dial;
#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use leasehold_api::wire::{Answer, Message, Request};
use tokio::time::Instant;

use crate::calls::{over_exchange, Exchange};
use crate::endpoints::{bases, EndpointError, Rotation};
use crate::http::{Http, HttpOptions};
use crate::transport::CallError;
use connection::{Connection, Failure, Limits};
use dial::{DialError, Dialer, Target};

/// How long an endpoint that does not serve frames is called over HTTP
/// before frames are tried on it again.
const FALLBACK_FOR: Duration = Duration::from_secs(60);

/// The API over frames, to whichever of several endpoints answers, as
/// [`crate::HttpTransport`] moves through them.
///
/// Each endpoint gets one connection, opened at its first call (TCP with
/// `TCP_NODELAY`, 2 s to connect; under TLS, ALPN `leasehold` offered
/// beside `http/1.1`) and kept while calls come: up to 1024 calls in
/// flight on it at once (more wait), answered in any order, the frames of
/// calls made together written together. A connection with no call for
/// [`leasehold_api::IDLE_KEPT`] is closed (before the node would close
/// it), and the next call opens another; one that breaks fails the calls
/// on it (no answer, or not sent if their frames never left), and the
/// next call opens another. With a token, each connection sends it first,
/// in a frame of its own; a node that refuses it fails the calls on the
/// connection as it refused it (`unauthorized`).
///
/// **Fallback.** A node that does not serve frames (an older node, or one
/// with the binary transport off) answers the preamble as HTTP (`400`)
/// and closes, closes without a preamble, or under TLS chooses
/// `http/1.1`: the call then goes to it over HTTP, with the same options,
/// and so does every call to that node for the next 60 s; then frames
/// are tried again. A call never fails because of the fallback itself.
/// [`FrameTransport::without_fallback`] fails such calls instead. An
/// endpoint with a path after `host:port` (a proxy that routes by path)
/// is always called over HTTP.
pub struct FrameTransport {
    endpoints: Rotation<Endpoint>,
    http: Http,
    dialer: Dialer,
    limits: Limits,
    /// How long an endpoint that does not serve frames is called over
    /// HTTP; `None`: never, its calls fail.
    fallback_for: Option<Duration>,
}

/// How the transport behaves, beyond its options: what tests shorten.
#[derive(Debug, Clone)]
pub(crate) struct Tuning {
    pub(crate) limits: Limits,
    pub(crate) fallback_for: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) handshake_timeout: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            limits: Limits {
                idle: leasehold_api::IDLE_KEPT,
                max_in_flight: 1024,
            },
            fallback_for: FALLBACK_FOR,
            connect_timeout: Duration::from_secs(2),
            handshake_timeout: Duration::from_secs(5),
        }
    }
}

/// One node: its URL, how frames reach it, its connection.
struct Endpoint {
    /// Its base URL, for HTTP and for messages.
    base: String,
    /// `None`: frames cannot reach it, it is called over HTTP.
    target: Option<Target>,
    slot: Mutex<Slot>,
    /// Held while a connection is opened, so that the calls that find
    /// none open one between them: the last attempt's failure.
    dialing: tokio::sync::Mutex<Option<DialError>>,
}

/// What an endpoint's calls go through now.
#[derive(Default)]
struct Slot {
    connection: Option<Arc<Connection>>,
    /// Calls go over HTTP until then.
    http_until: Option<Instant>,
    /// Connections tried so far.
    attempts: u64,
}

/// How one call reaches its endpoint.
enum Route {
    Http,
    Frames(Arc<Connection>),
    Dial { attempts: u64 },
}

impl Endpoint {
    fn slot(&self) -> MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn route(&self) -> Route {
        if self.target.is_none() {
            return Route::Http;
        }
        let slot = self.slot();
        if slot.http_until.is_some_and(|until| Instant::now() < until) {
            return Route::Http;
        }
        match &slot.connection {
            Some(connection) if connection.is_open() => Route::Frames(Arc::clone(connection)),
            _ => Route::Dial {
                attempts: slot.attempts,
            },
        }
    }
}

impl FrameTransport {
    /// A transport to `endpoints` (`http://host:port` or `host:port`),
    /// starting at a random one and moving to the next when one fails;
    /// calls a node that does not serve frames over HTTP.
    pub fn new(
        endpoints: impl IntoIterator<Item = impl Into<String>>,
    ) -> Result<Self, EndpointError> {
        Self::with_options(endpoints, &HttpOptions::default())
    }

    /// As [`FrameTransport::new`], with `options` (a token, a TLS CA), on
    /// frames and on the HTTP of the fallback alike.
    pub fn with_options(
        endpoints: impl IntoIterator<Item = impl Into<String>>,
        options: &HttpOptions,
    ) -> Result<Self, EndpointError> {
        let bases = bases(endpoints, options.tls_ca_pem.is_some())?;
        let tls = bases.iter().any(|b| b.starts_with("https://"));
        let tls = match tls {
            true => Some(dial::tls_config(options.tls_ca_pem.as_deref())?),
            false => None,
        };
        let tuning = Tuning::default();
        let endpoints = bases
            .into_iter()
            .map(|base| Endpoint {
                target: Target::of(&base),
                base,
                slot: Mutex::default(),
                dialing: tokio::sync::Mutex::new(None),
            })
            .collect();
        Ok(FrameTransport {
            endpoints: Rotation::new(endpoints),
            http: Http::new(options)?,
            dialer: Dialer {
                token: options.token.clone(),
                tls,
                connect_timeout: tuning.connect_timeout,
                handshake_timeout: tuning.handshake_timeout,
            },
            limits: tuning.limits,
            fallback_for: Some(tuning.fallback_for),
        })
    }

    /// This transport without the fallback to HTTP: a call to a node that
    /// does not serve frames fails, not sent ([`CallError::NotSent`]), and
    /// an endpoint with a path is refused here.
    pub fn without_fallback(mut self) -> Result<Self, EndpointError> {
        for endpoint in self.endpoints.iter() {
            if endpoint.target.is_none() {
                return Err(EndpointError::Invalid(
                    endpoint.base.clone(),
                    "frames reach host:port only, with no path".into(),
                ));
            }
        }
        self.fallback_for = None;
        Ok(self)
    }

    /// This transport, tuned (tests shorten its times).
    #[cfg(test)]
    pub(crate) fn tuned(mut self, tuning: Tuning) -> Self {
        self.dialer.connect_timeout = tuning.connect_timeout;
        self.dialer.handshake_timeout = tuning.handshake_timeout;
        self.limits = tuning.limits;
        if self.fallback_for.is_some() {
            self.fallback_for = Some(tuning.fallback_for);
        }
        self
    }

    /// The answer to `request` from `endpoint`, by `timeout`.
    async fn exchange_with(
        &self,
        endpoint: &Endpoint,
        request: Request,
        timeout: Duration,
    ) -> Result<Answer, CallError> {
        let deadline = Instant::now() + timeout;
        // Twice at most: a connection that closed (idle, or broken) before
        // the call was sent on it is replaced once.
        for _ in 0..2 {
            let connection = match endpoint.route() {
                Route::Http => return self.over_http(endpoint, request, deadline).await,
                Route::Frames(connection) => connection,
                Route::Dial { attempts } => {
                    let dialed = self.connection(endpoint, attempts);
                    match tokio::time::timeout_at(deadline, dialed).await {
                        Ok(Ok(connection)) => connection,
                        Ok(Err(DialError::Failed(e))) => return Err(e),
                        Ok(Err(DialError::NotBinary(why))) => {
                            let Some(fallback_for) = self.fallback_for else {
                                return Err(CallError::NotSent(format!(
                                    "{} does not serve the binary transport ({why})",
                                    endpoint.base
                                )));
                            };
                            self.fall_back(endpoint, fallback_for, &why);
                            return self.over_http(endpoint, request, deadline).await;
                        }
                        Err(_) => {
                            return Err(CallError::NotSent(format!(
                                "timed out connecting to {}",
                                endpoint.base
                            )))
                        }
                    }
                }
            };
            match connection.call(&request, deadline).await {
                Ok(answer) => return settled(&request, answer),
                Err(Failure::Call(e)) => return Err(e),
                Err(Failure::Closed) => continue,
            }
        }
        Err(CallError::NotSent(format!(
            "the connections to {} closed before the call could be sent",
            endpoint.base
        )))
    }

    /// The call over HTTP, within what is left until `deadline`.
    async fn over_http(
        &self,
        endpoint: &Endpoint,
        request: Request,
        deadline: Instant,
    ) -> Result<Answer, CallError> {
        let left = deadline.saturating_duration_since(Instant::now());
        self.http.exchange(&endpoint.base, request, left).await
    }

    /// Calls `endpoint` over HTTP for `fallback_for`.
    fn fall_back(&self, endpoint: &Endpoint, fallback_for: Duration, why: &str) {
        let mut slot = endpoint.slot();
        let until = Instant::now() + fallback_for;
        if slot.http_until.is_none_or(|at| at < until) {
            slot.http_until = Some(until);
            tracing::debug!(
                endpoint = %endpoint.base,
                why,
                "the node does not serve frames: calling it over HTTP for {fallback_for:?}"
            );
        }
    }

    /// The open connection to `endpoint`, opened now if need be: the one
    /// another call opened meanwhile, or its failure if another call
    /// tried since the caller saw `attempts`.
    async fn connection(
        &self,
        endpoint: &Endpoint,
        attempts: u64,
    ) -> Result<Arc<Connection>, DialError> {
        let mut last_failure = endpoint.dialing.lock().await;
        {
            let slot = endpoint.slot();
            if let Some(connection) = slot.connection.as_ref().filter(|c| c.is_open()) {
                return Ok(Arc::clone(connection));
            }
            if let Some(e) = last_failure.as_ref().filter(|_| slot.attempts != attempts) {
                return Err(e.clone());
            }
        }
        let Some(target) = &endpoint.target else {
            return Err(DialError::NotBinary("the endpoint has a path".into()));
        };
        let dialed = self.dialer.dial(target).await;
        let mut slot = endpoint.slot();
        slot.attempts += 1;
        match dialed {
            Ok(dialed) => {
                let node = format!("{}:{}", target.host, target.port);
                let connection = Arc::new(Connection::start(dialed, node, &self.limits));
                slot.connection = Some(Arc::clone(&connection));
                *last_failure = None;
                Ok(connection)
            }
            Err(e) => {
                slot.connection = None;
                *last_failure = Some(e.clone());
                Err(e)
            }
        }
    }
}

/// A node's answer to `request`: a refusal as [`CallError::Api`], an
/// answer of the wrong kind as no answer (the node is not one this client
/// can follow).
fn settled(request: &Request, answer: Answer) -> Result<Answer, CallError> {
    match answer {
        Answer::Error(body) => Err(CallError::Api(body)),
        answer if request.answered_by(&answer) => Ok(answer),
        answer => Err(CallError::NoAnswer(format!(
            "the node answered a request of kind {:#04x} with kind {:#04x}",
            request.kind(),
            answer.kind()
        ))),
    }
}

impl Exchange for FrameTransport {
    async fn exchange(&self, request: Request, timeout: Duration) -> Result<Answer, CallError> {
        let (at, endpoint) = self.endpoints.current();
        let result = self.exchange_with(endpoint, request, timeout).await;
        self.endpoints.answered(at, &result);
        result
    }

    fn endpoint_count(&self) -> usize {
        self.endpoints.len()
    }
}

over_exchange!(FrameTransport);
