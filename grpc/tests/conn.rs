//! The transport's own HTTP/2 connection as a gRPC exchange: calls made with
//! [`grpc::call::attempt`] over `transport::Conn` (a `grpc://` target) to a server on a real
//! socket — the `h2` crate's, answering as a gRPC server does: Response-Headers, a message and
//! Trailers; Trailers-Only with pushback; headers then a failing status (a committed call).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use grpc::call::{attempt, AttemptHeaders, CallRequest};
use grpc::frame::{self, Encoding, DEFAULT_MAX_MESSAGE};
use grpc::metadata::Metadata;
use grpc::Code;
use http::{HeaderMap, HeaderValue, Response};
use retry_policy::grpc::Pushback;
use transport::{Conn, Connect};

/// Serves h2c on 127.0.0.1:0; each request's path picks the answer, and what it carried comes
/// back in the reply's `x-seen-*` headers.
async fn server() -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(tcp).await else {
                    return;
                };
                while let Some(Ok((req, mut respond))) = conn.accept().await {
                    tokio::spawn(async move {
                        let (parts, mut body) = req.into_parts();
                        let mut got = Vec::new();
                        while let Some(Ok(chunk)) = body.data().await {
                            let _ = body.flow_control().release_capacity(chunk.len());
                            got.extend_from_slice(&chunk);
                        }
                        let seen = |name: &str| {
                            parts
                                .headers
                                .get(name)
                                .cloned()
                                .unwrap_or(HeaderValue::from_static("-"))
                        };
                        let mut head = Response::builder()
                            .status(200)
                            .header("content-type", "application/grpc")
                            .header("x-seen-key", seen("idempotency-key"))
                            .header("x-seen-te", seen("te"))
                            .header("x-seen-previous", seen("grpc-previous-rpc-attempts"));
                        match parts.uri.path() {
                            "/t.S/Echo" => {
                                let mut s = respond
                                    .send_response(head.body(()).unwrap(), false)
                                    .unwrap();
                                s.send_data(Bytes::from(got), false).unwrap();
                                let mut t = HeaderMap::new();
                                t.insert("grpc-status", HeaderValue::from_static("0"));
                                s.send_trailers(t).unwrap();
                            }
                            "/t.S/Busy" => {
                                head = head
                                    .header("grpc-status", "14")
                                    .header("grpc-message", "busy")
                                    .header("grpc-retry-pushback-ms", "250");
                                respond.send_response(head.body(()).unwrap(), true).unwrap();
                            }
                            _ => {
                                let mut s = respond
                                    .send_response(head.body(()).unwrap(), false)
                                    .unwrap();
                                let mut t = HeaderMap::new();
                                t.insert("grpc-status", HeaderValue::from_static("14"));
                                s.send_trailers(t).unwrap();
                            }
                        }
                    });
                }
            });
        }
    });
    addr
}

fn call(path: &str) -> CallRequest {
    let mut metadata = Metadata::new();
    metadata.insert("idempotency-key", "k-7").unwrap();
    CallRequest {
        path: path.into(),
        message: Bytes::from_static(b"\x0a\x03abc"),
        metadata,
        encoding: None,
        user_agent: None,
    }
}

#[tokio::test]
async fn calls_go_over_the_transports_http2_with_their_trailers() {
    let addr = server().await;
    let target = grpc::target::target(&format!("grpc://{addr}"), &Connect::default()).unwrap();
    let mut conn = Conn::new(Arc::new(target));
    let limit = Duration::from_secs(30);
    let retry = AttemptHeaders {
        timeout: Some(Duration::from_secs(5)),
        previous_attempts: Some(2),
    };

    let r = attempt(
        &mut conn,
        &call("/t.S/Echo"),
        retry,
        limit,
        DEFAULT_MAX_MESSAGE,
    )
    .await;
    assert_eq!(r.status.code, Code::Ok, "{:?}", r.status);
    assert_eq!(r.messages, [Bytes::from_static(b"\x0a\x03abc")]);
    assert!(r.outcome().committed);
    assert_eq!(r.headers["x-seen-key"], "k-7");
    assert_eq!(r.headers["x-seen-te"], "trailers");
    assert_eq!(r.headers["x-seen-previous"], "2");
    assert_eq!(frame::encode(b"\x0a\x03abc", Encoding::Identity).len(), 10);

    let r = attempt(
        &mut conn,
        &call("/t.S/Busy"),
        AttemptHeaders::default(),
        limit,
        DEFAULT_MAX_MESSAGE,
    )
    .await;
    assert_eq!(r.status.code, Code::Unavailable);
    assert_eq!(r.status.message, "busy");
    assert!(r.trailers_only && !r.outcome().committed);
    assert_eq!(
        r.pushback,
        Some(Pushback::After(Duration::from_millis(250)))
    );

    let r = attempt(
        &mut conn,
        &call("/t.S/Late"),
        AttemptHeaders::default(),
        limit,
        DEFAULT_MAX_MESSAGE,
    )
    .await;
    assert_eq!(r.status.code, Code::Unavailable);
    assert!(
        !r.trailers_only && r.outcome().committed,
        "headers came first"
    );
}

#[tokio::test]
async fn no_server_is_unavailable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let target = grpc::target::target(&format!("grpc://{addr}"), &Connect::default()).unwrap();
    let mut conn = Conn::new(Arc::new(target));
    let r = attempt(
        &mut conn,
        &call("/t.S/Echo"),
        AttemptHeaders::default(),
        Duration::from_secs(30),
        DEFAULT_MAX_MESSAGE,
    )
    .await;
    assert_eq!(r.status.code, Code::Unavailable, "{:?}", r.status);
}
