//! The client transport (`harness::http::Conn`): against the fault server, what each socket-level
//! fault is counted as and that a connection a fault broke is replaced for the next request; then
//! against scripted servers that send exact bytes, the framing, keep-alive and error kinds.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use fault_server::{Config, FaultServer, ServerOptions};
use harness::http::{AttemptError, Conn, Outgoing, Reply, Target};
use history::ErrorKind;
use http::{HeaderMap, Method};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

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
        // Only the hang needs the client to give up; the other faults answer at once, however
        // busy the machine, and a short timeout would turn them into timeouts.
        let timeout = if path == "/fault/hang" {
            Duration::from_millis(300)
        } else {
            Duration::from_secs(30)
        };
        let err = send(&mut conn, path, timeout).await.expect_err(path);
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

// --- Against scripted servers: the exact bytes of each response are given. ---

/// A server on `127.0.0.1:0` whose every connection runs a script.
struct Scripted {
    target: Arc<Target>,
    /// Connections accepted so far.
    accepted: Arc<AtomicUsize>,
    /// Every request received, as bytes, in order.
    requests: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Scripted {
    fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    fn requests(&self) -> Vec<Vec<u8>> {
        self.requests.lock().expect("request log").clone()
    }

    fn conn(&self) -> Conn {
        Conn::new(self.target.clone())
    }
}

/// The server's side of one connection.
struct Peer {
    /// 0 for the first connection accepted, 1 for the next...
    index: usize,
    stream: TcpStream,
    buf: Vec<u8>,
    log: Arc<Mutex<Vec<Vec<u8>>>>,
}

impl Peer {
    /// Reads one whole request (head and `content-length` body); false at end of stream.
    async fn request(&mut self) -> bool {
        loop {
            if let Some(end) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&self.buf[..end]).to_lowercase();
                let body = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .map_or(0, |n| n.trim().parse::<usize>().expect("request length"));
                let len = end + 4 + body;
                if self.buf.len() >= len {
                    let req: Vec<u8> = self.buf.drain(..len).collect();
                    self.log.lock().expect("request log").push(req);
                    return true;
                }
            }
            let mut chunk = [0u8; 4096];
            match self.stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    async fn send(&mut self, bytes: &[u8]) {
        let _ = self.stream.write_all(bytes).await;
    }

    /// Closes with a TCP reset instead of a FIN.
    fn reset(self) {
        self.stream
            .set_zero_linger()
            .expect("SO_LINGER 0 can be set");
        drop(self.stream);
    }
}

async fn scripted<F, Fut>(script: F) -> Scripted
where
    F: Fn(Peer) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("local address");
    let accepted = Arc::new(AtomicUsize::new(0));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let (count, log) = (accepted.clone(), requests.clone());
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let index = count.fetch_add(1, Ordering::SeqCst);
            let peer = Peer {
                index,
                stream,
                buf: Vec::new(),
                log: log.clone(),
            };
            tokio::spawn(script(peer));
        }
    });
    let target = Target::parse(&format!("http://{addr}")).expect("server URL parses");
    Scripted {
        target: Arc::new(target),
        accepted,
        requests,
    }
}

/// Answers every request on every connection with `response`, keeping the connection open.
async fn answering(response: &'static [u8]) -> Scripted {
    scripted(move |mut peer| async move {
        while peer.request().await {
            peer.send(response).await;
        }
    })
    .await
}

const TIMEOUT: Duration = Duration::from_secs(5);

async fn ok(conn: &mut Conn, req: Outgoing) -> Reply {
    conn.send(req, TIMEOUT).await.expect("a response")
}

async fn fails(conn: &mut Conn, req: Outgoing) -> AttemptError {
    match conn.send(req, TIMEOUT).await {
        Ok(r) => panic!("expected an error, got {} {:?}", r.status, r.body),
        Err(e) => e,
    }
}

#[tokio::test]
async fn content_length_body_over_one_kept_alive_connection() {
    let s =
        answering(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-a: 1\r\nx-a: 2\r\n\r\nhello").await;
    let mut conn = s.conn();
    for _ in 0..20 {
        let r = ok(&mut conn, get("/a")).await;
        assert_eq!(r.status.as_u16(), 200);
        assert_eq!(&r.body[..], b"hello");
        let values: Vec<_> = r.headers.get_all("x-a").iter().collect();
        assert_eq!(values, ["1", "2"]);
    }
    assert_eq!(s.accepted(), 1, "20 requests, one connection");
}

#[tokio::test]
async fn request_bytes_on_the_wire() {
    let s = answering(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n").await;
    let mut conn = s.conn();
    let authority = s.target.authority.clone();
    ok(&mut conn, get("/plain?q=1")).await;
    let mut headers = HeaderMap::new();
    headers.insert("x-key", "k1".parse().expect("header value"));
    headers.insert("host", "elsewhere".parse().expect("header value"));
    headers.insert("content-length", "99".parse().expect("header value"));
    let post = |body: &'static [u8]| Outgoing {
        method: Method::POST,
        uri: "/orders".into(),
        headers: headers.clone(),
        body: Bytes::from_static(body),
    };
    ok(&mut conn, post(b"")).await;
    ok(&mut conn, post(b"{\"n\":1}")).await;
    let reqs: Vec<String> = s
        .requests()
        .iter()
        .map(|r| String::from_utf8_lossy(r).into_owned())
        .collect();
    assert_eq!(
        reqs,
        [
            format!("GET /plain?q=1 HTTP/1.1\r\nhost: {authority}\r\n\r\n"),
            format!(
                "POST /orders HTTP/1.1\r\nhost: {authority}\r\nx-key: k1\r\ncontent-length: 0\r\n\r\n"
            ),
            format!(
                "POST /orders HTTP/1.1\r\nhost: {authority}\r\nx-key: k1\r\ncontent-length: 7\r\n\r\n{{\"n\":1}}"
            ),
        ]
    );
    let bad = fails(&mut conn, get("/a b")).await;
    assert_eq!(bad.kind, ErrorKind::Other, "{bad}");
}

#[tokio::test]
async fn chunked_body_with_extensions_and_trailers() {
    let s = answering(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
          5;name=value\r\nhello\r\n7 ; x=\"y\"\r\n, world\r\nA\r\n0123456789\r\n\
          0\r\nx-trailer: t\r\nx-other: u\r\n\r\n",
    )
    .await;
    let mut conn = s.conn();
    for _ in 0..3 {
        let r = ok(&mut conn, get("/")).await;
        assert_eq!(&r.body[..], b"hello, world0123456789");
    }
    assert_eq!(s.accepted(), 1, "a chunked body keeps the connection");
}

#[tokio::test]
async fn close_delimited_body_then_a_new_connection() {
    let s = scripted(|mut peer| async move {
        if peer.request().await {
            peer.send(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\nuntil the end")
                .await;
        }
    })
    .await;
    let mut conn = s.conn();
    for _ in 0..2 {
        let r = ok(&mut conn, get("/")).await;
        assert_eq!(&r.body[..], b"until the end");
    }
    assert_eq!(s.accepted(), 2);
}

#[tokio::test]
async fn connection_close_is_honoured_even_if_the_server_keeps_it_open() {
    let s = answering(b"HTTP/1.1 200 OK\r\nConnection: close\r\ncontent-length: 2\r\n\r\nok").await;
    let mut conn = s.conn();
    for _ in 0..3 {
        assert_eq!(&ok(&mut conn, get("/")).await.body[..], b"ok");
    }
    assert_eq!(s.accepted(), 3);
}

#[tokio::test]
async fn http_1_0_keeps_alive_only_when_it_says_so() {
    let s = answering(b"HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\nok").await;
    let mut conn = s.conn();
    for _ in 0..3 {
        assert_eq!(&ok(&mut conn, get("/")).await.body[..], b"ok");
    }
    assert_eq!(s.accepted(), 3, "HTTP/1.0 closes by default");

    let s = answering(b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\ncontent-length: 2\r\n\r\nok")
        .await;
    let mut conn = s.conn();
    for _ in 0..3 {
        assert_eq!(&ok(&mut conn, get("/")).await.body[..], b"ok");
    }
    assert_eq!(s.accepted(), 1);
}

#[tokio::test]
async fn no_body_for_204_304_and_head() {
    let s = scripted(|mut peer| async move {
        let mut n = 0;
        while peer.request().await {
            n += 1;
            let response: &[u8] = match n {
                1 => b"HTTP/1.1 204 No Content\r\ncontent-length: 10\r\n\r\n",
                2 => b"HTTP/1.1 304 Not Modified\r\netag: \"x\"\r\n\r\n",
                3 => b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n",
                _ => b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nafter",
            };
            peer.send(response).await;
        }
    })
    .await;
    let mut conn = s.conn();
    let r = ok(&mut conn, get("/")).await;
    assert_eq!((r.status.as_u16(), r.body.len()), (204, 0));
    let r = ok(&mut conn, get("/")).await;
    assert_eq!((r.status.as_u16(), r.body.len()), (304, 0));
    let head = Outgoing {
        method: Method::HEAD,
        ..get("/")
    };
    let r = ok(&mut conn, head).await;
    assert_eq!((r.status.as_u16(), r.body.len()), (200, 0));
    assert_eq!(r.headers["content-length"], "5");
    assert_eq!(&ok(&mut conn, get("/")).await.body[..], b"after");
    assert_eq!(s.accepted(), 1);
}

#[tokio::test]
async fn interim_100_continue_is_skipped() {
    let s = answering(
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\n\
          HTTP/1.1 201 Created\r\ncontent-length: 4\r\n\r\ndone",
    )
    .await;
    let mut conn = s.conn();
    for _ in 0..2 {
        let r = ok(&mut conn, get("/")).await;
        assert_eq!(r.status.as_u16(), 201);
        assert_eq!(&r.body[..], b"done");
        assert!(!r.headers.contains_key("link"));
    }
    assert_eq!(s.accepted(), 1);
}

#[tokio::test]
async fn response_written_one_byte_at_a_time() {
    let s = scripted(|mut peer| async move {
        while peer.request().await {
            let response = b"HTTP/1.1 200 OK\r\nx-long-header: abcdefghij\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
            for b in response {
                peer.send(&[*b]).await;
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
        }
    })
    .await;
    let mut conn = s.conn();
    for _ in 0..2 {
        let r = ok(&mut conn, get("/")).await;
        assert_eq!(r.headers["x-long-header"], "abcdefghij");
        assert_eq!(&r.body[..], b"abc");
    }
    assert_eq!(s.accepted(), 1);
}

#[tokio::test]
async fn unparseable_responses_are_malformed() {
    let cases: [&'static [u8]; 7] = [
        b"HTTP/1.1 TWO-HUNDRED NOT OK\r\n\r\n",
        b"SMTP ready\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhelloXX0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhello!",
        b"HTTP/1.1 200 OK\r\ncontent-length: -5\r\n\r\n",
    ];
    for response in cases {
        let s = answering(response).await;
        let mut conn = s.conn();
        let e = fails(&mut conn, get("/")).await;
        assert_eq!(
            e.kind,
            ErrorKind::Malformed,
            "{}: {e}",
            String::from_utf8_lossy(response)
        );
    }
    // Repeated but equal lengths are one length.
    let s =
        answering(b"HTTP/1.1 200 OK\r\ncontent-length: 2, 2\r\ncontent-length: 2\r\n\r\nok").await;
    assert_eq!(&ok(&mut s.conn(), get("/")).await.body[..], b"ok");
}

/// A head past the header list's limit (64 KiB) is the error kind `protocol`: a limit exceeded.
#[tokio::test]
async fn a_head_that_never_ends_is_over_the_limit() {
    let s = scripted(|mut peer| async move {
        if peer.request().await {
            peer.send(b"HTTP/1.1 200 OK\r\n").await;
            let line = format!("x-filler: {}\r\n", "y".repeat(1000));
            for _ in 0..100 {
                peer.send(line.as_bytes()).await;
            }
            std::future::pending::<()>().await;
        }
    })
    .await;
    let e = fails(&mut s.conn(), get("/")).await;
    assert_eq!(e.kind, ErrorKind::Protocol, "{e}");
}

#[tokio::test]
async fn end_of_stream_mid_body_is_closed() {
    for response in [
        &b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nhalf"[..],
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhel",
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n0\r\nx-trailer: cut",
        b"",
    ] {
        let s = scripted(move |mut peer| async move {
            if peer.request().await {
                peer.send(response).await;
            }
        })
        .await;
        let e = fails(&mut s.conn(), get("/")).await;
        assert_eq!(
            e.kind,
            ErrorKind::Closed,
            "{}: {e}",
            String::from_utf8_lossy(response)
        );
    }
}

#[tokio::test]
async fn tcp_reset_is_reset() {
    let s = scripted(|mut peer| async move {
        if peer.request().await {
            peer.send(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\npartial")
                .await;
            peer.reset();
        }
    })
    .await;
    let e = fails(&mut s.conn(), get("/")).await;
    assert_eq!(e.kind, ErrorKind::Reset, "{e}");
}

#[tokio::test]
async fn a_connection_closed_while_idle_is_replaced() {
    // The first connection answers once and then closes without saying so beforehand; a reset
    // while idle is the same.
    for reset in [false, true] {
        let closed = Arc::new(tokio::sync::Notify::new());
        let signal = closed.clone();
        let s = scripted(move |mut peer| {
            let signal = signal.clone();
            async move {
                while peer.request().await {
                    peer.send(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                        .await;
                    if peer.index == 0 {
                        if reset {
                            peer.reset();
                        } else {
                            drop(peer);
                        }
                        signal.notify_one();
                        return;
                    }
                }
            }
        })
        .await;
        let mut conn = s.conn();
        ok(&mut conn, get("/")).await;
        // The close has happened; a moment's sleep lets the runtime see it.
        closed.notified().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert_eq!(
            &ok(&mut conn, get("/")).await.body[..],
            b"ok",
            "reset: {reset}"
        );
        assert_eq!(s.accepted(), 2, "reset: {reset}");
    }
}

#[tokio::test]
async fn bytes_after_a_response_end_the_connection() {
    // Pipelined garbage, and an unsolicited response while idle: neither is taken for the
    // answer to the next request.
    let s = answering(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nokHTTP/1.1 500 Extra\r\n\r\n")
        .await;
    let mut conn = s.conn();
    for _ in 0..2 {
        let r = ok(&mut conn, get("/")).await;
        assert_eq!((r.status.as_u16(), &r.body[..]), (200, &b"ok"[..]));
    }
    assert_eq!(s.accepted(), 2);
    let sent = Arc::new(tokio::sync::Notify::new());
    let signal = sent.clone();
    let s = scripted(move |mut peer| {
        let signal = signal.clone();
        async move {
            while peer.request().await {
                peer.send(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                    .await;
                if peer.index == 0 {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    peer.send(b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\n\r\n")
                        .await;
                    signal.notify_one();
                }
            }
        }
    })
    .await;
    let mut conn = s.conn();
    ok(&mut conn, get("/")).await;
    // The unsolicited 408 is on its way; a moment's sleep lets the runtime see it.
    sent.notified().await;
    tokio::time::sleep(Duration::from_millis(5)).await;
    let r = ok(&mut conn, get("/")).await;
    assert_eq!(r.status.as_u16(), 200);
    assert_eq!(s.accepted(), 2);
}

#[tokio::test]
async fn a_timed_out_connection_is_not_reused() {
    // The first connection never answers; later ones do.
    let s = scripted(|mut peer| async move {
        while peer.request().await {
            if peer.index == 0 {
                tokio::time::sleep(Duration::from_secs(3)).await;
            }
            peer.send(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await;
        }
    })
    .await;
    let mut conn = s.conn();
    let e = conn
        .send(get("/"), Duration::from_millis(100))
        .await
        .expect_err("no answer in time");
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    // Had the old connection been kept, this request would go there and wait for its late
    // answer; a second connection is the proof it was not.
    let r = ok(&mut conn, get("/")).await;
    assert_eq!(&r.body[..], b"ok");
    assert_eq!(s.accepted(), 2);
}

#[tokio::test]
async fn refused_connection_is_connect() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("local address");
    drop(listener);
    let target = Target::parse(&format!("http://{addr}")).expect("URL parses");
    let e = Conn::new(Arc::new(target))
        .send(get("/"), TIMEOUT)
        .await
        .expect_err("nothing listens");
    assert_eq!(e.kind, ErrorKind::Connect, "{e}");
}

/// A response body framed any way a server may frame it: one `content-length`, or chunks of any
/// sizes with or without extensions and trailers, written in pieces of any sizes.
fn framed(body: &[u8], cuts: &[usize], chunked: bool, extensions: bool, trailers: bool) -> Vec<u8> {
    let mut out = Vec::new();
    if !chunked {
        out.extend_from_slice(
            format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len()).as_bytes(),
        );
        out.extend_from_slice(body);
        return out;
    }
    out.extend_from_slice(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n");
    let mut rest = body;
    let mut i = 0;
    while !rest.is_empty() {
        let n = cuts
            .get(i)
            .copied()
            .unwrap_or(rest.len())
            .clamp(1, rest.len());
        i += 1;
        let ext = if extensions { ";name=\"v\";x" } else { "" };
        out.extend_from_slice(format!("{n:X}{ext}\r\n").as_bytes());
        out.extend_from_slice(&rest[..n]);
        out.extend_from_slice(b"\r\n");
        rest = &rest[n..];
    }
    out.extend_from_slice(b"0\r\n");
    if trailers {
        out.extend_from_slice(b"x-checksum: abc\r\nx-more: 1\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Whatever the framing and however the bytes are cut on the wire, the client reads the body
    /// back whole, twice on one kept-alive connection.
    #[test]
    fn any_framing_reads_back_the_body_whole(
        body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..3000),
        cuts in proptest::collection::vec(1usize..700, 0..12),
        writes in proptest::collection::vec(1usize..400, 1..8),
        (chunked, extensions, trailers) in proptest::prelude::any::<(bool, bool, bool)>(),
    ) {
        let response = Arc::new(framed(&body, &cuts, chunked, extensions, trailers));
        let writes = Arc::new(writes);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let (first, second, accepted) = rt.block_on(async {
            let s = scripted(move |mut peer| {
                let (response, writes) = (response.clone(), writes.clone());
                async move {
                    while peer.request().await {
                        let mut rest = &response[..];
                        let mut i = 0;
                        while !rest.is_empty() {
                            let n = writes[i % writes.len()].min(rest.len());
                            peer.send(&rest[..n]).await;
                            rest = &rest[n..];
                            i += 1;
                        }
                    }
                }
            })
            .await;
            let mut conn = s.conn();
            let first = ok(&mut conn, get("/")).await;
            let second = ok(&mut conn, get("/")).await;
            (first, second, s.accepted())
        });
        proptest::prop_assert_eq!(&first.body[..], &body[..]);
        proptest::prop_assert_eq!(&second.body[..], &body[..]);
        proptest::prop_assert_eq!(accepted, 1, "the connection is kept");
    }
}

// --- HTTP/2, the transport's own framing, against the fault server over h2c. ---

/// A fault server whose `/big` answers `len` bytes, with the faults HTTP/2 has per stream.
async fn h2_server(len: usize) -> FaultServer {
    let yaml = format!(
        r#"
rules:
  - match: {{ path: /fault/reset }}
    fault: reset
  - match: {{ path: /fault/goaway }}
    fault: goaway
  - match: {{ path: /fault/hang }}
    fault: {{ hang: {{ cap: 5s }} }}
  - match: {{ path: /big }}
    fault: {{ status: {{ code: 200, body: "{}" }} }}
"#,
        "b".repeat(len)
    );
    let cfg = Config::from_yaml(&yaml, "test").expect("test config is valid");
    FaultServer::start(cfg, ServerOptions::default())
        .await
        .expect("fault server starts")
}

fn h2_target(url: &str, streams: u32, max_body: Option<u64>) -> Arc<Target> {
    let how = harness::http::Connect {
        http2: true,
        streams,
        max_body,
        ..Default::default()
    };
    Arc::new(Target::with(url, &how).expect("server URL parses"))
}

#[tokio::test]
async fn http2_faults_per_stream_and_bodies_past_every_window() {
    const BIG: usize = 3 << 20;
    let s = h2_server(BIG).await;
    let mut conn = Conn::new(h2_target(&s.url(), 1, None));
    let long = Duration::from_secs(30);
    let cases = [
        ("/fault/reset", ErrorKind::Reset, long),
        (
            "/fault/hang",
            ErrorKind::Timeout,
            Duration::from_millis(300),
        ),
        ("/fault/goaway", ErrorKind::Closed, long),
    ];
    for (path, kind, timeout) in cases {
        let err = send(&mut conn, path, timeout).await.expect_err(path);
        assert_eq!(err.kind, kind, "{path}: {err}");
        let ok = send(&mut conn, "/after", Duration::from_secs(10))
            .await
            .unwrap_or_else(|e| panic!("request after {path}: {e}"));
        assert_eq!(ok.status.as_u16(), 200, "after {path}");
        assert_eq!(&ok.body[..], b"ok\n");
    }
    // Answers over the stream's 1 MiB window and, together, the connection's 16 MiB: the
    // client gives the windows back as it reads.
    for _ in 0..7 {
        let r = send(&mut conn, "/big", long).await.expect("a big answer");
        assert_eq!(r.body.len(), BIG);
        assert!(r.body.iter().all(|&b| b == b'b'));
    }
    // A request body over the server's windows: sent as the server opens them.
    let post = Outgoing {
        method: Method::POST,
        uri: "/upload".into(),
        headers: HeaderMap::new(),
        body: Bytes::from(vec![b'u'; BIG]),
    };
    let r = conn.send(post, long).await.expect("a big request");
    assert_eq!(r.status.as_u16(), 200);
    // Streams at once on one connection past what the server allows (256): the rest wait for
    // a stream to end.
    let target = h2_target(&s.url(), 300, None);
    let mut tasks = Vec::new();
    for i in 0..300 {
        let mut c = Conn::new(target.clone());
        tasks.push(tokio::spawn(async move {
            c.send(get(&format!("/many/{i}")), Duration::from_secs(30))
                .await
        }));
    }
    for t in tasks {
        let r = t
            .await
            .expect("the task ends")
            .expect("each request is answered");
        assert_eq!(r.status.as_u16(), 200);
    }
    // An answer over the client's limit fails alone; the connection goes on.
    let small = h2_target(&s.url(), 1, Some(1 << 20));
    let mut conn = Conn::new(small);
    let err = send(&mut conn, "/big", long)
        .await
        .expect_err("over the limit");
    assert!(err.is_over_limit(), "{err}");
    let ok = send(&mut conn, "/after", long)
        .await
        .expect("the next request");
    assert_eq!(ok.status.as_u16(), 200);
    s.shutdown().await;
}

/// A single-packet HTTP/2 burst of 300 against the embedded fault server, which allows 256
/// concurrent streams: each round is spread over two connections and every request of both
/// rounds is answered and journaled (it stalled until every request timed out when a round
/// shared one connection).
#[test]
fn a_single_packet_burst_over_the_servers_stream_limit_completes() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let scenario = dir.path().join("burst.yaml");
    std::fs::write(
        &scenario,
        r#"
name: h2-burst-over-the-stream-limit
server: { orders: { idempotency: unique } }
http: { version: 2 }
phases:
  - name: race
    burst: { size: 300, rounds: 2, sync: single-packet }
    request: { method: POST, path: /orders, headers: { Idempotency-Key: "{{key}}" }, json: { sku: a } }
checks: { duplicates: {} }
"#,
    )
    .expect("write the scenario");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_harness"))
        .arg("run")
        .arg(&scenario)
        .args(["--format", "json", "--report-dir"])
        .arg(dir.path())
        .output()
        .expect("the harness runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let report: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.path().join("report.json")).expect("report.json"),
    )
    .expect("a JSON report");
    assert_eq!(out.status.code(), Some(0), "{stderr}\n{report}");
    assert_eq!(report["requests"]["sent"], 600, "{report}");
    assert_eq!(report["requests"]["errors"], 0, "{report}");
    let checks = report["checks"].as_array().expect("checks");
    let duplicates = checks
        .iter()
        .find(|c| c["name"] == "duplicates")
        .expect("the duplicates check");
    assert_eq!(duplicates["passed"], true, "{duplicates}");
}

/// A POST of `body` to /orders under Idempotency-Key `key`.
fn order(key: &str, body: &'static str) -> Outgoing {
    let mut headers = HeaderMap::new();
    headers.insert("idempotency-key", key.parse().expect("a header value"));
    headers.insert(
        "content-type",
        "application/json".parse().expect("a header value"),
    );
    Outgoing {
        method: Method::POST,
        uri: "/orders".into(),
        headers,
        body: Bytes::from_static(body.as_bytes()),
    }
}

/// `send_unanswered` (a webhook sender's lost acknowledgement): the server gets the whole
/// request — its journal has the body, byte for byte — while the client reads no answer; the
/// connection (HTTP/1.1: closed; HTTP/2: one stream reset) serves the next request.
#[tokio::test]
async fn a_request_sent_unanswered_reaches_the_server_whole() {
    let s = FaultServer::builder()
        .start()
        .await
        .expect("fault server starts");
    let body = r#"{"sku":"unanswered","qty":1}"#;
    for (i, http2) in [false, true].into_iter().enumerate() {
        let connect = harness::http::Connect {
            http2,
            streams: 10,
            ..harness::http::Connect::default()
        };
        let target = Arc::new(Target::with(&s.url(), &connect).expect("server URL parses"));
        let mut conn = Conn::new(target);
        let req = order(&format!("unanswered-{http2}"), body);
        conn.send_unanswered(&req, Duration::from_secs(10), None, false)
            .await
            .unwrap_or_else(|e| panic!("http2 {http2}: sent whole: {e}"));
        let entries = s
            .wait_for(2 * i + 1)
            .await
            .expect("the server journals the request");
        let got = entries.last().expect("an entry");
        assert_eq!(
            (got.method.as_str(), got.path.as_str()),
            ("POST", "/orders")
        );
        assert_eq!(got.body_len, body.len() as u64, "http2 {http2}");
        assert_eq!(
            got.idempotency_key.as_deref(),
            Some(req.headers["idempotency-key"].to_str().unwrap())
        );
        // The next request on the same Conn is answered.
        let next = conn
            .send(get("/orders/none"), Duration::from_secs(10))
            .await
            .unwrap_or_else(|e| panic!("http2 {http2}: the next request: {e}"));
        assert_eq!(next.status.as_u16(), 404, "http2 {http2}");
    }
}

/// A single-packet round in which some members' answers are given up: those come back as
/// `Ok(None)`, the others with their answers, and the server had every request whole.
#[tokio::test]
async fn a_single_packet_round_drops_the_answers_it_is_told_to() {
    let s = FaultServer::builder()
        .start()
        .await
        .expect("fault server starts");
    let connect = harness::http::Connect {
        http2: true,
        streams: 10,
        ..harness::http::Connect::default()
    };
    let target = Arc::new(Target::with(&s.url(), &connect).expect("server URL parses"));
    let burst = harness::http::http2::Burst::new(target);
    let body = r#"{"sku":"round","qty":1}"#;
    let reqs: Vec<Outgoing> = (0..4).map(|i| order(&format!("round-{i}"), body)).collect();
    let drop = [true, false, true, false];
    let (replies, _) = burst
        .single_packet_dropping(reqs, &drop, Duration::from_secs(10))
        .await;
    for (i, r) in replies.iter().enumerate() {
        match r {
            Ok(None) => assert!(drop[i], "{i}: an answer was dropped unasked"),
            Ok(Some(reply)) => {
                assert!(!drop[i], "{i}: an answer to drop was read");
                assert_eq!(reply.status.as_u16(), 201, "{i}");
            }
            Err(e) => panic!("{i}: {e}"),
        }
    }
    let entries = s
        .wait_for(4)
        .await
        .expect("the server journals every request");
    assert!(entries.iter().all(|e| e.body_len == body.len() as u64));
}
