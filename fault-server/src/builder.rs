//! The fault server from Rust, typed: a [`ServerBuilder`] for tests and programs that would rather
//! not write YAML, and the [`TestServer`] it starts.
//!
//! Why no second configuration model: the builder fills in the very types the YAML file is read
//! into ([`Config`], [`RuleConfig`], [`FaultConfig`], [`OrdersConfig`]), so a schedule written in
//! Rust and the same schedule written in YAML are equal values (`==`), run by the same code, and
//! every builder method is named after the YAML field it sets. Both are checked by one
//! [`Config::validate`] on the typed values (a status code in range, a path that starts with `/`,
//! a probability in `[0, 1]`, counts from 1, unique ids, …): a file when it is read, the builder
//! when the server starts or [`ServerBuilder::config`] is asked, with the same messages and the
//! field's path.
//!
//! ```
//! use std::time::Duration;
//! use fault_server::{Config, FaultConfig, FaultServer, RuleConfig, StatusFault};
//!
//! let built = FaultServer::builder()
//!     .rule(
//!         RuleConfig::new(StatusFault::new(503).retry_after(1))
//!             .id("outage")
//!             .method("POST")
//!             .path("/orders")
//!             .until(Duration::from_secs(2)),
//!     )
//!     .rule(RuleConfig::new(FaultConfig::Drop).attempts(1))
//!     .config()
//!     .unwrap();
//! let yaml = r#"
//! rules:
//!   - id: outage
//!     match: { method: POST, path: /orders, until: 2s }
//!     fault: { status: { code: 503, retry_after: 1 } }
//!   - match: { attempts: 1 }
//!     fault: drop
//! "#;
//! assert_eq!(built, Config::from_yaml(yaml, "faults.yaml").unwrap());
//! ```

use std::net::SocketAddr;
use std::ops::{RangeFrom, RangeInclusive};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use history::Entry;
use yaml_config::{ConfigError, Dur, Size};

use crate::config::{
    validate_rules, Config, CountSpec, Counts, Database, DelayFault, DelaySpec, DelayWhen,
    FaultConfig, GrpcAfterHeadersFault, GrpcConfig, GrpcFault, GrpcMethodPattern, H2ErrorCode,
    HangFault, IdempotencyImpl, LimitsConfig, MalformedFault, MalformedKind, OneOrMany,
    OrdersConfig, PathPattern, PayImpl, Probability, ResetFault, RuleConfig, StateMode, StatusCode,
    StatusFault, TlsConfig, UpstreamConfig, UpstreamUrl,
};
use crate::orders::StoreError;
use crate::server::{FaultServer, ServerOptions, StartError};
use history::GrpcCode;

/// How long [`TestServer::wait_for`] and [`TestServer::journal`] wait unless told otherwise.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);

/// Where errors of a built configuration say they come from.
const ORIGIN: &str = "builder";

impl FaultServer {
    /// A builder for a server on `127.0.0.1:0`, configured in Rust: see [`ServerBuilder`].
    pub fn builder() -> ServerBuilder {
        ServerBuilder::new()
    }
}

/// A fault server's configuration and start options, put together in Rust.
///
/// Every method sets the [`Config`] field of the same name; [`ServerBuilder::start`] checks the
/// whole configuration as [`Config::from_yaml`] would and starts the server on a free loopback
/// port.
#[derive(Debug, Clone)]
pub struct ServerBuilder {
    config: Config,
    options: ServerOptions,
    wait: Duration,
    /// A value a method could not take (an upstream URL that is not one), reported by
    /// [`ServerBuilder::config`].
    refused: Option<(&'static str, String)>,
}

impl Default for ServerBuilder {
    fn default() -> Self {
        ServerBuilder::new()
    }
}

impl From<Config> for ServerBuilder {
    /// A builder starting from a configuration read from YAML, say, to add rules to.
    fn from(config: Config) -> Self {
        ServerBuilder {
            config,
            options: ServerOptions::default(),
            wait: DEFAULT_WAIT,
            refused: None,
        }
    }
}

impl ServerBuilder {
    /// No rules, the orders resource with its defaults (`unique`, a fresh SQLite file), seed 0.
    pub fn new() -> Self {
        ServerBuilder::from(Config::default())
    }

    /// Appends a rule to the schedule; rules are evaluated in order, the first match wins.
    pub fn rule(mut self, rule: RuleConfig) -> Self {
        self.config.rules.push(rule);
        self
    }

    /// Appends several rules, in order.
    pub fn rules(mut self, rules: impl IntoIterator<Item = RuleConfig>) -> Self {
        self.config.rules.extend(rules);
        self
    }

    /// The built-in orders resource: its idempotency and payment implementations, its timing.
    pub fn orders(mut self, orders: OrdersConfig) -> Self {
        self.config.orders = orders;
        self
    }

    /// The seed of every random decision (`probability`, drawn delays).
    pub fn seed(mut self, seed: u64) -> Self {
        self.config.seed = Some(seed);
        self
    }

    /// How long a `hang` holds a connection when its rule gives no cap.
    pub fn hang_cap(mut self, cap: Duration) -> Self {
        self.config.hang_cap = Some(Dur(cap));
        self
    }

    /// A request header to copy into the journal, besides the default set.
    pub fn capture_header(mut self, name: impl Into<String>) -> Self {
        self.config.capture_headers.push(name.into());
        self
    }

    /// A response header to copy into the journal (`response_headers`).
    pub fn capture_response_header(mut self, name: impl Into<String>) -> Self {
        self.config.capture_response_headers.push(name.into());
        self
    }

    /// Bounds on what one client may cost the server.
    pub fn limits(mut self, limits: LimitsConfig) -> Self {
        self.config.limits = limits;
        self
    }

    /// Serve `https://` with a certificate made at start for 127.0.0.1 and localhost (see
    /// [`FaultServer::certificate_pem`] for what a client must trust); ALPN h2 and http/1.1.
    pub fn tls_self_signed(mut self) -> Self {
        self.config.tls = Some(TlsConfig::SelfSigned);
        self
    }

    /// Serve `https://` with this certificate (chain) and private key, PEM files.
    pub fn tls_files(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.config.tls = Some(TlsConfig::Files {
            cert: cert.into(),
            key: key.into(),
        });
        self
    }

    /// Proxy mode: forward every request no rule answers to this real dependency
    /// (`http://host:port` or `https://…`, with an optional path prefix), as `upstream: URL`
    /// does; its other options keep their defaults (see [`ServerBuilder::upstream_config`]).
    pub fn upstream(mut self, url: &str) -> Self {
        match UpstreamUrl::parse(url) {
            Ok(u) => self.config.set_upstream(u),
            Err(e) => self.refused = Some(("upstream", e)),
        }
        self
    }

    /// Proxy mode with every upstream option: timeouts, CA, pool size, `created_from`.
    pub fn upstream_config(mut self, upstream: UpstreamConfig) -> Self {
        self.config.upstream = Some(upstream);
        self
    }

    /// gRPC: the services of `.proto` files served beside the built-in `orders.v1.Orders`,
    /// their canned answers, the message limit (see [`GrpcConfig`]).
    pub fn grpc(mut self, grpc: GrpcConfig) -> Self {
        self.config.grpc = grpc;
        self
    }

    /// Where the schedule's counters live: [`StateMode::Shared`] keeps them in the orders'
    /// PostgreSQL database, so that replicas count together.
    pub fn state(mut self, state: StateMode) -> Self {
        self.config.state = state;
        self
    }

    /// A TCP fault proxy (`proxies:` in a file), with its toxics.
    pub fn proxy(mut self, proxy: crate::tcp::ProxyConfig) -> Self {
        self.config.proxies.push(proxy);
        self
    }

    /// Also write the journal to this file (JSON lines), as `--journal` does.
    pub fn journal_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.options.journal_file = Some(path.into());
        self
    }

    /// Listen here instead of `127.0.0.1:0` (a loopback address; port 0 picks a free port).
    pub fn bind(mut self, addr: SocketAddr) -> Self {
        self.options.bind = addr;
        self
    }

    /// How long [`TestServer::wait_for`] waits before it gives up (default [`DEFAULT_WAIT`]).
    pub fn wait_timeout(mut self, wait: Duration) -> Self {
        self.wait = wait;
        self
    }

    /// The configuration, checked as [`Config::from_yaml`] checks a file: equal to the one read
    /// from the equivalent YAML.
    pub fn config(&self) -> Result<Config, ConfigError> {
        if let Some((field, why)) = &self.refused {
            return Err(ConfigError::at(ORIGIN, *field, why.clone()));
        }
        self.config.validate(ORIGIN)?;
        Ok(self.config.clone())
    }

    /// Checks the configuration, binds, opens the store and the journal, and starts serving on
    /// the runtime of the caller (a `#[tokio::test]`'s, say).
    pub async fn start(self) -> Result<TestServer, BuildError> {
        let config = self.config()?;
        let server = FaultServer::start(config, self.options).await?;
        Ok(TestServer {
            server,
            wait: self.wait,
        })
    }
}

/// A fault server that a [`ServerBuilder`] started: what a test asks of it.
///
/// The server stops when this is dropped (its connections close when the runtime ends) or, with
/// the journal flushed, on [`TestServer::shutdown`].
pub struct TestServer {
    server: FaultServer,
    wait: Duration,
}

impl TestServer {
    /// `http://127.0.0.1:PORT` (`https://` with TLS), without a trailing slash.
    pub fn url(&self) -> String {
        self.server.url()
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// Every request the server has seen, in arrival order, once those already received are
    /// journaled (at most the wait timeout is spent waiting for them).
    pub async fn journal(&self) -> Vec<Entry> {
        self.server.settle(self.wait).await;
        self.server.journal().entries()
    }

    /// Waits until at least `n` requests are journaled and returns the journal; gives up with
    /// [`WaitError`] after the wait timeout ([`ServerBuilder::wait_timeout`]).
    pub async fn wait_for(&self, n: usize) -> Result<Vec<Entry>, WaitError> {
        let started = Instant::now();
        loop {
            let written = usize::try_from(self.server.journal().written()).unwrap_or(usize::MAX);
            if written >= n {
                self.server.settle(self.wait).await;
                return Ok(self.server.journal().entries());
            }
            if started.elapsed() >= self.wait {
                return Err(WaitError {
                    wanted: n,
                    journaled: written,
                    waited: self.wait,
                });
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Clears the journal, the schedule's counters and the orders store; the schedule's time
    /// windows count from now.
    pub async fn reset(&self) -> Result<(), StoreError> {
        self.server.reset().await
    }

    /// Replaces the schedule with `rules`, checked as the builder checks them; their time
    /// windows count from now.
    pub async fn set_rules(&self, rules: Vec<RuleConfig>) -> Result<(), BuildError> {
        validate_rules(&rules, ORIGIN)?;
        self.server.install_schedule(rules).await?;
        Ok(())
    }

    /// Where the TCP proxy `name` listens, when it exists and is enabled.
    pub fn proxy_addr(&self, name: &str) -> Option<SocketAddr> {
        self.server.proxy_addr(name)
    }

    /// The running server, for the rest: its orders store, seed, clock, certificate.
    pub fn server(&self) -> &FaultServer {
        &self.server
    }

    /// Stops accepting, closes every connection and flushes the journal.
    pub async fn shutdown(self) {
        self.server.shutdown().await;
    }
}

impl std::fmt::Debug for TestServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestServer")
            .field("url", &self.url())
            .finish_non_exhaustive()
    }
}

/// A built server could not start, or a schedule could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// A value is out of its bounds; the message names the field as a YAML file would.
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    /// The server could not bind, open its store or its journal.
    #[error(transparent)]
    Start(#[from] StartError),
    /// The shared schedule counters could not be cleared.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// [`TestServer::wait_for`] gave up: fewer requests than wanted reached the server in time.
#[derive(Debug, Clone, thiserror::Error)]
#[error("waited {waited:?} for {wanted} requests in the journal; {journaled} arrived")]
pub struct WaitError {
    /// The number of journaled requests waited for.
    pub wanted: usize,
    /// How many were journaled when it gave up.
    pub journaled: usize,
    /// How long it waited.
    pub waited: Duration,
}

// ---------------------------------------------------------------------------------------------
// The config types, built fluently. Each method is named after the YAML field it sets.

impl RuleConfig {
    /// A rule that applies `fault` to every request; narrow it with the matcher methods.
    pub fn new(fault: impl Into<FaultConfig>) -> RuleConfig {
        RuleConfig {
            id: None,
            matcher: Default::default(),
            fault: fault.into(),
        }
    }

    /// The rule's name in the journal's `rule` field (default `rule-N`, its 1-based position).
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Only requests with this method (case-insensitive); call again to allow another.
    pub fn method(mut self, method: impl Into<String>) -> Self {
        self.matcher
            .method
            .get_or_insert_with(|| OneOrMany(Vec::new()))
            .0
            .push(method.into());
        self
    }

    /// Only this path: exact, or a glob with `*` within a segment and `**` across segments.
    pub fn path(mut self, path: impl Into<String>) -> Self {
        self.matcher.path = Some(PathPattern(path.into()));
        self
    }

    /// Only paths that start with this.
    pub fn path_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.matcher.path_prefix = Some(prefix.into());
        self
    }

    /// Only requests with this header at exactly this value (name case-insensitive).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.matcher.headers.insert(name.into(), value.into());
        self
    }

    /// Only requests that carry this header, whatever its value.
    pub fn header_present(mut self, name: impl Into<String>) -> Self {
        self.matcher.headers_present.push(name.into());
        self
    }

    /// Only from this long after the schedule was installed (at start, or by a replacement).
    pub fn from(mut self, after: Duration) -> Self {
        self.matcher.from = Some(Dur(after));
        self
    }

    /// Only until this long after the schedule was installed.
    pub fn until(mut self, before: Duration) -> Self {
        self.matcher.until = Some(Dur(before));
        self
    }

    /// Only the Nth requests the server received (1-based): `3`, `1..=5`, `10..`,
    /// [`Counts::every`]`(4)`.
    pub fn requests(mut self, n: impl Into<Counts>) -> Self {
        self.matcher.requests = Some(n.into());
        self
    }

    /// Only the Nth requests that reached this rule and met its other conditions.
    pub fn hits(mut self, n: impl Into<Counts>) -> Self {
        self.matcher.hits = Some(n.into());
        self
    }

    /// Only the Nth attempts of one Idempotency-Key (requests without a key never match).
    pub fn attempts(mut self, n: impl Into<Counts>) -> Self {
        self.matcher.attempts = Some(n.into());
        self
    }

    /// Only gRPC calls of this method (`pkg.Service/Method`, or a glob: `pkg.Service/*`, `**`).
    pub fn grpc_method(mut self, method: impl Into<String>) -> Self {
        let m: String = method.into();
        self.matcher.grpc_method = Some(GrpcMethodPattern(m.trim_start_matches('/').to_string()));
        self
    }

    /// Only the Nth attempts of a gRPC call: 1 + its `grpc-previous-rpc-attempts`.
    pub fn grpc_attempts(mut self, n: impl Into<Counts>) -> Self {
        self.matcher.grpc_attempts = Some(n.into());
        self
    }

    /// Only this fraction of the requests that meet every other condition, drawn reproducibly
    /// from the seed, the rule, the key and the attempt.
    pub fn probability(mut self, p: f64) -> Self {
        self.matcher.probability = Some(Probability(p));
        self
    }
}

impl Counts {
    /// Every k-th: k, 2k, 3k, …
    pub fn every(k: u64) -> Counts {
        Counts(vec![CountSpec::Every(k)])
    }

    /// This set and `other`'s.
    pub fn or(mut self, other: impl Into<Counts>) -> Counts {
        self.0.extend(other.into().0);
        self
    }
}

impl From<u64> for Counts {
    /// Exactly the Nth.
    fn from(n: u64) -> Counts {
        Counts(vec![CountSpec::Range { lo: n, hi: Some(n) }])
    }
}

impl From<RangeInclusive<u64>> for Counts {
    /// From the first to the last, both included.
    fn from(r: RangeInclusive<u64>) -> Counts {
        Counts(vec![CountSpec::Range {
            lo: *r.start(),
            hi: Some(*r.end()),
        }])
    }
}

impl From<RangeFrom<u64>> for Counts {
    /// From the first on.
    fn from(r: RangeFrom<u64>) -> Counts {
        Counts(vec![CountSpec::Range {
            lo: r.start,
            hi: None,
        }])
    }
}

impl FaultConfig {
    /// Answer with this status and a short problem description; see [`StatusFault`] for headers,
    /// body and `Retry-After`.
    pub fn status(code: u16) -> FaultConfig {
        FaultConfig::Status(StatusFault::new(code))
    }

    /// Wait this long, then give the normal response.
    pub fn delay(d: Duration) -> FaultConfig {
        DelaySpec::Fixed(d).into()
    }

    /// Wait a time drawn uniformly between `lo` and `hi`, then give the normal response.
    pub fn delay_uniform(lo: Duration, hi: Duration) -> FaultConfig {
        DelaySpec::Uniform(lo, hi).into()
    }

    /// Wait a time drawn log-normally (this median, shape `sigma`), then give the normal response.
    pub fn delay_lognormal(median: Duration, sigma: f64) -> FaultConfig {
        DelaySpec::Lognormal { median, sigma }.into()
    }

    /// Forward the request to the upstream, wait for its answer, then hold that answer this
    /// long before sending it (`delay: { fixed: …, when: after }`): the request was processed,
    /// and a client that gives up first does not know it.
    pub fn delay_after(d: Duration) -> FaultConfig {
        FaultConfig::Delay(DelayFault {
            spec: DelaySpec::Fixed(d),
            when: DelayWhen::After,
        })
    }

    /// Send nothing and hold the connection until the client leaves or the server's hang cap
    /// passes; see [`HangFault`] for a cap of its own.
    pub fn hang() -> FaultConfig {
        FaultConfig::Hang(HangFault::default())
    }

    /// Abort the connection with a TCP RST, without processing the request.
    pub fn reset() -> FaultConfig {
        FaultConfig::Reset(ResetFault::default())
    }

    /// Send this kind of broken response, then close, without processing the request.
    pub fn malformed(kind: MalformedKind) -> FaultConfig {
        FaultConfig::Malformed(MalformedFault::new(kind))
    }
}

impl FaultConfig {
    /// gRPC: answer Trailers-Only with `code` (see [`GrpcFault`] for a message and a pushback).
    pub fn grpc(code: GrpcCode) -> FaultConfig {
        FaultConfig::Grpc(GrpcFault::from(code))
    }

    /// gRPC: Response-Headers and part of a message, then `code`: a committed call's failure
    /// (see [`GrpcAfterHeadersFault`]).
    pub fn grpc_after_headers(code: GrpcCode) -> FaultConfig {
        FaultConfig::GrpcAfterHeaders(GrpcAfterHeadersFault::from(code))
    }
}

impl GrpcFault {
    /// `code`, with the default message and no pushback.
    pub fn new(code: GrpcCode) -> GrpcFault {
        GrpcFault::from(code)
    }

    /// `grpc-message`.
    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    /// `grpc-retry-pushback-ms` (negative: do not retry).
    pub fn pushback_ms(mut self, ms: i64) -> Self {
        self.pushback_ms = Some(ms);
        self
    }
}

impl From<GrpcFault> for FaultConfig {
    fn from(g: GrpcFault) -> FaultConfig {
        FaultConfig::Grpc(g)
    }
}

impl GrpcAfterHeadersFault {
    /// `code` after the headers, the call not processed.
    pub fn new(code: GrpcCode) -> GrpcAfterHeadersFault {
        GrpcAfterHeadersFault::from(code)
    }

    /// `grpc-message`.
    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    /// `grpc-retry-pushback-ms` in the trailers.
    pub fn pushback_ms(mut self, ms: i64) -> Self {
        self.pushback_ms = Some(ms);
        self
    }

    /// Process the call (an order really is created) before failing it.
    pub fn process(mut self) -> Self {
        self.process = true;
        self
    }
}

impl From<GrpcAfterHeadersFault> for FaultConfig {
    fn from(g: GrpcAfterHeadersFault) -> FaultConfig {
        FaultConfig::GrpcAfterHeaders(g)
    }
}

impl GrpcConfig {
    /// Serve the services of this `.proto` file.
    pub fn proto(mut self, path: impl Into<PathBuf>) -> Self {
        self.protos.push(path.into());
        self
    }

    /// Look imports up in this directory too.
    pub fn import_path(mut self, dir: impl Into<PathBuf>) -> Self {
        self.import_paths.push(dir.into());
        self
    }

    /// Answer `method` (`pkg.Service/Method`) with this message, in the proto3 JSON mapping.
    pub fn response(mut self, method: impl Into<String>, json: serde_json::Value) -> Self {
        self.responses.insert(method.into(), json);
        self
    }

    /// Largest message a call may send or be sent.
    pub fn max_message(mut self, bytes: u64) -> Self {
        self.max_message = Size(bytes);
        self
    }
}

impl StatusFault {
    /// A response with this status, no extra headers, and a short problem description as body.
    pub fn new(code: u16) -> StatusFault {
        StatusFault {
            code: StatusCode(code),
            headers: Default::default(),
            body: None,
            retry_after: None,
            retry_after_date: None,
        }
    }

    /// An extra response header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.headers.insert(name.into(), value.into());
        self
    }

    /// The response body.
    pub fn body(mut self, body: impl Into<String>) -> Self {
        self.body = Some(body.into());
        self
    }

    /// `Retry-After` in seconds.
    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    /// `Retry-After` as an HTTP-date this long after the response is sent.
    pub fn retry_after_date(mut self, after: Duration) -> Self {
        self.retry_after_date = Some(Dur(after));
        self
    }
}

impl From<StatusFault> for FaultConfig {
    fn from(s: StatusFault) -> FaultConfig {
        FaultConfig::Status(s)
    }
}

impl HangFault {
    /// Close the connection after this long.
    pub fn cap(mut self, cap: Duration) -> Self {
        self.cap = Some(Dur(cap));
        self
    }

    /// Process the request (an order really is created) before hanging.
    pub fn process(mut self) -> Self {
        self.process = true;
        self
    }
}

impl From<HangFault> for FaultConfig {
    fn from(h: HangFault) -> FaultConfig {
        FaultConfig::Hang(h)
    }
}

impl ResetFault {
    /// Process the request before resetting the connection.
    pub fn process(mut self) -> Self {
        self.process = true;
        self
    }

    /// HTTP/2: the RST_STREAM's error code.
    pub fn code(mut self, code: H2ErrorCode) -> Self {
        self.code = Some(code);
        self
    }
}

impl From<ResetFault> for FaultConfig {
    fn from(r: ResetFault) -> FaultConfig {
        FaultConfig::Reset(r)
    }
}

impl MalformedFault {
    /// This kind of broken response, the request not processed.
    pub fn new(kind: MalformedKind) -> MalformedFault {
        MalformedFault {
            kind,
            process: false,
        }
    }

    /// Process the request before answering.
    pub fn process(mut self) -> Self {
        self.process = true;
        self
    }
}

impl From<MalformedFault> for FaultConfig {
    fn from(m: MalformedFault) -> FaultConfig {
        FaultConfig::Malformed(m)
    }
}

impl From<DelaySpec> for FaultConfig {
    /// A delay before the request is processed.
    fn from(spec: DelaySpec) -> FaultConfig {
        FaultConfig::Delay(DelayFault {
            spec,
            when: DelayWhen::Before,
        })
    }
}

impl OrdersConfig {
    /// The defaults with this idempotency implementation.
    pub fn with(idempotency: IdempotencyImpl) -> OrdersConfig {
        OrdersConfig::default().idempotency(idempotency)
    }

    /// The idempotency implementation of `POST /orders`.
    pub fn idempotency(mut self, i: IdempotencyImpl) -> Self {
        self.idempotency = i;
        self
    }

    /// The state-transition implementation of `POST /orders/{id}/pay`.
    pub fn pay(mut self, p: PayImpl) -> Self {
        self.pay = p;
        self
    }

    /// Answer `400` to a `POST /orders` without `Idempotency-Key` (the default).
    pub fn require_key(mut self, required: bool) -> Self {
        self.require_key = required;
        self
    }

    /// How long a key and its stored response are kept.
    pub fn key_ttl(mut self, ttl: Duration) -> Self {
        self.key_ttl = Dur(ttl);
        self
    }

    /// Simulated work between checking a key and writing the order: the race's window.
    pub fn work_delay(mut self, d: Duration) -> Self {
        self.work_delay = Dur(d);
        self
    }

    /// How long a key's request in flight may hold it before a retry with the same key and body
    /// takes it over (default: one minute past `work_delay`).
    pub fn claim_lease(mut self, d: Duration) -> Self {
        self.claim_lease = Some(Dur(d));
        self
    }

    /// `Retry-After` seconds sent with `409` while the key's first request is in flight.
    pub fn retry_after_s(mut self, seconds: u64) -> Self {
        self.retry_after_s = seconds;
        self
    }

    /// Where the orders live (a fresh temporary SQLite file by default).
    pub fn database(mut self, db: Database) -> Self {
        self.database = Some(db);
        self
    }

    /// Connections in the store's pool.
    pub fn pool_size(mut self, n: u32) -> Self {
        self.pool_size = n;
        self
    }

    /// PostgreSQL: the longest a statement runs, and a request waits for a pooled connection.
    pub fn statement_timeout(mut self, d: Duration) -> Self {
        self.statement_timeout = Dur(d);
        self
    }

    /// PostgreSQL: the longest a statement waits for a lock.
    pub fn lock_timeout(mut self, d: Duration) -> Self {
        self.lock_timeout = Dur(d);
        self
    }
}

impl LimitsConfig {
    /// Largest request body read.
    pub fn max_body(mut self, bytes: u64) -> Self {
        self.max_body = Size(bytes);
        self
    }

    /// How long a request's head may take to arrive (also the keep-alive idle timeout).
    pub fn header_timeout(mut self, d: Duration) -> Self {
        self.header_timeout = Dur(d);
        self
    }

    /// How long a request's body may take to arrive after its head.
    pub fn body_timeout(mut self, d: Duration) -> Self {
        self.body_timeout = Dur(d);
        self
    }

    /// Most bytes of request bodies held at once, all connections together.
    pub fn body_memory(mut self, bytes: u64) -> Self {
        self.body_memory = Size(bytes);
        self
    }

    /// Most connections served at once.
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = Some(n);
        self
    }

    /// How long writing a response may make no progress before it is given up.
    pub fn send_timeout(mut self, d: Duration) -> Self {
        self.send_timeout = Dur(d);
        self
    }

    /// Most bytes of a refused body read and discarded before the connection closes.
    pub fn drain_bytes(mut self, bytes: u64) -> Self {
        self.drain_bytes = Size(bytes);
        self
    }

    /// Longest a refused body is drained before the connection closes.
    pub fn drain_time(mut self, d: Duration) -> Self {
        self.drain_time = Dur(d);
        self
    }

    /// Most bytes of upstream answers held at once (proxy mode).
    pub fn response_memory(mut self, bytes: u64) -> Self {
        self.response_memory = Size(bytes);
        self
    }
}

impl UpstreamConfig {
    /// Most connections open to the upstream at once.
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = Some(n);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Config {
        Config::from_yaml(text, "t.yaml").unwrap_or_else(|e| panic!("{e}"))
    }

    /// The message of a ConfigError, without its origin, field and position.
    fn message(e: &ConfigError) -> &str {
        match e {
            ConfigError::Invalid { message, .. } => message,
            ConfigError::Read { .. } => "",
        }
    }

    #[test]
    fn a_built_rule_out_of_bounds_gets_the_message_a_file_gets() {
        let ms = Duration::from_millis;
        for (built, text) in [
            (
                RuleConfig::new(FaultConfig::Drop).path("orders"),
                "match: { path: orders }\n  fault: drop",
            ),
            (
                RuleConfig::new(FaultConfig::Drop).probability(1.5),
                "match: { probability: 1.5 }\n  fault: drop",
            ),
            (
                RuleConfig::new(FaultConfig::status(600)),
                "fault: { status: 600 }",
            ),
            (
                RuleConfig::new(FaultConfig::delay_uniform(ms(20), ms(10))),
                "fault: { delay: { uniform: [20ms, 10ms] } }",
            ),
            (
                RuleConfig::new(FaultConfig::delay_lognormal(ms(20), -1.0)),
                "fault: { delay: { lognormal: { median: 20ms, sigma: -1 } } }",
            ),
            (
                RuleConfig::new(FaultConfig::Drop).requests(Counts(Vec::new())),
                "match: { requests: [] }\n  fault: drop",
            ),
        ] {
            // One check for both: the same field and the same words, and the file's error
            // placed on its line.
            let built = validate_rules(&[built], ORIGIN).expect_err(text);
            let read = Config::from_yaml(&format!("rules:\n- {text}\n"), "t.yaml").expect_err(text);
            let field = |e: &ConfigError| match e {
                ConfigError::Invalid { field, .. } => field.clone(),
                ConfigError::Read { .. } => None,
            };
            assert_eq!(
                field(&built),
                field(&read),
                "{text}: built {built}; read {read}"
            );
            assert_eq!(
                message(&built),
                message(&read),
                "{text}: built {built}; read {read}"
            );
            assert!(
                matches!(read, ConfigError::Invalid { line: Some(2), .. }),
                "{text}: {read}"
            );
        }
    }

    #[test]
    fn every_matcher_and_fault_equals_its_yaml() {
        let built = ServerBuilder::new()
            .seed(7)
            .hang_cap(Duration::from_secs(3))
            .capture_header("x-tenant")
            .capture_response_header("x-served-by")
            .tls_files("cert.pem", "key.pem")
            .limits(
                LimitsConfig::default()
                    .max_body(1024)
                    .header_timeout(Duration::from_secs(2))
                    .max_connections(100),
            )
            .orders(
                OrdersConfig::with(IdempotencyImpl::CheckThenInsert)
                    .work_delay(Duration::from_millis(50))
                    .pay(PayImpl::ReadThenWrite)
                    .retry_after_s(2),
            )
            .rule(
                RuleConfig::new(
                    StatusFault::new(503)
                        .retry_after(2)
                        .header("x-why", "maintenance")
                        .body("later\n"),
                )
                .id("outage")
                .method("POST")
                .method("PUT")
                .path("/orders/*")
                .header("x-sku-check", "invalid")
                .header_present("idempotency-key")
                .from(Duration::from_millis(100))
                .until(Duration::from_secs(2))
                .attempts(1..=2)
                .probability(0.5),
            )
            .rule(RuleConfig::new(FaultConfig::Drop).requests(Counts::every(4).or(10..)))
            .rule(
                RuleConfig::new(FaultConfig::reset())
                    .path_prefix("/a")
                    .hits(3),
            )
            .rule(RuleConfig::new(ResetFault::default().process()))
            .rule(RuleConfig::new(FaultConfig::hang()))
            .rule(RuleConfig::new(
                HangFault::default().cap(Duration::from_secs(2)).process(),
            ))
            .rule(RuleConfig::new(FaultConfig::malformed(
                MalformedKind::TruncatedBody,
            )))
            .rule(RuleConfig::new(
                MalformedFault::new(MalformedKind::BadHeader).process(),
            ))
            .rule(RuleConfig::new(FaultConfig::delay(Duration::from_millis(
                200,
            ))))
            .rule(RuleConfig::new(FaultConfig::delay_uniform(
                Duration::from_millis(50),
                Duration::from_millis(150),
            )))
            .rule(RuleConfig::new(FaultConfig::delay_lognormal(
                Duration::from_millis(100),
                0.5,
            )))
            .rule(RuleConfig::new(
                StatusFault::new(429).retry_after_date(Duration::from_secs(5)),
            ))
            .rule(RuleConfig::new(FaultConfig::GoAway))
            .config()
            .expect("valid");
        let read = yaml(
            r#"
seed: 7
hang_cap: 3s
capture_headers: [x-tenant]
capture_response_headers: [x-served-by]
tls: { cert: cert.pem, key: key.pem }
limits: { max_body: 1024, header_timeout: 2s, max_connections: 100 }
orders: { idempotency: check-then-insert, work_delay: 50ms, pay: read-then-write, retry_after_s: 2 }
rules:
  - id: outage
    match:
      method: [POST, PUT]
      path: /orders/*
      headers: { x-sku-check: invalid }
      headers_present: [idempotency-key]
      from: 100ms
      until: 2s
      attempts: "1-2"
      probability: 0.5
    fault: { status: { code: 503, retry_after: 2, headers: { x-why: maintenance }, body: "later\n" } }
  - match: { requests: ["every 4", "10-"] }
    fault: drop
  - match: { path_prefix: /a, hits: 3 }
    fault: reset
  - fault: { reset: { process: true } }
  - fault: hang
  - fault: { hang: { cap: 2s, process: true } }
  - fault: { malformed: { kind: truncated-body } }
  - fault: { malformed: { kind: bad-header, process: true } }
  - fault: { delay: 200ms }
  - fault: { delay: { uniform: [50ms, 150ms] } }
  - fault: { delay: { lognormal: { median: 100ms, sigma: 0.5 } } }
  - fault: { status: { code: 429, retry_after_date: 5s } }
  - fault: goaway
"#,
        );
        assert_eq!(built, read);
    }

    #[test]
    fn a_proxy_equals_its_yaml() {
        let built = ServerBuilder::new()
            .upstream("http://127.0.0.1:9000/api")
            .rule(RuleConfig::new(FaultConfig::Forward).path_prefix("/payments"))
            .rule(RuleConfig::new(FaultConfig::delay_after(
                Duration::from_millis(300),
            )))
            .config()
            .expect("valid");
        let read = yaml(
            "upstream: http://127.0.0.1:9000/api\nrules:\n  - { match: { path_prefix: /payments }, fault: forward }\n  - fault: { delay: { fixed: 300ms, when: after } }\n",
        );
        assert_eq!(built, read);
        let err = ServerBuilder::new()
            .upstream("ftp://x")
            .config()
            .expect_err("not an upstream")
            .to_string();
        assert!(err.starts_with("builder: at `upstream`"), "{err}");
        let err = ServerBuilder::new()
            .rule(RuleConfig::new(FaultConfig::Forward))
            .config()
            .expect_err("nowhere to forward")
            .to_string();
        assert!(err.contains("needs an upstream"), "{err}");
    }

    #[test]
    fn what_serde_would_refuse_the_builder_refuses_with_the_field() {
        let cases: Vec<(RuleConfig, &str)> = vec![
            (
                RuleConfig::new(FaultConfig::status(700)),
                "rules[0].fault.status.code",
            ),
            (
                RuleConfig::new(FaultConfig::Drop).path("orders"),
                "rules[0].match.path",
            ),
            (
                RuleConfig::new(FaultConfig::Drop).probability(1.5),
                "rules[0].match.probability",
            ),
            (
                RuleConfig::new(FaultConfig::Drop).requests(0),
                "rules[0].match.requests",
            ),
            (
                RuleConfig::new(FaultConfig::Drop).attempts(Counts::every(0)),
                "rules[0].match.attempts",
            ),
            (
                RuleConfig::new(FaultConfig::delay_uniform(
                    Duration::from_secs(2),
                    Duration::from_secs(1),
                )),
                "rules[0].fault.delay.uniform",
            ),
            (
                RuleConfig::new(FaultConfig::Drop).method("NOT A METHOD"),
                "rules[0].match.method",
            ),
        ];
        for (rule, field) in cases {
            let err = ServerBuilder::new()
                .rule(rule)
                .config()
                .expect_err("out of bounds")
                .to_string();
            assert!(err.starts_with(&format!("builder: at `{field}`")), "{err}");
        }
        let err = ServerBuilder::new()
            .rule(RuleConfig::new(FaultConfig::Drop).id("x"))
            .rule(RuleConfig::new(FaultConfig::reset()).id("x"))
            .config()
            .expect_err("duplicate id")
            .to_string();
        assert!(err.contains("duplicate rule id"), "{err}");
    }

    #[tokio::test]
    async fn wait_for_gives_up_with_an_error() {
        let server = FaultServer::builder()
            .wait_timeout(Duration::from_millis(50))
            .start()
            .await
            .expect("starts");
        let err = server.wait_for(1).await.expect_err("nothing was sent");
        assert_eq!((err.wanted, err.journaled), (1, 0));
        assert!(server.journal().await.is_empty());
    }
}
