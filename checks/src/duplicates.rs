//! `duplicates`: more than one resource created for one Idempotency-Key.
//!
//! Why: exactly-once delivery does not exist. When a response is lost the client retries, and only
//! an idempotent server turns those retries into one effect. A key that created two orders is a
//! customer charged twice: the one failure the whole idempotency design exists to prevent. The
//! journal's `created` field records the resource each request really created (even when its
//! response was then dropped), so counting distinct `created` ids per key is direct proof.
//!
//! Keys are not the only way a duplicate hides: a client that makes a new key for every attempt
//! creates one resource per key — each key looks clean — while one logical request created several.
//! So requests are also followed by fingerprint (`x-client-id`, method, path and body hash): a
//! request that repeats a *failed* request of the same fingerprint within `window_ms` is its retry,
//! and a chain of such retries that created more than one resource is a duplicate too.
//!
//! For targets whose creations the journal cannot see, `verify` counts through the system of record
//! after a harness run (a GET per key, or an SQL count against SQLite) — see [`VerifyConfig`].
//!
//! Metrics: `keys`, `keys_with_creation`, `resources_created`, `duplicate_keys`,
//! `extra_resources`, `duplicate_requests` (fingerprint chains that created more than one).

use std::path::PathBuf;

use history::{Facts, StoreCounts};
use serde::{Deserialize, Serialize};
use verdict::{CheckResult, Evidence, Verdict};

use super::evidence::{attach, Findings};
use super::failure;
use super::idle::IdleMap;
use super::operations::{Fingerprint, FingerprintRef};
use super::spec::{scale_ms, About, CheckSpec};
use super::{Attempt, Check, Context};

/// Configuration of the `duplicates` check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct DuplicatesConfig {
    /// Read the key from this request header (lower-case) instead of Idempotency-Key.
    pub key_header: Option<String>,
    /// Longest pause (ms) after a failed request for a same-fingerprint request to count as its
    /// retry (the per-request view; see the module docs).
    pub window_ms: u64,
    /// After a harness run, also count the resources of each key in the system of record (a GET
    /// per key, or SQL against SQLite); see [`VerifyConfig`]. Ignored by `analyze`.
    pub verify: Option<VerifyConfig>,
}

impl Default for DuplicatesConfig {
    fn default() -> Self {
        DuplicatesConfig {
            key_header: None,
            window_ms: 60_000,
            verify: None,
        }
    }
}

/// Where to count resources (or a webhook event's effects) per key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VerifyConfig {
    /// A URL (or a path on the target) with `{key}` (or, for webhook events, `{event_id}`),
    /// answering JSON with a count, e.g. the fault server's `/orders?idempotency_key={key}`.
    #[serde(default)]
    pub url: Option<String>,
    /// The JSON field holding the count.
    #[serde(default = "count_field")]
    pub count_field: String,
    /// An SQLite database file to query instead.
    #[serde(default)]
    pub sqlite: Option<PathBuf>,
    /// A PostgreSQL database (`postgres://…`) to query instead.
    #[serde(default)]
    pub postgres: Option<String>,
    /// The SQL returning the count for one key: the key is bound where the query says `{key}`
    /// or `{event_id}` (or `?1` for SQLite, `$1` for PostgreSQL), never pasted into the text.
    #[serde(default)]
    pub query: Option<String>,
}

impl VerifyConfig {
    /// A lookup by URL: `url` with `{key}` or `{event_id}`, the count in the field `count`.
    pub fn url(url: impl Into<String>) -> VerifyConfig {
        VerifyConfig {
            url: Some(url.into()),
            count_field: count_field(),
            sqlite: None,
            postgres: None,
            query: None,
        }
    }

    /// Whether exactly one source is named: a URL, or a database with its query.
    pub fn is_complete(&self) -> bool {
        let sql = self.sqlite.is_some() || self.postgres.is_some();
        !(self.sqlite.is_some() && self.postgres.is_some())
            && self.url.is_some() != sql
            && sql == self.query.is_some()
    }
}

fn count_field() -> String {
    "count".to_string()
}

#[derive(Debug, Default)]
struct KeyState {
    requests: u32,
    /// Distinct created ids, with the `seq` that created each.
    created: Vec<(String, u64)>,
}

/// One logical request followed by fingerprint: its resources, and whether its last attempt
/// failed (only a failure makes the next same-fingerprint request a retry).
#[derive(Debug, Default)]
struct Chain {
    created: Vec<(String, u64)>,
    keys: Vec<String>,
    last_failed: bool,
    last_done_us: u64,
}

/// The `duplicates` check.
pub(crate) struct DuplicatesCheck {
    key_header: Option<String>,
    keys: IdleMap<String, KeyState>,
    chains: IdleMap<Fingerprint, Chain>,
    window_us: u64,
    duplicate_requests: u64,
    now_us: u64,
    findings: Findings,
    keys_seen: u64,
    keys_with_creation: u64,
    resources_created: u64,
    extra_resources: u64,
    /// Most resources one key created.
    max_per_key: u64,
    /// Keys that created a resource, to compare with a store that counts none for them (at
    /// most [`CREATED_KEYS_KEPT`]).
    created_keys: std::collections::HashSet<String>,
}

/// Keys with a creation kept to compare with the store's counts: as many as the verify step asks
/// about, with room to spare.
const CREATED_KEYS_KEPT: usize = 10_000;

impl DuplicatesCheck {
    /// A check configured by `cfg`.
    pub(crate) fn new(cfg: &DuplicatesConfig, ctx: Context) -> Self {
        DuplicatesCheck {
            key_header: cfg.key_header.clone(),
            keys: IdleMap::new(ctx.horizon_us),
            chains: IdleMap::new(ctx.horizon_us),
            window_us: cfg.window_ms.saturating_mul(1000),
            duplicate_requests: 0,
            now_us: 0,
            findings: Findings::new(ctx.max_evidence),
            keys_seen: 0,
            keys_with_creation: 0,
            resources_created: 0,
            extra_resources: 0,
            max_per_key: 0,
            created_keys: std::collections::HashSet::new(),
        }
    }

    /// A fingerprint chain that created several resources under several keys: only the
    /// per-request view sees it (the per-key view already reported same-key duplicates).
    fn judge_chain(&mut self, fp: Fingerprint, chain: Chain) {
        let n = chain.created.len() as u64;
        if n <= 1 || chain.keys.len() <= 1 {
            return;
        }
        self.duplicate_requests += 1;
        self.extra_resources += n - 1;
        let ids: Vec<&str> = chain.created.iter().map(|(id, _)| id.as_str()).collect();
        self.findings.push(
            format!(
                "client {} retried {} {} under {} different keys and created {n} resources ({}) for one request",
                fp.client,
                fp.method,
                fp.path,
                chain.keys.len(),
                ids.join(", ")
            ),
            chain.keys.first().cloned(),
            chain.created.iter().map(|(_, seq)| *seq).collect(),
        );
    }

    fn observe_chain(&mut self, e: &history::Entry, key: Option<&String>) {
        let Some(fp) = FingerprintRef::of(e) else {
            return;
        };
        let failed = failure::failed(e);
        let window = self.window_us;
        let now = e.t_recv_us.max(e.t_done_us);
        let mut closed = None;
        {
            let chain = self.chains.touch(&fp, now, Chain::default);
            let continues =
                chain.last_failed && e.t_recv_us.saturating_sub(chain.last_done_us) <= window;
            if !continues && !chain.created.is_empty() {
                closed = Some(std::mem::take(chain));
            } else if !continues {
                *chain = Chain::default();
            }
            if let Some(k) = key {
                if !chain.keys.contains(k) {
                    chain.keys.push(k.clone());
                }
            }
            if let Some(id) = &e.created {
                if !chain.created.iter().any(|(c, _)| c == id) {
                    chain.created.push((id.clone(), e.seq));
                }
            }
            chain.last_failed = failed;
            chain.last_done_us = e.t_done_us;
        }
        if let Some(c) = closed {
            self.judge_chain(fp.to_fingerprint(), c);
        }
    }

    fn judge(&mut self, key: String, state: KeyState) {
        self.keys_seen += 1;
        let n = state.created.len() as u64;
        self.resources_created += n;
        if n == 0 {
            return;
        }
        self.keys_with_creation += 1;
        self.max_per_key = self.max_per_key.max(n);
        if self.created_keys.len() < CREATED_KEYS_KEPT {
            self.created_keys.insert(key.clone());
        }
        if n > 1 {
            self.extra_resources += n - 1;
            let ids: Vec<&str> = state.created.iter().map(|(id, _)| id.as_str()).collect();
            self.findings.push(
                format!(
                    "key {key} created {n} resources ({}) in {} requests",
                    ids.join(", "),
                    state.requests
                ),
                Some(key),
                state.created.iter().map(|(_, seq)| *seq).collect(),
            );
        }
    }
}

/// A finding without its list of resource ids, for the summary line: the evidence below it
/// lists them once.
fn without_ids(detail: &str) -> String {
    match detail.find(" resources (") {
        Some(at) => {
            let open = at + " resources ".len();
            match detail[open..].find(')') {
                Some(close) => format!("{}{}", &detail[..open - 1], &detail[open + close + 1..]),
                None => detail.to_string(),
            }
        }
        None => detail.to_string(),
    }
}

impl Check for DuplicatesCheck {
    fn name(&self) -> &'static str {
        "duplicates"
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        let e = a.entry;
        self.now_us = self.now_us.max(e.t_recv_us);
        let mut expired = Vec::new();
        self.keys.expire(self.now_us, |k, v| expired.push((k, v)));
        for (k, v) in expired {
            self.judge(k, v);
        }
        let mut expired_chains = Vec::new();
        self.chains
            .expire(self.now_us, |k, v| expired_chains.push((k, v)));
        for (k, v) in expired_chains {
            self.judge_chain(k, v);
        }
        let key = match &self.key_header {
            Some(h) => e.headers.get(h),
            None => e.idempotency_key.as_ref(),
        };
        self.observe_chain(e, key);
        let Some(key) = key else { return };
        let state = self
            .keys
            .touch(key, e.t_recv_us.max(e.t_done_us), KeyState::default);
        state.requests += 1;
        if let Some(id) = &e.created {
            if !state.created.iter().any(|(c, _)| c == id) {
                state.created.push((id.clone(), e.seq));
            }
        }
    }

    fn finish(mut self: Box<Self>, facts: &Facts) -> CheckResult {
        let keys = std::mem::replace(&mut self.keys, IdleMap::new(0));
        for (k, v) in keys.drain() {
            self.judge(k, v);
        }
        let chains = std::mem::replace(&mut self.chains, IdleMap::new(0));
        for (k, v) in chains.drain() {
            self.judge_chain(k, v);
        }
        let (mut verdict, mut summary) = if !self.findings.is_empty() {
            (
                Verdict::Fail,
                format!(
                    "{} of {} keys and {} retried requests created more than one resource ({} extra); first: {}",
                    self.findings.total() - self.duplicate_requests,
                    self.keys_with_creation,
                    self.duplicate_requests,
                    self.extra_resources,
                    without_ids(self.findings.first_detail().unwrap_or_default())
                ),
            )
        } else if self.keys_seen == 0 {
            (
                Verdict::Inconclusive,
                "not enough data: no request carried an idempotency key".to_string(),
            )
        } else if self.keys_with_creation == 0 {
            (
                Verdict::Inconclusive,
                format!(
                    "not enough data: {} keys, but no request created a resource",
                    self.keys_seen
                ),
            )
        } else {
            (
                Verdict::Pass,
                format!(
                    "each of {} keys created at most one resource",
                    self.keys_with_creation
                ),
            )
        };
        let mut store_evidence = Vec::new();
        let mut store_metrics = Vec::new();
        if let Some(store) = &facts.store {
            (verdict, summary) = with_store(
                verdict,
                summary,
                store,
                &self.created_keys,
                &mut store_evidence,
                &mut store_metrics,
            );
        }
        let mut result = CheckResult::new("duplicates", verdict, summary)
            .metric("keys", self.keys_seen)
            .metric("keys_with_creation", self.keys_with_creation)
            .metric("resources_created", self.resources_created)
            .metric(
                "duplicate_keys",
                self.findings.total() - self.duplicate_requests,
            )
            .metric("duplicate_requests", self.duplicate_requests)
            .metric("max_resources_per_key", self.max_per_key)
            .metric("extra_resources", self.extra_resources);
        for (name, value) in store_metrics {
            result = result.metric(name, value);
        }
        let mut result = attach(result, self.findings);
        result.evidence.splice(0..0, store_evidence);
        result
    }
}

/// Most keys named in the evidence of the store's counts.
const STORE_EVIDENCE: usize = 20;

/// The journal's verdict, completed with what the system of record counted per key: a key
/// stored more than once fails; keys the store could not answer for weaken a pass; counts that
/// confirm every key decide a verdict the journal alone could not.
fn with_store(
    verdict: Verdict,
    summary: String,
    store: &StoreCounts,
    created_keys: &std::collections::HashSet<String>,
    evidence: &mut Vec<Evidence>,
    metrics: &mut Vec<(&'static str, u64)>,
) -> (Verdict, String) {
    let counts = match &store.counts {
        Ok(c) => c,
        Err(e) => {
            return (
                Verdict::Fail,
                format!("verify ({}): {e}; {summary}", store.source),
            )
        }
    };
    let bad: Vec<(&str, u64)> = counts
        .iter()
        .filter_map(|k| match k.count {
            Ok(n) if n > 1 => Some((k.key.as_str(), n)),
            _ => None,
        })
        .collect();
    let unreadable = counts.iter().filter(|k| k.count.is_err()).count();
    // A store that counts nothing for a key the journal saw create is probably asked the wrong
    // question (a wrong URL or query); then its silence proves nothing.
    let blind: Vec<&str> = counts
        .iter()
        .filter(|k| k.count == Ok(0) && created_keys.contains(&k.key))
        .map(|k| k.key.as_str())
        .collect();
    metrics.push(("verified_keys", counts.len() as u64));
    if let Some(max) = counts.iter().filter_map(|k| k.count.as_ref().ok()).max() {
        metrics.push(("max_resources_per_key_in_store", *max));
    }
    metrics.push(("verified_duplicate_keys", bad.len() as u64));
    for (key, n) in bad.iter().take(STORE_EVIDENCE) {
        evidence.push(Evidence {
            detail: format!("verify: the store holds {n} resources for key {key}"),
            key: Some(key.to_string()),
            seqs: Vec::new(),
        });
    }
    if !bad.is_empty() {
        return (
            Verdict::Fail,
            format!(
                "verify: {} of {} keys have more than one resource in the store; {summary}",
                bad.len(),
                counts.len()
            ),
        );
    }
    if !blind.is_empty() && verdict == Verdict::Pass {
        for key in blind.iter().take(STORE_EVIDENCE) {
            evidence.push(Evidence {
                detail: format!(
                    "verify: the store counts 0 resources for key {key}, which created one: is \
                     the verify lookup ({}) right?",
                    store.source
                ),
                key: Some(key.to_string()),
                seqs: Vec::new(),
            });
        }
        return (
            Verdict::Weak,
            format!(
                "{summary} (but the store counts nothing for {} of the keys that created: the \
                 verify lookup does not confirm it)",
                blind.len()
            ),
        );
    }
    if unreadable > 0 && verdict == Verdict::Pass {
        return (
            Verdict::Weak,
            format!(
                "{summary} (verify could not read {unreadable} of {} keys)",
                counts.len()
            ),
        );
    }
    if verdict == Verdict::Fail {
        return (verdict, summary);
    }
    let verdict = if verdict == Verdict::Inconclusive && !counts.is_empty() && unreadable == 0 {
        Verdict::Pass
    } else {
        verdict
    };
    (
        verdict,
        format!(
            "{summary} (verified: {} keys, one resource each at most)",
            counts.len()
        ),
    )
}

impl CheckSpec for DuplicatesConfig {
    const NAME: &'static str = "duplicates";
    const ABOUT: About = About {
        catches: "one click, two orders",
        how: "distinct `created` ids per Idempotency-Key; and per request followed across *new* keys by fingerprint (a client that makes a new key per attempt creates one order per key — each key looks clean)",
        evidence: "a keyed request created a resource (or `verify` read every key's count)",
        limits: "from the journal it sees only creations the server records; `verify` counts in the system of record after a `harness run` — `verify: { url: \"/orders?idempotency_key={key}\", count_field: count }` (a GET per key, path relative to the target) or `verify: { sqlite: FILE, query: \"SELECT COUNT(*) FROM orders WHERE idempotency_key = ?1\" }` — for the keys the journal (or, against your own service, the driver) used, at most 2,000; `postgres: URL` with the same query (the key bound where it says `?1`, `$1` or `{key}`) reads PostgreSQL",
    };

    fn scale(&mut self, f: f64) {
        scale_ms(&mut self.window_ms, f);
    }

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(DuplicatesCheck::new(self, ctx))
    }
}

#[cfg(test)]
mod tests {
    use super::without_ids;

    #[test]
    fn the_summary_names_the_first_key_without_repeating_its_ids() {
        assert_eq!(
            without_ids("key k1 created 3 resources (o1, o2, o3) in 3 requests"),
            "key k1 created 3 resources in 3 requests"
        );
        assert_eq!(without_ids("no ids here"), "no ids here");
    }

    use history::Outcome;

    use crate::testutil::{entry, run_one};
    use verdict::Verdict;

    #[test]
    fn fails_when_a_race_creates_several_orders() {
        // Seed exercise 3: concurrent POSTs with one key against SELECT-then-INSERT.
        let j: Vec<_> = (1..=10)
            .map(|i| {
                let e = entry(i, i as f64 * 0.1).key("k1").took(20);
                if i <= 7 {
                    e.created(&format!("ord_{i}"))
                } else {
                    e.status(409)
                }
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|b| b.build())
            .collect();
        let r = run_one("duplicates", "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail);
        assert!(!r.passed());
        assert_eq!(r.metrics["duplicate_keys"], 1);
        assert_eq!(r.metrics["extra_resources"], 6);
        assert_eq!(r.evidence[0].key.as_deref(), Some("k1"));
        assert_eq!(r.evidence[0].seqs, vec![1, 2, 3, 4, 5, 6, 7]);
        assert!(r.summary.contains("7 resources"), "{}", r.summary);
    }

    #[test]
    fn fails_when_new_keys_per_attempt_create_one_resource_each() {
        // The lost-response bug: every attempt carries a fresh key, so every key looks clean, but
        // one request (same client, same body) created three orders.
        let j = [
            entry(1, 0)
                .client("c1")
                .body("b")
                .key("k1")
                .created("ord_1")
                .no_response(Outcome::Dropped)
                .build(),
            entry(2, 100)
                .client("c1")
                .body("b")
                .key("k2")
                .created("ord_2")
                .no_response(Outcome::Dropped)
                .build(),
            entry(3, 300)
                .client("c1")
                .body("b")
                .key("k3")
                .created("ord_3")
                .build(),
        ];
        let r = run_one("duplicates", "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert_eq!(r.metrics["duplicate_keys"], 0);
        assert_eq!(r.metrics["duplicate_requests"], 1);
        assert_eq!(r.metrics["extra_resources"], 2);
        assert_eq!(r.evidence[0].seqs, vec![1, 2, 3]);
        assert!(r.summary.contains("3 different keys"), "{}", r.summary);
    }

    #[test]
    fn the_same_order_placed_again_after_success_is_not_a_duplicate() {
        // Borderline: identical body, new key, but the first request succeeded: a second order
        // on purpose, not a retry.
        let j = [
            entry(1, 0)
                .client("c1")
                .body("b")
                .key("k1")
                .created("ord_1")
                .build(),
            entry(2, 100)
                .client("c1")
                .body("b")
                .key("k2")
                .created("ord_2")
                .build(),
        ];
        let r = run_one("duplicates", "{}", &j);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
    }

    #[test]
    fn passes_when_the_lost_response_is_replayed() {
        // The exactly-once argument: created, response dropped, retry gets the stored result.
        let j = [
            entry(1, 0)
                .key("k1")
                .created("ord_1")
                .no_response(Outcome::Dropped)
                .build(),
            entry(2, 1000).key("k1").replayed().build(),
            entry(3, 1000).key("k2").created("ord_2").build(),
        ];
        let r = run_one("duplicates", "{}", &j);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert_eq!(r.metrics["keys_with_creation"], 2);
        assert!(r.evidence.is_empty());
    }

    #[test]
    fn borderline_same_id_twice_and_unkeyed_creations() {
        // The same id recorded twice is one resource; creations without a key cannot be judged.
        let j = [
            entry(1, 0).key("k1").created("ord_1").build(),
            entry(2, 5).key("k1").created("ord_1").build(),
            entry(3, 6).created("ord_2").build(),
            entry(4, 7).created("ord_3").build(),
        ];
        let r = run_one("duplicates", "{}", &j);
        assert_eq!(r.verdict, Verdict::Pass);
        let none = run_one("duplicates", "{}", &j[2..]);
        assert_eq!(none.verdict, Verdict::Inconclusive);
        assert!(none.passed());
    }

    #[test]
    fn keys_from_a_configured_header() {
        let j = [
            entry(1, 0).header("x-op", "a").created("o1").build(),
            entry(2, 1).header("x-op", "a").created("o2").build(),
        ];
        let r = run_one("duplicates", "{ key_header: x-op }", &j);
        assert_eq!(r.verdict, Verdict::Fail);
    }

    /// Three keys, each creating one order in the journal.
    fn clean() -> Vec<history::Entry> {
        (1..=3)
            .map(|i| {
                entry(i, i as u32 * 10)
                    .key(&format!("k{i}"))
                    .created(&format!("o{i}"))
                    .build()
            })
            .collect()
    }

    fn store(counts: &[(&str, Result<u64, &str>)]) -> history::Facts {
        history::Facts {
            store: Some(history::StoreCounts {
                source: "GET /orders?idempotency_key={key}".into(),
                counts: Ok(counts
                    .iter()
                    .map(|(k, c)| history::KeyCount {
                        key: k.to_string(),
                        count: c.map_err(str::to_string),
                    })
                    .collect()),
            }),
            ..history::Facts::default()
        }
    }

    #[test]
    fn the_store_counts_decide_with_the_journal() {
        use crate::testutil::judge_one;
        let j = clean();
        // The store holds three orders for k2 although the journal saw one.
        let r = judge_one(
            "duplicates",
            "{}",
            &j,
            &store(&[("k1", Ok(1)), ("k2", Ok(3)), ("k3", Ok(1))]),
        );
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(
            r.summary.starts_with("verify: 1 of 3 keys"),
            "{}",
            r.summary
        );
        assert_eq!(r.evidence[0].key.as_deref(), Some("k2"));
        assert_eq!(r.metrics["verified_duplicate_keys"], 1);
        // Every key once: a pass that says it was verified.
        let r = judge_one(
            "duplicates",
            "{}",
            &j,
            &store(&[("k1", Ok(1)), ("k2", Ok(1)), ("k3", Ok(1))]),
        );
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert!(r.summary.contains("verified: 3 keys"), "{}", r.summary);
        // A key the store could not answer for weakens the pass.
        let r = judge_one(
            "duplicates",
            "{}",
            &j,
            &store(&[("k1", Ok(1)), ("k2", Err("answered 500")), ("k3", Ok(1))]),
        );
        assert_eq!(r.verdict, Verdict::Weak, "{}", r.summary);
        // A store that could not be asked at all fails: the gate cannot vouch for anything.
        let mut facts = store(&[]);
        if let Some(s) = &mut facts.store {
            s.counts = Err("connection refused".into());
        }
        let r = judge_one("duplicates", "{}", &j, &facts);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert!(r.summary.contains("connection refused"), "{}", r.summary);
    }

    #[test]
    fn counts_decide_what_a_journal_without_creations_cannot() {
        use crate::testutil::judge_one;
        // A service whose creations the journal does not see: keys, no `created`.
        let j: Vec<_> = (1..=3)
            .map(|i| entry(i, i as u32).key(&format!("k{i}")).build())
            .collect();
        assert_eq!(
            run_one("duplicates", "{}", &j).verdict,
            Verdict::Inconclusive
        );
        let r = judge_one(
            "duplicates",
            "{}",
            &j,
            &store(&[("k1", Ok(1)), ("k2", Ok(1)), ("k3", Ok(0))]),
        );
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
    }

    #[test]
    fn a_store_that_counts_nothing_for_a_creating_key_weakens_the_pass() {
        let r = crate::testutil::judge_one(
            "duplicates",
            "{}",
            &clean(),
            &store(&[("k1", Ok(1)), ("k2", Ok(0)), ("k3", Ok(1))]),
        );
        assert_eq!(r.verdict, Verdict::Weak, "{}", r.summary);
        assert_eq!(r.evidence[0].key.as_deref(), Some("k2"));
        assert_eq!(r.metrics["max_resources_per_key"], 1);
    }
}
