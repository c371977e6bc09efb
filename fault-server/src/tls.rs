//! TLS for the fault server: a certificate from files, or one generated at start for 127.0.0.1
//! and localhost; ALPN offers `h2` and `http/1.1`.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// The server's TLS configuration, and its certificate as PEM (to give clients as their CA when
/// it is self-signed).
#[derive(Clone)]
pub struct ServerTls {
    pub(crate) acceptor: tokio_rustls::TlsAcceptor,
    certificate_pem: String,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerTls")
    }
}

/// TLS settings that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("{path}: cannot read: {source}")]
    Read {
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file holds no usable PEM.
    #[error("{path}: {reason}")]
    Pem {
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The certificate could not be generated or used.
    #[error("TLS configuration: {0}")]
    Config(String),
}

impl ServerTls {
    /// From a PEM certificate chain and its PEM private key.
    pub fn from_files(cert: &Path, key: &Path) -> Result<ServerTls, TlsError> {
        let read = |p: &Path| {
            std::fs::read(p).map_err(|source| TlsError::Read {
                path: p.display().to_string(),
                source,
            })
        };
        let cert_pem = read(cert)?;
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<_, _>>()
            .map_err(|e| TlsError::Pem {
                path: cert.display().to_string(),
                reason: format!("not PEM certificates: {e}"),
            })?;
        if certs.is_empty() {
            return Err(TlsError::Pem {
                path: cert.display().to_string(),
                reason: "no CERTIFICATE block in the file".into(),
            });
        }
        let key_der = PrivateKeyDer::from_pem_slice(&read(key)?).map_err(|e| TlsError::Pem {
            path: key.display().to_string(),
            reason: format!("no usable PRIVATE KEY block: {e}"),
        })?;
        ServerTls::build(
            certs,
            key_der,
            String::from_utf8_lossy(&cert_pem).into_owned(),
        )
    }

    /// A certificate made now, for `127.0.0.1`, `::1` and `localhost`, valid for a year.
    pub fn self_signed() -> Result<ServerTls, TlsError> {
        let names = vec![
            "127.0.0.1".to_string(),
            "::1".to_string(),
            "localhost".to_string(),
        ];
        let ck = rcgen::generate_simple_self_signed(names)
            .map_err(|e| TlsError::Config(format!("cannot generate a certificate: {e}")))?;
        let pem = ck.cert.pem();
        let key = PrivateKeyDer::try_from(ck.signing_key.serialize_der())
            .map_err(|e| TlsError::Config(e.to_string()))?;
        ServerTls::build(vec![ck.cert.der().clone()], key, pem)
    }

    fn build(
        certs: Vec<CertificateDer<'static>>,
        key: PrivateKeyDer<'static>,
        certificate_pem: String,
    ) -> Result<ServerTls, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| TlsError::Config(format!("the key does not fit the certificate: {e}")))?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Ok(ServerTls {
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            certificate_pem,
        })
    }

    /// The server's certificate (chain), PEM: what a client gives as its CA when it is
    /// self-signed.
    pub fn certificate_pem(&self) -> &str {
        &self.certificate_pem
    }
}
