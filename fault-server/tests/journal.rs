//! Nothing is lost: every request the server saw is in the journal, in arrival order, with the
//! right outcome — dropped, reset and hung ones included, under concurrent load.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use fault_server::{Config, FaultServer, ServerOptions};
use history::Outcome;

const CONFIG: &str = r#"
rules:
  - id: drop
    match: { path: /drop }
    fault: drop
  - id: reset
    match: { path: /reset }
    fault: reset
  - id: hang
    match: { path: /hang }
    fault: { hang: { cap: 60s } }
  - id: busy
    match: { path: /busy }
    fault: { status: 503 }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_is_journaled_with_its_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("journal.jsonl");
    let cfg = Config::from_yaml(CONFIG, "test").unwrap();
    let s = FaultServer::start(
        cfg,
        ServerOptions {
            journal_file: Some(file.clone()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    // Only the hung requests time out, and only long after they reached the server, however
    // loaded the machine: every request the client sends is one the server sees.
    let client = reqwest::Client::new();
    let paths = [
        "/ok", "/busy", "/drop", "/reset", "/hang", "/ok", "/ok", "/busy",
    ];
    let n = 800;
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (c, url) = (
                client.clone(),
                format!("{}{}", s.url(), paths[i % paths.len()]),
            );
            tokio::spawn(async move {
                let mut req = c.get(&url).header("x-client-id", format!("c{i}"));
                if url.ends_with("/hang") {
                    req = req.timeout(Duration::from_secs(15));
                }
                req.send().await.map(|r| r.status().as_u16())
            })
        })
        .collect();
    for t in tasks {
        let _ = t.await.unwrap();
    }
    drop(client);
    let j = common::journal(&s).await;
    assert_eq!(j.len(), n, "exactly one entry per request");
    assert_eq!(
        j.iter().map(|e| e.seq).collect::<Vec<_>>(),
        (1..=n as u64).collect::<Vec<_>>()
    );
    assert!(
        j.windows(2).all(|w| w[0].t_recv_us <= w[1].t_recv_us),
        "arrival order"
    );
    let mut by_path: HashMap<&str, HashMap<Outcome, usize>> = HashMap::new();
    for e in &j {
        *by_path
            .entry(e.path.as_str())
            .or_default()
            .entry(e.outcome)
            .or_default() += 1;
    }
    assert_eq!(by_path["/ok"][&Outcome::Responded], 300);
    assert_eq!(by_path["/busy"][&Outcome::Responded], 200);
    assert_eq!(by_path["/drop"][&Outcome::Dropped], 100);
    assert_eq!(by_path["/reset"][&Outcome::Reset], 100);
    assert_eq!(
        by_path["/hang"][&Outcome::ClientClosed],
        100,
        "hung until each client gave up"
    );
    let clients: std::collections::HashSet<_> =
        j.iter().filter_map(|e| e.client_id.clone()).collect();
    assert_eq!(clients.len(), n);
    // The file holds the same lines as the endpoint.
    let url = format!("{}/__harness/journal", s.url());
    let served = reqwest::get(&url).await.unwrap().text().await.unwrap();
    s.shutdown().await;
    let written = std::fs::read_to_string(&file).unwrap();
    assert_eq!(written, served);
    assert_eq!(written.lines().count(), n);
}

#[tokio::test]
async fn journal_since_and_fields() {
    let s = common::start("{}").await;
    let c = reqwest::Client::new();
    for i in 0..5 {
        c.post(format!("{}/thing?i={i}", s.url()))
            .header("x-request-id", format!("r{i}"))
            .header("x-deadline", "1700000000000")
            .header("amz-sdk-request", "attempt=1; max=3")
            .header("x-not-captured", "secret")
            .body("hello")
            .send()
            .await
            .unwrap();
    }
    assert!(s.settle(Duration::from_secs(5)).await);
    let text = c
        .get(format!("{}/__harness/journal?since=3", s.url()))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    let e = &lines[0];
    assert_eq!(e["seq"], 4);
    assert_eq!(e["query"], "i=3");
    assert_eq!(e["headers"]["x-request-id"], "r3");
    assert_eq!(e["headers"]["x-deadline"], "1700000000000");
    assert_eq!(e["headers"]["amz-sdk-request"], "attempt=1; max=3");
    assert!(e["headers"].get("x-not-captured").is_none());
    assert_eq!(e["body_len"], 5);
    assert_eq!(
        e["body_sha256"],
        "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
    );
    for field in [
        "t_recv_us",
        "t_done_us",
        "unix_ms",
        "method",
        "path",
        "idempotency_key",
        "client_id",
        "conn_id",
        "rule",
        "fault",
        "status",
        "outcome",
        "created",
    ] {
        assert!(e.get(field).is_some(), "missing {field}");
    }
    // Control requests are never journaled.
    assert_eq!(s.journal().written(), 5);
}

#[tokio::test]
async fn a_replica_names_itself_and_stamps_the_wall_clock_in_microseconds() {
    let unix_us = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as u64
    };
    for replica in [None, Some("replica-a")] {
        let s = FaultServer::start(
            Config::from_yaml("{}", "test").unwrap(),
            ServerOptions {
                replica_id: replica.map(str::to_string),
                ..Default::default()
            },
        )
        .await
        .unwrap();
        let before = unix_us();
        let c = tokio::net::TcpStream::connect(s.addr()).await.unwrap();
        common::exchange(
            c,
            b"GET /x HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
        .await
        .unwrap();
        let after = unix_us();
        let j = common::journal(&s).await;
        assert_eq!(j.len(), 1);
        let e = &j[0];
        assert_eq!(e.replica.as_deref(), replica);
        assert!(
            (before..=after).contains(&e.unix_us),
            "{} not in {before}..={after}",
            e.unix_us
        );
        assert_eq!(e.unix_ms, e.unix_us / 1000);
        let line = serde_json::to_string(e).unwrap();
        assert_eq!(line.contains("\"replica\""), replica.is_some(), "{line}");
    }
}

#[tokio::test]
async fn the_journal_records_the_response_headers_a_client_acts_on() {
    let s = common::start(
        r#"
capture_response_headers: [X-Trace, "content-type"]
rules:
  - id: shed
    match: { path: /shed }
    fault: { status: { code: 503, retry_after: 7, headers: { x-trace: t-1 } } }
  - id: shed-until
    match: { path: /until }
    fault: { status: { code: 429, retry_after_date: 30s } }
"#,
    )
    .await;
    let send = |bytes: Vec<u8>| {
        let addr = s.addr();
        async move {
            let c = tokio::net::TcpStream::connect(addr).await.unwrap();
            common::exchange(c, &bytes).await.unwrap()
        }
    };
    let create = || common::request_bytes("POST", "/orders", Some("k-1"), r#"{"sku":"a"}"#);
    let created = send(create()).await;
    assert_eq!(created.status, 201);
    let replayed = send(create()).await;
    assert_eq!(replayed.status, 200);
    send(common::request_bytes("GET", "/shed", None, "")).await;
    send(common::request_bytes("GET", "/until", None, "")).await;
    send(common::request_bytes("GET", "/plain", None, "")).await;
    let j = common::journal(&s).await;
    let h = |i: usize, name: &str| j[i].response_header(name).map(str::to_string);
    let location = h(0, "location").expect("a creation's Location");
    assert!(location.starts_with("/orders/"), "{location}");
    assert_eq!(h(1, "idempotent-replayed").as_deref(), Some("true"));
    assert_eq!(h(2, "retry-after").as_deref(), Some("7"));
    assert_eq!(
        h(2, "x-trace").as_deref(),
        Some("t-1"),
        "captured by config"
    );
    assert_eq!(
        h(2, "content-type").as_deref(),
        Some("application/problem+json")
    );
    assert!(h(3, "retry-after").unwrap().ends_with(" GMT"));
    // Only what the response had: here the configured content-type.
    let plain = j[4]
        .response_headers
        .as_ref()
        .expect("content-type was captured");
    assert_eq!(plain.keys().collect::<Vec<_>>(), vec!["content-type"]);
    // A bad name in the config is refused with its place.
    let err =
        fault_server::Config::from_yaml("capture_response_headers: [\"bad name\"]\n", "c.yaml")
            .unwrap_err()
            .to_string();
    assert!(err.contains("capture_response_headers[0]"), "{err}");
}

/// `t_wire_us` is when the request's last bytes reached the host (the kernel's receive stamp):
/// no earlier than the client sent its last byte, held back after the rest, and no later than the
/// server had read the body. (Bounds that causality gives, whatever the scheduling.)
#[cfg(target_os = "linux")]
#[tokio::test]
async fn the_kernel_stamps_when_the_last_byte_arrived() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let unix_us = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_micros() as i64
    };
    let s = common::start("{}").await;
    let addr = s.url().trim_start_matches("http://").to_string();
    let mut c = tokio::net::TcpStream::connect(&addr).await.unwrap();
    c.set_nodelay(true).unwrap();
    c.write_all(
        b"POST /thing HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\nconnection: close\r\n\r\nhell",
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let last_sent = unix_us();
    c.write_all(b"o").await.unwrap();
    let mut out = Vec::new();
    c.read_to_end(&mut out).await.unwrap();
    assert!(
        out.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&out)
    );
    assert!(s.settle(Duration::from_secs(5)).await);
    let e = &s.journal().entries()[0];
    let wire = e.t_wire_us.expect("a kernel receive timestamp");
    let body = e.t_body_us.expect("a body");
    assert!(wire <= body, "{wire} > {body}");
    // On the wall clock, through the entry's own pair of stamps (its arrival on both clocks).
    let wire_unix = e.unix_us as i64 - e.t_recv_us as i64 + wire as i64;
    assert!(
        wire_unix >= last_sent - 1_000,
        "stamped {} µs before the last byte left",
        last_sent - wire_unix
    );
}

#[tokio::test]
async fn a_temporary_journal_is_removed_when_its_server_is_dropped() {
    // Served on threads of their own, the connections may hold the journal past the server:
    // the file goes with the server, whatever they hold.
    for threads in [None, Some(2)] {
        let s = FaultServer::start(
            Config::default(),
            ServerOptions {
                threads,
                ..ServerOptions::default()
            },
        )
        .await
        .expect("server starts");
        let ok = common::send(
            s.addr(),
            b"GET /x HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
        )
        .await;
        assert_eq!(ok.status, 200);
        let path = s.journal().path().to_path_buf();
        assert!(path.exists(), "{}", path.display());
        drop(s);
        assert!(
            !path.exists(),
            "threads {threads:?}: {} is left",
            path.display()
        );
    }
    // A journal the user named is theirs: kept.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let named = dir.path().join("kept.jsonl");
    let s = FaultServer::start(
        Config::default(),
        ServerOptions {
            journal_file: Some(named.clone()),
            ..ServerOptions::default()
        },
    )
    .await
    .expect("server starts");
    drop(s);
    assert!(named.exists());
}
