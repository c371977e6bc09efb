//! The schedule: which fault, if any, a request gets.
//!
//! Rules are evaluated in order and the first match wins. A rule's cheap, deterministic conditions
//! (method, path, headers, time window, request number, key attempt) are tested first; its hit
//! counter only counts requests that met them; the probability draw comes last and is a pure
//! function of (seed, rule, key or seq, attempt) — see [`crate::draw`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, Method};
use primitives::glob::Glob;

use crate::config::{Counts, FaultConfig, PathPattern, RuleConfig};
use crate::draw;

/// A compiled, immutable schedule. Replaced as a whole; never edited in place.
#[derive(Debug)]
pub struct Schedule {
    rules: Vec<Rule>,
    installed: Instant,
    seed: u64,
}

#[derive(Debug)]
struct Rule {
    id: String,
    methods: Vec<Method>,
    path: Option<Glob>,
    path_prefix: Option<String>,
    headers: Vec<(HeaderName, String)>,
    headers_present: Vec<HeaderName>,
    from: Option<Duration>,
    until: Option<Duration>,
    requests: Option<Counts>,
    hits: Option<Counts>,
    attempts: Option<Counts>,
    grpc_method: Option<Glob>,
    grpc_attempts: Option<Counts>,
    probability: Option<f64>,
    fault: Arc<PreparedFault>,
    hit_count: AtomicU64,
}

/// A rule's fault with what answering it needs made once, when the schedule is installed: a
/// `status` fault's body, shared by every response (a megabyte body held by a thousand stalled
/// streams is one megabyte), not copied per request.
#[derive(Debug, PartialEq)]
pub struct PreparedFault {
    /// The fault.
    pub fault: FaultConfig,
    /// A `status` fault's body and its content type.
    pub status_body: Option<(Bytes, &'static str)>,
}

impl PreparedFault {
    fn new(fault: &FaultConfig) -> PreparedFault {
        let status_body = match fault {
            FaultConfig::Status(s) => Some(match &s.body {
                Some(b) => (
                    Bytes::from(b.clone().into_bytes()),
                    "text/plain; charset=utf-8",
                ),
                None => {
                    let code = http::StatusCode::from_u16(s.code.0)
                        .unwrap_or(http::StatusCode::INTERNAL_SERVER_ERROR);
                    let problem = serde_json::json!({
                        "type": "urn:fault-server:problem:injected-fault",
                        "title": code.canonical_reason().unwrap_or("Injected fault"),
                        "status": code.as_u16(),
                        "detail": "this response was injected by the fault schedule",
                    });
                    (Bytes::from(problem.to_string()), "application/problem+json")
                }
            }),
            _ => None,
        };
        PreparedFault {
            fault: fault.clone(),
            status_body,
        }
    }
}

/// What the schedule needs to know about a request.
#[derive(Debug)]
pub struct RequestFacts<'a> {
    /// The method.
    pub method: &'a Method,
    /// The path, without the query.
    pub path: &'a str,
    /// The request headers.
    pub headers: &'a HeaderMap,
    /// 1-based arrival number (since start or the last reset); with `state: shared`, the number
    /// among every replica's requests.
    pub seq: u64,
    /// The Idempotency-Key, when the request has one.
    pub idempotency_key: Option<&'a str>,
    /// 1-based attempt number of the Idempotency-Key.
    pub key_attempt: Option<u32>,
    /// When it arrived.
    pub now: Instant,
    /// What a gRPC call says of itself; `None` for a request that is not one.
    pub grpc: Option<GrpcFacts<'a>>,
}

/// What the schedule needs to know about a gRPC call.
#[derive(Debug, Clone, Copy)]
pub struct GrpcFacts<'a> {
    /// `pkg.Service/Method`.
    pub method: &'a str,
    /// Which attempt of its call: 1 + `grpc-previous-rpc-attempts`.
    pub attempt: u32,
}

/// The schedule's verdict for one request.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision<'s> {
    /// The id of the rule that matched.
    pub rule: &'s str,
    /// Its fault.
    pub fault: &'s FaultConfig,
    /// The draw behind a probabilistic match, for the journal.
    pub draw: Option<f64>,
    /// The fault with what answering it needs, shared.
    pub prepared: &'s Arc<PreparedFault>,
}

impl Schedule {
    /// Compiles validated rules. Windows count from `installed`.
    pub fn new(rules: &[RuleConfig], seed: u64, installed: Instant) -> Schedule {
        let rules = rules
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let m = &r.matcher;
                Rule {
                    id: crate::config::rule_id(r, i),
                    methods: m
                        .method
                        .as_ref()
                        .map(|ms| {
                            ms.0.iter()
                                .filter_map(|s| {
                                    Method::from_bytes(s.to_ascii_uppercase().as_bytes()).ok()
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                    path: m.path.as_ref().map(|p: &PathPattern| Glob::path(&p.0)),
                    path_prefix: m.path_prefix.clone(),
                    headers: m
                        .headers
                        .iter()
                        .filter_map(|(k, v)| {
                            Some((HeaderName::from_bytes(k.as_bytes()).ok()?, v.clone()))
                        })
                        .collect(),
                    headers_present: m
                        .headers_present
                        .iter()
                        .filter_map(|k| HeaderName::from_bytes(k.as_bytes()).ok())
                        .collect(),
                    from: m.from.map(|d| d.0),
                    until: m.until.map(|d| d.0),
                    requests: m.requests.clone(),
                    hits: m.hits.clone(),
                    attempts: m.attempts.clone(),
                    grpc_method: m
                        .grpc_method
                        .as_ref()
                        .map(|p| Glob::path(&format!("/{}", p.0))),
                    grpc_attempts: m.grpc_attempts.clone(),
                    probability: m.probability.map(|p| p.0),
                    fault: Arc::new(PreparedFault::new(&r.fault)),
                    hit_count: AtomicU64::new(0),
                }
            })
            .collect();
        Schedule {
            rules,
            installed,
            seed,
        }
    }

    /// An empty schedule: nothing is faulted.
    pub fn empty(seed: u64) -> Schedule {
        Schedule::new(&[], seed, Instant::now())
    }

    /// The seed behind random decisions.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// True when there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The first rule that matches, if any; hits are counted in this process.
    pub fn decide(&self, req: &RequestFacts<'_>) -> Option<Decision<'_>> {
        let elapsed = req.now.saturating_duration_since(self.installed);
        for rule in &self.rules {
            if !rule.static_match(req, elapsed) {
                continue;
            }
            if let Some(h) = &rule.hits {
                let n = rule.hit_count.fetch_add(1, Ordering::Relaxed) + 1;
                if !h.contains(n) {
                    continue;
                }
            }
            if let Some(d) = self.draw(rule, req) {
                return Some(d);
            }
        }
        None
    }

    /// The first rule that matches, if any, with the rules' hits counted by `bump_hit` (given a
    /// rule's id, it counts one more hit and returns the count): the counters several replicas
    /// share. A rule's hit is counted exactly when [`Schedule::decide`] would count it.
    pub async fn decide_counted<F, Fut, E>(
        &self,
        req: &RequestFacts<'_>,
        mut bump_hit: F,
    ) -> Result<Option<Decision<'_>>, E>
    where
        F: FnMut(&str) -> Fut,
        Fut: std::future::Future<Output = Result<u64, E>>,
    {
        let elapsed = req.now.saturating_duration_since(self.installed);
        for rule in &self.rules {
            if !rule.static_match(req, elapsed) {
                continue;
            }
            if let Some(h) = &rule.hits {
                let n = bump_hit(&rule.id).await?;
                if !h.contains(n) {
                    continue;
                }
            }
            if let Some(d) = self.draw(rule, req) {
                return Ok(Some(d));
            }
        }
        Ok(None)
    }

    /// The rule's decision once its other conditions held: the probability draw, drawn last.
    fn draw<'s>(&'s self, rule: &'s Rule, req: &RequestFacts<'_>) -> Option<Decision<'s>> {
        let mut drawn = None;
        if let Some(p) = rule.probability {
            let (subject, attempt) = match req.idempotency_key {
                Some(k) => (k.to_string(), u64::from(req.key_attempt.unwrap_or(1))),
                None => (req.seq.to_string(), 0),
            };
            let u = draw::uniform(self.seed, &rule.id, &subject, attempt, 0);
            if u >= p {
                return None;
            }
            drawn = Some(u);
        }
        Some(Decision {
            rule: &rule.id,
            fault: &rule.fault.fault,
            draw: drawn,
            prepared: &rule.fault,
        })
    }
}

impl Rule {
    fn static_match(&self, req: &RequestFacts<'_>, elapsed: Duration) -> bool {
        if !self.methods.is_empty() && !self.methods.contains(req.method) {
            return false;
        }
        if let Some(g) = &self.path {
            if !g.matches(req.path) {
                return false;
            }
        }
        if let Some(p) = &self.path_prefix {
            if !req.path.starts_with(p.as_str()) {
                return false;
            }
        }
        for (name, want) in &self.headers {
            match req.headers.get(name) {
                Some(v) if v.as_bytes() == want.as_bytes() => {}
                _ => return false,
            }
        }
        if self
            .headers_present
            .iter()
            .any(|h| !req.headers.contains_key(h))
        {
            return false;
        }
        if self.from.is_some_and(|f| elapsed < f) || self.until.is_some_and(|u| elapsed >= u) {
            return false;
        }
        if self.requests.as_ref().is_some_and(|c| !c.contains(req.seq)) {
            return false;
        }
        if let Some(a) = &self.attempts {
            match req.key_attempt {
                Some(n) if a.contains(u64::from(n)) => {}
                _ => return false,
            }
        }
        if self.grpc_method.is_some() || self.grpc_attempts.is_some() {
            let Some(g) = req.grpc else {
                return false;
            };
            if let Some(m) = &self.grpc_method {
                // The glob reads paths; a method is matched as its `:path`.
                let mut path = String::with_capacity(g.method.len() + 1);
                path.push('/');
                path.push_str(g.method);
                if !m.matches(&path) {
                    return false;
                }
            }
            if let Some(a) = &self.grpc_attempts {
                if !a.contains(u64::from(g.attempt)) {
                    return false;
                }
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn facts<'a>(
        method: &'a Method,
        path: &'a str,
        headers: &'a HeaderMap,
        seq: u64,
        key: Option<&'a str>,
        attempt: Option<u32>,
        now: Instant,
    ) -> RequestFacts<'a> {
        RequestFacts {
            method,
            path,
            headers,
            seq,
            idempotency_key: key,
            key_attempt: attempt,
            now,
            grpc: None,
        }
    }

    #[test]
    fn grpc_calls_match_by_method_and_attempt_and_nothing_else_does() {
        let cfg = Config::from_yaml(
            r#"
rules:
  - { id: retries, match: { grpc_method: "orders.v1.Orders/*", grpc_attempts: "2-" }, fault: { grpc: UNAVAILABLE } }
  - { id: create, match: { grpc_method: /orders.v1.Orders/CreateOrder }, fault: { grpc: { code: ABORTED, pushback_ms: -1 } } }
  - { id: any, match: { grpc_method: "**", headers: { x-tenant: t1 } }, fault: { grpc_after_headers: INTERNAL } }
"#,
            "t",
        )
        .unwrap();
        let now = Instant::now();
        let s = Schedule::new(&cfg.rules, 1, now);
        let (m, none) = (Method::POST, HeaderMap::new());
        let mut tenant = HeaderMap::new();
        tenant.insert("x-tenant", http::HeaderValue::from_static("t1"));
        let decide = |method: &str, attempt: u32, headers: &HeaderMap| {
            let path = format!("/{method}");
            let mut f = facts(&m, &path, headers, 1, None, None, now);
            f.grpc = Some(GrpcFacts { method, attempt });
            s.decide(&f).map(|d| d.rule.to_string())
        };
        assert_eq!(
            decide("orders.v1.Orders/GetOrder", 2, &none).as_deref(),
            Some("retries")
        );
        assert_eq!(decide("orders.v1.Orders/GetOrder", 1, &none), None);
        assert_eq!(
            decide("orders.v1.Orders/CreateOrder", 1, &none).as_deref(),
            Some("create")
        );
        assert_eq!(
            decide("shop.v1.Shop/Buy", 1, &tenant).as_deref(),
            Some("any")
        );
        assert_eq!(decide("shop.v1.Shop/Buy", 1, &none), None);
        // The same path over plain HTTP is no gRPC call.
        let f = facts(
            &m,
            "/orders.v1.Orders/CreateOrder",
            &tenant,
            1,
            None,
            None,
            now,
        );
        assert_eq!(s.decide(&f).map(|d| d.rule), None);
    }

    /// Runs a future that never waits (the counters below answer at once).
    fn futures_ready<T, E: std::fmt::Debug>(
        f: impl std::future::Future<Output = Result<T, E>>,
    ) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(f)
            .unwrap()
    }

    #[test]
    fn shared_hit_counts_decide_like_local_ones() {
        let cfg = Config::from_yaml(
            "rules:\n  - id: h\n    match: { path: /h, hits: \"2-3\" }\n    fault: drop\n",
            "t",
        )
        .unwrap();
        let now = Instant::now();
        let s = Schedule::new(&cfg.rules, 1, now);
        let h = HeaderMap::new();
        let m = Method::GET;
        let count = std::sync::atomic::AtomicU64::new(0);
        let fired: Vec<bool> = (0..4)
            .map(|_| {
                let f = facts(&m, "/h", &h, 1, None, None, now);
                let bump = |id: &str| {
                    assert_eq!(id, "h");
                    let n = count.fetch_add(1, Ordering::Relaxed) + 1;
                    async move { Ok::<u64, ()>(n) }
                };
                futures_ready(s.decide_counted(&f, bump)).is_some()
            })
            .collect();
        assert_eq!(fired, [false, true, true, false]);
        let f = facts(&m, "/other", &h, 1, None, None, now);
        let never = |_: &str| async { Err::<u64, &str>("not reached") };
        assert_eq!(futures_ready(s.decide_counted(&f, never)), None);
    }

    #[test]
    fn first_match_wins_and_conditions_combine() {
        let cfg = Config::from_yaml(
            r#"
rules:
  - id: first-two-attempts
    match: { method: POST, path: /orders, attempts: "1-2" }
    fault: { status: 503 }
  - id: every-third
    match: { path_prefix: /x, requests: "every 3" }
    fault: drop
  - id: header
    match: { headers: { x-chaos: "on" } }
    fault: reset
"#,
            "t",
        )
        .unwrap();
        let now = Instant::now();
        let s = Schedule::new(&cfg.rules, 1, now);
        let h = HeaderMap::new();
        let post = Method::POST;
        let get = Method::GET;
        let d = |m, p, seq, k, a| {
            s.decide(&facts(m, p, &h, seq, k, a, now))
                .map(|d| d.rule.to_string())
        };
        assert_eq!(
            d(&post, "/orders", 1, Some("k"), Some(1)).as_deref(),
            Some("first-two-attempts")
        );
        assert_eq!(
            d(&post, "/orders", 2, Some("k"), Some(2)).as_deref(),
            Some("first-two-attempts")
        );
        assert_eq!(d(&post, "/orders", 3, Some("k"), Some(3)), None);
        assert_eq!(
            d(&post, "/orders", 4, None, None),
            None,
            "no key never matches `attempts`"
        );
        assert_eq!(
            d(&get, "/x/1", 3, None, None).as_deref(),
            Some("every-third")
        );
        assert_eq!(d(&get, "/x/1", 4, None, None), None);
        let mut hh = HeaderMap::new();
        hh.insert("x-chaos", "on".parse().unwrap());
        assert_eq!(
            s.decide(&facts(&get, "/y", &h, 5, None, None, now))
                .map(|d| d.rule),
            None
        );
        assert_eq!(
            s.decide(&facts(&get, "/y", &h, 5, None, None, now).with_headers(&hh))
                .map(|d| d.rule),
            Some("header")
        );
    }

    impl<'a> RequestFacts<'a> {
        fn with_headers(mut self, h: &'a HeaderMap) -> Self {
            self.headers = h;
            self
        }
    }

    #[test]
    fn windows_hits_and_probability_are_reproducible() {
        let cfg = Config::from_yaml(
            r#"
rules:
  - id: window
    match: { path: /w, from: 1s, until: 2s }
    fault: drop
  - id: hits
    match: { path: /h, hits: "2-3" }
    fault: drop
  - id: coin
    match: { path: /p, probability: 0.5 }
    fault: drop
"#,
            "t",
        )
        .unwrap();
        let t0 = Instant::now();
        let s = Schedule::new(&cfg.rules, 9, t0);
        let h = HeaderMap::new();
        let m = Method::GET;
        let at = |p, secs: f64| {
            s.decide(&facts(
                &m,
                p,
                &h,
                1,
                None,
                None,
                t0 + Duration::from_secs_f64(secs),
            ))
            .is_some()
        };
        assert!(!at("/w", 0.5) && at("/w", 1.5) && !at("/w", 2.0));
        let hits: Vec<bool> = (0..4).map(|_| at("/h", 0.0)).collect();
        assert_eq!(hits, [false, true, true, false]);

        let coin = |seed, key: &str, attempt| {
            Schedule::new(&cfg.rules, seed, t0)
                .decide(&facts(&m, "/p", &h, 99, Some(key), Some(attempt), t0))
                .is_some()
        };
        let first: Vec<bool> = (0..200).map(|i| coin(9, &format!("k{i}"), 1)).collect();
        let again: Vec<bool> = (0..200)
            .rev()
            .map(|i| coin(9, &format!("k{i}"), 1))
            .rev()
            .collect();
        assert_eq!(first, again, "same seed, any order → same decisions");
        let fired = first.iter().filter(|b| **b).count();
        let counted: Vec<bool> = (0..200)
            .map(|i| {
                let s = Schedule::new(&cfg.rules, 9, t0);
                let key = format!("k{i}");
                let f = facts(&m, "/p", &h, 99, Some(&key), Some(1), t0);
                let hit = |_: &str| async { Ok::<u64, ()>(1) };
                futures_ready(s.decide_counted(&f, hit)).is_some()
            })
            .collect();
        assert_eq!(
            first, counted,
            "the same decisions with counters kept elsewhere"
        );
        assert!((70..130).contains(&fired), "{fired}");
        let other: Vec<bool> = (0..200).map(|i| coin(10, &format!("k{i}"), 1)).collect();
        assert_ne!(first, other);
    }
}
