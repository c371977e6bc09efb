//! gRPC on the fault server's port, over real HTTP/2 on real sockets: the built-in
//! `orders.v1.Orders` on the same store as `POST /orders`, the services of given `.proto` files
//! with canned answers, every fault as a gRPC client sees it, and the journal's gRPC fields.
//!
//! Nothing here asserts how fast anything happens; a wait is only ever for an event.

mod common;

use std::time::Duration;

use bytes::Bytes;
use common::grpc::{order_json, orders_request, Client};
use fault_server::{
    FaultConfig, FaultServer, GrpcAfterHeadersFault, GrpcCode, GrpcConfig, GrpcFault, H2ErrorCode,
    HangFault, IdempotencyImpl, OrdersConfig, Outcome, ResetFault, RuleConfig, TestServer,
};
use grpc::call::AttemptHeaders;
use grpc::frame::{self, Encoding};
use history::Entry;

const CREATE: &str = "orders.v1.Orders/CreateOrder";
const GET: &str = "orders.v1.Orders/GetOrder";

fn plain() -> AttemptHeaders {
    AttemptHeaders::default()
}

async fn server(b: fault_server::ServerBuilder) -> (TestServer, Client) {
    let s = b.start().await.expect("the server starts");
    let c = Client::connect(s.addr()).await;
    (s, c)
}

fn by_seq(j: &[Entry], seq: usize) -> &Entry {
    &j[seq - 1]
}

#[tokio::test]
async fn orders_over_grpc_keep_the_idempotency_semantics_on_the_http_store() {
    let (s, mut c) = server(FaultServer::builder()).await;
    let create = orders_request(
        "CreateOrder",
        r#"{"requestId":"k-1","sku":"A","qty":2,"amount":"150","attributes":{"b":"2","a":"1"}}"#,
    );
    let (_, first) = c.call(CREATE, create.clone(), &[], plain()).await.unwrap();
    assert_eq!(first.status.code, GrpcCode::Ok, "{:?}", first.status);
    assert!(
        !first.trailers_only,
        "an answer with a message is committed"
    );
    let order = order_json(&first.messages[0]);
    let id = order["id"].as_str().expect("an id").to_string();
    assert!(id.starts_with("ord_"), "{order}");
    assert_eq!(order["status"], "ORDER_STATUS_PENDING");
    assert_eq!(order["requestId"], "k-1");
    assert_eq!(order["amount"], "150");
    assert_eq!(order["attributes"]["a"], "1");

    // A replay is the same message, byte for byte.
    let (_, replay) = c.call(CREATE, create.clone(), &[], plain()).await.unwrap();
    assert_eq!(replay.status.code, GrpcCode::Ok);
    assert_eq!(replay.messages, first.messages);
    // The same key with another request: FAILED_PRECONDITION.
    let other = orders_request("CreateOrder", r#"{"requestId":"k-1","sku":"B"}"#);
    let (_, reused) = c.call(CREATE, other, &[], plain()).await.unwrap();
    assert_eq!(reused.status.code, GrpcCode::FailedPrecondition);
    assert!(reused.trailers_only);
    // No key at all: INVALID_ARGUMENT, saying where a key goes.
    let keyless = orders_request("CreateOrder", r#"{"sku":"C"}"#);
    let (_, missing) = c.call(CREATE, keyless, &[], plain()).await.unwrap();
    assert_eq!(missing.status.code, GrpcCode::InvalidArgument);
    assert!(
        missing.status.message.contains("idempotency-key"),
        "{:?}",
        missing.status
    );
    // The metadata's key wins over the field.
    let both = orders_request("CreateOrder", r#"{"requestId":"field-key","sku":"D"}"#);
    let (_, by_metadata) = c
        .call(CREATE, both, &[("idempotency-key", "md-key")], plain())
        .await
        .unwrap();
    assert_eq!(order_json(&by_metadata.messages[0])["requestId"], "md-key");

    // The store is the HTTP resource's: an order made over HTTP is read over gRPC, and its key
    // is taken.
    let http = reqwest::Client::new()
        .post(format!("{}/orders", s.url()))
        .header("idempotency-key", "http-key")
        .json(&serde_json::json!({"sku": "H", "qty": 3}))
        .send()
        .await
        .unwrap();
    assert_eq!(http.status(), 201);
    let made: serde_json::Value = http.json().await.unwrap();
    let get = orders_request("GetOrder", &format!(r#"{{"id":{}}}"#, made["id"]));
    let (_, got) = c.call(GET, get, &[], plain()).await.unwrap();
    assert_eq!(got.status.code, GrpcCode::Ok);
    let got = order_json(&got.messages[0]);
    assert_eq!(
        (got["id"].clone(), got["sku"].clone()),
        (made["id"].clone(), "H".into())
    );
    assert_eq!(got["qty"], 3);
    let taken = orders_request("CreateOrder", r#"{"requestId":"http-key","sku":"H"}"#);
    let (_, taken) = c.call(CREATE, taken, &[], plain()).await.unwrap();
    assert_eq!(
        taken.status.code,
        GrpcCode::FailedPrecondition,
        "one store, one key"
    );
    let (_, none) = c
        .call(
            GET,
            orders_request("GetOrder", r#"{"id":"ord_nope"}"#),
            &[],
            plain(),
        )
        .await
        .unwrap();
    assert_eq!(none.status.code, GrpcCode::NotFound);

    let j = s.wait_for(9).await.unwrap();
    let e = by_seq(&j, 1);
    assert_eq!(e.grpc_method.as_deref(), Some(CREATE));
    assert_eq!(e.path, format!("/{CREATE}"));
    assert_eq!((e.status, e.grpc_status), (Some(200), Some(GrpcCode::Ok)));
    assert_eq!(e.committed, Some(true));
    assert_eq!(e.created.as_deref(), Some(id.as_str()));
    assert_eq!(
        e.idempotency_key.as_deref(),
        Some("k-1"),
        "the field is the key"
    );
    assert_eq!(e.key_attempt, Some(1));
    let e = by_seq(&j, 2);
    assert!(e.replayed && e.created.is_none(), "{e:?}");
    assert_eq!(e.key_attempt, Some(2));
    let e = by_seq(&j, 3);
    assert_eq!(e.grpc_status, Some(GrpcCode::FailedPrecondition));
    assert_eq!(e.committed, Some(false));
    assert!(
        e.grpc_message.as_deref().is_some_and(|m| m.contains("k-1")),
        "{e:?}"
    );
    assert_eq!(by_seq(&j, 5).idempotency_key.as_deref(), Some("md-key"));
    assert_eq!(by_seq(&j, 6).grpc_method, None, "HTTP is no gRPC call");
    assert_eq!(by_seq(&j, 9).grpc_status, Some(GrpcCode::NotFound));
    // Every line says so in JSON, by name.
    let mut line = Vec::new();
    by_seq(&j, 3).write_json(&mut line);
    let line = String::from_utf8(line).unwrap();
    assert!(
        line.contains(
            r#""grpc_method":"orders.v1.Orders/CreateOrder","grpc_status":"FAILED_PRECONDITION""#
        ) && line.contains(r#""committed":false"#),
        "{line}"
    );
}

#[tokio::test]
async fn a_duplicate_in_flight_is_aborted_with_pushback_and_the_racy_stores_create_twice() {
    let slow = |i| OrdersConfig::with(i).work_delay(Duration::from_secs(2));
    let (s, c) = server(FaultServer::builder().orders(slow(IdempotencyImpl::Unique))).await;
    let create = orders_request("CreateOrder", r#"{"requestId":"dup","sku":"A"}"#);
    let both = |mut a: Client, mut b: Client, m: Bytes| async move {
        let (x, y) = tokio::join!(
            a.call(CREATE, m.clone(), &[], plain()),
            b.call(CREATE, m.clone(), &[], plain())
        );
        let mut codes = vec![x.unwrap().1, y.unwrap().1];
        codes.sort_by_key(|r| r.status.code);
        codes
    };
    let other = Client::connect(s.addr()).await;
    let r = both(c, other, create.clone()).await;
    assert_eq!(r[0].status.code, GrpcCode::Ok);
    assert_eq!(r[1].status.code, GrpcCode::Aborted, "{:?}", r[1].status);
    assert_eq!(
        r[1].pushback,
        Some(retry_policy::grpc::Pushback::After(Duration::from_secs(1))),
        "the HTTP answer's Retry-After: 1"
    );
    let j = s.wait_for(2).await.unwrap();
    let aborted = j
        .iter()
        .find(|e| e.grpc_status == Some(GrpcCode::Aborted))
        .unwrap();
    assert_eq!(aborted.pushback_ms, Some(1000));
    assert_eq!(j.iter().filter(|e| e.created.is_some()).count(), 1);

    // check-then-insert: both concurrent creates see "not there" and create.
    let (s, c) =
        server(FaultServer::builder().orders(slow(IdempotencyImpl::CheckThenInsert))).await;
    let other = Client::connect(s.addr()).await;
    let r = both(c, other, create.clone()).await;
    assert!(r.iter().all(|r| r.status.code == GrpcCode::Ok));
    let ids: Vec<_> = r
        .iter()
        .map(|r| order_json(&r.messages[0])["id"].clone())
        .collect();
    assert_ne!(ids[0], ids[1], "two orders for one key");
    let j = s.wait_for(2).await.unwrap();
    assert_eq!(j.iter().filter(|e| e.created.is_some()).count(), 2);

    // none: every call creates, even one after the other.
    let (s, mut c) =
        server(FaultServer::builder().orders(OrdersConfig::with(IdempotencyImpl::None))).await;
    for _ in 0..2 {
        let (_, r) = c.call(CREATE, create.clone(), &[], plain()).await.unwrap();
        assert_eq!(r.status.code, GrpcCode::Ok);
    }
    let j = s.wait_for(2).await.unwrap();
    assert_eq!(j.iter().filter(|e| e.created.is_some()).count(), 2);
}

fn case(name: &str, fault: impl Into<FaultConfig>) -> RuleConfig {
    RuleConfig::new(fault).id(name).header("x-case", name)
}

#[tokio::test]
async fn every_fault_is_what_a_grpc_client_sees() {
    let (s, _) = server(
        FaultServer::builder()
            .hang_cap(Duration::from_secs(60))
            .rules([
                case(
                    "pushback",
                    GrpcFault::new(GrpcCode::Unavailable).pushback_ms(250),
                ),
                case(
                    "stop",
                    GrpcFault::new(GrpcCode::ResourceExhausted)
                        .message("slow down ✓ 100%")
                        .pushback_ms(-1),
                ),
                case(
                    "committed",
                    GrpcAfterHeadersFault::new(GrpcCode::Unavailable).process(),
                ),
                case(
                    "refused",
                    ResetFault::default().code(H2ErrorCode::RefusedStream),
                ),
                case("reset", FaultConfig::reset()),
                case("hang", HangFault::default()),
                case("drop", FaultConfig::Drop),
                case("goaway", FaultConfig::GoAway),
                case("delay", FaultConfig::delay(Duration::from_millis(20))),
                RuleConfig::new(FaultConfig::grpc(GrpcCode::Unavailable))
                    .id("first-attempts")
                    .header("x-case", "attempts")
                    .grpc_attempts(1),
            ]),
    )
    .await;
    let call = |name: &'static str, key: &'static str, headers: AttemptHeaders| {
        let addr = s.addr();
        async move {
            let mut c = Client::connect(addr).await;
            let m = orders_request(
                "CreateOrder",
                &format!(r#"{{"requestId":"{key}","sku":"A"}}"#),
            );
            c.call(CREATE, m, &[("x-case", name)], headers).await
        }
    };

    let (_, r) = call("pushback", "k-p", plain()).await.unwrap();
    assert_eq!(
        (r.status.code, r.trailers_only),
        (GrpcCode::Unavailable, true)
    );
    assert_eq!(r.status.message, "injected by the fault schedule");
    assert_eq!(
        r.pushback,
        Some(retry_policy::grpc::Pushback::After(Duration::from_millis(
            250
        )))
    );
    let (_, r) = call("stop", "k-s", plain()).await.unwrap();
    assert_eq!(r.status.code, GrpcCode::ResourceExhausted);
    assert_eq!(r.status.message, "slow down ✓ 100%");
    assert_eq!(r.pushback, Some(retry_policy::grpc::Pushback::Stop));

    // Headers, half a message, then the status in trailers.
    let (raw, r) = call("committed", "k-c", plain()).await.unwrap();
    assert!(!r.trailers_only, "the headers came first");
    assert_eq!(raw.headers["content-type"], "application/grpc");
    let trailers = raw.trailers.expect("trailers");
    assert_eq!(trailers["grpc-status"], "14");
    assert!(!raw.body.is_empty());
    assert!(
        frame::decode_all(&raw.body, 1 << 20, None).is_err(),
        "part of a message"
    );

    for (name, reason) in [
        ("refused", h2::Reason::REFUSED_STREAM),
        ("reset", h2::Reason::INTERNAL_ERROR),
    ] {
        let e = call(name, "k-r", plain())
            .await
            .expect_err("a reset stream");
        assert_eq!(e.reason(), Some(reason), "{name}: {e}");
    }
    // A hang ends at the call's deadline: its stream is cancelled, as a server cancels a call
    // whose deadline passed (the hang cap is a minute).
    let deadline = AttemptHeaders {
        timeout: Some(Duration::from_millis(300)),
        previous_attempts: None,
    };
    let e = call("hang", "k-h", deadline).await.expect_err("cancelled");
    assert_eq!(e.reason(), Some(h2::Reason::CANCEL), "{e}");
    // A drop processes the call and closes the connection.
    assert!(call("drop", "k-d", plain()).await.is_err());
    assert!(call("goaway", "k-g", plain()).await.is_err());
    let (_, r) = call("delay", "k-l", plain()).await.unwrap();
    assert_eq!(r.status.code, GrpcCode::Ok);
    // The Nth attempt of a call, by grpc-previous-rpc-attempts.
    let (_, r) = call("attempts", "k-a", plain()).await.unwrap();
    assert_eq!(r.status.code, GrpcCode::Unavailable);
    let retry = AttemptHeaders {
        timeout: None,
        previous_attempts: Some(1),
    };
    let (_, r) = call("attempts", "k-a", retry).await.unwrap();
    assert_eq!(r.status.code, GrpcCode::Ok);

    let j = s.wait_for(11).await.unwrap();
    let by_rule = |id: &str| {
        j.iter()
            .filter(|e| e.rule.as_deref() == Some(id))
            .collect::<Vec<_>>()
    };
    let e = by_rule("pushback")[0];
    assert_eq!(
        (e.fault.as_deref(), e.grpc_status),
        (Some("grpc"), Some(GrpcCode::Unavailable))
    );
    assert_eq!(
        (e.pushback_ms, e.committed, e.created.as_deref()),
        (Some(250), Some(false), None)
    );
    assert_eq!(by_rule("stop")[0].pushback_ms, Some(-1));
    let e = by_rule("committed")[0];
    assert_eq!(e.fault.as_deref(), Some("grpc_after_headers"));
    assert_eq!(
        (e.committed, e.grpc_status),
        (Some(true), Some(GrpcCode::Unavailable))
    );
    assert!(e.created.is_some(), "processed first: {e:?}");
    for id in ["refused", "reset"] {
        let e = by_rule(id)[0];
        assert_eq!(
            (e.outcome, e.grpc_status, e.committed),
            (Outcome::Reset, None, Some(false))
        );
    }
    let e = by_rule("hang")[0];
    assert_eq!((e.outcome, e.grpc_timeout_ms), (Outcome::Hung, Some(300)));
    let e = by_rule("drop")[0];
    assert_eq!(e.outcome, Outcome::Dropped);
    assert!(e.created.is_some(), "a drop comes after processing: {e:?}");
    assert_eq!((e.status, e.grpc_status), (None, None), "nothing was sent");
    assert_eq!(by_rule("goaway")[0].outcome, Outcome::Reset);
    assert_eq!(by_rule("delay")[0].grpc_status, Some(GrpcCode::Ok));
    let first = by_rule("first-attempts");
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].grpc_previous_attempts, None);
    let retried = j
        .iter()
        .find(|e| e.grpc_previous_attempts == Some(1))
        .expect("the retry");
    assert_eq!(
        (retried.rule.as_deref(), retried.grpc_status),
        (None, Some(GrpcCode::Ok))
    );
}

const SHOP: &str = r#"
syntax = "proto3";
package shop.v1;
import "google/protobuf/timestamp.proto";
service Shop {
  rpc Buy(BuyRequest) returns (BuyReply);
  rpc Peek(BuyRequest) returns (BuyReply);
}
message BuyRequest { string sku = 1; bytes blob = 2; }
message BuyReply { string order_id = 1; int64 cents = 2; google.protobuf.Timestamp at = 3; }
"#;

#[tokio::test]
async fn services_of_given_protos_answer_canned_or_default_messages() {
    let dir = tempfile::tempdir().unwrap();
    let proto = dir.path().join("shop.proto");
    std::fs::write(&proto, SHOP).unwrap();
    let grpc = GrpcConfig::default()
        .proto(&proto)
        .response(
            "shop.v1.Shop/Buy",
            serde_json::json!({"orderId": "o-1", "cents": "1999", "at": "2024-01-02T03:04:05Z"}),
        )
        .max_message(2048);
    let (s, mut c) = server(
        FaultServer::builder().grpc(grpc).rule(
            RuleConfig::new(GrpcFault::new(GrpcCode::PermissionDenied))
                .path("/shop.v1.Shop/*")
                .header("x-case", "denied"),
        ),
    )
    .await;
    let schema = grpc::Schema::compile(&[&proto], &[dir.path()]).unwrap();
    let buy = schema.method("shop.v1.Shop/Buy").unwrap();
    let req = buy.encode_request(r#"{"sku":"A"}"#).unwrap();
    let (_, r) = c
        .call("shop.v1.Shop/Buy", req.clone(), &[], plain())
        .await
        .unwrap();
    assert_eq!(r.status.code, GrpcCode::Ok);
    assert_eq!(
        buy.decode_response(&r.messages[0]).unwrap(),
        r#"{"orderId":"o-1","cents":"1999","at":"2024-01-02T03:04:05Z"}"#
    );
    // No canned answer: the default message (zero bytes).
    let (_, r) = c
        .call("shop.v1.Shop/Peek", req.clone(), &[], plain())
        .await
        .unwrap();
    assert_eq!((r.status.code, r.messages.len()), (GrpcCode::Ok, 1));
    assert!(r.messages[0].is_empty());
    // Faults match gRPC calls by path like any request.
    let (_, r) = c
        .call(
            "shop.v1.Shop/Buy",
            req.clone(),
            &[("x-case", "denied")],
            plain(),
        )
        .await
        .unwrap();
    assert_eq!(r.status.code, GrpcCode::PermissionDenied);

    // What a server refuses, as gRPC servers refuse it.
    let (_, r) = c
        .call("shop.v1.Shop/Sell", req.clone(), &[], plain())
        .await
        .unwrap();
    assert_eq!(r.status.code, GrpcCode::Unimplemented);
    assert!(r.status.message.contains("Buy, Peek"), "{:?}", r.status);
    let big = buy
        .encode_request(&format!(r#"{{"blob":"{}"}}"#, "A".repeat(4000)))
        .unwrap();
    let (_, r) = c.call("shop.v1.Shop/Buy", big, &[], plain()).await.unwrap();
    assert_eq!(r.status.code, GrpcCode::ResourceExhausted);
    let (_, r) = c
        .call(
            "shop.v1.Shop/Buy",
            Bytes::from_static(b"\x0a\x09A"),
            &[],
            plain(),
        )
        .await
        .unwrap();
    assert_eq!(r.status.code, GrpcCode::Internal, "not a BuyRequest");
    // A compressed request; a malformed deadline; an encoding the server does not speak.
    let call = grpc::call::CallRequest {
        path: "/shop.v1.Shop/Buy".into(),
        message: req.clone(),
        metadata: Default::default(),
        encoding: Some(Encoding::Gzip),
        user_agent: None,
    };
    let answer = c.exchange(call.outgoing(plain())).await.unwrap();
    let r = grpc::call::CallResponse::read(answer, 1 << 20);
    assert_eq!(r.status.code, GrpcCode::Ok, "{:?}", r.status);
    for (name, value, code) in [
        ("grpc-timeout", "soon", GrpcCode::Internal),
        ("grpc-encoding", "snappy", GrpcCode::Unimplemented),
    ] {
        let mut out = grpc::call::CallRequest {
            encoding: None,
            ..call.clone()
        }
        .outgoing(plain());
        out.headers
            .insert(name, http::HeaderValue::from_static(value));
        let answer = c.exchange(out).await.unwrap();
        assert_eq!(
            grpc::call::CallResponse::read(answer, 1 << 20).status.code,
            code,
            "{name}"
        );
    }
    let j = s.wait_for(9).await.unwrap();
    assert!(j.iter().all(|e| e.grpc_method.is_some()), "{j:?}");
    assert_eq!(j[0].grpc_method.as_deref(), Some("shop.v1.Shop/Buy"));
    assert_eq!(j[4].grpc_status, Some(GrpcCode::ResourceExhausted));
}

#[tokio::test]
async fn grpc_is_served_over_tls_with_alpn_h2() {
    let s = FaultServer::builder()
        .tls_self_signed()
        .start()
        .await
        .unwrap();
    let pem = s.server().certificate_pem().unwrap().to_string();
    let mut c = Client::connect_tls(s.addr(), &pem).await;
    let m = orders_request("CreateOrder", r#"{"requestId":"tls-1","sku":"A"}"#);
    let (_, r) = c.call(CREATE, m, &[], plain()).await.unwrap();
    assert_eq!(r.status.code, GrpcCode::Ok);
    let j = s.wait_for(1).await.unwrap();
    assert!(j[0].tls && j[0].created.is_some(), "{:?}", j[0]);
    assert_eq!(j[0].grpc_status, Some(GrpcCode::Ok));
}

#[tokio::test]
async fn a_call_whose_client_leaves_before_the_answer_is_not_committed() {
    // The client resets its stream while the store works: no answer began, so the call ends
    // client_closed and uncommitted.
    let (s, mut c) = server(
        FaultServer::builder().orders(OrdersConfig::default().work_delay(Duration::from_secs(1))),
    )
    .await;
    let m = orders_request("CreateOrder", r#"{"requestId":"gone","sku":"A"}"#);
    let mut out = grpc::call::CallRequest {
        path: format!("/{CREATE}"),
        message: m,
        metadata: Default::default(),
        encoding: None,
        user_agent: None,
    }
    .outgoing(plain());
    out.headers
        .insert("x-note", http::HeaderValue::from_static("leaves"));
    let gone = tokio::time::timeout(Duration::from_millis(100), c.exchange(out)).await;
    assert!(gone.is_err(), "the store takes a second");
    let j = s.wait_for(1).await.unwrap();
    assert_eq!(j[0].outcome, Outcome::ClientClosed);
    assert_eq!((j[0].committed, j[0].grpc_status), (Some(false), None));
}
