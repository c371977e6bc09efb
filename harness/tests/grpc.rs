//! gRPC from the client's side, with the real `harness` binary against the fault server's gRPC
//! endpoint on loopback: `harness load grpc://` and `grpcs://` (statuses counted by name, metadata
//! and message templated, the deadline sent), its bad input, and a scenario's same-key bursts
//! through metadata in every HTTP/2 sync mode.

use std::path::PathBuf;
use std::process::{Command, Output};

use assert_cmd::cargo::CommandCargoExt;

fn harness() -> Command {
    Command::cargo_bin("harness").unwrap()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A fault server in a background runtime, with its journal file.
struct Server {
    addr: String,
    journal: PathBuf,
    dir: tempfile::TempDir,
    server: std::sync::Arc<fault_server::FaultServer>,
    rt: tokio::runtime::Runtime,
}

fn server(yaml: &str, tls: bool) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal.jsonl");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let cfg = fault_server::Config::from_yaml(yaml, "test").unwrap();
    let tls = tls.then(|| fault_server::tls::ServerTls::self_signed().unwrap());
    if let Some(t) = &tls {
        std::fs::write(dir.path().join("ca.pem"), t.certificate_pem()).unwrap();
    }
    let opts = fault_server::ServerOptions {
        journal_file: Some(journal.clone()),
        tls,
        ..Default::default()
    };
    let s = rt
        .block_on(fault_server::FaultServer::start(cfg, opts))
        .unwrap();
    let addr = s.addr().to_string();
    let server = std::sync::Arc::new(s);
    let keep = server.clone();
    rt.spawn(async move {
        let _keep = keep;
        std::future::pending::<()>().await
    });
    Server {
        addr,
        journal,
        dir,
        server,
        rt,
    }
}

/// The journal, once every request the server received is in it: a client may read its last
/// answer before the server has journaled it.
fn journal(s: &Server) -> Vec<serde_json::Value> {
    assert!(
        s.rt.block_on(s.server.settle(std::time::Duration::from_secs(10))),
        "the journal did not settle"
    );
    s.server.journal().flush();
    std::fs::read_to_string(&s.journal)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn load(url: &str, extra: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let out = harness()
        .args(["load", url, "--call", "orders.v1.Orders/CreateOrder"])
        .args(extra)
        .args(["--format", "json"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    let report =
        serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}\n{stderr}"));
    (out.status.code(), report, stderr)
}

#[test]
fn load_calls_a_grpc_method_with_templated_metadata_and_message() {
    let s = server("orders: { idempotency: unique }\n", false);
    let (code, r, stderr) = load(
        &format!("grpc://{}", s.addr),
        &[
            "-d",
            r#"{"requestId": "r-{{seq}}", "sku": "SKU-{{seq}}", "qty": 2}"#,
            "-H",
            "idempotency-key: {{key}}",
            "--deadline",
            "20s",
            "-c",
            "2",
            "--streams",
            "4",
            "-n",
            "40",
        ],
    );
    assert_eq!(code, Some(0), "{r}\n{stderr}");
    assert_eq!(r["requests"]["by_grpc_status"]["OK"], 40, "{r}");
    assert_eq!(r["requests"]["sent"], 40);
    let entries = journal(&s);
    assert_eq!(entries.len(), 40);
    let mut keys = std::collections::HashSet::new();
    for e in &entries {
        assert_eq!(e["grpc_method"], "orders.v1.Orders/CreateOrder", "{e}");
        assert_eq!(e["grpc_status"], "OK", "{e}");
        assert_eq!(e["http_version"], "2", "{e}");
        let t = e["grpc_timeout_ms"].as_u64().expect("grpc-timeout sent");
        assert!(t > 0 && t <= 20_000, "{e}");
        assert!(e["created"].is_string(), "{e}");
        keys.insert(e["idempotency_key"].as_str().unwrap().to_string());
    }
    assert_eq!(keys.len(), 40, "one key per call");
}

/// `harness load` of one literal CreateOrder (nothing templated) under the idempotency key
/// `key`, `n` calls by `clients` clients of `streams` streams per connection.
fn load_one_literal_create(
    s: &Server,
    key: &str,
    clients: &str,
    streams: &str,
    n: &str,
) -> (Option<i32>, serde_json::Value, String) {
    let header = format!("idempotency-key: {key}");
    load(
        &format!("grpc://{}", s.addr),
        &[
            "-d",
            r#"{"requestId": "fixed", "sku": "SKU-1", "qty": 2}"#,
            "-H",
            &header,
            "-c",
            clients,
            "--streams",
            streams,
            "-n",
            n,
        ],
    )
}

/// A call with nothing templated is built once and sent as it is: every call still carries
/// its metadata and its message (one key, so one order and replays of it).
#[test]
fn a_call_with_nothing_templated_carries_its_metadata_on_every_call() {
    let s = server("orders: { idempotency: unique }\n", false);
    // One at a time: a key's second call while its first is in progress is ABORTED.
    let (code, r, stderr) = load_one_literal_create(&s, "one-key", "1", "1", "30");
    assert_eq!(code, Some(0), "{r}\n{stderr}");
    assert_eq!(r["requests"]["by_grpc_status"]["OK"], 30, "{r}");
    let entries = journal(&s);
    assert_eq!(entries.len(), 30);
    let mut created = std::collections::HashSet::new();
    for e in &entries {
        assert_eq!(e["grpc_method"], "orders.v1.Orders/CreateOrder", "{e}");
        assert_eq!(e["grpc_status"], "OK", "{e}");
        assert_eq!(e["idempotency_key"], "one-key", "{e}");
        assert!(
            e["grpc_timeout_ms"].is_null(),
            "no deadline, no grpc-timeout: {e}"
        );
        if let Some(id) = e["created"].as_str() {
            created.insert(id.to_string());
        }
    }
    assert_eq!(created.len(), 1, "one key, one order: {created:?}");
}

#[test]
fn every_client_of_a_load_sends_the_request_built_once_for_the_phase_whole() {
    // Six workers over two connections share the one request the phase built: each call still
    // carries its path, its metadata and its message.
    let s = server("orders: { idempotency: unique }\n", false);
    let (code, r, stderr) = load_one_literal_create(&s, "shared-key", "2", "3", "60");
    // A call that finds the key's first still in progress is ABORTED: judged, not an error.
    assert!(matches!(code, Some(0 | 1)), "{r}\n{stderr}");
    let entries = journal(&s);
    assert_eq!(entries.len(), 60, "{r}\n{stderr}");
    let mut conns = std::collections::HashSet::new();
    for e in &entries {
        assert_eq!(e["grpc_method"], "orders.v1.Orders/CreateOrder", "{e}");
        assert_eq!(e["idempotency_key"], "shared-key", "{e}");
        assert_eq!(e["body_len"], entries[0]["body_len"], "{e}");
        assert_eq!(e["body_sha256"], entries[0]["body_sha256"], "{e}");
        conns.insert(e["conn_id"].as_u64());
    }
    assert_eq!(conns.len(), 2, "two connections: {conns:?}");
    let created: std::collections::HashSet<_> = entries
        .iter()
        .filter_map(|e| e["created"].as_str())
        .collect();
    assert_eq!(created.len(), 1, "one key, one order: {created:?}");
}

#[test]
fn a_scenario_client_with_a_header_of_its_own_sends_it_on_a_literal_call() {
    // A scenario's clients name themselves in a header (`client_id_header`, on by default), so
    // each builds its own request from the phase's shared message.
    let s = server("orders: { idempotency: unique }\n", false);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("literal.yaml");
    std::fs::write(
        &file,
        format!(
            "name: literal\nseed: 1\ntarget: grpc://{}\nphases:\n  - name: gets\n    \
             clients: {{ concurrency: 3, requests: 12 }}\n    request:\n      \
             grpc: orders.v1.Orders/GetOrder\n      message: {{ id: ord-1 }}\n",
            s.addr
        ),
    )
    .unwrap();
    let out = harness()
        .arg("run")
        .arg(&file)
        .args(["--format", "json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let entries = journal(&s);
    assert_eq!(entries.len(), 12, "{stderr}");
    let mut clients = std::collections::HashSet::new();
    for e in &entries {
        assert_eq!(e["grpc_method"], "orders.v1.Orders/GetOrder", "{e}");
        assert_eq!(e["body_sha256"], entries[0]["body_sha256"], "{e}");
        clients.insert(e["client_id"].as_str().expect("a client id").to_string());
    }
    assert_eq!(
        clients.len(),
        3,
        "three clients, each its own id: {clients:?}"
    );
}

#[test]
fn a_load_whose_calls_fail_is_judged_by_their_grpc_status() {
    let s = server(
        "rules:\n  - match: { grpc_method: orders.v1.Orders/CreateOrder }\n    fault: { grpc: { code: UNAVAILABLE, message: down } }\n",
        false,
    );
    let (code, r, stderr) = load(&format!("grpc://{}", s.addr), &["-n", "10", "-c", "2"]);
    assert_eq!(
        code,
        Some(1),
        "every call failed, every HTTP status was 200: {r}\n{stderr}"
    );
    assert_eq!(r["requests"]["by_grpc_status"]["UNAVAILABLE"], 10, "{r}");
    assert_eq!(r["requests"]["by_status"]["200"], 10, "{r}");
    assert_eq!(r["checks"][0]["verdict"], "fail", "{r}");
}

#[test]
fn grpcs_uses_the_tls_flags() {
    let s = server("orders: { idempotency: unique }\n", true);
    let url = format!("grpcs://localhost:{}", s.addr.rsplit(':').next().unwrap());
    let ca = s.dir.path().join("ca.pem");
    let (code, r, stderr) = load(
        &url,
        &[
            "--cacert",
            ca.to_str().unwrap(),
            "-n",
            "5",
            "-c",
            "1",
            "-H",
            "idempotency-key: {{key}}",
            "--json",
            r#"{"sku": "A"}"#,
        ],
    );
    assert_eq!(code, Some(0), "{r}\n{stderr}");
    assert_eq!(r["requests"]["by_grpc_status"]["OK"], 5, "{r}");
    assert!(journal(&s).iter().all(|e| e["tls"] == true), "over TLS");
    // Without the CA the handshake fails: the run could not be carried out.
    let out = harness()
        .args([
            "load",
            &url,
            "--call",
            "orders.v1.Orders/CreateOrder",
            "-n",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{:?}", text(&out));
}

#[test]
fn bad_grpc_input_is_refused_with_exit_2() {
    let cases: [(&[&str], &str); 5] = [
        (&["load", "grpc://127.0.0.1:9", "-n", "1"], "--call"),
        (
            &[
                "load",
                "grpc://127.0.0.1:9",
                "--call",
                "orders.v1.Orders/Nope",
            ],
            "Nope",
        ),
        (
            &[
                "load",
                "grpc://127.0.0.1:9",
                "--call",
                "orders.v1.Orders/CreateOrder",
                "-d",
                r#"{"skew": 1}"#,
            ],
            "skew",
        ),
        (
            &[
                "load",
                "http://127.0.0.1:9",
                "--call",
                "orders.v1.Orders/CreateOrder",
            ],
            "gRPC target",
        ),
        (
            &[
                "load",
                "grpc://127.0.0.1:9",
                "--call",
                "x.v1.X/Y",
                "--proto",
                "/nonexistent/x.proto",
            ],
            "x.proto",
        ),
    ];
    for (args, says) in cases {
        let out = harness().args(args).output().unwrap();
        let (_, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(says),
            "{args:?} should say {says:?}: {stderr}"
        );
    }
}

/// A burst's members share their round's key through metadata, in both HTTP/2 sync modes: the
/// store sees each key once per member of its round, and the `unique` implementation creates
/// one order per key.
#[test]
fn bursts_share_a_key_through_metadata_in_every_sync_mode() {
    for sync in ["single-packet", "release"] {
        let s = server("orders: { idempotency: unique }\n", false);
        let scenario = s.dir.path().join("s.yaml");
        std::fs::write(
            &scenario,
            format!(
                "target: grpc://{}\nphases:\n  - name: race\n    burst: {{ size: 6, rounds: 3, sync: {sync} }}\n    request:\n      grpc: orders.v1.Orders/CreateOrder\n      metadata: {{ idempotency-key: \"{{{{key}}}}\" }}\n      message: {{ requestId: \"{{{{key}}}}\", sku: A, qty: 1 }}\n",
                s.addr
            ),
        )
        .unwrap();
        let out = harness()
            .arg("run")
            .arg(&scenario)
            .args(["--format", "json"])
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        let r: serde_json::Value = serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("{sync}: {e}: {stdout}\n{stderr}"));
        assert_eq!(r["requests"]["sent"], 18, "{sync}: {r}");
        // Members of a round that find its key in flight are answered ABORTED (gRPC's 409);
        // the others OK, with the one order.
        let statuses = r["requests"]["by_grpc_status"].as_object().unwrap();
        assert!(
            statuses.keys().all(|k| k == "OK" || k == "ABORTED"),
            "{sync}: {r}"
        );
        let answered: u64 = statuses.values().map(|n| n.as_u64().unwrap()).sum();
        assert_eq!(answered, 18, "{sync}: {r}");
        let entries = journal(&s);
        let mut per_key = std::collections::HashMap::<String, u32>::new();
        for e in &entries {
            assert_eq!(e["grpc_method"], "orders.v1.Orders/CreateOrder", "{e}");
            *per_key
                .entry(e["idempotency_key"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
        assert_eq!(per_key.len(), 3, "{sync}: one key per round: {per_key:?}");
        assert!(per_key.values().all(|n| *n == 6), "{sync}: {per_key:?}");
        let created: std::collections::HashSet<&str> = entries
            .iter()
            .filter_map(|e| e["created"].as_str())
            .collect();
        assert_eq!(created.len(), 3, "{sync}: one order per key");
    }
}

/// A grpcio server (Python, from `calibration/install.sh`'s venv) of a service the harness does
/// not know, with grpcio-reflection: it answers `Reserve` with OK only when the message decodes
/// to what the load sent (`sku` "SKU-<n>", `qty` n, `priority` HIGH, a nested `note`), else
/// INVALID_ARGUMENT saying what it got.
const REFLECTING_SERVER: &str = r#"
import sys
from concurrent import futures
import grpc
sys.path.insert(0, sys.argv[1])
import inventory_pb2, inventory_pb2_grpc
from grpc_reflection.v1alpha import reflection

class Inventory(inventory_pb2_grpc.InventoryServicer):
    def Reserve(self, request, context):
        ok = (request.sku == "SKU-%d" % request.qty and request.qty > 0
              and request.priority == inventory_pb2.PRIORITY_HIGH
              and request.note.text == "hold")
        if not ok:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "got %r" % request)
        return inventory_pb2.Reservation(id="res-%d" % request.qty)

server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
inventory_pb2_grpc.add_InventoryServicer_to_server(Inventory(), server)
reflection.enable_server_reflection(
    (inventory_pb2.DESCRIPTOR.services_by_name["Inventory"].full_name, reflection.SERVICE_NAME),
    server)
port = server.add_insecure_port("127.0.0.1:0")
server.start()
print(port, flush=True)
sys.stdin.read()
server.stop(0)
"#;

const INVENTORY_PROTO: &str = r#"syntax = "proto3";
package demo.v1;
import "google/protobuf/timestamp.proto";
enum Priority { PRIORITY_UNSPECIFIED = 0; PRIORITY_LOW = 1; PRIORITY_HIGH = 2; }
message Note { string text = 1; google.protobuf.Timestamp at = 2; }
message ReserveRequest { string sku = 1; int32 qty = 2; Priority priority = 3; Note note = 4; }
message Reservation { string id = 1; }
service Inventory { rpc Reserve(ReserveRequest) returns (Reservation); }
"#;

#[path = "../../grpc/tests/common/grpcio.rs"]
mod grpcio;

/// The grpcio server above, on `INVENTORY_PROTO`; `None` (the test skips) without the venv,
/// unless `HARNESS_REQUIRE_TOOLS=1`.
fn grpcio_with_reflection() -> Option<(grpcio::Grpcio, tempfile::TempDir)> {
    let protos = tempfile::tempdir().unwrap();
    std::fs::write(protos.path().join("inventory.proto"), INVENTORY_PROTO).unwrap();
    let server = grpcio::start(protos.path(), "inventory.proto", REFLECTING_SERVER)?;
    Some((server, protos))
}

/// Without `--proto`, a service that is not built in is described by the target's server
/// reflection — grpcio's, which offers v1alpha only — and the messages encoded from that schema
/// (an enum by name, a nested message, an imported well-known type) are the ones grpcio decodes.
/// A target without reflection is bad input that says to name the file; an unreachable one is a
/// run that could not be made.
#[test]
fn without_proto_the_schema_comes_from_server_reflection() {
    let Some((g, _protos)) = grpcio_with_reflection() else {
        return;
    };
    let url = format!("grpc://127.0.0.1:{}", g.port);
    let out = harness()
        .args(["load", &url, "--call", "demo.v1.Inventory/Reserve", "-d"])
        .arg(r#"{"sku": "SKU-{{seq}}", "qty": "{{seq}}", "priority": "PRIORITY_HIGH", "note": {"text": "hold", "at": "2026-01-02T03:04:05Z"}}"#)
        .args(["-n", "20", "-c", "2", "--format", "json"])
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let r: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(r["requests"]["by_grpc_status"]["OK"], 20, "{r}");

    // The same call with a value grpcio decodes differently is refused by it: the OK above is
    // the server's judgement of the message, not a server that answers anything.
    let out = harness()
        .args(["load", &url, "--call", "demo.v1.Inventory/Reserve", "-d"])
        .arg(r#"{"sku": "SKU-{{seq}}", "qty": "{{seq}}", "priority": "PRIORITY_LOW"}"#)
        .args(["-n", "3", "--format", "json"])
        .output()
        .unwrap();
    let r: serde_json::Value = serde_json::from_str(&text(&out).0).unwrap();
    assert_eq!(
        r["requests"]["by_grpc_status"]["INVALID_ARGUMENT"], 3,
        "{r}"
    );

    // A field the reflected message lacks is refused before any call, as with --proto.
    let out = harness()
        .args(["load", &url, "--call", "demo.v1.Inventory/Reserve"])
        .args(["-d", r#"{"skew": 1}"#, "-n", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{:?}", text(&out));
    assert!(text(&out).1.contains("skew"), "{:?}", text(&out));

    // The fault server offers no reflection: bad input, naming the way out.
    let s = server("{}\n", false);
    let out = harness()
        .args(["load", &format!("grpc://{}", s.addr)])
        .args(["--call", "demo.v1.Inventory/Reserve", "-n", "1"])
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("UNIMPLEMENTED") && stderr.contains("--proto"),
        "{stderr}"
    );

    // Nothing listens: the run cannot be made.
    let out = harness()
        .args([
            "load",
            "grpc://127.0.0.1:9",
            "--call",
            "demo.v1.Inventory/Reserve",
        ])
        .args(["-n", "1"])
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("127.0.0.1:9"), "{stderr}");
}
