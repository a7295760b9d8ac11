//! Reading PEM files: a certificate chain, a private key, a CA's roots.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;

use crate::TlsError;

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|source| TlsError::Read {
        path: path.to_path_buf(),
        source,
    })
}

fn invalid(path: &Path, why: impl std::fmt::Display) -> TlsError {
    TlsError::Invalid {
        path: path.to_path_buf(),
        why: why.to_string(),
    }
}

/// Every certificate in the PEM file at `path`, in order; at least one.
pub(crate) fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| invalid(path, e))?;
    if chain.is_empty() {
        return Err(TlsError::Missing {
            path: path.to_path_buf(),
            what: "certificate",
        });
    }
    Ok(chain)
}

/// The first private key in the PEM file at `path`.
pub(crate) fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
        rustls::pki_types::pem::Error::NoItemsFound => TlsError::Missing {
            path: path.to_path_buf(),
            what: "unencrypted private key (PKCS#8, PKCS#1 or SEC1)",
        },
        e => invalid(path, e),
    })
}

/// The CA certificates in the PEM file at `path`, as trust roots.
pub(crate) fn roots(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in certificates(path)? {
        roots.add(cert).map_err(|e| invalid(path, e))?;
    }
    Ok(Arc::new(roots))
}
