//! The control API under `/__harness/`: never journaled, never faulted.
//!
//! `GET health`, `GET journal?since=SEQ` (JSON lines of entries with `seq > SEQ`), `PUT schedule`
//! (YAML or JSON `{rules: [...]}`; validated, replaced atomically, a bad one leaves the old in
//! force), `POST reset`, `GET stats`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Query, State as AxState};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use http::Request;
use hyper::body::Incoming;
use serde::Deserialize;
use tower::ServiceExt;

use crate::config::ScheduleConfig;
use crate::state::State;

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
        .fallback(not_found)
        .with_state(state)
}

/// Serves one control request with the API's `router`.
pub(crate) async fn handle(router: &Router, req: Request<Incoming>) -> Response {
    match router.clone().oneshot(req.map(Body::new)).await {
        Ok(r) => r,
        Err(never) => match never {},
    }
}

async fn health(AxState(s): AxState<Arc<State>>) -> impl IntoResponse {
    Json(serde_json::json!({
        "status": "ok",
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

async fn journal(AxState(s): AxState<Arc<State>>, Query(q): Query<Since>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        s.journal.lines_since(q.since),
    )
}

async fn schedule(AxState(s): AxState<Arc<State>>, body: String) -> Response {
    match ScheduleConfig::from_yaml(&body, "schedule") {
        Ok(cfg) => {
            let n = cfg.rules.len();
            s.replace_schedule(cfg.rules);
            Json(serde_json::json!({ "status": "replaced", "rules": n })).into_response()
        }
        Err(e) => (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response(),
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
    Json(serde_json::json!({
        "received": s.received(),
        "requests": st.requests,
        "by_rule": st.by_rule,
        "by_fault": st.by_fault,
        "by_status": st.by_status,
        "by_outcome": st.by_outcome,
    }))
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        "unknown control endpoint; try GET /__harness/health, GET /__harness/journal?since=SEQ, PUT /__harness/schedule, POST /__harness/reset, GET /__harness/stats\n",
    )
        .into_response()
}
