//! The shipped `proto/orders/v1/orders.proto`: it compiles as it is with protox (always) and with
//! protoc as grpcio-tools ships it (`python -m grpc_tools.protoc`, pinned in
//! calibration/python/requirements.txt and installed by calibration/install.sh), both compilers
//! see the same messages, and the protobuf library of Python encodes a request from JSON to the
//! very bytes this crate does.
//!
//! Without the venv the grpcio-tools test says that it skips, unless `HARNESS_REQUIRE_TOOLS=1`
//! (CI), where a missing install is a failure.

use std::path::{Path, PathBuf};
use std::process::Command;

use grpc::Schema;
use prost::Message;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn orders() -> Schema {
    let proto = root().join("proto");
    Schema::compile(&[proto.join("orders/v1/orders.proto")], &[proto])
        .expect("orders.proto compiles")
}

/// A CreateOrder request in the proto3 JSON mapping, as a scenario would write it.
const CREATE: &str =
    r#"{"requestId":"k-42","sku":"sku-7","qty":2,"amount":"1999","attributes":{"gift":"yes"}}"#;

#[test]
fn protox_compiles_the_orders_service() {
    let schema = orders();
    assert_eq!(schema.services(), ["orders.v1.Orders"]);
    let create = schema.method("orders.v1.Orders/CreateOrder").unwrap();
    assert_eq!(create.path(), "/orders.v1.Orders/CreateOrder");
    assert!(create.is_unary());
    assert_eq!(create.input().full_name(), "orders.v1.CreateOrderRequest");
    assert_eq!(create.output().full_name(), "orders.v1.Order");
    let get = schema.method("/orders.v1.Orders/GetOrder").unwrap();
    assert_eq!(get.input().full_name(), "orders.v1.GetOrderRequest");
    assert_eq!(get.output().full_name(), "orders.v1.Order");
    // The request_id field, usable as the idempotency key; proto names are accepted too.
    let bytes = create
        .encode_request(r#"{"request_id":"k-1","sku":"A","qty":1}"#)
        .unwrap();
    let json = grpc::schema::protobuf_to_json(&create.input(), &bytes).unwrap();
    assert_eq!(json, r#"{"requestId":"k-1","sku":"A","qty":1}"#);
    // An order as the store answers it.
    let order = grpc::schema::json_to_protobuf(
        &create.output(),
        r#"{"id":"ord_1","status":"ORDER_STATUS_PENDING","requestId":"k-1","sku":"A","qty":1,"amount":"4200"}"#,
    )
    .unwrap();
    let back = create.decode_response(&order).unwrap();
    assert!(
        back.contains(r#""status":"ORDER_STATUS_PENDING""#),
        "{back}"
    );
}

/// The venv's Python, or `None` (after saying so) when the test may skip.
fn python() -> Option<PathBuf> {
    let py = root().join(".cache/calibration/venv/bin/python");
    let installed = Command::new(&py)
        .args(["-c", "import grpc_tools.protoc, google.protobuf"])
        .output()
        .is_ok_and(|o| o.status.success());
    if installed {
        return Some(py);
    }
    assert!(
        std::env::var("HARNESS_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "grpcio-tools is not installed in .cache/calibration/venv, and HARNESS_REQUIRE_TOOLS=1: \
         run `bash calibration/install.sh`"
    );
    eprintln!(
        "skipping the grpcio-tools check: run `bash calibration/install.sh` first (.ci/run does)"
    );
    None
}

#[test]
fn grpcio_tools_compiles_it_as_it_is_and_python_encodes_the_same_bytes() {
    let Some(py) = python() else {
        return;
    };
    let out = tempfile::tempdir().unwrap();
    let set = out.path().join("orders.pb");
    let run = Command::new(&py)
        .current_dir(root())
        .args(["-m", "grpc_tools.protoc", "-I", "proto"])
        .arg(format!("--python_out={}", out.path().display()))
        .arg(format!("--grpc_python_out={}", out.path().display()))
        .arg(format!("--descriptor_set_out={}", set.display()))
        .arg("--include_imports")
        .arg("proto/orders/v1/orders.proto")
        .output()
        .expect("the venv's python runs");
    assert!(
        run.status.success(),
        "grpc_tools.protoc failed:\n{}{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(out.path().join("orders/v1/orders_pb2.py").is_file());
    assert!(out.path().join("orders/v1/orders_pb2_grpc.py").is_file());

    // protoc and protox see the same file: every message with the same fields.
    let raw = std::fs::read(&set).unwrap();
    let protoc = prost_types::FileDescriptorSet::decode(&raw[..]).unwrap();
    let ours = orders();
    let theirs = &protoc.file[0];
    assert_eq!(theirs.name(), "orders/v1/orders.proto");
    for m in &theirs.message_type {
        let mine = ours
            .message(&format!("orders.v1.{}", m.name()))
            .unwrap_or_else(|| panic!("protox lacks {}", m.name()));
        let fields = |it: Vec<(String, u32)>| it;
        assert_eq!(
            fields(
                m.field
                    .iter()
                    .map(|f| (f.name().to_string(), f.number() as u32))
                    .collect()
            ),
            fields(
                mine.fields()
                    .map(|f| (f.name().to_string(), f.number()))
                    .collect()
            ),
            "{}",
            m.name()
        );
    }
    assert_eq!(theirs.service[0].method.len(), 2);

    // Python's protobuf reads the same JSON into the same bytes.
    let script = format!(
        "import sys; sys.path.insert(0, {dir:?})\n\
         from google.protobuf import json_format\n\
         from orders.v1 import orders_pb2\n\
         m = json_format.Parse({CREATE:?}, orders_pb2.CreateOrderRequest())\n\
         sys.stdout.write(m.SerializeToString(deterministic=True).hex())\n",
        dir = out.path().display().to_string(),
    );
    let run = Command::new(&py).args(["-c", &script]).output().unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let python_hex = String::from_utf8(run.stdout).unwrap();
    let create = ours.method("orders.v1.Orders/CreateOrder").unwrap();
    let mine = create.encode_request(CREATE).unwrap();
    let mine_hex: String = mine.iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(mine_hex, python_hex);
}
