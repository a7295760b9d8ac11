//! TLS for a leasehold node, with rustls (and ring): its certificate and
//! key, and the CA it verifies its members against, read from PEM files
//! at start and again on [`Tls::reload`] (SIGHUP), so a certificate is
//! renewed without a restart.
//!
//! One port serves both the public API and the peer routes. With a CA
//! (`--tls-ca`) the members speak mutual TLS: a node presents its
//! certificate as a client too, and the server asks every connection for
//! one, verified against the CA; a connection without one is still served
//! (the public API's clients have none) and marked so, and the node keeps
//! its peer routes to connections that showed one ([`PeerVerified`]). A
//! certificate from another CA fails the handshake.

mod files;
mod stream;

use std::io;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use rustls::pki_types::ServerName;
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tokio::net::TcpStream;

pub use stream::{PeerStream, Prefixed};

/// The first byte of every TLS connection: a handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

/// How long a connection may take to finish its TLS handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a node's certificate, key and CA are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The node's certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// The node's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// The CA (PEM, one or more certificates) members are verified
    /// against, as servers and as clients; without it, members' server
    /// certificates are verified against the public roots (webpki-roots)
    /// and no client certificate is asked for.
    pub ca: Option<PathBuf>,
}

/// Why TLS could not be set up from the files.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// A file holds no PEM block of the kind it must.
    #[error("{path}: no {what} in it (expected PEM)")]
    Missing {
        /// The file.
        path: PathBuf,
        /// What was looked for.
        what: &'static str,
    },
    /// A file's PEM could not be read, or rustls refused what it holds.
    #[error("{path}: {why}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// Why.
        why: String,
    },
}

/// What a connection's client showed: a certificate the CA verified. The
/// node's server puts it in the extensions of every request on such a
/// connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerVerified;

/// The configurations made from the files, as last loaded.
struct Loaded {
    server: Arc<ServerConfig>,
    client: Arc<ClientConfig>,
    /// As `client`, offering ALPN `leasehold` first: a member's connection
    /// for the binary transport.
    client_frames: Arc<ClientConfig>,
}

/// A node's TLS: the server and client configurations, swapped whole on
/// [`Tls::reload`]; a connection keeps the one it started with.
pub struct Tls {
    files: TlsFiles,
    loaded: RwLock<Arc<Loaded>>,
    /// Counts the reloads that took: a connection made before the last
    /// one closes (see [`Tls::reloaded`]).
    generation: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

/// Why a connection was not accepted as TLS.
#[derive(Debug)]
pub enum AcceptError<IO> {
    /// The client spoke something other than TLS first (plain HTTP, most
    /// likely): the connection, untouched but for the byte read, so that
    /// the server can answer in plain text before closing it.
    NotTls(Prefixed<IO>),
    /// The handshake failed (a certificate from another CA, say), or the
    /// connection ended.
    Handshake(io::Error),
}

/// Two are the same when read from the same files.
impl PartialEq for Tls {
    fn eq(&self, other: &Self) -> bool {
        self.files == other.files
    }
}

impl Eq for Tls {}

impl Tls {
    /// Reads `files` and makes the configurations, or says what is wrong
    /// with them.
    pub fn load(files: TlsFiles) -> Result<Tls, TlsError> {
        let loaded = load(&files)?;
        Ok(Tls {
            files,
            loaded: RwLock::new(Arc::new(loaded)),
            generation: tokio::sync::watch::channel(0).0,
        })
    }

    /// Reads the files again (renewed certificates, a new CA): new
    /// connections use them from now on, and connections made before are
    /// closed once the request they serve is answered (the server's) or
    /// when next taken from the pool (the peer client's), so that a
    /// certificate the new CA does not vouch for is trusted no longer. On
    /// an error the configurations in use stay, and so do the connections.
    pub fn reload(&self) -> Result<(), TlsError> {
        let loaded = load(&self.files)?;
        *self.loaded.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(loaded);
        self.generation.send_modify(|g| *g += 1);
        Ok(())
    }

    /// How many reloads have taken so far.
    pub fn generation(&self) -> u64 {
        *self.generation.borrow()
    }

    /// Resolves at the next reload that takes after `generation`.
    pub async fn reloaded(&self, generation: u64) {
        let mut watch = self.generation.subscribe();
        let _ = watch.wait_for(|g| *g != generation).await;
    }

    /// The files this was read from.
    pub fn files(&self) -> &TlsFiles {
        &self.files
    }

    /// Whether members speak mutual TLS: a CA was given, a client
    /// certificate is asked for, and the peer routes need one.
    pub fn mutual(&self) -> bool {
        self.files.ca.is_some()
    }

    fn current(&self) -> Arc<Loaded> {
        Arc::clone(&self.loaded.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// The server's side of a new connection: its TLS stream, and whether
    /// its client showed a certificate the CA verified.
    pub async fn accept<IO>(
        &self,
        mut io: IO,
    ) -> Result<
        (
            tokio_rustls::server::TlsStream<Prefixed<IO>>,
            Option<PeerVerified>,
        ),
        AcceptError<IO>,
    >
    where
        IO: AsyncRead + AsyncWrite + Unpin,
    {
        let first = io.read_u8().await.map_err(AcceptError::Handshake)?;
        let io = Prefixed::new(first, io);
        if first != TLS_HANDSHAKE {
            return Err(AcceptError::NotTls(io));
        }
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::clone(&self.current().server));
        let stream = acceptor.accept(io).await.map_err(AcceptError::Handshake)?;
        let verified = stream
            .get_ref()
            .1
            .peer_certificates()
            .is_some_and(|chain| !chain.is_empty())
            .then_some(PeerVerified);
        Ok((stream, verified))
    }

    /// The client's side of a connection to the member at `addr`
    /// (`host:port`), over `tcp`: its server certificate must name the
    /// host, and with a CA this node shows its own.
    pub async fn connect(
        &self,
        addr: &str,
        tcp: TcpStream,
    ) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let name = server_name(addr)?;
        let connector = tokio_rustls::TlsConnector::from(Arc::clone(&self.current().client));
        connector.connect(name, tcp).await
    }

    /// As [`Tls::connect`], for the binary transport: ALPN `leasehold` is
    /// offered before `http/1.1` (a member whose build has no binary
    /// transport chooses `http/1.1`, and answers the preamble as HTTP).
    pub async fn connect_frames(
        &self,
        addr: &str,
        tcp: TcpStream,
    ) -> io::Result<tokio_rustls::client::TlsStream<TcpStream>> {
        let name = server_name(addr)?;
        let config = Arc::clone(&self.current().client_frames);
        tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
    }
}

/// The host of `addr` (`host:port`, `[v6]:port`) as a TLS server name.
pub fn server_name(addr: &str) -> io::Result<ServerName<'static>> {
    let host = match addr.rsplit_once(':') {
        Some((host, port)) if port.parse::<u16>().is_ok() => host,
        _ => addr,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{addr}: not a host name for TLS: {e}"),
        )
    })
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The configurations `files` make.
fn load(files: &TlsFiles) -> Result<Loaded, TlsError> {
    let chain = files::certificates(&files.cert)?;
    let key = files::private_key(&files.key)?;
    let ca = files.ca.as_deref().map(files::roots).transpose()?;
    let versions = |e: rustls::Error| TlsError::Invalid {
        path: files.cert.clone(),
        why: e.to_string(),
    };

    if let Some(roots) = &ca {
        vouched_for(&chain, roots, files)?;
    }
    let server = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(versions)?;
    let server = match &ca {
        Some(roots) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::clone(roots), provider())
                    .allow_unauthenticated()
                    .build()
                    .map_err(|e| TlsError::Invalid {
                        path: files.ca.clone().unwrap_or_default(),
                        why: e.to_string(),
                    })?;
            server.with_client_cert_verifier(verifier)
        }
        None => server.with_no_client_auth(),
    };
    let mut server = server
        .with_single_cert(chain.clone(), key.clone_key())
        .map_err(mismatched(files))?;
    // The binary transport first: a client that offers it speaks it (the
    // node sniffs its preamble inside TLS all the same).
    server.alpn_protocols = vec![b"leasehold".to_vec(), b"http/1.1".to_vec()];

    let roots = ca.unwrap_or_else(|| {
        Arc::new(RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        })
    });
    let client = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(versions)?
        .with_root_certificates(roots);
    let mut client = match files.ca {
        Some(_) => client
            .with_client_auth_cert(chain, key)
            .map_err(mismatched(files))?,
        None => client.with_no_client_auth(),
    };
    let mut client_frames = client.clone();
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    client_frames.alpn_protocols = vec![b"leasehold".to_vec(), b"http/1.1".to_vec()];
    Ok(Loaded {
        server: Arc::new(server),
        client: Arc::new(client),
        client_frames: Arc::new(client_frames),
    })
}

/// The error of a certificate and key rustls will not use together.
fn mismatched(files: &TlsFiles) -> impl Fn(rustls::Error) -> TlsError + '_ {
    move |e| TlsError::Invalid {
        path: files.cert.clone(),
        why: format!(
            "does not go with the key in {} (or cannot be used): {e}",
            files.key.display()
        ),
    }
}

/// Refuses a certificate the CA does not vouch for as a client (its
/// chain, dates and extended key usage): the members would refuse it, and
/// this node would be cut off from them until its files were fixed.
fn vouched_for(
    chain: &[rustls::pki_types::CertificateDer<'static>],
    roots: &Arc<RootCertStore>,
    files: &TlsFiles,
) -> Result<(), TlsError> {
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::clone(roots), provider())
        .build()
        .map_err(|e| TlsError::Invalid {
            path: files.ca.clone().unwrap_or_default(),
            why: e.to_string(),
        })?;
    let (leaf, intermediates) = chain.split_first().expect("a chain has a certificate");
    verifier
        .verify_client_cert(leaf, intermediates, rustls::pki_types::UnixTime::now())
        .map(|_| ())
        .map_err(|e| TlsError::Invalid {
            path: files.cert.clone(),
            why: format!(
                "the members would refuse it: not valid under the CA of {} as a client \
                 certificate ({e})",
                files
                    .ca
                    .as_deref()
                    .unwrap_or_else(|| std::path::Path::new(""))
                    .display()
            ),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_names_are_the_host_of_an_address() {
        assert_eq!(
            server_name("127.0.0.1:7701").unwrap(),
            ServerName::try_from("127.0.0.1").unwrap()
        );
        assert_eq!(
            server_name("[::1]:7701").unwrap(),
            ServerName::try_from("::1").unwrap()
        );
        assert_eq!(
            server_name("node-1.example:7701").unwrap(),
            ServerName::try_from("node-1.example").unwrap()
        );
        assert!(server_name("not a host:1").is_err());
    }

    #[test]
    fn files_that_are_missing_or_hold_no_pem_are_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "not pem\n").unwrap();
        let files = TlsFiles {
            cert: dir.path().join("absent.pem"),
            key: empty.clone(),
            ca: None,
        };
        let e = Tls::load(files.clone()).unwrap_err().to_string();
        assert!(e.contains("absent.pem"), "{e}");
        let e = Tls::load(TlsFiles {
            cert: empty.clone(),
            ..files
        })
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("empty.pem") && e.contains("no certificate"),
            "{e}"
        );
    }
}
