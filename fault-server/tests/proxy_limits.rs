//! Proxy mode against upstreams that hang or answer huge, and clients that open hundreds of
//! streams or leave: what the binary holds stays bounded — connections to the upstream, the
//! descriptors the control API needs, the memory of answers in flight — and a forward whose
//! client left is cancelled.
//!
//! The upstreams are raw TCP servers of the test's own; waits are bounded loops on conditions.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::binary::{start, start_with};
use common::frames::*;

/// An upstream of the test's own: counts the connections it accepted and saw closed; answers
/// each request with `answer`, or, with none, never answers.
struct Upstream {
    addr: SocketAddr,
    accepted: Arc<AtomicUsize>,
    closed: Arc<AtomicUsize>,
}

fn upstream(answer: Option<Vec<u8>>) -> Upstream {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind the upstream");
    let addr = listener.local_addr().expect("its address");
    let accepted = Arc::new(AtomicUsize::new(0));
    let closed = Arc::new(AtomicUsize::new(0));
    let answer = answer.map(Arc::new);
    {
        let (accepted, closed) = (accepted.clone(), closed.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                accepted.fetch_add(1, Ordering::SeqCst);
                let closed = closed.clone();
                let answer = answer.clone();
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 64 << 10];
                    let mut seen = Vec::new();
                    loop {
                        match conn.read(&mut buf) {
                            Ok(0) | Err(_) => break,
                            Ok(n) => seen.extend_from_slice(&buf[..n]),
                        }
                        // One answer per request head (the requests here have no body).
                        while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                            seen.drain(..end + 4);
                            if let Some(a) = &answer {
                                if conn.write_all(a).is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    closed.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
    }
    Upstream {
        addr,
        accepted,
        closed,
    }
}

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

#[test]
fn streams_at_a_hanging_upstream_cost_a_bounded_number_of_connections() {
    let up = upstream(None);
    // 256 descriptors: the default number of upstream connections is derived from them.
    let s = start_with(
        &format!(
            "upstream: {{ url: \"http://{}\", timeout: 60s }}\n",
            up.addr
        ),
        Some(256),
    );
    let mut clients: Vec<Client> = (0..4).map(|_| Client::connect(s.addr, &[])).collect();
    for c in &mut clients {
        for i in 0..256u32 {
            c.request(2 * i + 1, "GET", "/slow", &[], true);
        }
    }
    // The default bound, a quarter of the descriptors beyond a reserve of 96, is reached (1,024
    // streams wait for it), and a moment later not passed.
    let bound = (256 - 96) / 4;
    assert!(
        eventually(Duration::from_secs(20), || up
            .accepted
            .load(Ordering::SeqCst)
            >= bound),
        "requests reach the upstream: {}",
        up.accepted.load(Ordering::SeqCst)
    );
    std::thread::sleep(Duration::from_millis(500));
    let open = up.accepted.load(Ordering::SeqCst);
    assert_eq!(
        open, bound,
        "{open} connections to the upstream for 1,024 waiting streams"
    );
    assert!(s.healthy(), "the control API still answers");
    assert!(
        !s.log().contains("Too many open files"),
        "descriptors ran out: {}",
        s.log()
    );
    // The control API's reads still get their answers beside them.
    let stats = s.get("/__harness/stats");
    assert!(stats.starts_with("HTTP/1.0 200"), "{stats}");
}

#[test]
fn a_request_that_waited_for_a_connection_is_sent_with_the_whole_timeout_or_not_at_all() {
    let up = upstream(None);
    let s = start(&format!(
        "upstream: {{ url: \"http://{}\", timeout: 3s, max_connections: 1 }}\n",
        up.addr
    ));
    let ask = |i: usize| {
        let addr = s.addr;
        std::thread::spawn(move || {
            let asked = Instant::now();
            let mut c = TcpStream::connect(addr).expect("connect");
            c.set_read_timeout(Some(Duration::from_secs(30)))
                .expect("a read timeout");
            write!(
                c,
                "GET /slow/{i} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
            )
            .expect("a request");
            let mut answer = String::new();
            let _ = c.read_to_string(&mut answer);
            (answer, asked.elapsed())
        })
    };
    // The first holds the one connection, at an upstream that never answers, for its 3 s.
    let first = ask(0);
    assert!(
        eventually(Duration::from_secs(20), || up
            .accepted
            .load(Ordering::SeqCst)
            == 1),
        "the first request reaches the upstream"
    );
    // Five more, 1.5 s later: the connection comes free 1.5 s into their wait; one of them
    // gets it, the others' waits end 1.5 s after that.
    std::thread::sleep(Duration::from_millis(1500));
    let waiting: Vec<_> = (1..6).map(ask).collect();
    let first = first.join().expect("the first client");
    assert!(first.0.contains("did not answer within 3s"), "{first:?}");
    let answered: Vec<(String, Duration)> = waiting
        .into_iter()
        .map(|t| t.join().expect("a client"))
        .collect();
    for (a, _) in &answered {
        assert!(a.starts_with("HTTP/1.1 504"), "{a}");
    }
    // One of them was sent, with the whole 3 s: answered about 4.5 s after it asked (its wait,
    // then the timeout), not at its first 3 s (the wait and what was left of it). The rest were
    // never sent: a request sent with what its wait left would reach the upstream, and have its
    // effect there, while its client is told 504.
    let sent: Vec<&(String, Duration)> = answered
        .iter()
        .filter(|(a, _)| a.contains("did not answer within"))
        .collect();
    assert_eq!(sent.len(), 1, "{answered:#?}");
    assert!(sent[0].1 >= Duration::from_millis(4000), "{answered:#?}");
    assert_eq!(
        answered
            .iter()
            .filter(|(a, _)| a.contains("came free"))
            .count(),
        4,
        "{answered:#?}"
    );
    assert_eq!(up.accepted.load(Ordering::SeqCst), 2, "{answered:#?}");
}

#[test]
fn a_forward_whose_client_left_is_cancelled() {
    let up = upstream(None);
    let s = start(&format!(
        "upstream: {{ url: \"http://{}\", timeout: 60s }}\n",
        up.addr
    ));
    let mut c = TcpStream::connect(s.addr).expect("connect");
    c.write_all(b"GET /slow HTTP/1.1\r\nhost: x\r\n\r\n")
        .expect("a request");
    assert!(
        eventually(Duration::from_secs(20), || up
            .accepted
            .load(Ordering::SeqCst)
            == 1),
        "the request reaches the upstream"
    );
    drop(c);
    assert!(
        eventually(Duration::from_secs(20), || up.closed.load(Ordering::SeqCst)
            == 1),
        "the forward goes on for a client that left"
    );
    let j = {
        let mut j = s.journal();
        eventually(Duration::from_secs(20), || {
            j = s.journal();
            !j.is_empty()
        });
        j
    };
    assert_eq!(j.len(), 1, "{j:#?}");
    assert_eq!(j[0]["outcome"], "client_closed");
    assert_eq!(j[0]["forwarded"], true);
    assert_eq!(j[0]["upstream_status"], serde_json::Value::Null);
}

#[test]
fn upstream_answers_held_at_once_are_bounded_by_the_response_memory() {
    let len = 15 << 20;
    let mut answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {len}\r\n\r\n").into_bytes();
    answer.resize(answer.len() + len, b'u');
    let up = upstream(Some(answer));
    let s = start(&format!(
        "limits: {{ response_memory: 32MiB, send_timeout: 60s }}\nupstream: {{ url: \"http://{}\", timeout: 60s }}\n",
        up.addr
    ));
    let before = s.rss_kb();
    // Ten streams whose window never opens: every answer the server takes stays in its memory.
    let mut c = Client::connect(s.addr, &[(SETTINGS_INITIAL_WINDOW_SIZE, 0)]);
    let streams: Vec<u32> = (0..10).map(|i| 2 * i + 1).collect();
    for id in &streams {
        c.request(*id, "GET", "/huge", &[], true);
    }
    let mut statuses = std::collections::HashMap::new();
    while statuses.len() < streams.len() {
        let f = c.next().expect("every stream gets an answer's head");
        if let Some(fields) = c.fields(&f) {
            let retry = fields.iter().any(|(n, v)| n == "retry-after" && v == "1");
            statuses.insert(f.stream, (status(&fields), retry));
        }
    }
    let held = statuses.values().filter(|(s, _)| *s == Some(200)).count();
    let refused: Vec<_> = statuses.values().filter(|(s, _)| *s == Some(503)).collect();
    assert_eq!(held, 2, "two answers of 15 MiB fit in 32 MiB: {statuses:?}");
    assert_eq!(refused.len(), 8, "{statuses:?}");
    assert!(
        refused.iter().all(|(_, retry)| *retry),
        "503 with Retry-After"
    );
    let growth = s.rss_kb().saturating_sub(before);
    assert!(growth < 96 * 1024, "RSS grew by {growth} kB");
    assert!(s.healthy());
}
