//! `harness audit --openapi SPEC --base URL`: every unsafe operation of an API probed for what
//! its method promises, straight from its OpenAPI document.
//!
//! The `openapi` crate reads the document and builds one valid request per operation (and says
//! which operation's answer names the resource another one needs); this module sends them and
//! judges. An operation is probed by its semantics:
//! - POST or PATCH with an idempotency key (declared, or forced with `--key-header`): the
//!   idempotency probe of `harness idempotency` (`keyed.rs`), judged by the same `duplicates` and
//!   `idempotency_semantics` checks, with the document's own GET of each resource as the store's
//!   word;
//! - POST or PATCH without a key: the request, then the same request again, as a client retries
//!   after a lost response (`retry.rs`): does the retry create a second resource?
//! - PUT and DELETE, idempotent by RFC 9110: repeated, then concurrent, and the resource looked
//!   at afterwards (`repeat.rs`).
//!
//! Every probe starts with a baseline: the built request sent once. When the API refuses it
//! (4xx), the request was not valid for this API whatever the document says, and nothing is
//! judged: the row says "could not build a valid request" with the API's answer. A verdict is
//! only given where the exchanges decide it; otherwise the row is inconclusive and says why.
//! Resources a request needs (`/orders/{id}`) are made fresh for it by the operations that
//! create them (`session.rs`), so no probe judges another probe's leftovers.

pub mod init;
mod keyed;
mod repeat;
mod retry;
mod session;

use std::sync::Arc;
use std::time::{Duration, Instant};

use fault_server::schedule::Glob;
use openapi::{Api, LinkPlan, Method, Operation, RequestBuilder};
use primitives::draw::splitmix64;
use reports::model::{AuditedOperation, OperationVerdict, ProbeKind};
use reports::{Evidence, Report};
use tokio_util::sync::CancellationToken;

use crate::http::{Connect, Target};
use crate::metrics::Recorder;
use crate::plan::SyncMode;
use crate::report::ReportBuilder;
use session::{Auditor, Session};

/// Most rounds (same-key bursts) per keyed operation.
pub const MAX_ROUNDS: usize = 1000;
/// Most requests released together.
pub const MAX_CONCURRENCY: usize = 1000;

/// What to audit and how hard.
#[derive(Debug, Clone)]
pub struct AuditConfig {
    /// The OpenAPI document: a file, or an `http(s)://` URL.
    pub spec: String,
    /// The API's base URL: `http://127.0.0.1:8080` or `https://api.example.com/v1`.
    pub base: String,
    /// Sent with every request (credentials).
    pub headers: Vec<(String, String)>,
    /// Only these operations (ids, or path globs such as `/orders/**`); all when empty.
    pub only: Vec<String>,
    /// Not these operations (ids or path globs).
    pub skip: Vec<String>,
    /// The idempotency-key header's name.
    pub key_header: String,
    /// Probe every POST and PATCH with `key_header`, declared or not.
    pub force_key: bool,
    /// Same-key bursts per keyed operation.
    pub rounds: usize,
    /// Requests per burst, released together.
    pub concurrency: usize,
    /// Limit for one request.
    pub timeout: Duration,
    /// Seeds the requests built (the keys are fresh every run).
    pub seed: u64,
    /// TLS settings and the protocol.
    pub connect: Connect,
    /// How a burst's requests are made to arrive together.
    pub sync: SyncMode,
    /// A URL (or path) with `{key}` answering JSON with a `count`, for the keyed operations.
    pub verify: Option<String>,
    /// Cancelled on Ctrl-C or SIGTERM: no more operations, and what was done is reported.
    pub stop: CancellationToken,
}

impl AuditConfig {
    /// The defaults, for `spec` against `base`.
    pub fn new(spec: impl Into<String>, base: impl Into<String>) -> AuditConfig {
        AuditConfig {
            spec: spec.into(),
            base: base.into(),
            headers: Vec::new(),
            only: Vec::new(),
            skip: Vec::new(),
            key_header: openapi::DEFAULT_KEY_HEADER.to_string(),
            force_key: false,
            rounds: 5,
            concurrency: 10,
            timeout: Duration::from_secs(5),
            seed: 1,
            connect: Connect::default(),
            sync: SyncMode::Release,
            verify: None,
            stop: CancellationToken::new(),
        }
    }
}

/// Why the audit could not be carried out (an operation that fails is a row, not an error).
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The document cannot be read or is not OpenAPI 3.0/3.1.
    #[error("{0}")]
    Spec(String),
    /// A setting is out of range or malformed.
    #[error("invalid audit setting `{field}`: {reason}")]
    InvalidConfig {
        /// The setting's name.
        field: &'static str,
        /// What is wrong and what would work.
        reason: String,
    },
    /// A file cannot be written.
    #[error("cannot write {path}: {reason}")]
    Write {
        /// The file or directory.
        path: String,
        /// The operating system's error.
        reason: String,
    },
    /// The API (or the document's URL) cannot be reached.
    #[error("cannot reach {url}: {reason}")]
    Unreachable {
        /// The URL.
        url: String,
        /// The operating system's error, or what went wrong.
        reason: String,
    },
}

impl AuditError {
    /// The CLI exit code: `2` bad input, `3` the audit could not be carried out.
    pub fn exit_code(&self) -> u8 {
        match self {
            AuditError::Spec(_) | AuditError::InvalidConfig { .. } => 2,
            AuditError::Unreachable { .. } | AuditError::Write { .. } => 3,
        }
    }
}

/// What the audit did: a row per operation, and the traffic it took.
#[derive(Debug)]
pub struct AuditOutcome {
    /// The base URL.
    pub base: String,
    /// One row per audited operation, in the order they were probed.
    pub operations: Vec<AuditedOperation>,
    /// Every request sent, producers and verifications included.
    pub recorder: Recorder,
    /// Wall-clock time.
    pub duration: Duration,
    /// Stopped by Ctrl-C or SIGTERM before its end.
    pub interrupted: bool,
    /// What the reader must know: the document's oddities, operations left out.
    pub notes: Vec<String>,
}

/// The report of an audit: its rows, the requests it sent, and its notes.
pub fn audit_report(o: &AuditOutcome) -> Report {
    let mut b = ReportBuilder::new(format!("audit {}", o.base))
        .duration(o.duration)
        .target(Some(o.base.clone()))
        .measured(&o.recorder, o.duration)
        .operations(o.operations.clone())
        .interrupted(o.interrupted);
    for n in &o.notes {
        b = b.note(n.clone());
    }
    b.build()
}

/// An operation chosen by `--only` or `--skip`: by id, or by a path glob (`/orders/*`).
#[derive(Debug, Clone)]
enum Selector {
    Id(String),
    Path(Glob),
}

impl Selector {
    fn parse(s: &str) -> Selector {
        if s.starts_with('/') {
            Selector::Path(Glob::new(s))
        } else {
            Selector::Id(s.to_string())
        }
    }

    fn matches(&self, op: &Operation) -> bool {
        match self {
            Selector::Id(id) => op.id == *id,
            Selector::Path(g) => g.matches(&op.path),
        }
    }
}

/// Whether `op` is audited: unsafe, selected by `--only` (when given) and not by `--skip`.
fn selected(op: &Operation, only: &[Selector], skip: &[Selector]) -> bool {
    op.is_unsafe()
        && (only.is_empty() || only.iter().any(|s| s.matches(op)))
        && !skip.iter().any(|s| s.matches(op))
}

/// Runs the audit: loads the document, then probes every selected unsafe operation in the
/// order the link plan gives (creations before what needs their resources).
pub async fn audit(cfg: &AuditConfig) -> Result<AuditOutcome, AuditError> {
    let started = Instant::now();
    let invalid = |field, reason: String| AuditError::InvalidConfig { field, reason };
    if !(1..=MAX_ROUNDS).contains(&cfg.rounds) {
        return Err(invalid("rounds", format!("give 1 to {MAX_ROUNDS}")));
    }
    if !(1..=MAX_CONCURRENCY).contains(&cfg.concurrency) {
        return Err(invalid(
            "concurrency",
            format!("give 1 to {MAX_CONCURRENCY}"),
        ));
    }
    if cfg.timeout.is_zero() {
        return Err(invalid("timeout", "must be more than 0".into()));
    }
    if cfg.sync == SyncMode::SinglePacket && !cfg.connect.http2 {
        return Err(invalid(
            "sync",
            "single-packet needs HTTP/2 (--http2); over HTTP/1.1 use last-byte".into(),
        ));
    }
    if cfg.sync == SyncMode::LastByte && cfg.connect.http2 {
        return Err(invalid(
            "sync",
            "last-byte is for HTTP/1.1; over HTTP/2 use single-packet".into(),
        ));
    }
    let target =
        Target::with(&cfg.base, &cfg.connect).map_err(|e| invalid("base", e.to_string()))?;
    let target = Arc::new(target);
    let session = Session::new(target.clone(), &cfg.headers, &cfg.key_header, cfg.timeout)
        .map_err(|r| invalid("headers", r))?;

    let api = load(cfg).await?;
    let only: Vec<Selector> = cfg.only.iter().map(|s| Selector::parse(s)).collect();
    let skip: Vec<Selector> = cfg.skip.iter().map(|s| Selector::parse(s)).collect();
    let plan = LinkPlan::new(&api);
    let chosen: Vec<&Operation> = plan
        .order()
        .iter()
        .filter_map(|id| api.operation(id))
        .filter(|op| selected(op, &only, &skip))
        .collect();
    if chosen.is_empty() {
        let unsafe_ops = api.unsafe_operations().count();
        return Err(invalid(
            "only",
            format!(
                "no operation to audit: the document has {unsafe_ops} unsafe operation(s) and \
                 --only/--skip left none"
            ),
        ));
    }
    session.reachable().await?;

    let builder =
        RequestBuilder::new(&api, cfg.seed).map_err(|e| AuditError::Spec(e.to_string()))?;
    // Fresh keys every run: a second audit of the same server must not be answered from the
    // first one's keys.
    let nonce = splitmix64(rand::random::<u64>());
    let mut auditor = Auditor::new(&api, &plan, builder, session, cfg, nonce);
    let mut rows = Vec::with_capacity(chosen.len());
    for op in chosen {
        if cfg.stop.is_cancelled() {
            break;
        }
        rows.push(auditor.operation(op).await);
    }
    let mut notes: Vec<String> = api
        .warnings()
        .iter()
        .chain(plan.notes())
        .take(20)
        .cloned()
        .collect();
    let missing_auth = api.auth_headers();
    if !missing_auth.is_empty() && cfg.headers.is_empty() {
        notes.push(format!(
            "the document asks for credentials ({}); pass them with -H",
            missing_auth.join(", ")
        ));
    }
    Ok(AuditOutcome {
        base: cfg.base.clone(),
        operations: rows,
        recorder: auditor.into_recorder(),
        duration: started.elapsed(),
        interrupted: cfg.stop.is_cancelled(),
        notes,
    })
}

/// The document, from a file or fetched from a URL.
async fn load(cfg: &AuditConfig) -> Result<Api, AuditError> {
    let config = openapi::Config {
        key_header: cfg.key_header.clone(),
    };
    if !(cfg.spec.starts_with("http://") || cfg.spec.starts_with("https://")) {
        return Api::from_file(cfg.spec.as_ref(), &config)
            .map_err(|e| AuditError::Spec(e.to_string()));
    }
    let bytes = session::fetch(&cfg.spec, &cfg.connect, &cfg.headers, cfg.timeout).await?;
    Api::from_bytes(&bytes, &cfg.spec, &config).map_err(|e| AuditError::Spec(e.to_string()))
}

/// The key header `op` is probed with, and where it comes from (`declared, required`,
/// `declared`, `forced`).
pub(crate) fn key_of(op: &Operation, cfg: &AuditConfig) -> Option<(String, &'static str)> {
    if let Some(k) = &op.key_header {
        let how = if k.required {
            "declared, required"
        } else {
            "declared"
        };
        return Some((k.name.clone(), how));
    }
    (cfg.force_key && matches!(op.method, Method::Post | Method::Patch))
        .then(|| (cfg.key_header.clone(), "forced"))
}

/// How an operation is probed, from its method and its key.
fn kind(method: Method, keyed: bool) -> ProbeKind {
    match method {
        Method::Post | Method::Patch if keyed => ProbeKind::Keyed,
        Method::Post | Method::Patch => ProbeKind::LostResponse,
        _ => ProbeKind::Repeat,
    }
}

/// A row for `op` before its probe decided anything.
fn row(op: &Operation, probe: ProbeKind, key: Option<&(String, &str)>) -> AuditedOperation {
    AuditedOperation {
        method: op.method.as_str().to_string(),
        path: op.path.clone(),
        operation_id: op.id.clone(),
        key_header: key.map(|(n, _)| n.clone()),
        key_support: key.map_or("none", |(_, s)| s).to_string(),
        probe,
        verdict: OperationVerdict::Inconclusive,
        summary: String::new(),
        creations: String::new(),
        replay: String::new(),
        mismatch: String::new(),
        missing_key: String::new(),
        evidence: Vec::new(),
        checks: Vec::new(),
        request: None,
        requests_sent: 0,
    }
}

/// One line of evidence.
fn evidence(detail: impl Into<String>) -> Evidence {
    Evidence {
        detail: detail.into(),
        key: None,
        seqs: Vec::new(),
    }
}

/// Sets `row` inconclusive with `why`, as the summary and its evidence.
fn inconclusive(mut row: AuditedOperation, why: String) -> AuditedOperation {
    row.verdict = OperationVerdict::Inconclusive;
    row.probe = if why.starts_with(COULD_NOT_BUILD) {
        ProbeKind::None
    } else {
        row.probe
    };
    row.evidence.push(evidence(why.clone()));
    row.summary = why;
    row
}

/// How a row that was not judged because no valid request was made begins.
pub const COULD_NOT_BUILD: &str = "could not build a valid request";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_take_ids_and_path_globs() {
        let api = Api::from_bytes(
            br#"{"openapi":"3.0.3","info":{"title":"t","version":"1"},"paths":{
              "/orders":{"post":{"operationId":"createOrder","responses":{"201":{"description":"ok"}}},
                         "get":{"operationId":"listOrders","responses":{"200":{"description":"ok"}}}},
              "/orders/{id}":{"delete":{"operationId":"deleteOrder","parameters":[{"name":"id","in":"path","required":true,"schema":{"type":"string"}}],"responses":{"204":{"description":"ok"}}}}}}"#,
            "test",
            &openapi::Config::default(),
        )
        .expect("a valid document");
        let ids = |only: &[&str], skip: &[&str]| -> Vec<String> {
            let only: Vec<Selector> = only.iter().map(|s| Selector::parse(s)).collect();
            let skip: Vec<Selector> = skip.iter().map(|s| Selector::parse(s)).collect();
            api.operations()
                .iter()
                .filter(|o| selected(o, &only, &skip))
                .map(|o| o.id.clone())
                .collect()
        };
        assert_eq!(
            ids(&[], &[]),
            ["createOrder", "deleteOrder"],
            "GET is never a row"
        );
        assert_eq!(ids(&["createOrder"], &[]), ["createOrder"]);
        assert_eq!(ids(&["/orders/*"], &[]), ["deleteOrder"]);
        assert_eq!(ids(&[], &["/orders/**"]), ["createOrder"]);
        assert_eq!(ids(&[], &["/orders**"]), Vec::<String>::new());
        assert_eq!(ids(&["listOrders"], &[]), Vec::<String>::new());
    }

    #[test]
    fn the_probe_follows_the_method_and_the_key() {
        assert_eq!(kind(Method::Post, true), ProbeKind::Keyed);
        assert_eq!(kind(Method::Patch, true), ProbeKind::Keyed);
        assert_eq!(kind(Method::Post, false), ProbeKind::LostResponse);
        assert_eq!(kind(Method::Put, true), ProbeKind::Repeat);
        assert_eq!(kind(Method::Delete, false), ProbeKind::Repeat);
    }
}
