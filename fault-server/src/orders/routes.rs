//! Routing of the built-in resource, with axum as the control API routes: `POST /orders`,
//! `GET /orders?idempotency_key=`, `GET /orders/{id}`, `POST /orders/{id}/pay`; a wrong method
//! gets `405` with `Allow`; any other path answers `200 ok`.
//!
//! The router is built once, when the server starts. A handler answers with a [`ResourceReply`],
//! which carries what the journal records about the request (the order it created, whether it
//! was a replay, the transition it made) beside the response itself.

use std::convert::Infallible;
use std::sync::Arc;

use axum::extract::{Extension, Path, RawQuery, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use bytes::Bytes;
use http::{Method, Request};
use tower::ServiceExt;

use super::{Orders, ResourceReply};

/// The parts of a request the resource needs, read once by the request's handler.
#[derive(Debug, Clone)]
pub(crate) struct ResourceRequest {
    pub(crate) method: Method,
    pub(crate) path: String,
    pub(crate) query: Option<String>,
    pub(crate) key: Option<String>,
    pub(crate) body: Bytes,
    pub(crate) body_sha256: String,
}

/// The resource's routes over `orders`.
pub(crate) fn router(orders: Orders) -> Router {
    Router::new()
        .route(
            "/orders",
            allowing("GET, POST", post(create).get(list_by_key)),
        )
        .route(
            "/orders/",
            allowing("GET, POST", post(create).get(list_by_key)),
        )
        .route("/orders/{id}", allowing("GET", get(show)))
        .route("/orders/{id}/", allowing("GET", get(show)))
        .route("/orders/{id}/pay", allowing("POST", post(pay)))
        .route("/orders/{id}/pay/", allowing("POST", post(pay)))
        .fallback(|| async { ok_reply() })
        .with_state(orders)
}

fn allowing(allow: &'static str, m: MethodRouter<Orders>) -> MethodRouter<Orders> {
    m.fallback(move || async move { method_not_allowed(allow) })
}

/// Whether `path` belongs to the resource (anything else answers `200 ok` with no store work).
pub(crate) fn is_resource_path(path: &str) -> bool {
    path == "/orders" || path.starts_with("/orders/")
}

/// Serves `req` with the resource's `router`. Runs in its own task so a request is processed to
/// the end even when its client leaves (a claimed key must not stay in flight).
pub(crate) async fn serve_resource(router: &Router, req: ResourceRequest) -> ResourceReply {
    if !is_resource_path(&req.path) {
        return ok_reply();
    }
    // Let the other connections whose requests are already readable take their arrival stamps
    // first: the database work below wakes blocking threads, which preempt the runtime's workers
    // on a small machine, and a burst's later members would otherwise be stamped only after the
    // earlier members' queries ran — a release skew that the client never caused.
    tokio::task::yield_now().await;
    let uri = match &req.query {
        Some(q) => format!("{}?{q}", req.path),
        None => req.path.clone(),
    };
    let Ok(request) = Request::builder()
        .method(req.method.clone())
        .uri(uri)
        .extension(Arc::new(req))
        .body(axum::body::Body::empty())
    else {
        return ResourceReply::problem(
            400,
            "bad-request",
            "Request target not understood",
            "the path or query cannot be routed".into(),
        );
    };
    let router = router.clone();
    let task = tokio::spawn(async move {
        let res: Result<Response, Infallible> = router.oneshot(request).await;
        match res {
            Ok(mut r) => r.extensions_mut().remove::<ResourceReply>(),
            Err(never) => match never {},
        }
    });
    match task.await {
        Ok(Some(reply)) => reply,
        Ok(None) => ResourceReply::problem(
            500,
            "internal",
            "Request handling failed",
            "the route gave no reply".into(),
        ),
        Err(e) => ResourceReply::problem(500, "internal", "Request handling failed", e.to_string()),
    }
}

impl IntoResponse for ResourceReply {
    /// The reply rides in the response's extensions; the server writes it with its journal
    /// entry.
    fn into_response(self) -> Response {
        let mut r = Response::new(axum::body::Body::empty());
        r.extensions_mut().insert(self);
        r
    }
}

type Req = Extension<Arc<ResourceRequest>>;

async fn create(State(orders): State<Orders>, Extension(req): Req) -> ResourceReply {
    orders
        .create(req.key.clone(), req.body.clone(), req.body_sha256.clone())
        .await
}

async fn list_by_key(State(orders): State<Orders>, RawQuery(q): RawQuery) -> ResourceReply {
    let key = q.as_deref().and_then(|q| {
        q.split('&')
            .filter_map(|kv| kv.split_once('='))
            .find(|(k, _)| *k == "idempotency_key")
            .map(|(_, v)| v.to_string())
    });
    match key {
        Some(k) => orders.list_by_key(k).await,
        None => ResourceReply::problem(
            400,
            "missing-parameter",
            "Query parameter required",
            "GET /orders needs ?idempotency_key=KEY".into(),
        ),
    }
}

async fn show(State(orders): State<Orders>, Path(id): Path<String>) -> ResourceReply {
    orders.get(id).await
}

async fn pay(State(orders): State<Orders>, Path(id): Path<String>) -> ResourceReply {
    orders.pay(id).await
}

/// The answer to any path that is not the built-in resource.
pub(crate) fn ok_reply() -> ResourceReply {
    ResourceReply {
        status: 200,
        content_type: "text/plain; charset=utf-8",
        headers: Vec::new(),
        body: Bytes::from_static(b"ok\n"),
        created: None,
        replayed: false,
        transition: None,
        resource: None,
        refused: None,
    }
}

fn method_not_allowed(allow: &str) -> ResourceReply {
    let mut r = ResourceReply::problem(
        405,
        "method-not-allowed",
        "Method not allowed",
        format!("allowed: {allow}"),
    );
    r.headers.push(("allow", allow.to_string()));
    r
}
