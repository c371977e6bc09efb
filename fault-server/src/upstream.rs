//! Proxy mode: the real dependency behind the fault server.
//!
//! A request that no rule answers (or that a rule `forward`s, or a `drop`, `delay` or processing
//! fault lets through) is sent to the upstream as it came — method, path and query under the
//! upstream's prefix, headers without the hop-by-hop ones, the body — over a pool of kept-alive
//! HTTP/1.1 connections (TLS for `https://`). Its answer is read whole, within the server's body
//! limit, so that the journal can say what the upstream did (`upstream_status`, `upstream_us`,
//! `created`) whatever the fault then does to the client's side: relay it, lose it (`drop`), or
//! hold it (`delay` after).
//!
//! An upstream that cannot be reached, breaks the exchange or answers too much is answered `502`;
//! one that takes longer than `upstream.timeout`, `504`; both are journaled as `upstream_error`,
//! so the checks can tell the dependency's failure from an injected one.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderName};
use http::{HeaderMap, HeaderValue, Method, Request, Uri};
use http_body_util::{BodyExt, Full, Limited};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use crate::config::{CreatedFrom, UpstreamConfig, UpstreamUrl};

/// The upstream could not be prepared (its CA file).
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// The `ca` file could not be read or holds no certificate.
    #[error("upstream.ca {path}: {reason}")]
    Ca {
        /// The file.
        path: String,
        /// Why it is unusable.
        reason: String,
    },
    /// rustls refused the configuration.
    #[error("upstream TLS: {0}")]
    Tls(#[from] rustls::Error),
}

/// The pooled client to the upstream, built once when the server starts.
pub(crate) struct Upstream {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    url: UpstreamUrl,
    timeout: Duration,
    created_from: CreatedFrom,
    /// Largest answer read (the server's `limits.max_body`).
    max_body: usize,
}

/// The upstream's whole answer.
#[derive(Debug)]
pub(crate) struct UpstreamReply {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    /// The resource it created, read as `created_from` says.
    pub(crate) created: Option<String>,
}

/// Why the upstream gave no answer.
#[derive(Debug)]
pub(crate) enum UpstreamFailure {
    /// No connection could be made (refused, unreachable, TLS refused, connect timeout).
    Connect(String),
    /// The upstream took longer than `upstream.timeout`.
    Timeout(Duration),
    /// The exchange broke: the connection closed or reset mid-answer, or the answer was not HTTP.
    Broken(String),
    /// The answer's body was over the server's limit.
    TooLarge(usize),
}

impl UpstreamFailure {
    /// The status the client gets: `504` for a timeout, else `502`.
    pub(crate) fn status(&self) -> u16 {
        match self {
            UpstreamFailure::Timeout(_) => 504,
            _ => 502,
        }
    }

    /// A sentence for the client and the log.
    pub(crate) fn detail(&self) -> String {
        match self {
            UpstreamFailure::Connect(e) => format!("the upstream could not be reached: {e}"),
            UpstreamFailure::Timeout(d) => {
                format!("the upstream did not answer within {d:?}")
            }
            UpstreamFailure::Broken(e) => format!("the upstream's answer broke off: {e}"),
            UpstreamFailure::TooLarge(n) => {
                format!("the upstream's answer is over the server's {n}-byte body limit")
            }
        }
    }
}

/// Headers that belong to one connection, not to the message (RFC 9110 §7.6.1), plus the
/// framing the forwarded body gets anew.
const HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    HeaderName::from_static("proxy-connection"),
];

impl Upstream {
    /// A pool to `cfg.url`; `max_body` bounds every answer read.
    pub(crate) fn new(cfg: &UpstreamConfig, max_body: u64) -> Result<Upstream, UpstreamError> {
        let mut roots = rustls::RootCertStore::empty();
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if let Some(path) = &cfg.ca {
            let bad = |reason: String| UpstreamError::Ca {
                path: path.display().to_string(),
                reason,
            };
            let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
            let mut n = 0;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| bad(format!("not PEM certificates: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| bad(format!("unusable certificate: {e}")))?;
                n += 1;
            }
            if n == 0 {
                return Err(bad("holds no PEM certificate".into()));
            }
        }
        let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(cfg.connect_timeout.0));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(cfg.max_idle as usize)
            .pool_idle_timeout(Duration::from_secs(60))
            .build(connector);
        Ok(Upstream {
            client,
            url: cfg.url.clone(),
            timeout: cfg.timeout.0,
            created_from: cfg.created_from.clone(),
            max_body: usize::try_from(max_body).unwrap_or(usize::MAX),
        })
    }

    /// Where a request for `path_and_query` goes.
    fn uri(&self, path_and_query: &str) -> Result<Uri, http::Error> {
        let scheme = if self.url.tls { "https" } else { "http" };
        Uri::builder()
            .scheme(scheme)
            .authority(self.url.authority.as_str())
            .path_and_query(format!("{}{}", self.url.prefix, path_and_query))
            .build()
    }

    /// Sends the request and reads the whole answer, within `upstream.timeout`.
    pub(crate) async fn forward(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: Bytes,
        tls: bool,
    ) -> Result<UpstreamReply, UpstreamFailure> {
        let pq = uri.path_and_query().map_or("/", |p| p.as_str());
        let target = self
            .uri(pq)
            .map_err(|e| UpstreamFailure::Broken(format!("cannot make the upstream URL: {e}")))?;
        let mut req = Request::builder()
            .method(method.clone())
            .uri(target)
            .body(Full::new(body))
            .map_err(|e| UpstreamFailure::Broken(e.to_string()))?;
        // Headers the client's `Connection` names are hop-by-hop too (RFC 9110 §7.6.1).
        let named: Vec<String> = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(|t| t.trim().to_ascii_lowercase())
            .filter(|t| !t.is_empty())
            .collect();
        let h = req.headers_mut();
        for (name, value) in headers {
            let skip = HOP_BY_HOP.contains(name)
                || name == header::HOST
                || name == header::CONTENT_LENGTH
                || named.iter().any(|n| n == name.as_str());
            if !skip {
                h.append(name.clone(), value.clone());
            }
        }
        // What the client asked for, for an upstream that builds absolute URLs.
        let asked = headers.get(header::HOST).cloned().or_else(|| {
            uri.authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
        });
        if let Some(host) = asked {
            h.insert(HeaderName::from_static("x-forwarded-host"), host);
        }
        h.insert(
            HeaderName::from_static("x-forwarded-proto"),
            HeaderValue::from_static(if tls { "https" } else { "http" }),
        );
        let exchange = async {
            let res = self.client.request(req).await.map_err(|e| {
                if e.is_connect() {
                    UpstreamFailure::Connect(error_chain(&e))
                } else {
                    UpstreamFailure::Broken(error_chain(&e))
                }
            })?;
            let (parts, body) = res.into_parts();
            let body = Limited::new(body, self.max_body)
                .collect()
                .await
                .map_err(|e| {
                    if e.is::<http_body_util::LengthLimitError>() {
                        UpstreamFailure::TooLarge(self.max_body)
                    } else {
                        UpstreamFailure::Broken(e.to_string())
                    }
                })?
                .to_bytes();
            Ok::<_, UpstreamFailure>((parts, body))
        };
        let (parts, body) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| UpstreamFailure::Timeout(self.timeout))??;
        let mut headers = parts.headers;
        for name in &HOP_BY_HOP {
            headers.remove(name);
        }
        if method != Method::HEAD {
            // The relayed body is framed anew.
            headers.remove(header::CONTENT_LENGTH);
        }
        let status = parts.status.as_u16();
        let created = self.created(status, &headers, &body);
        Ok(UpstreamReply {
            status,
            headers,
            body,
            created,
        })
    }

    /// The id of what the answer created, as `created_from` says.
    fn created(&self, status: u16, headers: &HeaderMap, body: &[u8]) -> Option<String> {
        let c = &self.created_from;
        if !c.status.iter().any(|s| s.0 == status) {
            return None;
        }
        let from_json = c.json.as_deref().and_then(|pointer| {
            let v: serde_json::Value = serde_json::from_slice(body).ok()?;
            match v.pointer(pointer)? {
                serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
                serde_json::Value::Number(n) => Some(n.to_string()),
                _ => None,
            }
        });
        from_json.or_else(|| {
            c.location
                .then(|| {
                    headers
                        .get(header::LOCATION)?
                        .to_str()
                        .ok()
                        .map(str::to_string)
                })
                .flatten()
        })
    }
}

/// An error and its causes, in one line.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let s = c.to_string();
        if !out.contains(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cause = c.source();
    }
    out
}

/// Microseconds since `start`.
pub(crate) fn elapsed_us(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StatusCode;

    fn upstream(created_from: CreatedFrom) -> Upstream {
        let mut cfg = UpstreamConfig::new(UpstreamUrl::parse("http://127.0.0.1:9/api/").unwrap());
        cfg.created_from = created_from;
        Upstream::new(&cfg, 1 << 20).unwrap()
    }

    #[tokio::test]
    async fn forwarded_paths_go_under_the_prefix() {
        let u = upstream(CreatedFrom::default());
        assert_eq!(
            u.uri("/orders?x=1").unwrap().to_string(),
            "http://127.0.0.1:9/api/orders?x=1"
        );
    }

    #[tokio::test]
    async fn the_created_id_comes_from_the_body_then_the_location() {
        let u = upstream(CreatedFrom::default());
        let mut h = HeaderMap::new();
        assert_eq!(
            u.created(201, &h, br#"{"id":"ord_1"}"#),
            Some("ord_1".into())
        );
        assert_eq!(u.created(201, &h, br#"{"id":42}"#), Some("42".into()));
        assert_eq!(
            u.created(200, &h, br#"{"id":"ord_1"}"#),
            None,
            "not a creation"
        );
        h.insert(header::LOCATION, HeaderValue::from_static("/orders/ord_2"));
        assert_eq!(u.created(201, &h, b"created"), Some("/orders/ord_2".into()));
        let u = upstream(CreatedFrom {
            status: vec![StatusCode(200), StatusCode(201)],
            json: Some("/data/payment_id".into()),
            location: false,
        });
        assert_eq!(
            u.created(200, &h, br#"{"data":{"payment_id":"p9"}}"#),
            Some("p9".into())
        );
        assert_eq!(u.created(201, &h, b"{}"), None, "no Location fallback");
    }
}
