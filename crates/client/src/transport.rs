//! How the client reaches the cluster: over HTTP to a list of endpoints, or
//! in-process to an embedded node. Both answer the same calls.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leasehold_api::{
    AcquireBody, ClusterAnswer, ErrorBody, LockAnswer, LockView, LocksAnswer, ReleaseBody,
    RenewBody,
};
use serde::de::DeserializeOwned;

/// A boxed future, as the transport's calls return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A call that failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// A node answered with an error.
    #[error("{}: {}", .0.error, .0.message)]
    Api(ErrorBody),
    /// No node answered (unreachable, timed out): the outcome is unknown.
    #[error("no answer: {0}")]
    NoAnswer(String),
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
    /// `POST /v1/locks/release`.
    fn release(
        &self,
        body: ReleaseBody,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<LockView, CallError>>;
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
        watch: Option<(Duration, u64)>,
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
    /// Says the node last used did not serve (no answer, or no speaker):
    /// the next call should try another.
    fn move_on(&self) {}
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
        let endpoints: Vec<String> = endpoints
            .into_iter()
            .map(Into::into)
            .map(|e: String| {
                let e = e.trim().trim_end_matches('/').to_string();
                if e.contains("://") {
                    e
                } else {
                    format!("http://{e}")
                }
            })
            .filter(|e| e.len() > "http://".len())
            .collect();
        if endpoints.is_empty() {
            return Err(EndpointError::None);
        }
        let http = reqwest::Client::builder()
            .no_proxy()
            .tcp_nodelay(true)
            .connect_timeout(Duration::from_secs(2))
            .build()?;
        Ok(HttpTransport {
            current: AtomicUsize::new(first_endpoint(endpoints.len())),
            endpoints,
            http,
        })
    }

    fn base(&self) -> &str {
        &self.endpoints[self.current.load(Ordering::Relaxed) % self.endpoints.len()]
    }

    async fn send<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<T, CallError> {
        // Moving to another node is the caller's choice (`move_on`).
        let response = request
            .send()
            .await
            .map_err(|e| CallError::NoAnswer(e.to_string()))?;
        let ok = response.status().is_success();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| CallError::NoAnswer(e.to_string()))?;
        if ok {
            serde_json::from_slice(&bytes)
                .map_err(|e| CallError::NoAnswer(format!("unreadable answer: {e}")))
        } else {
            let body: ErrorBody = serde_json::from_slice(&bytes)
                .map_err(|e| CallError::NoAnswer(format!("unreadable error answer: {e}")))?;
            Err(CallError::Api(body))
        }
    }

    fn post<B: serde::Serialize>(
        &self,
        path: &str,
        body: &B,
        timeout: Duration,
    ) -> reqwest::RequestBuilder {
        self.http
            .post(format!("{}{path}", self.base()))
            .json(body)
            .timeout(timeout)
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

impl Transport for HttpTransport {
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
        watch: Option<(Duration, u64)>,
        timeout: Duration,
    ) -> BoxFuture<'_, Result<Option<LockView>, CallError>> {
        Box::pin(async move {
            let mut url = format!("{}/v1/locks/{}", self.base(), segment(&name));
            if let Some((wait, after)) = watch {
                url.push_str(&format!(
                    "?wait_ms={}&after_fence={after}",
                    wait.as_millis()
                ));
            }
            match self
                .send::<LockAnswer>(self.http.get(url).timeout(timeout))
                .await
            {
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
            let url = format!(
                "{}/v1/locks?prefix={}&limit={limit}",
                self.base(),
                segment(&prefix)
            );
            let answer: LocksAnswer = self.send(self.http.get(url).timeout(timeout)).await?;
            Ok(answer.locks)
        })
    }

    fn cluster(&self, timeout: Duration) -> BoxFuture<'_, Result<ClusterAnswer, CallError>> {
        Box::pin(async move {
            let url = format!("{}/v1/cluster", self.base());
            self.send(self.http.get(url).timeout(timeout)).await
        })
    }

    fn move_on(&self) {
        self.current.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::first_endpoint;

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
