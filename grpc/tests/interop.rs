//! The call layer against a real gRPC server: grpcio (Python, pinned in
//! calibration/python/requirements.txt) serving `orders.v1.Orders` from the shipped proto on
//! 127.0.0.1, reached over real HTTP/2 on a real socket. The exchange here is the `h2` crate's
//! client, standing where `transport` will once it hands over trailers: the request this crate
//! builds must be one grpcio accepts, and grpcio's answers — messages and trailers, Trailers-Only
//! errors, a failure after headers, pushback — must read as grpcio meant them.
//!
//! The same server offers reflection as grpcio-reflection does (v1alpha only), so the reflection
//! messages of [`grpc::reflection`] are driven over a real bidirectional stream: v1 is refused,
//! v1alpha answers, and the schema it yields encodes requests as the compiled one does.
//!
//! Without the venv it says that it skips, unless `HARNESS_REQUIRE_TOOLS=1`.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use grpc::call::{attempt, AttemptHeaders, CallRequest, Exchange, HttpAnswer};
use grpc::frame::{self, Encoding, DEFAULT_MAX_MESSAGE};
use grpc::metadata::Metadata;
use grpc::reflection::{Reflection, ReflectionVersion};
use grpc::{Code, Schema, Status};
use history::ErrorKind;
use retry_policy::grpc::Pushback;
use transport::{AttemptError, Outgoing};

#[path = "common/grpcio.rs"]
mod grpcio;
use grpcio::root;

/// The server: CreateOrder echoes the request and what metadata it saw; GetOrder fails as the
/// id says.
const SERVER: &str = r#"
import sys
from concurrent import futures
import grpc
sys.path.insert(0, sys.argv[1])
from orders.v1 import orders_pb2, orders_pb2_grpc

class Orders(orders_pb2_grpc.OrdersServicer):
    def CreateOrder(self, request, context):
        md = dict(context.invocation_metadata())
        attrs = {k: (v.hex() if isinstance(v, bytes) else v) for k, v in md.items()
                 if k in ("idempotency-key", "trace-bin", "grpc-previous-rpc-attempts")}
        remaining = context.time_remaining()
        if remaining is not None:
            attrs["deadline-set"] = "yes" if 0 < remaining <= 30 else "no"
        return orders_pb2.Order(id="ord_1", status=orders_pb2.ORDER_STATUS_PENDING,
                                request_id=request.request_id, sku=request.sku, qty=request.qty,
                                amount=request.amount, attributes=attrs)

    def GetOrder(self, request, context):
        if request.id == "missing":
            context.abort(grpc.StatusCode.NOT_FOUND, "no order \u2713 100%")
        if request.id == "busy":
            context.set_trailing_metadata((("grpc-retry-pushback-ms", "250"),))
            context.abort(grpc.StatusCode.UNAVAILABLE, "busy")
        if request.id == "late":
            context.send_initial_metadata((("x-started", "1"),))
            context.abort(grpc.StatusCode.UNAVAILABLE, "failed after headers")
        return orders_pb2.Order(id=request.id, status=orders_pb2.ORDER_STATUS_PAID)

server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
orders_pb2_grpc.add_OrdersServicer_to_server(Orders(), server)
from grpc_reflection.v1alpha import reflection
reflection.enable_server_reflection(
    (orders_pb2.DESCRIPTOR.services_by_name["Orders"].full_name, reflection.SERVICE_NAME), server)
port = server.add_insecure_port("127.0.0.1:0")
server.start()
print(port, flush=True)
sys.stdin.read()
server.stop(0)
"#;

/// The grpcio server above, on the shipped proto.
fn start_server() -> Option<grpcio::Grpcio> {
    grpcio::start(&root().join("proto"), "orders/v1/orders.proto", SERVER)
}

/// An HTTP/2 exchange on one h2c connection, trailers included.
struct H2 {
    send: h2::client::SendRequest<Bytes>,
    authority: String,
}

impl H2 {
    async fn connect(port: u16) -> H2 {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .unwrap();
        let (send, conn) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(conn);
        H2 {
            send,
            authority: format!("127.0.0.1:{port}"),
        }
    }

    async fn run(&mut self, req: Outgoing) -> Result<HttpAnswer, h2::Error> {
        let mut builder = http::Request::builder()
            .method(req.method)
            .uri(format!("http://{}{}", self.authority, req.uri));
        for (k, v) in &req.headers {
            builder = builder.header(k, v);
        }
        let request = builder.body(()).expect("a valid request");
        let mut send = self.send.clone().ready().await?;
        let (response, mut body) = send.send_request(request, false)?;
        body.send_data(req.body, true)?;
        let (parts, mut recv) = response.await?.into_parts();
        let ended_with_headers = recv.is_end_stream();
        let mut data = BytesMut::new();
        while let Some(chunk) = recv.data().await {
            let chunk = chunk?;
            let _ = recv.flow_control().release_capacity(chunk.len());
            data.extend_from_slice(&chunk);
        }
        let trailers = if ended_with_headers {
            None
        } else {
            recv.trailers().await?
        };
        Ok(HttpAnswer {
            status: parts.status,
            headers: parts.headers,
            body: data.freeze(),
            trailers,
        })
    }
}

impl Exchange for H2 {
    async fn exchange(
        &mut self,
        request: Outgoing,
        timeout: Duration,
    ) -> Result<HttpAnswer, AttemptError> {
        match tokio::time::timeout(timeout, self.run(request)).await {
            Ok(Ok(a)) => Ok(a),
            Ok(Err(e)) => Err(AttemptError {
                kind: ErrorKind::Protocol,
                message: e.to_string(),
            }),
            Err(_) => Err(AttemptError {
                kind: ErrorKind::Timeout,
                message: "no answer in time".into(),
            }),
        }
    }
}

impl H2 {
    /// One reflection session on one bidirectional stream: the schema, or the status that
    /// ended the stream first.
    async fn reflect(&mut self, version: ReflectionVersion) -> Result<Schema, Status> {
        let request = http::Request::builder()
            .method("POST")
            .uri(format!("http://{}{}", self.authority, version.path()))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .expect("a valid request");
        let h2_failed = |e: h2::Error| Status::new(Code::Internal, e.to_string());
        let mut send = self.send.clone().ready().await.map_err(h2_failed)?;
        let (response, mut body) = send.send_request(request, false).map_err(h2_failed)?;
        let mut session = Reflection::new(&self.authority);
        body.send_data(frame::encode(&session.start(), Encoding::Identity), false)
            .map_err(h2_failed)?;
        let (parts, mut recv) = response.await.map_err(h2_failed)?.into_parts();
        if recv.is_end_stream() {
            return Err(
                Status::from_fields(&parts.headers).unwrap_or_else(|| Status::from_http(200))
            );
        }
        let mut decoder = frame::Decoder::new(DEFAULT_MAX_MESSAGE, None);
        let mut closed = false;
        while let Some(chunk) = recv.data().await {
            let chunk = chunk.map_err(h2_failed)?;
            let _ = recv.flow_control().release_capacity(chunk.len());
            decoder.push(&chunk);
            while let Some(message) = decoder
                .next_message()
                .map_err(|e| Status::new(Code::Internal, e.to_string()))?
            {
                let next = session
                    .on_response(&message)
                    .map_err(|e| Status::new(Code::Internal, e.to_string()))?;
                for request in next {
                    body.send_data(frame::encode(&request, Encoding::Identity), false)
                        .map_err(h2_failed)?;
                }
                if session.unanswered() == 0 && !closed {
                    body.send_data(Bytes::new(), true).map_err(h2_failed)?;
                    closed = true;
                }
            }
        }
        let trailers = recv
            .trailers()
            .await
            .map_err(h2_failed)?
            .unwrap_or_default();
        let status = Status::from_fields(&trailers).unwrap_or_else(|| Status::from_http(200));
        if status.code != Code::Ok {
            return Err(status);
        }
        session
            .into_schema()
            .map_err(|e| Status::new(Code::Internal, e.to_string()))
    }
}

fn schema() -> Schema {
    let proto = root().join("proto");
    Schema::compile(&[proto.join("orders/v1/orders.proto")], &[proto]).unwrap()
}

fn call(schema: &Schema, method: &str, json: &str, metadata: Metadata) -> CallRequest {
    let m = schema.method(method).unwrap();
    CallRequest {
        path: m.path(),
        message: m.encode_request(json).unwrap(),
        metadata,
        encoding: None,
        user_agent: Some("grpc-harness-test/0.1".into()),
    }
}

#[tokio::test]
async fn the_call_layer_speaks_with_grpcio() {
    let Some(server) = start_server() else {
        return;
    };
    let schema = schema();
    let mut h2 = H2::connect(server.port).await;
    let limit = Duration::from_secs(20);

    // A unary call with metadata, a -bin value, a deadline and an attempt count.
    let mut md = Metadata::new();
    md.insert("idempotency-key", "key-1").unwrap();
    md.insert_binary("trace-bin", Bytes::from_static(b"\x00\xfe"))
        .unwrap();
    let create = call(
        &schema,
        "orders.v1.Orders/CreateOrder",
        r#"{"requestId":"r-1","sku":"sku-9","qty":3,"amount":"1999"}"#,
        md,
    );
    let headers = AttemptHeaders {
        timeout: Some(Duration::from_secs(10)),
        previous_attempts: Some(2),
    };
    let r = attempt(&mut h2, &create, headers, limit, DEFAULT_MAX_MESSAGE).await;
    assert_eq!(r.status.code, Code::Ok, "{:?}", r.status);
    assert!(!r.trailers_only);
    assert_eq!(r.messages.len(), 1);
    let method = schema.method("orders.v1.Orders/CreateOrder").unwrap();
    let order: serde_json::Value =
        serde_json::from_str(&method.decode_response(&r.messages[0]).unwrap()).unwrap();
    assert_eq!(order["id"], "ord_1");
    assert_eq!(order["status"], "ORDER_STATUS_PENDING");
    assert_eq!(order["requestId"], "r-1");
    assert_eq!(order["amount"], "1999");
    assert_eq!(order["attributes"]["idempotency-key"], "key-1");
    assert_eq!(
        order["attributes"]["trace-bin"], "00fe",
        "base64 decoded by grpcio"
    );
    assert_eq!(order["attributes"]["grpc-previous-rpc-attempts"], "2");
    assert_eq!(
        order["attributes"]["deadline-set"], "yes",
        "grpc-timeout understood"
    );

    // An error before any message: Trailers-Only, not committed, message percent-decoded.
    let get = |id: &str| {
        call(
            &schema,
            "orders.v1.Orders/GetOrder",
            &format!(r#"{{"id":"{id}"}}"#),
            Metadata::new(),
        )
    };
    let r = attempt(
        &mut h2,
        &get("missing"),
        AttemptHeaders::default(),
        limit,
        DEFAULT_MAX_MESSAGE,
    )
    .await;
    assert_eq!(r.status.code, Code::NotFound);
    assert_eq!(r.status.message, "no order \u{2713} 100%");
    assert!(
        r.trailers_only,
        "grpcio answers an immediate error Trailers-Only"
    );
    assert!(!r.outcome().committed);

    // Pushback in the trailers of an immediate error.
    let r = attempt(
        &mut h2,
        &get("busy"),
        AttemptHeaders::default(),
        limit,
        DEFAULT_MAX_MESSAGE,
    )
    .await;
    assert_eq!(r.status.code, Code::Unavailable);
    assert_eq!(
        r.outcome().pushback,
        Some(Pushback::After(Duration::from_millis(250)))
    );

    // Headers first, then the failure: committed.
    let r = attempt(
        &mut h2,
        &get("late"),
        AttemptHeaders::default(),
        limit,
        DEFAULT_MAX_MESSAGE,
    )
    .await;
    assert_eq!(r.status.code, Code::Unavailable);
    assert!(!r.trailers_only);
    assert!(r.outcome().committed, "Response-Headers came first");
    assert_eq!(r.headers["x-started"], "1");

    // A method the server does not have.
    let mut unknown = get("x");
    unknown.path = "/orders.v1.Orders/DeleteOrder".into();
    let r = attempt(
        &mut h2,
        &unknown,
        AttemptHeaders::default(),
        limit,
        DEFAULT_MAX_MESSAGE,
    )
    .await;
    assert_eq!(r.status.code, Code::Unimplemented);
    drop(server);
}

#[tokio::test]
async fn server_reflection_falls_back_to_v1alpha_and_yields_the_schema() {
    let Some(server) = start_server() else {
        return;
    };
    let mut h2 = H2::connect(server.port).await;
    let mut version = ReflectionVersion::V1;
    let reflected = loop {
        match h2.reflect(version).await {
            Ok(schema) => break schema,
            Err(status) => match version.fallback(status.code) {
                Some(next) => version = next,
                None => panic!("reflection over {version:?} failed: {status:?}"),
            },
        }
    };
    assert_eq!(
        version,
        ReflectionVersion::V1Alpha,
        "grpcio-reflection serves v1alpha only"
    );
    assert_eq!(reflected.services(), ["orders.v1.Orders"]);
    let json = r#"{"requestId":"r-2","sku":"s","qty":1,"amount":"5"}"#;
    let theirs = reflected.method("orders.v1.Orders/CreateOrder").unwrap();
    let ours = schema().method("orders.v1.Orders/CreateOrder").unwrap();
    assert_eq!(
        theirs.encode_request(json).unwrap(),
        ours.encode_request(json).unwrap()
    );
    assert_eq!(theirs.output().full_name(), "orders.v1.Order");
    drop(server);
}

#[tokio::test]
async fn reflection_also_works_one_unary_exchange_per_request() {
    let Some(server) = start_server() else {
        return;
    };
    let mut h2 = H2::connect(server.port).await;
    let reflected = grpc::reflection::reflect(&mut h2, "127.0.0.1", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(reflected.services(), ["orders.v1.Orders"]);
    let get = reflected.method("orders.v1.Orders/GetOrder").unwrap();
    assert_eq!(get.input().full_name(), "orders.v1.GetOrderRequest");
    drop(server);
}
