//! The TCP proxies beyond one toxic: which connections a toxic acts on (the Nth, a seeded
//! toxicity, a window, client addresses), changes reaching open connections, the journal and
//! the metrics, the bounds, and bad input.

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::tcp::{addr, connections, proxy, read_to_end, tcp, Behaviour, Upstream};
use fault_server::{Config, FaultServer, ServerOptions, StartError};
use history::{EndedBy, Outcome, TcpEnd};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

const LONG: Duration = Duration::from_secs(10);

/// Opens `n` connections one after the other, each sending `ping` and reading what comes back
/// (an echo, unless a toxic swallows it), then closing.
async fn connect_n(at: SocketAddr, n: usize) {
    for _ in 0..n {
        let mut c = TcpStream::connect(at).await.unwrap();
        c.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        let _ = tokio::time::timeout(Duration::from_millis(500), c.read_exact(&mut buf)).await;
    }
}

/// Sends `ping`, reads the echo: how long that took.
async fn rt(c: &mut TcpStream) -> Duration {
    let t = Instant::now();
    c.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    tokio::time::timeout(LONG, c.read_exact(&mut buf))
        .await
        .expect("the echo comes")
        .unwrap();
    t.elapsed()
}

/// The numbers of the connections a toxic acted on.
fn affected(j: &[history::Entry]) -> BTreeSet<u64> {
    j.iter()
        .filter(|e| !tcp(e).toxics.is_empty())
        .map(|e| tcp(e).number)
        .collect()
}

#[tokio::test]
async fn a_toxic_acts_on_the_connections_its_counts_name() {
    let up = Upstream::start(Behaviour::Echo).await;
    let server = proxy(
        up.addr,
        "[{ type: latency, attributes: { latency: 1 }, match: { connections: [2, \"every 4\"] } }]",
        "",
        1,
    )
    .await;
    connect_n(addr(&server), 8).await;
    let j = connections(&server, 8).await;
    assert_eq!(affected(&j), BTreeSet::from([2, 4, 8]));
}

#[tokio::test]
async fn toxicity_is_a_seeded_draw_the_same_in_every_run_with_the_seed() {
    let up = Upstream::start(Behaviour::Echo).await;
    let toxic = "[{ type: latency, toxicity: 0.5, attributes: { latency: 1 } }]";
    let mut runs = Vec::new();
    for seed in [7, 7, 8] {
        let server = proxy(up.addr, toxic, "", seed).await;
        connect_n(addr(&server), 24).await;
        let j = connections(&server, 24).await;
        for e in &j {
            let t = tcp(e);
            if let Some(applied) = t.toxics.first() {
                let draw = applied.draw.expect("a draw below 1 is journaled");
                assert!(draw < 0.5, "{draw}");
            }
        }
        runs.push(affected(&j));
    }
    assert_eq!(runs[0], runs[1], "same seed, same connections");
    assert_ne!(runs[0], runs[2], "another seed, others");
    assert!((4..=20).contains(&runs[0].len()), "{:?}", runs[0]);
}

#[tokio::test]
async fn a_window_starts_acting_on_a_connection_that_is_already_open() {
    let up = Upstream::start(Behaviour::Echo).await;
    let server = proxy(
        up.addr,
        "[{ type: latency, attributes: { latency: 200 }, match: { from: 300ms } }]",
        "",
        1,
    )
    .await;
    let mut c = TcpStream::connect(addr(&server)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let t = Instant::now();
    c.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    c.read_exact(&mut buf).await.unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
    drop(c);
    let j = connections(&server, 1).await;
    let (opened, applied) = (j[0].t_recv_us, &tcp(&j[0]).toxics[0]);
    // The toxic was installed as the server started (its clock's zero, or just after): it began
    // to act on the connection, open since `opened`, at 300 ms.
    assert!(opened < 300_000, "opened at {opened} µs");
    assert!(applied.t_us >= 300_000, "began at {} µs", applied.t_us);
}

#[tokio::test]
async fn a_toxic_for_one_client_address_leaves_the_others_alone() {
    let up = Upstream::start(Behaviour::SendThenClose(100)).await;
    let server = proxy(
        up.addr,
        "[{ type: limit_data, attributes: { bytes: 10 }, match: { clients: 127.0.0.2 } }]",
        "",
        1,
    )
    .await;
    let from = |ip: &str| {
        let s = TcpSocket::new_v4().unwrap();
        s.bind(format!("{ip}:0").parse().unwrap()).unwrap();
        s
    };
    let mut other = from("127.0.0.1").connect(addr(&server)).await.unwrap();
    let mut chosen = from("127.0.0.2").connect(addr(&server)).await.unwrap();
    assert_eq!(read_to_end(&mut other, LONG).await.0.len(), 100);
    assert_eq!(read_to_end(&mut chosen, LONG).await.0.len(), 10);
}

#[tokio::test]
async fn a_toxic_added_or_removed_reaches_connections_already_open() {
    let up = Upstream::start(Behaviour::Echo).await;
    let server = proxy(up.addr, "[]", "", 1).await;
    let mut c = TcpStream::connect(addr(&server)).await.unwrap();
    rt(&mut c).await;
    let toxic = fault_server::ToxicConfig::new("latency", fault_server::Stream::Downstream)
        .attribute("latency", 250);
    server
        .proxies()
        .add_toxic("p", toxic.spec().unwrap())
        .unwrap();
    assert!(rt(&mut c).await >= Duration::from_millis(250));
    server
        .proxies()
        .remove_toxic("p", "latency_downstream")
        .unwrap();
    // Gone: the next answer is not held (what it takes is not asserted, only that it came).
    rt(&mut c).await;
    drop(c);
    let j = connections(&server, 1).await;
    assert_eq!(tcp(&j[0]).toxics.len(), 1);
}

#[tokio::test]
async fn removing_a_timeout_closes_the_connections_it_held() {
    let up = Upstream::start(Behaviour::Echo).await;
    let server = proxy(
        up.addr,
        "[{ name: stall, type: timeout, attributes: { timeout: 0 } }]",
        "",
        1,
    )
    .await;
    let mut c = TcpStream::connect(addr(&server)).await.unwrap();
    c.write_all(b"ping").await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.proxies().remove_toxic("p", "stall").unwrap();
    let (got, _) = read_to_end(&mut c, LONG).await;
    assert!(got.is_empty());
    let j = connections(&server, 1).await;
    assert_eq!(
        (tcp(&j[0]).end, tcp(&j[0]).toxic.as_deref()),
        (TcpEnd::TimedOut, Some("stall"))
    );
}

#[tokio::test]
async fn an_upstream_that_refuses_is_journaled_with_the_reason() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let server = proxy(closed, "[]", "", 1).await;
    let mut c = TcpStream::connect(addr(&server)).await.unwrap();
    let (got, _) = read_to_end(&mut c, LONG).await;
    assert!(got.is_empty());
    let j = connections(&server, 1).await;
    let t = tcp(&j[0]);
    assert_eq!(
        (t.connected, t.end, t.ended_by),
        (false, TcpEnd::Refused, EndedBy::Upstream)
    );
    let why = t.connect_error.as_deref().unwrap_or_default();
    assert!(why.to_lowercase().contains("refused"), "{why}");
    assert_eq!(j[0].outcome, Outcome::UpstreamError);
}

#[tokio::test]
async fn connections_over_the_limit_are_closed_and_journaled_rejected() {
    let up = Upstream::start(Behaviour::Echo).await;
    let server = proxy(up.addr, "[]", "    max_connections: 1\n", 1).await;
    let mut first = TcpStream::connect(addr(&server)).await.unwrap();
    first.write_all(b"ping").await.unwrap();
    let mut buf = [0u8; 4];
    first.read_exact(&mut buf).await.unwrap();
    let mut second = TcpStream::connect(addr(&server)).await.unwrap();
    let (got, _) = read_to_end(&mut second, LONG).await;
    assert!(got.is_empty());
    let j = connections(&server, 1).await;
    assert_eq!(tcp(&j[0]).end, TcpEnd::Rejected);
    assert_eq!(j[0].rejected.as_deref(), Some("connection-limit"));
    assert_eq!(up.connections.load(std::sync::atomic::Ordering::SeqCst), 1);
}

/// The most a loopback connection's two kernel buffers can hold, from the kernel's own limits.
fn kernel_buffers() -> u64 {
    let max = |f: &str| {
        std::fs::read_to_string(f)
            .ok()
            .and_then(|t| {
                t.split_whitespace()
                    .nth(2)
                    .and_then(|n| n.parse::<u64>().ok())
            })
            .unwrap_or(8 << 20)
    };
    max("/proc/sys/net/ipv4/tcp_wmem") + max("/proc/sys/net/ipv4/tcp_rmem")
}

#[tokio::test]
async fn a_client_that_never_reads_cannot_make_the_proxy_hold_more_than_its_buffer() {
    let up = Upstream::start(Behaviour::Pour).await;
    let server = proxy(
        up.addr,
        "[{ type: latency, attributes: { latency: 1 } }]",
        "    buffer: 64KiB\n",
        1,
    )
    .await;
    let c = TcpStream::connect(addr(&server)).await.unwrap();
    // The upstream pours; the client reads nothing.
    let mut last = 0;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let now = up.poured.load(std::sync::atomic::Ordering::SeqCst);
        if now == last && now > 0 {
            break;
        }
        last = now;
    }
    let poured = up.poured.load(std::sync::atomic::Ordering::SeqCst);
    // Two connections' kernel buffers (upstream to proxy, proxy to client) and the proxy's own
    // 64 KiB: beyond that the upstream's writes must block.
    let bound = 2 * kernel_buffers() + (64 << 10);
    assert!(
        poured > 0 && poured <= bound,
        "{poured} bytes poured, bound {bound}"
    );
    drop(c);
}

#[tokio::test]
async fn the_journal_endpoint_stats_and_metrics_count_connections_apart_from_requests() {
    let up = Upstream::start(Behaviour::Echo).await;
    let server = proxy(
        up.addr,
        "[{ type: latency, attributes: { latency: 1 } }]",
        "",
        1,
    )
    .await;
    connect_n(addr(&server), 3).await;
    connections(&server, 3).await;
    let client = reqwest::Client::new();
    let text = |path: &'static str| {
        let (client, url) = (client.clone(), server.url());
        async move {
            client
                .get(format!("{url}{path}"))
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap()
        }
    };
    let lines = text("/__harness/journal").await;
    assert_eq!(
        lines.lines().filter(|l| l.contains("\"tcp\":")).count(),
        3,
        "{lines}"
    );
    let stats: serde_json::Value = serde_json::from_str(&text("/__harness/stats").await).unwrap();
    assert_eq!(stats["requests"], 0, "{stats}");
    assert_eq!(stats["connections"]["p"]["connections"], 3, "{stats}");
    assert_eq!(
        stats["connections"]["p"]["by_toxic"]["latency_downstream"],
        3
    );
    let metrics = text("/__harness/metrics").await;
    assert!(
        metrics.contains(r#"fault_server_proxy_connections_total{proxy="p",end="closed"} 3"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"fault_server_proxy_bytes_total{proxy="p",direction="upstream"} 12"#)
    );
    assert!(metrics.contains(r#"fault_server_proxy_open_connections{proxy="p"} 0"#));
}

#[tokio::test]
async fn a_reset_numbers_connections_from_one_again() {
    let up = Upstream::start(Behaviour::Echo).await;
    let server = proxy(
        up.addr,
        "[{ type: latency, attributes: { latency: 1 }, match: { connections: 1 } }]",
        "",
        1,
    )
    .await;
    connect_n(addr(&server), 2).await;
    connections(&server, 2).await;
    server.reset().await.unwrap();
    connect_n(addr(&server), 1).await;
    let j = connections(&server, 1).await;
    assert_eq!((tcp(&j[0]).number, tcp(&j[0]).toxics.len()), (1, 1));
}

#[tokio::test]
async fn a_listen_address_in_use_is_one_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let at = taken.local_addr().unwrap();
    let cfg = Config::from_yaml(
        &format!("proxies:\n  - {{ name: db, listen: \"{at}\", upstream: \"127.0.0.1:5432\" }}\n"),
        "test",
    )
    .unwrap();
    let err = match FaultServer::start(cfg, ServerOptions::default()).await {
        Err(e) => e,
        Ok(_) => panic!("a taken address cannot be listened on"),
    };
    assert!(matches!(err, StartError::Proxy(_)), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("proxy db: cannot listen on {at}: ")),
        "{msg}"
    );
    assert!(msg.to_lowercase().contains("in use"), "{msg}");
}

#[test]
fn bad_proxies_in_a_config_name_the_file_line_and_field() {
    let cases = [
        (
            "proxies:\n  - name: db\n    listen: 127.0.0.1:0\n    upstream: 127.0.0.1:5432\n    toxics:\n      - type: latencyy\n",
            "cfg.yaml:6:",
            "proxies[0].toxics[0].type",
            "unknown toxic type \"latencyy\"",
        ),
        (
            "proxies:\n  - name: db\n    listen: 127.0.0.1:0\n    upstream: 127.0.0.1:5432\n    toxics:\n      - type: latency\n        attributes: { latency: -5 }\n",
            "cfg.yaml:7:",
            "proxies[0].toxics[0].attributes.latency",
            "out of range",
        ),
        (
            "proxies:\n  - name: db\n    listen: 127.0.0.1:0\n    upstream: 127.0.0.1:5432\n    toxics:\n      - type: latency\n        toxicity: 1.5\n",
            "cfg.yaml:7:",
            "proxies[0].toxics[0].toxicity",
            "give a probability from 0 to 1",
        ),
        (
            "proxies:\n  - name: db\n    listen: 127.0.0.1\n    upstream: 127.0.0.1:5432\n",
            "cfg.yaml:3:",
            "proxies[0].listen",
            "is not host:port",
        ),
        (
            "proxies:\n  - { name: a, listen: 127.0.0.1:0, upstream: 127.0.0.1:1 }\n  - { name: a, listen: 127.0.0.1:0, upstream: 127.0.0.1:1 }\n",
            "cfg.yaml:3:",
            "proxies[1].name",
            "already configured",
        ),
        (
            "proxies:\n  - name: db\n    listen: 127.0.0.1:0\n    upstream: 127.0.0.1:5432\n    toxics:\n      - type: latency\n        stream: sideways\n",
            "cfg.yaml:7:",
            "stream",
            "unknown variant `sideways`",
        ),
    ];
    for (yaml, place, field, words) in cases {
        let err = Config::from_yaml(yaml, "cfg.yaml")
            .expect_err(yaml)
            .to_string();
        assert!(err.starts_with(place), "{err}");
        assert!(err.contains(field), "{err}");
        assert!(err.contains(words), "{err}");
    }
}

#[tokio::test]
async fn the_builder_makes_a_proxy_equal_to_the_files() {
    let up = Upstream::start(Behaviour::SendThenClose(100)).await;
    let built = fault_server::ProxyConfig::new("db", "127.0.0.1:0", up.addr.to_string()).toxic(
        fault_server::ToxicConfig::new("limit_data", fault_server::Stream::Downstream)
            .attribute("bytes", 10),
    );
    let read = Config::from_yaml(
        &format!(
            "proxies:\n  - {{ name: db, listen: \"127.0.0.1:0\", upstream: \"{}\", toxics: [{{ type: limit_data, attributes: {{ bytes: 10 }} }}] }}\n",
            up.addr
        ),
        "t",
    )
    .unwrap();
    let builder = FaultServer::builder().proxy(built);
    assert_eq!(builder.config().unwrap().proxies, read.proxies);
    let server = builder.start().await.unwrap();
    let mut c = TcpStream::connect(server.proxy_addr("db").unwrap())
        .await
        .unwrap();
    assert_eq!(read_to_end(&mut c, LONG).await.0.len(), 10);
}
