//! HTTP/1.1 over one connection, spoken directly: the request serialized into a reused buffer and
//! written with one write; the response read into a reused buffer, its head parsed in place by
//! `httparse`, a sized body split off without copying.

use std::mem::MaybeUninit;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use history::ErrorKind;
use http::header::HeaderName;
use http::{HeaderMap, HeaderValue, Method, StatusCode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::release::Release;
use super::stream::Stream;
use super::timer::Timer;
use super::{
    closed, has_token, io_failure, last_token_is, malformed, over_limit, protocol, AttemptError,
    Outgoing, Reply, Target,
};

/// Header fields a response head is parsed with in place; a head with more is parsed again with
/// as many as its header list's limit can hold.
const MAX_HEADERS: usize = 64;
/// What a head may take besides its header list (the status line): the head's bytes are bounded
/// by the list's limit (a field counts 32 more than its name and value, more than its `: ` and
/// CRLF) plus this.
const HEAD_SLACK: usize = 8 * 1024;
/// Longest chunk-size line accepted (size and chunk extensions).
const MAX_CHUNK_LINE: usize = 16 * 1024;
/// The read buffer grows by at least this much when it runs low.
const READ_CHUNK: usize = 8 * 1024;
/// The read buffer grows by at most this much at once, whatever length a response announces.
const MAX_RESERVE: usize = 1024 * 1024;
/// Free space below which the read buffer is grown (or its space reclaimed) before a read.
const MIN_READ_SPACE: usize = 1024;
/// A body longer than this gets its allocation to itself once read (see [`read_sized`]).
const DETACH_OVER: usize = 64 * 1024;

/// One HTTP/1.1 connection that reconnects when it breaks.
///
/// At most one request is in flight: the request is serialized into one buffer and written with
/// one write, then the response is read into a buffer that lives as long as the connection, its
/// head parsed in place and a sized body split off without copying (a chunked one is decoded into
/// a buffer of its own). The connection is reused for the next request when the response allows
/// keep-alive, and replaced otherwise, after any error and after a timeout.
pub struct H1Conn {
    target: Arc<Target>,
    host: HeaderValue,
    stream: Option<Stream>,
    /// The serialized request, reused from one request to the next.
    out: Vec<u8>,
    /// Bytes read from the socket and not yet consumed. Heads and bodies are split off it as
    /// shared `Bytes`; once the caller drops a reply, its space is reclaimed for the next read.
    buf: BytesMut,
    /// One timer for the connection's life (see [`crate::timer`]).
    timer: Timer,
    /// When the last released request (see [`H1Conn::send_released`]) finished its write.
    released_at: Option<std::time::Instant>,
}

impl H1Conn {
    /// A new connection to this one's target, not yet open.
    pub fn sibling(&self) -> H1Conn {
        H1Conn::new(self.target.clone())
    }

    /// A connection to `target`, not yet open.
    pub fn new(target: Arc<Target>) -> H1Conn {
        let host = HeaderValue::from_str(&target.authority)
            .unwrap_or(HeaderValue::from_static("localhost"));
        H1Conn {
            target,
            host,
            stream: None,
            out: Vec::new(),
            buf: BytesMut::new(),
            timer: Timer::default(),
            released_at: None,
        }
    }

    /// Opens the TCP connection now (bursts open theirs before the release). An open connection
    /// is kept unless the server closed it while it was idle.
    pub async fn open(&mut self) -> Result<(), AttemptError> {
        if self.stream.is_some() {
            if self.still_open() {
                return Ok(());
            }
            self.close();
        }
        // Boxed: connecting (TCP, then maybe a TLS handshake) is rare, and its future is large;
        // inline, it would be part of — and copied with — every request's future.
        let (stream, _) = Box::pin(Stream::connect(&self.target)).await?;
        self.buf.clear();
        self.stream = Some(stream);
        Ok(())
    }

    /// Whether the idle connection can carry another request: looks, without waiting, at what
    /// arrived while it was idle. End of stream means the server closed it (an idle timeout, a
    /// restart); an error means it was reset; bytes nobody asked for (a server's `408` before it
    /// closes, say) belong to no request. In each case the connection is replaced rather than
    /// failing the next request. Only what the runtime's I/O driver has already seen is looked
    /// at, so a close that arrives at the same instant as the request still fails it.
    fn still_open(&mut self) -> bool {
        let Some(stream) = &mut self.stream else {
            return false;
        };
        self.buf.clear();
        if self.buf.capacity() < MIN_READ_SPACE {
            self.buf.reserve(READ_CHUNK);
        }
        stream.still_open(&mut self.buf)
    }

    fn close(&mut self) {
        self.stream = None;
        self.buf.clear();
    }

    /// When the last request sent through [`H1Conn::send_released`] with a release point was
    /// written: how close together a burst really left.
    pub fn released_at(&self) -> Option<std::time::Instant> {
        self.released_at
    }

    /// Sends one request and reads the whole response, within `timeout`.
    pub async fn send(&mut self, req: Outgoing, timeout: Duration) -> Result<Reply, AttemptError> {
        self.send_ref(&req, timeout, None, false).await
    }

    /// Like [`H1Conn::send`], but once the connection is open and the request serialized, waits at
    /// `release` so that every member of a burst sends at the same instant: after the release
    /// there is only the write.
    pub async fn send_released(
        &mut self,
        req: Outgoing,
        timeout: Duration,
        release: Option<&Release>,
        last_byte: bool,
    ) -> Result<Reply, AttemptError> {
        self.send_ref(&req, timeout, release, last_byte).await
    }

    /// [`H1Conn::send_released`] on a borrowed request: the request is kept once, by the
    /// caller's future, not copied into each future below it.
    pub(crate) async fn send_ref(
        &mut self,
        req: &Outgoing,
        timeout: Duration,
        release: Option<&Release>,
        last_byte: bool,
    ) -> Result<Reply, AttemptError> {
        self.send_within(req, timeout, release, last_byte, &mut |_| true)
            .await
    }

    /// Sends `req` whole (at `release`, as [`H1Conn::send_released`] does), then closes the
    /// connection without reading the answer: the server got the whole request, and whatever it
    /// answers is lost — a client that gave up just after sending (a webhook sender's lost
    /// acknowledgement). Returns once the request was written, within `timeout`.
    pub async fn send_unanswered(
        &mut self,
        req: &Outgoing,
        timeout: Duration,
        release: Option<&Release>,
        last_byte: bool,
    ) -> Result<(), AttemptError> {
        let written = async {
            let ready = match self.open().await {
                Ok(()) => encode(&mut self.out, req, self.host.as_bytes()),
                Err(e) => Err(e),
            };
            let tls = self.target.tls.is_some();
            let stream = match (ready, self.stream.as_mut()) {
                (Ok(()), Some(stream)) => stream,
                (ready, _) => {
                    if let Some(r) = release {
                        Box::pin(r.wait()).await;
                    }
                    return Err(ready.err().unwrap_or_else(|| AttemptError {
                        kind: ErrorKind::Other,
                        message: "connection unavailable".into(),
                    }));
                }
            };
            match release {
                Some(r) => {
                    let at = Box::pin(write_released(stream, &self.out, r, last_byte, tls)).await?;
                    self.released_at = Some(at);
                }
                None => write_request(stream, &self.out, true).await?,
            }
            Ok(())
        };
        let result = match tokio::time::timeout(timeout, written).await {
            Ok(r) => r,
            Err(_) => Err(AttemptError {
                kind: ErrorKind::Timeout,
                message: format!("the request was not written within {timeout:?}"),
            }),
        };
        // Closed unread either way: the answer, if one comes, goes nowhere.
        self.close();
        result
    }

    /// Like [`H1Conn::send`], with the response body's memory granted by `meter`: before the
    /// body may hold `n` bytes in all it is asked `meter(n)` (once with the length a
    /// `Content-Length` announces, else as a chunked or close-delimited body grows); when it
    /// answers `false` the exchange stops there, fails, and the connection is closed. A proxy
    /// counts the answers it holds against one budget this way, before it reads them.
    pub async fn send_metered(
        &mut self,
        req: &Outgoing,
        timeout: Duration,
        meter: &mut (dyn FnMut(u64) -> bool + Send),
    ) -> Result<Reply, AttemptError> {
        self.send_within(req, timeout, None, false, meter).await
    }

    async fn send_within(
        &mut self,
        req: &Outgoing,
        timeout: Duration,
        release: Option<&Release>,
        last_byte: bool,
        meter: &mut (dyn FnMut(u64) -> bool + Send),
    ) -> Result<Reply, AttemptError> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut timer = std::mem::take(&mut self.timer);
        let result = tokio::select! {
            biased;
            r = self.exchange(req, release, last_byte, meter) => Some(r),
            () = timer.until(deadline) => None,
        };
        self.timer = timer;
        match result {
            Some(Ok(r)) => Ok(r),
            Some(Err(e)) => {
                self.close();
                Err(e)
            }
            None => {
                // The late response may still arrive; never reuse the connection.
                self.close();
                Err(AttemptError {
                    kind: ErrorKind::Timeout,
                    message: format!("no response within {timeout:?}"),
                })
            }
        }
    }

    async fn exchange(
        &mut self,
        req: &Outgoing,
        release: Option<&Release>,
        last_byte: bool,
        meter: &mut (dyn FnMut(u64) -> bool + Send),
    ) -> Result<Reply, AttemptError> {
        let ready = match self.open().await {
            Ok(()) => encode(&mut self.out, req, self.host.as_bytes()),
            Err(e) => Err(e),
        };
        let stream = match (ready, self.stream.as_mut()) {
            (Ok(()), Some(stream)) => stream,
            (ready, _) => {
                // The other members still wait for this one: arrive, so that they are released.
                if let Some(r) = release {
                    Box::pin(r.wait()).await;
                }
                return Err(ready.err().unwrap_or_else(|| AttemptError {
                    kind: ErrorKind::Other,
                    message: "connection unavailable".into(),
                }));
            }
        };
        let head_only = req.method == Method::HEAD;
        let asked_close = has_token(&req.headers, http::header::CONNECTION, "close");
        let tls = self.target.tls.is_some();
        match release {
            // Boxed: a burst's write is rare next to the plain one, and its future is large;
            // inline, it would be part of — and copied with — every request's future.
            Some(r) => {
                let at = Box::pin(write_released(stream, &self.out, r, last_byte, tls)).await?;
                self.released_at = Some(at);
            }
            None => write_request(stream, &self.out, tls).await?,
        }
        let limits = (self.target.max_body, self.target.max_header_list);
        let (reply, reusable) =
            read_response(stream, &mut self.buf, head_only, limits, meter).await?;
        // Bytes after a complete response answer no request of ours: the connection's framing
        // can no longer be trusted, so it is not reused.
        if !reusable || asked_close || !self.buf.is_empty() {
            self.close();
        }
        Ok(reply)
    }
}

/// Writes a burst member's request `out` at the release `r`: with `last_byte` (and more than one
/// byte), all but the final byte first and that byte with every member's at once; else all of it
/// once released (flushed, over `tls`). Returns when it left: stamped before the write, since the
/// server cannot have the request before that instant, whatever happens to this thread during and
/// after the write.
async fn write_released(
    stream: &mut Stream,
    out: &[u8],
    r: &Release,
    last_byte: bool,
    tls: bool,
) -> Result<std::time::Instant, AttemptError> {
    if last_byte && out.len() > 1 {
        let split = out.len() - 1;
        let written = async {
            stream.write_all(&out[..split]).await?;
            stream.flush().await?;
            stream.seal(&out[split..])
        };
        let tail = match written.await {
            Ok(tail) => tail,
            Err(e) => {
                r.wait().await;
                return Err(io_failure("writing the request", e));
            }
        };
        let handover = r.hand_over(stream, tail);
        r.wait().await;
        return r
            .finish(handover, stream)
            .await
            .map_err(|e| io_failure("writing the request", e));
    }
    r.wait().await;
    let leaving = std::time::Instant::now();
    write_request(stream, out, tls).await?;
    Ok(leaving)
}

/// Writes the request `out` whole, flushed over `tls` (where the write only fills its buffer).
async fn write_request(stream: &mut Stream, out: &[u8], tls: bool) -> Result<(), AttemptError> {
    let write = async {
        stream.write_all(out).await?;
        if tls {
            stream.flush().await?;
        }
        Ok(())
    };
    write
        .await
        .map_err(|e: std::io::Error| io_failure("writing the request", e))
}

/// Serializes `req` into `out`: request line, `Host`, the request's headers, `content-length`,
/// then the body. The framing headers are always derived from the body, never copied.
fn encode(out: &mut Vec<u8>, req: &Outgoing, host: &[u8]) -> Result<(), AttemptError> {
    let target = req.uri.as_bytes();
    if target.is_empty() || !target.iter().all(|b| (0x21..=0x7e).contains(b)) {
        return Err(AttemptError {
            kind: ErrorKind::Other,
            message: format!("invalid request target {:?}", req.uri),
        });
    }
    out.clear();
    out.extend_from_slice(req.method.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target);
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(host);
    out.extend_from_slice(b"\r\n");
    for (name, value) in &req.headers {
        if name == http::header::HOST
            || name == http::header::CONTENT_LENGTH
            || name == http::header::TRANSFER_ENCODING
        {
            continue;
        }
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !req.body.is_empty() || carries_body(&req.method) {
        out.extend_from_slice(b"content-length: ");
        push_decimal(out, req.body.len());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&req.body);
    Ok(())
}

/// Whether a request with this method announces its (possibly empty) body: `POST` with no body
/// still says `content-length: 0`, `GET` says nothing.
fn carries_body(method: &Method) -> bool {
    !(*method == Method::GET
        || *method == Method::HEAD
        || *method == Method::DELETE
        || *method == Method::OPTIONS
        || *method == Method::TRACE
        || *method == Method::CONNECT)
}

fn push_decimal(out: &mut Vec<u8>, mut n: usize) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// A parsed response head.
struct Head {
    status: StatusCode,
    /// `HTTP/1.0`: keep-alive only when asked for.
    http10: bool,
    headers: HeaderMap,
}

/// Reads one response to a request (`head_only` for `HEAD`), skipping interim `1xx` responses
/// (`103 Early Hints` among them), within `(max, list)`: the body's limit and the header
/// list's. Returns it and whether the connection may carry another request.
async fn read_response(
    stream: &mut Stream,
    buf: &mut BytesMut,
    head_only: bool,
    (max, list): (u64, usize),
    meter: &mut (dyn FnMut(u64) -> bool + Send),
) -> Result<(Reply, bool), AttemptError> {
    let head = loop {
        let head = read_head(stream, buf, list).await?;
        let code = head.status.as_u16();
        if !(100..200).contains(&code) || code == 101 {
            break head;
        }
    };
    let code = head.status.as_u16();
    let headers = &head.headers;
    let mut reusable = code != 101
        && !has_token(headers, http::header::CONNECTION, "close")
        && (!head.http10 || has_token(headers, http::header::CONNECTION, "keep-alive"));
    let mut trailers = None;
    let body = if head_only || code < 200 || code == 204 || code == 304 {
        Bytes::new()
    } else if headers.contains_key(http::header::TRANSFER_ENCODING) {
        if !last_token_is(headers, http::header::TRANSFER_ENCODING, "chunked") {
            // Not chunked at the end: the body ends when the connection does.
            reusable = false;
            read_to_close(stream, buf, max, meter).await?
        } else {
            if headers.contains_key(http::header::CONTENT_LENGTH) {
                // Both framings: chunked wins, and the connection is not trusted afterwards.
                reusable = false;
            }
            let (body, t) = read_chunked(stream, buf, max, list, meter).await?;
            trailers = t;
            body
        }
    } else if let Some(len) = content_length(headers)? {
        if len > max {
            return Err(over_limit(max));
        }
        if !meter(len) {
            return Err(refused_by_meter(len));
        }
        read_sized(stream, buf, len).await?
    } else {
        reusable = false;
        read_to_close(stream, buf, max, meter).await?
    };
    let reply = Reply {
        status: head.status,
        headers: head.headers,
        body,
        trailers,
    };
    Ok((reply, reusable))
}

/// Reads until a complete head is in `buf`, then splits it off; its header list at most
/// `list` bytes.
async fn read_head(
    stream: &mut Stream,
    buf: &mut BytesMut,
    list: usize,
) -> Result<Head, AttemptError> {
    loop {
        if !buf.is_empty() {
            if let Some(head) = parse_head(buf, list)? {
                return Ok(head);
            }
            if buf.len() >= list + HEAD_SLACK {
                return Err(over_list(list));
            }
        }
        if fill(stream, buf, READ_CHUNK).await? == 0 {
            return Err(closed(if buf.is_empty() {
                "connection closed before a response"
            } else {
                "connection closed in the middle of the response head"
            }));
        }
    }
}

/// A head or trailer section over the header list's limit.
fn over_list(list: usize) -> AttemptError {
    protocol(format!(
        "the response's header list is over the limit of {list} bytes"
    ))
}

/// The header list's size as HTTP/2 counts it (RFC 7541 §4.1), so that one limit means the
/// same under both protocols.
fn list_size(headers: &[httparse::Header<'_>]) -> usize {
    headers
        .iter()
        .map(|h| h.name.len() + h.value.len() + 32)
        .sum()
}

/// How many fields a list of `list` bytes can hold (each counts at least 33).
fn fields_within(list: usize) -> usize {
    list / 33 + 1
}

/// Parses the head at the start of `buf` in place; when it is complete, splits it off `buf` and
/// builds the header map from slices of it (no copy of the values). `None` while incomplete.
/// A head of more than [`MAX_HEADERS`] fields is parsed again by [`parse_long_head`].
fn parse_head(buf: &mut BytesMut, list: usize) -> Result<Option<Head>, AttemptError> {
    // Left uninitialized: the parser writes the slots it uses, and a head is parsed per response.
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    // Offsets of each header's name and value in `buf`, kept past the parser's borrow of it.
    let mut spans = [(0usize, 0usize, 0usize, 0usize); MAX_HEADERS];
    let base = buf.as_ptr() as usize;
    let mut res = httparse::Response::new(&mut []);
    let parsed = httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut res, buf, &mut slots);
    let (len, code, minor, count) = match parsed {
        Ok(httparse::Status::Complete(len)) => {
            if list_size(res.headers) > list {
                return Err(over_list(list));
            }
            for (span, h) in spans.iter_mut().zip(res.headers.iter()) {
                let name = h.name.as_ptr() as usize - base;
                let value = h.value.as_ptr() as usize - base;
                *span = (name, name + h.name.len(), value, value + h.value.len());
            }
            (
                len,
                res.code.unwrap_or(0),
                res.version.unwrap_or(1),
                res.headers.len(),
            )
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return parse_long_head(buf, list),
        Err(e) => return Err(malformed(format!("invalid response head: {e}"))),
    };
    let status =
        StatusCode::from_u16(code).map_err(|_| malformed(format!("invalid status code {code}")))?;
    let head = buf.split_to(len).freeze();
    let mut headers = HeaderMap::with_capacity(count);
    for &(name_start, name_end, value_start, value_end) in &spans[..count] {
        let name = HeaderName::from_bytes(&head[name_start..name_end])
            .map_err(|e| malformed(format!("invalid header name: {e}")))?;
        let value = HeaderValue::from_maybe_shared(head.slice(value_start..value_end))
            .map_err(|e| malformed(format!("invalid value of {name}: {e}")))?;
        headers.append(name, value);
    }
    Ok(Some(Head {
        status,
        http10: minor == 0,
        headers,
    }))
}

/// [`parse_head`] for a head of more than [`MAX_HEADERS`] fields: parsed with as many as the
/// header list's limit allows, its values copied.
fn parse_long_head(buf: &mut BytesMut, list: usize) -> Result<Option<Head>, AttemptError> {
    let mut slots = vec![httparse::EMPTY_HEADER; fields_within(list)];
    let mut res = httparse::Response::new(&mut slots);
    let len = match res.parse(buf) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(over_list(list)),
        Err(e) => return Err(malformed(format!("invalid response head: {e}"))),
    };
    if list_size(res.headers) > list {
        return Err(over_list(list));
    }
    let code = res.code.unwrap_or(0);
    let status =
        StatusCode::from_u16(code).map_err(|_| malformed(format!("invalid status code {code}")))?;
    let http10 = res.version == Some(0);
    let headers = header_map(res.headers)?;
    buf.advance(len);
    Ok(Some(Head {
        status,
        http10,
        headers,
    }))
}

/// Parsed fields as a header map, their values copied.
fn header_map(fields: &[httparse::Header<'_>]) -> Result<HeaderMap, AttemptError> {
    // Not sized by the fields: a map's capacity past its limit panics, and the fields' count is
    // the peer's to choose.
    let mut headers = HeaderMap::with_capacity(fields.len().min(MAX_HEADERS));
    for h in fields {
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .map_err(|e| malformed(format!("invalid header name: {e}")))?;
        let value = HeaderValue::from_bytes(h.value)
            .map_err(|e| malformed(format!("invalid value of {name}: {e}")))?;
        headers
            .try_append(name, value)
            .map_err(|_| protocol("more header fields than a header map can hold".into()))?;
    }
    Ok(headers)
}

/// The body length a `Content-Length` announces. Repeated fields (or a list) must agree; anything
/// but digits is `Malformed`.
fn content_length(headers: &HeaderMap) -> Result<Option<u64>, AttemptError> {
    let mut found: Option<u64> = None;
    for value in headers.get_all(http::header::CONTENT_LENGTH) {
        for part in value.as_bytes().split(|&b| b == b',') {
            let part = part.trim_ascii();
            let n = std::str::from_utf8(part)
                .ok()
                .filter(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| malformed(format!("invalid content-length {value:?}")))?;
            match found {
                Some(m) if m != n => {
                    return Err(malformed(format!(
                        "conflicting content-length values {m} and {n}"
                    )))
                }
                _ => found = Some(n),
            }
        }
    }
    Ok(found)
}

/// Reads a body of exactly `len` bytes and splits it off `buf`.
async fn read_sized(
    stream: &mut Stream,
    buf: &mut BytesMut,
    len: u64,
) -> Result<Bytes, AttemptError> {
    let len =
        usize::try_from(len).map_err(|_| malformed(format!("content-length {len} too large")))?;
    while buf.len() < len {
        if fill(stream, buf, len - buf.len()).await? == 0 {
            return Err(closed(&format!(
                "connection closed after {} of {len} body bytes",
                buf.len()
            )));
        }
    }
    if len > DETACH_OVER {
        // Copied to an allocation of its own size, the read buffer started anew. Split off,
        // the body would share the buffer's allocation: up to twice its length (the buffer
        // grows by doubling), which no budget of body bytes counts, and kept alive by the
        // buffer of a pooled connection until the next body outgrew it.
        let body = Bytes::copy_from_slice(&buf[..len]);
        *buf = BytesMut::from(&buf[len..]);
        return Ok(body);
    }
    Ok(buf.split_to(len).freeze())
}

/// Reads and decodes a chunked body, up to and including its trailer section (kept when it has
/// fields; its header list at most `list` bytes).
async fn read_chunked(
    stream: &mut Stream,
    buf: &mut BytesMut,
    max: u64,
    list: usize,
    meter: &mut (dyn FnMut(u64) -> bool + Send),
) -> Result<(Bytes, Option<HeaderMap>), AttemptError> {
    const CUT: &str = "connection closed in the middle of a chunked body";
    let mut body = BytesMut::new();
    loop {
        let (line, size) = loop {
            if !buf.is_empty() {
                // httparse takes an empty size, or one after spaces, as 0: neither is a size.
                if !buf[0].is_ascii_hexdigit() {
                    return Err(malformed("invalid chunk size line".into()));
                }
                match httparse::parse_chunk_size(buf) {
                    Ok(httparse::Status::Complete(found)) => break found,
                    Ok(httparse::Status::Partial) if buf.len() > MAX_CHUNK_LINE => {
                        return Err(malformed(format!(
                            "chunk size line longer than {MAX_CHUNK_LINE} bytes"
                        )))
                    }
                    Ok(httparse::Status::Partial) => {}
                    Err(_) => return Err(malformed("invalid chunk size line".into())),
                }
            }
            if fill(stream, buf, READ_CHUNK).await? == 0 {
                return Err(closed(CUT));
            }
        };
        buf.advance(line);
        if size == 0 {
            break;
        }
        let mut left = size;
        while left > 0 {
            if buf.is_empty() && fill(stream, buf, READ_CHUNK).await? == 0 {
                return Err(closed(CUT));
            }
            let take = usize::try_from(left).unwrap_or(usize::MAX).min(buf.len());
            let grown = (body.len() + take) as u64;
            if grown > max {
                return Err(over_limit(max));
            }
            if !meter(grown) {
                return Err(refused_by_meter(grown));
            }
            body.extend_from_slice(&buf[..take]);
            buf.advance(take);
            left -= take as u64;
        }
        while buf.len() < 2 {
            if fill(stream, buf, READ_CHUNK).await? == 0 {
                return Err(closed(CUT));
            }
        }
        if &buf[..2] != b"\r\n" {
            return Err(malformed("chunk data not followed by CRLF".into()));
        }
        buf.advance(2);
    }
    loop {
        // The common case, no trailer field, needs no parser.
        if buf.starts_with(b"\r\n") {
            buf.advance(2);
            return Ok((body.freeze(), None));
        }
        // In its own scope so that the slots are not kept in the future across the read.
        let parsed = if buf.len() < 2 {
            Ok(None)
        } else {
            let mut slots = vec![httparse::EMPTY_HEADER; fields_within(list)];
            match httparse::parse_headers(buf, &mut slots) {
                Ok(httparse::Status::Complete((len, fields))) if list_size(fields) > list => {
                    let _ = len;
                    Err(over_list(list))
                }
                Ok(httparse::Status::Complete((len, fields))) => {
                    header_map(fields).map(|t| Some((len, t)))
                }
                Ok(httparse::Status::Partial) => Ok(None),
                Err(httparse::Error::TooManyHeaders) => Err(over_list(list)),
                Err(e) => Err(malformed(format!("invalid trailer section: {e}"))),
            }
        };
        match parsed? {
            Some((len, trailers)) => {
                buf.advance(len);
                return Ok((body.freeze(), Some(trailers)));
            }
            None if buf.len() > list + HEAD_SLACK => return Err(over_list(list)),
            None => {}
        }
        if fill(stream, buf, READ_CHUNK).await? == 0 {
            return Err(closed(CUT));
        }
    }
}

/// Reads a body that ends when the server closes the connection.
async fn read_to_close(
    stream: &mut Stream,
    buf: &mut BytesMut,
    max: u64,
    meter: &mut (dyn FnMut(u64) -> bool + Send),
) -> Result<Bytes, AttemptError> {
    while fill(stream, buf, READ_CHUNK).await? > 0 {
        if buf.len() as u64 > max {
            return Err(over_limit(max));
        }
        if !meter(buf.len() as u64) {
            return Err(refused_by_meter(buf.len() as u64));
        }
    }
    Ok(buf.split().freeze())
}

/// The error of a body its caller's meter refused to grow to `n` bytes.
fn refused_by_meter(n: u64) -> AttemptError {
    AttemptError {
        kind: ErrorKind::Other,
        message: format!("response body of {n} bytes refused by the caller's memory budget"),
    }
}

/// Reads what the socket has into `buf`, first growing it by up to `want` bytes if it is low on
/// space. Returns how many bytes came; 0 is end of stream.
async fn fill(stream: &mut Stream, buf: &mut BytesMut, want: usize) -> Result<usize, AttemptError> {
    if buf.capacity() - buf.len() < MIN_READ_SPACE {
        buf.reserve(want.clamp(READ_CHUNK, MAX_RESERVE));
    }
    stream
        .read_buf(buf)
        .await
        .map_err(|e| io_failure("reading the response", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outgoing(
        method: Method,
        uri: &str,
        headers: &[(&'static str, &str)],
        body: &[u8],
    ) -> Outgoing {
        let mut h = HeaderMap::new();
        for (n, v) in headers {
            h.insert(*n, HeaderValue::from_str(v).expect("a header value"));
        }
        Outgoing {
            method,
            uri: uri.to_string(),
            headers: h,
            body: Bytes::copy_from_slice(body),
        }
    }

    /// A server that answers every request on one connection with `answer`.
    async fn answering(answer: Vec<u8>) -> Arc<Target> {
        let answer: Arc<[u8]> = answer.into();
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("its address");
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let answer = answer.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {
                        if s.write_all(&answer).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        Arc::new(
            Target::with(&format!("http://{addr}"), &crate::Connect::default()).expect("a target"),
        )
    }

    #[tokio::test]
    async fn a_metered_body_is_asked_for_before_it_is_read_and_refused_when_denied() {
        for answer in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n"[..],
            &b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n40\r\n"[..],
        ] {
            let mut body = answer.to_vec();
            if answer.ends_with(b"40\r\n") {
                body.extend_from_slice(&[b'x'; 64]);
                body.extend_from_slice(b"\r\n24\r\n");
                body.extend_from_slice(&[b'x'; 36]);
                body.extend_from_slice(b"\r\n0\r\n\r\n");
            } else {
                body.extend_from_slice(&[b'x'; 100]);
            }
            let target = answering(body).await;
            let req = outgoing(Method::GET, "/", &[], b"");
            let mut conn = H1Conn::new(target.clone());
            let mut asked = Vec::new();
            let reply = conn
                .send_metered(&req, Duration::from_secs(10), &mut |n| {
                    asked.push(n);
                    true
                })
                .await
                .expect("granted");
            assert_eq!(reply.body.len(), 100);
            assert_eq!(asked.last(), Some(&100), "{asked:?}");
            let mut conn = H1Conn::new(target);
            let denied = conn
                .send_metered(&req, Duration::from_secs(10), &mut |n| n <= 50)
                .await
                .expect_err("denied past 50 bytes");
            assert!(denied.message.contains("memory budget"), "{denied}");
        }
    }

    #[tokio::test]
    async fn a_large_body_does_not_share_its_memory_with_the_kept_connection() {
        // Over the detach size, on a kept connection (it goes back to a pool): the body's
        // allocation is its own, not the read buffer's.
        let mut answer = b"HTTP/1.1 200 OK\r\ncontent-length: 1048576\r\n\r\n".to_vec();
        answer.extend(std::iter::repeat_n(b'x', 1 << 20));
        let target = answering(answer).await;
        let req = outgoing(Method::GET, "/", &[], b"");
        let mut conn = H1Conn::new(target);
        let reply = conn
            .send_metered(&req, Duration::from_secs(10), &mut |_| true)
            .await
            .expect("answered");
        assert_eq!(reply.body.len(), 1 << 20);
        let mut body = reply.body;
        assert!(
            body.is_unique(),
            "the body's allocation is the body's alone: dropping it frees it"
        );
        // Still a working connection.
        let again = conn
            .send_metered(&req, Duration::from_secs(10), &mut |_| true)
            .await
            .expect("answered again");
        assert_eq!(again.body.len(), 1 << 20);
        body.clear();
    }

    #[test]
    fn a_request_is_framed_by_its_body_never_by_its_headers() {
        let mut out = Vec::new();
        let req = outgoing(
            Method::POST,
            "/orders?x=1",
            &[
                ("idempotency-key", "k1"),
                ("content-length", "999"),
                ("transfer-encoding", "chunked"),
                ("host", "evil.example"),
            ],
            b"{}",
        );
        encode(&mut out, &req, b"127.0.0.1:8080").expect("encodes");
        let text = String::from_utf8(out).expect("ASCII");
        assert!(
            text.starts_with("POST /orders?x=1 HTTP/1.1\r\nhost: 127.0.0.1:8080\r\n"),
            "{text}"
        );
        assert!(text.contains("idempotency-key: k1\r\n"), "{text}");
        assert!(text.ends_with("content-length: 2\r\n\r\n{}"), "{text}");
        assert!(!text.contains("999") && !text.contains("chunked") && !text.contains("evil"));
        // An empty POST still says its length; a GET without a body says nothing.
        let mut out = Vec::new();
        encode(&mut out, &outgoing(Method::POST, "/", &[], b""), b"h").expect("encodes");
        assert!(String::from_utf8_lossy(&out).contains("content-length: 0\r\n"));
        let mut out = Vec::new();
        encode(&mut out, &outgoing(Method::GET, "/", &[], b""), b"h").expect("encodes");
        assert!(!String::from_utf8_lossy(&out).contains("content-length"));
    }

    #[test]
    fn a_request_target_with_spaces_or_controls_is_refused() {
        for uri in ["", "/a b", "/a\r\nx: y"] {
            let err = encode(&mut Vec::new(), &outgoing(Method::GET, uri, &[], b""), b"h")
                .expect_err("refused");
            assert_eq!(err.kind, ErrorKind::Other, "{uri:?}");
        }
    }

    #[test]
    fn header_tokens_are_read_case_insensitively() {
        let mut h = HeaderMap::new();
        h.append(
            http::header::CONNECTION,
            HeaderValue::from_static("keep-alive, Close"),
        );
        assert!(has_token(&h, http::header::CONNECTION, "close"));
        assert!(!has_token(&h, http::header::CONNECTION, "upgrade"));
        h.append(
            http::header::TRANSFER_ENCODING,
            HeaderValue::from_static("gzip, Chunked"),
        );
        assert!(last_token_is(
            &h,
            http::header::TRANSFER_ENCODING,
            "chunked"
        ));
        assert!(!last_token_is(&h, http::header::TRANSFER_ENCODING, "gzip"));
    }

    #[test]
    fn targets_are_parsed_once_with_their_base_path() {
        let t = Target::parse("http://127.0.0.1:8080/api/").expect("a target");
        assert_eq!(t.authority, "127.0.0.1:8080");
        assert_eq!(t.path("/orders"), "/api/orders");
        assert_eq!(t.addr.port(), 8080);
        assert_eq!(
            Target::parse("http://127.0.0.1")
                .expect("a target")
                .addr
                .port(),
            80
        );
        for bad in ["127.0.0.1:8080", "ftp://x/", "http://"] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        let mut headers = HeaderMap::new();
        headers.insert(http::header::RETRY_AFTER, HeaderValue::from_static("7"));
        let reply = Reply {
            status: StatusCode::SERVICE_UNAVAILABLE,
            headers,
            body: Bytes::new(),
            trailers: None,
        };
        assert_eq!(reply.retry_after(), Some(Duration::from_secs(7)));
        let later = httpdate::fmt_http_date(std::time::SystemTime::now() + Duration::from_secs(60));
        let mut dated = reply.clone();
        dated.headers.insert(
            http::header::RETRY_AFTER,
            HeaderValue::from_str(&later).expect("a date"),
        );
        let wait = dated.retry_after().expect("a date parses");
        assert!(
            wait > Duration::from_secs(55) && wait <= Duration::from_secs(60),
            "{wait:?}"
        );
        let mut junk = reply;
        junk.headers
            .insert(http::header::RETRY_AFTER, HeaderValue::from_static("soon"));
        assert_eq!(junk.retry_after(), None);
    }
}
