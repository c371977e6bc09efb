//! Hostile clients against the real `fault-server` binary: a gigabyte body, slowloris, thousands
//! of idle connections, malformed heads and request smuggling. The server's memory stays under a
//! stated bound, health answers throughout, and every request it refused is in the journal with
//! outcome `rejected`, counted in its stats.
//!
//! Nothing here asserts how fast anything happens: waits are bounded loops on conditions, with
//! generous limits for a loaded machine.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The fault server as a child process, killed when dropped.
struct Server {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(config: &str) -> Server {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let cfg = dir.path().join("limits.yaml");
    std::fs::write(&cfg, config).expect("write the config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_fault-server"))
        .args(["--bind", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("fault-server starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped"))
        .read_line(&mut line)
        .expect("the ready line");
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("ready line: {line:?}"))
        .parse()
        .expect("an address");
    Server {
        child,
        addr,
        _dir: dir,
    }
}

impl Server {
    /// Resident memory of the server, kB.
    fn rss_kb(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the server's /proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS")
    }

    /// One request on a connection of its own; the raw response.
    fn request(&self, raw: &[u8]) -> String {
        let mut s = TcpStream::connect(self.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(20))).ok();
        s.write_all(raw).expect("send");
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// An HTTP/1.0 GET: the answer is not chunked, its body runs to the close.
    fn get(&self, path: &str) -> String {
        self.request(format!("GET {path} HTTP/1.0\r\nhost: 127.0.0.1\r\n\r\n").as_bytes())
    }

    /// Health answers 200, trying a few times over a couple of seconds.
    fn healthy(&self) -> bool {
        (0..20).any(|_| {
            let ok = self.get("/__harness/health").starts_with("HTTP/1.0 200");
            if !ok {
                std::thread::sleep(Duration::from_millis(100));
            }
            ok
        })
    }

    fn journal(&self) -> Vec<serde_json::Value> {
        let raw = self.get("/__harness/journal");
        let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        // The body may be chunked: keep the lines that are JSON objects.
        body.lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).expect("a journal line"))
            .collect()
    }

    fn stats(&self) -> serde_json::Value {
        let raw = self.get("/__harness/stats");
        let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        serde_json::from_str(body.trim()).expect("stats JSON")
    }
}

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
    c.write_all(b"POST /upload HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n")
        .expect("head");
    let chunk = vec![b'a'; 1 << 20];
    let mut sent = 0u64;
    while sent < (1 << 30) {
        let head = format!("{:x}\r\n", chunk.len());
        if c.write_all(head.as_bytes()).is_err()
            || c.write_all(&chunk).is_err()
            || c.write_all(b"\r\n").is_err()
        {
            break;
        }
        sent += chunk.len() as u64;
    }
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
    assert!(growth < RSS_GROWTH_BOUND_KB, "RSS grew by {growth} kB");
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
