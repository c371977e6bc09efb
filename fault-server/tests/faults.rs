//! Every fault, as a real client sees it over a real socket.

mod common;

use std::time::{Duration, Instant};

use common::{chain, journal, start};
use history::Outcome;

const CONFIG: &str = r#"
seed: 3
rules:
  - id: s503
    match: { path: /fault/503 }
    fault: { status: { code: 503, retry_after: 1 } }
  - id: s503-date
    match: { path: /fault/503-date }
    fault: { status: { code: 503, retry_after_date: 30s } }
  - id: s400
    match: { path: /fault/400 }
    fault: { status: { code: 400, body: "nope\n", headers: { x-why: validation } } }
  - id: hang
    match: { path: /fault/hang }
    fault: { hang: { cap: 20s } }
  - id: short-hang
    match: { path: /fault/short-hang }
    fault: { hang: { cap: 200ms } }
  - id: drop
    match: { path: /fault/drop }
    fault: drop
  - id: drop-order
    match: { path: /orders, method: POST, headers: { x-lose-response: "yes" } }
    fault: drop
  - id: reset
    match: { path: /fault/reset }
    fault: reset
  - id: bad-status
    match: { path: /fault/malformed }
    fault: malformed
  - id: truncated
    match: { path: /fault/truncated }
    fault: { malformed: { kind: truncated-body } }
  - id: bad-header
    match: { path: /fault/bad-header }
    fault: { malformed: { kind: bad-header } }
  - id: partial
    match: { path: /fault/partial-headers }
    fault: { malformed: { kind: partial-headers } }
  - id: delay
    match: { path: /fault/delay }
    fault: { delay: 200ms }
"#;

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

#[tokio::test]
async fn status_faults_carry_code_headers_and_body() {
    let s = start(CONFIG).await;
    let c = client();
    let r = c
        .get(format!("{}/fault/503", s.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    let r = c
        .get(format!("{}/fault/503-date", s.url()))
        .send()
        .await
        .unwrap();
    let date = r.headers()["retry-after"].to_str().unwrap().to_string();
    let when = httpdate::parse_http_date(&date).expect("Retry-After is an HTTP-date");
    let ahead = when.duration_since(std::time::SystemTime::now()).unwrap();
    assert!(
        ahead > Duration::from_secs(25) && ahead <= Duration::from_secs(31),
        "{ahead:?}"
    );
    let r = c
        .get(format!("{}/fault/400", s.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.headers()["x-why"], "validation");
    assert_eq!(r.text().await.unwrap(), "nope\n");
    let j = journal(&s).await;
    assert_eq!(
        j.iter().map(|e| e.status).collect::<Vec<_>>(),
        [Some(503), Some(503), Some(400)]
    );
    assert!(j
        .iter()
        .all(|e| e.fault.as_deref() == Some("status") && e.outcome == Outcome::Responded));
}

#[tokio::test]
async fn hang_makes_the_client_timeout_fire() {
    let s = start(CONFIG).await;
    let c = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let t = Instant::now();
    let before = s.now_us();
    let err = c
        .get(format!("{}/fault/hang", s.url()))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{}", chain(&err));
    assert!(t.elapsed() < Duration::from_secs(5));
    drop(c);
    let j = journal(&s).await;
    assert_eq!(j[0].fault.as_deref(), Some("hang"));
    assert_eq!(
        j[0].outcome,
        Outcome::ClientClosed,
        "the client gave up first"
    );
    assert_eq!(j[0].status, None);
    // The client gave up 300 ms after it started, which was after `before`: the server held
    // the connection at least until then.
    assert!(
        j[0].t_done_us >= before + 300_000,
        "held only until {} µs after the client started",
        j[0].t_done_us - before
    );

    // When the client waits longer than the cap, the server lets go: outcome `hung`.
    let c = client();
    let err = c
        .get(format!("{}/fault/short-hang", s.url()))
        .send()
        .await
        .unwrap_err();
    assert!(
        !err.is_timeout(),
        "the cap closed it, not the client: {}",
        chain(&err)
    );
    let j = journal(&s).await;
    assert_eq!(j[1].outcome, Outcome::Hung);
}

#[tokio::test]
async fn drop_closes_with_no_response_after_creating_the_order() {
    let s = start(CONFIG).await;
    let c = client();
    let err = c
        .get(format!("{}/fault/drop", s.url()))
        .send()
        .await
        .unwrap_err();
    let msg = chain(&err);
    assert!(
        msg.contains("connection closed before message completed"),
        "{msg}"
    );

    let err = c
        .post(format!("{}/orders", s.url()))
        .header("idempotency-key", "lost-1")
        .header("x-lose-response", "yes")
        .json(&serde_json::json!({"sku": "A1"}))
        .send()
        .await
        .unwrap_err();
    assert!(chain(&err).contains("connection closed before message completed"));
    assert_eq!(
        s.orders().count_for_key("lost-1").await.unwrap(),
        1,
        "the order was created"
    );
    // The retry with the same key replays it instead of creating a second one.
    let r = c
        .post(format!("{}/orders", s.url()))
        .header("idempotency-key", "lost-1")
        .json(&serde_json::json!({"sku": "A1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["idempotent-replayed"], "true");
    assert_eq!(s.orders().count_for_key("lost-1").await.unwrap(), 1);
    let j = journal(&s).await;
    assert_eq!(j[1].outcome, Outcome::Dropped);
    assert_eq!(j[1].status, None, "no status was sent");
    assert!(
        j[1].created.is_some(),
        "the journal knows the dropped request created an order"
    );
    assert_eq!(j[2].created, None);
    assert!(j[2].replayed);
}

#[tokio::test]
async fn reset_is_a_tcp_rst() {
    let s = start(CONFIG).await;
    let err = client()
        .get(format!("{}/fault/reset", s.url()))
        .send()
        .await
        .unwrap_err();
    let msg = chain(&err).to_lowercase();
    assert!(msg.contains("reset"), "{msg}");
    // Straight from the socket too: reading gives ECONNRESET, not a clean EOF.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(s.addr()).await.unwrap();
    conn.write_all(b"GET /fault/reset HTTP/1.1\r\nhost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let e = conn.read_to_end(&mut buf).await.unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset);
    let j = journal(&s).await;
    assert!(j
        .iter()
        .all(|e| e.outcome == Outcome::Reset && e.status.is_none()));
}

#[tokio::test]
async fn malformed_responses_fail_to_parse() {
    let s = start(CONFIG).await;
    let c = client();
    for path in [
        "/fault/malformed",
        "/fault/bad-header",
        "/fault/partial-headers",
    ] {
        let err = c
            .get(format!("{}{path}", s.url()))
            .send()
            .await
            .unwrap_err();
        assert!(
            !err.is_timeout() && !err.is_connect(),
            "{path}: {}",
            chain(&err)
        );
    }
    // A truncated body parses as far as the headers, then the body read fails.
    let r = c
        .get(format!("{}/fault/truncated", s.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.is_err());
    let j = journal(&s).await;
    assert_eq!(j.len(), 4);
    assert!(j.iter().all(|e| e.fault.as_deref() == Some("malformed")));
    assert_eq!(j[3].status, Some(200));
}

#[tokio::test]
async fn delay_then_normal_response() {
    let s = start(CONFIG).await;
    let t = Instant::now();
    let r = client()
        .get(format!("{}/fault/delay", s.url()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(200) && took < Duration::from_secs(2),
        "{took:?}"
    );
    let j = journal(&s).await;
    assert!(j[0].t_done_us - j[0].t_recv_us >= 200_000);
}

#[tokio::test]
async fn keep_alive_does_not_leak_a_fault_into_the_next_request() {
    let s = start(CONFIG).await;
    let c = client();
    for _ in 0..3 {
        assert_eq!(
            c.get(format!("{}/fault/503", s.url()))
                .send()
                .await
                .unwrap()
                .status(),
            503
        );
        assert_eq!(
            c.get(format!("{}/plain", s.url()))
                .send()
                .await
                .unwrap()
                .status(),
            200
        );
    }
    // After a socket-level fault the pool's connection is gone; the next request still works.
    assert!(c
        .get(format!("{}/fault/drop", s.url()))
        .send()
        .await
        .is_err());
    assert_eq!(
        c.get(format!("{}/plain", s.url()))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let j = journal(&s).await;
    let conns: std::collections::HashSet<u64> = j[..6].iter().map(|e| e.conn_id).collect();
    assert_eq!(
        conns.len(),
        1,
        "the six requests shared one keep-alive connection"
    );
    assert_ne!(
        j[7].conn_id, j[6].conn_id,
        "a dropped connection is not reused"
    );
    assert_eq!(j[7].fault, None);
}

#[tokio::test]
async fn curl_sees_the_same_faults() {
    if std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("skipping: curl is not installed");
        return;
    }
    let s = start(CONFIG).await;
    let url = s.url();
    let run = move |path: &'static str| {
        let url = url.clone();
        // Only the hang needs curl to give up; everything else answers, however busy the machine.
        let max_time = if path == "/fault/hang" { "1" } else { "30" };
        async move {
            tokio::task::spawn_blocking(move || {
                let out = std::process::Command::new("curl")
                    .args([
                        "-sS",
                        "-m",
                        max_time,
                        "-o",
                        "/dev/null",
                        "-w",
                        "%{http_code}",
                        &format!("{url}{path}"),
                    ])
                    .output()
                    .unwrap();
                (
                    out.status.code(),
                    String::from_utf8_lossy(&out.stdout).to_string(),
                    String::from_utf8_lossy(&out.stderr).to_string(),
                )
            })
            .await
            .unwrap()
        }
    };
    assert_eq!(run("/fault/503").await.1, "503");
    let (code, _, err) = run("/fault/drop").await;
    assert_eq!(code, Some(52), "{err}"); // Empty reply from server
    let (code, _, err) = run("/fault/reset").await;
    assert_eq!(code, Some(56), "{err}"); // Recv failure: Connection reset by peer
    let (code, _, err) = run("/fault/hang").await;
    assert_eq!(code, Some(28), "{err}"); // Operation timed out
    let (code, _, err) = run("/fault/malformed").await;
    assert_ne!(code, Some(0), "{err}");
}
