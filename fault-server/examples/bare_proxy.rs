//! The proxy benchmark's floor: the least an HTTP/1.1 reverse proxy on tokio does, so the bench
//! can tell what the runtime costs from what the fault server's proxy mode adds.
//!
//! One single-threaded runtime per core, each accepting from the one listener and keeping its own
//! idle upstream connections, as the fault server's `--threads` lanes do. A request's head is
//! parsed (`httparse`) and written to the upstream as it came; the answer's head is parsed, its
//! `Connection` field dropped, and its `Content-Length` body relayed. Nothing else: no journal, no
//! rules, no limits, no chunked bodies, no timeouts. It is a measuring stick, not a proxy to run.
//!
//!   cargo run --release -p fault-server --example bare_proxy -- 127.0.0.1:8082 127.0.0.1:8080

use std::cell::RefCell;
use std::io;
use std::rc::Rc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Idle upstream connections of one thread, each with its read buffer.
type Idle = Rc<RefCell<Vec<(TcpStream, Vec<u8>)>>>;

const MAX_HEAD: usize = 64 * 1024;

fn main() -> io::Result<()> {
    let mut args = std::env::args().skip(1);
    let bind = args.next().unwrap_or_else(|| "127.0.0.1:8082".to_string());
    let upstream: &'static str = args
        .next()
        .unwrap_or_else(|| "127.0.0.1:8080".to_string())
        .leak();
    let listener = std::net::TcpListener::bind(&bind)?;
    listener.set_nonblocking(true)?;
    println!("listening on http://{}", listener.local_addr()?);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut running = Vec::new();
    for _ in 0..threads {
        let listener = listener.try_clone()?;
        running.push(std::thread::spawn(move || serve(listener, upstream)));
    }
    for t in running {
        t.join()
            .map_err(|_| io::Error::other("a thread panicked"))??;
    }
    Ok(())
}

fn serve(listener: std::net::TcpListener, upstream: &'static str) -> io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let listener = TcpListener::from_std(listener)?;
        let idle = Idle::default();
        loop {
            let (client, _) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                }
            };
            client.set_nodelay(true)?;
            let idle = idle.clone();
            tokio::task::spawn_local(async move {
                if let Err(e) = connection(client, idle, upstream).await {
                    eprintln!("connection: {e}");
                }
            });
        }
    })
}

/// Reads until `buf` holds a whole head; its length, or `None` at a clean end of stream.
async fn read_head(s: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<Option<usize>> {
    loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            return Ok(Some(p + 4));
        }
        if buf.len() > MAX_HEAD {
            return Err(io::Error::other("head too large"));
        }
        buf.reserve(8192);
        if s.read_buf(buf).await? == 0 {
            return Ok(None);
        }
    }
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

async fn connection(mut client: TcpStream, idle: Idle, upstream: &str) -> io::Result<()> {
    let mut req = Vec::with_capacity(8192);
    let mut out = Vec::with_capacity(8192);
    loop {
        let Some(head) = read_head(&mut client, &mut req).await? else {
            return Ok(());
        };
        let mut fields = [httparse::EMPTY_HEADER; 64];
        let mut parsed = httparse::Request::new(&mut fields);
        if !parsed
            .parse(&req[..head])
            .map_err(|_| bad("request head"))?
            .is_complete()
        {
            return Err(bad("request head"));
        }
        if parsed.headers.iter().any(|h| {
            h.name.eq_ignore_ascii_case("content-length") && h.value != b"0"
                || h.name.eq_ignore_ascii_case("transfer-encoding")
        }) {
            return Err(bad("request bodies are not relayed"));
        }
        // A kept-alive connection the upstream has closed since is retried on a fresh one.
        let mut tries = 0;
        let (mut up, mut buf, len) = loop {
            tries += 1;
            let pooled = idle.borrow_mut().pop();
            let (mut up, mut buf) = match pooled {
                Some(c) => c,
                None => {
                    let up = TcpStream::connect(upstream).await?;
                    up.set_nodelay(true)?;
                    (up, Vec::with_capacity(8192))
                }
            };
            buf.clear();
            let answered = match up.write_all(&req[..head]).await {
                Ok(()) => read_head(&mut up, &mut buf).await,
                Err(e) => Err(e),
            };
            match answered {
                Ok(Some(len)) => break (up, buf, len),
                Ok(None) | Err(_) if tries < 3 => continue,
                Ok(None) => return Err(bad("upstream closed")),
                Err(e) => return Err(e),
            }
        };
        req.drain(..head);
        let mut fields = [httparse::EMPTY_HEADER; 64];
        let mut answer = httparse::Response::new(&mut fields);
        if !answer
            .parse(&buf[..len])
            .map_err(|_| bad("answer head"))?
            .is_complete()
        {
            return Err(bad("answer head"));
        }
        out.clear();
        out.extend_from_slice(b"HTTP/1.1 ");
        out.extend_from_slice(answer.code.unwrap_or(502).to_string().as_bytes());
        out.push(b' ');
        out.extend_from_slice(answer.reason.unwrap_or("").as_bytes());
        out.extend_from_slice(b"\r\n");
        let (mut body, mut close) = (0usize, false);
        for h in answer.headers.iter() {
            if h.name.eq_ignore_ascii_case("connection") {
                close = h.value.eq_ignore_ascii_case(b"close");
                continue;
            }
            if h.name.eq_ignore_ascii_case("content-length") {
                body = std::str::from_utf8(h.value)
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .ok_or_else(|| bad("content-length"))?;
            }
            out.extend_from_slice(h.name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(h.value);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        while buf.len() < len + body {
            buf.reserve(8192);
            if up.read_buf(&mut buf).await? == 0 {
                return Err(bad("upstream body cut"));
            }
        }
        out.extend_from_slice(&buf[len..len + body]);
        if !close && buf.len() == len + body {
            idle.borrow_mut().push((up, buf));
        }
        client.write_all(&out).await?;
    }
}
