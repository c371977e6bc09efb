//! Peers for the TCP proxies' tests: upstreams that echo, talk, or pour, on 127.0.0.1:0.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fault_server::{Config, FaultServer, ServerOptions};
use history::{Entry, TcpConnection};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What an upstream does with each connection.
#[derive(Debug, Clone, Copy)]
pub enum Behaviour {
    /// Echoes what it reads until the client closes.
    Echo,
    /// Sends this many bytes (`x`), then closes.
    SendThenClose(usize),
    /// Writes as fast as it can, counting what the kernel took, until the connection fails.
    Pour,
}

/// An upstream on 127.0.0.1.
pub struct Upstream {
    pub addr: SocketAddr,
    /// Bytes its `Pour` connections managed to write.
    pub poured: Arc<AtomicU64>,
    pub connections: Arc<AtomicU64>,
}

impl Upstream {
    pub async fn start(b: Behaviour) -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let poured = Arc::new(AtomicU64::new(0));
        let connections = Arc::new(AtomicU64::new(0));
        let (p, c) = (poured.clone(), connections.clone());
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                c.fetch_add(1, Ordering::SeqCst);
                let p = p.clone();
                tokio::spawn(async move {
                    match b {
                        Behaviour::Echo => {
                            let mut buf = vec![0u8; 16 * 1024];
                            loop {
                                match s.read(&mut buf).await {
                                    Ok(0) | Err(_) => return,
                                    Ok(n) => {
                                        if s.write_all(&buf[..n]).await.is_err() {
                                            return;
                                        }
                                    }
                                }
                            }
                        }
                        Behaviour::SendThenClose(n) => {
                            let _ = s.write_all(&vec![b'x'; n]).await;
                            let _ = s.shutdown().await;
                            // Wait for the client's close, so nothing is reset under it.
                            let mut sink = [0u8; 64];
                            let _ =
                                tokio::time::timeout(Duration::from_secs(10), s.read(&mut sink))
                                    .await;
                        }
                        Behaviour::Pour => {
                            let chunk = vec![b'y'; 64 * 1024];
                            let started = Instant::now();
                            while started.elapsed() < Duration::from_secs(20) {
                                match s.write(&chunk).await {
                                    Ok(n) => {
                                        p.fetch_add(n as u64, Ordering::SeqCst);
                                    }
                                    Err(_) => return,
                                }
                            }
                        }
                    }
                });
            }
        });
        Upstream {
            addr,
            poured,
            connections,
        }
    }
}

/// A server whose one proxy, `p`, forwards to `upstream` with these toxics (YAML flow list);
/// `extra` is more of the proxy's YAML (`max_connections: 1`, …).
pub async fn proxy(upstream: SocketAddr, toxics: &str, extra: &str, seed: u64) -> FaultServer {
    let yaml = format!(
        "seed: {seed}\nproxies:\n  - name: p\n    listen: 127.0.0.1:0\n    upstream: {upstream}\n    toxics: {toxics}\n{extra}"
    );
    let cfg = Config::from_yaml(&yaml, "test").expect("test config is valid");
    FaultServer::start(cfg, ServerOptions::default())
        .await
        .expect("server starts")
}

/// The proxy `p`'s address.
pub fn addr(s: &FaultServer) -> SocketAddr {
    s.proxy_addr("p").expect("proxy p listens")
}

/// The journal's connection entries, once at least `n` are journaled (within 10 s).
pub async fn connections(s: &FaultServer, n: usize) -> Vec<Entry> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        s.settle(Duration::from_secs(2)).await;
        let c: Vec<Entry> = s
            .journal()
            .entries()
            .into_iter()
            .filter(|e| e.tcp.is_some())
            .collect();
        if c.len() >= n || Instant::now() > deadline {
            assert!(
                c.len() >= n,
                "{} of {n} connections journaled: {c:#?}",
                c.len()
            );
            return c;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// An entry's `tcp`.
pub fn tcp(e: &Entry) -> &TcpConnection {
    e.tcp.as_deref().expect("a connection entry")
}

/// Reads until EOF (or an error), within `limit`; what came, and what ended it.
pub async fn read_to_end(s: &mut TcpStream, limit: Duration) -> (Vec<u8>, std::io::Result<()>) {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => {
                return (
                    out,
                    Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "limit")),
                )
            }
            Ok(Ok(0)) => return (out, Ok(())),
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
            Ok(Err(e)) => return (out, Err(e)),
        }
    }
}
