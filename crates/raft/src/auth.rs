//! The cluster token: its header and a constant-time comparison.

/// The header every peer request carries the cluster token in.
pub const TOKEN_HEADER: &str = "x-leasehold-token";

/// Whether `given` equals `expected`, in time that depends only on their lengths.
///
/// A length mismatch is `false`, but the contents are still scanned over
/// the length of `expected` so the timing does not reveal where bytes differ.
pub fn token_matches(expected: &str, given: &[u8]) -> bool {
    let expected = expected.as_bytes();
    let mut diff = u8::from(expected.len() != given.len());
    for (i, e) in expected.iter().enumerate() {
        let g = given.get(i).copied().unwrap_or(!*e);
        diff |= std::hint::black_box(e ^ g);
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::token_matches;

    #[test]
    fn token_cases() {
        assert!(token_matches("secret", b"secret"));
        assert!(token_matches("", b""));
        assert!(!token_matches("secret", b"secreT"));
        assert!(!token_matches("secret", b"secret "));
        assert!(!token_matches("secret", b"secre"));
        assert!(!token_matches("secret", b""));
        assert!(!token_matches("", b"x"));
        assert!(!token_matches("secret", b"Secret"));
        // A prefix padded with what the missing bytes would be is still wrong.
        assert!(!token_matches("ab", b"a"));
    }
}
