//! Which node a call goes to: the endpoints given, read once, and the
//! rotation through them (where a process starts, and when a call moves
//! it on). Every transport to a list of nodes ([`crate::HttpTransport`],
//! [`crate::FrameTransport`]) follows these rules, from here.

use std::sync::atomic::{AtomicUsize, Ordering};

use leasehold_api::ErrorCode;

use crate::transport::CallError;

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

/// `endpoints` as the bases of their URLs (`http://host:port`, no
/// trailing `/`): a bare `host:port` takes `https://` when `tls`, else
/// `http://`. Blank ones are left out; none left, or one that is no
/// http(s) URL with a host, is an error.
pub(crate) fn bases(
    endpoints: impl IntoIterator<Item = impl Into<String>>,
    tls: bool,
) -> Result<Vec<String>, EndpointError> {
    let scheme = if tls { "https://" } else { "http://" };
    let bases: Vec<String> = endpoints
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
    if bases.is_empty() {
        return Err(EndpointError::None);
    }
    for base in &bases {
        match reqwest::Url::parse(base) {
            Ok(url) if matches!(url.scheme(), "http" | "https") && url.host().is_some() => {}
            Ok(url) => {
                let why = format!("{} has no host, or is not http(s)", url.as_str());
                return Err(EndpointError::Invalid(base.clone(), why));
            }
            Err(e) => return Err(EndpointError::Invalid(base.clone(), e.to_string())),
        }
    }
    Ok(bases)
}

/// The endpoints calls go to, one at a time: the current one until a call
/// it did not serve moves the rotation on to the next (wrapping around).
pub(crate) struct Rotation<E> {
    endpoints: Vec<E>,
    current: AtomicUsize,
}

impl<E> Rotation<E> {
    /// A rotation through `endpoints` (at least one), starting at one
    /// chosen at random.
    pub(crate) fn new(endpoints: Vec<E>) -> Self {
        assert!(!endpoints.is_empty(), "a rotation needs an endpoint");
        Rotation {
            current: AtomicUsize::new(first_endpoint(endpoints.len())),
            endpoints,
        }
    }

    /// The endpoint calls go to now, and its place in the rotation (to
    /// give [`Rotation::answered`]).
    pub(crate) fn current(&self) -> (usize, &E) {
        let at = self.current.load(Ordering::Relaxed);
        (at, &self.endpoints[at % self.endpoints.len()])
    }

    /// Every endpoint, in the order given.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &E> {
        self.endpoints.iter()
    }

    /// How many endpoints there are.
    pub(crate) fn len(&self) -> usize {
        self.endpoints.len()
    }

    /// Says how the call made to the endpoint at place `at` ended: one it
    /// did not [serve](served) moves the rotation on from that place only,
    /// so that callers failing at once move it once, not once each, and
    /// never back onto the endpoint that failed.
    pub(crate) fn answered<T>(&self, at: usize, result: &Result<T, CallError>) {
        if !served(result) {
            move_on_from(&self.current, at);
        }
    }
}

/// Whether the endpoint served a call that ended so: a refusal about the
/// call itself is an answer; no answer, no speaker, a failed node, or one
/// that does not know this client is not.
pub(crate) fn served<T>(result: &Result<T, CallError>) -> bool {
    match result {
        Err(CallError::NoAnswer(_) | CallError::NotSent(_)) => false,
        Err(CallError::Api(e)) => matches!(
            e.error,
            ErrorCode::Held | ErrorCode::NotHeld | ErrorCode::BadRequest | ErrorCode::TooLarge
        ),
        Ok(_) => true,
    }
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

/// Moves the rotation `current` on from place `at`, unless another caller
/// that failed there moved it already.
fn move_on_from(current: &AtomicUsize, at: usize) {
    let _ = current.compare_exchange(at, at.wrapping_add(1), Ordering::Relaxed, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_api::ErrorBody;

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

    /// A refusal of the call stays; no answer, no speaker or a refused
    /// token moves on.
    #[test]
    fn only_calls_not_served_move_on() {
        let rotation = Rotation::new(vec!["a", "b"]);
        let (at, first) = rotation.current();
        let api = |code| Err::<(), _>(CallError::Api(ErrorBody::new(code, "m")));
        for stays in [Ok(()), api(ErrorCode::Held), api(ErrorCode::BadRequest)] {
            rotation.answered(at, &stays);
            assert_eq!(rotation.current().1, first);
        }
        rotation.answered(at, &api(ErrorCode::Unauthorized));
        assert_ne!(rotation.current().1, first);
        let (at, second) = rotation.current();
        rotation.answered(at, &Err::<(), _>(CallError::NoAnswer("timed out".into())));
        assert_ne!(rotation.current().1, second);
    }

    #[test]
    fn bare_endpoints_take_the_scheme_and_bad_ones_are_named() {
        assert_eq!(
            bases(["127.0.0.1:1", " http://h:2/ ", ""], false).unwrap(),
            ["http://127.0.0.1:1", "http://h:2"]
        );
        assert_eq!(bases(["h:3"], true).unwrap(), ["https://h:3"]);
        assert!(matches!(bases([""; 0], false), Err(EndpointError::None)));
        assert!(matches!(
            bases(["ftp://h:1"], false),
            Err(EndpointError::Invalid(..))
        ));
    }
}
