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
//! when the endpoint requires one). The verdicts are pure functions of these records ([`judge`]),
//! so they can be tested on hand-written histories.

mod client;
mod verdicts;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{CONTENT_TYPE, HOST};
use http::{HeaderName, HeaderValue, Method, Request};
use http_body_util::Full;
use reports::CheckResult;
use serde::{Deserialize, Serialize};

pub use client::{Exchange, TransportError};
pub use verdicts::judge;

use client::{connect, Endpoint};

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
}

impl ProbeError {
    /// The CLI exit code: `2` bad input, `3` the run could not be carried out.
    pub fn exit_code(&self) -> i32 {
        match self {
            ProbeError::InvalidUrl { .. } | ProbeError::InvalidConfig { .. } => 2,
            ProbeError::Unreachable { .. } => 3,
        }
    }
}

/// One burst: `concurrency` requests with one key, released together.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RoundResult {
    /// Round number, from 1.
    pub round: usize,
    /// The Idempotency-Key of every request of the round.
    pub key: String,
    /// One per request, in connection order.
    pub responses: Vec<Exchange>,
    /// Spread of the send times (max − min), in µs: how simultaneous the burst really was.
    pub release_skew_us: u64,
    /// Resources stored under the key, as the verify URL counted them after every request.
    pub verify_count: Option<u64>,
    /// Why the verify lookup gave no count, when it failed.
    pub verify_error: Option<String>,
}

impl RoundResult {
    /// Responses with status `201`.
    pub fn created(&self) -> usize {
        self.responses
            .iter()
            .filter(|e| e.status == Some(201))
            .count()
    }

    /// Distinct resource identities among the 2xx responses, in the order first seen.
    pub fn resources(&self) -> Vec<&str> {
        let mut seen: Vec<&str> = Vec::new();
        for r in self.responses.iter().filter(|e| e.is_success()) {
            if let Some(id) = r.resource() {
                if !seen.contains(&id) {
                    seen.push(id);
                }
            }
        }
        seen
    }

    /// Index of the response that speaks for the round: the first `201`, else the first 2xx.
    pub fn reference(&self) -> Option<usize> {
        self.responses
            .iter()
            .position(|e| e.status == Some(201))
            .or_else(|| self.responses.iter().position(Exchange::is_success))
    }

    /// How many resources the key created, by the most damning of the three measures.
    pub fn resources_created(&self) -> u64 {
        let created = self.created() as u64;
        let distinct = self.resources().len() as u64;
        created.max(distinct).max(self.verify_count.unwrap_or(0))
    }

    /// More than one resource for one key: several 201s, several ids, or a verify count over 1.
    pub fn has_duplicates(&self) -> bool {
        self.created() > 1 || self.resources().len() > 1 || self.verify_count.is_some_and(|c| c > 1)
    }
}

/// The sequential requests sent after the bursts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FollowUps {
    /// Round 1's key with round 1's body: should return the stored result.
    pub replay: Exchange,
    /// Round 1's key with a different body: should be refused with `422`.
    pub different_body: Exchange,
    /// No key at all: `400` when the key is required, else a normal creation.
    pub missing_key: Exchange,
}

/// Everything the probe saw, and its verdicts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeOutcome {
    /// The URL probed.
    pub target: String,
    /// `duplicates` and `idempotency_semantics`.
    pub checks: Vec<CheckResult>,
    /// The bursts, in order.
    pub rounds: Vec<RoundResult>,
    /// The replay, different-body and missing-key requests.
    pub follow_ups: FollowUps,
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
}

/// Runs the probe: the bursts, the follow-ups, the verify lookups, then the verdicts.
///
/// Needs a Tokio runtime; on a multi-threaded one the released requests are written in parallel,
/// which keeps the release skew down.
pub async fn probe(cfg: &ProbeConfig) -> Result<ProbeOutcome, ProbeError> {
    let plan = Plan::resolve(cfg)?;
    let started = Instant::now();
    let run = cfg.seed.map_or_else(rand::random, splitmix64);

    let mut rounds = Vec::with_capacity(cfg.rounds);
    for round in 1..=cfg.rounds {
        let key = round_key(run, round);
        let body = plan.body(round)?;
        let responses = plan.burst(&key, body).await?;
        rounds.push(RoundResult {
            round,
            release_skew_us: skew(&responses),
            key,
            responses,
            verify_count: None,
            verify_error: None,
        });
    }

    let first_key = round_key(run, 1);
    let replay = plan.once(Some(&first_key), plan.body(1)?).await?;
    let different_body = plan
        .once(Some(&first_key), plan.mismatched_body(1)?)
        .await?;
    // A body no round used, so an endpoint that deduplicates by content cannot hide the answer.
    let missing_key = plan.once(None, plan.body(cfg.rounds + 1)?).await?;
    let follow_ups = FollowUps {
        replay,
        different_body,
        missing_key,
    };

    // Counted last, so the counts are the store's final word on each key (a replay that created
    // a second resource counts too).
    if let Some(template) = &plan.verify {
        for r in &mut rounds {
            match plan.verify_count(template, &r.key).await {
                Ok(n) => r.verify_count = Some(n),
                Err(e) => r.verify_error = Some(e),
            }
        }
    }

    let checks = judge(&rounds, &follow_ups, cfg.require_key);
    let all: Vec<&Exchange> = rounds
        .iter()
        .flat_map(|r| r.responses.iter())
        .chain([
            &follow_ups.replay,
            &follow_ups.different_body,
            &follow_ups.missing_key,
        ])
        .collect();
    let mut by_status = BTreeMap::new();
    let mut errors_by_kind = BTreeMap::new();
    let mut latency_ms = Vec::with_capacity(all.len());
    for e in &all {
        if let Some(s) = e.status {
            *by_status.entry(s.to_string()).or_insert(0) += 1;
            latency_ms.push(e.latency_ms);
        }
        if let Some(err) = &e.error {
            *errors_by_kind.entry(err.kind.clone()).or_insert(0) += 1;
        }
    }
    let requests_sent = all.len() as u64;
    Ok(ProbeOutcome {
        target: cfg.url.clone(),
        checks,
        release_skew_us_max: rounds.iter().map(|r| r.release_skew_us).max().unwrap_or(0),
        rounds,
        follow_ups,
        requests_sent,
        by_status,
        errors_by_kind,
        latency_ms,
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    })
}

/// The configuration checked and resolved once, so nothing below re-parses it.
struct Plan {
    target: Arc<Endpoint>,
    method: Method,
    key_header: HeaderName,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: serde_json::Value,
    concurrency: usize,
    timeout: Duration,
    verify: Option<String>,
}

impl Plan {
    fn resolve(cfg: &ProbeConfig) -> Result<Plan, ProbeError> {
        let target = Endpoint::parse(&cfg.url).map_err(|reason| ProbeError::InvalidUrl {
            url: cfg.url.clone(),
            reason,
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
        let mut headers = Vec::with_capacity(cfg.headers.len());
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
                    format!("{}{t}", target.origin())
                } else {
                    t.clone()
                };
                Endpoint::parse(&absolute.replace(KEY_PLACEHOLDER, "k")).map_err(|reason| {
                    ProbeError::InvalidUrl {
                        url: t.clone(),
                        reason,
                    }
                })?;
                Some(absolute)
            }
        };
        Ok(Plan {
            target: Arc::new(target),
            method,
            key_header,
            headers,
            body: cfg.body.clone(),
            concurrency: cfg.concurrency,
            timeout: cfg.timeout,
            verify,
        })
    }

    /// The body of `round`, serialized once so every request of the burst sends the same bytes
    /// (servers fingerprint the raw body).
    fn body(&self, round: usize) -> Result<Bytes, ProbeError> {
        encode(&substitute(&self.body, round))
    }

    /// Round `round`'s body with one value changed.
    fn mismatched_body(&self, round: usize) -> Result<Bytes, ProbeError> {
        encode(&mismatch(&substitute(&self.body, round)))
    }

    fn request(&self, key: Option<&str>, body: Bytes) -> Result<Request<Full<Bytes>>, ProbeError> {
        let mut b = Request::builder()
            .method(self.method.clone())
            .uri(self.target.path.as_str())
            .header(HOST, self.target.host_header.as_str());
        if !self.headers.iter().any(|(n, _)| n == CONTENT_TYPE) {
            b = b.header(CONTENT_TYPE, "application/json");
        }
        for (n, v) in &self.headers {
            b = b.header(n, v);
        }
        if let Some(k) = key {
            b = b.header(&self.key_header, k);
        }
        b.body(Full::new(body))
            .map_err(|e| ProbeError::InvalidConfig {
                field: "url",
                reason: format!("cannot build a request: {e}"),
            })
    }

    fn unreachable(&self, source: std::io::Error) -> ProbeError {
        ProbeError::Unreachable {
            url: self.target.url.clone(),
            source,
        }
    }

    /// Opens every connection, then releases all requests at once.
    async fn burst(&self, key: &str, body: Bytes) -> Result<Vec<Exchange>, ProbeError> {
        // Connecting in parallel keeps a round short; nothing is sent until all are open.
        let connecting: Vec<_> = (0..self.concurrency)
            .map(|_| {
                let (ep, timeout) = (self.target.clone(), self.timeout);
                tokio::spawn(async move { connect(&ep, timeout).await })
            })
            .collect();
        let mut conns = Vec::with_capacity(self.concurrency);
        for c in connecting {
            match c.await {
                Ok(Ok(conn)) => conns.push(conn),
                Ok(Err(e)) => return Err(self.unreachable(e)),
                Err(join) => return Err(self.unreachable(std::io::Error::other(join))),
            }
        }
        // Every request is built before any task starts: a task waiting at the barrier for a
        // partner that was never spawned would wait forever.
        let reqs = (0..self.concurrency)
            .map(|_| self.request(Some(key), body.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let barrier = Arc::new(tokio::sync::Barrier::new(self.concurrency));
        let origin = Instant::now();
        let mut sending = Vec::with_capacity(self.concurrency);
        for (conn, req) in conns.into_iter().zip(reqs) {
            let (barrier, timeout) = (barrier.clone(), self.timeout);
            sending.push(tokio::spawn(async move {
                barrier.wait().await;
                conn.send(req, timeout, origin).await
            }));
        }
        let mut out = Vec::with_capacity(self.concurrency);
        for s in sending {
            out.push(s.await.unwrap_or_else(|e| Exchange {
                error: Some(TransportError {
                    kind: "other".to_string(),
                    message: format!("request task failed: {e}"),
                }),
                ..Exchange::default()
            }));
        }
        Ok(out)
    }

    /// One request on its own connection.
    async fn once(&self, key: Option<&str>, body: Bytes) -> Result<Exchange, ProbeError> {
        let conn = connect(&self.target, self.timeout)
            .await
            .map_err(|e| self.unreachable(e))?;
        let req = self.request(key, body)?;
        Ok(conn.send(req, self.timeout, Instant::now()).await)
    }

    /// Asks the verify URL how many resources `key` has. Failures are reported, not fatal: the
    /// verdicts still stand on the responses.
    async fn verify_count(&self, template: &str, key: &str) -> Result<u64, String> {
        let url = template.replace(KEY_PLACEHOLDER, &percent_encode(key));
        let ep = Endpoint::parse(&url)?;
        let conn = connect(&ep, self.timeout)
            .await
            .map_err(|e| format!("cannot reach {url}: {e}"))?;
        let mut b = Request::builder()
            .method(Method::GET)
            .uri(ep.path.as_str())
            .header(HOST, ep.host_header.as_str());
        for (n, v) in &self.headers {
            b = b.header(n, v);
        }
        let req = b
            .body(Full::new(Bytes::new()))
            .map_err(|e| format!("cannot build a request for {url}: {e}"))?;
        let (status, body) = conn.fetch(req, self.timeout).await?;
        if !(200..300).contains(&status) {
            return Err(format!("GET {url} answered {status}"));
        }
        let v: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| format!("GET {url} did not answer JSON: {e}"))?;
        v.get("count")
            .and_then(serde_json::Value::as_u64)
            .ok_or_else(|| format!("GET {url} answered JSON without a numeric `count`"))
    }
}

/// Key of round `round` in run `run`: readable in a server's logs, unique per round.
fn round_key(run: u64, round: usize) -> String {
    format!("probe-{run:016x}-{round}")
}

/// Spreads a small seed over 64 bits, so seeds 1 and 2 give unrelated keys.
fn splitmix64(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn skew(responses: &[Exchange]) -> u64 {
    let sent = responses.iter().map(|e| e.sent_at_us);
    match (sent.clone().min(), sent.max()) {
        (Some(lo), Some(hi)) => hi - lo,
        _ => 0,
    }
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
fn mismatch(v: &serde_json::Value) -> serde_json::Value {
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

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
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
    fn percent_encoding_keeps_unreserved() {
        assert_eq!(percent_encode("probe-ab_1.~"), "probe-ab_1.~");
        assert_eq!(percent_encode("a b&c"), "a%20b%26c");
    }
}
