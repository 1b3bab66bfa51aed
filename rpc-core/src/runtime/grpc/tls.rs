//! TLS for the gRPC face and the gRPC client transport (rustls, ring provider), from PEM:
//! the face's certificate chain and key, the client's trusted roots. ALPN offers `h2`, as
//! gRPC requires.

use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls;

use crate::Error;

fn tls_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::InvalidConfig(format!("TLS: {what}: {e}"))
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn certificates(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, Error> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_error("reading the certificates", e))?;
    if certs.is_empty() {
        return Err(tls_error(
            "reading the certificates",
            "no certificate in the PEM",
        ));
    }
    Ok(certs)
}

/// A server configuration: `cert_chain_pem` (leaf first) and its `private_key_pem`.
pub(crate) fn server_config(
    cert_chain_pem: &[u8],
    private_key_pem: &[u8],
) -> Result<Arc<rustls::ServerConfig>, Error> {
    let certs = certificates(cert_chain_pem)?;
    let key = PrivateKeyDer::from_pem_slice(private_key_pem)
        .map_err(|e| tls_error("reading the private key", e))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error("protocol versions", e))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| tls_error("the certificate and key", e))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// A client configuration trusting the certificates of `roots_pem`.
pub(crate) fn client_config(roots_pem: &[u8]) -> Result<Arc<rustls::ClientConfig>, Error> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in certificates(roots_pem)? {
        roots
            .add(cert)
            .map_err(|e| tls_error("a trusted certificate", e))?;
    }
    let mut config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error("protocol versions", e))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}
