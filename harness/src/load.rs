//! `harness load URL`: ad-hoc load from flags alone, open or closed model, bounded by duration or
//! request count.
//!
//! A load is judged by thresholds (`--threshold`, the `thresholds` check's rules) on what the
//! clients measured. Without an error-rate rule of the user's, `error_rate <= 1%` applies
//! ([`DEFAULT_MAX_ERROR_RATE`], `--max-error-rate` to change it): a smoke test whose requests all
//! failed must not pass, and a load that sent nothing has no verdict.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http::{HeaderName, Method};
use reports::model::Report;

use crate::driver::{self, Keys, PhaseCtx};
use crate::http::Target;
use crate::plan::{PhaseKind, PhasePlan};
use crate::progress::Progress;
use crate::reach::{ensure_reachable, RunError};
use crate::report::ReportBuilder;
use crate::template::{RequestTemplate, Text};
use checks::threshold_rules::{Metric, Rule};
use checks::thresholds::{LatencyFigures, Measured};
use retry_policy::Policy;
use tokio_util::sync::CancellationToken;

/// Default duration when neither `--duration` nor `--requests` is given.
pub const DEFAULT_DURATION: Duration = Duration::from_secs(10);
/// Default connections for `--concurrency` and for rate mode.
pub const DEFAULT_CONNECTIONS: u32 = 64;
/// The error-rate threshold applied when neither `--max-error-rate` nor an `error_rate` rule of
/// `--threshold` is given: the share of operations with no response or a 5xx.
pub const DEFAULT_MAX_ERROR_RATE: &str = "1%";

/// The flags as given.
#[derive(Debug, Clone)]
pub struct LoadFlags {
    /// The target URL.
    pub url: String,
    /// `--rate`: requests per second (open model).
    pub rate: Option<f64>,
    /// `--concurrency`: clients (closed model).
    pub concurrency: Option<u32>,
    /// `--duration`.
    pub duration: Option<Duration>,
    /// `--requests`.
    pub requests: Option<u64>,
    /// `--method`.
    pub method: String,
    /// `--header`, each `Name: value`.
    pub headers: Vec<String>,
    /// `--json`: a JSON body (or a gRPC call's message, also from `-d`).
    pub json: Option<String>,
    /// `-d` / `-D`: a body sent as it is.
    pub data: Option<String>,
    /// `-T`: the content type of `data`.
    pub content_type: Option<String>,
    /// `--timeout`, per request.
    pub timeout: Duration,
    /// `--connections` of an open model.
    pub connections: Option<u32>,
    /// TLS settings and the protocol.
    pub connect: crate::http::Connect,
    /// `--threshold`, each a rule such as `p99 < 200ms` or `error_rate < 1%`.
    pub thresholds: Vec<String>,
    /// `--max-error-rate`: a percentage (`1%`) or a fraction (`0.01`).
    pub max_error_rate: Option<String>,
    /// A gRPC call instead of an HTTP request (a `grpc://` or `grpcs://` URL).
    pub grpc: Option<GrpcFlags>,
}

/// The flags of a gRPC load: `--call`, `--proto`, `--import-path`, `--deadline`; the message is
/// `--json` (or `-d '{…}'`), the metadata `-H`.
#[derive(Debug, Clone)]
pub struct GrpcFlags {
    /// `--call pkg.Service/Method`.
    pub call: String,
    /// `--proto`, repeatable.
    pub protos: Vec<std::path::PathBuf>,
    /// `--import-path`, repeatable.
    pub import_paths: Vec<std::path::PathBuf>,
    /// `--deadline`: each call's, sent as `grpc-timeout`.
    pub deadline: Option<Duration>,
    /// The schema the target's server reflection gave ([`reflect`]), looked in before the
    /// built-in orders service; `None` with `--proto` or when the built-in one is called.
    pub reflected: Option<grpc::Schema>,
}

/// Whether a gRPC load of `call` asks the target's server reflection for its schema: without
/// `--proto`, when asked to (`--reflect`) or when the method's service is not the built-in
/// `orders.v1.Orders`.
pub fn needs_reflection(call: &str, protos: &[std::path::PathBuf], asked: bool) -> bool {
    protos.is_empty()
        && (asked || call.split_once('/').map(|(s, _)| s) != Some(grpc::orders::SERVICE))
}

/// Why a gRPC target's schema could not be had from its server reflection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReflectError {
    /// The target could not be reached, or did not answer in time: the run cannot be made.
    Unreachable(String),
    /// The target answered but gave no usable schema (no reflection service, an unknown
    /// symbol, malformed descriptors): the user must name the `.proto` files.
    NoSchema(String),
}

impl std::fmt::Display for ReflectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReflectError::Unreachable(m) | ReflectError::NoSchema(m) => f.write_str(m),
        }
    }
}

/// The schema of a gRPC target that describes itself: its server reflection
/// (`grpc.reflection.v1`, else `v1alpha`), asked over one HTTP/2 connection within `timeout`
/// per request. The message says what failed and what to do instead.
pub async fn reflect(
    url: &str,
    connect: &crate::http::Connect,
    timeout: Duration,
) -> Result<grpc::Schema, ReflectError> {
    use grpc::reflection::ReflectFailure;
    let target =
        grpc::target::target(url, connect).map_err(|e| ReflectError::NoSchema(e.to_string()))?;
    let host = target.host.clone();
    let mut conn = transport::Conn::new(Arc::new(target));
    grpc::reflection::reflect(&mut conn, &host, timeout)
        .await
        .map_err(|e| match e {
            ReflectFailure::Status {
                code: grpc::Code::Unavailable | grpc::Code::DeadlineExceeded,
                ..
            } => ReflectError::Unreachable(format!(
                "{url}: server reflection could not be asked: {e}"
            )),
            e => ReflectError::NoSchema(format!(
                "{url}: no schema from the target's server reflection ({e}); name the .proto \
                 file that defines the method with --proto"
            )),
        })
}

/// Validated load settings.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Where the load goes.
    pub target: Arc<Target>,
    /// The load as one phase.
    pub phase: PhasePlan,
    /// The rules the load is judged by (never empty: the error rate's at least).
    pub thresholds: Vec<Rule>,
    /// What the report says of the default gate, when it applies.
    pub gate_note: Option<String>,
    /// The live dashboard the load reports to (`--dashboard`), or the headless board that
    /// judges the thresholds as the load goes (`--abort-on-fail`).
    pub live: Option<Arc<crate::live::Board>>,
    /// `--abort-on-fail`: from this far into the load, the first failing threshold stops it
    /// (needs `live`).
    pub abort_after: Option<Duration>,
}

/// The rules `--threshold` and `--max-error-rate` give, with the default error rate when
/// neither says anything of errors, and then a note that says so.
fn threshold_rules(
    given: &[String],
    max_error_rate: Option<&str>,
) -> Result<(Vec<Rule>, Option<String>), String> {
    let mut rules = Vec::new();
    for t in given {
        rules.push(Rule::parse(t).map_err(|e| format!("--threshold {t:?}: {e}"))?);
    }
    let has_error_rule = rules.iter().any(|r| r.metric == Metric::ErrorRate);
    let max = match max_error_rate {
        Some(m) => Some(m),
        None if has_error_rule => None,
        None => Some(DEFAULT_MAX_ERROR_RATE),
    };
    let note = (max_error_rate.is_none() && !has_error_rule).then(|| {
        format!(
            "gate: operation failures <= {DEFAULT_MAX_ERROR_RATE} (error_rate: operations that \
             failed after their retries, over operations), the default; `--max-error-rate 100%` \
             turns it off"
        )
    });
    if let Some(m) = max {
        let m = m.trim();
        let text = if m.ends_with('%') {
            format!("error_rate <= {m}")
        } else {
            let f: f64 = m.parse().map_err(|_| {
                format!("--max-error-rate {m:?}: expected a percentage (1%) or a fraction (0.01)")
            })?;
            if !(0.0..=1.0).contains(&f) {
                return Err(format!(
                    "--max-error-rate {m}: a fraction must be between 0 and 1 (or write 5%)"
                ));
            }
            format!("error_rate <= {}%", f * 100.0)
        };
        rules.push(Rule::parse(&text).map_err(|e| format!("--max-error-rate {m:?}: {e}"))?);
    }
    Ok((rules, note))
}

impl LoadOptions {
    /// Validates the flags; the message says what is wrong and what is expected.
    pub fn from_flags(f: LoadFlags) -> Result<LoadOptions, String> {
        if let Some(g) = &f.grpc {
            return grpc_options(&f, g);
        }
        let mut target = Target::with(&f.url, &f.connect).map_err(|e| e.to_string())?;
        let uri: http::Uri = f
            .url
            .parse()
            .map_err(|e| format!("invalid URL {:?}: {e}", f.url))?;
        let path = uri
            .path_and_query()
            .map_or("/".to_string(), |p| p.as_str().to_string());
        target.base_path = String::new();
        let method = Method::from_bytes(f.method.to_ascii_uppercase().as_bytes())
            .map_err(|_| format!("-m {:?} is not an HTTP method", f.method))?;
        let mut headers = Vec::new();
        for h in &f.headers {
            let (name, value) = h
                .split_once(':')
                .ok_or_else(|| format!("-H {h:?}: expected `Name: value`"))?;
            let name = HeaderName::from_bytes(name.trim().to_ascii_lowercase().as_bytes())
                .map_err(|_| format!("-H {h:?}: {:?} is not a header name", name.trim()))?;
            let value = Text::parse(value.trim()).map_err(|e| format!("-H {h:?}: {e}"))?;
            headers.push((name, value));
        }
        let body = match &f.json {
            Some(j) => {
                let v: serde_json::Value = serde_json::from_str(j)
                    .map_err(|e| format!("--json is not valid JSON: {e}"))?;
                Some((
                    Text::parse(&v.to_string()).map_err(|e| format!("--json: {e}"))?,
                    true,
                ))
            }
            None => match &f.data {
                Some(d) => Some((Text::parse(d).map_err(|e| format!("-d: {e}"))?, false)),
                None => None,
            },
        };
        if let Some(t) = &f.content_type {
            if f.data.is_none() {
                return Err(format!("-T {t:?}: a content type needs a body (-d or -D)"));
            }
            let value = Text::parse(t).map_err(|e| format!("-T {t:?}: {e}"))?;
            headers.push((http::header::CONTENT_TYPE, value));
        }
        let template = RequestTemplate {
            method,
            path: Text::parse(&path).map_err(|e| format!("URL path: {e}"))?,
            headers,
            body,
        };
        phase_options(&f, target, template, None)
    }
}

/// A gRPC load's options: the call's template (metadata from `-H`, the message as JSON,
/// checked once against the method's type) and one attempt per call within `--deadline`.
fn grpc_options(f: &LoadFlags, g: &GrpcFlags) -> Result<LoadOptions, String> {
    if let Some(t) = &f.content_type {
        return Err(format!(
            "-T {t:?}: a gRPC call's content type is application/grpc; give the message with -d \
             or --json"
        ));
    }
    use crate::scenario::grpc::{sample, single_call, Schemas};
    let target = grpc::target::target(&f.url, &f.connect).map_err(|e| e.to_string())?;
    let files = crate::scenario::GrpcFile {
        protos: g.protos.clone(),
        import_paths: g.import_paths.clone(),
    };
    let mut schemas = match &g.reflected {
        Some(schema) => Schemas::reflected(schema.clone()),
        None => Schemas::load(Some(&files), std::path::Path::new(""), "--proto")
            .map_err(|e| e.to_string())?,
    };
    let method = schemas
        .method(&g.call)
        .map_err(|e| format!("--call {}: {e}", g.call))?;
    if !method.is_unary() {
        return Err(format!(
            "--call {}: the method streams; the load calls unary methods only",
            g.call
        ));
    }
    let json = match &f.json {
        Some(j) => serde_json::from_str::<serde_json::Value>(j)
            .map_err(|e| format!("the message is not valid JSON: {e}"))?
            .to_string(),
        None => "{}".to_string(),
    };
    let message = Text::parse(&json).map_err(|e| format!("the message: {e}"))?;
    method
        .encode_request(&sample(&message))
        .map_err(|e| format!("the message for {}: {e}", g.call))?;
    let mut headers = Vec::new();
    for h in &f.headers {
        let (name, value) = h
            .split_once(':')
            .ok_or_else(|| format!("-H {h:?}: expected `key: value`"))?;
        let name = HeaderName::from_bytes(name.trim().to_ascii_lowercase().as_bytes())
            .ok()
            .filter(|n| !n.as_str().starts_with("grpc-"))
            .ok_or_else(|| {
                format!(
                    "-H {h:?}: {:?} is not a metadata key a client may send",
                    name.trim()
                )
            })?;
        let value = Text::parse(value.trim()).map_err(|e| format!("-H {h:?}: {e}"))?;
        headers.push((name, value));
    }
    if f.method != "GET" {
        return Err("-m is for HTTP: a gRPC call is always a POST".into());
    }
    if g.deadline.is_some_and(|d| d.is_zero()) {
        return Err("--deadline 0: expected more than 0".into());
    }
    let template = RequestTemplate {
        method: Method::POST,
        path: Text::parse(&method.path()).map_err(|e| format!("--call: {e}"))?,
        headers,
        body: Some((message, false)),
    };
    let plan = single_call(method, g.deadline);
    phase_options(f, target, template, Some(Arc::new(plan)))
}

/// The one phase of a load, from the flags every load has.
fn phase_options(
    f: &LoadFlags,
    target: Target,
    template: RequestTemplate,
    grpc: Option<Arc<crate::plan::GrpcPlan>>,
) -> Result<LoadOptions, String> {
    {
        use crate::scenario::bounds;
        if let Some(r) = f.rate {
            if !(r.is_finite() && r > 0.0 && r <= bounds::RPS) {
                return Err(format!(
                    "--rate {r}: expected more than 0, at most {} requests per second",
                    bounds::RPS
                ));
            }
        }
        for (flag, v) in [
            ("--concurrency", f.concurrency),
            ("--connections", f.connections),
        ] {
            if let Some(v) = v {
                if v == 0 || v > bounds::WORKERS {
                    return Err(format!("{flag} {v}: expected 1 to {}", bounds::WORKERS));
                }
            }
        }
        if let Some(n) = f.requests {
            if n == 0 || n > bounds::OPERATIONS {
                return Err(format!(
                    "--requests {n}: expected 1 to {}",
                    bounds::OPERATIONS
                ));
            }
        }
        if let Some(d) = f.duration {
            if d.is_zero() || d > bounds::PHASE {
                return Err(format!(
                    "--duration {d:?}: expected more than 0, at most 24h"
                ));
            }
        }
        if f.timeout.is_zero() {
            return Err("--timeout 0: expected more than 0".into());
        }
        // Over HTTP/2, as with h2load: `-c` connections, each carrying `--streams` requests at
        // once, so connections × streams workers.
        let per_connection = if f.connect.http2 {
            f.connect.streams.max(1)
        } else {
            1
        };
        let workers = u64::from(
            f.concurrency
                .or(f.connections)
                .unwrap_or(DEFAULT_CONNECTIONS),
        ) * u64::from(per_connection);
        if workers > u64::from(bounds::WORKERS) {
            return Err(format!(
                "{workers} workers (connections × --streams); at most {}",
                bounds::WORKERS
            ));
        }
        let kind = match f.rate {
            Some(rate) => {
                let duration = match (f.duration, f.requests) {
                    (Some(d), _) => d,
                    (None, Some(n)) => Duration::from_secs_f64(n as f64 / rate).min(bounds::PHASE),
                    (None, None) => DEFAULT_DURATION,
                };
                if duration.is_zero() {
                    return Err("--duration must be more than 0".into());
                }
                PhaseKind::Rate {
                    stages: vec![(rate, rate, duration)],
                    connections: f
                        .connections
                        .unwrap_or(DEFAULT_CONNECTIONS)
                        .saturating_mul(per_connection),
                }
            }
            None => {
                let duration = match (f.duration, f.requests) {
                    (None, None) => Some(DEFAULT_DURATION),
                    (d, _) => d,
                };
                PhaseKind::Clients {
                    concurrency: f
                        .concurrency
                        .unwrap_or(DEFAULT_CONNECTIONS)
                        .saturating_mul(per_connection),
                    duration,
                    requests: f.requests,
                    think: Duration::ZERO,
                }
            }
        };
        let policy = Policy {
            max_attempts: 1,
            timeout: f.timeout,
            ..Policy::default()
        };
        let (thresholds, gate_note) = threshold_rules(&f.thresholds, f.max_error_rate.as_deref())?;
        Ok(LoadOptions {
            thresholds,
            gate_note,
            target: Arc::new(target),
            live: None,
            abort_after: None,
            phase: PhasePlan {
                name: "load".into(),
                kind,
                template,
                policy,
                client_id_header: false,
                capture: Vec::new(),
                grpc,
            },
        })
    }
}

/// Runs the load and returns its report, judged by the thresholds on the clients' figures.
/// `--duration` is a hard stop: what is in flight at the end is cancelled and counted.
pub async fn run(
    o: &LoadOptions,
    stop: CancellationToken,
    progress: bool,
) -> Result<Report, RunError> {
    ensure_reachable(&o.target).await?;
    let started_unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let done = Arc::new(AtomicU64::new(0));
    let bar = Progress::start(
        progress,
        "load",
        driver::expected_operations(&o.phase),
        done.clone(),
    );
    // `--abort-on-fail`: the thresholds, judged once a second on the figures so far, may stop
    // the load (a token of its own: Ctrl-C still reads as an interruption).
    let load_stop = stop.child_token();
    if let (Some(board), Some(after)) = (&o.live, o.abort_after) {
        board.abort_on_fail(after, load_stop.clone());
    }
    let ctx = PhaseCtx {
        index: 0,
        target: o.target.clone(),
        keys: Keys::new(0, true),
        run_start: Instant::now(),
        stop: load_stop,
        hard_stop: true,
        done,
        keep_attempts: false,
        captured: Arc::default(),
        capture_sink: None,
        shard: crate::shard::Shard::WHOLE,
        scheduled: None,
        once: None,
        live: o.live.clone(),
    };
    let out = driver::run_phase(Arc::new(o.phase.clone()), ctx).await;
    bar.finish();
    if let Some(e) = RunError::worker_died("load", &out.recorder) {
        return Err(e);
    }
    let r = &out.recorder;
    let rate = matches!(o.phase.kind, PhaseKind::Rate { .. });
    let mut metrics = std::collections::BTreeMap::new();
    if let PhaseKind::Rate { stages, .. } = &o.phase.kind {
        metrics.insert("target_rps".into(), serde_json::json!(stages[0].0));
    }
    for (name, v) in [("cancelled", r.cancelled), ("not_started", r.not_started)] {
        if v > 0 {
            metrics.insert(name.into(), serde_json::json!(v));
        }
    }
    let phase = crate::report::phase("load", o.phase.kind.name(), r, out.duration, rate, metrics);
    // Cancelled operations ended neither way: they are not judged.
    let operations = r.operations.saturating_sub(r.cancelled);
    let requests = r.requests();
    let measured = Measured {
        latency: Some(LatencyFigures::Histogram(r.latency.clone())),
        error_rate: (operations > 0).then(|| r.failed_operations as f64 / operations as f64),
        request_failure_rate: requests.request_failure_rate(),
        transport_error_rate: requests.transport_error_rate(),
        throughput_rps: Some(r.completed() as f64 / out.duration.as_secs_f64().max(1e-9)),
        requests: r.sent,
    };
    let mut thresholds = checks::thresholds::evaluate(&o.thresholds, &measured);
    let aborted = o.live.as_ref().and_then(|b| b.aborted()).map(|a| {
        let stopped = format!(
            "the thresholds stopped the load at {:.1} s (--abort-on-fail): {}",
            a.at_s, a.why
        );
        // Whatever the figures at the end say, a load stopped for failing does not pass.
        thresholds.verdict = reports::model::Verdict::Fail;
        thresholds.summary = format!("{stopped}; at the end: {}", thresholds.summary);
        stopped
    });
    let mut builder = ReportBuilder::new(match &o.phase.grpc {
        Some(g) => format!("load {} {}", o.target.url, g.method.path()),
        None => format!("load {} {}", o.phase.template.method, o.target.url),
    })
    .checks(vec![thresholds])
    .load_expected(true)
    .interrupted(stop.is_cancelled())
    .started_unix_ms(started_unix_ms)
    .duration(out.duration)
    .target(Some(o.target.url.clone()))
    .measured(r, out.duration)
    .phases(vec![phase]);
    if let Some(n) = &o.gate_note {
        builder = builder.note(n.clone());
    }
    if let Some(n) = aborted {
        builder = builder.note(n);
    }
    Ok(builder.build())
}
