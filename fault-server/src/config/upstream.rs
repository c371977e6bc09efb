//! `upstream:` — proxy mode: the real dependency a request no rule answers is forwarded to, as a
//! URL or a map of options, with the bounds of each option.

use std::borrow::Cow;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use yaml_config::{ConfigError, Dur};

use super::faults::StatusCode;

/// The real dependency behind the fault server (proxy mode).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamConfig {
    /// Where requests are forwarded: `http://` or `https://`, host, port, and an optional path
    /// prefix that every forwarded path is appended to.
    pub url: UpstreamUrl,
    /// Longest wait for the upstream's whole answer, from forwarding the request; past it the
    /// client gets `504` and the journal `upstream_error`. Default 30 s.
    pub timeout: Dur,
    /// Longest wait for a new connection to the upstream (TCP and TLS); past it, `502`.
    /// Default 5 s.
    pub connect_timeout: Dur,
    /// A PEM file of certificate authorities to trust for an `https://` upstream, besides the
    /// public roots (for a dependency with a private or self-signed certificate).
    pub ca: Option<PathBuf>,
    /// Idle kept-alive connections the pool keeps to the upstream. Default 256.
    pub max_idle: u32,
    /// Most connections open to the upstream at once, idle ones included; a request that finds
    /// none free waits for one (within `timeout`, else `504`). Default: a share of the files the
    /// process may open, taken from what client connections may use (see `limits`).
    pub max_connections: Option<u32>,
    /// Which upstream answers count as creating a resource, and where its id is.
    pub created_from: CreatedFrom,
}

impl UpstreamConfig {
    /// `url` with every option at its default.
    pub fn new(url: UpstreamUrl) -> UpstreamConfig {
        UpstreamConfig {
            url,
            timeout: Dur(Duration::from_secs(30)),
            connect_timeout: Dur(Duration::from_secs(5)),
            ca: None,
            max_idle: 256,
            max_connections: None,
            created_from: CreatedFrom::default(),
        }
    }
}

/// How the journal's `created` is read from an upstream's answer, so that `duplicates` judges
/// the user's real resource: an answer whose status is in `status` created the resource whose id
/// is at the JSON pointer `json` in its body, else (with `location`) its `Location` header.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct CreatedFrom {
    /// Statuses that mean "created". Default `[201]`; `[]` records no creation.
    pub status: Vec<StatusCode>,
    /// JSON pointer (RFC 6901) to the id in the answer's body. Default `/id`.
    pub json: Option<String>,
    /// Fall back to the `Location` header when the body has no id. Default true.
    pub location: bool,
}

impl Default for CreatedFrom {
    fn default() -> Self {
        CreatedFrom {
            status: vec![StatusCode(201)],
            json: Some("/id".to_string()),
            location: true,
        }
    }
}

/// An upstream's URL, checked while it is read: `http` or `https`, a host, no query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpstreamUrl {
    /// `https` (or `grpcs`) when true.
    pub tls: bool,
    /// `grpc://` or `grpcs://`: requests are forwarded over HTTP/2 (prior knowledge over plain
    /// TCP, ALPN `h2` over TLS), trailers and all, as gRPC needs; else over HTTP/1.1.
    pub http2: bool,
    /// `host:port`, the port made explicit.
    pub authority: String,
    /// The host alone (the TLS server name), without brackets for IPv6.
    pub host: String,
    /// Path prefix without a trailing `/` (empty for none).
    pub prefix: String,
}

impl UpstreamUrl {
    /// Parses `http://host[:port][/prefix]` or `https://…`; `grpc://host:port` and
    /// `grpcs://…` forward over HTTP/2.
    pub fn parse(url: &str) -> Result<UpstreamUrl, String> {
        let uri: http::Uri = url
            .parse()
            .map_err(|e| format!("{url:?} is not a URL: {e}"))?;
        let (tls, http2) = match uri.scheme_str() {
            Some("http") => (false, false),
            Some("https") => (true, false),
            Some("grpc") => (false, true),
            Some("grpcs") => (true, true),
            _ => {
                return Err(format!(
                    "{url:?}: an upstream is `http://host:port`, `https://host:port`, or for gRPC (HTTP/2) `grpc://host:port` or `grpcs://host:port`"
                ))
            }
        };
        let Some(auth) = uri.authority() else {
            return Err(format!("{url:?} names no host"));
        };
        if auth.as_str().contains('@') {
            return Err(format!(
                "{url:?}: credentials in the URL are not supported; the client's own headers are forwarded"
            ));
        }
        if uri.query().is_some() {
            return Err(format!("{url:?}: an upstream URL takes no query"));
        }
        let port = auth.port_u16().unwrap_or(if tls { 443 } else { 80 });
        let host = auth
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        if host.is_empty() {
            return Err(format!("{url:?} names no host"));
        }
        let authority = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        Ok(UpstreamUrl {
            tls,
            http2,
            authority,
            host,
            prefix: uri.path().trim_end_matches('/').to_string(),
        })
    }
}

impl fmt::Display for UpstreamUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = match (self.tls, self.http2) {
            (false, false) => "http",
            (true, false) => "https",
            (false, true) => "grpc",
            (true, true) => "grpcs",
        };
        write!(f, "{scheme}://{}{}", self.authority, self.prefix)
    }
}

/// What [`UpstreamUrl::parse`] takes: `http://` or `https://`, a host, no user info, no query.
const UPSTREAM_URL_PATTERN: &str = r"^https?://[^/?#@\s]+(/[^?#\s]*)?$";

impl JsonSchema for UpstreamUrl {
    fn schema_name() -> Cow<'static, str> {
        "UpstreamUrl".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "The upstream: `http://host:port` or `https://host:port`, with an optional path prefix every forwarded path is appended to.",
            "type": "string",
            "pattern": UPSTREAM_URL_PATTERN
        })
    }
}

impl<'de> Deserialize<'de> for UpstreamUrl {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        UpstreamUrl::parse(&s).map_err(de::Error::custom)
    }
}

/// `upstream:` as a map: the URL and the options of [`UpstreamConfig`].
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct UpstreamMap {
    /// Where requests are forwarded: `http://` or `https://`, host, port, optional path prefix.
    url: UpstreamUrl,
    /// Longest wait for the upstream's whole answer; past it the client gets `504`. Default 30s.
    #[serde(default)]
    timeout: Option<Dur>,
    /// Longest wait for a new connection to the upstream (TCP and TLS); past it, `502`.
    /// Default 5s.
    #[serde(default)]
    connect_timeout: Option<Dur>,
    /// A PEM file of certificate authorities to trust for an `https://` upstream, besides the
    /// public roots.
    #[serde(default)]
    ca: Option<PathBuf>,
    /// Idle kept-alive connections the pool keeps to the upstream. Default 256.
    #[serde(default)]
    max_idle: Option<u32>,
    /// Most connections open to the upstream at once, idle ones included (at least 1).
    /// Default: a share of the files the process may open.
    #[serde(default)]
    #[schemars(range(min = 1))]
    max_connections: Option<u32>,
    /// Which upstream answers count as creating a resource, and where its id is.
    #[serde(default)]
    created_from: Option<CreatedFrom>,
}

impl JsonSchema for UpstreamConfig {
    fn schema_name() -> Cow<'static, str> {
        "UpstreamConfig".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Proxy mode: a request that no rule answers is forwarded to this real dependency and its answer relayed. A URL, or a map with `url` and options.",
            "anyOf": [
                generator.subschema_for::<UpstreamUrl>(),
                generator.subschema_for::<UpstreamMap>()
            ]
        })
    }
}

impl<'de> Deserialize<'de> for UpstreamConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = UpstreamConfig;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a URL (`http://127.0.0.1:9000`) or `{ url: URL, timeout, connect_timeout, ca, max_idle, max_connections, created_from }`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<UpstreamConfig, E> {
                UpstreamUrl::parse(v)
                    .map(UpstreamConfig::new)
                    .map_err(E::custom)
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<UpstreamConfig, A::Error> {
                let f = UpstreamMap::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let mut u = UpstreamConfig::new(f.url);
                if let Some(t) = f.timeout {
                    u.timeout = t;
                }
                if let Some(t) = f.connect_timeout {
                    u.connect_timeout = t;
                }
                u.ca = f.ca;
                if let Some(n) = f.max_idle {
                    u.max_idle = n;
                }
                if let Some(n) = f.max_connections {
                    if n == 0 {
                        return Err(de::Error::custom(
                            "max_connections: at least 1 connection to the upstream",
                        ));
                    }
                    u.max_connections = Some(n);
                }
                if let Some(c) = f.created_from {
                    u.created_from = c;
                }
                Ok(u)
            }
        }
        d.deserialize_any(V)
    }
}

/// The bounds of the upstream's options, each stated in its message.
pub fn validate_upstream(u: &UpstreamConfig, origin: &str) -> Result<(), ConfigError> {
    let bad = |field: &str, message: String| {
        Err(ConfigError::at(
            origin,
            format!("upstream.{field}"),
            message,
        ))
    };
    for (field, d) in [
        ("timeout", u.timeout),
        ("connect_timeout", u.connect_timeout),
    ] {
        if d.0 < Duration::from_millis(1) || d.0 > Duration::from_secs(3600) {
            return bad(field, format!("{:?}; give 1ms to 1h", d.0));
        }
    }
    if u.max_idle > 100_000 {
        return bad("max_idle", format!("{}; give 0 to 100000", u.max_idle));
    }
    if let Some(n) = u.max_connections {
        if n == 0 || n > 100_000 {
            return bad("max_connections", format!("{n}; give 1 to 100000"));
        }
    }
    if let Some(p) = &u.created_from.json {
        if !(p.is_empty() || p.starts_with('/')) {
            return bad(
                "created_from.json",
                format!(
                    "{p:?} is not a JSON pointer: it starts with `/`, e.g. `/id` or `/data/id`"
                ),
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::*;

    #[test]
    fn parses_the_upstream_and_the_proxy_faults() {
        let cfg = Config::from_yaml(
            r#"
upstream: http://127.0.0.1:9000/api/
rules:
  - fault: forward
  - fault: { delay: { fixed: 200ms, when: after } }
  - fault: { delay: { uniform: [10ms, 20ms] } }
"#,
            "t.yaml",
        )
        .unwrap();
        let u = cfg.upstream.as_ref().unwrap();
        assert_eq!(u.url.to_string(), "http://127.0.0.1:9000/api");
        assert_eq!(u.timeout.0, Duration::from_secs(30));
        assert_eq!(u.created_from, CreatedFrom::default());
        assert_eq!(cfg.rules[0].fault, FaultConfig::Forward);
        assert_eq!(
            cfg.rules[1].fault,
            FaultConfig::Delay(DelayFault {
                spec: DelaySpec::Fixed(Duration::from_millis(200)),
                when: DelayWhen::After
            })
        );
        let cfg = Config::from_yaml(
            "upstream:\n  url: https://payments.example:8443\n  timeout: 2s\n  created_from: { status: [200, 201], json: /data/id, location: false }\n",
            "t.yaml",
        )
        .unwrap();
        let u = cfg.upstream.unwrap();
        assert!(u.url.tls);
        assert_eq!(u.url.authority, "payments.example:8443");
        assert_eq!(u.timeout.0, Duration::from_secs(2));
        assert_eq!(
            u.created_from.status,
            vec![StatusCode(200), StatusCode(201)]
        );
        assert_eq!(u.created_from.json.as_deref(), Some("/data/id"));
        assert!(!u.created_from.location);
        assert_eq!(
            UpstreamUrl::parse("https://example.com").unwrap().authority,
            "example.com:443"
        );
    }

    #[test]
    fn proxy_settings_that_cannot_work_are_refused_with_their_place() {
        let cases = [
            (
                "rules:\n  - fault: forward\n",
                "rules[0].fault",
                "needs an upstream",
            ),
            ("upstream: ftp://x:21\n", "t:1:", "`http://host:port`"),
            (
                "upstream: http://127.0.0.1:9/?a=1\n",
                "t:1:",
                "takes no query",
            ),
            (
                "upstream: { url: http://127.0.0.1:9, timeout: 0ms }\n",
                "upstream.timeout",
                "give 1ms to 1h",
            ),
            (
                "upstream: { url: http://127.0.0.1:9, created_from: { json: id } }\n",
                "upstream.created_from.json",
                "JSON pointer",
            ),
            (
                "upstream: { url: http://127.0.0.1:9, retries: 3 }\n",
                "t:1:",
                "unknown field `retries`",
            ),
            (
                "rules:\n  - fault: { delay: { fixed: 1s, uniform: [1s, 2s] } }\n",
                "t:2:",
                "one of `fixed`",
            ),
            (
                "rules:\n  - fault: { delay: { fixed: 1s, when: during } }\n",
                "t:2:",
                "unknown variant `during`",
            ),
        ];
        for (yaml, place, what) in cases {
            let err = Config::from_yaml(yaml, "t").unwrap_err().to_string();
            assert!(err.contains(place) && err.contains(what), "{yaml}: {err}");
        }
        // `--upstream` satisfies a `forward` rule the file has.
        let cfg = Config::from_yaml_with("rules:\n  - fault: forward\n", "t", |c| {
            c.set_upstream(UpstreamUrl::parse("http://127.0.0.1:9").unwrap())
        })
        .unwrap();
        assert!(cfg.upstream.is_some());
    }
}
