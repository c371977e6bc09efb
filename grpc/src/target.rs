//! `grpc://HOST:PORT` and `grpcs://HOST:PORT`: a gRPC target as users name it, made into the
//! transport's [`Target`] — HTTP/2 always (prior knowledge over plain TCP, ALPN `h2` over TLS),
//! with the caller's TLS settings for `grpcs://`.
//!
//! Why here and not in `transport`: the transport speaks HTTP and knows no scheme but `http` and
//! `https`; that `grpc` means h2c is gRPC's convention, so it is this crate's to apply.

use transport::{Connect, Target, TargetError};

/// Whether `url` names a gRPC target (`grpc://` or `grpcs://`).
pub fn is_grpc_url(url: &str) -> bool {
    scheme_rest(url).is_some()
}

/// `grpc://…` as `http://…`, `grpcs://…` as `https://…`; `None` for any other URL.
pub fn http_url(url: &str) -> Option<String> {
    let (tls, rest) = scheme_rest(url)?;
    Some(format!("{}://{rest}", if tls { "https" } else { "http" }))
}

/// `(tls, what follows "://")` of a gRPC URL, the scheme matched without regard to case.
fn scheme_rest(url: &str) -> Option<(bool, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    if scheme.eq_ignore_ascii_case("grpc") {
        Some((false, rest))
    } else if scheme.eq_ignore_ascii_case("grpcs") {
        Some((true, rest))
    } else {
        None
    }
}

/// The transport's target for a gRPC URL, reached over HTTP/2 with `how`'s TLS settings,
/// streams and limits. The URL's path, if any, is refused: a call's path is its method.
pub fn target(url: &str, how: &Connect) -> Result<Target, TargetError> {
    let invalid = |reason: &str| TargetError::Invalid {
        url: url.to_string(),
        reason: reason.to_string(),
    };
    let http =
        http_url(url).ok_or_else(|| invalid("expected grpc://HOST:PORT or grpcs://HOST:PORT"))?;
    let mut target = Target::with(
        &http,
        &Connect {
            http2: true,
            ..how.clone()
        },
    )?;
    if !target.base_path.is_empty() {
        return Err(invalid(
            "a gRPC target has no path: give grpc://HOST:PORT; the method goes in --call",
        ));
    }
    target.url = url.to_string();
    target.base_path = String::new();
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_schemes_map_to_http2_targets() {
        assert_eq!(
            http_url("grpc://127.0.0.1:9").as_deref(),
            Some("http://127.0.0.1:9")
        );
        assert_eq!(http_url("GRPCS://h:9").as_deref(), Some("https://h:9"));
        assert_eq!(http_url("http://h:9"), None);
        assert!(is_grpc_url("grpc://x:1") && !is_grpc_url("https://x:1"));
        let t = target("grpc://127.0.0.1:9", &Connect::default()).unwrap();
        assert!(t.http2.is_some() && t.tls.is_none());
        assert_eq!(t.url, "grpc://127.0.0.1:9");
        let tls = target("grpcs://127.0.0.1:9", &Connect::default()).unwrap();
        assert!(tls.http2.is_some() && tls.tls.is_some());
        for bad in ["http://127.0.0.1:9", "grpc://127.0.0.1:9/orders", "grpc://"] {
            assert!(target(bad, &Connect::default()).is_err(), "{bad}");
        }
    }
}
