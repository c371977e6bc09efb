//! Shared by the fault server's integration tests: a server on 127.0.0.1:0 and raw HTTP helpers.
#![allow(dead_code)]

pub mod binary;
pub mod frames;
pub mod grpc;
pub mod tcp;

use std::time::Duration;

use fault_server::{Config, FaultServer, ServerOptions};
use history::Entry;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Starts a server with the given YAML config on a free loopback port.
pub async fn start(yaml: &str) -> FaultServer {
    let cfg = Config::from_yaml(yaml, "test").expect("test config is valid");
    FaultServer::start(cfg, ServerOptions::default())
        .await
        .expect("server starts")
}

/// Starts a server with the given YAML config whose connections are served on `threads`
/// threads of their own, as the binary serves them.
pub async fn start_on_threads(yaml: &str, threads: usize) -> FaultServer {
    let cfg = Config::from_yaml(yaml, "test").expect("test config is valid");
    let opts = ServerOptions {
        threads: Some(threads),
        ..ServerOptions::default()
    };
    FaultServer::start(cfg, opts).await.expect("server starts")
}

/// The journal once every request received so far is in it.
pub async fn journal(s: &FaultServer) -> Vec<Entry> {
    assert!(
        s.settle(Duration::from_secs(10)).await,
        "journal did not settle"
    );
    s.journal().entries()
}

/// A raw HTTP/1.1 response.
#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Raw {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or(serde_json::Value::Null)
    }
}

/// Request bytes for `method path` with optional key and JSON body, closing the connection after.
pub fn request_bytes(method: &str, path: &str, key: Option<&str>, body: &str) -> Vec<u8> {
    let mut s = format!("{method} {path} HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n");
    if let Some(k) = key {
        s.push_str(&format!("idempotency-key: {k}\r\n"));
    }
    if !body.is_empty() {
        s.push_str(&format!(
            "content-type: application/json\r\ncontent-length: {}\r\n",
            body.len()
        ));
    }
    s.push_str("\r\n");
    s.push_str(body);
    s.into_bytes()
}

/// Sends prepared bytes on an open connection and reads the whole response (the server closes).
pub async fn exchange(mut conn: TcpStream, bytes: &[u8]) -> std::io::Result<Raw> {
    conn.write_all(bytes).await?;
    let mut buf = Vec::new();
    conn.read_to_end(&mut buf).await?;
    parse(&buf).ok_or_else(|| {
        std::io::Error::other(format!(
            "unparsable response: {:?}",
            String::from_utf8_lossy(&buf)
        ))
    })
}

pub fn parse(buf: &[u8]) -> Option<Raw> {
    let text = String::from_utf8_lossy(buf);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let mut lines = head.lines();
    let status = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Some(Raw {
        status,
        headers,
        body: body.to_string(),
    })
}

/// Fires `n` requests built by `make(i)` at once: connections are opened first, then released
/// together, so the server really sees them concurrently.
pub async fn burst(
    addr: std::net::SocketAddr,
    n: usize,
    make: impl Fn(usize) -> Vec<u8>,
) -> Vec<Raw> {
    let mut conns = Vec::new();
    for _ in 0..n {
        conns.push(TcpStream::connect(addr).await.expect("connect"));
    }
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(n));
    let tasks: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let bytes = make(i);
            let b = barrier.clone();
            tokio::spawn(async move {
                b.wait().await;
                exchange(c, &bytes).await
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("task").expect("exchange"));
    }
    out
}

/// Every message in an error's source chain, joined.
pub fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(" | ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Like [`burst`], with request `i` sent to `addrs[i % addrs.len()]`: one burst split across
/// several servers.
pub async fn burst_across(
    addrs: &[std::net::SocketAddr],
    n: usize,
    make: impl Fn(usize) -> Vec<u8>,
) -> Vec<Raw> {
    let mut conns = Vec::new();
    for i in 0..n {
        conns.push(
            TcpStream::connect(addrs[i % addrs.len()])
                .await
                .expect("connect"),
        );
    }
    let barrier = std::sync::Arc::new(tokio::sync::Barrier::new(n));
    let tasks: Vec<_> = conns
        .into_iter()
        .enumerate()
        .map(|(i, c)| {
            let bytes = make(i);
            let b = barrier.clone();
            tokio::spawn(async move {
                b.wait().await;
                exchange(c, &bytes).await
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("task").expect("exchange"));
    }
    out
}

/// One request on a new connection to `addr`.
pub async fn send(addr: std::net::SocketAddr, bytes: &[u8]) -> Raw {
    let c = TcpStream::connect(addr).await.expect("connect");
    exchange(c, bytes).await.expect("exchange")
}
