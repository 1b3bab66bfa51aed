//! tonic's TLS settings, at `rpc_core::transport`: [`Certificate`] and [`ClientTlsConfig`]
//! for a client ([`crate::transport::Endpoint::tls_config`]), [`Identity`] and
//! [`ServerTlsConfig`] for a server ([`crate::ServerBuilder::tls_config`]). TLS carries
//! standard gRPC (HTTP/2, ALPN `h2`); this framework's own protocol has none.

/// A PEM certificate: a CA a client trusts.
#[derive(Debug, Clone)]
pub struct Certificate {
    pem: Vec<u8>,
}

impl Certificate {
    /// The certificate(s) of `pem`.
    pub fn from_pem(pem: impl AsRef<[u8]>) -> Certificate {
        Certificate {
            pem: pem.as_ref().to_vec(),
        }
    }

    /// The PEM text.
    pub fn get_ref(&self) -> &[u8] {
        &self.pem
    }
}

/// A server's certificate chain and private key, PEM.
#[derive(Debug, Clone)]
pub struct Identity {
    cert: Vec<u8>,
    key: Vec<u8>,
}

impl Identity {
    /// The chain `cert` and its private key `key`.
    pub fn from_pem(cert: impl AsRef<[u8]>, key: impl AsRef<[u8]>) -> Identity {
        Identity {
            cert: cert.as_ref().to_vec(),
            key: key.as_ref().to_vec(),
        }
    }

    /// The chain and the key, PEM.
    pub(crate) fn parts(&self) -> (&[u8], &[u8]) {
        (&self.cert, &self.key)
    }
}

/// What a client trusts, and the name it expects the server's certificate to have.
#[derive(Debug, Clone, Default)]
pub struct ClientTlsConfig {
    roots: Vec<u8>,
    domain: Option<String>,
}

impl ClientTlsConfig {
    /// No CA yet, the name from the target's host.
    pub fn new() -> ClientTlsConfig {
        ClientTlsConfig::default()
    }

    /// Trusts `ca` too.
    pub fn ca_certificate(mut self, ca: Certificate) -> ClientTlsConfig {
        self.roots.extend_from_slice(&ca.pem);
        self.roots.push(b'\n');
        self
    }

    /// Expects the server's certificate to name `domain` (default: the target's host).
    pub fn domain_name(mut self, domain: impl Into<String>) -> ClientTlsConfig {
        self.domain = Some(domain.into());
        self
    }

    /// The CAs (PEM) and the expected name.
    pub(crate) fn parts(&self) -> (&[u8], Option<&str>) {
        (&self.roots, self.domain.as_deref())
    }
}

/// A server's TLS: its identity.
#[derive(Debug, Clone, Default)]
pub struct ServerTlsConfig {
    identity: Option<Identity>,
}

impl ServerTlsConfig {
    /// No identity yet.
    pub fn new() -> ServerTlsConfig {
        ServerTlsConfig::default()
    }

    /// Serves as `identity`.
    pub fn identity(mut self, identity: Identity) -> ServerTlsConfig {
        self.identity = Some(identity);
        self
    }

    /// The identity, if set.
    pub(crate) fn identity_ref(&self) -> Option<&Identity> {
        self.identity.as_ref()
    }
}
