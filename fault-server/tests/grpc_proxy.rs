//! Proxy mode for gRPC (`upstream: grpc://…`, `grpcs://…`): calls forwarded over HTTP/2 to a
//! real gRPC dependency — here a second fault server serving `orders.v1.Orders` on its own store
//! — with the faults in between and the answer's trailers relayed; and what a gRPC client gets
//! when the dependency is not there, or cannot carry gRPC.

mod common;

use std::time::Duration;

use common::grpc::{order_json, orders_request, Client};
use fault_server::{
    FaultConfig, FaultServer, GrpcCode, GrpcFault, LimitsConfig, Outcome, RuleConfig,
    UpstreamConfig, UpstreamUrl,
};
use grpc::call::AttemptHeaders;

const CREATE: &str = "orders.v1.Orders/CreateOrder";
const GET: &str = "orders.v1.Orders/GetOrder";

#[tokio::test]
async fn calls_are_forwarded_with_their_trailers_and_the_faults_in_between() {
    let dependency = FaultServer::builder()
        .rule(
            RuleConfig::new(GrpcFault::new(GrpcCode::NotFound).message("upstream says no"))
                .grpc_method(GET),
        )
        .start()
        .await
        .unwrap();
    let proxy = FaultServer::builder()
        .upstream(&format!("grpc://{}", dependency.addr()))
        .rule(
            RuleConfig::new(FaultConfig::Drop)
                .id("lost")
                .header("x-case", "lost"),
        )
        .rule(
            RuleConfig::new(GrpcFault::new(GrpcCode::Unavailable).pushback_ms(100))
                .id("first")
                .grpc_method(CREATE)
                .attempts(1),
        )
        .start()
        .await
        .unwrap();
    let mut c = Client::connect(proxy.addr()).await;
    let create = orders_request("CreateOrder", r#"{"requestId":"p-1","sku":"A","qty":1}"#);
    let md = [("idempotency-key", "p-1")];
    // The first attempt never reaches the dependency.
    let (_, r) = c
        .call(CREATE, create.clone(), &md, AttemptHeaders::default())
        .await
        .unwrap();
    assert_eq!(
        (r.status.code, r.trailers_only),
        (GrpcCode::Unavailable, true)
    );
    // The retry does, and its answer comes back with its status in trailers.
    let retry = AttemptHeaders {
        timeout: Some(Duration::from_secs(5)),
        previous_attempts: Some(1),
    };
    let (raw, r) = c.call(CREATE, create.clone(), &md, retry).await.unwrap();
    assert_eq!(r.status.code, GrpcCode::Ok, "{:?}", r.status);
    assert_eq!(
        raw.trailers.as_ref().map(|t| t["grpc-status"].clone()),
        Some("0".parse().unwrap())
    );
    let id = order_json(&r.messages[0])["id"]
        .as_str()
        .unwrap()
        .to_string();
    // A Trailers-Only failure of the dependency stays Trailers-Only.
    let get = orders_request("GetOrder", &format!(r#"{{"id":"{id}"}}"#));
    let (raw, r) = c
        .call(GET, get, &[], AttemptHeaders::default())
        .await
        .unwrap();
    assert_eq!((r.status.code, r.trailers_only), (GrpcCode::NotFound, true));
    assert_eq!(r.status.message, "upstream says no");
    assert!(raw.trailers.is_none());
    // A drop after forwarding: the dependency made the order, the client heard nothing.
    let lost = orders_request("CreateOrder", r#"{"requestId":"p-2","sku":"B"}"#);
    let gone = c
        .call(
            CREATE,
            lost,
            &[("idempotency-key", "p-2"), ("x-case", "lost")],
            AttemptHeaders::default(),
        )
        .await;
    assert!(gone.is_err(), "the connection was closed");

    let j = proxy.wait_for(4).await.unwrap();
    assert_eq!(j[0].rule.as_deref(), Some("first"));
    assert!(!j[0].forwarded);
    let e = &j[1];
    assert!(e.forwarded, "{e:?}");
    assert_eq!(
        (e.upstream_status, e.grpc_status, e.committed),
        (Some(200), Some(GrpcCode::Ok), Some(true))
    );
    assert_eq!(e.grpc_previous_attempts, Some(1));
    assert_eq!(e.grpc_timeout_ms, Some(5000));
    let e = &j[2];
    assert_eq!(
        (e.grpc_status, e.committed),
        (Some(GrpcCode::NotFound), Some(false))
    );
    assert_eq!(e.grpc_message.as_deref(), Some("upstream says no"));
    let e = &j[3];
    assert_eq!(
        (e.outcome, e.forwarded, e.upstream_status),
        (Outcome::Dropped, true, Some(200))
    );
    // What reached the dependency: the retry and the lost call made their orders there, with
    // the metadata and the deadline forwarded.
    let dj = dependency.wait_for(3).await.unwrap();
    assert_eq!(dj.len(), 3, "{dj:?}");
    assert_eq!(dj[0].idempotency_key.as_deref(), Some("p-1"));
    assert_eq!(dj[0].grpc_previous_attempts, Some(1));
    assert!(dj[0].grpc_timeout_ms.is_some_and(|ms| ms <= 5000));
    assert!(dj[0].created.is_some() && dj[2].created.is_some());
    assert_eq!(dj[2].idempotency_key.as_deref(), Some("p-2"));
}

#[tokio::test]
async fn grpcs_upstreams_are_reached_over_tls_with_alpn_h2() {
    let dependency = FaultServer::builder()
        .tls_self_signed()
        .start()
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, dependency.server().certificate_pem().unwrap()).unwrap();
    let mut up = UpstreamConfig::new(
        UpstreamUrl::parse(&format!("grpcs://127.0.0.1:{}", dependency.addr().port())).unwrap(),
    );
    up.ca = Some(ca);
    let proxy = FaultServer::builder()
        .upstream_config(up)
        .start()
        .await
        .unwrap();
    let mut c = Client::connect(proxy.addr()).await;
    let create = orders_request("CreateOrder", r#"{"requestId":"tls","sku":"A"}"#);
    let (_, r) = c
        .call(CREATE, create, &[], AttemptHeaders::default())
        .await
        .unwrap();
    assert_eq!(r.status.code, GrpcCode::Ok, "{:?}", r.status);
    let dj = dependency.wait_for(1).await.unwrap();
    assert!(dj[0].tls && dj[0].created.is_some(), "{:?}", dj[0]);
}

#[tokio::test]
async fn a_missing_or_http1_dependency_is_a_grpc_status() {
    // Nothing listens on the port of a server that was started and stopped.
    let gone = FaultServer::builder().start().await.unwrap();
    let addr = gone.addr();
    gone.shutdown().await;
    let proxy = FaultServer::builder()
        .upstream(&format!("grpc://{addr}"))
        .start()
        .await
        .unwrap();
    let mut c = Client::connect(proxy.addr()).await;
    let create = orders_request("CreateOrder", r#"{"requestId":"x","sku":"A"}"#);
    let (_, r) = c
        .call(CREATE, create.clone(), &[], AttemptHeaders::default())
        .await
        .unwrap();
    assert_eq!(
        (r.status.code, r.trailers_only),
        (GrpcCode::Unavailable, true)
    );
    assert!(
        r.status.message.contains("could not be reached"),
        "{:?}",
        r.status
    );
    let j = proxy.wait_for(1).await.unwrap();
    assert_eq!(
        (j[0].outcome, j[0].forwarded),
        (Outcome::UpstreamError, true)
    );

    // An http:// upstream cannot carry a gRPC call: said so, in gRPC.
    let http = FaultServer::builder().start().await.unwrap();
    let proxy = FaultServer::builder()
        .upstream(&http.url())
        .start()
        .await
        .unwrap();
    let mut c = Client::connect(proxy.addr()).await;
    let (_, r) = c
        .call(CREATE, create, &[], AttemptHeaders::default())
        .await
        .unwrap();
    assert_eq!(r.status.code, GrpcCode::Unavailable);
    assert!(r.status.message.contains("grpc://"), "{:?}", r.status);
}

#[tokio::test]
async fn an_answer_over_the_memory_budget_is_refused_with_pushback() {
    // The dependency's answer does not fit the proxy's response memory.
    let dependency = FaultServer::builder()
        .grpc(
            fault_server::GrpcConfig::default()
                .proto(proto_file().path())
                .response(
                    "big.v1.Big/Get",
                    serde_json::json!({"blob": "A".repeat(200_000)}),
                ),
        )
        .start()
        .await
        .unwrap();
    let proxy = FaultServer::builder()
        .upstream(&format!("grpc://{}", dependency.addr()))
        .limits(LimitsConfig::default().response_memory(64 << 10))
        .start()
        .await
        .unwrap();
    let mut c = Client::connect(proxy.addr()).await;
    let (_, r) = c
        .call(
            "big.v1.Big/Get",
            bytes::Bytes::new(),
            &[],
            AttemptHeaders::default(),
        )
        .await
        .unwrap();
    assert_eq!(r.status.code, GrpcCode::Unavailable, "{:?}", r.status);
    assert_eq!(
        r.pushback,
        Some(retry_policy::grpc::Pushback::After(Duration::from_secs(1)))
    );
    let j = proxy.wait_for(1).await.unwrap();
    assert_eq!(
        (j[0].outcome, j[0].pushback_ms),
        (Outcome::UpstreamError, Some(1000))
    );
}

/// A service whose answer is big.
fn proto_file() -> tempfile::NamedTempFile {
    let f = tempfile::Builder::new()
        .suffix(".proto")
        .tempfile()
        .unwrap();
    std::fs::write(
        f.path(),
        "syntax = \"proto3\";\npackage big.v1;\nservice Big { rpc Get(Empty) returns (Blob); }\nmessage Empty {}\nmessage Blob { string blob = 1; }\n",
    )
    .unwrap();
    f
}

#[tokio::test]
async fn calls_share_at_most_max_connections_to_the_dependency() {
    let dependency = FaultServer::builder()
        .rule(RuleConfig::new(FaultConfig::delay(Duration::from_millis(
            200,
        ))))
        .start()
        .await
        .unwrap();
    let up =
        UpstreamConfig::new(UpstreamUrl::parse(&format!("grpc://{}", dependency.addr())).unwrap())
            .max_connections(1);
    let proxy = FaultServer::builder()
        .upstream_config(up)
        .start()
        .await
        .unwrap();
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..20 {
        let addr = proxy.addr();
        calls.spawn(async move {
            let mut c = Client::connect(addr).await;
            let get = orders_request("GetOrder", &format!(r#"{{"id":"o-{i}"}}"#));
            c.call(GET, get, &[], AttemptHeaders::default())
                .await
                .unwrap()
                .1
        });
    }
    while let Some(r) = calls.join_next().await {
        let r = r.unwrap();
        assert_eq!(r.status.code, GrpcCode::NotFound, "{:?}", r.status);
    }
    let dj = dependency.wait_for(20).await.unwrap();
    let conns: std::collections::BTreeSet<u64> = dj.iter().map(|e| e.conn_id).collect();
    assert_eq!(
        conns.len(),
        1,
        "20 concurrent calls, one connection: {conns:?}"
    );
}
