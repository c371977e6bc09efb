//! A scripted HTTP/2 peer for the transport's tests: a server on 127.0.0.1:0 that writes exactly
//! the frames a test names and reads what the client writes back, frame by frame.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use transport::{Connect, Outgoing, Target};

pub const DATA: u8 = 0x0;
pub const HEADERS: u8 = 0x1;
pub const PRIORITY: u8 = 0x2;
pub const RST_STREAM: u8 = 0x3;
pub const SETTINGS: u8 = 0x4;
pub const PING: u8 = 0x6;
pub const GOAWAY: u8 = 0x7;
pub const WINDOW_UPDATE: u8 = 0x8;
pub const CONTINUATION: u8 = 0x9;

pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const PADDED: u8 = 0x8;
pub const PRIORITY_FLAG: u8 = 0x20;

pub const PROTOCOL_ERROR: u32 = 0x1;
pub const FLOW_CONTROL_ERROR: u32 = 0x3;
pub const REFUSED_STREAM: u32 = 0x7;
pub const COMPRESSION_ERROR: u32 = 0x9;

/// Long enough never to be what ends a request in these tests: an error that is not a timeout
/// is the client's own finding.
pub const LONG: Duration = Duration::from_secs(60);

/// One frame as read from the client.
#[derive(Debug, Clone)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub id: u32,
    pub payload: Vec<u8>,
}

impl Frame {
    /// An error code (RST_STREAM's, or GOAWAY's after the last stream id).
    pub fn code(&self) -> u32 {
        let at = if self.kind == GOAWAY { 4 } else { 0 };
        u32::from_be_bytes(self.payload[at..at + 4].try_into().expect("a code"))
    }
}

/// A frame's bytes.
pub fn frame(kind: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&id.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A SETTINGS frame with these (id, value) pairs.
pub fn settings(pairs: &[(u16, u32)]) -> Vec<u8> {
    let mut p = Vec::new();
    for (k, v) in pairs {
        p.extend_from_slice(&k.to_be_bytes());
        p.extend_from_slice(&v.to_be_bytes());
    }
    frame(SETTINGS, 0, 0, &p)
}

pub fn rst(id: u32, code: u32) -> Vec<u8> {
    frame(RST_STREAM, 0, id, &code.to_be_bytes())
}

pub fn goaway(last: u32, code: u32) -> Vec<u8> {
    let mut p = last.to_be_bytes().to_vec();
    p.extend_from_slice(&code.to_be_bytes());
    frame(GOAWAY, 0, 0, &p)
}

pub fn window_update(id: u32, inc: u32) -> Vec<u8> {
    frame(WINDOW_UPDATE, 0, id, &inc.to_be_bytes())
}

/// An HPACK integer with an `n`-bit prefix under `first`'s high bits.
pub fn int(b: &mut Vec<u8>, first: u8, n: u32, mut v: usize) {
    let max = (1usize << n) - 1;
    if v < max {
        b.push(first | v as u8);
        return;
    }
    b.push(first | max as u8);
    v -= max;
    while v >= 128 {
        b.push((v % 128) as u8 | 0x80);
        v /= 128;
    }
    b.push(v as u8);
}

/// A literal field without indexing, new name, no Huffman.
pub fn lit(name: &str, value: &str) -> Vec<u8> {
    let mut b = vec![0x00];
    int(&mut b, 0, 7, name.len());
    b.extend_from_slice(name.as_bytes());
    int(&mut b, 0, 7, value.len());
    b.extend_from_slice(value.as_bytes());
    b
}

/// A literal field added to the dynamic table, new name, no Huffman.
pub fn indexed_lit(name: &str, value: &str) -> Vec<u8> {
    let mut b = lit(name, value);
    b[0] = 0x40;
    b
}

/// `:status` as a literal (any code).
pub fn status(code: u16) -> Vec<u8> {
    // :status is static index 8: a literal without indexing with an indexed name.
    let v = code.to_string();
    let mut b = vec![0x08];
    int(&mut b, 0, 7, v.len());
    b.extend_from_slice(v.as_bytes());
    b
}

/// `content-length: n` (static name 28).
pub fn content_length(n: usize) -> Vec<u8> {
    let v = n.to_string();
    let mut b = Vec::new();
    int(&mut b, 0x00, 4, 28);
    int(&mut b, 0, 7, v.len());
    b.extend_from_slice(v.as_bytes());
    b
}

/// HEADERS carrying `block` whole.
pub fn headers(id: u32, end_stream: bool, block: &[u8]) -> Vec<u8> {
    let flags = END_HEADERS | if end_stream { END_STREAM } else { 0 };
    frame(HEADERS, flags, id, block)
}

/// HEADERS and CONTINUATIONs carrying `block` in pieces of at most 16,384 bytes.
pub fn headers_split(id: u32, end_stream: bool, block: &[u8], piece: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let chunks: Vec<&[u8]> = block.chunks(piece.max(1)).collect();
    for (i, c) in chunks.iter().enumerate() {
        let last = i + 1 == chunks.len();
        let (kind, mut flags) = if i == 0 {
            (HEADERS, if end_stream { END_STREAM } else { 0 })
        } else {
            (CONTINUATION, 0)
        };
        if last {
            flags |= END_HEADERS;
        }
        out.extend(frame(kind, flags, id, c));
    }
    out
}

pub fn data(id: u32, end_stream: bool, bytes: &[u8]) -> Vec<u8> {
    frame(DATA, if end_stream { END_STREAM } else { 0 }, id, bytes)
}

/// The server's side of one connection.
pub struct Peer {
    /// 0 for the first connection accepted, 1 for the next…
    pub index: usize,
    stream: TcpStream,
    buf: Vec<u8>,
    /// The client's PINGs go unanswered (else they are answered as they are read, as a live
    /// server does).
    deaf: bool,
}

impl Peer {
    /// Writes `bytes` as they are.
    pub async fn send(&mut self, bytes: &[u8]) {
        let _ = self.stream.write_all(bytes).await;
    }

    /// Stops answering the client's PINGs.
    pub fn deaf(&mut self) {
        self.deaf = true;
    }

    /// The client's next frame; `None` at the end of the connection. A PING is answered first
    /// (unless the peer is [`Peer::deaf`]).
    pub async fn frame(&mut self) -> Option<Frame> {
        let f = self.read_frame().await?;
        if f.kind == PING && f.flags & ACK == 0 && !self.deaf {
            self.send(&frame(PING, ACK, 0, &f.payload)).await;
        }
        Some(f)
    }

    async fn read_frame(&mut self) -> Option<Frame> {
        loop {
            if self.buf.len() >= 9 {
                let len = (usize::from(self.buf[0]) << 16)
                    | (usize::from(self.buf[1]) << 8)
                    | usize::from(self.buf[2]);
                if self.buf.len() >= 9 + len {
                    let h: Vec<u8> = self.buf.drain(..9 + len).collect();
                    return Some(Frame {
                        kind: h[3],
                        flags: h[4],
                        id: u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff,
                        payload: h[9..].to_vec(),
                    });
                }
            }
            let mut chunk = [0u8; 16 << 10];
            match self.stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }

    /// The client's next frame of `kind` (others skipped).
    pub async fn next(&mut self, kind: u8) -> Option<Frame> {
        while let Some(f) = self.frame().await {
            if f.kind == kind {
                return Some(f);
            }
        }
        None
    }

    /// The client's next request: its HEADERS's stream id (the rest of the request skipped up
    /// to its END_STREAM).
    pub async fn request(&mut self) -> Option<u32> {
        loop {
            let f = self.frame().await?;
            if f.kind == HEADERS {
                if f.flags & END_STREAM == 0 {
                    while let Some(d) = self.frame().await {
                        if d.kind == DATA && d.id == f.id && d.flags & END_STREAM != 0 {
                            break;
                        }
                    }
                }
                return Some(f.id);
            }
        }
    }

    /// Reads until the client closes, and returns everything it sent meanwhile.
    pub async fn rest(&mut self) -> Vec<Frame> {
        let mut all = Vec::new();
        while let Some(f) = self.frame().await {
            all.push(f);
        }
        all
    }
}

/// A scripted HTTP/2 server: every accepted connection runs `script` after the client's preface
/// has been read.
pub struct Server {
    pub url: String,
    accepted: Arc<AtomicUsize>,
    scripts: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
}

impl Server {
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }

    /// Waits for every connection's script to end (the client must have closed its
    /// connections), failing the test with a script's own failure.
    pub async fn join(self) {
        let scripts = std::mem::take(&mut *self.scripts.lock().expect("the scripts"));
        for s in scripts {
            if let Err(e) = s.await {
                if e.is_panic() {
                    std::panic::resume_unwind(e.into_panic());
                }
            }
        }
    }

    /// A target for this server over HTTP/2 with `streams` workers per connection.
    pub fn target(&self, streams: u32) -> Arc<Target> {
        self.target_with(Connect {
            http2: true,
            streams,
            ..Connect::default()
        })
    }

    /// A target as `how` says; its connections close once idle for a fraction of a second (so
    /// that a script reading to the end of its connection ends soon after the test is done with
    /// it), unless `how` says otherwise.
    pub fn target_with(&self, how: Connect) -> Arc<Target> {
        let how = Connect {
            keepalive: how.keepalive.or(Some(Duration::from_millis(100))),
            idle_timeout: how.idle_timeout.or(Some(Duration::from_millis(300))),
            ..how
        };
        Arc::new(Target::with(&self.url, &how).expect("the server's URL"))
    }
}

pub async fn serve<F, Fut>(script: F) -> Server
where
    F: Fn(Peer) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let url = format!("http://{}", listener.local_addr().expect("its address"));
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    let script = Arc::new(script);
    let scripts = Arc::new(std::sync::Mutex::new(Vec::new()));
    let running = scripts.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let index = counter.fetch_add(1, Ordering::SeqCst);
            let script = script.clone();
            let task = tokio::spawn(async move {
                let mut preface = [0u8; 24];
                if stream.read_exact(&mut preface).await.is_err() {
                    return;
                }
                assert_eq!(&preface, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n");
                script(Peer {
                    index,
                    stream,
                    buf: Vec::new(),
                    deaf: false,
                })
                .await;
            });
            running.lock().expect("the scripts").push(task);
        }
    });
    Server {
        url,
        accepted,
        scripts,
    }
}

pub fn get(path: &str) -> Outgoing {
    Outgoing {
        method: Method::GET,
        uri: path.to_string(),
        headers: HeaderMap::new(),
        body: Bytes::new(),
    }
}
