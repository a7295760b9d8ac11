//! Who may do what on a node's public API: the tokens of an `--acl` file
//! (TOML), each with the name prefixes it may lock (acquire, renew,
//! release) and read (get, list, watch), and whether it may administer the
//! cluster (membership, fault injection).
//!
//! ```toml
//! [[token]]
//! name = "deployer"
//! secret_sha256 = "<64 hex digits>"   # or: secret = "..." (kept in clear)
//! lock = ["jobs/"]
//! read = [""]                          # "" is every name
//! admin = false
//! ```
//!
//! A request shows its secret as `Authorization: Bearer <secret>`; the
//! secret's SHA-256 is compared with every token's, each in constant time.

use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

/// The tokens of an `--acl` file (equal to another with the same tokens:
/// configurations compare).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Acl {
    tokens: Vec<Arc<Token>>,
    /// The tokens whose secret the file keeps in clear.
    in_clear: Vec<String>,
}

/// One token: its name, and what it may do.
#[derive(PartialEq, Eq)]
pub struct Token {
    name: String,
    digest: [u8; 32],
    lock: Vec<String>,
    read: Vec<String>,
    admin: bool,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The digest stays out of logs too.
        f.debug_struct("Token")
            .field("name", &self.name)
            .field("lock", &self.lock)
            .field("read", &self.read)
            .field("admin", &self.admin)
            .finish_non_exhaustive()
    }
}

/// What a request does to a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Right {
    /// Acquire, renew or release it.
    Lock,
    /// Get, list or watch it.
    Read,
}

/// Why an `--acl` file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum AclError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is not the TOML an ACL is (an unknown key is named).
    #[error("{0}")]
    Syntax(String),
    /// A token is wrong in a way the syntax cannot say.
    #[error("token {token:?}: {why}")]
    Token {
        /// The token's name.
        token: String,
        /// What is wrong.
        why: String,
    },
    /// The file names no token: it would refuse every request.
    #[error("the ACL has no [[token]]: every request would be refused")]
    Empty,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    token: Vec<TokenEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    name: String,
    secret: Option<String>,
    secret_sha256: Option<String>,
    #[serde(default)]
    lock: Vec<String>,
    #[serde(default)]
    read: Vec<String>,
    #[serde(default)]
    admin: bool,
}

impl Acl {
    /// Reads the ACL at `path`.
    pub fn load(path: &Path) -> Result<Acl, AclError> {
        let text = std::fs::read_to_string(path).map_err(|source| AclError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Acl::parse(&text)
    }

    /// The ACL `text` says.
    pub fn parse(text: &str) -> Result<Acl, AclError> {
        let file: File = toml::from_str(text).map_err(|e| AclError::Syntax(e.to_string()))?;
        if file.token.is_empty() {
            return Err(AclError::Empty);
        }
        let mut tokens: Vec<Arc<Token>> = Vec::new();
        let mut in_clear = Vec::new();
        for entry in file.token {
            let wrong = |why: &str| AclError::Token {
                token: entry.name.clone(),
                why: why.to_string(),
            };
            if entry.name.is_empty() {
                return Err(wrong("a token needs a name"));
            }
            if tokens.iter().any(|t| t.name == entry.name) {
                return Err(wrong("two tokens have this name"));
            }
            let digest = match (&entry.secret, &entry.secret_sha256) {
                (Some(secret), None) if secret.is_empty() => {
                    return Err(wrong("`secret` is empty"))
                }
                (Some(secret), None) => {
                    in_clear.push(entry.name.clone());
                    sha256(secret.as_bytes())
                }
                (None, Some(hex)) => parse_digest(hex)
                    .ok_or_else(|| wrong("`secret_sha256` must be 64 hexadecimal digits"))?,
                _ => return Err(wrong("give exactly one of `secret` and `secret_sha256`")),
            };
            if tokens.iter().any(|t| bool::from(t.digest.ct_eq(&digest))) {
                return Err(wrong("its secret is another token's"));
            }
            tokens.push(Arc::new(Token {
                name: entry.name,
                digest,
                lock: entry.lock,
                read: entry.read,
                admin: entry.admin,
            }));
        }
        Ok(Acl { tokens, in_clear })
    }

    /// The token whose secret is `secret`, if any. Every token's digest is
    /// compared, each in constant time.
    pub fn authenticate(&self, secret: &[u8]) -> Option<Arc<Token>> {
        let digest = sha256(secret);
        let mut found = None;
        for token in &self.tokens {
            let same = bool::from(token.digest.ct_eq(&digest));
            if same && found.is_none() {
                found = Some(Arc::clone(token));
            }
        }
        found
    }

    /// The names of the tokens whose secret the file keeps in clear (warn
    /// at start).
    pub fn in_clear(&self) -> &[String] {
        &self.in_clear
    }

    /// How many tokens there are.
    pub fn len(&self) -> usize {
        self.tokens.len()
    }

    /// Whether there are none (never, for an ACL that parsed).
    pub fn is_empty(&self) -> bool {
        self.tokens.is_empty()
    }
}

impl Token {
    /// The token's name (never its secret).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether it may do `right` to `name`: some prefix it has for that
    /// right begins `name`.
    pub fn may(&self, right: Right, name: &str) -> bool {
        let prefixes = match right {
            Right::Lock => &self.lock,
            Right::Read => &self.read,
        };
        prefixes
            .iter()
            .any(|prefix| name.starts_with(prefix.as_str()))
    }

    /// Whether it may administer the cluster.
    pub fn is_admin(&self) -> bool {
        self.admin
    }
}

/// The SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The SHA-256 of `secret` as 64 lowercase hexadecimal digits: what an
/// ACL's `secret_sha256` holds.
pub fn sha256_hex(secret: &[u8]) -> String {
    sha256(secret).iter().map(|b| format!("{b:02x}")).collect()
}

/// 64 hexadecimal digits (either case) as 32 bytes.
fn parse_digest(hex: &str) -> Option<[u8; 32]> {
    let hex = hex.as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    let mut digest = [0u8; 32];
    for (i, pair) in hex.chunks(2).enumerate() {
        digest[i] = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(digest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acl() -> Acl {
        Acl::parse(&format!(
            r#"
            [[token]]
            name = "deployer"
            secret_sha256 = "{}"
            lock = ["jobs/"]
            read = [""]

            [[token]]
            name = "ops"
            secret = "ops-secret"
            admin = true
            "#,
            sha256_hex(b"deploy-secret")
        ))
        .unwrap()
    }

    #[test]
    fn a_secret_finds_its_token_and_its_rights() {
        let acl = acl();
        let deployer = acl.authenticate(b"deploy-secret").unwrap();
        assert_eq!(deployer.name(), "deployer");
        assert!(deployer.may(Right::Lock, "jobs/42"));
        assert!(!deployer.may(Right::Lock, "other/1"));
        assert!(deployer.may(Right::Read, "anything"));
        assert!(!deployer.is_admin());
        let ops = acl.authenticate(b"ops-secret").unwrap();
        assert!(ops.is_admin());
        assert!(!ops.may(Right::Read, "jobs/42"), "no prefix, no right");
        assert!(acl.authenticate(b"deploy-secreT").is_none());
        assert!(acl.authenticate(b"").is_none());
        assert_eq!(acl.in_clear(), ["ops".to_string()]);
    }

    #[test]
    fn a_wrong_file_says_what_is_wrong() {
        let wrong = |text: &str| Acl::parse(text).unwrap_err().to_string();
        assert!(wrong("[[token]]\nname = \"a\"\nsecret = \"s\"\nlokc = []").contains("lokc"));
        assert!(wrong("").contains("no [[token]]"));
        assert!(wrong("[[token]]\nname = \"a\"").contains("exactly one"));
        assert!(wrong("[[token]]\nname = \"a\"\nsecret_sha256 = \"abc\"").contains("64"));
        let twice =
            "[[token]]\nname = \"a\"\nsecret = \"s\"\n[[token]]\nname = \"a\"\nsecret = \"t\"";
        assert!(wrong(twice).contains("two tokens"));
        let same =
            "[[token]]\nname = \"a\"\nsecret = \"s\"\n[[token]]\nname = \"b\"\nsecret = \"s\"";
        assert!(wrong(same).contains("another token's"));
    }

    #[test]
    fn debug_output_shows_no_secret() {
        let acl = acl();
        let shown = format!("{:?}", acl.authenticate(b"ops-secret").unwrap());
        assert!(
            !shown.contains("ops-secret") && !shown.contains("digest"),
            "{shown}"
        );
    }
}
