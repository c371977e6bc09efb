//! The fault server's configuration file: YAML, parsed once and validated while it is parsed.
//!
//! Validation happens inside the `Deserialize` impls wherever it can, so that an error carries the
//! line and column of the offending value, not just its field path. Unknown fields are errors
//! everywhere: a typo in a rule must not silently disable a fault.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;
use yaml_config::{from_yaml_str, parse_duration, ConfigError, Dur, Size};

pub use crate::counts::{parse_count_spec, CountSpec, Counts};

/// Everything a fault server needs to know besides where to listen.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Seed for every random decision; `--seed` overrides it.
    #[serde(default)]
    pub seed: Option<u64>,
    /// How long a `hang` holds a connection when the rule gives no cap of its own.
    #[serde(default)]
    pub hang_cap: Option<Dur>,
    /// Request headers copied into the journal, besides the default set.
    #[serde(default)]
    pub capture_headers: Vec<String>,
    /// Response headers copied into the journal (`response_headers`), besides Retry-After,
    /// Location and Idempotent-Replayed.
    #[serde(default)]
    pub capture_response_headers: Vec<String>,
    /// The built-in orders resource.
    #[serde(default)]
    pub orders: OrdersConfig,
    /// Where the schedule's counters live: `local` (in this process, the default) or `shared`
    /// (in the orders' PostgreSQL database, so that several replicas count together).
    #[serde(default)]
    pub state: StateMode,
    /// Serve `https://`: `self-signed` (a certificate for 127.0.0.1 and localhost made at start)
    /// or `{ cert: FILE, key: FILE }` (PEM).
    #[serde(default)]
    pub tls: Option<TlsConfig>,
    /// What one client may cost the server: body size, time to send a head, connections.
    #[serde(default)]
    pub limits: LimitsConfig,
    /// Proxy mode: a request that no rule answers is forwarded to this real dependency and its
    /// answer relayed. `upstream: http://host:port` or a map with `url` and options.
    #[serde(default)]
    pub upstream: Option<UpstreamConfig>,
    /// gRPC: the services served beside the built-in `orders.v1.Orders`, from `.proto` files
    /// (`protos`, `import_paths`), with a canned answer per method (`responses`), and the largest
    /// message a call may carry.
    #[serde(default)]
    pub grpc: GrpcConfig,
    /// The fault schedule: rules evaluated in order, first match wins.
    #[serde(default)]
    pub rules: Vec<RuleConfig>,
    /// TCP fault proxies: each listens and forwards every connection to an upstream (a
    /// database, a cache) through Toxiproxy's toxics; every connection is a journal entry.
    #[serde(default)]
    pub proxies: Vec<crate::tcp::ProxyConfig>,
}

/// The gRPC services a fault server serves besides the built-in `orders.v1.Orders` (which is
/// always served, on the orders store).
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct GrpcConfig {
    /// `.proto` files whose services are served (compiled at start, no protoc needed).
    pub protos: Vec<PathBuf>,
    /// Directories imports are looked up in (protoc's `-I`); a proto's own directory is added
    /// when it lies outside all of them.
    pub import_paths: Vec<PathBuf>,
    /// A canned answer per method, `pkg.Service/Method: { …proto3 JSON… }`; a method without one
    /// answers its response type's default message (every field at its default). A canned
    /// answer for a built-in method (`orders.v1.Orders/GetOrder`) replaces the store's.
    pub responses: BTreeMap<String, serde_json::Value>,
    /// Largest message a call may send or be sent (gRPC's default 4 MiB); a larger request
    /// message is answered RESOURCE_EXHAUSTED, as gRPC servers do.
    pub max_message: Size,
}

impl GrpcConfig {
    /// The services this section describes, built: the `.proto` files compiled, the canned
    /// answers encoded.
    pub fn services(&self) -> Result<crate::grpc::Services, crate::grpc::ServicesError> {
        crate::grpc::Services::new(
            &self.protos,
            &self.import_paths,
            &self.responses,
            self.max_message.0,
        )
    }
}

impl Default for GrpcConfig {
    fn default() -> Self {
        GrpcConfig {
            protos: Vec::new(),
            import_paths: Vec::new(),
            responses: BTreeMap::new(),
            max_message: Size(4 << 20),
        }
    }
}

/// Bounds on what a client may cost the server. A request over one is refused — `413`, `408`,
/// `431`, `400`, or `503` at the connection limit — and journaled with outcome `rejected`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Largest request body read; a larger one is answered `413` and the rest is not read.
    pub max_body: Size,
    /// How long a request's head may take to arrive, counted from when the server starts waiting
    /// for it: after the connection opens, and after each response on a kept-alive connection.
    /// So it is also the idle timeout of a kept-alive connection. A head late by this is
    /// answered `408` and the connection closed.
    pub header_timeout: Dur,
    /// How long a request's body may take to arrive, counted from its head; a body late by this
    /// is answered `408` and the connection closed. (Entries are numbered when a head arrives
    /// and journaled in that order, so a body that never ends must not wait for ever.)
    pub body_timeout: Dur,
    /// Most bytes of request bodies held at once, all connections together; a body that would go
    /// over is answered `503` with `Retry-After: 1` before more of it is read.
    pub body_memory: Size,
    /// Largest request head (request line and headers); a larger one is answered `431`.
    pub max_head: Size,
    /// Most connections served at once; beyond them a request is answered `503` (the control API
    /// is still served). Default: 10,000, or fewer when the process may open fewer files.
    pub max_connections: Option<u32>,
    /// Most Idempotency-Keys whose attempt count is remembered (the oldest is forgotten first).
    pub tracked_keys: u32,
    /// How long writing a response may make no progress — the client's HTTP/2 flow-control
    /// window stays closed, or its socket stays full — before the server gives up on it: the
    /// HTTP/2 stream is reset (the connection's other streams go on), the HTTP/1.1 connection
    /// closed, and the entry journaled `send_timeout`. A slow reader that keeps reading is never
    /// cut.
    pub send_timeout: Dur,
    /// After refusing a request whose body is still arriving (`413`, `408`, `503`), at most this
    /// many more bytes of it are read and discarded before the connection closes, so that the
    /// client reads the answer instead of a reset.
    pub drain_bytes: Size,
    /// ... and for at most this long.
    pub drain_time: Dur,
    /// Most bytes of upstream answers (proxy mode) held at once, all requests together, from
    /// the moment they are read until they are written to the client; an answer that would go
    /// over is answered `503` with `Retry-After: 1`.
    pub response_memory: Size,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_body: Size(16 << 20),
            header_timeout: Dur(Duration::from_secs(10)),
            body_timeout: Dur(Duration::from_secs(30)),
            body_memory: Size(256 << 20),
            max_head: Size(64 << 10),
            max_connections: None,
            tracked_keys: 200_000,
            send_timeout: Dur(Duration::from_secs(30)),
            drain_bytes: Size(8 << 20),
            drain_time: Dur(Duration::from_secs(5)),
            response_memory: Size(256 << 20),
        }
    }
}

/// Where the server's certificate comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlsConfig {
    /// Made at start for 127.0.0.1, ::1 and localhost.
    SelfSigned,
    /// PEM files.
    Files {
        /// The certificate (chain).
        cert: PathBuf,
        /// Its private key.
        key: PathBuf,
    },
}

/// `tls: { cert, key }`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct TlsFiles {
    /// The certificate (chain), PEM.
    cert: PathBuf,
    /// Its private key, PEM.
    key: PathBuf,
}

impl JsonSchema for TlsConfig {
    fn schema_name() -> Cow<'static, str> {
        "TlsConfig".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Serve https://: `self-signed` (a certificate for 127.0.0.1 and localhost made at start) or `{ cert: FILE, key: FILE }` (PEM).",
            "anyOf": [
                { "type": "string", "enum": ["self-signed"] },
                generator.subschema_for::<TlsFiles>()
            ]
        })
    }
}

impl<'de> Deserialize<'de> for TlsConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = TlsConfig;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("`self-signed` or `{ cert: FILE, key: FILE }`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<TlsConfig, E> {
                match v {
                    "self-signed" => Ok(TlsConfig::SelfSigned),
                    other => Err(E::custom(format!(
                        "unknown TLS setting {other:?}: use `self-signed` or `{{ cert: FILE, key: FILE }}`"
                    ))),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<TlsConfig, A::Error> {
                let f = TlsFiles::deserialize(de::value::MapAccessDeserializer::new(map))?;
                Ok(TlsConfig::Files {
                    cert: f.cert,
                    key: f.key,
                })
            }
        }
        d.deserialize_any(V)
    }
}

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

/// A schedule on its own, as `PUT /__harness/schedule` takes it.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScheduleConfig {
    /// The new rules; they replace all the old ones.
    #[serde(default)]
    pub rules: Vec<RuleConfig>,
}

/// Which idempotency implementation `POST /orders` uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum IdempotencyImpl {
    /// Correct: the key is claimed under a UNIQUE constraint before any work is done.
    #[default]
    Unique,
    /// The classic race: SELECT by key, do the work, INSERT — no constraint.
    CheckThenInsert,
    /// Keys are ignored; every POST creates an order.
    None,
}

/// Which implementation `POST /orders/{id}/pay` uses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PayImpl {
    /// `UPDATE … WHERE status = 'pending'`: the affected row count decides.
    #[default]
    Conditional,
    /// Read the status, do the work, write unconditionally: concurrent pays both transition.
    ReadThenWrite,
}

/// Settings of the built-in orders resource.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OrdersConfig {
    /// Idempotency implementation.
    #[serde(default)]
    pub idempotency: IdempotencyImpl,
    /// Payment state-transition implementation.
    #[serde(default)]
    pub pay: PayImpl,
    /// Answer `400` to a `POST /orders` without `Idempotency-Key` (ignored by `none`).
    #[serde(default = "default_true")]
    pub require_key: bool,
    /// How long a key and its stored response are kept.
    #[serde(default = "default_key_ttl")]
    pub key_ttl: Dur,
    /// Simulated work between claiming/checking a key and writing the order (and in pay).
    #[serde(default)]
    pub work_delay: Dur,
    /// How long a key's request in flight may hold it (`unique` only). A key still in flight
    /// after that — its request's process died, or the database lost its completion — is taken
    /// over by the next request with the same key and body, which makes the order; the request
    /// that held it, if still running, then writes nothing and gets `409`. More than
    /// `work_delay`, at most `key_ttl`. Default: one minute past `work_delay`.
    #[serde(default)]
    pub claim_lease: Option<Dur>,
    /// `Retry-After` seconds sent with `409` while the key's first request is in flight.
    #[serde(default = "default_retry_after")]
    pub retry_after_s: u64,
    /// Where the orders live: an SQLite file, or a PostgreSQL server (`postgres://…`); a fresh
    /// temporary SQLite file when absent.
    #[serde(default)]
    pub database: Option<Database>,
    /// Connections in the pool.
    #[serde(default = "default_pool_size")]
    pub pool_size: u32,
    /// PostgreSQL: the longest one statement may run (`statement_timeout` on every connection),
    /// and the longest a request waits for a connection of the pool. Past it the request is
    /// answered `503` with `Retry-After` and journaled `rejected: store-unavailable`.
    #[serde(default = "default_statement_timeout")]
    pub statement_timeout: Dur,
    /// PostgreSQL: the longest a statement waits for a lock (`lock_timeout`); as above past it.
    #[serde(default = "default_lock_timeout")]
    pub lock_timeout: Dur,
}

impl Default for OrdersConfig {
    fn default() -> Self {
        OrdersConfig {
            idempotency: IdempotencyImpl::default(),
            pay: PayImpl::default(),
            require_key: true,
            key_ttl: default_key_ttl(),
            work_delay: Dur::default(),
            claim_lease: None,
            retry_after_s: default_retry_after(),
            database: None,
            pool_size: default_pool_size(),
            statement_timeout: default_statement_timeout(),
            lock_timeout: default_lock_timeout(),
        }
    }
}

impl OrdersConfig {
    /// How long a key's request in flight may hold it: `claim_lease`, else one minute past
    /// `work_delay`.
    pub fn lease(&self) -> Duration {
        self.claim_lease
            .map_or_else(|| self.work_delay.0 + Duration::from_secs(60), |d| d.0)
    }
}

fn default_true() -> bool {
    true
}
fn default_key_ttl() -> Dur {
    Dur(Duration::from_secs(24 * 3600))
}
fn default_retry_after() -> u64 {
    1
}
fn default_pool_size() -> u32 {
    16
}
fn default_statement_timeout() -> Dur {
    Dur(Duration::from_secs(5))
}
fn default_lock_timeout() -> Dur {
    Dur(Duration::from_secs(2))
}

/// Where the schedule's counters (`requests`, `hits`, `attempts`) are kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum StateMode {
    /// In this process: lock-free and free, but each replica counts for itself.
    #[default]
    Local,
    /// In the orders' PostgreSQL database: every replica sharing it counts together, at the cost
    /// of a database round trip per request.
    Shared,
}

/// The orders' database: `orders.database` in the config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Database {
    /// An SQLite database file (created when missing).
    Sqlite(PathBuf),
    /// A PostgreSQL server, `postgres://user:password@host:port/dbname?options…`.
    Postgres(PostgresUrl),
}

impl Database {
    /// The PostgreSQL URL, when the orders live on PostgreSQL.
    pub fn postgres(&self) -> Option<&PostgresUrl> {
        match self {
            Database::Postgres(u) => Some(u),
            Database::Sqlite(_) => None,
        }
    }
}

impl JsonSchema for Database {
    fn schema_name() -> Cow<'static, str> {
        "Database".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Where the orders live: an SQLite file path, or `postgres://user:password@host:port/dbname` (also `postgresql://`).",
            "type": "string",
            "minLength": 1,
            "pattern": "^(postgres(ql)?://.+|(?!.*://).+)$"
        })
    }
}

impl<'de> Deserialize<'de> for Database {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return PostgresUrl::parse(&s)
                .map(Database::Postgres)
                .map_err(de::Error::custom);
        }
        if let Some((scheme, _)) = s.split_once("://") {
            return Err(de::Error::custom(format!(
                "unsupported database URL scheme `{scheme}://`: give an SQLite file path or a `postgres://user:password@host:port/dbname` URL"
            )));
        }
        if s.is_empty() {
            return Err(de::Error::custom(
                "empty database: give an SQLite file path or a `postgres://` URL, or leave it out for a temporary SQLite file",
            ));
        }
        Ok(Database::Sqlite(PathBuf::from(s)))
    }
}

/// A PostgreSQL connection URL, checked when the config is read. Shown (in `Debug`, in errors)
/// without its password.
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresUrl {
    url: String,
}

impl PostgresUrl {
    /// Checks `url` as tokio-postgres reads it and that it names a host.
    pub fn parse(url: &str) -> Result<PostgresUrl, String> {
        let me = PostgresUrl {
            url: url.to_string(),
        };
        let cfg: tokio_postgres::Config = url
            .parse()
            .map_err(|e| format!("invalid PostgreSQL URL {}: {e}", me.redacted()))?;
        if cfg.get_hosts().is_empty() {
            return Err(format!(
                "invalid PostgreSQL URL {}: no host; give postgres://user:password@host:port/dbname",
                me.redacted()
            ));
        }
        Ok(me)
    }

    /// The URL as given, password included: for connecting only.
    pub fn as_str(&self) -> &str {
        &self.url
    }

    /// The client configuration.
    pub fn pg_config(&self) -> Result<tokio_postgres::Config, tokio_postgres::Error> {
        self.url.parse()
    }

    /// The URL without its password (in the user info or a `password=` parameter), for messages.
    pub fn redacted(&self) -> String {
        redact_url(&self.url)
    }
}

impl fmt::Debug for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Display for PostgresUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// `scheme://user:secret@host/db?password=secret` → `scheme://user@host/db?password=***`.
fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (base, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let (authority, path) = match base.find('/') {
        Some(i) => base.split_at(i),
        None => (base, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
            format!("{user}@{hosts}")
        }
        None => authority.to_string(),
    };
    let mut out = format!("{scheme}://{authority}{path}");
    if let Some(q) = query {
        let q: Vec<String> = q
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => kv.to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&q.join("&"));
    }
    out
}

/// One rule of the schedule.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Name reported in the journal and stats; `rule-N` (1-based position) when absent.
    #[serde(default)]
    pub id: Option<String>,
    /// When the rule applies; an absent matcher matches every request.
    #[serde(default, rename = "match")]
    pub matcher: MatchConfig,
    /// What happens to a matching request.
    pub fault: FaultConfig,
}

/// The conditions of a rule; all given conditions must hold.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MatchConfig {
    /// HTTP method(s), case-insensitive.
    #[serde(default)]
    pub method: Option<OneOrMany<String>>,
    /// Exact path, or a glob: `*` within a segment, `**` across segments.
    #[serde(default)]
    pub path: Option<PathPattern>,
    /// Path prefix.
    #[serde(default)]
    pub path_prefix: Option<String>,
    /// Headers that must have exactly these values (names case-insensitive).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Headers that must be present, whatever their value.
    #[serde(default)]
    pub headers_present: Vec<String>,
    /// Only from this long after the schedule was installed.
    #[serde(default)]
    pub from: Option<Dur>,
    /// Only until this long after the schedule was installed.
    #[serde(default)]
    pub until: Option<Dur>,
    /// The Nth request the server received (1-based), e.g. `3`, `"1-5"`, `"10-"`, `"every 4"`.
    #[serde(default)]
    pub requests: Option<Counts>,
    /// The Nth request that reached this rule and met its other conditions.
    #[serde(default)]
    pub hits: Option<Counts>,
    /// The Nth attempt of the same Idempotency-Key (requests without a key never match).
    #[serde(default)]
    pub attempts: Option<Counts>,
    /// Chance that a request meeting every other condition matches, in [0, 1].
    #[serde(default)]
    pub probability: Option<Probability>,
    /// Only gRPC calls of this method, `pkg.Service/Method`, or a glob of it (`pkg.Service/*`,
    /// `**` for every gRPC call); a request that is not a gRPC call never matches.
    #[serde(default)]
    pub grpc_method: Option<GrpcMethodPattern>,
    /// Only the Nth attempt of a gRPC call, as the call counts them: 1 + its
    /// `grpc-previous-rpc-attempts` (1 when it carries none). A request that is not a gRPC call
    /// never matches.
    #[serde(default)]
    pub grpc_attempts: Option<Counts>,
}

/// A gRPC method name, `pkg.Service/Method`, or a glob of one: `*` within the service or the
/// method name, `**` across both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrpcMethodPattern(pub String);

impl JsonSchema for GrpcMethodPattern {
    fn schema_name() -> Cow<'static, str> {
        "GrpcMethodPattern".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A gRPC method, `pkg.Service/Method`, or a glob of one: `*` within the service or the method name, `**` across both.",
            "type": "string",
            "minLength": 1
        })
    }
}

impl<'de> Deserialize<'de> for GrpcMethodPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Ok(GrpcMethodPattern(s.trim_start_matches('/').to_string()))
    }
}

/// What a rule does: the fault, written `fault: drop` or `fault: { status: { code: 503 } }`.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultConfig {
    /// Answer with this status, headers and body; the request is not processed.
    Status(StatusFault),
    /// Wait before or after processing (or forwarding) the request, then give its response.
    Delay(DelayFault),
    /// Send nothing and hold the connection until the client leaves or the cap passes.
    Hang(HangFault),
    /// Process the request fully (an order really is created), then close with no response.
    Drop,
    /// Abort the connection with a TCP RST.
    Reset(ResetFault),
    /// Send a broken response, then close.
    Malformed(MalformedFault),
    /// End the connection: with GOAWAY over HTTP/2, by closing it over HTTP/1.1; the request is
    /// not processed.
    GoAway,
    /// Forward the request to the upstream and relay its answer (proxy mode): what a request no
    /// rule matches gets anyway, written as a rule to exempt paths from the rules after it.
    Forward,
    /// gRPC: answer Trailers-Only with this status (and `grpc-retry-pushback-ms`); the call is
    /// not processed, and not committed.
    Grpc(GrpcFault),
    /// gRPC: send Response-Headers and part of a response message, then a failing status: the
    /// call was committed (gRFC A6: its client may not retry it).
    GrpcAfterHeaders(GrpcAfterHeadersFault),
}

/// A gRPC status to answer a call with, Trailers-Only.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrpcFault {
    /// The status code, by name (`UNAVAILABLE`) or number (`14`).
    pub code: history::GrpcCode,
    /// `grpc-message`; a short note that the status was injected when absent.
    #[serde(default)]
    pub message: Option<String>,
    /// `grpc-retry-pushback-ms`: the client must wait this long before its next attempt; a
    /// negative value asks it not to retry at all (gRFC A6). Not sent when absent.
    #[serde(default, deserialize_with = "pushback")]
    pub pushback_ms: Option<i64>,
}

/// A committed call's failure: Response-Headers, part of a message, then this status.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrpcAfterHeadersFault {
    /// The status code the call ends with, by name or number.
    pub code: history::GrpcCode,
    /// `grpc-message`; a short note that the status was injected when absent.
    #[serde(default)]
    pub message: Option<String>,
    /// `grpc-retry-pushback-ms` in the trailers (which a client must ignore: the call is
    /// committed).
    #[serde(default, deserialize_with = "pushback")]
    pub pushback_ms: Option<i64>,
    /// Process the call first (an order really is created), then fail it after its headers.
    #[serde(default)]
    pub process: bool,
}

/// `pushback_ms`: a signed 32-bit number of milliseconds, as gRFC A6 reads the header.
fn pushback<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    Ok(Some(i64::deserialize(d)?))
}

/// `grpc: UNAVAILABLE` or `grpc: { code: UNAVAILABLE, message, pushback_ms }`.
struct GrpcShorthand<T>(T);

impl<'de, T: Deserialize<'de> + From<history::GrpcCode>> Deserialize<'de> for GrpcShorthand<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de> + From<history::GrpcCode>> Visitor<'de> for V<T> {
            type Value = GrpcShorthand<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a gRPC status code (UNAVAILABLE, or 14), or a map with `code` and optional `message`, `pushback_ms`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                let code = v.parse::<history::GrpcCode>().map_err(E::custom)?;
                Ok(GrpcShorthand(T::from(code)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                let code = history::GrpcCode::from_number(v)
                    .ok_or_else(|| E::custom(history::UnknownGrpcCode(v.to_string())))?;
                Ok(GrpcShorthand(T::from(code)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                match u64::try_from(v) {
                    Ok(n) => self.visit_u64(n),
                    Err(_) => Err(E::custom(history::UnknownGrpcCode(v.to_string()))),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(GrpcShorthand)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

impl From<history::GrpcCode> for GrpcFault {
    fn from(code: history::GrpcCode) -> GrpcFault {
        GrpcFault {
            code,
            message: None,
            pushback_ms: None,
        }
    }
}

impl From<history::GrpcCode> for GrpcAfterHeadersFault {
    fn from(code: history::GrpcCode) -> GrpcAfterHeadersFault {
        GrpcAfterHeadersFault {
            code,
            message: None,
            pushback_ms: None,
            process: false,
        }
    }
}

impl FaultConfig {
    /// The fault's kind as the journal names it.
    pub fn kind(&self) -> &'static str {
        match self {
            FaultConfig::Status(_) => "status",
            FaultConfig::Delay(_) => "delay",
            FaultConfig::Hang(_) => "hang",
            FaultConfig::Drop => "drop",
            FaultConfig::GoAway => "goaway",
            FaultConfig::Reset(_) => "reset",
            FaultConfig::Malformed(_) => "malformed",
            FaultConfig::Forward => "forward",
            FaultConfig::Grpc(_) => "grpc",
            FaultConfig::GrpcAfterHeaders(_) => "grpc_after_headers",
        }
    }
}

/// A canned response.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusFault {
    /// Status code, 100–599.
    pub code: StatusCode,
    /// Extra response headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Response body; a short problem description when absent.
    #[serde(default)]
    pub body: Option<String>,
    /// `Retry-After` in seconds.
    #[serde(default)]
    pub retry_after: Option<u64>,
    /// `Retry-After` as an HTTP-date this long after the response is sent.
    #[serde(default)]
    pub retry_after_date: Option<Dur>,
}

/// How long a `delay` waits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DelaySpec {
    /// Always the same.
    Fixed(Duration),
    /// Uniform between the two bounds.
    Uniform(Duration, Duration),
    /// Log-normal with this median and shape σ (the log's standard deviation).
    Lognormal {
        /// The median delay.
        median: Duration,
        /// The log's standard deviation.
        sigma: f64,
    },
}

/// A `delay`: how long, and on which side of the request's processing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DelayFault {
    /// How long.
    pub spec: DelaySpec,
    /// Before the request is processed (or forwarded), or after, before its answer is sent.
    pub when: DelayWhen,
}

/// Which side of the processing a `delay` waits on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DelayWhen {
    /// The request waits before it is processed: a client that gives up first changed nothing.
    #[default]
    Before,
    /// The request is processed (the upstream has answered), then its answer waits: a client
    /// that gives up first does not know its order was made.
    After,
}

/// `delay:` as a map: one of `fixed`, `uniform`, `lognormal`, and `when`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [
    { "required": ["fixed"] },
    { "required": ["uniform"] },
    { "required": ["lognormal"] }
]))]
struct DelayMap {
    /// Always this long.
    #[serde(default)]
    fixed: Option<Dur>,
    /// Uniform between the two bounds: `[50ms, 150ms]`.
    #[serde(default)]
    uniform: Option<[Dur; 2]>,
    /// Log-normal: `{ median: 100ms, sigma: 0.5 }`.
    #[serde(default)]
    lognormal: Option<Lognormal>,
    /// `before` (default): wait, then process; `after`: process (or forward), then hold the
    /// answer.
    #[serde(default)]
    when: DelayWhen,
}

impl JsonSchema for DelayFault {
    fn schema_name() -> Cow<'static, str> {
        "DelayFault".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Wait, then give the normal response: a duration (`200ms`), or a map with one of `fixed`, `uniform: [50ms, 150ms]`, `lognormal: { median: 100ms, sigma: 0.5 }` and optional `when: before | after`.",
            "anyOf": [
                generator.subschema_for::<Dur>(),
                generator.subschema_for::<DelayMap>()
            ]
        })
    }
}

impl<'de> Deserialize<'de> for DelayFault {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = DelayFault;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration (\"200ms\"), or a map with one of `fixed`, `uniform: [50ms, 150ms]`, `lognormal: { median: 100ms, sigma: 0.5 }` and optional `when: before | after`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DelayFault, E> {
                Ok(DelayFault {
                    spec: DelaySpec::deserialize(de::value::StrDeserializer::<E>::new(v))?,
                    when: DelayWhen::Before,
                })
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<DelayFault, E> {
                Ok(DelayFault {
                    spec: DelaySpec::deserialize(de::value::U64Deserializer::<E>::new(v))?,
                    when: DelayWhen::Before,
                })
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<DelayFault, E> {
                Ok(DelayFault {
                    spec: DelaySpec::deserialize(de::value::F64Deserializer::<E>::new(v))?,
                    when: DelayWhen::Before,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<DelayFault, A::Error> {
                let f = DelayMap::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let spec = match (f.fixed, f.uniform, f.lognormal) {
                    (Some(d), None, None) => DelaySpec::Fixed(d.0),
                    (None, Some([a, b]), None) => DelaySpec::Uniform(a.0, b.0),
                    (None, None, Some(l)) => l.spec(),
                    _ => {
                        return Err(de::Error::custom(
                            "a delay has one of `fixed`, `uniform` or `lognormal`",
                        ))
                    }
                };
                Ok(DelayFault { spec, when: f.when })
            }
        }
        d.deserialize_any(V)
    }
}

/// `lognormal: { median, sigma }`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Lognormal {
    /// The median delay.
    median: Dur,
    /// The log's standard deviation, at least 0.
    #[schemars(range(min = 0))]
    sigma: f64,
}

impl Lognormal {
    fn spec(&self) -> DelaySpec {
        DelaySpec::Lognormal {
            median: self.median.0,
            sigma: self.sigma,
        }
    }
}

/// Options of a `hang`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HangFault {
    /// Close the connection after this long; the server-wide `hang_cap` when absent.
    #[serde(default)]
    pub cap: Option<Dur>,
    /// Process the request before hanging (the client cannot know it was).
    #[serde(default)]
    pub process: bool,
}

/// Options of a `reset`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResetFault {
    /// Process the request before resetting.
    #[serde(default)]
    pub process: bool,
    /// HTTP/2: the RST_STREAM's error code (`internal_error` when absent). gRPC clients read
    /// it: `refused_stream` is UNAVAILABLE and safe to retry transparently (the server says it
    /// did not process the call), `cancel` CANCELLED, `enhance_your_calm` RESOURCE_EXHAUSTED,
    /// the others INTERNAL. Over HTTP/1.1 a reset is a TCP RST whatever this says.
    #[serde(default)]
    pub code: Option<H2ErrorCode>,
}

/// An HTTP/2 error code (RFC 9113 §7), by its name in lower case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum H2ErrorCode {
    /// NO_ERROR (0x0).
    NoError,
    /// PROTOCOL_ERROR (0x1).
    ProtocolError,
    /// INTERNAL_ERROR (0x2).
    InternalError,
    /// FLOW_CONTROL_ERROR (0x3).
    FlowControlError,
    /// SETTINGS_TIMEOUT (0x4).
    SettingsTimeout,
    /// STREAM_CLOSED (0x5).
    StreamClosed,
    /// FRAME_SIZE_ERROR (0x6).
    FrameSizeError,
    /// REFUSED_STREAM (0x7).
    RefusedStream,
    /// CANCEL (0x8).
    Cancel,
    /// COMPRESSION_ERROR (0x9).
    CompressionError,
    /// CONNECT_ERROR (0xa).
    ConnectError,
    /// ENHANCE_YOUR_CALM (0xb).
    EnhanceYourCalm,
    /// INADEQUATE_SECURITY (0xc).
    InadequateSecurity,
    /// HTTP_1_1_REQUIRED (0xd).
    Http11Required,
}

impl H2ErrorCode {
    /// The code's number on the wire.
    pub fn number(self) -> u32 {
        self as u32
    }
}

/// The kinds of broken response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum MalformedKind {
    /// A status line that is not HTTP.
    #[default]
    BadStatusLine,
    /// A valid status line and headers, then the connection closes mid-body.
    TruncatedBody,
    /// A `Content-Length` that is not a number.
    BadHeader,
    /// The connection closes in the middle of the headers.
    PartialHeaders,
}

impl MalformedKind {
    /// The bytes sent, and the status they claim (if a status line was sent).
    pub fn bytes(self) -> (&'static [u8], Option<u16>) {
        match self {
            MalformedKind::BadStatusLine => (b"HTTP/1.1 TWO-HUNDRED NOT OK\r\n\r\n", None),
            MalformedKind::TruncatedBody => (
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 64\r\n\r\n{\"id\":\"ord_",
                Some(200),
            ),
            MalformedKind::BadHeader => (
                b"HTTP/1.1 200 OK\r\ncontent-length: twelve\r\n\r\nhello world\n",
                None,
            ),
            MalformedKind::PartialHeaders => (b"HTTP/1.1 200 OK\r\ncontent-ty", None),
        }
    }
}

/// Options of a `malformed`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MalformedFault {
    /// Which breakage.
    #[serde(default)]
    pub kind: MalformedKind,
    /// Process the request before answering.
    #[serde(default)]
    pub process: bool,
}

// ---------------------------------------------------------------------------------------------
// Value types that validate themselves while being deserialized (so errors carry a position).

/// A status code in 100..=599.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusCode(pub u16);

impl JsonSchema for StatusCode {
    fn schema_name() -> Cow<'static, str> {
        "StatusCode".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "An HTTP status code, 100 to 599.",
            "type": "integer",
            "minimum": 100,
            "maximum": 599
        })
    }
}

/// A status code as written, held as the number it is: [`Config::validate`] holds it to its
/// range with every other bound. One that is no 16-bit number has no value to hold, so it is
/// refused here, with the same words.
fn code(v: i128) -> Result<u16, String> {
    u16::try_from(v).or_else(|_| bounds::status_code(v))
}

impl<'de> Deserialize<'de> for StatusCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        code(i128::from(u64::deserialize(d)?))
            .map(StatusCode)
            .map_err(de::Error::custom)
    }
}

/// A probability in [0, 1].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Probability(pub f64);

impl JsonSchema for Probability {
    fn schema_name() -> Cow<'static, str> {
        "Probability".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A probability, from 0 to 1.",
            "type": "number",
            "minimum": 0,
            "maximum": 1
        })
    }
}

impl<'de> Deserialize<'de> for Probability {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        f64::deserialize(d).map(Probability)
    }
}

/// A single value or a list of values.
#[derive(Debug, Clone, PartialEq)]
pub struct OneOrMany<T>(pub Vec<T>);

impl JsonSchema for OneOrMany<String> {
    fn schema_name() -> Cow<'static, str> {
        "OneOrManyStrings".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "A string or a list of strings.",
            "anyOf": [
                { "type": "string" },
                { "type": "array", "items": { "type": "string" } }
            ]
        })
    }
}

impl<'de> Deserialize<'de> for OneOrMany<String> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = OneOrMany<String>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or a list of strings")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(OneOrMany(vec![v.to_string()]))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = seq.next_element::<String>()? {
                    out.push(v);
                }
                Ok(OneOrMany(out))
            }
        }
        d.deserialize_any(V)
    }
}

/// A path pattern: exact, or a glob with `*` (within a segment) and `**` (any depth).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern(pub String);

/// A request's path never holds whitespace or control characters (the request line would not
/// parse), so a matcher holding one could never match.
fn check_request_path(s: &str) -> Result<(), String> {
    match s.chars().find(|c| c.is_whitespace() || c.is_control()) {
        Some(c) => Err(format!(
            "path {s:?} holds {c:?}, which no request's path can hold, so it would never match; write it percent-encoded as requests carry it (%20 for a space)"
        )),
        None => Ok(()),
    }
}

/// A request path as a matcher may name it: from `/`, no whitespace or control character (see
/// [`check_request_path`]).
const REQUEST_PATH_PATTERN: &str = r"^/[^\s\u0000-\u001f\u007f-\u009f]*$";

impl JsonSchema for PathPattern {
    fn schema_name() -> Cow<'static, str> {
        "PathPattern".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "An exact path, or a glob: `/orders/*` (one segment), `/api/**` (any depth). Percent-encoded as requests carry it.",
            "type": "string",
            "pattern": REQUEST_PATH_PATTERN
        })
    }
}

impl<'de> Deserialize<'de> for PathPattern {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(PathPattern)
    }
}

impl JsonSchema for FaultConfig {
    fn schema_name() -> Cow<'static, str> {
        "FaultConfig".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let status = json_schema!({
            "description": "Answer with this status (and headers, body, Retry-After); the request is not processed. `503`, or `{ code: 503, retry_after: 1, headers: {…}, body: \"…\" }`.",
            "anyOf": [
                generator.subschema_for::<StatusCode>(),
                generator.subschema_for::<StatusFault>()
            ]
        });
        let mut hang = generator.subschema_for::<Option<HangFault>>();
        hang.insert(
            "description".into(),
            "Send nothing and hold the connection until the client leaves or the cap passes."
                .into(),
        );
        let mut reset = generator.subschema_for::<Option<ResetFault>>();
        reset.insert(
            "description".into(),
            "Abort the connection with a TCP RST.".into(),
        );
        let mut malformed = generator.subschema_for::<Option<MalformedFault>>();
        malformed.insert(
            "description".into(),
            "Send a broken response, then close.".into(),
        );
        let grpc = json_schema!({
            "description": "Answer a gRPC call with this status, Trailers-Only (`grpc-retry-pushback-ms` with `pushback_ms`); the call is not processed. `UNAVAILABLE`, `14`, or `{ code: UNAVAILABLE, message: \"…\", pushback_ms: 200 }`.",
            "anyOf": [
                generator.subschema_for::<history::GrpcCode>(),
                generator.subschema_for::<GrpcFault>()
            ]
        });
        let grpc_after_headers = json_schema!({
            "description": "Fail a gRPC call after its Response-Headers and part of a message (a committed call). `INTERNAL`, or `{ code: INTERNAL, message, pushback_ms, process: true }`.",
            "anyOf": [
                generator.subschema_for::<history::GrpcCode>(),
                generator.subschema_for::<GrpcAfterHeadersFault>()
            ]
        });
        json_schema!({
            "description": "What happens to a matching request: `drop`, `reset`, `hang`, `malformed`, `goaway`, `forward`, or a map with one fault and its options.",
            "anyOf": [
                {
                    "type": "string",
                    "enum": ["drop", "reset", "hang", "malformed", "goaway", "forward"]
                },
                {
                    "type": "object",
                    "minProperties": 1,
                    "maxProperties": 1,
                    "additionalProperties": false,
                    "properties": {
                        "status": status,
                        "delay": {
                            "description": "Wait, then give the normal response (or, with `when: after`, process first and hold the answer).",
                            "allOf": [generator.subschema_for::<DelayFault>()]
                        },
                        "hang": hang,
                        "drop": { "description": "Process the request fully (an order really is created), then close with no response." },
                        "reset": reset,
                        "malformed": malformed,
                        "goaway": { "description": "End the connection: GOAWAY over HTTP/2, a close over HTTP/1.1; the request is not processed." },
                        "forward": { "description": "Forward the request to the upstream and relay its answer (proxy mode)." },
                        "grpc": grpc,
                        "grpc_after_headers": grpc_after_headers
                    }
                }
            ]
        })
    }
}

impl<'de> Deserialize<'de> for FaultConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const KINDS: &[&str] = &[
            "status",
            "delay",
            "hang",
            "drop",
            "reset",
            "malformed",
            "goaway",
            "forward",
            "grpc",
            "grpc_after_headers",
        ];
        impl<'de> Visitor<'de> for V {
            type Value = FaultConfig;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a fault: drop, reset, hang, malformed, goaway, forward, or a map with one of status, delay, hang, reset, malformed, grpc, grpc_after_headers",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<FaultConfig, E> {
                match v {
                    "drop" => Ok(FaultConfig::Drop),
                    "goaway" => Ok(FaultConfig::GoAway),
                    "forward" => Ok(FaultConfig::Forward),
                    "reset" => Ok(FaultConfig::Reset(ResetFault::default())),
                    "hang" => Ok(FaultConfig::Hang(HangFault::default())),
                    "malformed" => Ok(FaultConfig::Malformed(MalformedFault::default())),
                    "status" | "delay" | "grpc" | "grpc_after_headers" => Err(E::custom(format!(
                        "fault `{v}` needs options, e.g. `{v}: {}`",
                        match v {
                            "status" => "503",
                            "delay" => "200ms",
                            _ => "UNAVAILABLE",
                        }
                    ))),
                    other => Err(E::unknown_variant(other, KINDS)),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FaultConfig, A::Error> {
                let Some(kind) = map.next_key::<String>()? else {
                    return Err(de::Error::custom(
                        "empty fault: name one of status, delay, hang, drop, reset, malformed, goaway, forward, grpc, grpc_after_headers",
                    ));
                };
                let fault = match kind.as_str() {
                    "status" => FaultConfig::Status(map.next_value::<StatusShorthand>()?.0),
                    "delay" => FaultConfig::Delay(map.next_value::<DelayFault>()?),
                    "hang" => FaultConfig::Hang(
                        map.next_value::<Option<HangFault>>()?.unwrap_or_default(),
                    ),
                    "drop" => {
                        map.next_value::<de::IgnoredAny>()?;
                        FaultConfig::Drop
                    }
                    "goaway" => {
                        map.next_value::<de::IgnoredAny>()?;
                        FaultConfig::GoAway
                    }
                    "forward" => {
                        map.next_value::<de::IgnoredAny>()?;
                        FaultConfig::Forward
                    }
                    "reset" => FaultConfig::Reset(
                        map.next_value::<Option<ResetFault>>()?.unwrap_or_default(),
                    ),
                    "malformed" => FaultConfig::Malformed(
                        map.next_value::<Option<MalformedFault>>()?
                            .unwrap_or_default(),
                    ),
                    "grpc" => FaultConfig::Grpc(map.next_value::<GrpcShorthand<GrpcFault>>()?.0),
                    "grpc_after_headers" => FaultConfig::GrpcAfterHeaders(
                        map.next_value::<GrpcShorthand<GrpcAfterHeadersFault>>()?.0,
                    ),
                    other => return Err(de::Error::unknown_variant(other, KINDS)),
                };
                if let Some(extra) = map.next_key::<String>()? {
                    return Err(de::Error::custom(format!(
                        "a rule has one fault; found `{extra}` beside `{kind}`"
                    )));
                }
                Ok(fault)
            }
        }
        d.deserialize_any(V)
    }
}

/// `status: 503` or `status: { code: 503, ... }`.
struct StatusShorthand(StatusFault);

/// `status: 503`: the code, and nothing else.
fn code_only<E: de::Error>(v: i128) -> Result<StatusShorthand, E> {
    Ok(StatusShorthand(StatusFault {
        code: StatusCode(code(v).map_err(E::custom)?),
        headers: BTreeMap::new(),
        body: None,
        retry_after: None,
        retry_after_date: None,
    }))
}

impl<'de> Deserialize<'de> for StatusShorthand {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StatusShorthand;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a status code, or a map with `code` and optional `headers`, `body`, `retry_after`, `retry_after_date`")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                code_only(i128::from(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                code_only(i128::from(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                StatusFault::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(StatusShorthand)
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for DelaySpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "snake_case", deny_unknown_fields)]
        enum Full {
            Fixed(Dur),
            Uniform([Dur; 2]),
            Lognormal(Lognormal),
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = DelaySpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration (\"200ms\"), `{ uniform: [50ms, 150ms] }` or `{ lognormal: { median: 100ms, sigma: 0.5 } }`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DelaySpec, E> {
                parse_duration(v).map(DelaySpec::Fixed).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<DelaySpec, E> {
                Ok(DelaySpec::Fixed(Duration::from_secs(v)))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<DelaySpec, E> {
                Dur::deserialize(de::value::F64Deserializer::<E>::new(v))
                    .map(|d| DelaySpec::Fixed(d.0))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<DelaySpec, A::Error> {
                match Full::deserialize(de::value::MapAccessDeserializer::new(map))? {
                    Full::Fixed(d) => Ok(DelaySpec::Fixed(d.0)),
                    Full::Uniform([a, b]) => Ok(DelaySpec::Uniform(a.0, b.0)),
                    Full::Lognormal(l) => Ok(l.spec()),
                }
            }
        }
        d.deserialize_any(V)
    }
}

// ---------------------------------------------------------------------------------------------
// Loading, with errors that name the file, line, column and field.

impl Config {
    /// The JSON Schema of a config file (`docs/schema/fault-server.schema.json`), from these
    /// types and their doc comments.
    pub fn schema() -> schemars::Schema {
        yaml_config::json_schema::<Config>("fault-server config")
    }

    /// Reads and validates a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Self::load_with(path, |_| {})
    }

    /// Reads a configuration file, lets `adjust` change it (command-line overrides), then
    /// validates it.
    pub fn load_with(path: &Path, adjust: impl FnOnce(&mut Config)) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::from_yaml_with(&text, &path.display().to_string(), adjust)
    }

    /// Parses and validates configuration text; `origin` names it in errors.
    pub fn from_yaml(text: &str, origin: &str) -> Result<Config, ConfigError> {
        Self::from_yaml_with(text, origin, |_| {})
    }

    /// Parses configuration text, lets `adjust` change it, then validates it.
    pub fn from_yaml_with(
        text: &str,
        origin: &str,
        adjust: impl FnOnce(&mut Config),
    ) -> Result<Config, ConfigError> {
        let mut cfg: Config = from_yaml_str(text, origin)?;
        adjust(&mut cfg);
        cfg.validate(origin).map_err(|e| e.located(text))?;
        Ok(cfg)
    }

    /// Forwards to `url` (proxy mode), keeping the config's other upstream options if it has an
    /// upstream already: what `--upstream URL` does.
    pub fn set_upstream(&mut self, url: UpstreamUrl) {
        match &mut self.upstream {
            Some(u) => u.url = url,
            None => self.upstream = Some(UpstreamConfig::new(url)),
        }
    }
}

impl Config {
    /// The checks serde cannot make: unique rule ids, sane windows, the limits' bounds, the pool.
    pub fn validate(&self, origin: &str) -> Result<(), ConfigError> {
        validate_rules(&self.rules, origin)?;
        crate::tcp::config::validate_proxies(&self.proxies, origin)?;
        validate_limits(&self.limits, origin)?;
        validate_grpc(&self.grpc, origin)?;
        match &self.upstream {
            None => {
                if let Some(i) = forwarding_rule(&self.rules) {
                    return Err(ConfigError::at(
                        origin,
                        format!("rules[{i}].fault"),
                        "`forward` needs an upstream: set `upstream: http://host:port` (or run with `--upstream URL`)",
                    ));
                }
            }
            Some(u) => validate_upstream(u, origin)?,
        }
        for (field, d) in [
            ("statement_timeout", self.orders.statement_timeout),
            ("lock_timeout", self.orders.lock_timeout),
        ] {
            if d.0 < Duration::from_millis(1) || d.0 > Duration::from_secs(3600) {
                return Err(ConfigError::at(
                    origin,
                    format!("orders.{field}"),
                    format!("{:?}; give 1ms to 1h", d.0),
                ));
            }
        }
        if let Some(lease) = self.orders.claim_lease {
            let (work, ttl) = (self.orders.work_delay.0, self.orders.key_ttl.0);
            if lease.0 <= work || lease.0 > ttl {
                return Err(ConfigError::at(
                    origin,
                    "orders.claim_lease",
                    format!(
                        "{:?}; give more than work_delay ({work:?}: a retry would take over every request still working, and none would finish) and at most key_ttl ({ttl:?}: the key expires first)",
                        lease.0
                    ),
                ));
            }
        }
        if self.orders.pool_size == 0 || self.orders.pool_size > 256 {
            return Err(ConfigError::at(
                origin,
                "orders.pool_size",
                format!("{} connections; give 1 to 256", self.orders.pool_size),
            ));
        }
        for (field, names) in [
            ("capture_headers", &self.capture_headers),
            ("capture_response_headers", &self.capture_response_headers),
        ] {
            for (i, n) in names.iter().enumerate() {
                if http::HeaderName::from_bytes(n.to_ascii_lowercase().as_bytes()).is_err() {
                    return Err(ConfigError::at(
                        origin,
                        format!("{field}[{i}]"),
                        format!("{n:?} is not a header name (letters, digits and -_!#$%&'*+.^`|~)"),
                    ));
                }
            }
        }
        let on_postgres = self
            .orders
            .database
            .as_ref()
            .is_some_and(|d| d.postgres().is_some());
        if self.state == StateMode::Shared && !on_postgres {
            return Err(ConfigError::at(
                origin,
                "state",
                "`shared` keeps the schedule's counters in the orders' database, which must be PostgreSQL: set `orders: { database: \"postgres://user:password@host:port/dbname\" }`, or use `state: local`",
            ));
        }
        Ok(())
    }

    /// Multiplies every time-like setting of the schedule (windows, delays, hang caps) by `f`, so a
    /// scenario can run its experiment faster. `Retry-After` seconds are integers on the wire and
    /// stay as they are; clients scale their wait instead.
    pub fn scale_durations(&mut self, f: f64) {
        for (_, d) in self.durations() {
            *d = d.mul_f64(f);
        }
        // A gRPC pushback is a wait in milliseconds, so it scales too (a negative one is a
        // refusal, not a time).
        for r in &mut self.rules {
            let pushback = match &mut r.fault {
                FaultConfig::Grpc(g) => &mut g.pushback_ms,
                FaultConfig::GrpcAfterHeaders(g) => &mut g.pushback_ms,
                _ => continue,
            };
            if let Some(ms) = pushback.as_mut().filter(|ms| **ms > 0) {
                *ms = ((*ms as f64) * f).round().clamp(0.0, f64::from(i32::MAX)) as i64;
            }
        }
    }

    /// Every time-like setting of the schedule that [`Config::scale_durations`] scales, with its
    /// field path (`rules[2].fault.hang.cap`), so a scaled value can be held to a bound.
    pub fn durations(&mut self) -> Vec<(String, &mut Duration)> {
        let mut out = Vec::new();
        if let Some(c) = &mut self.hang_cap {
            out.push(("hang_cap".to_string(), &mut c.0));
        }
        for (i, p) in self.proxies.iter_mut().enumerate() {
            for (j, t) in p.toxics.iter_mut().enumerate() {
                let at = |f: &str| format!("proxies[{i}].toxics[{j}].match.{f}");
                if let Some(w) = &mut t.when.from {
                    out.push((at("from"), &mut w.0));
                }
                if let Some(w) = &mut t.when.until {
                    out.push((at("until"), &mut w.0));
                }
            }
            out.extend(crate::tcp::config::protocol_durations(
                i,
                &mut p.postgres,
                &mut p.redis,
            ));
        }
        for (i, r) in self.rules.iter_mut().enumerate() {
            let at = |field: &str| format!("rules[{i}].{field}");
            let m = &mut r.matcher;
            if let Some(w) = &mut m.from {
                out.push((at("match.from"), &mut w.0));
            }
            if let Some(w) = &mut m.until {
                out.push((at("match.until"), &mut w.0));
            }
            match &mut r.fault {
                FaultConfig::Delay(d) => match &mut d.spec {
                    DelaySpec::Fixed(d) => out.push((at("fault.delay"), d)),
                    DelaySpec::Uniform(a, b) => {
                        out.push((at("fault.delay"), a));
                        out.push((at("fault.delay"), b));
                    }
                    DelaySpec::Lognormal { median, .. } => {
                        out.push((at("fault.delay.median"), median));
                    }
                },
                FaultConfig::Hang(h) => {
                    if let Some(c) = &mut h.cap {
                        out.push((at("fault.hang.cap"), &mut c.0));
                    }
                }
                FaultConfig::Status(s) => {
                    if let Some(d) = &mut s.retry_after_date {
                        out.push((at("fault.status.retry_after_date"), &mut d.0));
                    }
                }
                FaultConfig::Drop
                | FaultConfig::Forward
                | FaultConfig::GoAway
                | FaultConfig::Reset(_)
                | FaultConfig::Malformed(_)
                | FaultConfig::Grpc(_)
                | FaultConfig::GrpcAfterHeaders(_) => {}
            }
        }
        out
    }
}

impl ScheduleConfig {
    /// Parses and validates a schedule (YAML or JSON).
    pub fn from_yaml(text: &str, origin: &str) -> Result<ScheduleConfig, ConfigError> {
        let s: ScheduleConfig = from_yaml_str(text, origin)?;
        validate_rules(&s.rules, origin).map_err(|e| e.located(text))?;
        Ok(s)
    }
}

/// The bounds of one rule's values, as a file or the builder gives them: the failing field
/// (below `rules[i].`) and why.
fn rule_bounds(r: &RuleConfig) -> Result<(), (String, String)> {
    let bad = |field: &str, message: String| Err((field.to_string(), message));
    let m = &r.matcher;
    if let Some(PathPattern(p)) = &m.path {
        if let Err(e) = bounds::path(p) {
            return bad("match.path", e);
        }
    }
    if let Some(Probability(p)) = m.probability {
        if let Err(e) = bounds::probability(p) {
            return bad("match.probability", e);
        }
    }
    for (field, counts) in [
        ("requests", &m.requests),
        ("hits", &m.hits),
        ("attempts", &m.attempts),
        ("grpc_attempts", &m.grpc_attempts),
    ] {
        let Some(Counts(specs)) = counts else {
            continue;
        };
        if let Err(e) = bounds::counts(specs) {
            return bad(&format!("match.{field}"), e.into());
        }
        if let Some(s) = specs.iter().find(|s| !bounds::count_spec(**s)) {
            return bad(
                &format!("match.{field}"),
                format!("invalid count {s:?} (counts start at 1, and a range's end is not before its start)"),
            );
        }
    }
    if let Some(GrpcMethodPattern(p)) = &m.grpc_method {
        if let Err(e) = bounds::grpc_method(p) {
            return bad("match.grpc_method", e);
        }
    }
    let checked = match &r.fault {
        FaultConfig::Status(s) => bounds::status_code(i128::from(s.code.0))
            .map(|_| ())
            .map_err(|e| ("fault.status.code", e)),
        FaultConfig::Delay(DelayFault {
            spec: DelaySpec::Uniform(a, b),
            ..
        }) => bounds::uniform_delay(*a, *b).map_err(|e| ("fault.delay.uniform", e.into())),
        FaultConfig::Delay(DelayFault {
            spec: DelaySpec::Lognormal { sigma, .. },
            ..
        }) => {
            bounds::lognormal_sigma(*sigma).map_err(|e| ("fault.delay.lognormal.sigma", e.into()))
        }
        FaultConfig::Grpc(GrpcFault {
            pushback_ms: Some(ms),
            ..
        })
        | FaultConfig::GrpcAfterHeaders(GrpcAfterHeadersFault {
            pushback_ms: Some(ms),
            ..
        }) => bounds::pushback_ms(*ms).map_err(|e| ("fault.grpc.pushback_ms", e)),
        _ => Ok(()),
    };
    checked.or_else(|(field, message)| bad(field, message))
}

/// Every rule's checks, its values' bounds and what needs the whole list (unique ids, sane
/// windows): what a file and the builder's rules both go through.
pub fn validate_rules(rules: &[RuleConfig], origin: &str) -> Result<(), ConfigError> {
    let invalid = |i: usize, field: &str, message: String| ConfigError::Invalid {
        origin: origin.to_string(),
        line: None,
        column: None,
        field: Some(format!("rules[{i}].{field}")),
        message,
    };
    let mut seen = std::collections::HashSet::new();
    for (i, r) in rules.iter().enumerate() {
        rule_bounds(r).map_err(|(field, message)| invalid(i, &field, message))?;
        let id = rule_id(r, i);
        if !seen.insert(id.clone()) {
            return Err(invalid(
                i,
                "id",
                format!("duplicate rule id {id:?}; ids must be unique"),
            ));
        }
        if let (Some(from), Some(until)) = (r.matcher.from, r.matcher.until) {
            if until <= from {
                return Err(invalid(
                    i,
                    "match.until",
                    format!(
                        "`until` ({:?}) must be later than `from` ({:?})",
                        until.0, from.0
                    ),
                ));
            }
        }
        if let Some(m) = &r.matcher.method {
            for name in &m.0 {
                if http::Method::from_bytes(name.to_ascii_uppercase().as_bytes()).is_err() {
                    return Err(invalid(
                        i,
                        "match.method",
                        format!("{name:?} is not an HTTP method"),
                    ));
                }
            }
        }
        if let Some(PathPattern(p)) = &r.matcher.path {
            check_request_path(p).map_err(|m| invalid(i, "match.path", m))?;
        }
        if let Some(p) = &r.matcher.path_prefix {
            check_request_path(p).map_err(|m| invalid(i, "match.path_prefix", m))?;
        }
        for (name, value) in r.matcher.headers.iter() {
            if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
                return Err(invalid(
                    i,
                    "match.headers",
                    format!("{name:?} is not a header name"),
                ));
            }
            if http::HeaderValue::from_str(value).is_err() {
                return Err(invalid(
                    i,
                    &format!("match.headers.{name}"),
                    format!("{value:?} holds a control character, which no request's header can hold, so it would never match"),
                ));
            }
        }
        if let FaultConfig::Status(s) = &r.fault {
            for (name, value) in &s.headers {
                if http::HeaderName::from_bytes(name.as_bytes()).is_err()
                    || http::HeaderValue::from_str(value).is_err()
                {
                    return Err(invalid(
                        i,
                        "fault.status.headers",
                        format!("{name:?}: {value:?} is not a valid header"),
                    ));
                }
            }
            if s.retry_after.is_some() && s.retry_after_date.is_some() {
                return Err(invalid(
                    i,
                    "fault.status",
                    "give `retry_after` (seconds) or `retry_after_date`, not both".into(),
                ));
            }
        }
    }
    Ok(())
}

/// The position of the first rule that forwards, if any.
pub fn forwarding_rule(rules: &[RuleConfig]) -> Option<usize> {
    rules
        .iter()
        .position(|r| matches!(r.fault, FaultConfig::Forward))
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

/// The gRPC services can be built: the `.proto` files compile, every canned answer names one of
/// their methods and fits its response type; the message limit is in its bounds.
pub fn validate_grpc(g: &GrpcConfig, origin: &str) -> Result<(), ConfigError> {
    if g.max_message.0 < 1024 || g.max_message.0 > (1 << 30) {
        return Err(ConfigError::at(
            origin,
            "grpc.max_message",
            format!("{} bytes; give 1KiB to 1GiB", g.max_message.0),
        ));
    }
    match g.services() {
        Ok(_) => Ok(()),
        Err(crate::grpc::ServicesError::Schema(e)) => {
            Err(ConfigError::at(origin, "grpc.protos", e.to_string()))
        }
        Err(crate::grpc::ServicesError::Response { method, message }) => Err(ConfigError::at(
            origin,
            format!("grpc.responses.{method}"),
            message,
        )),
        Err(e @ crate::grpc::ServicesError::NoProtos(_)) => {
            Err(ConfigError::at(origin, "grpc.responses", e.to_string()))
        }
    }
}

/// The bounds of the limits themselves, each stated in its message.
pub fn validate_limits(l: &LimitsConfig, origin: &str) -> Result<(), ConfigError> {
    let bad = |field: &str, message: String| {
        Err(ConfigError::at(origin, format!("limits.{field}"), message))
    };
    if l.max_body.0 == 0 || l.max_body.0 > (1 << 30) {
        return bad(
            "max_body",
            format!("{} bytes; give 1 byte to 1 GiB", l.max_body.0),
        );
    }
    if l.header_timeout.0 < Duration::from_millis(10)
        || l.header_timeout.0 > Duration::from_secs(3600)
    {
        return bad(
            "header_timeout",
            format!("{:?}; give 10ms to 1h", l.header_timeout.0),
        );
    }
    if l.body_timeout.0 < Duration::from_millis(10) || l.body_timeout.0 > Duration::from_secs(3600)
    {
        return bad(
            "body_timeout",
            format!("{:?}; give 10ms to 1h", l.body_timeout.0),
        );
    }
    if l.body_memory.0 < l.max_body.0 || l.body_memory.0 > (64 << 30) {
        return bad(
            "body_memory",
            format!(
                "{} bytes; give max_body ({} bytes) to 64 GiB",
                l.body_memory.0, l.max_body.0
            ),
        );
    }
    if l.max_head.0 < 8192 || l.max_head.0 > (16 << 20) {
        return bad(
            "max_head",
            format!("{} bytes; give 8KiB to 16MiB", l.max_head.0),
        );
    }
    if let Some(n) = l.max_connections {
        if n == 0 || n > 1_000_000 {
            return bad("max_connections", format!("{n}; give 1 to 1000000"));
        }
    }
    if l.tracked_keys == 0 || l.tracked_keys > 10_000_000 {
        return bad(
            "tracked_keys",
            format!("{}; give 1 to 10000000", l.tracked_keys),
        );
    }
    for (field, d) in [
        ("send_timeout", l.send_timeout),
        ("drain_time", l.drain_time),
    ] {
        if d.0 < Duration::from_millis(10) || d.0 > Duration::from_secs(3600) {
            return bad(field, format!("{:?}; give 10ms to 1h", d.0));
        }
    }
    if l.drain_bytes.0 > (1 << 30) {
        return bad(
            "drain_bytes",
            format!("{} bytes; give 0 to 1 GiB", l.drain_bytes.0),
        );
    }
    if l.response_memory.0 < (64 << 10) || l.response_memory.0 > (64 << 30) {
        return bad(
            "response_memory",
            format!("{} bytes; give 64KiB to 64 GiB", l.response_memory.0),
        );
    }
    Ok(())
}

/// The id of rule `i` (0-based): its own, or `rule-{i+1}`.
pub fn rule_id(r: &RuleConfig, i: usize) -> String {
    r.id.clone().unwrap_or_else(|| format!("rule-{}", i + 1))
}

/// The bounds of a rule's values, each checked in one place: by the `Deserialize` impls while a
/// file is read, and by the builder on values built in Rust.
pub(crate) mod bounds {
    use std::time::Duration;

    use super::CountSpec;

    /// A status code in 100..=599 (`v` as written: a negative one is out of range too).
    pub(crate) fn status_code(v: i128) -> Result<u16, String> {
        u16::try_from(v)
            .ok()
            .filter(|c| (100..=599).contains(c))
            .ok_or_else(|| format!("status code {v} is out of range (expected 100 to 599)"))
    }

    /// A probability in [0, 1].
    pub(crate) fn probability(p: f64) -> Result<(), String> {
        if (0.0..=1.0).contains(&p) {
            Ok(())
        } else {
            Err(format!(
                "probability {p} is out of range (expected a number from 0 to 1)"
            ))
        }
    }

    /// A path pattern starts with `/`.
    pub(crate) fn path(p: &str) -> Result<(), String> {
        if p.starts_with('/') {
            Ok(())
        } else {
            Err(format!(
                "path {p:?} must start with '/' (e.g. \"/orders\" or \"/orders/*\")"
            ))
        }
    }

    /// A gRPC method pattern: `pkg.Service/Method` (a leading `/` allowed), globs allowed.
    pub(crate) fn grpc_method(p: &str) -> Result<(), String> {
        let name = p.strip_prefix('/').unwrap_or(p);
        let ok = name
            .split_once('/')
            .is_some_and(|(s, m)| !s.is_empty() && !m.is_empty() && !m.contains('/'))
            || name.contains("**");
        if !ok || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "gRPC method {p:?} is not `pkg.Service/Method` (globs: `pkg.Service/*`, `**` for every call)"
            ));
        }
        Ok(())
    }

    /// A pushback is a signed 32-bit number of milliseconds (gRFC A6).
    pub(crate) fn pushback_ms(v: i64) -> Result<(), String> {
        if i32::try_from(v).is_ok() {
            Ok(())
        } else {
            Err(format!(
                "pushback_ms {v} is out of range: gRFC A6 reads a signed 32-bit number of milliseconds ({} to {})",
                i32::MIN,
                i32::MAX
            ))
        }
    }

    /// A uniform delay's bounds are in order.
    pub(crate) fn uniform_delay(lo: Duration, hi: Duration) -> Result<(), &'static str> {
        if lo > hi {
            Err("uniform delay: the first bound must not exceed the second")
        } else {
            Ok(())
        }
    }

    /// A lognormal delay's sigma is a number ≥ 0.
    pub(crate) fn lognormal_sigma(sigma: f64) -> Result<(), &'static str> {
        if sigma.is_finite() && sigma >= 0.0 {
            Ok(())
        } else {
            Err("lognormal delay: sigma must be a number ≥ 0")
        }
    }

    /// A list of counts is not empty.
    pub(crate) fn counts(specs: &[CountSpec]) -> Result<(), &'static str> {
        if specs.is_empty() {
            Err("an empty list of counts never matches")
        } else {
            Ok(())
        }
    }

    /// Counts start at 1, and a range's end is not before its start.
    pub(crate) fn count_spec(s: CountSpec) -> bool {
        s.is_valid()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_fault_form() {
        let cfg = Config::from_yaml(
            r#"
seed: 7
rules:
  - id: a
    match: { method: POST, path: /orders, attempts: "1-2" }
    fault: { status: { code: 503, retry_after: 1 } }
  - fault: { status: 400 }
  - fault: drop
  - fault: reset
  - fault: hang
  - fault: { hang: { cap: 2s } }
  - fault: { malformed: { kind: truncated-body } }
  - fault: { delay: 200ms }
  - fault: { delay: { uniform: [50ms, 150ms] } }
  - fault: { delay: { lognormal: { median: 100ms, sigma: 0.5 } } }
"#,
            "t.yaml",
        )
        .unwrap();
        assert_eq!(cfg.rules.len(), 10);
        assert_eq!(cfg.rules[1].fault.kind(), "status");
        assert_eq!(
            cfg.rules[5].fault,
            FaultConfig::Hang(HangFault {
                cap: Some(Dur(Duration::from_secs(2))),
                process: false
            })
        );
        assert_eq!(
            cfg.rules[8].fault,
            FaultConfig::Delay(DelayFault {
                spec: DelaySpec::Uniform(Duration::from_millis(50), Duration::from_millis(150)),
                when: DelayWhen::Before
            })
        );
        assert_eq!(rule_id(&cfg.rules[1], 1), "rule-2");
    }

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

    #[test]
    fn unknown_field_names_line_column_and_path() {
        let err = Config::from_yaml(
            "rules:\n  - id: a\n    match:\n      methd: POST\n    fault: drop\n",
            "cfg.yaml",
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("cfg.yaml:4:7: at `rules[0].match"), "{err}");
        assert!(err.contains("unknown field `methd`"), "{err}");
    }

    #[test]
    fn bad_values_are_rejected_with_position() {
        let cases = [
            (
                "rules:\n  - fault: { status: 700 }\n",
                "cfg:2:",
                "out of range",
            ),
            (
                "rules:\n  - match: { probability: 1.5 }\n    fault: drop\n",
                "cfg:2:",
                "probability",
            ),
            (
                "rules:\n  - match: { requests: \"5-2\" }\n    fault: drop\n",
                "cfg:2:",
                "invalid count",
            ),
            (
                "rules:\n  - fault: explode\n",
                "cfg:2:",
                "unknown variant `explode`",
            ),
            (
                "rules:\n  - fault: { delay: 3 parsecs }\n",
                "cfg:2:",
                "invalid duration",
            ),
            (
                "orders: { idempotency: maybe }\n",
                "cfg:1:",
                "unknown variant `maybe`",
            ),
            (
                "orders:\n  key_ttl: 1h\n  claim_lease: 2h\n",
                "cfg:3:16: at `orders.claim_lease`",
                "at most key_ttl (3600s",
            ),
            (
                "orders: { work_delay: 2s, claim_lease: 2s }\n",
                "cfg:1:40: at `orders.claim_lease`",
                "more than work_delay (2s",
            ),
            (
                "rules:\n  - match: { path: \"/a b\" }\n    fault: drop\n",
                "cfg:2:20: at `rules[0].match.path`",
                "would never match",
            ),
            (
                "rules:\n  - match: { path_prefix: \"/a\\tb\" }\n    fault: drop\n",
                "cfg:2:27: at `rules[0].match.path_prefix`",
                "would never match",
            ),
            (
                "rules:\n  - match: { headers: { x-a: \"1\\r\\n\" } }\n    fault: drop\n",
                "cfg:2:30: at `rules[0].match.headers.x-a`",
                "would never match",
            ),
        ];
        for (text, at, what) in cases {
            let err = Config::from_yaml(text, "cfg").unwrap_err().to_string();
            assert!(err.starts_with(at), "{text:?} → {err}");
            assert!(err.contains(what), "{text:?} → {err}");
        }
    }

    #[test]
    fn grpc_faults_matchers_and_services_are_read_and_checked_where_they_are() {
        let cfg = Config::from_yaml(
            r#"
grpc: { max_message: 64KiB }
rules:
  - { match: { grpc_method: /orders.v1.Orders/CreateOrder, grpc_attempts: "1-2" }, fault: { grpc: UNAVAILABLE } }
  - fault: { grpc: { code: 8, message: slow down, pushback_ms: -1 } }
  - fault: { grpc_after_headers: { code: internal, process: true } }
  - fault: { reset: { code: refused_stream } }
"#,
            "cfg",
        )
        .unwrap();
        assert_eq!(cfg.grpc.max_message, Size(64 << 10));
        let m = &cfg.rules[0].matcher;
        assert_eq!(
            m.grpc_method,
            Some(GrpcMethodPattern("orders.v1.Orders/CreateOrder".into()))
        );
        assert!(m
            .grpc_attempts
            .as_ref()
            .is_some_and(|c| c.contains(2) && !c.contains(3)));
        assert_eq!(
            cfg.rules[0].fault,
            FaultConfig::Grpc(history::GrpcCode::Unavailable.into())
        );
        assert_eq!(
            cfg.rules[1].fault,
            FaultConfig::Grpc(GrpcFault {
                code: history::GrpcCode::ResourceExhausted,
                message: Some("slow down".into()),
                pushback_ms: Some(-1),
            })
        );
        assert_eq!(cfg.rules[2].fault.kind(), "grpc_after_headers");
        assert!(matches!(
            &cfg.rules[2].fault,
            FaultConfig::GrpcAfterHeaders(g) if g.process && g.code == history::GrpcCode::Internal
        ));
        assert!(matches!(
            &cfg.rules[3].fault,
            FaultConfig::Reset(r) if r.code == Some(H2ErrorCode::RefusedStream)
        ));

        let cases = [
            (
                "rules:\n  - fault: { grpc: UNAVAILABLY }\n",
                "cfg:2:",
                "not a gRPC status code",
            ),
            (
                "rules:\n  - fault: { grpc: 17 }\n",
                "cfg:2:",
                "not a gRPC status code",
            ),
            ("rules:\n  - fault: grpc\n", "cfg:2:", "needs options"),
            (
                "rules:\n  - fault: { grpc: { code: 14, pushback_ms: 3000000000 } }\n",
                "cfg:2:",
                "signed 32-bit",
            ),
            (
                "rules:\n  - fault: { grpc: { code: 14, retry: 1 } }\n",
                "cfg:2:",
                "unknown field `retry`",
            ),
            (
                "rules:\n  - match: { grpc_method: Orders }\n    fault: drop\n",
                "cfg:2:",
                "pkg.Service/Method",
            ),
            (
                "rules:\n  - match: { grpc_attempts: 0 }\n    fault: drop\n",
                "cfg:2:",
                "invalid count",
            ),
            (
                "rules:\n  - fault: { reset: { code: nope } }\n",
                "cfg:2:",
                "unknown variant `nope`",
            ),
            (
                "grpc: { max_message: 10 }\n",
                "cfg:1:22: at `grpc.max_message`",
                "1KiB to 1GiB",
            ),
            (
                "grpc: { protos: [/nonexistent/x.proto] }\n",
                "cfg:1:",
                "x.proto",
            ),
            (
                "grpc: { responses: { a.B/C: {} } }\n",
                "cfg:1:",
                "not a built-in method, and no .proto file is given",
            ),
        ];
        for (text, at, what) in cases {
            let err = Config::from_yaml(text, "cfg").unwrap_err().to_string();
            assert!(err.starts_with(at), "{text:?} → {err}");
            assert!(err.contains(what), "{text:?} → {err}");
        }
        assert_eq!(
            UpstreamUrl::parse("grpcs://h:9").map(|u| (u.tls, u.http2, u.to_string())),
            Ok((true, true, "grpcs://h:9".to_string()))
        );
        assert!(UpstreamUrl::parse("grpc://h:9").is_ok_and(|u| u.http2 && !u.tls));
    }

    #[test]
    fn canned_answers_must_fit_a_method_of_the_protos() {
        let dir = tempfile::tempdir().unwrap();
        let proto = dir.path().join("s.proto");
        std::fs::write(
            &proto,
            "syntax = \"proto3\";\npackage s.v1;\nservice S { rpc Get(R) returns (R); }\nmessage R { int32 n = 1; }\n",
        )
        .unwrap();
        let text = |responses: &str| {
            format!(
                "grpc:\n  protos: [{}]\n  responses:\n{responses}",
                proto.display()
            )
        };
        assert!(Config::from_yaml(&text("    s.v1.S/Get: { n: 3 }\n"), "cfg").is_ok());
        for (responses, at, what) in [
            (
                "    s.v1.S/Put: {}\n",
                "grpc.responses.s.v1.S/Put",
                "no method \"Put\"",
            ),
            (
                "    s.v1.S/Get: { n: x }\n",
                "grpc.responses.s.v1.S/Get",
                "n",
            ),
            (
                "    s.v1.S/Get: { m: 1 }\n",
                "grpc.responses.s.v1.S/Get",
                "m",
            ),
        ] {
            let err = Config::from_yaml(&text(responses), "cfg")
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(at) && err.contains(what),
                "{responses:?} → {err}"
            );
        }
        // Scaling a scenario's time scales a pushback, and leaves a refusal alone.
        let mut cfg = Config::from_yaml(
            "rules:\n  - fault: { grpc: { code: 14, pushback_ms: 1000 } }\n  - fault: { grpc: { code: 14, pushback_ms: -1 } }\n",
            "cfg",
        )
        .unwrap();
        cfg.scale_durations(0.05);
        let pushbacks: Vec<_> = cfg
            .rules
            .iter()
            .map(|r| match &r.fault {
                FaultConfig::Grpc(g) => g.pushback_ms,
                _ => None,
            })
            .collect();
        assert_eq!(pushbacks, [Some(50), Some(-1)]);
    }

    #[test]
    fn list_level_validation_names_the_field() {
        let err = Config::from_yaml(
            "rules:\n  - { id: x, fault: drop }\n  - { id: x, fault: reset }\n",
            "cfg",
        )
        .unwrap_err()
        .to_string();
        assert_eq!(
            err,
            "cfg:3:11: at `rules[1].id`: duplicate rule id \"x\"; ids must be unique"
        );
    }

    #[test]
    fn databases_and_shared_state() {
        let cfg = Config::from_yaml(
            "state: shared\norders: { database: \"postgres://u:secret@db.example:5433/orders?password=hidden\" }\n",
            "cfg",
        )
        .unwrap();
        assert_eq!(cfg.state, StateMode::Shared);
        let url = cfg.orders.database.as_ref().unwrap().postgres().unwrap();
        assert_eq!(
            url.redacted(),
            "postgres://u@db.example:5433/orders?password=***"
        );
        assert!(!format!("{cfg:?}").contains("secret") && !format!("{cfg:?}").contains("hidden"));
        let cfg = Config::from_yaml("orders: { database: /tmp/o.sqlite }\n", "cfg").unwrap();
        assert_eq!(
            cfg.orders.database,
            Some(Database::Sqlite(PathBuf::from("/tmp/o.sqlite")))
        );
        let err = Config::from_yaml(
            "seed: 1\nstate: shared\norders: { database: /tmp/o.sqlite }\n",
            "cfg",
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("cfg:2:") && err.contains("at `state`"),
            "{err}"
        );
        assert!(err.contains("PostgreSQL"), "{err}");
        let err = Config::from_yaml("state: shared\n", "cfg")
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("cfg:1:"), "{err}");
        let err = Config::from_yaml(
            "orders:\n  database: \"postgres://u:pw@h:notaport/db\"\n",
            "cfg",
        )
        .unwrap_err()
        .to_string();
        assert!(err.starts_with("cfg:2:"), "{err}");
        assert!(
            err.contains("invalid PostgreSQL URL postgres://u@h:notaport/db"),
            "{err}"
        );
        assert!(!err.contains("pw"), "{err}");
        let err = Config::from_yaml("orders: { database: \"mysql://h/db\" }\n", "cfg")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unsupported database URL scheme"), "{err}");
        let err = Config::from_yaml("state: global\n", "cfg")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown variant `global`"), "{err}");
    }

    #[test]
    fn counts() {
        let c = Counts(vec![
            parse_count_spec("1-2").unwrap(),
            parse_count_spec("every 5").unwrap(),
        ]);
        assert!(c.contains(1) && c.contains(2) && !c.contains(3) && c.contains(10));
        assert!(Counts(vec![parse_count_spec("4-").unwrap()]).contains(1000));
        assert!(parse_count_spec("0").is_err());
        assert!(parse_count_spec("every 0").is_err());
    }
}
