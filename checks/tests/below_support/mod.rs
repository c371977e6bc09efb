//! What the service tests share: the tools they need (PostgreSQL, Redis, the services' Python),
//! a one-journal clock, a minimal blocking relay that drives the `wire-faults` sessions over real
//! sockets, a service process, and an HTTP/1.1 request.
//!
//! The relay is the smallest thing that puts a session between a real client library and a real
//! server — a thread per direction, the session under a lock — so that the services' behaviour
//! after an ambiguous commit or a `-LOADING` can be seen before the fault server's proxies exist.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use history::Entry;
use wire_faults::pg::{
    BackendItem, BackendReader, FrontendItem, FrontendReader, PgProxy, PgSession,
};
use wire_faults::resp::{RedisProxy, RedisSession, RespReader};
use wire_faults::{Host, Outgoing, Relay, Side, ToClient, ToServer};

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A tool a test needs is missing: skip, or fail under `HARNESS_REQUIRE_TOOLS=1` (as `.ci/run`
/// sets it).
pub fn missing(test: &str, what: &str) {
    if std::env::var_os("HARNESS_REQUIRE_TOOLS").is_some_and(|v| v == "1") {
        panic!("{test}: {what}, and HARNESS_REQUIRE_TOOLS=1 requires it");
    }
    eprintln!("{test}: skipped: {what}");
}

/// The PostgreSQL URL the tests use (`bash .ci/postgres` prints one).
pub fn database(test: &str) -> Option<String> {
    let url = std::env::var("FAULT_SERVER_TEST_DATABASE_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .ok();
    if url.is_none() {
        missing(
            test,
            "neither FAULT_SERVER_TEST_DATABASE_URL nor DATABASE_URL is set (`bash .ci/postgres` prints one)",
        );
    }
    url
}

/// The services' Python (calibration/below/install.sh installs it).
pub fn python(test: &str) -> Option<PathBuf> {
    let p = root().join(".cache/calibration/below/venv/bin/python");
    if p.exists() {
        Some(p)
    } else {
        missing(
            test,
            "the services' venv is not installed (bash calibration/below/install.sh)",
        );
        None
    }
}

/// A Redis server of the test's own, on a free loopback port; stopped when dropped.
pub struct RedisServer {
    child: Child,
    pub port: u16,
}

impl RedisServer {
    pub fn start(test: &str, extra: &[&str]) -> Option<RedisServer> {
        for _ in 0..5 {
            let port = free_port();
            // Its files (a replica's sync writes one) go to a directory of its own.
            let dir = std::env::temp_dir()
                .join(format!("wire-faults-redis-{}-{port}", std::process::id()));
            let _ = std::fs::create_dir_all(&dir);
            let child = Command::new("redis-server")
                .args([
                    "--port",
                    &port.to_string(),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                ])
                .arg("--dir")
                .arg(&dir)
                .args(extra)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
            let Ok(child) = child else {
                missing(
                    test,
                    "redis-server is not installed (bash calibration/below/install.sh)",
                );
                return None;
            };
            let server = RedisServer { child, port };
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
                    let mut buf = [0u8; 64];
                    if s.write_all(b"PING\r\n").is_ok()
                        && s.read(&mut buf)
                            .is_ok_and(|n| buf[..n].starts_with(b"+PONG"))
                    {
                        return Some(server);
                    }
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("{test}: redis-server did not start");
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// One journal for the relay's entries and the test's own HTTP requests, on one clock.
pub struct Journal {
    start: Instant,
    seq: AtomicU64,
    entries: Mutex<Vec<Entry>>,
}

impl Journal {
    pub fn new() -> Arc<Journal> {
        Arc::new(Journal {
            start: Instant::now(),
            seq: AtomicU64::new(0),
            entries: Mutex::new(Vec::new()),
        })
    }

    pub fn now_us(&self) -> u64 {
        self.start.elapsed().as_micros() as u64
    }

    pub fn next_seq(&self) -> u64 {
        self.seq.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn push(&self, entries: Vec<Entry>) {
        self.entries.lock().expect("journal").extend(entries);
    }

    /// The entries in `seq` order, as a journal file holds them.
    pub fn entries(&self) -> Vec<Entry> {
        let mut e = self.entries.lock().expect("journal").clone();
        e.sort_by_key(|e| e.seq);
        e
    }
}

struct HostOf<'a>(&'a Journal);

impl Host for HostOf<'_> {
    fn next_seq(&mut self) -> u64 {
        self.0.next_seq()
    }
    fn unix_us(&self, t_us: u64) -> u64 {
        t_us
    }
}

struct Ends {
    client: TcpStream,
    server: TcpStream,
}

impl Ends {
    fn close(&self) {
        let _ = self.client.shutdown(Shutdown::Both);
        let _ = self.server.shutdown(Shutdown::Both);
    }
}

/// A relay on a loopback port in front of `upstream`, each connection driven by `serve`.
fn relay<F>(upstream: SocketAddr, serve: F) -> SocketAddr
where
    F: Fn(TcpStream, TcpStream, u64) + Send + Sync + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the relay");
    let addr = listener.local_addr().expect("its address");
    let serve = Arc::new(serve);
    std::thread::spawn(move || {
        for (id, client) in listener.incoming().enumerate() {
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(upstream) else {
                continue;
            };
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let serve = Arc::clone(&serve);
            std::thread::spawn(move || serve(client, server, id as u64 + 1));
        }
    });
    addr
}

fn apply_to_server(step: &ToServer, raw: &[u8], ends: &Ends) -> bool {
    std::thread::sleep(step.delay);
    let mut server = &ends.server;
    let mut client = &ends.client;
    let ok = match &step.send {
        Outgoing::Forward => server.write_all(raw).is_ok(),
        Outgoing::Replace(b) => server.write_all(b).is_ok(),
        Outgoing::Nothing => true,
    };
    if let Some(a) = &step.answer {
        let _ = client.write_all(a);
    }
    ok && !step.close
}

fn apply_to_client(step: &ToClient, raw: &[u8], ends: &Ends) -> bool {
    std::thread::sleep(step.delay);
    let mut client = &ends.client;
    let ok = match &step.relay {
        Relay::Relay => client.write_all(raw).is_ok(),
        Relay::Replace(b) => client.write_all(b).is_ok(),
        Relay::Swallow => true,
    };
    if let Some(t) = &step.then {
        let _ = client.write_all(t);
    }
    ok && !step.close
}

/// A PostgreSQL-aware relay in front of `upstream`.
pub fn pg_relay(proxy: Arc<PgProxy>, upstream: SocketAddr, journal: Arc<Journal>) -> SocketAddr {
    relay(upstream, move |client, server, id| {
        let session = Arc::new(Mutex::new(PgSession::new(&proxy, id)));
        let ends = Arc::new(Ends {
            client: client.try_clone().expect("clone"),
            server: server.try_clone().expect("clone"),
        });
        let (s2, e2, j2, max) = (
            Arc::clone(&session),
            Arc::clone(&ends),
            Arc::clone(&journal),
            proxy.max_message(),
        );
        let back = std::thread::spawn(move || {
            let mut reader = BackendReader::new(max);
            let mut buf = vec![0u8; 16 * 1024];
            let mut from = &e2.server;
            loop {
                let n = from.read(&mut buf).unwrap_or(0);
                let mut s = s2.lock().expect("session");
                if n == 0 {
                    s.on_closed(Side::Server, j2.now_us());
                    j2.push(s.take_journal());
                    e2.close();
                    return;
                }
                reader.push(&buf[..n]);
                loop {
                    let go = match reader.next_item() {
                        Ok(Some(BackendItem::Message(m))) => {
                            let step = s.on_server(&m, j2.now_us());
                            apply_to_client(&step, &m.raw, &e2)
                        }
                        Ok(Some(BackendItem::Piece(p))) => {
                            let step = s.on_server_piece(p.first);
                            apply_to_client(&step, &p.bytes, &e2)
                        }
                        Ok(None) => break,
                        Err(e) => {
                            s.on_violation(Side::Server, &e, j2.now_us(), &mut HostOf(&j2));
                            false
                        }
                    };
                    if !go {
                        s.on_closed(Side::Server, j2.now_us());
                        j2.push(s.take_journal());
                        e2.close();
                        return;
                    }
                }
                j2.push(s.take_journal());
            }
        });
        let mut reader = FrontendReader::new(proxy.max_message());
        let mut buf = vec![0u8; 16 * 1024];
        let mut from = &ends.client;
        'conn: loop {
            let n = from.read(&mut buf).unwrap_or(0);
            let mut s = session.lock().expect("session");
            if n == 0 {
                s.on_closed(Side::Client, journal.now_us());
                journal.push(s.take_journal());
                ends.close();
                break;
            }
            reader.push(&buf[..n]);
            loop {
                let go = match reader.next_item() {
                    Ok(Some(FrontendItem::Message(m))) => {
                        let step = s.on_client(&m, journal.now_us(), &mut HostOf(&journal));
                        apply_to_server(&step, &m.raw, &ends)
                    }
                    Ok(Some(FrontendItem::Piece(p))) => (&ends.server).write_all(&p.bytes).is_ok(),
                    Ok(None) => break,
                    Err(e) => {
                        s.on_violation(Side::Client, &e, journal.now_us(), &mut HostOf(&journal));
                        false
                    }
                };
                if !go {
                    s.on_closed(Side::Client, journal.now_us());
                    journal.push(s.take_journal());
                    ends.close();
                    break 'conn;
                }
            }
            journal.push(s.take_journal());
        }
        let _ = back.join();
    })
}

/// A Redis-aware relay in front of `upstream`.
pub fn redis_relay(
    proxy: Arc<RedisProxy>,
    upstream: SocketAddr,
    journal: Arc<Journal>,
) -> SocketAddr {
    relay(upstream, move |client, server, id| {
        let session = Arc::new(Mutex::new(RedisSession::new(&proxy, id)));
        let ends = Arc::new(Ends {
            client: client.try_clone().expect("clone"),
            server: server.try_clone().expect("clone"),
        });
        let (s2, e2, j2) = (
            Arc::clone(&session),
            Arc::clone(&ends),
            Arc::clone(&journal),
        );
        let back = std::thread::spawn(move || {
            let mut reader = RespReader::replies();
            let mut buf = vec![0u8; 16 * 1024];
            let mut from = &e2.server;
            loop {
                let n = from.read(&mut buf).unwrap_or(0);
                let mut s = s2.lock().expect("session");
                if n == 0 {
                    s.on_closed(Side::Server, j2.now_us());
                    j2.push(s.take_journal());
                    e2.close();
                    return;
                }
                reader.push(&buf[..n]);
                loop {
                    let go = match reader.next_reply_piece() {
                        Ok(Some(p)) => {
                            let step = s.on_reply(&p, j2.now_us());
                            apply_to_client(&step, &p.bytes, &e2)
                        }
                        Ok(None) => break,
                        Err(e) => {
                            s.on_violation(Side::Server, &e, j2.now_us(), &mut HostOf(&j2));
                            false
                        }
                    };
                    if !go {
                        s.on_closed(Side::Server, j2.now_us());
                        j2.push(s.take_journal());
                        e2.close();
                        return;
                    }
                }
                j2.push(s.take_journal());
            }
        });
        let mut reader = RespReader::commands(proxy.max_message());
        let mut buf = vec![0u8; 16 * 1024];
        let mut from = &ends.client;
        'conn: loop {
            let n = from.read(&mut buf).unwrap_or(0);
            let mut s = session.lock().expect("session");
            if n == 0 {
                s.on_closed(Side::Client, journal.now_us());
                journal.push(s.take_journal());
                ends.close();
                break;
            }
            reader.push(&buf[..n]);
            loop {
                let go = match reader.next_command() {
                    Ok(Some(c)) => {
                        let step = s.on_command(&c, journal.now_us(), &mut HostOf(&journal));
                        apply_to_server(&step, &c.raw, &ends)
                    }
                    Ok(None) => break,
                    Err(e) => {
                        s.on_violation(Side::Client, &e, journal.now_us(), &mut HostOf(&journal));
                        false
                    }
                };
                if !go {
                    s.on_closed(Side::Client, journal.now_us());
                    journal.push(s.take_journal());
                    ends.close();
                    break 'conn;
                }
            }
            journal.push(s.take_journal());
        }
        let _ = back.join();
    })
}

/// A service process (`calibration/below/NAME.py ARGS`), stopped when dropped.
pub struct Service {
    child: Child,
    pub port: u16,
}

impl Service {
    pub fn start(python: &Path, script: &str, args: &[&str]) -> Service {
        let mut child = Command::new(python)
            .arg(root().join("calibration/below").join(script))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{script}: {e}"));
        let stdout = child.stdout.take().expect("stdout");
        let mut line = String::new();
        BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap_or_else(|e| panic!("{script}: {e}"));
        let port = line
            .trim()
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| panic!("{script} did not say where it listens: {line:?}"));
        Service { child, port }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP/1.1 exchange: (status, body).
pub fn http(
    port: u16,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the service");
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .expect("timeout");
    let mut req = format!("{method} {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\ncontent-length: {}\r\n", body.len());
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).expect("send");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read the answer");
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {out:?}"));
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// The same exchange, journaled as the fault server in front of the service would journal it.
pub fn http_journaled(journal: &Journal, port: u16, path: &str) -> (u16, String) {
    let seq = journal.next_seq();
    let t_recv_us = journal.now_us();
    let (status, body) = http(port, "GET", path, &[], "");
    let mut e = Entry::blank(seq);
    e.t_recv_us = t_recv_us;
    e.t_done_us = journal.now_us();
    e.method = "GET".into();
    e.path = path.into();
    e.status = Some(status);
    journal.push(vec![e]);
    (status, body)
}

/// Runs SQL with the services' psycopg (autocommit).
pub fn sql(python: &Path, url: &str, statements: &str) {
    let out = Command::new(python)
        .args([
            "-c",
            "import sys, psycopg\nwith psycopg.connect(sys.argv[1], autocommit=True) as c:\n    c.execute(sys.argv[2])",
            url,
            statements,
        ])
        .output()
        .expect("python");
    assert!(
        out.status.success(),
        "{statements}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The host and port a PostgreSQL URL names.
pub fn upstream(url: &str) -> SocketAddr {
    use std::net::ToSocketAddrs;
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let hostport = rest.split('/').next().unwrap_or(rest);
    let hp = if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:5432")
    };
    hp.to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .unwrap_or_else(|| panic!("cannot resolve {hp}"))
}

/// The URL with its host and port replaced by `addr` (a relay in front of the server).
pub fn via(url: &str, addr: SocketAddr) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("postgres", url));
    let (auth, rest) = match rest.rsplit_once('@') {
        Some((a, r)) => (format!("{a}@"), r),
        None => (String::new(), rest),
    };
    let path = rest.split_once('/').map_or("", |(_, p)| p);
    format!("{scheme}://{auth}{addr}/{path}")
}
