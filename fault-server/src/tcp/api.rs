//! Toxiproxy's REST API (2.x), on a listener of its own (`--toxiproxy-api ADDR`, 8474 by
//! convention): a thin layer over [`super::Proxies`], so that Toxiproxy's client libraries, its
//! CLI and the Testcontainers modules drive these proxies unchanged.
//!
//! The routes, JSON shapes and status codes are Toxiproxy's: `GET /version`, `GET`/`POST
//! /proxies` (201 on create, 409 on a name that exists), `POST /populate`,
//! `GET`/`POST`/`PATCH`/`DELETE /proxies/{name}`, `GET`/`POST /proxies/{name}/toxics` (200 on
//! create, as Toxiproxy answers), `GET`/`POST`/`PATCH`/`DELETE /proxies/{name}/toxics/{toxic}`,
//! `POST /reset` (204); an error is `{"error": "...", "status": N}` with N the status: 400 for a
//! bad body, an unknown toxic type or stream, an attribute out of range; 404 for an unknown proxy
//! or toxic; 500 for an address that cannot be listened on. Beyond Toxiproxy, a proxy may be
//! created with its `toxics`, and a toxic may carry `match` (which connections, when).
//!
//! Access: on loopback, the control API's rules for a page's requests (a loopback `Host`, no
//! foreign `Origin`), and Toxiproxy's own (no browser `User-Agent`); beyond loopback the control
//! token is required too, unless the server was told the API is reachable only by its tests
//! (`--toxiproxy-api-open`, for a container whose port only they see).

use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

use super::config::{check_toxicity, ConnMatch, ProxyConfig, Stream, ToxicConfig};
use super::{Proxies, ProxyError, ToxicSpec};

/// The Toxiproxy version whose API this serves.
pub const TOXIPROXY_VERSION: &str = "2.12.0";

/// Who may call the API.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// The token every request must carry (the API listens beyond loopback).
    pub token: Option<String>,
    /// Serve anyone who reaches it, as Toxiproxy does (browsers excepted).
    pub open: bool,
}

#[derive(Clone)]
struct Api {
    proxies: Arc<Proxies>,
    access: Arc<Access>,
}

/// The API's routes over `proxies`.
pub fn router(proxies: Arc<Proxies>, access: Access) -> Router {
    let api = Api {
        proxies,
        access: Arc::new(access),
    };
    Router::new()
        .route("/version", get(version))
        .route("/reset", post(reset))
        .route("/populate", post(populate))
        .route("/proxies", get(list).post(create))
        .route(
            "/proxies/{proxy}",
            get(show).post(update).patch(update).delete(delete),
        )
        .route("/proxies/{proxy}/toxics", get(toxics).post(add_toxic))
        .route(
            "/proxies/{proxy}/toxics/{toxic}",
            get(show_toxic)
                .post(update_toxic)
                .patch(update_toxic)
                .delete(delete_toxic),
        )
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(api.clone(), guard))
        .with_state(api)
}

/// A refusal: its status, and the words of Toxiproxy's error body.
struct ApiError(StatusCode, String);

/// Toxiproxy's error body: `{"error": "...", "status": N}`.
impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let ApiError(status, message) = self;
        (
            status,
            Json(json!({ "error": message, "status": status.as_u16() })),
        )
            .into_response()
    }
}

fn error(status: StatusCode, message: impl Into<String>) -> ApiError {
    ApiError(status, message.into())
}

impl IntoResponse for ProxyError {
    fn into_response(self) -> Response {
        let status = match &self {
            ProxyError::NotFound | ProxyError::ToxicNotFound => StatusCode::NOT_FOUND,
            ProxyError::Exists | ProxyError::ToxicExists => StatusCode::CONFLICT,
            ProxyError::Invalid { .. } => StatusCode::BAD_REQUEST,
            ProxyError::Bind { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        };
        error(status, self.to_string()).into_response()
    }
}

fn bad_body(message: impl std::fmt::Display) -> ApiError {
    error(
        StatusCode::BAD_REQUEST,
        format!("bad request body: {message}"),
    )
}

async fn guard(State(api): State<Api>, req: Request, next: Next) -> Response {
    let ua = req
        .headers()
        .get(http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if ua.starts_with("Mozilla/") {
        return error(StatusCode::FORBIDDEN, "User agent not allowed").into_response();
    }
    if !api.access.open {
        let authority = req.uri().authority().map(|a| a.as_str().to_string());
        if let Some(r) = crate::access::refuse(
            api.access.token.as_deref(),
            req.headers(),
            authority.as_deref(),
        ) {
            return error(
                StatusCode::from_u16(r.status).unwrap_or(StatusCode::FORBIDDEN),
                r.message,
            )
            .into_response();
        }
    }
    next.run(req).await
}

/// The body as JSON, or Toxiproxy's 400.
fn json_body(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body).map_err(bad_body)
}

async fn version() -> Response {
    Json(json!({
        "version": TOXIPROXY_VERSION,
        "fault_server": env!("CARGO_PKG_VERSION"),
    }))
    .into_response()
}

async fn reset(State(api): State<Api>) -> Response {
    match api.proxies.reset_toxiproxy() {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => e.into_response(),
    }
}

async fn list(State(api): State<Api>) -> Response {
    Json(Value::Object(api.proxies.list())).into_response()
}

/// A proxy as a request body gives it: Toxiproxy's fields (`name`, `listen`, `upstream`,
/// `enabled`), and ours (`toxics`, the limits). Fields it does not know are ignored, as
/// Toxiproxy ignores them.
fn proxy_from(v: &Value, at: Option<usize>) -> Result<ProxyConfig, ApiError> {
    let Some(o) = v.as_object() else {
        return Err(bad_body("a proxy is a JSON object"));
    };
    let missing = |field: &str| {
        let at = at.map_or(String::new(), |i| format!(" at proxy {}", i + 1));
        error(
            StatusCode::BAD_REQUEST,
            format!("missing required field: {field}{at}"),
        )
    };
    let text = |field: &str| match o.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(bad_body(format!("{field}: {other} is not a string"))),
    };
    let name = text("name")?.ok_or_else(|| missing("name"))?;
    let upstream = text("upstream")?.ok_or_else(|| missing("upstream"))?;
    // An environment reference would show the server's environment in the proxy's view: it is
    // for config files only.
    if upstream.starts_with('$') {
        return Err(bad_body(format!(
            "upstream: {upstream:?} is not host:port (environment references are read from config files only)"
        )));
    }
    let listen = text("listen")?.unwrap_or_else(|| "127.0.0.1:0".to_string());
    let mut cfg = ProxyConfig::new(name, listen, upstream);
    match o.get("enabled") {
        None | Some(Value::Null) => {}
        Some(Value::Bool(b)) => cfg.enabled = *b,
        Some(other) => return Err(bad_body(format!("enabled: {other} is not true or false"))),
    }
    for (field, value) in o {
        match field.as_str() {
            "toxics" => {
                cfg.toxics = match value {
                    Value::Null => Vec::new(),
                    Value::Array(ts) => ts.iter().map(toxic_from).collect::<Result<Vec<_>, _>>()?,
                    _ => return Err(bad_body("toxics: give a list of toxics")),
                }
            }
            "max_connections" => {
                cfg.max_connections = value
                    .as_u64()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| bad_body(format!("max_connections: {value} is not a count")))?;
            }
            "buffer" => {
                cfg.buffer = serde_json::from_value(value.clone())
                    .map_err(|e| bad_body(format!("buffer: {e}")))?;
            }
            "connect_timeout" => {
                cfg.connect_timeout = serde_json::from_value(value.clone())
                    .map_err(|e| bad_body(format!("connect_timeout: {e}")))?;
            }
            _ => {}
        }
    }
    Ok(cfg)
}

/// A toxic as a request body gives it; Toxiproxy's defaults (`downstream`, toxicity 1).
fn toxic_from(v: &Value) -> Result<ToxicConfig, ApiError> {
    let Some(o) = v.as_object() else {
        return Err(bad_body("a toxic is a JSON object"));
    };
    let kind = match o.get("type") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => String::new(),
        Some(other) => return Err(bad_body(format!("type: {other} is not a string"))),
    };
    let stream = match o.get("stream") {
        None | Some(Value::Null) => Stream::Downstream,
        Some(Value::String(s)) if s.is_empty() => Stream::Downstream,
        Some(Value::String(s)) => Stream::parse(s).ok_or_else(invalid_stream)?,
        Some(_) => return Err(invalid_stream()),
    };
    let mut t = ToxicConfig::new(kind, stream);
    match o.get("name") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(Value::String(s)) => t.name = Some(s.clone()),
        Some(other) => return Err(bad_body(format!("name: {other} is not a string"))),
    }
    if let Some(tox) = o.get("toxicity").filter(|v| !v.is_null()) {
        t.toxicity = tox
            .as_f64()
            .ok_or_else(|| bad_body(format!("toxicity: {tox} is not a number")))?;
    }
    match o.get("attributes") {
        None | Some(Value::Null) => {}
        Some(Value::Object(a)) => t.attributes = a.clone(),
        Some(other) => return Err(bad_body(format!("attributes: {other} is not an object"))),
    }
    if let Some(m) = o.get("match").filter(|v| !v.is_null()) {
        t.when = serde_json::from_value::<ConnMatch>(m.clone())
            .map_err(|e| bad_body(format!("match: {e}")))?;
    }
    Ok(t)
}

fn invalid_stream() -> ApiError {
    error(
        StatusCode::BAD_REQUEST,
        "stream was invalid, can be either upstream or downstream",
    )
}

/// A toxic checked, with Toxiproxy's status for what is wrong with it.
fn spec_of(t: &ToxicConfig) -> Result<ToxicSpec, ApiError> {
    t.spec().map_err(|(field, message)| {
        if field == "type" {
            error(
                StatusCode::BAD_REQUEST,
                format!("invalid toxic type: {message}"),
            )
        } else {
            error(StatusCode::BAD_REQUEST, format!("{field}: {message}"))
        }
    })
}

async fn create(State(api): State<Api>, body: axum::body::Bytes) -> Response {
    let cfg = match json_body(&body).and_then(|v| proxy_from(&v, None)) {
        Ok(c) => c,
        Err(r) => return r.into_response(),
    };
    for t in &cfg.toxics {
        if let Err(r) = spec_of(t) {
            return r.into_response();
        }
    }
    match api.proxies.create(&cfg) {
        Ok(v) => (StatusCode::CREATED, Json(v)).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn populate(State(api): State<Api>, body: axum::body::Bytes) -> Response {
    let v = match json_body(&body) {
        Ok(v) => v,
        Err(r) => return r.into_response(),
    };
    let Some(items) = v.as_array() else {
        return bad_body("give a list of proxies").into_response();
    };
    let mut cfgs = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        match proxy_from(item, Some(i)) {
            Ok(c) => cfgs.push(c),
            Err(r) => return r.into_response(),
        }
    }
    let (made, err) = api.proxies.populate(&cfgs);
    match err {
        None => (StatusCode::CREATED, Json(json!({ "proxies": made }))).into_response(),
        Some(e) => {
            let message = e.to_string();
            let status = e.into_response().status();
            (
                status,
                Json(json!({ "error": message, "status": status.as_u16(), "proxies": made })),
            )
                .into_response()
        }
    }
}

async fn show(State(api): State<Api>, Path(proxy): Path<String>) -> Response {
    match api.proxies.get(&proxy) {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn update(
    State(api): State<Api>,
    Path(proxy): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    let v = match json_body(&body) {
        Ok(v) => v,
        Err(r) => return r.into_response(),
    };
    let Some(o) = v.as_object() else {
        return bad_body("a proxy is a JSON object").into_response();
    };
    let text = |field: &str| match o.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(bad_body(format!("{field}: {other} is not a string"))),
    };
    let (listen, upstream) = match (text("listen"), text("upstream")) {
        (Ok(l), Ok(u)) => (l, u),
        (Err(r), _) | (_, Err(r)) => return r.into_response(),
    };
    let enabled = match o.get("enabled") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(b)) => Some(*b),
        Some(other) => {
            return bad_body(format!("enabled: {other} is not true or false")).into_response()
        }
    };
    match api.proxies.update(&proxy, listen, upstream, enabled) {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn delete(State(api): State<Api>, Path(proxy): Path<String>) -> Response {
    match api.proxies.remove(&proxy) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => e.into_response(),
    }
}

async fn toxics(State(api): State<Api>, Path(proxy): Path<String>) -> Response {
    match api.proxies.toxics(&proxy) {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn add_toxic(
    State(api): State<Api>,
    Path(proxy): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    // An unknown proxy is a 404 whatever the body says.
    if let Err(e) = api.proxies.get(&proxy) {
        return e.into_response();
    }
    let spec = match json_body(&body)
        .and_then(|v| toxic_from(&v))
        .and_then(|t| spec_of(&t))
    {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    match api.proxies.add_toxic(&proxy, spec) {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn show_toxic(
    State(api): State<Api>,
    Path((proxy, toxic)): Path<(String, String)>,
) -> Response {
    match api.proxies.toxic(&proxy, &toxic) {
        Ok(v) => Json(v).into_response(),
        Err(e) => e.into_response(),
    }
}

/// Toxiproxy's update: the attributes given replace those of the same name, the others stay;
/// `toxicity` (and `match`) replace theirs when given.
async fn update_toxic(
    State(api): State<Api>,
    Path((proxy, toxic)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    let v = match json_body(&body) {
        Ok(v) => v,
        Err(r) => return r.into_response(),
    };
    let Some(o) = v.as_object().cloned() else {
        return bad_body("a toxic is a JSON object").into_response();
    };
    let mut refusal: Option<ApiError> = None;
    let result = api.proxies.update_toxic(&proxy, &toxic, |old| {
        let mut attrs = old.kind.attributes();
        match o.get("attributes") {
            None | Some(Value::Null) => {}
            Some(Value::Object(a)) => {
                for (k, v) in a {
                    attrs.insert(k.clone(), v.clone());
                }
            }
            Some(other) => {
                return Err(ProxyError::Invalid {
                    field: "attributes".into(),
                    message: format!("{other} is not an object"),
                })
            }
        }
        let kind = super::toxics::ToxicKind::parse(old.kind.type_name(), &attrs).map_err(|e| {
            ProxyError::Invalid {
                field: e
                    .attribute
                    .map_or_else(|| "type".into(), |a| format!("attributes.{a}")),
                message: e.message,
            }
        })?;
        let mut new = old.clone();
        new.kind = kind;
        if let Some(t) = o.get("toxicity").filter(|v| !v.is_null()) {
            let t = t.as_f64().ok_or_else(|| ProxyError::Invalid {
                field: "toxicity".into(),
                message: format!("{t} is not a number"),
            })?;
            check_toxicity(t).map_err(|message| ProxyError::Invalid {
                field: "toxicity".into(),
                message,
            })?;
            new.toxicity = t;
        }
        if let Some(m) = o.get("match").filter(|v| !v.is_null()) {
            let mut probe = ToxicConfig::new(old.kind.type_name(), old.stream);
            probe.attributes = new.kind.attributes();
            probe.when = match serde_json::from_value::<ConnMatch>(m.clone()) {
                Ok(w) => w,
                Err(e) => {
                    refusal = Some(bad_body(format!("match: {e}")));
                    return Err(ProxyError::Invalid {
                        field: "match".into(),
                        message: e.to_string(),
                    });
                }
            };
            new.when = probe
                .spec()
                .map_err(|(field, message)| ProxyError::Invalid { field, message })?
                .when;
        }
        Ok(new)
    });
    match (result, refusal) {
        (_, Some(r)) => r.into_response(),
        (Ok(v), None) => Json(v).into_response(),
        (Err(e), None) => e.into_response(),
    }
}

async fn delete_toxic(
    State(api): State<Api>,
    Path((proxy, toxic)): Path<(String, String)>,
) -> Response {
    match api.proxies.remove_toxic(&proxy, &toxic) {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => e.into_response(),
    }
}

async fn not_found() -> Response {
    error(StatusCode::NOT_FOUND, "404 page not found").into_response()
}
