//! The listing's query string (`GET /v1/locks?prefix=&limit=`), parsed and
//! checked in one step.

use serde::{Deserialize, Serialize};

use crate::request::{max_len, BadRequest, DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT, MAX_NAME_BYTES};

/// The query of `GET /v1/locks`: `?prefix=&limit=`.
///
/// `limit` absent means [`DEFAULT_LIST_LIMIT`]; larger than
/// [`MAX_LIST_LIMIT`] is clamped; 0 is refused. `prefix` absent or empty
/// lists every name; it is at most [`MAX_NAME_BYTES`].
#[derive(
    Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, bincode::Encode, bincode::Decode,
)]
pub struct ListQuery {
    /// Only names starting with this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// At most this many locks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

impl ListQuery {
    /// Parses and validates a raw query string (without the `?`): `&`-separated
    /// `key=value` pairs, percent-encoded, `+` for space. Unknown keys are
    /// ignored; a repeated key's last value counts.
    pub fn parse(query: Option<&str>) -> Result<ListQuery, BadRequest> {
        let mut out = ListQuery::default();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let key = percent_decode(key, "query")?;
            match key.as_str() {
                "prefix" => out.prefix = Some(percent_decode(value, "prefix")?),
                "limit" => {
                    let text = percent_decode(value, "limit")?;
                    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
                        return Err(BadRequest::BadQuery {
                            field: "limit",
                            problem: "must be a non-negative integer",
                        });
                    }
                    let n = text.parse().map_err(|_| BadRequest::TooBig("limit"))?;
                    out.limit = Some(n);
                }
                _ => {}
            }
        }
        out.validate()?;
        Ok(out)
    }

    /// Checks the values (a query read by [`ListQuery::parse`] is checked
    /// already; one decoded otherwise is not).
    pub fn validate(&self) -> Result<(), BadRequest> {
        if self.limit == Some(0) {
            return Err(BadRequest::BadQuery {
                field: "limit",
                problem: "must be at least 1",
            });
        }
        max_len("prefix", self.prefix(), MAX_NAME_BYTES)
    }

    /// The prefix, "" when absent.
    pub fn prefix(&self) -> &str {
        self.prefix.as_deref().unwrap_or("")
    }

    /// The number of locks to list: the default when absent, clamped to
    /// [`MAX_LIST_LIMIT`].
    pub fn limit(&self) -> usize {
        match self.limit {
            None => DEFAULT_LIST_LIMIT,
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX).min(MAX_LIST_LIMIT),
        }
    }
}

fn percent_decode(s: &str, field: &'static str) -> Result<String, BadRequest> {
    let bad = |problem| BadRequest::BadQuery { field, problem };
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or_else(|| bad("malformed percent escape"))?;
                out.push(hex);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).map_err(|_| bad("not UTF-8"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_query() {
        let q = ListQuery::parse(None).unwrap();
        assert_eq!((q.prefix(), q.limit()), ("", DEFAULT_LIST_LIMIT));
        let q = ListQuery::parse(Some("prefix=jobs%2F4+2&limit=5&x=y")).unwrap();
        assert_eq!((q.prefix(), q.limit()), ("jobs/4 2", 5));
        let q = ListQuery::parse(Some("limit=99999999")).unwrap();
        assert_eq!(q.limit(), MAX_LIST_LIMIT);
        assert_eq!(
            ListQuery::parse(Some("limit=99999999999999999999999")).unwrap_err(),
            BadRequest::TooBig("limit")
        );
        for bad in ["limit=-1", "limit=1.5", "limit=", "limit=abc", "limit=0"] {
            let e = ListQuery::parse(Some(bad)).unwrap_err();
            assert!(e.to_string().contains("`limit`"), "{bad}: {e}");
        }
        assert!(ListQuery::parse(Some("prefix=%zz")).is_err());
        assert!(ListQuery::parse(Some("prefix=%ff")).is_err());
        let long = format!("prefix={}", "p".repeat(513));
        assert!(ListQuery::parse(Some(&long)).is_err());
    }
}
