//! Hostile clients against the real `fault-server` binary: a gigabyte body, slowloris, thousands
//! of idle connections, malformed heads and request smuggling. The server's memory stays under a
//! stated bound, health answers throughout, and every request it refused is in the journal with
//! outcome `rejected`, counted in its stats.
//!
//! Nothing here asserts how fast anything happens: waits are bounded loops on conditions, with
//! generous limits for a loaded machine.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::binary::{big_body_config, start};

/// Waits until `cond` holds, up to `limit`.
fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    cond()
}

fn rejected<'a>(j: &'a [serde_json::Value], reason: &str) -> Vec<&'a serde_json::Value> {
    j.iter()
        .filter(|e| e["outcome"] == "rejected" && e["rejected"] == reason)
        .collect()
}

/// The server's memory may grow by this much under any of the attacks below.
const RSS_GROWTH_BOUND_KB: u64 = 64 * 1024;

/// And by this much more per connection it holds: an idle connection costs its task and, once
/// hyper reads it, hyper's read buffer — 14 to 21 kB measured in a debug build, more or less of it
/// returned to the system when the connection ends, depending on when the allocator purges.
const RSS_PER_CONNECTION_KB: u64 = 32;

#[test]
fn a_gigabyte_body_is_refused_without_being_read() {
    let s = start("limits: { max_body: 1MiB }");
    let before = s.rss_kb();
    // Announced: refused on its head, before a byte of the body.
    let announced = s.request(
        b"POST /orders HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 1073741824\r\nidempotency-key: k1\r\n\r\n{",
    );
    assert!(announced.starts_with("HTTP/1.1 413"), "{announced}");
    // Chunked, never announced: refused once it passes the limit; the rest is never read.
    let mut c = TcpStream::connect(s.addr).expect("connect");
    c.set_write_timeout(Some(Duration::from_secs(10))).ok();
    let sent = upload_chunked(&mut c, 1024);
    assert!(
        sent < (1 << 30),
        "the server stopped reading long before 1 GiB ({sent} bytes)"
    );
    let growth = s.rss_kb().saturating_sub(before);
    assert!(growth < RSS_GROWTH_BOUND_KB, "RSS grew by {growth} kB");
    assert!(s.healthy());
    assert!(eventually(Duration::from_secs(20), || {
        s.stats()["by_outcome"]["rejected"] == 2
    }));
    let j = s.journal();
    let refused = rejected(&j, "body-too-large");
    assert_eq!(refused.len(), 2, "{j:#?}");
    assert!(refused.iter().all(|e| e["status"] == 413));
    assert_eq!(s.stats()["by_outcome"]["rejected"], 2);
}

/// Sends a chunked upload's head and `mib` MiB of chunks as fast as the server takes them; the
/// bytes of body written before the connection broke (or all of them).
fn upload_chunked(c: &mut TcpStream, mib: u64) -> u64 {
    c.write_all(b"POST /upload HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n")
        .expect("head");
    let chunk = vec![b'a'; 1 << 20];
    let mut sent = 0u64;
    while sent < (mib << 20) {
        let head = format!("{:x}\r\n", chunk.len());
        if c.write_all(head.as_bytes()).is_err()
            || c.write_all(&chunk).is_err()
            || c.write_all(b"\r\n").is_err()
        {
            break;
        }
        sent += chunk.len() as u64;
    }
    sent
}

#[test]
fn the_drain_after_a_413_takes_what_drain_bytes_says() {
    // Far more than the default 8 MiB is read and thrown away, and no more than that.
    let s = start("limits: { max_body: 1MiB, drain_bytes: 96MiB, drain_time: 60s }");
    let mut c = TcpStream::connect(s.addr).expect("connect");
    c.set_write_timeout(Some(Duration::from_secs(20))).ok();
    let sent = upload_chunked(&mut c, 512);
    assert!(sent >= 64 << 20, "drained past the default: {sent} bytes");
    assert!(
        sent < 256 << 20,
        "the drain ends at drain_bytes: {sent} bytes"
    );
    assert!(eventually(Duration::from_secs(20), || {
        rejected(&s.journal(), "body-too-large").len() == 1
    }));
}

#[test]
fn the_drain_after_a_413_lasts_what_drain_time_says() {
    // Longer than the default 5 s: a client still sending is read until then, not cut before.
    let s = start("limits: { max_body: 1MiB, drain_time: 8s }");
    let mut c = TcpStream::connect(s.addr).expect("connect");
    c.set_write_timeout(Some(Duration::from_secs(20))).ok();
    c.set_read_timeout(Some(Duration::from_secs(20))).ok();
    assert_eq!(upload_chunked(&mut c, 2), 2 << 20, "the first 2 MiB go in");
    let mut status = [0u8; 12];
    c.read_exact(&mut status).expect("the answer");
    assert_eq!(&status, b"HTTP/1.1 413");
    let refused_at = Instant::now();
    // Then a trickle: a small chunk every 100 ms, until the server stops taking them.
    let mut open_for = Duration::ZERO;
    while refused_at.elapsed() < Duration::from_secs(60) {
        if c.write_all(b"400\r\n").is_err()
            || c.write_all(&[b'a'; 1024]).is_err()
            || c.write_all(b"\r\n").is_err()
        {
            break;
        }
        open_for = refused_at.elapsed();
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        open_for >= Duration::from_secs(6),
        "drained for drain_time, not the default: {open_for:?}"
    );
    assert!(
        open_for < Duration::from_secs(20),
        "the drain ends, soon after drain_time: {open_for:?}"
    );
}

#[test]
fn slowloris_is_cut_at_the_header_timeout() {
    let s = start("limits: { header_timeout: 500ms }");
    let n = 200;
    let mut conns: Vec<TcpStream> = (0..n)
        .map(|_| {
            let mut c = TcpStream::connect(s.addr).expect("connect");
            c.write_all(b"GET / HTTP/1.1\r\nhost: x\r\nx-slow: ")
                .expect("a partial head");
            c
        })
        .collect();
    // Trickle a byte now and then, as slowloris does, until the server gives up on them.
    let cut = eventually(Duration::from_secs(30), || {
        conns.retain_mut(|c| c.write_all(b"a").is_ok());
        // A connection the server closed fails its next write (after the 408 was read).
        conns.is_empty()
    });
    assert!(cut, "{} slow connections still open", conns.len());
    assert!(s.healthy());
    assert!(eventually(Duration::from_secs(20), || {
        s.stats()["by_outcome"]["rejected"] == n
    }));
    let j = s.journal();
    let slow = rejected(&j, "header-timeout");
    assert_eq!(slow.len(), n, "every slow head is journaled: {}", j.len());
    assert!(slow.iter().all(|e| e["status"] == 408));
}

/// Descriptors this process may open (the soft limit), from `/proc/self/limits`.
fn open_files_limit() -> usize {
    std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| l.split_whitespace().nth(3))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(1024)
}

#[test]
fn idle_connections_are_bounded_and_health_answers() {
    for config in [
        "limits: { max_connections: 100, header_timeout: 2s }",
        // The default connection limit, which the server derives from its own descriptor limit.
        "limits: { header_timeout: 2s }",
    ] {
        idle_connections(config);
    }
}

fn idle_connections(config: &str) {
    let s = start(config);
    let before = s.rss_kb();
    // 5,000, or as many as this process may open beside what the test itself needs.
    let n = 5000.min(open_files_limit().saturating_sub(200));
    assert!(n >= 500, "too few descriptors to test with: {n}");
    let idle: Vec<TcpStream> = (0..n)
        .filter_map(|_| TcpStream::connect(s.addr).ok())
        .collect();
    assert!(idle.len() >= n * 9 / 10, "{} of {n} connected", idle.len());
    assert!(
        s.healthy(),
        "health answers beside {} idle connections",
        idle.len()
    );
    // Over the limit, a request is answered 503 and journaled.
    // (Or nothing, when this thread was held back past the server's wait for a request line.)
    let over = s.get("/");
    assert!(
        over.starts_with("HTTP/1.1 503") || over.starts_with("HTTP/1.0 200") || over.is_empty(),
        "{over}"
    );
    // The idle ones are closed at the header timeout.
    let closed = eventually(Duration::from_secs(30), || {
        s.get("/").starts_with("HTTP/1.0 200")
    });
    assert!(closed, "the idle connections were not closed");
    let growth = s.rss_kb().saturating_sub(before);
    let bound = RSS_GROWTH_BOUND_KB + RSS_PER_CONNECTION_KB * idle.len() as u64;
    assert!(
        growth < bound,
        "RSS grew by {growth} kB with {} connections held (bound {bound} kB)",
        idle.len()
    );
    let j = s.journal();
    assert!(
        j.iter()
            .all(|e| e["outcome"] != "rejected" || e["rejected"] == "connection-limit"),
        "idle connections are not requests: {j:#?}"
    );
    drop(idle);
}

#[test]
fn malformed_heads_and_smuggling_are_refused_and_journaled() {
    let s = start("{}");
    let cases: [(&[u8], &str); 3] = [
        (b"GARBAGE\r\n\r\n", "HTTP/1.1 400"),
        (
            b"GET / HTTP/1.1\r\nhost: x\r\nbad header\r\n\r\n",
            "HTTP/1.1 400",
        ),
        // Obsolete line folding.
        (
            b"GET / HTTP/1.1\r\nhost: x\r\nx-a: 1\r\n  folded\r\n\r\n",
            "HTTP/1.1 400",
        ),
    ];
    for (raw, expected) in cases {
        let got = s.request(raw);
        assert!(
            got.starts_with(expected),
            "{:?} → {got:?}",
            String::from_utf8_lossy(raw)
        );
    }
    // Content-Length and Transfer-Encoding together, the smuggling classic: the chunked framing
    // wins (RFC 9112 §6.3), the connection closes after the answer, and what hides behind the
    // body is never read as a request.
    let smuggle = s.request(
        b"POST /orders HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\ntransfer-encoding: chunked\r\nidempotency-key: s1\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nhost: x\r\n\r\n",
    );
    assert!(
        smuggle.starts_with("HTTP/1.1 400"),
        "the empty body is no order: {smuggle:?}"
    );
    assert_eq!(
        smuggle.matches("HTTP/1.1 ").count(),
        1,
        "one answer: {smuggle:?}"
    );
    let huge = format!(
        "GET / HTTP/1.1\r\nhost: x\r\nx-big: {}\r\n\r\n",
        "a".repeat(200_000)
    );
    let got = s.request(huge.as_bytes());
    assert!(got.starts_with("HTTP/1.1 431"), "{got:?}");
    // A head refused while parsing is journaled once hyper has answered it, so the answer can
    // reach the client a moment before the entry reaches the journal.
    assert!(eventually(Duration::from_secs(20), || {
        s.stats()["by_outcome"]["rejected"] == 4
    }));
    let j = s.journal();
    assert!(
        j.iter().all(|e| e["path"] != "/smuggled"),
        "nothing smuggled through: {j:#?}"
    );
    let bad = rejected(&j, "bad-request");
    let summary: Vec<String> = j
        .iter()
        .map(|e| {
            format!(
                "{} {} {} {}",
                e["method"], e["path"], e["outcome"], e["rejected"]
            )
        })
        .collect();
    assert_eq!(bad.len(), 3, "{summary:#?}");
    assert_eq!(
        j.iter().filter(|e| e["path"] == "/orders").count(),
        1,
        "{summary:#?}"
    );
    assert_eq!(rejected(&j, "head-too-large").len(), 1);
    assert_eq!(s.stats()["by_outcome"]["rejected"], 4);
    assert!(s.healthy());
}

#[test]
fn the_control_api_refuses_other_sites_and_hosts() {
    let s = start("{}");
    let post = |headers: &str| {
        s.request(
            format!("POST /__harness/reset HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: text/plain\r\ncontent-length: 0\r\nconnection: close\r\n{headers}\r\n").as_bytes(),
        )
    };
    assert!(post("origin: http://evil.example\r\n").starts_with("HTTP/1.1 403"));
    assert!(post("sec-fetch-site: cross-site\r\n").starts_with("HTTP/1.1 403"));
    assert!(
        post("").starts_with("HTTP/1.1 200"),
        "the harness's own call"
    );
    assert!(post("origin: http://localhost:3000\r\n").starts_with("HTTP/1.1 200"));
    let rebinding = s.request(
        b"PUT /__harness/schedule HTTP/1.1\r\nhost: attacker.example\r\ncontent-length: 9\r\nconnection: close\r\n\r\nrules: []",
    );
    assert!(rebinding.starts_with("HTTP/1.1 403"), "{rebinding}");
    // A deeply nested schedule is refused at once, and nothing stalls.
    let deep = format!("rules: {}{}", "[".repeat(100_000), "]".repeat(100_000));
    let started = Instant::now();
    let refused = s.request(
        format!(
            "PUT /__harness/schedule HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{deep}",
            deep.len()
        )
        .as_bytes(),
    );
    assert!(refused.starts_with("HTTP/1.1 400"), "{refused}");
    assert!(refused.contains("nested more than"), "{refused}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[test]
fn a_public_address_needs_a_control_token() {
    let out = Command::new(env!("CARGO_BIN_EXE_fault-server"))
        .args(["--bind", "0.0.0.0:0"])
        .env_remove("FAULT_SERVER_CONTROL_TOKEN")
        .output()
        .expect("fault-server runs");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("control token"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn a_slow_body_is_cut_at_the_body_timeout() {
    let s = start("limits: { body_timeout: 300ms }");
    let mut c = TcpStream::connect(s.addr).expect("connect");
    c.set_read_timeout(Some(Duration::from_secs(20))).ok();
    c.write_all(b"POST /upload HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\na")
        .expect("a head and a byte of the body");
    let mut out = Vec::new();
    let _ = c.read_to_end(&mut out);
    let out = String::from_utf8_lossy(&out);
    assert!(out.starts_with("HTTP/1.1 408"), "{out}");
    assert!(eventually(Duration::from_secs(20), || {
        s.stats()["by_outcome"]["rejected"] == 1
    }));
    let j = s.journal();
    let slow = rejected(&j, "body-timeout");
    assert_eq!(slow.len(), 1, "{j:#?}");
    assert_eq!(slow[0]["status"], 408);
    assert_eq!(slow[0]["path"], "/upload");
}

#[test]
fn bodies_held_at_once_are_bounded_by_the_body_memory() {
    // Room for four bodies of 1 MiB; ten arrive together and wait for the rest of their bytes.
    let s = start("limits: { max_body: 1MiB, body_memory: 4MiB, body_timeout: 60s }");
    let before = s.rss_kb();
    let half = vec![b'a'; 1 << 19];
    let mut conns: Vec<TcpStream> = (0..10)
        .map(|i| {
            let mut c = TcpStream::connect(s.addr).expect("connect");
            c.set_read_timeout(Some(Duration::from_millis(200))).ok();
            c.write_all(
                format!("POST /upload/{i} HTTP/1.1\r\nhost: x\r\ncontent-length: 1048576\r\n\r\n")
                    .as_bytes(),
            )
            .expect("a head");
            c.write_all(&half).expect("half the body");
            c
        })
        .collect();
    // Six are refused at once (503), before the rest of their bodies is read.
    let mut refused = 0;
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut waiting: Vec<bool> = vec![true; conns.len()];
    while refused < 6 && Instant::now() < deadline {
        for (c, w) in conns.iter_mut().zip(waiting.iter_mut()) {
            let mut buf = [0u8; 64];
            if *w && matches!(c.read(&mut buf), Ok(n) if n > 0) {
                assert!(
                    buf.starts_with(b"HTTP/1.1 503"),
                    "{:?}",
                    String::from_utf8_lossy(&buf)
                );
                *w = false;
                refused += 1;
            }
        }
    }
    assert_eq!(refused, 6, "four bodies fit in the budget, six do not");
    let growth = s.rss_kb().saturating_sub(before);
    assert!(growth < RSS_GROWTH_BOUND_KB, "RSS grew by {growth} kB");
    // The four that fit complete.
    for (c, _) in conns.iter_mut().zip(&waiting).filter(|(_, w)| **w) {
        c.set_read_timeout(Some(Duration::from_secs(20))).ok();
        c.write_all(&half).expect("the rest of the body");
        let mut buf = [0u8; 64];
        let n = c.read(&mut buf).expect("an answer");
        assert!(
            buf[..n].starts_with(b"HTTP/1.1 200"),
            "{:?}",
            String::from_utf8_lossy(&buf)
        );
    }
    assert!(eventually(Duration::from_secs(20), || {
        s.stats()["requests"] == 10
    }));
    let j = s.journal();
    assert_eq!(rejected(&j, "body-memory").len(), 6, "{j:#?}");
    assert!(rejected(&j, "body-memory")
        .iter()
        .all(|e| e["status"] == 503));
}

#[test]
fn a_client_that_leaves_mid_body_is_client_closed_not_refused() {
    let s = start("{}");
    let mut c = TcpStream::connect(s.addr).expect("connect");
    c.write_all(b"POST /upload HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n0123456789")
        .expect("a head and part of the body");
    drop(c);
    assert!(eventually(Duration::from_secs(20), || {
        s.stats()["requests"] == 1
    }));
    let j = s.journal();
    assert_eq!(j[0]["outcome"], "client_closed", "{j:#?}");
    assert_eq!(j[0]["status"], serde_json::Value::Null);
    assert_eq!(j[0]["rejected"], serde_json::Value::Null);
}

#[test]
fn entries_behind_a_hung_request_do_not_pile_up_in_memory() {
    let s = start("rules:\n  - match: { path: /hang }\n    fault: { hang: { cap: 60s } }\n");
    let mut hung = TcpStream::connect(s.addr).expect("connect");
    hung.write_all(b"GET /hang HTTP/1.1\r\nhost: x\r\n\r\n")
        .expect("the hung request");
    assert!(eventually(Duration::from_secs(20), || {
        s.get("/__harness/metrics")
            .contains("fault_server_received_requests 1")
    }));
    let before = s.rss_kb();
    // Every later entry waits behind the hung one; each carries 4 KB of captured header.
    let ua = "u".repeat(4096);
    let n = 20_000;
    let per = n / 4;
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                let mut c = TcpStream::connect(s.addr).expect("connect");
                let mut r = BufReader::new(c.try_clone().expect("clone"));
                let req = format!("GET /x HTTP/1.1\r\nhost: x\r\nuser-agent: {ua}\r\n\r\n");
                for _ in 0..per {
                    c.write_all(req.as_bytes()).expect("send");
                    read_response(&mut r);
                }
            });
        }
    });
    let growth = s.rss_kb().saturating_sub(before);
    assert!(
        growth < RSS_GROWTH_BOUND_KB,
        "RSS grew by {growth} kB for {n} entries held back"
    );
    assert_eq!(s.stats()["requests"], 0, "nothing is written before seq 1");
    drop(hung);
    // The counters may run a moment ahead of what the file shows: wait for the file.
    assert!(eventually(Duration::from_secs(60), || {
        s.stats()["requests"] == n + 1
    }));
    let mut j = s.journal();
    assert!(eventually(Duration::from_secs(20), || {
        j = s.journal();
        j.len() as u64 == n + 1
    }));
    assert_eq!(j.len() as u64, n + 1);
    assert!(j.iter().enumerate().all(|(i, e)| e["seq"] == i as u64 + 1));
    assert_eq!(j[0]["outcome"], "client_closed");
}

/// Reads one HTTP/1.1 response with a Content-Length body.
fn read_response(r: &mut BufReader<TcpStream>) {
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        r.read_line(&mut line).expect("a head line");
        if line == "\r\n" || line.is_empty() {
            break;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            len = v.trim().parse().expect("a length");
        }
    }
    let mut body = vec![0u8; len];
    r.read_exact(&mut body).expect("the body");
}

/// A frame: length, type, flags, stream id, payload.
fn h2_frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len();
    let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// Reads frames in the background: answers SETTINGS, counts responses (HEADERS), notes GOAWAY
/// and the end of the connection.
fn h2_reader(mut c: TcpStream) -> std::sync::mpsc::Receiver<&'static str> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut w = c.try_clone().expect("clone");
        loop {
            let mut head = [0u8; 9];
            if c.read_exact(&mut head).is_err() {
                let _ = tx.send("closed");
                return;
            }
            let n =
                (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
            let mut payload = vec![0u8; n];
            if c.read_exact(&mut payload).is_err() {
                let _ = tx.send("closed");
                return;
            }
            match (head[3], head[4] & 1) {
                (4, 0) => {
                    let _ = w.write_all(&h2_frame(4, 1, 0, &[]));
                }
                (1, _) => {
                    let _ = tx.send("response");
                }
                (7, _) => {
                    let _ = tx.send("goaway");
                }
                _ => {}
            }
        }
    });
    rx
}

#[test]
fn http2_connections_without_streams_end_at_the_header_timeout() {
    let s = start("limits: { header_timeout: 400ms }");
    let open = || {
        let mut c = TcpStream::connect(s.addr).expect("connect");
        c.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .expect("preface");
        c.write_all(&h2_frame(4, 0, 0, &[])).expect("SETTINGS");
        c
    };
    // A GET: :method GET, :scheme http, :path /, :authority x (HPACK, literal without Huffman).
    let get = |stream: u32| h2_frame(1, 0x5, stream, &[0x82, 0x86, 0x84, 0x41, 1, b'x']);

    // Busy: a request every 150 ms for 1.2 s outlasts the 400 ms timeout three times over.
    let mut busy = open();
    let events = h2_reader(busy.try_clone().expect("clone"));
    for i in 0..8u32 {
        busy.write_all(&get(2 * i + 1)).expect("a request");
        assert_eq!(
            events.recv_timeout(Duration::from_secs(20)),
            Ok("response"),
            "request {i} on a connection in use"
        );
        std::thread::sleep(Duration::from_millis(150));
    }
    // Then idle: GOAWAY and the close follow.
    let end: Vec<&str> = std::iter::from_fn(|| events.recv_timeout(Duration::from_secs(20)).ok())
        .take_while(|e| *e != "closed")
        .collect();
    assert!(end.contains(&"goaway"), "{end:?}");

    // A connection that never opens a stream, and one that never finishes its HEADERS.
    let silent = open();
    let mut half = open();
    half.write_all(&get(1)[..11])
        .expect("part of a HEADERS frame");
    for c in [silent, half] {
        let rx = h2_reader(c);
        let ended = std::iter::from_fn(|| rx.recv_timeout(Duration::from_secs(20)).ok())
            .any(|e| e == "closed");
        assert!(ended, "an idle HTTP/2 connection stays open");
    }
    assert!(s.healthy());
}

/// Shrinks a socket's receive buffer, so what the server writes stays in the server's buffers.
fn small_receive_buffer(c: &TcpStream) {
    use std::os::fd::AsRawFd;
    let size: libc::c_int = 16 << 10;
    // SAFETY: setsockopt reads `size` (a c_int, its size given) and nothing else.
    unsafe {
        libc::setsockopt(
            c.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&size as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

#[test]
fn an_http1_answer_is_responded_only_once_written_whole() {
    let len = 8 << 20;
    let s = start(&big_body_config("send_timeout: 60s", len));
    // Read to the end: responded, every byte the client read.
    let mut c = TcpStream::connect(s.addr).expect("connect");
    c.write_all(b"GET /big HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        .expect("a request");
    let mut all = Vec::new();
    c.read_to_end(&mut all).expect("the whole answer");
    assert!(all.len() > len);
    let e = &s.entries_for("/big", 1, Duration::from_secs(20))[0];
    assert_eq!(e["outcome"], "responded", "{e}");
    assert_eq!(e["response_bytes"], all.len() as u64);
    // Read a little, then leave: client_closed, with fewer bytes than the answer has.
    let mut c = TcpStream::connect(s.addr).expect("connect");
    small_receive_buffer(&c);
    c.write_all(b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n")
        .expect("a request");
    let mut some = vec![0u8; 64 << 10];
    c.read_exact(&mut some).expect("the start of the answer");
    drop(c);
    let entries = s.entries_for("/big", 2, Duration::from_secs(30));
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[1]["outcome"], "client_closed", "{}", entries[1]);
    let bytes = entries[1]["response_bytes"]
        .as_u64()
        .expect("response_bytes");
    assert!(bytes >= 64 << 10 && bytes < len as u64, "{bytes}");
}

#[test]
fn an_http1_reader_that_stops_reading_is_cut_at_the_send_timeout() {
    let len = 8 << 20;
    let s = start(&big_body_config("send_timeout: 300ms", len));
    let mut c = TcpStream::connect(s.addr).expect("connect");
    small_receive_buffer(&c);
    c.write_all(b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n")
        .expect("a request");
    // Nothing is read: the server's writes stall until it gives up.
    let entries = s.entries_for("/big", 1, Duration::from_secs(30));
    assert_eq!(entries.len(), 1, "the server gave up on the stalled answer");
    let e = &entries[0];
    assert_eq!(e["outcome"], "send_timeout", "{e}");
    let bytes = e["response_bytes"].as_u64().expect("response_bytes");
    assert!(bytes > 0 && bytes < len as u64, "{bytes}");
    assert_eq!(s.stats()["by_outcome"]["send_timeout"], 1);
    drop(c);
}

/// Sends an upload of `total` bytes the way curl does: the body in pieces, looking for an early
/// answer between them, giving up at the first failed write. The answer's status line, or the
/// error that ended it.
fn upload_like_curl(
    addr: std::net::SocketAddr,
    chunked: bool,
    expect: bool,
) -> Result<String, String> {
    let total: u64 = 256 << 20;
    let mut c = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    c.set_read_timeout(Some(Duration::from_secs(20))).ok();
    let framing = if chunked {
        "transfer-encoding: chunked\r\n".to_string()
    } else {
        format!("content-length: {total}\r\n")
    };
    let expect_header = if expect {
        "expect: 100-continue\r\n"
    } else {
        ""
    };
    c.write_all(
        format!("PUT /upload HTTP/1.1\r\nhost: x\r\n{framing}{expect_header}\r\n").as_bytes(),
    )
    .map_err(|e| e.to_string())?;
    let answer = |c: &mut TcpStream| -> Result<String, String> {
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n") {
            match c.read(&mut b) {
                Ok(1) => head.push(b[0]),
                Ok(_) => return Err(format!("closed after {:?}", String::from_utf8_lossy(&head))),
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(String::from_utf8_lossy(&head).trim().to_string())
    };
    if expect {
        // An early final answer comes instead of `100 Continue` when the length is refused.
        c.set_read_timeout(Some(Duration::from_secs(1))).ok();
        let mut peek = [0u8; 16];
        if let Ok(n) = c.peek(&mut peek) {
            let line = answer(&mut c)?;
            if !line.contains(" 100 ") || n == 0 {
                return Ok(line);
            }
            let mut blank = [0u8; 2];
            c.read_exact(&mut blank).map_err(|e| e.to_string())?;
        }
        c.set_read_timeout(Some(Duration::from_secs(20))).ok();
    }
    let piece = vec![b'z'; 64 << 10];
    let mut sent = 0u64;
    c.set_nonblocking(false).ok();
    while sent < total {
        let wrote = if chunked {
            c.write_all(format!("{:x}\r\n", piece.len()).as_bytes())
                .and_then(|_| c.write_all(&piece))
                .and_then(|_| c.write_all(b"\r\n"))
        } else {
            c.write_all(&piece)
        };
        if let Err(e) = wrote {
            return Err(format!("send failed after {sent} bytes: {e}"));
        }
        sent += piece.len() as u64;
        c.set_nonblocking(true).ok();
        let mut peek = [0u8; 1];
        let early = matches!(c.peek(&mut peek), Ok(1));
        c.set_nonblocking(false).ok();
        if early {
            return answer(&mut c);
        }
    }
    answer(&mut c)
}

#[test]
fn an_oversized_upload_reads_its_413_chunked_or_not_with_or_without_expect() {
    let s = start("limits: { max_body: 1MiB }");
    for round in 0..3 {
        for (chunked, expect) in [(true, false), (true, true), (false, false), (false, true)] {
            let got = upload_like_curl(s.addr, chunked, expect);
            assert!(
                got.as_deref().is_ok_and(|l| l.starts_with("HTTP/1.1 413")),
                "round {round}, chunked {chunked}, expect {expect}: {got:?}"
            );
        }
    }
    assert!(s.healthy());
}
