//! The targets of the application's parsers: the scenario loader, the fault server's config and
//! schedule, a journal, a saved report, the client's HTTP/1.1 response parser, the server's request
//! handling and its decoding of a gRPC call.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use fault_server::schedule::{RequestFacts, Schedule};

/// An error message must say where: it is non-empty and names the origin it was given.
fn check_message(message: &str, origin: &str) {
    assert!(!message.is_empty(), "an empty error message");
    assert!(
        message.contains(origin),
        "the message does not name {origin:?}: {message}"
    );
}

/// A scenario file: loads and resolves, or says what is wrong and where.
pub fn scenario(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let o = harness::scenario::Overrides::default();
    if let Err(e) = harness::scenario::load_str(text, Path::new("fuzz.yaml"), &o) {
        check_message(&e.to_string(), "fuzz.yaml");
    }
}

/// A fault-server config: parses, or says what is wrong; a valid one compiles into a schedule
/// that decides requests without failing.
pub fn fault_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match fault_server::Config::from_yaml(text, "fuzz.yaml") {
        Ok(cfg) => decide_some(&cfg.rules),
        Err(e) => check_message(&e.to_string(), "fuzz.yaml"),
    }
}

/// A schedule as `PUT /__harness/schedule` receives it.
pub fn schedule(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match fault_server::config::ScheduleConfig::from_yaml(text, "schedule") {
        Ok(cfg) => decide_some(&cfg.rules),
        Err(e) => check_message(&e.to_string(), "schedule"),
    }
}

/// Runs a few requests through two schedules of `rules` with one seed: they decide alike (a
/// schedule is reproducible).
fn decide_some(rules: &[fault_server::config::RuleConfig]) {
    let start = Instant::now();
    let mut headers = http::HeaderMap::new();
    headers.insert("x-client-id", http::HeaderValue::from_static("c1"));
    let requests = [
        (http::Method::GET, "/", None),
        (http::Method::POST, "/orders", Some("k1")),
        (http::Method::POST, "/orders", Some("k1")),
        (http::Method::PUT, "/fault/503", None),
    ];
    let run = || {
        let schedule = Schedule::new(rules, 7, start);
        requests
            .iter()
            .enumerate()
            .map(|(i, (method, path, key))| {
                let facts = RequestFacts {
                    method,
                    path,
                    headers: &headers,
                    seq: i as u64 + 1,
                    idempotency_key: *key,
                    key_attempt: key.map(|_| i as u32),
                    now: start + Duration::from_millis(i as u64 * 10),
                    grpc: None,
                };
                schedule
                    .decide(&facts)
                    .map(|d| (d.rule.to_string(), d.draw.map(f64::to_bits)))
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(run(), run(), "one seed, two different schedules");
}

/// A journal as `harness analyze` reads it: judged, or refused with the line it broke on.
pub fn journal(data: &[u8]) {
    let cfg = checks::ChecksConfig::default();
    if let Err(e) =
        harness::analyze::analyze_reader(std::io::Cursor::new(data.to_vec()), "fuzz.jsonl", &cfg)
    {
        check_message(&e.to_string(), "fuzz.jsonl");
    }
}

/// A report as `harness merge`, `harness report` and `--compare` read it: parsed, rendered in every
/// format, compared with itself, and merged (alone, and as two whole runs, so that every count
/// is added) — or refused in words. A histogram whose header claims bytes it does not hold, or
/// counts that add up past 2^64 − 1, are bad input, never an allocation or a wrapped number.
pub fn report(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(r) = reports::from_json(text) else {
        return;
    };
    for f in reports::Format::ALL {
        let _ = reports::render(&r, f, false);
    }
    let _ = reports::compare::compare(&r, &r, &reports::compare::Tolerances::default());
    let mut whole = r.clone();
    whole.shard = None;
    for pair in [
        vec![("a.json".to_string(), r)],
        vec![
            ("a.json".to_string(), whole.clone()),
            ("b.json".to_string(), whole),
        ],
    ] {
        if let Err(e) = harness::merge::merge_reports(&pair) {
            let m = e.to_string();
            assert!(!m.is_empty(), "an empty error message");
            assert!(!m.contains("Error {"), "a debug print: {m}");
        }
    }
}

/// The largest message [`grpc_request`]'s services take: small, so the limit is reached.
const GRPC_MAX_MESSAGE: u64 = 64 << 10;

/// The services [`grpc_request`] decodes calls for: the built-in orders service.
fn grpc_services() -> &'static fault_server::grpc::Services {
    static S: OnceLock<fault_server::grpc::Services> = OnceLock::new();
    S.get_or_init(|| {
        fault_server::grpc::Services::new(&[], &[], &Default::default(), GRPC_MAX_MESSAGE)
            .expect("the built-in services")
    })
}

/// The fault server's decoding of a gRPC call: its head (the method, `grpc-timeout`,
/// `grpc-previous-rpc-attempts`, `grpc-encoding`) and its messages, decoded as the method's
/// request type. The input is the call as text a person can read and a fuzzer can splice: the
/// `:path` on the first line, a header a line (`name: value`), an empty line, then the body's
/// bytes. Whatever it is, decoding returns a call or the status a server answers with, holds no
/// message over the limit, and a decoded call's messages encode again.
pub fn grpc_request(data: &[u8]) {
    let (head, body) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(i) => (&data[..i], &data[i + 2..]),
        None => (data, &[][..]),
    };
    let mut lines = head.split(|b| *b == b'\n');
    let path = String::from_utf8_lossy(lines.next().unwrap_or_default()).into_owned();
    let mut headers = http::HeaderMap::new();
    for line in lines {
        let Some(colon) = line.iter().position(|b| *b == b':') else {
            continue;
        };
        let (name, value) = (&line[..colon], line[colon + 1..].trim_ascii());
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(name.trim_ascii()),
            http::HeaderValue::from_bytes(value),
        ) {
            headers.append(n, v);
        }
    }
    let call = fault_server::grpc::CallHead::read(&path, &headers);
    assert!(call.attempt() >= 1);
    match grpc_services().decode(&call, body) {
        Ok(decoded) => {
            assert!(
                !decoded.requests.is_empty(),
                "a call decoded with no message"
            );
            for m in &decoded.requests {
                let bytes = prost::Message::encode_to_vec(m);
                assert!(
                    bytes.len() as u64 <= GRPC_MAX_MESSAGE * 2,
                    "a message far over the limit was decoded"
                );
            }
            let _ = decoded.request_id();
        }
        Err(status) => {
            assert_ne!(status.code, history::GrpcCode::Ok, "a refusal with OK");
            assert!(!status.message.is_empty(), "a refusal without a reason");
        }
    }
}

/// The runtime the network targets share.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime")
    })
}

/// Longest any one exchange may take: far beyond what a loopback answer needs, and short enough
/// that a hang is a finding, not a stall.
const EXCHANGE: Duration = Duration::from_secs(5);

/// A server that answers every connection with the bytes it is given, then closes.
struct Scripted {
    addr: SocketAddr,
    next: std::sync::mpsc::SyncSender<Vec<u8>>,
}

fn scripted() -> &'static Scripted {
    static S: OnceLock<Scripted> = OnceLock::new();
    S.get_or_init(|| {
        let listener = TcpListener::bind("127.0.0.1:0").expect("a port");
        let addr = listener.local_addr().expect("its address");
        let (next, answers) = std::sync::mpsc::sync_channel::<Vec<u8>>(1);
        std::thread::spawn(move || {
            for answer in answers {
                let Ok((mut c, _)) = listener.accept() else {
                    continue;
                };
                let _ = c.set_read_timeout(Some(EXCHANGE));
                // Read the request's head, then answer and close.
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match c.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = c.write_all(&answer);
                let _ = c.shutdown(std::net::Shutdown::Write);
                // Drain until the client closes, so the answer is not cut by a reset.
                while matches!(c.read(&mut buf), Ok(n) if n > 0) {}
            }
        });
        Scripted { addr, next }
    })
}

/// The client's HTTP/1.1 response parser, on real TCP: a server answers a GET with `data`. The
/// client returns a reply or an error within its timeout, and a reply's body is whole.
pub fn response(data: &[u8]) {
    let s = scripted();
    if s.next.send(data.to_vec()).is_err() {
        return;
    }
    let url = format!("http://{}/", s.addr);
    runtime().block_on(async {
        let Ok(target) = harness::http::Target::parse(&url) else {
            return;
        };
        let mut conn = harness::http::Conn::new(Arc::new(target));
        let req = harness::http::Outgoing {
            method: http::Method::GET,
            uri: "/".into(),
            headers: http::HeaderMap::new(),
            body: bytes::Bytes::new(),
        };
        let started = Instant::now();
        let result = conn.send(req, EXCHANGE).await;
        assert!(
            started.elapsed() < EXCHANGE * 2,
            "the client outlived its timeout"
        );
        if let Ok(reply) = result {
            assert!(
                reply.body.len() <= data.len(),
                "a body longer than what was sent"
            );
        }
    });
}

/// A fault server with orders, a few faults and tight limits, shared by every run of
/// [`request`].
struct Served {
    addr: SocketAddr,
    _server: fault_server::FaultServer,
}

fn target() -> &'static Served {
    static T: OnceLock<Served> = OnceLock::new();
    T.get_or_init(|| {
        let cfg = fault_server::Config::from_yaml(
            r#"
orders: { idempotency: unique }
limits: { header_timeout: 300ms, max_body: 64KiB, max_head: 8KiB }
rules:
  - { id: unavailable, match: { path: /fault/503 }, fault: { status: { code: 503, retry_after: 1 } } }
  - { id: bad, match: { path: /fault/400 }, fault: { status: 400 } }
  - { id: reset, match: { path: /fault/reset }, fault: reset }
  - { id: drop, match: { path: /fault/drop }, fault: drop }
  - { id: malformed, match: { path: /fault/malformed }, fault: malformed }
  - { id: slow, match: { path: /fault/delay }, fault: { delay: 5ms } }
  - { id: hang, match: { path: /fault/hang }, fault: { hang: { cap: 50ms } } }
"#,
            "fuzz-target",
        )
        .expect("the target's config");
        let server = runtime()
            .block_on(fault_server::FaultServer::start(
                cfg,
                fault_server::ServerOptions::default(),
            ))
            .expect("a fault server");
        let addr = server.addr();
        Served {
            addr,
            _server: server,
        }
    })
}

/// Sends raw bytes on a new connection and reads until the server closes or `EXCHANGE` passes.
/// With `half_close`, the sending side is shut after the bytes (the server then sees the end of
/// the request stream at once instead of waiting out its header timeout).
fn raw_exchange(addr: SocketAddr, data: &[u8], half_close: bool) -> Vec<u8> {
    let Ok(mut c) = TcpStream::connect(addr) else {
        return Vec::new();
    };
    let _ = c.set_read_timeout(Some(EXCHANGE));
    let _ = c.set_write_timeout(Some(EXCHANGE));
    let _ = c.write_all(data);
    if half_close {
        let _ = c.shutdown(std::net::Shutdown::Write);
    }
    let mut out = Vec::new();
    let _ = c.take(1 << 20).read_to_end(&mut out);
    out
}

/// The fault server's request handling, on real TCP: whatever arrives, the server answers or
/// closes, and its health endpoint still answers afterwards.
pub fn request(data: &[u8]) {
    static RUNS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let t = target();
    // The answer may be anything: a fault, HTTP/2 frames, nothing. What matters is below.
    let _ = raw_exchange(t.addr, data, true);
    let health = raw_exchange(
        t.addr,
        b"GET /__harness/health HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n",
        false,
    );
    assert!(
        health.starts_with(b"HTTP/1.1 200"),
        "health stopped answering: {:?}",
        String::from_utf8_lossy(&health)
    );
    // The journal and the orders grow with every run: start afresh now and then.
    if RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 5000 == 4999 {
        let _ = raw_exchange(
            t.addr,
            b"POST /__harness/reset HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            false,
        );
    }
}
