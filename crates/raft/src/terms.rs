//! What a member runs with, stamped on every peer message beside its
//! identity: the fewest copies a grant of its may still have, its longest
//! lease and its leader lease. Another member takes it into its own
//! counts (a rebuild then counts on the fewest copies any member made
//! within a lease, not on what it makes now).
//!
//! The header is `x-leasehold-terms: copies=2; max-lease-ms=600000;
//! leader-lease-ms=300`. Keys a reader does not know are skipped, and a
//! message without the header (a build from before it) says nothing: a
//! newer build may add a key, an older one ignores it.

use std::fmt;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue};

use crate::ids::NodeId;

/// The header carrying a member's [`Terms`].
pub const TERMS_HEADER: &str = "x-leasehold-terms";

/// What a member runs with, as it tells the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Terms {
    /// The fewest copies a grant of this member's may still have (`None`:
    /// it made none that may still run).
    pub copies: Option<usize>,
    /// Its longest lease (`--max-lease`).
    pub max_lease: Duration,
    /// Its leader lease (`--election-timeout-max`).
    pub leader_lease: Duration,
}

impl Terms {
    /// The header's text.
    fn text(&self) -> String {
        let copies = self.copies.map(|c| format!("copies={c}; "));
        format!(
            "{}max-lease-ms={}; leader-lease-ms={}",
            copies.unwrap_or_default(),
            self.max_lease.as_millis(),
            self.leader_lease.as_millis()
        )
    }

    /// The terms in `headers`, if they carry both leases; unknown keys are
    /// skipped, and `copies` is optional (a count of zero is none).
    pub fn read(headers: &HeaderMap) -> Option<Terms> {
        let text = headers.get(TERMS_HEADER)?.to_str().ok()?;
        let (mut copies, mut max_lease, mut leader_lease) = (None, None, None);
        for pair in text.split(';') {
            let Some((key, value)) = pair.trim().split_once('=') else {
                continue;
            };
            let Ok(value) = value.trim().parse::<u64>() else {
                continue;
            };
            match key.trim() {
                "copies" => copies = usize::try_from(value).ok(),
                "max-lease-ms" => max_lease = Some(Duration::from_millis(value)),
                "leader-lease-ms" => leader_lease = Some(Duration::from_millis(value)),
                _ => {}
            }
        }
        Some(Terms {
            copies: copies.filter(|c| *c > 0),
            max_lease: max_lease?,
            leader_lease: leader_lease?,
        })
    }
}

/// Where what other members say goes: the member, its terms, and whether
/// they came on an answer (a member's current process, answering now)
/// rather than on a request (which may have waited in a queue since the
/// member restarted with other terms).
type Heard = Box<dyn Fn(NodeId, Terms, bool) + Send + Sync>;

/// This member's terms as it stamps them, and where the terms other
/// members stamp go (the node's protocol state).
#[derive(Default)]
pub struct TermsBook {
    ours: Mutex<Option<(Terms, HeaderValue)>>,
    heard: OnceLock<Heard>,
}

impl fmt::Debug for TermsBook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TermsBook")
            .field("ours", &self.ours().map(|t| t.text()))
            .finish_non_exhaustive()
    }
}

impl TermsBook {
    /// This member runs with `terms` from now on.
    pub fn set(&self, terms: Terms) {
        let value = HeaderValue::from_str(&terms.text()).expect("digits and ASCII keys");
        *self.ours.lock().unwrap_or_else(|p| p.into_inner()) = Some((terms, value));
    }

    /// This member's grants may have as few as `copies` copies now; its
    /// other terms as they were. Nothing before [`TermsBook::set`].
    pub fn set_copies(&self, copies: Option<usize>) {
        if let Some(mut terms) = self.ours() {
            if terms.copies != copies {
                terms.copies = copies;
                self.set(terms);
            }
        }
    }

    /// This member's terms, once set.
    pub fn ours(&self) -> Option<Terms> {
        self.ours
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(t, _)| *t)
    }

    /// Sends what other members say to `heard` from now on (once).
    pub fn on_heard(&self, heard: Heard) {
        let _ = self.heard.set(heard);
    }

    /// Writes this member's terms into `headers`, once set.
    pub fn write(&self, headers: &mut HeaderMap) {
        let ours = self.ours.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, value)) = ours.as_ref() {
            headers.insert(TERMS_HEADER, value.clone());
        }
    }

    /// Takes the terms `headers` carry from member `from`, an admitted
    /// member, on an answer (`answer`) or a request.
    pub fn read(&self, from: NodeId, headers: &HeaderMap, answer: bool) {
        if let (Some(terms), Some(heard)) = (Terms::read(headers), self.heard.get()) {
            heard(from, terms, answer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn terms() -> Terms {
        Terms {
            copies: Some(2),
            max_lease: Duration::from_secs(600),
            leader_lease: Duration::from_millis(300),
        }
    }

    #[test]
    fn terms_round_trip_and_skip_what_they_do_not_know() {
        let book = TermsBook::default();
        let mut headers = HeaderMap::new();
        book.write(&mut headers);
        assert!(headers.is_empty(), "nothing before it is set");
        book.set(terms());
        book.write(&mut headers);
        assert_eq!(
            headers[TERMS_HEADER],
            "copies=2; max-lease-ms=600000; leader-lease-ms=300"
        );
        assert_eq!(Terms::read(&headers), Some(terms()));
        book.set_copies(Some(1));
        book.write(&mut headers);
        assert_eq!(Terms::read(&headers).unwrap().copies, Some(1));
        book.set_copies(None);
        book.write(&mut headers);
        assert_eq!(
            headers[TERMS_HEADER],
            "max-lease-ms=600000; leader-lease-ms=300"
        );
        assert_eq!(Terms::read(&headers).unwrap().copies, None);

        let newer = "leader-lease-ms=300;copies=3; future=x; max-lease-ms=1000; more=7";
        headers.insert(TERMS_HEADER, HeaderValue::from_static(newer));
        assert_eq!(
            Terms::read(&headers),
            Some(Terms {
                copies: Some(3),
                max_lease: Duration::from_secs(1),
                leader_lease: Duration::from_millis(300),
            })
        );
        headers.insert(
            TERMS_HEADER,
            HeaderValue::from_static("copies=0; max-lease-ms=1; leader-lease-ms=1"),
        );
        assert_eq!(Terms::read(&headers).unwrap().copies, None);
        for bad in ["copies=2", "copies=2; max-lease-ms=1", "x"] {
            headers.insert(TERMS_HEADER, HeaderValue::from_static(bad));
            assert_eq!(Terms::read(&headers), None, "{bad}");
        }
    }

    #[test]
    fn what_a_member_says_goes_where_the_node_asked() {
        let book = TermsBook::default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        book.on_heard(Box::new(move |from, terms, _| {
            sink.lock().unwrap().push((from, terms))
        }));
        let mut headers = HeaderMap::new();
        book.read(2, &headers, true);
        headers.insert(
            TERMS_HEADER,
            HeaderValue::from_static("copies=1; max-lease-ms=20000; leader-lease-ms=300"),
        );
        book.read(2, &headers, true);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        assert_eq!((seen[0].0, seen[0].1.copies), (2, Some(1)));
    }
}
