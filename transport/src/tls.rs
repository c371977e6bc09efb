//! TLS for the client transport: rustls, built once per target and shared by its connections.
//!
//! Trust comes from Mozilla's roots (webpki-roots, the same on every machine) plus any
//! `--cacert`; `--insecure` trusts any certificate (for a service with a self-made one, never for
//! a verdict about its TLS). A client certificate (`--cert`, `--key`) makes it mutual TLS. ALPN
//! offers `h2` when HTTP/2 is wanted, else `http/1.1`.
//!
//! Why errors get a kind of their own: "the target is unreachable" and "the target's certificate
//! is not trusted" need different fixes. A failed handshake is [`ErrorKind::Tls`] with the reason
//! spelled out — unknown issuer, name mismatch, expired — and what to do about it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use history::ErrorKind;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use serde::Deserialize;

use crate::AttemptError;

/// TLS settings as a user gives them: flags, or `tls:` in a scenario.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsOptions {
    /// A PEM file of CA certificates to trust besides the public roots.
    #[serde(default)]
    pub ca: Option<PathBuf>,
    /// Trust any certificate.
    #[serde(default)]
    pub insecure: bool,
    /// A PEM client certificate (chain), for mutual TLS.
    #[serde(default)]
    pub cert: Option<PathBuf>,
    /// The PEM private key of `cert`.
    #[serde(default)]
    pub key: Option<PathBuf>,
    /// Certificates (PEM) to trust besides `ca`: the embedded fault server's own, when it makes
    /// one, so a scenario needs no flag to trust it.
    #[serde(skip)]
    pub trusted_pem: Vec<String>,
}

/// TLS settings that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    /// A file could not be read.
    #[error("{what} {path}: cannot read: {source}")]
    Read {
        /// Which file it is (`--cacert`, `--cert`, `--key`).
        what: &'static str,
        /// The file.
        path: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// A file holds no usable PEM.
    #[error("{what} {path}: {reason}")]
    Pem {
        /// Which file it is.
        what: &'static str,
        /// The file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// `--cert` without `--key`, or the other way round.
    #[error("mutual TLS needs both --cert and --key")]
    HalfAPair,
    /// rustls refused the configuration (e.g. a key that does not match its certificate).
    #[error("TLS configuration: {0}")]
    Config(String),
}

/// A client TLS configuration, built once.
#[derive(Clone)]
pub struct ClientTls {
    connector: tokio_rustls::TlsConnector,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClientTls")
    }
}

impl ClientTls {
    /// The configuration for `opts`, offering `h2` in ALPN when `http2`.
    pub fn new(opts: &TlsOptions, http2: bool) -> Result<ClientTls, TlsSetupError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsSetupError::Config(e.to_string()))?;
        let builder = if opts.insecure {
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        } else {
            let mut roots = rustls::RootCertStore::empty();
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            if let Some(ca) = &opts.ca {
                for cert in read_certs("--cacert", ca)? {
                    roots.add(cert).map_err(|e| TlsSetupError::Pem {
                        what: "--cacert",
                        path: ca.display().to_string(),
                        reason: format!("not a usable CA certificate: {e}"),
                    })?;
                }
            }
            for pem in &opts.trusted_pem {
                for cert in CertificateDer::pem_slice_iter(pem.as_bytes()).flatten() {
                    roots.add(cert).map_err(|e| {
                        TlsSetupError::Config(format!("the server's own certificate: {e}"))
                    })?;
                }
            }
            builder.with_root_certificates(roots)
        };
        let mut config = match (&opts.cert, &opts.key) {
            (Some(cert), Some(key)) => builder
                .with_client_auth_cert(read_certs("--cert", cert)?, read_key(key)?)
                .map_err(|e| TlsSetupError::Config(e.to_string()))?,
            (None, None) => builder.with_no_client_auth(),
            _ => return Err(TlsSetupError::HalfAPair),
        };
        config.alpn_protocols = if http2 {
            vec![b"h2".to_vec()]
        } else {
            vec![b"http/1.1".to_vec()]
        };
        Ok(ClientTls {
            connector: tokio_rustls::TlsConnector::from(Arc::new(config)),
        })
    }

    /// The TLS handshake over `tcp` with `host` (name or address): the stream, and whether the
    /// server agreed to HTTP/2.
    pub async fn handshake(
        &self,
        host: &str,
        tcp: tokio::net::TcpStream,
    ) -> Result<(tokio_rustls::client::TlsStream<tokio::net::TcpStream>, bool), AttemptError> {
        let name = ServerName::try_from(host.to_string()).map_err(|e| AttemptError {
            kind: ErrorKind::Tls,
            message: format!("{host:?} cannot be a TLS server name: {e}"),
        })?;
        let stream = self
            .connector
            .connect(name, tcp)
            .await
            .map_err(|e| handshake_error(host, &e))?;
        let h2 = stream.get_ref().1.alpn_protocol() == Some(b"h2");
        Ok((stream, h2))
    }
}

/// A failed handshake, with the reason in words a user can act on.
fn handshake_error(host: &str, e: &std::io::Error) -> AttemptError {
    let tls = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    let reason = match tls {
        Some(rustls::Error::InvalidCertificate(c)) => match c {
            CertificateError::UnknownIssuer => format!(
                "unknown issuer: {host}'s certificate is not signed by a trusted CA (give the CA \
                 with --cacert, or --insecure to trust any certificate)"
            ),
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
                format!("name mismatch: the certificate does not name {host}")
            }
            CertificateError::Expired | CertificateError::ExpiredContext { .. } => {
                format!("expired: {host}'s certificate is no longer valid")
            }
            CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
                format!("not valid yet: {host}'s certificate starts later")
            }
            CertificateError::Revoked => format!("revoked: {host}'s certificate was revoked"),
            other => format!("invalid certificate: {other:?}"),
        },
        Some(rustls::Error::NoApplicationProtocol) => {
            "no common application protocol (ALPN): the server speaks neither h2 nor http/1.1 as asked"
                .to_string()
        }
        Some(other) => format!("TLS handshake failed: {other}"),
        None => match e.kind() {
            std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset => {
                format!("TLS handshake failed: {host} closed the connection (is it serving TLS on this port?)")
            }
            _ => format!("TLS handshake failed: {e}"),
        },
    };
    AttemptError {
        kind: ErrorKind::Tls,
        message: reason,
    }
}

fn read_certs(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsSetupError> {
    let bytes = std::fs::read(path).map_err(|source| TlsSetupError::Read {
        what,
        path: path.display().to_string(),
        source,
    })?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<_, _>>()
        .map_err(|e| TlsSetupError::Pem {
            what,
            path: path.display().to_string(),
            reason: format!("not PEM certificates: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsSetupError::Pem {
            what,
            path: path.display().to_string(),
            reason: "no CERTIFICATE block in the file".into(),
        });
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsSetupError> {
    let bytes = std::fs::read(path).map_err(|source| TlsSetupError::Read {
        what: "--key",
        path: path.display().to_string(),
        source,
    })?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsSetupError::Pem {
        what: "--key",
        path: path.display().to_string(),
        reason: format!("no usable PRIVATE KEY block: {e}"),
    })
}

/// `--insecure`: accepts any certificate, still checking the handshake's signatures.
#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
