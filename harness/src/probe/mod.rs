//! `harness idempotency URL`: probes any HTTP endpoint's Idempotency-Key handling under real
//! concurrency.
//!
//! Why a probe and not a unit test: the classic implementation — `SELECT` the key, and when it is
//! not there do the work and `INSERT` — is correct one request at a time and wrong under
//! concurrency. Ten requests with the same key that arrive together all run the `SELECT` before
//! any of them has inserted, all see "not there", and all create: the lesson this project is built
//! from measured seven orders (the customer charged seven times) from one burst of ten. Serializable
//! isolation does not save it (each transaction's read is consistent; nothing conflicts until the
//! inserts, and without a constraint the inserts don't conflict either), and an in-memory fake of
//! the store does not enforce a unique index with locking, so the buggy version passes its tests.
//! The only convincing test is the real endpoint on its real database, hit by truly concurrent
//! requests: so the probe opens every connection first and releases all the requests at once
//! (and reports the release skew, so a reader can tell the burst really was simultaneous).
//!
//! Each round uses a fresh key for a burst of `concurrency` identical requests. The correct answer
//! (IETF draft-ietf-httpapi-idempotency-key-header, and Stripe) is one `201`, and for the others
//! either a `200` replay of the same resource or `409` + `Retry-After` while the first is in
//! flight. After the bursts come three sequential requests: a replay of round 1 (same key, same
//! body: the stored result), the same key with a different body (`422`), and no key at all (`400`
//! when the endpoint requires one).
//!
//! Every exchange is recorded as a journal entry seen from the client's side — what was sent, the
//! status, the resource the answer named (its `id` or `Location`), `Idempotent-Replayed`,
//! `Retry-After` — and judged by the same `duplicates` and `idempotency_semantics` checks that
//! judge a fault server's journal, with the verify lookup's counts as the store's word.

pub(crate) mod record;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use checks::duplicates::{DuplicatesConfig, VerifyConfig};
use checks::idempotency_semantics::IdempotencySemanticsConfig;
use checks::ChecksConfig;
use history::{Entry, Facts, StoreCounts};
use http::header::{CONTENT_TYPE, HOST};
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use primitives::draw::splitmix64;
use reports::CheckResult;
use serde::Serialize;

use crate::http::http2::Burst;
use crate::http::{AttemptError, Conn, Connect, Outgoing, Reply, Target};
use crate::plan::SyncMode;
pub(crate) use record::Recording;

/// The placeholder in a body string that is replaced by the round number.
pub const ROUND_PLACEHOLDER: &str = "{{round}}";

/// The placeholder in a verify URL that is replaced by the round's key.
pub const KEY_PLACEHOLDER: &str = "{key}";

/// What to probe and how hard.
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeConfig {
    /// Full `http://` URL of the create endpoint (`https` is refused).
    pub url: String,
    /// Request method of the create endpoint.
    pub method: String,
    /// Name of the header that carries the key.
    pub key_header: String,
    /// JSON body; strings may contain `{{round}}`, replaced by the round number.
    pub body: serde_json::Value,
    /// Bursts to fire, each with a fresh key.
    pub rounds: usize,
    /// Requests per burst, all with the same key, released together.
    pub concurrency: usize,
    /// Limit for one request, from connect to the last body byte.
    pub timeout: Duration,
    /// Sent with every request (e.g. `Authorization`), verification lookups included.
    pub headers: Vec<(String, String)>,
    /// URL (or path on the target) with `{key}` that answers JSON with a `count` of resources
    /// stored under the key, e.g. the fault server's `/orders?idempotency_key={key}`.
    pub verify: Option<String>,
    /// Whether the endpoint must refuse a request without a key (`400`).
    pub require_key: bool,
    /// Makes the keys reproducible; random when `None`.
    pub seed: Option<u64>,
    /// TLS settings and the protocol.
    pub connect: Connect,
    /// How each burst's requests are made to arrive together.
    pub sync: SyncMode,
    /// Cancelled on Ctrl-C or SIGTERM: no more rounds, and what was done is judged.
    pub stop: tokio_util::sync::CancellationToken,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            url: String::new(),
            method: "POST".to_string(),
            key_header: "Idempotency-Key".to_string(),
            body: serde_json::json!({ "sku": "probe", "qty": 1 }),
            rounds: 20,
            concurrency: 10,
            timeout: Duration::from_secs(5),
            headers: Vec::new(),
            verify: None,
            require_key: true,
            seed: None,
            connect: Connect::default(),
            sync: SyncMode::Release,
            stop: tokio_util::sync::CancellationToken::new(),
        }
    }
}

impl ProbeConfig {
    /// The defaults, aimed at `url`.
    pub fn new(url: impl Into<String>) -> Self {
        ProbeConfig {
            url: url.into(),
            ..ProbeConfig::default()
        }
    }
}

/// Why the probe could not be carried out (a failing endpoint is an outcome, not an error).
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The target or verify URL is not a usable `http://` URL.
    #[error("invalid URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// What is wrong and what would work.
        reason: String,
    },
    /// A setting is out of range or malformed.
    #[error("invalid probe setting `{field}`: {reason}")]
    InvalidConfig {
        /// The setting's name.
        field: &'static str,
        /// What is wrong and what would work.
        reason: String,
    },
    /// A TCP connection to the target could not be opened.
    #[error("cannot reach {url}: {source}")]
    Unreachable {
        /// The URL that was being connected to.
        url: String,
        /// The operating system's error (or a connect timeout).
        #[source]
        source: std::io::Error,
    },
    /// A request's task died (a panic): its exchange is lost, so the probe cannot be judged.
    #[error("the probe cannot be judged: {0}")]
    TaskDied(String),
}

impl ProbeError {
    /// What kind of failure it is: bad input, or a probe that could not be carried out.
    pub fn kind(&self) -> crate::failure::FailureKind {
        use crate::failure::FailureKind;
        match self {
            ProbeError::InvalidUrl { .. } | ProbeError::InvalidConfig { .. } => {
                FailureKind::BadInput
            }
            ProbeError::Unreachable { .. } | ProbeError::TaskDied(_) => FailureKind::CouldNotRun,
        }
    }
}

/// One burst: its key, and how simultaneous it really was.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Round {
    /// Round number, from 1.
    pub round: usize,
    /// The Idempotency-Key of every request of the round.
    pub key: String,
    /// Spread of the moments the requests finished leaving (max − min), in µs.
    pub release_skew_us: u64,
}

/// Everything the probe saw, and its verdicts.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeOutcome {
    /// The URL probed.
    pub target: String,
    /// Ctrl-C or SIGTERM stopped the probe before its end.
    pub interrupted: bool,
    /// `duplicates` and `idempotency_semantics`.
    pub checks: Vec<CheckResult>,
    /// The bursts, in order.
    pub rounds: Vec<Round>,
    /// Every exchange as the client saw it, one journal entry each, in sending order: the bursts,
    /// then the replay, the different body and the missing key.
    pub exchanges: Vec<Entry>,
    /// The verify lookup's count per round key, when it was asked.
    #[serde(skip)]
    pub store: Option<StoreCounts>,
    /// Each exchange's answer, beside `exchanges`, when the probe was asked to keep them (the
    /// audit reads the resources they name); empty otherwise.
    #[serde(skip)]
    pub answers: Vec<Option<record::Answer>>,
    /// Requests sent to the target (bursts and follow-ups; verify lookups not counted).
    pub requests_sent: u64,
    /// Responses by status code, as a string (`"201"`).
    pub by_status: BTreeMap<String, u64>,
    /// Requests with no response, by kind (`timeout`, `reset`, `closed`, `malformed`, `other`).
    pub errors_by_kind: BTreeMap<String, u64>,
    /// The largest release skew of any round, in µs.
    pub release_skew_us_max: u64,
    /// Latency of every request that got a response, in milliseconds, in sending order.
    pub latency_ms: Vec<f64>,
    /// Wall-clock time the probe took, in milliseconds.
    pub duration_ms: u64,
}

impl ProbeOutcome {
    /// True when no check failed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.passed())
    }

    /// An exchange that followed the bursts: `0` the replay, `1` the different body, `2` the
    /// missing key (the last three exchanges).
    pub fn follow_up(&self, i: usize) -> Option<&Entry> {
        (i < 3)
            .then(|| self.exchanges.len().checked_sub(3 - i))
            .flatten()
            .and_then(|at| self.exchanges.get(at))
    }
}

/// Runs the probe: the bursts, the follow-ups, the verify lookups, then the checks.
///
/// Needs a Tokio runtime; on a multi-threaded one the released requests are written in parallel,
/// which keeps the release skew down.
pub async fn probe(cfg: &ProbeConfig) -> Result<ProbeOutcome, ProbeError> {
    let plan = ProbePlan::resolve(cfg)?;
    plan.reachable().await?;
    let run = cfg.seed.map_or_else(rand::random, splitmix64);
    let exchanged = plan.exchange(run, cfg.rounds, &cfg.stop).await?;

    // Counted last, so the counts are the store's final word on each key (a replay that created
    // a second resource counts too).
    let store = match &plan.verify {
        Some(url) => {
            let keys: Vec<String> = exchanged.rounds.iter().map(|r| r.key.clone()).collect();
            let verify = VerifyConfig::url(url.clone());
            Some(
                crate::verify::store_counts_with(
                    &verify,
                    &keys,
                    Some(&plan.target.url),
                    &plan.headers,
                    &cfg.connect,
                )
                .await,
            )
        }
        None => None,
    };
    Ok(plan.judge(exchanged, store, cfg.require_key, cfg.stop.is_cancelled()))
}

/// What a probe's bursts and follow-ups exchanged, before the checks judged it.
pub(crate) struct Exchanged {
    /// The bursts, in order.
    pub(crate) rounds: Vec<Round>,
    /// Every exchange.
    pub(crate) rec: Recording,
}

/// How a probe's bodies are made.
#[derive(Debug, Clone)]
pub(crate) enum Bodies {
    /// A JSON template: `{{round}}` replaced by the round number; the different body changes
    /// one of its values; the request without a key uses a round no burst used.
    Template(serde_json::Value),
    /// Bodies the caller made (an OpenAPI operation's, each valid against its schema): the same
    /// bytes every round, another valid body for the mismatch, a third for the missing key.
    Fixed {
        /// Every round's body.
        body: Bytes,
        /// The same key with this body must be refused.
        mismatched: Bytes,
        /// Sent without a key.
        unkeyed: Bytes,
    },
}

/// The configuration checked and resolved once, so nothing below re-parses it. `harness audit`
/// makes one per keyed operation from the request it built.
pub(crate) struct ProbePlan {
    /// The URL as given.
    pub(crate) url: String,
    pub(crate) target: Arc<Target>,
    /// The request target: path and query.
    pub(crate) uri: String,
    /// The path alone, as the journal records it.
    pub(crate) path: String,
    pub(crate) method: Method,
    pub(crate) key_header: HeaderName,
    /// Sent with every request: credentials, the operation's other header parameters, the
    /// content type; never the key.
    pub(crate) headers: Vec<(HeaderName, HeaderValue)>,
    pub(crate) bodies: Bodies,
    pub(crate) concurrency: usize,
    pub(crate) timeout: Duration,
    pub(crate) verify: Option<String>,
    pub(crate) sync: SyncMode,
    /// Whether the recording keeps each answer's status, headers and JSON body (the audit reads
    /// the resources they name).
    pub(crate) keep_answers: bool,
}

impl ProbePlan {
    fn resolve(cfg: &ProbeConfig) -> Result<ProbePlan, ProbeError> {
        let invalid_url = |reason: String| ProbeError::InvalidUrl {
            url: cfg.url.clone(),
            reason,
        };
        let uri: http::Uri = cfg.url.parse().map_err(|e| {
            invalid_url(format!(
                "not a URL ({e}); expected e.g. http://127.0.0.1:8080/orders"
            ))
        })?;
        if uri.scheme().is_none() || uri.authority().is_none() {
            return Err(invalid_url(
                "not an absolute URL; expected e.g. http://127.0.0.1:8080/orders".into(),
            ));
        }
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(invalid_url(
                "credentials in the URL are not supported; pass an Authorization header instead"
                    .into(),
            ));
        }
        let origin = format!(
            "{}://{}",
            uri.scheme_str().unwrap_or("http"),
            uri.authority().map_or("", |a| a.as_str())
        );
        match (cfg.sync, cfg.connect.http2) {
            (SyncMode::SinglePacket, false) => {
                return Err(ProbeError::InvalidConfig {
                    field: "sync",
                    reason: "single-packet needs HTTP/2 (--http2); over HTTP/1.1 use last-byte"
                        .into(),
                })
            }
            (SyncMode::LastByte, true) => {
                return Err(ProbeError::InvalidConfig {
                    field: "sync",
                    reason: "last-byte is for HTTP/1.1; over HTTP/2 use single-packet".into(),
                })
            }
            _ => {}
        }
        let target = Target::with(&origin, &cfg.connect).map_err(|e| match e {
            crate::http::TargetError::Invalid { reason, .. } => invalid_url(reason),
            other => invalid_url(other.to_string()),
        })?;
        let invalid = |field, reason: String| ProbeError::InvalidConfig { field, reason };
        if cfg.rounds == 0 {
            return Err(invalid("rounds", "must be at least 1".into()));
        }
        if cfg.concurrency == 0 {
            return Err(invalid("concurrency", "must be at least 1".into()));
        }
        if cfg.timeout.is_zero() {
            return Err(invalid("timeout", "must be more than 0".into()));
        }
        let method = Method::from_bytes(cfg.method.to_ascii_uppercase().as_bytes())
            .map_err(|_| invalid("method", format!("{:?} is not an HTTP method", cfg.method)))?;
        let key_header = HeaderName::from_bytes(cfg.key_header.as_bytes()).map_err(|_| {
            invalid(
                "key_header",
                format!("{:?} is not a header name", cfg.key_header),
            )
        })?;
        let mut headers = Vec::with_capacity(cfg.headers.len() + 1);
        for (name, value) in &cfg.headers {
            let n = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| invalid("headers", format!("{name:?} is not a header name")))?;
            if n == key_header {
                // It would give the missing-key request a key and every round the same one.
                return Err(invalid(
                    "headers",
                    format!("{name} is the key header; the probe sets it per round"),
                ));
            }
            if n == HOST || n == http::header::CONTENT_LENGTH {
                return Err(invalid("headers", format!("{name} is set by the probe")));
            }
            let v = HeaderValue::from_str(value).map_err(|_| {
                invalid(
                    "headers",
                    format!("the value of {name} is not a valid header value"),
                )
            })?;
            headers.push((n, v));
        }
        if !headers.iter().any(|(n, _)| n == CONTENT_TYPE) {
            headers.push((CONTENT_TYPE, HeaderValue::from_static("application/json")));
        }
        let verify = match &cfg.verify {
            None => None,
            Some(t) => {
                if !t.contains(KEY_PLACEHOLDER) {
                    return Err(invalid(
                        "verify",
                        format!("{t:?} has no {KEY_PLACEHOLDER} placeholder; e.g. /orders?idempotency_key={KEY_PLACEHOLDER}"),
                    ));
                }
                let absolute = if t.starts_with('/') {
                    format!("{origin}{t}")
                } else {
                    t.clone()
                };
                let probe_url = absolute.replace(KEY_PLACEHOLDER, "k");
                if !probe_url.starts_with("http://") || probe_url.parse::<http::Uri>().is_err() {
                    return Err(ProbeError::InvalidUrl {
                        url: t.clone(),
                        reason: "expected an http:// URL or a path on the target".into(),
                    });
                }
                Some(absolute)
            }
        };
        Ok(ProbePlan {
            url: cfg.url.clone(),
            uri: uri
                .path_and_query()
                .map_or_else(|| "/".to_string(), |p| p.as_str().to_string()),
            path: uri.path().to_string(),
            target: Arc::new(target),
            method,
            key_header,
            headers,
            bodies: Bodies::Template(cfg.body.clone()),
            concurrency: cfg.concurrency,
            timeout: cfg.timeout,
            verify,
            sync: cfg.sync,
            keep_answers: false,
        })
    }

    /// Sends `rounds` bursts, each with a fresh key, then the follow-ups: a replay of round 1,
    /// the same key with a different body, and no key.
    pub(crate) async fn exchange(
        &self,
        run: u64,
        rounds_wanted: usize,
        stop: &tokio_util::sync::CancellationToken,
    ) -> Result<Exchanged, ProbeError> {
        let mut rec = Recording::new(&self.method, &self.path, &self.headers);
        if self.keep_answers {
            rec.keep_answers();
        }
        let mut rounds = Vec::with_capacity(rounds_wanted);
        for round in 1..=rounds_wanted {
            if stop.is_cancelled() {
                break;
            }
            let key = round_key(run, round);
            let body = self.body(round)?;
            let release_skew_us = tokio::select! {
                biased;
                () = stop.cancelled() => break,
                s = self.burst(Some(&key), body, &mut rec) => s,
            };
            rounds.push(Round {
                round,
                key,
                release_skew_us,
            });
        }
        let first_key = round_key(run, 1);
        if !stop.is_cancelled() {
            self.once(Some(&first_key), self.body(1)?, &mut rec).await;
            self.once(Some(&first_key), self.mismatched_body(1)?, &mut rec)
                .await;
            self.once(None, self.unkeyed_body(rounds_wanted + 1)?, &mut rec)
                .await;
        }
        if !rec.task_failures.is_empty() {
            return Err(ProbeError::TaskDied(rec.task_failures.join("; ")));
        }
        Ok(Exchanged { rounds, rec })
    }

    /// The `duplicates` and `idempotency_semantics` checks on what was exchanged, with the
    /// store's counts per key when they were asked.
    pub(crate) fn judge(
        &self,
        exchanged: Exchanged,
        store: Option<StoreCounts>,
        require_key: bool,
        interrupted: bool,
    ) -> ProbeOutcome {
        let Exchanged { rounds, rec } = exchanged;
        let checks_cfg = ChecksConfig {
            duplicates: Some(DuplicatesConfig::default()),
            idempotency_semantics: Some(IdempotencySemanticsConfig {
                require_key_paths: if require_key {
                    vec![self.path.clone()]
                } else {
                    Vec::new()
                },
                require_key_methods: vec![self.method.to_string()],
                ..IdempotencySemanticsConfig::default()
            }),
            ..ChecksConfig::none()
        };
        let facts = Facts {
            store: store.clone(),
            ..Facts::default()
        };
        let checks = checks::judge(&checks_cfg, &rec.entries, &facts);
        let requests = rec.requests();
        ProbeOutcome {
            interrupted,
            target: self.url.clone(),
            checks,
            release_skew_us_max: rounds.iter().map(|r| r.release_skew_us).max().unwrap_or(0),
            rounds,
            store,
            requests_sent: requests.sent,
            by_status: requests.by_status,
            errors_by_kind: rec.errors_by_kind,
            latency_ms: rec.latency_ms,
            duration_ms: u64::try_from(rec.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            answers: rec.answers.unwrap_or_default(),
            exchanges: rec.entries,
        }
    }

    /// A TCP connection to the target can be made (else the probe cannot run at all).
    pub(crate) async fn reachable(&self) -> Result<(), ProbeError> {
        let unreachable = |source| ProbeError::Unreachable {
            url: self.url.clone(),
            source,
        };
        match tokio::time::timeout(self.timeout, self.target.connect_tcp()).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(unreachable(e)),
            Err(_) => Err(unreachable(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("connect timed out after {:?}", self.timeout),
            ))),
        }
    }

    /// The body of `round`, serialized once so every request of the burst sends the same bytes
    /// (servers fingerprint the raw body).
    fn body(&self, round: usize) -> Result<Bytes, ProbeError> {
        match &self.bodies {
            Bodies::Template(t) => encode(&substitute(t, round)),
            Bodies::Fixed { body, .. } => Ok(body.clone()),
        }
    }

    /// Round `round`'s body with one value changed.
    fn mismatched_body(&self, round: usize) -> Result<Bytes, ProbeError> {
        match &self.bodies {
            Bodies::Template(t) => encode(&mismatch(&substitute(t, round))),
            Bodies::Fixed { mismatched, .. } => Ok(mismatched.clone()),
        }
    }

    /// The body sent without a key: one no round used, so an endpoint that deduplicates by
    /// content cannot hide the answer.
    fn unkeyed_body(&self, round: usize) -> Result<Bytes, ProbeError> {
        match &self.bodies {
            Bodies::Template(t) => encode(&substitute(t, round)),
            Bodies::Fixed { unkeyed, .. } => Ok(unkeyed.clone()),
        }
    }

    fn request(&self, key: Option<&str>, body: Bytes) -> Outgoing {
        let mut headers = HeaderMap::with_capacity(self.headers.len() + 1);
        for (n, v) in &self.headers {
            headers.insert(n.clone(), v.clone());
        }
        if let Some(v) = key.and_then(|k| HeaderValue::from_str(k).ok()) {
            headers.insert(self.key_header.clone(), v);
        }
        Outgoing {
            method: self.method.clone(),
            uri: self.uri.clone(),
            headers,
            body,
        }
    }

    /// Opens every connection, then releases all requests at once (as `sync` says), with `key`
    /// or without one; returns the release skew as the client measured it.
    pub(crate) async fn burst(&self, key: Option<&str>, body: Bytes, rec: &mut Recording) -> u64 {
        if self.sync == SyncMode::SinglePacket {
            let conns = Burst::new(self.target.clone());
            let most = crate::http::http2::OWN_STREAM_CAP;
            if let Err(e) = conns.open(self.concurrency, most, self.timeout).await {
                tracing::warn!("probe connection failed: {e}");
            }
            let reqs = (0..self.concurrency)
                .map(|_| self.request(key, body.clone()))
                .collect();
            let t0 = Instant::now();
            let (replies, released) = conns.single_packet(reqs, self.timeout).await;
            let t1 = Instant::now();
            for r in &replies {
                rec.exchange(key, &body, released.max(t0), t1, r);
            }
            // One write carries every last frame: nothing to spread.
            return 0;
        }
        let mut conns: Vec<Conn> = (0..self.concurrency)
            .map(|_| Conn::new(self.target.clone()))
            .collect();
        // Connections first, so the release is not spread by TCP handshakes.
        for c in &mut conns {
            if let Err(e) = c.open().await {
                tracing::warn!("probe connection failed: {e}");
            }
        }
        let barrier = Arc::new(crate::http::release::Release::new(self.concurrency));
        let last_byte = self.sync == SyncMode::LastByte;
        let mut sending = Vec::with_capacity(self.concurrency);
        for mut conn in conns {
            let (barrier, timeout) = (barrier.clone(), self.timeout);
            let req = self.request(key, body.clone());
            let started = Instant::now();
            sending.push(tokio::spawn(async move {
                let result = conn
                    .send_released(req, timeout, Some(&barrier), last_byte)
                    .await;
                (
                    conn.released_at().unwrap_or(started),
                    Instant::now(),
                    result,
                )
            }));
        }
        let mut sent = Vec::with_capacity(self.concurrency);
        for s in sending {
            match s.await {
                Ok((t0, t1, result)) => {
                    sent.push(t0);
                    rec.exchange(key, &body, t0, t1, &result);
                }
                Err(e) => rec
                    .task_failures
                    .push(format!("a request of key {}: {e}", key.unwrap_or("(none)"))),
            }
        }
        match (sent.iter().min(), sent.iter().max()) {
            (Some(lo), Some(hi)) => u64::try_from((*hi - *lo).as_micros()).unwrap_or(u64::MAX),
            _ => 0,
        }
    }

    /// One request on its own connection.
    pub(crate) async fn once(&self, key: Option<&str>, body: Bytes, rec: &mut Recording) {
        let mut conn = Conn::new(self.target.clone());
        let t0 = Instant::now();
        let result: Result<Reply, AttemptError> = conn
            .send(self.request(key, body.clone()), self.timeout)
            .await;
        rec.exchange(key, &body, t0, Instant::now(), &result);
    }
}

/// Key of round `round` in run `run`: readable in a server's logs, unique per round.
pub(crate) fn round_key(run: u64, round: usize) -> String {
    format!("probe-{run:016x}-{round}")
}

fn encode(v: &serde_json::Value) -> Result<Bytes, ProbeError> {
    serde_json::to_vec(v)
        .map(Bytes::from)
        .map_err(|e| ProbeError::InvalidConfig {
            field: "body",
            reason: e.to_string(),
        })
}

/// Replaces `{{round}}` in every string of `v`.
fn substitute(v: &serde_json::Value, round: usize) -> serde_json::Value {
    use serde_json::Value;
    match v {
        Value::String(s) => Value::String(s.replace(ROUND_PLACEHOLDER, &round.to_string())),
        Value::Array(a) => Value::Array(a.iter().map(|x| substitute(x, round)).collect()),
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| (k.clone(), substitute(x, round)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// The same request with different content. It changes an existing value rather than adding a
/// field, because an endpoint that validates its schema would refuse an unknown field with `400`
/// and hide whether it compares bodies at all.
pub(crate) fn mismatch(v: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    let mut out = v.clone();
    if let Value::Object(m) = &mut out {
        for (_, x) in m.iter_mut() {
            let changed = match x {
                Value::Number(n) => Some(match n.as_i64() {
                    Some(i) => Value::from(i.wrapping_add(1)),
                    None => Value::from(n.as_f64().unwrap_or(0.0) + 1.0),
                }),
                Value::String(s) => Some(Value::String(format!("{s}-different"))),
                Value::Bool(b) => Some(Value::Bool(!*b)),
                _ => None,
            };
            if let Some(c) = changed {
                *x = c;
                return out;
            }
        }
        m.insert("probe_variant".to_string(), Value::from("different"));
        return out;
    }
    serde_json::json!({ "probe_variant": "different", "original": v })
}

#[cfg(test)]
mod tests {
    use super::record::resource;
    use super::*;
    use serde_json::json;

    #[test]
    fn round_placeholder_is_replaced_in_nested_strings() {
        let v = json!({ "sku": "A-{{round}}", "lines": [{ "note": "{{round}}" }], "qty": 1 });
        assert_eq!(
            substitute(&v, 7),
            json!({ "sku": "A-7", "lines": [{ "note": "7" }], "qty": 1 })
        );
    }

    #[test]
    fn mismatch_changes_an_existing_value() {
        assert_eq!(
            mismatch(&json!({ "qty": 1, "sku": "p" })),
            json!({ "qty": 2, "sku": "p" })
        );
        assert_eq!(
            mismatch(&json!({ "sku": "p" })),
            json!({ "sku": "p-different" })
        );
        assert_eq!(
            mismatch(&json!({})),
            json!({ "probe_variant": "different" })
        );
        assert_eq!(
            mismatch(&json!([1])),
            json!({ "probe_variant": "different", "original": [1] })
        );
    }

    #[test]
    fn keys_are_reproducible_from_a_seed_and_distinct_per_round() {
        let run = splitmix64(42);
        assert_eq!(round_key(run, 3), round_key(splitmix64(42), 3));
        assert_ne!(round_key(run, 3), round_key(run, 4));
        assert_ne!(round_key(run, 1), round_key(splitmix64(43), 1));
    }

    #[test]
    fn the_resource_is_the_id_else_the_location() {
        let mut h = http::HeaderMap::new();
        assert_eq!(resource(&h, br#"{"id":"o1"}"#), Some("o1".to_string()));
        assert_eq!(resource(&h, br#"{"id":7}"#), Some("7".to_string()));
        h.insert("location", http::HeaderValue::from_static("/orders/o9"));
        assert_eq!(resource(&h, b"created"), Some("/orders/o9".to_string()));
        assert_eq!(resource(&http::HeaderMap::new(), b"[]"), None);
    }
}
