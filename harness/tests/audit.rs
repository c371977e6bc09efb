//! `harness audit` against real APIs on 127.0.0.1:0, each verdict shown failing on a known-bad
//! implementation and passing on a known-good one:
//! - the fault server's orders resource (real SQLite) described by `tests/openapi/orders.yaml`:
//!   `unique` passes the keyed probe, `check-then-insert` fails it; paying an order twice is
//!   safe to retry, creating one without a key is not; a document that leaves out the key the
//!   server requires gets "could not build a valid request", never a verdict;
//! - a small service of `things` on SQLite that publishes its own OpenAPI document (read by
//!   URL): PUT as an upsert and DELETE answering 404 pass; PUT as a plain INSERT and a DELETE
//!   that fails on a missing row fail.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use fault_server::{Config, FaultServer, ServerOptions};
use harness::audit::{audit, audit_report, AuditConfig, AuditOutcome, COULD_NOT_BUILD};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use reports::model::{AuditedOperation, OperationVerdict, ProbeKind};
use reports::Outcome;

fn orders_doc() -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/openapi/orders.yaml")
        .display()
        .to_string()
}

async fn fault_server(yaml: &str) -> FaultServer {
    let cfg = Config::from_yaml(yaml, "test").expect("test config is valid");
    FaultServer::start(cfg, ServerOptions::default())
        .await
        .expect("server starts")
}

fn config(spec: &str, base: &str) -> AuditConfig {
    AuditConfig {
        rounds: 4,
        seed: 7,
        ..AuditConfig::new(spec, base)
    }
}

fn row<'a>(o: &'a AuditOutcome, id: &str) -> &'a AuditedOperation {
    o.operations
        .iter()
        .find(|r| r.operation_id == id)
        .unwrap_or_else(|| panic!("no row {id}: {:#?}", o.operations))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unique_key_passes_and_safe_repeats_pass() {
    let s = fault_server("orders: { idempotency: unique, work_delay: 5ms }").await;
    let o = audit(&config(&orders_doc(), &s.url()))
        .await
        .expect("audit runs");
    let ids: Vec<&str> = o
        .operations
        .iter()
        .map(|r| r.operation_id.as_str())
        .collect();
    assert_eq!(ids, ["createOrder", "payOrder"], "unsafe operations only");

    let create = row(&o, "createOrder");
    assert_eq!(create.probe, ProbeKind::Keyed);
    assert_eq!(create.verdict, OperationVerdict::Pass, "{create:#?}");
    assert_eq!(create.key_header.as_deref(), Some("Idempotency-Key"));
    assert_eq!(create.key_support, "declared, required");
    assert_eq!(create.creations, "1");
    assert_eq!(create.replay, "200, replayed");
    assert_eq!(create.mismatch, "422");
    assert_eq!(create.missing_key, "400");
    let dup = create
        .checks
        .iter()
        .find(|c| c.name == "duplicates")
        .expect("duplicates judged");
    assert_eq!(
        dup.metrics["verified_keys"], 4,
        "every key's resources looked up through GET /orders/{{id}}: {dup:#?}"
    );

    let pay = row(&o, "payOrder");
    assert_eq!(pay.probe, ProbeKind::LostResponse);
    assert_eq!(pay.verdict, OperationVerdict::Pass, "{pay:#?}");
    assert!(pay.summary.contains("same resource"), "{}", pay.summary);

    let report = audit_report(&o);
    assert_eq!(report.outcome(), Outcome::Passed);
    let json: serde_json::Value =
        serde_json::from_str(&reports::render(&report, reports::Format::Json, false).unwrap())
            .unwrap();
    let first = &json["operations"][0];
    for field in [
        "method",
        "path",
        "operation_id",
        "key_header",
        "verdict",
        "summary",
        "evidence",
    ] {
        assert!(first.get(field).is_some(), "{field} in {first}");
    }
    assert_eq!(first["verdict"], "pass");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_then_insert_fails_the_keyed_probe_with_the_stores_word() {
    let s = fault_server("orders: { idempotency: check-then-insert, work_delay: 20ms }").await;
    let o = audit(&config(&orders_doc(), &s.url()))
        .await
        .expect("audit runs");
    let create = row(&o, "createOrder");
    assert_eq!(create.verdict, OperationVerdict::Fail, "{create:#?}");
    assert!(create.creations.starts_with("max "), "{}", create.creations);
    assert!(create.summary.contains("duplicates"), "{}", create.summary);
    let dup = create
        .checks
        .iter()
        .find(|c| c.name == "duplicates")
        .expect("duplicates judged");
    assert!(
        dup.metrics["verified_duplicate_keys"].as_u64().unwrap() > 0,
        "the GETs found the duplicates: {dup:#?}"
    );
    assert!(!create.evidence.is_empty());
    // The other row is still judged on its own.
    assert_eq!(row(&o, "payOrder").verdict, OperationVerdict::Pass);
    assert_eq!(audit_report(&o).outcome(), Outcome::Failed);
}

/// createOrder as a document that declares no key: the retry of an unkeyed create makes a
/// second order.
const UNKEYED: &str = r#"{
  "openapi": "3.0.3",
  "info": { "title": "orders without keys", "version": "1" },
  "paths": {
    "/orders": { "post": {
      "operationId": "createOrder",
      "requestBody": { "required": true, "content": { "application/json": {
        "schema": { "type": "object", "required": ["sku", "qty"], "properties": {
          "sku": { "type": "string", "minLength": 1 }, "qty": { "type": "integer", "minimum": 1, "maximum": 9 } } } } } },
      "responses": { "201": { "description": "Created", "content": { "application/json": {
        "schema": { "type": "object", "properties": { "id": { "type": "string" } } } } } } } } },
    "/orders/{id}": { "get": {
      "operationId": "getOrder",
      "parameters": [ { "name": "id", "in": "path", "required": true, "schema": { "type": "string" } } ],
      "responses": { "200": { "description": "The order" } } } }
  }
}"#;

fn write_doc(dir: &tempfile::TempDir, text: &str) -> String {
    let p = dir.path().join("openapi.json");
    std::fs::write(&p, text).expect("write the document");
    p.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unkeyed_create_is_not_safe_to_retry() {
    let s = fault_server("orders: { idempotency: none, require_key: false }").await;
    let dir = tempfile::tempdir().unwrap();
    let o = audit(&config(&write_doc(&dir, UNKEYED), &s.url()))
        .await
        .expect("audit runs");
    let create = row(&o, "createOrder");
    assert_eq!(create.probe, ProbeKind::LostResponse);
    assert_eq!(create.verdict, OperationVerdict::Fail, "{create:#?}");
    assert!(
        create.summary.starts_with("not safe to retry"),
        "{}",
        create.summary
    );
    assert_eq!(
        s.orders().count().await.unwrap(),
        2,
        "the request and its retry"
    );
    assert!(
        create
            .evidence
            .iter()
            .any(|e| e.detail.starts_with("GET /orders/") && e.detail.ends_with(": 200")),
        "both orders looked up: {:#?}",
        create.evidence
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_baseline_the_api_refuses_is_no_verdict() {
    // The server requires a key the document does not declare: every request is refused.
    let s = fault_server("orders: { idempotency: unique }").await;
    let dir = tempfile::tempdir().unwrap();
    let o = audit(&config(&write_doc(&dir, UNKEYED), &s.url()))
        .await
        .expect("audit runs");
    let create = row(&o, "createOrder");
    assert_eq!(create.verdict, OperationVerdict::Inconclusive);
    assert_eq!(create.probe, ProbeKind::None);
    assert!(
        create.summary.starts_with(COULD_NOT_BUILD),
        "{}",
        create.summary
    );
    assert!(
        create.summary.contains("400"),
        "the API's answer: {}",
        create.summary
    );
    assert_eq!(s.orders().count().await.unwrap(), 0);
    assert_eq!(audit_report(&o).outcome(), Outcome::NoVerdict);
}

/// The `things` service's OpenAPI document: PUT names the resource, DELETE removes it.
const THINGS: &str = r##"{
  "openapi": "3.0.3",
  "info": { "title": "things", "version": "1" },
  "paths": {
    "/things": { "get": { "operationId": "listThings",
      "responses": { "200": { "description": "All things", "content": { "application/json": {
        "schema": { "type": "array", "items": { "$ref": "#/components/schemas/Thing" } } } } } } } },
    "/things/{name}": {
      "parameters": [ { "name": "name", "in": "path", "required": true,
        "schema": { "type": "string", "pattern": "^[a-z]{3,12}$" } } ],
      "get": { "operationId": "getThing", "responses": {
        "200": { "description": "The thing", "content": { "application/json": {
          "schema": { "$ref": "#/components/schemas/Thing" } } } },
        "404": { "description": "No such thing" } } },
      "put": { "operationId": "putThing",
        "requestBody": { "required": true, "content": { "application/json": {
          "schema": { "type": "object", "required": ["colour"], "additionalProperties": false,
            "properties": { "colour": { "type": "string", "enum": ["red", "green", "blue"] } } } } } },
        "responses": { "200": { "description": "Replaced" }, "201": { "description": "Created" } } },
      "delete": { "operationId": "deleteThing", "responses": {
        "204": { "description": "Deleted" }, "404": { "description": "No such thing" } } }
    }
  },
  "components": { "schemas": { "Thing": { "type": "object",
    "properties": { "name": { "type": "string" }, "colour": { "type": "string" } } } } }
}"##;

/// A `things` service on a real SQLite database: `good` upserts on PUT and answers 404 to a
/// DELETE of nothing; otherwise PUT inserts a row every time (no key on the table) and DELETE
/// fails with 500 when the row is not there.
struct Things {
    db: Mutex<rusqlite::Connection>,
    good: bool,
}

async fn things(good: bool) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let db = rusqlite::Connection::open_in_memory().unwrap();
    db.execute_batch(if good {
        "CREATE TABLE things (name TEXT PRIMARY KEY, colour TEXT NOT NULL)"
    } else {
        "CREATE TABLE things (name TEXT NOT NULL, colour TEXT NOT NULL)"
    })
    .unwrap();
    let state = Arc::new(Things {
        db: Mutex::new(db),
        good,
    });
    let task = tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let state = state.clone();
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let state = state.clone();
                    async move { Ok::<_, Infallible>(handle(&state, req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    });
    (format!("http://{addr}"), task)
}

fn reply(status: u16, body: impl Into<Bytes>) -> hyper::Response<Full<Bytes>> {
    let mut r = hyper::Response::new(Full::new(body.into()));
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap();
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

async fn handle(state: &Things, req: hyper::Request<Incoming>) -> hyper::Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let Ok(body) = body.collect().await.map(|c| c.to_bytes()) else {
        return reply(400, "{}");
    };
    let path = parts.uri.path().to_string();
    let db = state.db.lock().unwrap();
    let name = path.strip_prefix("/things/").map(str::to_string);
    match (parts.method.as_str(), path.as_str(), name) {
        ("GET", "/openapi.json", _) => reply(200, THINGS),
        ("GET", "/things", _) => {
            let mut q = db.prepare("SELECT name, colour FROM things").unwrap();
            let rows: Vec<serde_json::Value> = q
                .query_map([], |r| {
                    Ok(serde_json::json!({ "name": r.get::<_, String>(0)?, "colour": r.get::<_, String>(1)? }))
                })
                .unwrap()
                .map(Result::unwrap)
                .collect();
            reply(200, serde_json::Value::Array(rows).to_string())
        }
        ("GET", _, Some(name)) => {
            let colour: Option<String> = db
                .query_row("SELECT colour FROM things WHERE name = ?1", [&name], |r| {
                    r.get(0)
                })
                .ok();
            match colour {
                Some(c) => reply(
                    200,
                    serde_json::json!({ "name": name, "colour": c }).to_string(),
                ),
                None => reply(404, "{}"),
            }
        }
        ("PUT", _, Some(name)) => {
            let Ok(v) = serde_json::from_slice::<serde_json::Value>(&body) else {
                return reply(400, r#"{"error":"not JSON"}"#);
            };
            let Some(colour) = v.get("colour").and_then(|c| c.as_str()) else {
                return reply(400, r#"{"error":"colour is required"}"#);
            };
            let existed: bool = db
                .query_row(
                    "SELECT COUNT(*) > 0 FROM things WHERE name = ?1",
                    [&name],
                    |r| r.get(0),
                )
                .unwrap();
            if state.good {
                db.execute(
                    "INSERT INTO things (name, colour) VALUES (?1, ?2) \
                     ON CONFLICT(name) DO UPDATE SET colour = excluded.colour",
                    [&name, colour],
                )
                .unwrap();
                reply(if existed { 200 } else { 201 }, "{}")
            } else {
                db.execute(
                    "INSERT INTO things (name, colour) VALUES (?1, ?2)",
                    [&name, colour],
                )
                .unwrap();
                reply(201, "{}")
            }
        }
        ("DELETE", _, Some(name)) => {
            if state.good {
                match db
                    .execute("DELETE FROM things WHERE name = ?1", [&name])
                    .unwrap()
                {
                    0 => reply(404, "{}"),
                    _ => reply(204, ""),
                }
            } else {
                let found: Result<String, _> =
                    db.query_row("SELECT name FROM things WHERE name = ?1", [&name], |r| {
                        r.get(0)
                    });
                match found {
                    Ok(_) => {
                        db.execute("DELETE FROM things WHERE name = ?1", [&name])
                            .unwrap();
                        reply(204, "")
                    }
                    Err(e) => reply(500, format!(r#"{{"error":"{e}"}}"#)),
                }
            }
        }
        _ => reply(404, "{}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_as_an_upsert_and_delete_answering_404_pass() {
    let (url, server) = things(true).await;
    let o = audit(&config(&format!("{url}/openapi.json"), &url))
        .await
        .expect("audit runs");
    server.abort();
    let ids: Vec<&str> = o
        .operations
        .iter()
        .map(|r| r.operation_id.as_str())
        .collect();
    assert_eq!(
        ids,
        ["putThing", "deleteThing"],
        "PUT makes what DELETE removes"
    );
    for r in &o.operations {
        assert_eq!(r.probe, ProbeKind::Repeat);
        assert_eq!(r.verdict, OperationVerdict::Pass, "{r:#?}");
    }
    let put = row(&o, "putThing");
    assert_eq!(put.replay, "200×2 (repeats)");
    assert!(
        put.evidence
            .iter()
            .any(|e| e.detail == "the list held 1 items after the first request, 1 at the end"),
        "{:#?}",
        put.evidence
    );
    let delete = row(&o, "deleteThing");
    assert_eq!(delete.replay, "404×2 (repeats)");
    assert!(delete.creations.contains("204×1"), "{}", delete.creations);
    assert_eq!(audit_report(&o).outcome(), Outcome::Passed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn put_as_an_insert_and_delete_failing_on_a_missing_row_fail() {
    let (url, server) = things(false).await;
    let o = audit(&config(&format!("{url}/openapi.json"), &url))
        .await
        .expect("audit runs");
    server.abort();
    let put = row(&o, "putThing");
    assert_eq!(put.verdict, OperationVerdict::Fail, "{put:#?}");
    assert!(
        put.summary.contains("two PUTs must leave one resource"),
        "{}",
        put.summary
    );
    let delete = row(&o, "deleteThing");
    assert_eq!(delete.verdict, OperationVerdict::Fail, "{delete:#?}");
    assert!(delete.summary.contains("500"), "{}", delete.summary);
    assert_eq!(audit_report(&o).outcome(), Outcome::Failed);
}

#[test]
fn the_cli_prints_the_table_and_exits_as_run_does() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    for (implementation, code, verdict) in [("unique", 0, "PASS"), ("check-then-insert", 1, "FAIL")]
    {
        let s = rt.block_on(fault_server(&format!(
            "orders: {{ idempotency: {implementation}, work_delay: 20ms }}"
        )));
        let dir = tempfile::tempdir().unwrap();
        let out = assert_cmd::Command::new(env!("CARGO_BIN_EXE_harness"))
            .args(["audit", "--openapi", &orders_doc(), "--base", &s.url()])
            .args(["--rounds", "3", "--seed", "3", "--report-dir"])
            .arg(dir.path())
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{implementation}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("Operations"), "{stdout}");
        assert!(
            stdout.contains(&format!("{verdict} POST /orders (createOrder)")),
            "{stdout}"
        );
        let junit = std::fs::read_to_string(dir.path().join("junit.xml")).unwrap();
        assert!(junit.contains("createOrder"), "{junit}");
        let json: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.path().join("report.json")).unwrap())
                .unwrap();
        assert_eq!(json["operations"].as_array().unwrap().len(), 2);
    }
    let bad = assert_cmd::Command::new(env!("CARGO_BIN_EXE_harness"))
        .args([
            "audit",
            "--openapi",
            "/nonexistent/openapi.yaml",
            "--base",
            "http://127.0.0.1:9",
        ])
        .output()
        .unwrap();
    assert_eq!(
        bad.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
}
