//! The client transport (`harness::http::Conn`) against the fault server: what each socket-level
//! fault is counted as, and that a connection a fault broke is replaced for the next request.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use fault_server::{Config, FaultServer, ServerOptions};
use harness::http::{AttemptError, Conn, ErrorKind, Outgoing, Reply, Target};
use http::{HeaderMap, Method};

const FAULTS: &str = r#"
rules:
  - match: { path: /fault/503 }
    fault: { status: { code: 503, retry_after: 1 } }
  - match: { path: /fault/hang }
    fault: { hang: { cap: 5s } }
  - match: { path: /fault/drop }
    fault: drop
  - match: { path: /fault/reset }
    fault: reset
  - match: { path: /fault/bad-status-line }
    fault: { malformed: { kind: bad-status-line } }
  - match: { path: /fault/truncated-body }
    fault: { malformed: { kind: truncated-body } }
  - match: { path: /fault/bad-header }
    fault: { malformed: { kind: bad-header } }
  - match: { path: /fault/partial-headers }
    fault: { malformed: { kind: partial-headers } }
"#;

async fn server() -> FaultServer {
    let cfg = Config::from_yaml(FAULTS, "test").expect("test config is valid");
    FaultServer::start(cfg, ServerOptions::default())
        .await
        .expect("fault server starts")
}

fn get(path: &str) -> Outgoing {
    Outgoing {
        method: Method::GET,
        uri: path.to_string(),
        headers: HeaderMap::new(),
        body: Bytes::new(),
    }
}

async fn send(conn: &mut Conn, path: &str, timeout: Duration) -> Result<Reply, AttemptError> {
    conn.send(get(path), timeout).await
}

#[tokio::test]
async fn each_fault_is_counted_as_its_kind_and_the_next_request_succeeds() {
    let s = server().await;
    let target = Arc::new(Target::parse(&s.url()).expect("server URL parses"));
    let mut conn = Conn::new(target);
    let cases = [
        ("/fault/drop", ErrorKind::Closed),
        ("/fault/reset", ErrorKind::Reset),
        ("/fault/hang", ErrorKind::Timeout),
        ("/fault/bad-status-line", ErrorKind::Malformed),
        ("/fault/truncated-body", ErrorKind::Closed),
        ("/fault/bad-header", ErrorKind::Malformed),
        ("/fault/partial-headers", ErrorKind::Closed),
    ];
    for (path, kind) in cases {
        let err = send(&mut conn, path, Duration::from_millis(300))
            .await
            .expect_err(path);
        eprintln!("{path}: {err}");
        assert_eq!(err.kind, kind, "{path}: {err}");
        let ok = send(&mut conn, "/after", Duration::from_secs(5))
            .await
            .unwrap_or_else(|e| panic!("request after {path}: {e}"));
        assert_eq!(ok.status.as_u16(), 200, "after {path}");
        assert_eq!(&ok.body[..], b"ok\n");
    }
    let r = send(&mut conn, "/fault/503", Duration::from_secs(5))
        .await
        .expect("a status fault is a response");
    assert_eq!(r.status.as_u16(), 503);
    assert_eq!(r.retry_after(), Some(Duration::from_secs(1)));
    s.shutdown().await;
}
