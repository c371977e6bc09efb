//! Each toxic on a real connection: a client on 127.0.0.1 through the proxy to an upstream this
//! test starts, the effect seen by the client, and the connection's journal entry. Every
//! assertion on time is a lower bound (what the toxic adds), never a speed.

mod common;

use std::time::{Duration, Instant};

use common::tcp::{addr, connections, proxy, read_to_end, tcp, Behaviour, Upstream};
use history::{EndedBy, Outcome, TcpEnd};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const LONG: Duration = Duration::from_secs(10);

/// Sends `ping` and reads the echo; how long that took.
async fn round_trip(s: &mut TcpStream) -> Duration {
    let t = Instant::now();
    s.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    tokio::time::timeout(LONG, s.read_exact(&mut buf))
        .await
        .expect("the echo comes")
        .unwrap();
    assert_eq!(&buf, b"ping");
    t.elapsed()
}

#[tokio::test]
async fn without_toxics_bytes_pass_both_ways_and_the_connection_is_journaled() {
    let up = Upstream::start(Behaviour::Echo).await;
    let server = proxy(up.addr, "[]", "", 1).await;
    let mut c = TcpStream::connect(addr(&server)).await.unwrap();
    let local = c.local_addr().unwrap();
    round_trip(&mut c).await;
    c.write_all(b"hello").await.unwrap();
    let mut buf = [0u8; 5];
    c.read_exact(&mut buf).await.unwrap();
    drop(c);
    let j = connections(&server, 1).await;
    let (e, t) = (&j[0], tcp(&j[0]));
    assert_eq!((t.proxy.as_str(), t.number, t.connected), ("p", 1, true));
    assert_eq!(t.client, local.to_string());
    assert_eq!(t.upstream, up.addr.to_string());
    assert_eq!((t.bytes_up, t.bytes_down), (9, 9));
    assert_eq!((t.ended_by, t.end), (EndedBy::Client, TcpEnd::Closed));
    assert_eq!(e.outcome, Outcome::ClientClosed);
    assert!(t.toxics.is_empty() && t.toxic.is_none());
    assert!((e.method.as_str(), e.status) == ("", None));
    assert!(e.t_done_us >= e.t_recv_us);
}

#[tokio::test]
async fn latency_delays_every_answer_by_its_milliseconds() {
    let up = Upstream::start(Behaviour::Echo).await;
    let server = proxy(
        up.addr,
        "[{ type: latency, attributes: { latency: 300 } }]",
        "",
        1,
    )
    .await;
    let mut c = TcpStream::connect(addr(&server)).await.unwrap();
    for _ in 0..2 {
        let took = round_trip(&mut c).await;
        assert!(took >= Duration::from_millis(300), "{took:?}");
    }
    drop(c);
    let t = connections(&server, 1).await;
    let t = tcp(&t[0]);
    assert_eq!(t.toxics.len(), 1);
    assert_eq!(
        (
            t.toxics[0].name.as_str(),
            t.toxics[0].kind.as_str(),
            t.toxics[0].stream.as_str()
        ),
        ("latency_downstream", "latency", "downstream")
    );
}

#[tokio::test]
async fn bandwidth_holds_the_answer_to_its_rate() {
    // 3,000 bytes at 10 KB/s: 300 ms.
    let up = Upstream::start(Behaviour::SendThenClose(3000)).await;
    let server = proxy(
        up.addr,
        "[{ type: bandwidth, attributes: { rate: 10 } }]",
        "",
        1,
    )
    .await;
    let t = Instant::now();
    let mut c = TcpStream::connect(addr(&server)).await.unwrap();
    let (got, end) = read_to_end(&mut c, LONG).await;
    assert!(end.is_ok(), "{end:?}");
    assert_eq!(got.len(), 3000);
    assert!(
        t.elapsed() >= Duration::from_millis(280),
        "{:?}",
        t.elapsed()
    );
}

#[tokio::test]
async fn slow_close_holds_the_close_back() {
    let up = Upstream::start(Behaviour::SendThenClose(3)).await;
    let server = proxy(
        up.addr,
        "[{ type: slow_close, attributes: { delay: 400 } }]",
        "",
        1,
    )
    .await;
    let mut c = TcpStream::connect(addr(&server)).await.unwrap();
    let mut buf = [0u8; 3];
    c.read_exact(&mut buf).await.unwrap();
    let t = Instant::now();
    let (rest, end) = read_to_end(&mut c, LONG).await;
    assert!(rest.is_empty() && end.is_ok(), "{end:?}");
    assert!(
        t.elapsed() >= Duration::from_millis(350),
        "{:?}",
        t.elapsed()
    );
    drop(c);
    let j = connections(&server, 1).await;
    assert_eq!(tcp(&j[0]).ended_by, EndedBy::Upstream);
    assert_eq!(j[0].outcome, Outcome::Responded);
}

#[tokio::test]
async fn timeout_swallows_the_request_and_closes_after_its_time() {
    let up = Upstream::start(Behaviour::Echo).await;
    let server = proxy(
        up.addr,
        "[{ type: timeout, stream: upstream, attributes: { timeout: 300 } }]",
        "",
        1,
    )
    .await;
    let t = Instant::now();
    let mut c = TcpStream::connect(addr(&server)).await.unwrap();
    c.write_all(b"ping").await.unwrap();
    let (got, _) = read_to_end(&mut c, LONG).await;
    assert!(got.is_empty(), "nothing gets through: {got:?}");
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    let j = connections(&server, 1).await;
    let tc = tcp(&j[0]);
    assert_eq!(
        (tc.ended_by, tc.end, tc.toxic.as_deref()),
        (EndedBy::Proxy, TcpEnd::TimedOut, Some("timeout_upstream"))
    );
    assert_eq!((tc.bytes_up, tc.dropped_up), (0, 4));
    assert_eq!(j[0].outcome, Outcome::Hung);
}

#[tokio::test]
async fn reset_peer_resets_the_connection_when_data_comes() {
    let up = Upstream::start(Behaviour::Echo).await;
    let server = proxy(
        up.addr,
        "[{ type: reset_peer, stream: upstream, attributes: { timeout: 0 } }]",
        "",
        1,
    )
    .await;
    let mut c = TcpStream::connect(addr(&server)).await.unwrap();
    c.write_all(b"ping").await.unwrap();
    let (got, end) = read_to_end(&mut c, LONG).await;
    assert!(got.is_empty());
    let e = end.expect_err("a reset, not a close");
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
    let j = connections(&server, 1).await;
    assert_eq!(
        (tcp(&j[0]).end, tcp(&j[0]).toxic.as_deref()),
        (TcpEnd::Reset, Some("reset_peer_upstream"))
    );
    assert_eq!(j[0].outcome, Outcome::Reset);
}

#[tokio::test]
async fn slicer_cuts_an_answer_into_small_late_pieces() {
    let up = Upstream::start(Behaviour::SendThenClose(100)).await;
    let server = proxy(
        up.addr,
        "[{ type: slicer, attributes: { average_size: 10, delay: 20000 } }]",
        "",
        1,
    )
    .await;
    let t = Instant::now();
    let mut c = TcpStream::connect(addr(&server)).await.unwrap();
    let mut sizes = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = tokio::time::timeout(LONG, c.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        if n == 0 {
            break;
        }
        sizes.push(n);
    }
    assert_eq!(sizes.iter().sum::<usize>(), 100);
    // Sixteen slices of 6 or 7 bytes; a reader scheduled late on a busy machine may find two
    // in one read, but not most of them.
    assert!(sizes.len() >= 8, "{sizes:?}");
    let mut sorted = sizes.clone();
    sorted.sort_unstable();
    assert!(sorted[sorted.len() / 2] <= 10, "{sizes:?}");
    // Ten slices, 20 ms apart.
    assert!(
        t.elapsed() >= Duration::from_millis(180),
        "{:?}",
        t.elapsed()
    );
}

#[tokio::test]
async fn limit_data_closes_after_its_bytes() {
    let up = Upstream::start(Behaviour::SendThenClose(200)).await;
    let server = proxy(
        up.addr,
        "[{ type: limit_data, attributes: { bytes: 50 } }]",
        "",
        1,
    )
    .await;
    let mut c = TcpStream::connect(addr(&server)).await.unwrap();
    let (got, _) = read_to_end(&mut c, LONG).await;
    assert_eq!(got.len(), 50);
    let j = connections(&server, 1).await;
    let tc = tcp(&j[0]);
    assert_eq!(
        (tc.end, tc.toxic.as_deref(), tc.bytes_down),
        (TcpEnd::Cut, Some("limit_data_downstream"), 50)
    );
}

#[tokio::test]
async fn a_blackhole_answers_nothing_and_closes_nothing_until_it_goes() {
    let up = Upstream::start(Behaviour::Echo).await;
    let server = proxy(
        up.addr,
        "[{ type: blackhole, stream: upstream, match: { until: 800ms } }]",
        "",
        1,
    )
    .await;
    let mut c = TcpStream::connect(addr(&server)).await.unwrap();
    c.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    let early = tokio::time::timeout(Duration::from_millis(400), c.read(&mut buf)).await;
    assert!(
        early.is_err(),
        "nothing answers and nothing closes: {early:?}"
    );
    // The cable back: what was held arrives.
    tokio::time::timeout(LONG, c.read_exact(&mut buf))
        .await
        .expect("the held request goes through once the window ends")
        .unwrap();
    assert_eq!(&buf, b"ping");
    drop(c);
    let j = connections(&server, 1).await;
    assert_eq!(tcp(&j[0]).toxics[0].kind, "blackhole");
    assert_eq!(tcp(&j[0]).end, TcpEnd::Closed);
}

#[tokio::test]
async fn close_after_cuts_a_quiet_connection_after_its_time() {
    let up = Upstream::start(Behaviour::Echo).await;
    let server = proxy(
        up.addr,
        "[{ type: close_after, attributes: { time: 300, reset: true } }]",
        "",
        1,
    )
    .await;
    let t = Instant::now();
    let mut c = TcpStream::connect(addr(&server)).await.unwrap();
    let (_, end) = read_to_end(&mut c, LONG).await;
    let e = end.expect_err("reset");
    assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset, "{e}");
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "{:?}",
        t.elapsed()
    );
    let j = connections(&server, 1).await;
    assert_eq!(
        (tcp(&j[0]).end, tcp(&j[0]).toxic.as_deref()),
        (TcpEnd::Reset, Some("close_after_downstream"))
    );
}

#[tokio::test]
async fn close_after_bytes_cuts_mid_answer() {
    let up = Upstream::start(Behaviour::SendThenClose(1000)).await;
    let server = proxy(
        up.addr,
        "[{ type: close_after, attributes: { bytes: 100 } }]",
        "",
        1,
    )
    .await;
    let mut c = TcpStream::connect(addr(&server)).await.unwrap();
    let (got, _) = read_to_end(&mut c, LONG).await;
    assert_eq!(got.len(), 100);
    let j = connections(&server, 1).await;
    assert_eq!(
        (tcp(&j[0]).end, tcp(&j[0]).ended_by),
        (TcpEnd::Cut, EndedBy::Proxy)
    );
    assert_eq!(j[0].outcome, Outcome::Dropped);
}

#[tokio::test]
async fn a_disabled_proxy_refuses_connections() {
    let up = Upstream::start(Behaviour::Echo).await;
    // A port that was free a moment ago.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let yaml = format!(
        "proxies:\n  - {{ name: p, listen: \"{free}\", upstream: \"{}\", enabled: false }}\n",
        up.addr
    );
    let server = fault_server::FaultServer::start(
        fault_server::Config::from_yaml(&yaml, "test").unwrap(),
        fault_server::ServerOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(server.proxy_addr("p"), None);
    assert_eq!(server.proxies().get("p").unwrap()["enabled"], false);
    let refused = TcpStream::connect(free).await.expect_err("nothing listens");
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    // Enabled again (what the API's `enabled: true` does), it forwards.
    server
        .proxies()
        .update("p", None, None, Some(true))
        .unwrap();
    let mut c = TcpStream::connect(free).await.unwrap();
    round_trip(&mut c).await;
}

#[tokio::test]
async fn toxicity_zero_has_no_effect() {
    let up = Upstream::start(Behaviour::SendThenClose(200)).await;
    let server = proxy(
        up.addr,
        "[{ type: limit_data, toxicity: 0, attributes: { bytes: 10 } }]",
        "",
        1,
    )
    .await;
    let mut c = TcpStream::connect(addr(&server)).await.unwrap();
    let (got, _) = read_to_end(&mut c, LONG).await;
    assert_eq!(got.len(), 200);
    drop(c);
    let j = connections(&server, 1).await;
    assert!(tcp(&j[0]).toxics.is_empty());
}
