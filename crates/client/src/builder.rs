//! Building a [`Client`] to a list of endpoints: its token, its TLS CA,
//! and the transport its calls take ([`TransportKind`]).

use std::sync::Arc;

use crate::{Client, Error, FrameTransport, HttpOptions, HttpTransport, Transport};

/// Which transport a [`Client`] built by [`ClientBuilder`] makes its calls
/// over.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TransportKind {
    /// The binary transport, and HTTP to a node that does not serve it
    /// (an older node, or one with frames off), for a minute at a time
    /// ([`FrameTransport`]). The default.
    #[default]
    Auto,
    /// The binary transport only: a call to a node that does not serve it
    /// fails ([`FrameTransport::without_fallback`]).
    Binary,
    /// HTTP/1.1 and JSON only ([`HttpTransport`]).
    Http,
}

/// Builds a [`Client`] ([`Client::builder`]).
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    endpoints: Vec<String>,
    options: HttpOptions,
    transport: TransportKind,
}

impl ClientBuilder {
    pub(crate) fn new(endpoints: Vec<String>) -> Self {
        ClientBuilder {
            endpoints,
            options: HttpOptions::default(),
            transport: TransportKind::default(),
        }
    }

    /// Every call carries `token`, for a cluster run with `--acl`: as
    /// `Authorization: Bearer` over HTTP, in the first frame of each
    /// connection over frames.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.options.token = Some(token.into());
        self
    }

    /// The nodes' certificates are verified against this CA (PEM), and
    /// only against it; bare `host:port` endpoints are reached with
    /// `https://`.
    pub fn tls_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.options.tls_ca_pem = Some(pem.into());
        self
    }

    /// As [`ClientBuilder::tls_ca_pem`], reading the CA from the file at
    /// `path`.
    pub fn tls_ca_file(self, path: impl AsRef<std::path::Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let pem = std::fs::read(path)
            .map_err(|e| Error::BadRequest(format!("TLS CA {}: {e}", path.display())))?;
        Ok(self.tls_ca_pem(pem))
    }

    /// The transport the calls take (default [`TransportKind::Auto`]).
    pub fn transport(mut self, kind: TransportKind) -> Self {
        self.transport = kind;
        self
    }

    /// The client, or why these endpoints and options cannot be used.
    pub fn build(self) -> Result<Client, Error> {
        let (endpoints, options) = (self.endpoints, &self.options);
        let transport: Result<Arc<dyn Transport>, _> = match self.transport {
            TransportKind::Auto => {
                FrameTransport::with_options(endpoints, options).map(|t| Arc::new(t) as _)
            }
            TransportKind::Binary => FrameTransport::with_options(endpoints, options)
                .and_then(FrameTransport::without_fallback)
                .map(|t| Arc::new(t) as _),
            TransportKind::Http => {
                HttpTransport::with_options(endpoints, options).map(|t| Arc::new(t) as _)
            }
        };
        let transport = transport.map_err(|e| Error::BadRequest(e.to_string()))?;
        Ok(Client::with_transport(transport))
    }
}
