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
//!
//! The rooms, each below the ones that use it: `config.rs` what the audit is asked (read by
//! all), `row.rs` an operation's row, `session.rs` sending, making resources and the baseline
//! every probe starts with; the probes `keyed.rs`, `retry.rs` and `repeat.rs`, leaves that know
//! nothing of each other; this file chooses an operation's probe and runs them in order.

mod config;
pub mod init;
mod keyed;
mod repeat;
mod retry;
mod row;
mod session;

use std::sync::Arc;
use std::time::{Duration, Instant};

use openapi::{Api, LinkPlan, Method, Operation, RequestBuilder};
use primitives::draw::splitmix64;
use primitives::glob::Glob;
use reports::model::{AuditedOperation, ProbeKind};
use reports::Report;

use crate::http::Target;
use crate::metrics::Recorder;
use crate::plan::SyncMode;
use crate::report::ReportBuilder;
use row::{inconclusive, row};
use session::{said_where_from, unmade, Auditor, Prepared, Session};

pub use config::{AuditConfig, AuditError, MAX_CONCURRENCY, MAX_ROUNDS};
pub use row::COULD_NOT_BUILD;

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
            Selector::Path(Glob::path(s))
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
        rows.push(operation(&mut auditor, op).await);
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

/// The row of one operation: its request made, then the probe its method and key call for.
async fn operation(a: &mut Auditor<'_>, op: &Operation) -> AuditedOperation {
    let key = a.cfg.key_of(op);
    let probe = kind(op.method, key.is_some());
    let sent_before = a.session.recorder.requests().sent;
    let r = row(op, probe, key.as_ref());
    let mut out = match a.prepare(op).await {
        Err(why) => inconclusive(r, format!("{COULD_NOT_BUILD}: {why}")),
        Ok(request) => {
            let origins = unmade(&request);
            let prepared = Prepared { request, key };
            let judged = match probe {
                ProbeKind::Keyed => keyed::probe(a, op, prepared, r).await,
                ProbeKind::LostResponse => retry::probe(a, op, prepared, r).await,
                _ => repeat::probe(a, op, prepared, r).await,
            };
            said_where_from(judged, &origins)
        }
    };
    out.requests_sent = a
        .session
        .recorder
        .requests()
        .sent
        .saturating_sub(sent_before);
    out
}

/// How an operation is probed, from its method and its key.
fn kind(method: Method, keyed: bool) -> ProbeKind {
    match method {
        Method::Post | Method::Patch if keyed => ProbeKind::Keyed,
        Method::Post | Method::Patch => ProbeKind::LostResponse,
        _ => ProbeKind::Repeat,
    }
}

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
