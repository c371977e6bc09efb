//! The control API under `/__harness/`: never journaled, never faulted.
//!
//! `GET health`, `GET journal?since=SEQ` (JSON lines of entries with `seq > SEQ`), `PUT schedule`
//! (YAML or JSON `{rules: [...]}`; validated, replaced atomically, a bad one leaves the old in
//! force), `POST reset`, `GET stats`, `GET metrics` (Prometheus / OpenMetrics text).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Query, State as AxState};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use http::Request;
use serde::Deserialize;
use tower::ServiceExt;

use crate::body::ReqBody;
use crate::config::{forwarding_rule, ScheduleConfig};
use crate::metrics;
use crate::state::State;

/// Whether a control request may be served, and the refusal when not (the rules are
/// [`crate::access`]'s).
pub(crate) fn refuse<B>(state: &State, _tls: bool, req: &Request<B>) -> Option<Response> {
    let authority = req.uri().authority().map(|a| a.as_str().to_string());
    crate::access::refuse(
        state.control_token.as_deref(),
        req.headers(),
        authority.as_deref(),
    )
    .map(|r| {
        let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::FORBIDDEN);
        (status, format!("control API: {}\n", r.message)).into_response()
    })
}

/// Path prefix of the control API.
pub const PREFIX: &str = "/__harness/";

/// The control API's routes, built once when the server starts.
pub(crate) fn router(state: Arc<State>) -> Router {
    Router::new()
        .route("/__harness/health", get(health))
        .route("/__harness/journal", get(journal))
        .route("/__harness/schedule", put(schedule))
        .route("/__harness/reset", post(reset))
        .route("/__harness/stats", get(stats))
        .route("/__harness/metrics", get(metrics))
        .fallback(not_found)
        .with_state(state)
}

/// Serves one control request with the API's `router`.
pub(crate) async fn handle(router: &Router, req: Request<ReqBody>) -> Response {
    match router.clone().oneshot(req.map(Body::new)).await {
        Ok(r) => r,
        Err(never) => match never {},
    }
}

/// How long health waits for the database before it calls the store unreachable.
const STORE_PROBE: std::time::Duration = std::time::Duration::from_secs(1);

/// `GET health`: always `200` while the server serves (it is alive); the body's `status` is
/// `degraded`, and `store.status` `unreachable` with the reason, while the orders' database does
/// not answer — what a readiness probe or a dashboard reads.
async fn health(AxState(s): AxState<Arc<State>>) -> impl IntoResponse {
    let store = match s.orders.reachable(STORE_PROBE).await {
        Ok(()) => serde_json::json!({ "backend": s.orders.backend(), "status": "ok" }),
        Err(e) => serde_json::json!({
            "backend": s.orders.backend(),
            "status": "unreachable",
            "error": e,
        }),
    };
    let degraded = store["status"] != "ok";
    Json(serde_json::json!({
        "status": if degraded { "degraded" } else { "ok" },
        "store": store,
        "uptime_ms": s.clock.now_us() / 1000,
        "received": s.received(),
        "journaled": s.journal.written(),
        "rules": s.schedule().len(),
        "seed": s.schedule().seed(),
    }))
}

#[derive(Deserialize)]
struct Since {
    #[serde(default)]
    since: u64,
}

/// Streams the lines from the journal file, as written when the request came: the body is never
/// built in memory, however long the journal.
async fn journal(AxState(s): AxState<Arc<State>>, Query(q): Query<Since>) -> Response {
    let state = s.clone();
    let range = tokio::task::spawn_blocking(move || state.journal.range_since(q.since)).await;
    match range {
        Ok(Ok((file, from, to))) => {
            let reader = tokio::io::AsyncReadExt::take(tokio::fs::File::from_std(file), to - from);
            let body = Body::from_stream(tokio_util::io::ReaderStream::with_capacity(
                reader,
                64 * 1024,
            ));
            ([(header::CONTENT_TYPE, "application/x-ndjson")], body).into_response()
        }
        Ok(Err(e)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot read the journal file: {e}\n"),
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
    }
}

async fn schedule(AxState(s): AxState<Arc<State>>, body: String) -> Response {
    // Parsed on a blocking thread: a hostile document must not stall the server's workers (its
    // nesting is bounded before parsing, too).
    let parsed =
        tokio::task::spawn_blocking(move || ScheduleConfig::from_yaml(&body, "schedule")).await;
    match parsed {
        Ok(Ok(cfg)) => {
            if let (None, Some(i)) = (&s.upstream, forwarding_rule(&cfg.rules)) {
                return (
                    StatusCode::BAD_REQUEST,
                    format!("schedule: at rules[{i}].fault: `forward` needs an upstream, and this server has none (start it with `upstream:` in its config or `--upstream URL`)\n"),
                )
                    .into_response();
            }
            let n = cfg.rules.len();
            match s.install_schedule(cfg.rules).await {
                Ok(()) => {
                    Json(serde_json::json!({ "status": "replaced", "rules": n })).into_response()
                }
                Err(e) => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    format!("the shared hit counters could not be cleared: {e}\n"),
                )
                    .into_response(),
            }
        }
        Ok(Err(e)) => (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("parsing the schedule failed: {e}\n"),
        )
            .into_response(),
    }
}

async fn reset(AxState(s): AxState<Arc<State>>) -> Response {
    match s.reset().await {
        Ok(()) => Json(serde_json::json!({ "status": "reset" })).into_response(),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("reset failed: {e}\n"),
        )
            .into_response(),
    }
}

async fn stats(AxState(s): AxState<Arc<State>>) -> impl IntoResponse {
    let st = s.journal.stats();
    let pairs = |v: Vec<(&'static str, u64)>| {
        v.into_iter()
            .map(|(k, n)| (k.to_string(), serde_json::Value::from(n)))
            .collect::<serde_json::Map<_, _>>()
    };
    Json(serde_json::json!({
        "received": s.received(),
        "requests": st.requests,
        "by_rule": st.by_rule,
        "by_fault": st.by_fault,
        "by_status": st.by_status,
        "by_outcome": st.by_outcome,
        "http2_refused_streams": pairs(s.http2.refused_streams()),
        "http2_connection_errors": pairs(s.http2.connection_errors()),
        "connections": st.connections,
        "statements": st.statements,
    }))
}

/// The content type of the OpenMetrics text prometheus-client writes.
pub const METRICS_CONTENT_TYPE: &str = primitives::metric::CONTENT_TYPE;

/// `GET /__harness/metrics`: the journal's counts as Prometheus metrics, encoded by
/// prometheus-client from a registry built for this scrape (the counts live in the journal's
/// writer, which keeps them without a lock per request).
async fn metrics(AxState(s): AxState<Arc<State>>) -> Response {
    use prometheus_client::encoding::text::encode;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use prometheus_client::metrics::gauge::Gauge;
    use prometheus_client::registry::Registry;

    let st = s.journal.stats();
    let mut registry = Registry::with_prefix(metrics::PREFIX);
    let requests = Family::<Vec<(&'static str, String)>, Counter>::default();
    registry.register(
        metrics::REQUESTS.name,
        metrics::REQUESTS.help,
        requests.clone(),
    );
    let none = || "none".to_string();
    let mut rows = st.by_request;
    rows.sort_by(|a, b| {
        (&a.rule, &a.fault, a.status, a.outcome.as_str()).cmp(&(
            &b.rule,
            &b.fault,
            b.status,
            b.outcome.as_str(),
        ))
    });
    for c in &rows {
        let labels = vec![
            ("rule", c.rule.clone().unwrap_or_else(none)),
            ("fault", c.fault.clone().unwrap_or_else(none)),
            ("status", c.status.map_or_else(none, |s| s.to_string())),
            ("outcome", c.outcome.as_str().to_string()),
        ];
        requests.get_or_create(&labels).inc_by(c.count);
    }
    let gauge = |registry: &mut Registry, m: &metrics::Metric, value: u64| {
        let g = Gauge::<i64>::default();
        g.set(i64::try_from(value).unwrap_or(i64::MAX));
        registry.register(m.name, m.help, g);
    };
    gauge(
        &mut registry,
        &metrics::JOURNAL_ENTRIES,
        s.journal.written(),
    );
    gauge(&mut registry, &metrics::RECEIVED_REQUESTS, s.received());
    gauge(
        &mut registry,
        &metrics::OPEN_CONNECTIONS,
        s.active.load(std::sync::atomic::Ordering::Relaxed) as u64,
    );
    let refused = Family::<Vec<(&'static str, String)>, Counter>::default();
    registry.register(
        metrics::HTTP2_REFUSED_STREAMS.name,
        metrics::HTTP2_REFUSED_STREAMS.help,
        refused.clone(),
    );
    for (reason, n) in s.http2.refused_streams() {
        refused
            .get_or_create(&vec![("reason", reason.to_string())])
            .inc_by(n);
    }
    let conn_errors = Family::<Vec<(&'static str, String)>, Counter>::default();
    registry.register(
        metrics::HTTP2_CONNECTION_ERRORS.name,
        metrics::HTTP2_CONNECTION_ERRORS.help,
        conn_errors.clone(),
    );
    for (code, n) in s.http2.connection_errors() {
        conn_errors
            .get_or_create(&vec![("code", code.to_string())])
            .inc_by(n);
    }
    // The TCP proxies: their journaled connections (not in `requests`), bytes and toxics, and
    // those open now.
    let connections = Family::<Vec<(&'static str, String)>, Counter>::default();
    registry.register(
        metrics::PROXY_CONNECTIONS.name,
        metrics::PROXY_CONNECTIONS.help,
        connections.clone(),
    );
    let bytes = Family::<Vec<(&'static str, String)>, Counter>::default();
    registry.register(
        metrics::PROXY_BYTES.name,
        metrics::PROXY_BYTES.help,
        bytes.clone(),
    );
    let toxics = Family::<Vec<(&'static str, String)>, Counter>::default();
    registry.register(
        metrics::PROXY_TOXIC_CONNECTIONS.name,
        metrics::PROXY_TOXIC_CONNECTIONS.help,
        toxics.clone(),
    );
    for (proxy, c) in &st.connections {
        for (end, n) in &c.by_end {
            connections
                .get_or_create(&vec![("proxy", proxy.clone()), ("end", end.clone())])
                .inc_by(*n);
        }
        for (direction, n) in [("upstream", c.bytes_up), ("downstream", c.bytes_down)] {
            bytes
                .get_or_create(&vec![
                    ("proxy", proxy.clone()),
                    ("direction", direction.to_string()),
                ])
                .inc_by(n);
        }
        for (toxic, n) in &c.by_toxic {
            toxics
                .get_or_create(&vec![("proxy", proxy.clone()), ("toxic", toxic.clone())])
                .inc_by(*n);
        }
    }
    // The protocol proxies' statements and commands (not in `requests` either).
    let statements = Family::<Vec<(&'static str, String)>, Counter>::default();
    registry.register(
        metrics::PROXY_STATEMENTS.name,
        metrics::PROXY_STATEMENTS.help,
        statements.clone(),
    );
    let statement_faults = Family::<Vec<(&'static str, String)>, Counter>::default();
    registry.register(
        metrics::PROXY_STATEMENT_FAULTS.name,
        metrics::PROXY_STATEMENT_FAULTS.help,
        statement_faults.clone(),
    );
    for (proxy, c) in &st.statements {
        for (outcome, n) in &c.by_outcome {
            statements
                .get_or_create(&vec![
                    ("proxy", proxy.clone()),
                    ("outcome", outcome.clone()),
                ])
                .inc_by(*n);
        }
        for (fault, n) in &c.by_fault {
            statement_faults
                .get_or_create(&vec![("proxy", proxy.clone()), ("fault", fault.clone())])
                .inc_by(*n);
        }
    }
    let open = Family::<Vec<(&'static str, String)>, Gauge<i64>>::default();
    registry.register(
        metrics::PROXY_OPEN_CONNECTIONS.name,
        metrics::PROXY_OPEN_CONNECTIONS.help,
        open.clone(),
    );
    for (proxy, n) in s.tcp.open_connections() {
        open.get_or_create(&vec![("proxy", proxy)])
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }
    if let Some(n) = s.orders.database_connections() {
        gauge(&mut registry, &metrics::DATABASE_CONNECTIONS, n as u64);
    }
    let mut text = String::new();
    if let Err(e) = encode(&mut text, &registry) {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding the metrics failed: {e}\n"),
        )
            .into_response();
    }
    ([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], text).into_response()
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        "unknown control endpoint; try GET /__harness/health, GET /__harness/journal?since=SEQ, PUT /__harness/schedule, POST /__harness/reset, GET /__harness/stats, GET /__harness/metrics\n",
    )
        .into_response()
}
