//! TLS for the client transport: rustls, built once per target and shared by its connections.
//!
//! Trust comes from Mozilla's roots (webpki-roots, the same on every machine) plus any
//! `--cacert`; `--insecure` trusts any certificate (for a service with a self-made one, never for
//! a verdict about its TLS). A client certificate (`--cert`, `--key`) makes it mutual TLS. ALPN
//! offers `h2` when HTTP/2 is wanted, else `http/1.1`.
//!
//! A server certificate that is byte for byte one of those given with `--cacert` is trusted as
//! it is (its name still checked), as curl does: the usual self-signed pair of
//! `openssl req -x509 … -addext subjectAltName=…` is marked CA:TRUE, which WebPKI refuses as a
//! server's own certificate, yet it is exactly the certificate the user said to trust.
//!
//! Why errors get a kind of their own: "the target is unreachable" and "the target's certificate
//! is not trusted" need different fixes. A failed handshake is [`ErrorKind::Tls`] with the reason
//! spelled out in one sentence — unknown issuer, name mismatch, expired, a CA certificate used as
//! the server's, … — and what to do about it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use history::ErrorKind;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use serde::Deserialize;

use crate::AttemptError;

/// TLS settings as a user gives them: flags, or `tls:` in a scenario.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
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
            let mut given = Vec::new();
            if let Some(ca) = &opts.ca {
                for cert in read_certs("--cacert", ca)? {
                    given.push(cert.clone());
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
            let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsSetupError::Config(e.to_string()))?;
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(GivenOrWebPki { webpki, given }))
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

/// A certificate refused, in one sentence with its remedy.
// The deprecated variants are still what older verifiers report.
#[allow(deprecated)]
pub fn certificate_error(host: &str, c: &CertificateError) -> String {
    const TRUST: &str = "give the certificate that signed it with --cacert, or --insecure to \
                         trust any certificate";
    match c {
        CertificateError::UnknownIssuer => format!(
            "unknown issuer: {host}'s certificate is not signed by a trusted CA (give the CA \
             with --cacert, or --insecure to trust any certificate)"
        ),
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => {
            format!(
                "name mismatch: the certificate does not name {host} (connect by a name it has, \
                 or give the server a certificate whose subjectAltName has {host})"
            )
        }
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => format!(
            "expired: {host}'s certificate is no longer valid (renew it, or check this \
             machine's clock)"
        ),
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => {
            format!("not valid yet: {host}'s certificate starts later (check this machine's clock)")
        }
        CertificateError::Revoked => {
            format!(
                "revoked: {host}'s certificate was revoked by its CA (the server needs a new one)"
            )
        }
        CertificateError::BadEncoding => format!(
            "bad encoding: {host}'s certificate is not valid DER (the server sends a broken \
             certificate; check its certificate file)"
        ),
        CertificateError::UnhandledCriticalExtension => format!(
            "unhandled critical extension: {host}'s certificate has an extension marked critical \
             that this client does not know ({TRUST})"
        ),
        CertificateError::UnknownRevocationStatus => {
            format!("unknown revocation status: no revocation list covers {host}'s certificate")
        }
        CertificateError::ExpiredRevocationList
        | CertificateError::ExpiredRevocationListContext { .. } => {
            "expired revocation list: the certificate revocation list is out of date (update it)"
                .to_string()
        }
        CertificateError::BadSignature => format!(
            "bad signature: {host}'s certificate's signature does not verify against its \
             issuer (a wrong or altered certificate; {TRUST})"
        ),
        CertificateError::UnsupportedSignatureAlgorithm
        | CertificateError::UnsupportedSignatureAlgorithmContext { .. }
        | CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => format!(
            "unsupported signature algorithm: {host}'s certificate is signed with an algorithm \
             this client does not accept (reissue it with RSA-PSS/PKCS#1 SHA-256+, ECDSA or \
             Ed25519, or use --insecure)"
        ),
        CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
            format!(
                "invalid purpose: {host}'s certificate is not for TLS servers (its extendedKeyUsage \
                 lacks serverAuth; reissue it with serverAuth)"
            )
        }
        CertificateError::InvalidOcspResponse => {
            format!("invalid OCSP response: the revocation status {host} stapled does not verify")
        }
        CertificateError::ApplicationVerificationFailure => {
            format!("rejected: {host}'s certificate was refused by this client's own check")
        }
        CertificateError::Other(other) => {
            other_certificate_error(host, &format!("{other:?}"), &other.to_string())
        }
        other => format!("invalid certificate: {other}"),
    }
}

/// The WebPKI errors rustls passes on as `Other`, by name.
fn other_certificate_error(host: &str, debug: &str, shown: &str) -> String {
    const CASES: [(&str, &str); 10] = [
        (
            "CaUsedAsEndEntity",
            "the server's certificate is a CA certificate (basicConstraints CA:TRUE); give that \
             very certificate with --cacert to trust it as it is, or issue the server a \
             certificate of its own signed by that CA",
        ),
        (
            "EndEntityUsedAsCa",
            "a certificate in the chain that signs another is not a CA (basicConstraints \
             CA:FALSE); the server's chain is wrong",
        ),
        (
            "PathLenConstraintViolated",
            "the chain is longer than a CA's pathLenConstraint allows; the server's chain is wrong",
        ),
        (
            "NameConstraintViolation",
            "the certificate names a host its CA's name constraints forbid",
        ),
        (
            "RequiredEkuNotFound",
            "the certificate is not for TLS servers (extendedKeyUsage lacks serverAuth)",
        ),
        (
            "MaximumPathDepthExceeded",
            "the chain is too long to verify; the server sends too many intermediates",
        ),
        (
            "UnsupportedCertVersion",
            "the certificate is not X.509 version 3; reissue it",
        ),
        (
            "MissingOrMalformedExtensions",
            "the certificate's extensions are missing or malformed; reissue it",
        ),
        (
            "ExtensionValueInvalid",
            "a certificate extension has an invalid value; reissue it",
        ),
        (
            "SignatureAlgorithmMismatch",
            "the certificate's two signature algorithm fields differ; reissue it",
        ),
    ];
    match CASES.iter().find(|(name, _)| debug.contains(name)) {
        Some((_, sentence)) => format!("invalid certificate from {host}: {sentence}"),
        None => format!(
            "invalid certificate from {host} ({shown}): give the certificate that signed it \
             with --cacert, or --insecure to trust any certificate"
        ),
    }
}

/// A failed handshake, with the reason in words a user can act on.
fn handshake_error(host: &str, e: &std::io::Error) -> AttemptError {
    let tls = e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>());
    let reason = match tls {
        Some(rustls::Error::InvalidCertificate(c)) => certificate_error(host, c),
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

/// The usual WebPKI verification, and, where it refuses a certificate that is byte for byte one
/// given with `--cacert`, that certificate trusted as it is (its name still checked).
#[derive(Debug)]
struct GivenOrWebPki {
    webpki: Arc<WebPkiServerVerifier>,
    given: Vec<CertificateDer<'static>>,
}

impl ServerCertVerifier for GivenOrWebPki {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let refused = match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Ok(v) => return Ok(v),
            Err(e) => e,
        };
        if !self.given.iter().any(|c| c.as_ref() == end_entity.as_ref()) {
            return Err(refused);
        }
        check_given(end_entity, server_name, now).map_err(rustls::Error::InvalidCertificate)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

/// What a certificate given with `--cacert` is still held to when it is the server's own: its
/// dates, and its names.
fn check_given(
    cert: &CertificateDer<'_>,
    server_name: &ServerName<'_>,
    now: UnixTime,
) -> Result<(), CertificateError> {
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(cert.as_ref()) else {
        return Err(CertificateError::BadEncoding);
    };
    let now = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    let validity = parsed.validity();
    if now < validity.not_before.timestamp() {
        return Err(CertificateError::NotValidYet);
    }
    if now > validity.not_after.timestamp() {
        return Err(CertificateError::Expired);
    }
    if !names(cert, server_name) {
        return Err(CertificateError::NotValidForName);
    }
    Ok(())
}

/// Whether `cert`'s subjectAltName names `server_name`: an IP address exactly, a DNS name
/// case-insensitively, `*.` standing for one leftmost label.
fn names(cert: &CertificateDer<'_>, server_name: &ServerName<'_>) -> bool {
    let Ok((_, parsed)) = x509_parser::parse_x509_certificate(cert.as_ref()) else {
        return false;
    };
    let Ok(Some(san)) = parsed.subject_alternative_name() else {
        return false;
    };
    san.value
        .general_names
        .iter()
        .any(|n| match (n, server_name) {
            (x509_parser::extensions::GeneralName::IPAddress(bytes), ServerName::IpAddress(ip)) => {
                let ip = std::net::IpAddr::from(*ip);
                match ip {
                    std::net::IpAddr::V4(v4) => bytes[..] == v4.octets(),
                    std::net::IpAddr::V6(v6) => bytes[..] == v6.octets(),
                }
            }
            (x509_parser::extensions::GeneralName::DNSName(dns), ServerName::DnsName(host)) => {
                let host = host.as_ref();
                match dns.strip_prefix("*.") {
                    Some(rest) => host
                        .split_once('.')
                        .is_some_and(|(_, parent)| parent.eq_ignore_ascii_case(rest)),
                    None => dns.eq_ignore_ascii_case(host),
                }
            }
            _ => false,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every certificate error rustls reports reads as one sentence with what to do, never a
    /// debug print.
    #[test]
    #[allow(deprecated)]
    fn every_certificate_error_is_a_sentence() {
        let other = |name: &str| {
            #[derive(Debug)]
            struct Named(String);
            impl std::fmt::Display for Named {
                fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                    f.write_str(&self.0)
                }
            }
            impl std::error::Error for Named {}
            CertificateError::Other(rustls::OtherError(Arc::new(Named(name.into()))))
        };
        let all = [
            CertificateError::BadEncoding,
            CertificateError::Expired,
            CertificateError::NotValidYet,
            CertificateError::Revoked,
            CertificateError::UnhandledCriticalExtension,
            CertificateError::UnknownIssuer,
            CertificateError::UnknownRevocationStatus,
            CertificateError::ExpiredRevocationList,
            CertificateError::BadSignature,
            CertificateError::UnsupportedSignatureAlgorithm,
            CertificateError::NotValidForName,
            CertificateError::InvalidPurpose,
            CertificateError::InvalidOcspResponse,
            CertificateError::ApplicationVerificationFailure,
            other("CaUsedAsEndEntity"),
            other("EndEntityUsedAsCa"),
            other("RequiredEkuNotFound"),
            other("SomethingNew"),
        ];
        for e in &all {
            let m = certificate_error("example.test", e);
            assert!(!m.contains("Other(") && !m.contains('{'), "{e:?}: {m}");
            assert!(m.len() > 30 && !m.contains('\n'), "{e:?}: {m}");
        }
        assert!(certificate_error("h", &other("CaUsedAsEndEntity"))
            .contains("the server's certificate is a CA certificate (basicConstraints CA:TRUE)"));
    }
}
