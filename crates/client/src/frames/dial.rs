//! Opening a connection for frames: TCP (and TLS, offering ALPN
//! `leasehold` beside `http/1.1`), then the preambles, and the token's
//! frame sent right behind ours. A node that answers otherwise (HTTP, a
//! TLS choice of `http/1.1`, no preamble) does not serve frames:
//! [`DialError::NotBinary`], which the transport answers by falling back
//! to HTTP.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use leasehold_api::wire::{self, Request, Token};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::endpoints::EndpointError;
use crate::http::named_failure;
use crate::transport::CallError;

/// The request id of the token's frame, the first of a connection's;
/// calls take ids from 1.
pub(super) const TOKEN_ID: u64 = 0;

/// A connection's byte stream: TCP, or TLS over it.
pub(super) trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<S: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for S {}

/// Where a node is reached for frames: its host and port, and whether
/// over TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Target {
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) tls: bool,
}

impl Target {
    /// The target of an endpoint's base URL (`http(s)://host:port`), or
    /// `None` when frames cannot reach it: a path after the port (a proxy
    /// that routes by path carries HTTP only).
    pub(super) fn of(base: &str) -> Option<Target> {
        let url = reqwest::Url::parse(base).ok()?;
        if !matches!(url.path(), "" | "/") || url.query().is_some() {
            return None;
        }
        // An IPv6 address without its brackets, as a socket address and a
        // TLS server name read it.
        let host = url
            .host_str()?
            .trim_start_matches('[')
            .trim_end_matches(']');
        Some(Target {
            host: host.to_string(),
            port: url.port_or_known_default()?,
            tls: url.scheme() == "https",
        })
    }
}

/// Why no connection for frames was made.
#[derive(Debug, Clone)]
pub(super) enum DialError {
    /// The node does not serve frames: it answered HTTP, chose `http/1.1`
    /// under TLS, closed without a preamble, or speaks none of our
    /// versions.
    NotBinary(String),
    /// The node could not be reached: nothing was sent.
    Failed(CallError),
}

/// How connections are opened: the token sent first, the TLS set-up, the
/// time allowed.
pub(super) struct Dialer {
    pub(super) token: Option<String>,
    pub(super) tls: Option<Arc<ClientConfig>>,
    pub(super) connect_timeout: Duration,
    /// How long the node has to finish TLS, and then to answer our
    /// preamble.
    pub(super) handshake_timeout: Duration,
}

/// A connection whose preambles were exchanged: the stream, and the bytes
/// read past the node's preamble (its first frames).
pub(super) struct Dialed {
    pub(super) stream: Box<dyn Stream>,
    pub(super) read: Vec<u8>,
    /// Whether the token's frame was sent (its answer is to come, with
    /// [`TOKEN_ID`]).
    pub(super) token_sent: bool,
}

impl Dialer {
    /// A connection for frames to `target`.
    pub(super) async fn dial(&self, target: &Target) -> Result<Dialed, DialError> {
        let failed = |what: &str, e: &io::Error| failed(target, what, e);
        let connect = TcpStream::connect((target.host.as_str(), target.port));
        let tcp = match tokio::time::timeout(self.connect_timeout, connect).await {
            Ok(Ok(tcp)) => tcp,
            Ok(Err(e)) => return Err(failed("connecting to", &e)),
            Err(_) => return Err(failed("connecting to", &io::ErrorKind::TimedOut.into())),
        };
        tcp.set_nodelay(true)
            .map_err(|e| failed("setting TCP_NODELAY on", &e))?;
        self.handshake(target, tcp).await
    }

    async fn handshake(&self, target: &Target, tcp: TcpStream) -> Result<Dialed, DialError> {
        let failed = |what: &str, e: &io::Error| failed(target, what, e);
        let mut stream: Box<dyn Stream> = match &self.tls {
            Some(config) if target.tls => {
                let name = ServerName::try_from(target.host.clone()).map_err(|e| {
                    DialError::Failed(CallError::NotSent(format!(
                        "{}: not a host name for TLS: {e}",
                        target.host
                    )))
                })?;
                let connector = tokio_rustls::TlsConnector::from(Arc::clone(config));
                let connect = connector.connect(name, tcp);
                let tls = match tokio::time::timeout(self.handshake_timeout, connect).await {
                    Ok(Ok(tls)) => tls,
                    Ok(Err(e)) => return Err(failed("TLS handshake with", &e)),
                    Err(_) => {
                        return Err(failed(
                            "TLS handshake with",
                            &io::ErrorKind::TimedOut.into(),
                        ))
                    }
                };
                if tls.get_ref().1.alpn_protocol() == Some(b"http/1.1") {
                    return Err(DialError::NotBinary(
                        "the node chose http/1.1 under TLS".into(),
                    ));
                }
                Box::new(tls)
            }
            _ => Box::new(tcp),
        };
        let mut first = wire::preamble(wire::SPEAKS).to_vec();
        if let Some(token) = &self.token {
            let request = Request::Token(Token(token.clone()));
            wire::encode_frame(TOKEN_ID, &request, &mut first).map_err(|e| {
                DialError::Failed(CallError::NotSent(format!("the token cannot be sent: {e}")))
            })?;
        }
        stream
            .write_all(&first)
            .await
            .map_err(|e| failed("writing to", &e))?;
        stream.flush().await.map_err(|e| failed("writing to", &e))?;
        // A node that serves frames answers the preamble at once; one
        // that waits for more serves none (an HTTP server waiting for the
        // end of a request's head).
        let preamble = read_preamble(&mut stream);
        let (chosen, read) = tokio::time::timeout(self.handshake_timeout, preamble)
            .await
            .map_err(|_| {
                DialError::NotBinary(format!("no preamble within {:?}", self.handshake_timeout))
            })??;
        wire::accept(wire::SPEAKS, chosen).map_err(|e| DialError::NotBinary(e.to_string()))?;
        Ok(Dialed {
            stream,
            read,
            token_sent: self.token.is_some(),
        })
    }
}

/// A connection to `target` that failed at `what` (nothing was sent, or
/// nothing the node acted on), named as an operator reads it first.
fn failed(target: &Target, what: &str, e: &io::Error) -> DialError {
    let timed_out = e.kind() == io::ErrorKind::TimedOut;
    DialError::Failed(CallError::NotSent(named_failure(
        &format!("{what} {}:{}: {e}", target.host, target.port),
        timed_out,
    )))
}

/// The version the node's preamble chose, and the bytes read after it.
async fn read_preamble(
    stream: &mut Box<dyn Stream>,
) -> Result<(wire::Version, Vec<u8>), DialError> {
    let mut read = Vec::with_capacity(512);
    loop {
        match wire::read_preamble(&read) {
            Ok(Some(version)) => return Ok((version, read.split_off(wire::PREAMBLE_LEN))),
            Ok(None) => {}
            Err(_) => {
                let line = String::from_utf8_lossy(&read);
                let line = line.lines().next().unwrap_or_default();
                return Err(DialError::NotBinary(format!("the node answered {line:?}")));
            }
        }
        let mut buf = [0; 512];
        match stream.read(&mut buf).await {
            Ok(0) => {
                return Err(DialError::NotBinary(
                    "the node closed the connection without a preamble".into(),
                ))
            }
            Ok(n) => read.extend_from_slice(&buf[..n]),
            // A reset after our preamble is an HTTP server's close as
            // well: it refused what it could not read.
            Err(e) => return Err(DialError::NotBinary(format!("no preamble: {e}"))),
        }
    }
}

/// The TLS set-up of connections for frames: trusting only the CA in
/// `ca_pem` if given (as [`crate::trust_only`] does for HTTP), else the
/// public roots; ALPN `leasehold` offered before `http/1.1`.
pub(super) fn tls_config(ca_pem: Option<&[u8]>) -> Result<Arc<ClientConfig>, EndpointError> {
    let roots = match ca_pem {
        Some(pem) => {
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|_| EndpointError::NoCa)?;
                roots.add(cert).map_err(|_| EndpointError::NoCa)?;
            }
            if roots.is_empty() {
                return Err(EndpointError::NoCa);
            }
            roots
        }
        None => RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        },
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| EndpointError::Invalid("TLS".into(), e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![wire::ALPN.to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
