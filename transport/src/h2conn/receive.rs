//! What each frame the server sends does to the connection: one handler per frame type, each
//! checking what RFC 9113 says of that frame where its bytes arrive, then the header blocks
//! decoded, checked field by field and counted against the header list's limit.
//!
//! A breach that concerns one stream fails that stream (RST_STREAM) and the handler returns
//! `Ok`; one that leaves the connection's state unknown returns the [`ConnError`] the driver
//! answers with GOAWAY.

use bytes::{BufMut, Bytes, BytesMut};
use history::ErrorKind;
use http::{HeaderMap, StatusCode};

use super::frame::{
    self, error_name, frame_head, frame_name, is_on_stream, next_frame, refused, unpad, ConnError,
    Frame, ACK, CANCEL, COMPRESSION_ERROR, CONTINUATION, DATA, END_HEADERS, END_STREAM,
    FLOW_CONTROL_ERROR, FRAME_SIZE_ERROR, GOAWAY, HEADERS, PING, PRIORITY, PROTOCOL_ERROR,
    PUSH_PROMISE, REFUSED_STREAM, RST_STREAM, SETTINGS, SETTINGS_ENABLE_CONNECT_PROTOCOL,
    SETTINGS_ENABLE_PUSH, SETTINGS_HEADER_TABLE_SIZE, SETTINGS_INITIAL_WINDOW_SIZE,
    SETTINGS_MAX_CONCURRENT_STREAMS, SETTINGS_MAX_FRAME_SIZE, WINDOW_UPDATE,
};
use super::state::{ConnState, CONN_WINDOW, MAX_WINDOW, OWN_STREAM_CAP, STREAM_WINDOW};
use crate::hpack::{field_name, Field};
use crate::{over_limit, AttemptError};

/// Handles every whole frame in `rbuf`, leaving a partial one there.
pub(super) fn read_frames(rbuf: &mut BytesMut, state: &mut ConnState) -> Result<(), ConnError> {
    while let Some(frame) = next_frame(rbuf)? {
        state.on_frame(frame)?;
    }
    Ok(())
}

impl ConnState {
    /// Handles one frame; an error is the connection's.
    fn on_frame(&mut self, frame: Frame) -> Result<(), ConnError> {
        let Frame {
            kind,
            flags,
            id,
            payload,
        } = frame;
        if let Some((pid, _, _)) = &self.partial {
            if kind != CONTINUATION || id != *pid {
                return Err(ConnError::protocol(
                    "a header block was interrupted by another frame",
                ));
            }
        }
        if !self.settings_seen && (kind != SETTINGS || flags & ACK != 0) {
            return Err(ConnError::protocol(
                "the server's first frame is not SETTINGS (RFC 9113 §3.4)",
            ));
        }
        // The server opens no stream (push is off): a frame on one this side never opened is a
        // broken connection (RFC 9113 §5.1), whatever it says.
        if is_on_stream(kind) && id != 0 && (id.is_multiple_of(2) || id >= self.next_id) {
            return Err(ConnError::protocol(&format!(
                "{} on stream {id}, which this side never opened",
                frame_name(kind)
            )));
        }
        match kind {
            DATA => self.on_data(flags, id, payload),
            HEADERS => self.on_headers(flags, id, payload),
            CONTINUATION => self.on_continuation(flags, payload),
            PRIORITY => self.on_priority(id, &payload),
            RST_STREAM => self.on_rst_stream(id, payload),
            SETTINGS => self.on_settings(flags, id, payload),
            PUSH_PROMISE => Err(ConnError::protocol("PUSH_PROMISE, with push disabled")),
            PING => self.on_ping(flags, id, &payload),
            GOAWAY => self.on_goaway(id, payload),
            WINDOW_UPDATE => self.on_window_update(id, payload),
            // A frame of a type this side does not know is ignored (RFC 9113 §4.1).
            _ => Ok(()),
        }
    }

    /// DATA: counted against the connection's receive window (given back at half), then the
    /// stream's.
    fn on_data(&mut self, flags: u8, id: u32, mut p: Bytes) -> Result<(), ConnError> {
        if id == 0 {
            return Err(ConnError::protocol("DATA on stream 0"));
        }
        let whole = p.len() as u32;
        if self.unacked + whole > CONN_WINDOW {
            return Err(ConnError::new(
                FLOW_CONTROL_ERROR,
                "DATA beyond the connection's receive window",
            ));
        }
        let data = unpad(&mut p, flags)?;
        self.unacked += whole;
        if self.unacked >= CONN_WINDOW / 2 {
            frame_head(&mut self.out, 4, WINDOW_UPDATE, 0, 0);
            self.out.put_u32(self.unacked);
            self.unacked = 0;
        }
        self.stream_data(id, flags & END_STREAM != 0, whole, &data);
        Ok(())
    }

    /// HEADERS: a whole header block, or the start of one its CONTINUATIONs finish.
    fn on_headers(&mut self, flags: u8, id: u32, mut p: Bytes) -> Result<(), ConnError> {
        if id == 0 {
            return Err(ConnError::protocol("HEADERS on stream 0"));
        }
        let block = frame::headers_fragment(&mut p, flags)?;
        if flags & END_HEADERS == 0 {
            self.partial = Some((id, flags, BytesMut::from(&block[..])));
        } else {
            self.on_header_block(id, flags, &block)?;
        }
        Ok(())
    }

    /// CONTINUATION: more of the header block HEADERS began, bounded by [`ConnState::block_cap`].
    fn on_continuation(&mut self, flags: u8, p: Bytes) -> Result<(), ConnError> {
        let Some((pid, pflags, mut block)) = self.partial.take() else {
            return Err(ConnError::protocol("CONTINUATION without HEADERS"));
        };
        if block.len() + p.len() > self.block_cap {
            return Err(ConnError::protocol(&format!(
                "a header block over {} bytes",
                self.block_cap
            )));
        }
        block.extend_from_slice(&p);
        if flags & END_HEADERS == 0 {
            self.partial = Some((pid, pflags, block));
        } else {
            self.on_header_block(pid, pflags, &block)?;
        }
        Ok(())
    }

    /// PRIORITY: read for its size only (this side sets no priorities).
    fn on_priority(&mut self, id: u32, p: &Bytes) -> Result<(), ConnError> {
        if id == 0 {
            return Err(ConnError::protocol("PRIORITY on stream 0"));
        }
        if p.len() != 5 && self.streams.get(&id).is_some_and(|s| s.done.is_none()) {
            self.stream_error(id, FRAME_SIZE_ERROR, "PRIORITY of the wrong size");
        }
        Ok(())
    }

    /// RST_STREAM: the stream fails, as `refused` when the server says it did not process it.
    fn on_rst_stream(&mut self, id: u32, p: Bytes) -> Result<(), ConnError> {
        if id == 0 {
            return Err(ConnError::protocol("RST_STREAM on stream 0"));
        }
        let code = frame::rst_stream_code(p)?;
        let error = if code == REFUSED_STREAM {
            refused("the server refused the stream (REFUSED_STREAM) before processing it")
        } else {
            AttemptError {
                kind: ErrorKind::Reset,
                message: format!("stream reset by the server: {}", error_name(code)),
            }
        };
        self.complete(id, Err(error));
        Ok(())
    }

    /// SETTINGS: the server's limits taken, acknowledged; requests waiting for them may go.
    fn on_settings(&mut self, flags: u8, id: u32, p: Bytes) -> Result<(), ConnError> {
        if id != 0 {
            return Err(ConnError::protocol("SETTINGS on a stream"));
        }
        if flags & ACK != 0 {
            if !p.is_empty() {
                return Err(ConnError::new(
                    FRAME_SIZE_ERROR,
                    "a SETTINGS acknowledgement with a payload",
                ));
            }
            return Ok(());
        }
        let params = frame::settings(p)?;
        let first = !self.settings_seen;
        self.settings_seen = true;
        let mut concurrency = None;
        for (key, value) in params {
            match key {
                SETTINGS_ENABLE_PUSH if value != 0 => {
                    return Err(ConnError::protocol(&format!(
                        "SETTINGS_ENABLE_PUSH {value} from a server"
                    )))
                }
                SETTINGS_HEADER_TABLE_SIZE => self.encoder.set_limit(value as usize),
                SETTINGS_MAX_CONCURRENT_STREAMS => concurrency = Some(value),
                SETTINGS_INITIAL_WINDOW_SIZE => {
                    if i64::from(value) > MAX_WINDOW {
                        return Err(ConnError::new(
                            FLOW_CONTROL_ERROR,
                            "SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1",
                        ));
                    }
                    let delta = i64::from(value) - self.initial_window;
                    self.initial_window = i64::from(value);
                    for slot in self.streams.values_mut() {
                        slot.send_window += delta;
                        if slot.send_window > MAX_WINDOW {
                            return Err(ConnError::new(
                                FLOW_CONTROL_ERROR,
                                "SETTINGS_INITIAL_WINDOW_SIZE overflows a stream's window",
                            ));
                        }
                    }
                }
                SETTINGS_MAX_FRAME_SIZE => {
                    if !(16_384..=16_777_215).contains(&value) {
                        return Err(ConnError::protocol(&format!(
                            "SETTINGS_MAX_FRAME_SIZE {value} out of range"
                        )));
                    }
                    self.max_frame = value as usize;
                }
                SETTINGS_ENABLE_CONNECT_PROTOCOL if value > 1 => {
                    return Err(ConnError::protocol(&format!(
                        "SETTINGS_ENABLE_CONNECT_PROTOCOL {value}"
                    )))
                }
                _ => {}
            }
        }
        match concurrency {
            Some(n) => self.max_concurrent = (n as usize).min(OWN_STREAM_CAP),
            None if first => self.max_concurrent = OWN_STREAM_CAP,
            None => {}
        }
        frame_head(&mut self.out, 0, SETTINGS, ACK, 0);
        self.resume_bodies();
        for w in self.waiting.drain(..) {
            w.wake();
        }
        Ok(())
    }

    /// PING: answered; an acknowledgement answers the keep-alive's.
    fn on_ping(&mut self, flags: u8, id: u32, p: &Bytes) -> Result<(), ConnError> {
        if id != 0 {
            return Err(ConnError::protocol("PING on a stream"));
        }
        let data = frame::ping_data(p)?;
        if flags & ACK == 0 {
            frame_head(&mut self.out, 8, PING, ACK, 0);
            self.out.extend_from_slice(data);
        } else {
            self.ping_out = false;
        }
        Ok(())
    }

    /// GOAWAY: no new stream; the streams above its last id fail as `refused`.
    fn on_goaway(&mut self, id: u32, p: Bytes) -> Result<(), ConnError> {
        if id != 0 {
            return Err(ConnError::protocol("GOAWAY on a stream"));
        }
        let (last, code) = frame::goaway(p)?;
        self.draining = true;
        let refused_ids: Vec<u32> = self.streams.keys().copied().filter(|&s| s > last).collect();
        for s in refused_ids {
            self.complete(
                s,
                Err(refused(&format!(
                    "the server's GOAWAY ({}, last stream {last}) says it did not \
                     process this stream",
                    error_name(code)
                ))),
            );
        }
        for w in self.waiting.drain(..) {
            w.wake();
        }
        Ok(())
    }

    /// WINDOW_UPDATE: the connection's or a stream's send window grows; bodies waiting on it go.
    fn on_window_update(&mut self, id: u32, p: Bytes) -> Result<(), ConnError> {
        let inc = frame::window_increment(p)?;
        if id == 0 {
            if inc == 0 {
                return Err(ConnError::protocol(
                    "a WINDOW_UPDATE of 0 on the connection",
                ));
            }
            if self.send_window + inc > MAX_WINDOW {
                return Err(ConnError::new(
                    FLOW_CONTROL_ERROR,
                    "WINDOW_UPDATE past 2^31-1 on the connection",
                ));
            }
            self.send_window += inc;
        } else if let Some(slot) = self.streams.get_mut(&id) {
            if slot.done.is_none() {
                if inc == 0 {
                    self.stream_error(id, PROTOCOL_ERROR, "a WINDOW_UPDATE of 0");
                } else if slot.send_window + inc > MAX_WINDOW {
                    self.stream_error(
                        id,
                        FLOW_CONTROL_ERROR,
                        "WINDOW_UPDATE past 2^31-1 on the stream",
                    );
                } else {
                    slot.send_window += inc;
                }
            }
        }
        self.resume_bodies();
        Ok(())
    }

    /// A DATA frame's `data` (`whole` bytes with padding) for stream `id`, once the connection's
    /// window took it.
    fn stream_data(&mut self, id: u32, end: bool, whole: u32, data: &[u8]) {
        let max_body = self.limits.max_body;
        let Some(slot) = self.streams.get_mut(&id) else {
            // A stream of ours already finished (answered, reset or given up).
            return;
        };
        if slot.done.is_some() {
            return;
        }
        let problem = if !slot.head_done {
            Some((PROTOCOL_ERROR, "DATA before the answer's head".to_string()))
        } else if slot.no_content && !data.is_empty() {
            Some((
                PROTOCOL_ERROR,
                "DATA in an answer that has no content (to HEAD, or 204 or 304)".to_string(),
            ))
        } else if slot.unacked + whole > STREAM_WINDOW {
            Some((
                FLOW_CONTROL_ERROR,
                "DATA beyond the stream's receive window".to_string(),
            ))
        } else {
            let len = (slot.body.len() + data.len()) as u64;
            match slot.expect_len {
                Some(n) if len > n => Some((
                    PROTOCOL_ERROR,
                    format!("DATA longer than the content-length of {n}"),
                )),
                Some(n) if end && len < n => Some((
                    PROTOCOL_ERROR,
                    format!("the answer ended after {len} of its content-length of {n} bytes"),
                )),
                _ => None,
            }
        };
        if let Some((code, what)) = problem {
            self.stream_error(id, code, &what);
            return;
        }
        if (slot.body.len() + data.len()) as u64 > max_body {
            frame_head(&mut self.out, 4, RST_STREAM, 0, id);
            self.out.put_u32(CANCEL);
            self.complete(id, Err(over_limit(max_body)));
            return;
        }
        slot.body.push(data);
        slot.unacked += whole;
        if !end && slot.unacked >= STREAM_WINDOW / 2 {
            let n = slot.unacked;
            slot.unacked = 0;
            frame_head(&mut self.out, 4, WINDOW_UPDATE, 0, id);
            self.out.put_u32(n);
        }
        if end {
            self.complete(id, Ok(()));
        }
    }

    /// A whole header block for stream `id`: decoded always (the decoder's table must follow the
    /// server's), its fields checked and counted as they come, kept when the stream is ours and
    /// waiting.
    fn on_header_block(&mut self, id: u32, flags: u8, block: &[u8]) -> Result<(), ConnError> {
        let end = flags & END_STREAM != 0;
        let part = match self.streams.get(&id) {
            Some(s) if s.done.is_none() && s.head_done => Part::Trailers,
            Some(s) if s.done.is_none() => Part::Head,
            _ => Part::Ignored,
        };
        let mut list = FieldList::new(self.limits.max_header_list, part);
        self.decoder
            .decode(block, |f| list.push(f))
            .map_err(|e| ConnError::new(COMPRESSION_ERROR, &format!("HPACK: {}", e.0)))?;
        if part == Part::Ignored {
            return Ok(());
        }
        if let Some(what) = list.error {
            self.stream_error(id, PROTOCOL_ERROR, &what);
            return Ok(());
        }
        let Some(slot) = self.streams.get_mut(&id) else {
            return Ok(());
        };
        if part == Part::Trailers {
            if !end {
                self.stream_error(id, PROTOCOL_ERROR, "trailers without END_STREAM");
                return Ok(());
            }
            let len = slot.body.len() as u64;
            if let Some(n) = slot.expect_len.filter(|&n| n != len) {
                let what =
                    format!("the answer ended after {len} of its content-length of {n} bytes");
                self.stream_error(id, PROTOCOL_ERROR, &what);
                return Ok(());
            }
            slot.trailers = Some(list.headers);
            self.complete(id, Ok(()));
            return Ok(());
        }
        let Some(status) = list.status else {
            self.stream_error(id, PROTOCOL_ERROR, "an answer without :status");
            return Ok(());
        };
        if status.is_informational() {
            // An interim answer (100, 103…): the final one follows, on the same stream.
            let what = if status == StatusCode::SWITCHING_PROTOCOLS {
                Some("101 Switching Protocols, which HTTP/2 does not have")
            } else if end {
                Some("an informational answer with END_STREAM")
            } else {
                None
            };
            if let Some(what) = what {
                self.stream_error(id, PROTOCOL_ERROR, &format!("{what} ({status})"));
            }
            return Ok(());
        }
        let bodiless = slot.head_request
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED;
        let expect_len = list.content_length.filter(|_| !bodiless);
        slot.status = Some(status);
        slot.headers = list.headers;
        slot.head_done = true;
        slot.expect_len = expect_len;
        slot.no_content = bodiless;
        if end {
            if let Some(n) = expect_len.filter(|&n| n != 0) {
                let what = format!("the answer ended after 0 of its content-length of {n} bytes");
                self.stream_error(id, PROTOCOL_ERROR, &what);
                return Ok(());
            }
            self.complete(id, Ok(()));
        }
        Ok(())
    }
}

/// Which header block of a stream is being read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    /// The answer's head (or an interim one).
    Head,
    /// The trailers, after the head and the body.
    Trailers,
    /// For no stream awaited: decoded for the table's sake only.
    Ignored,
}

/// An answer's header list as its fields are decoded: checked field by field against RFC 9113
/// §8.2–8.3 and counted against the list's limit before anything is kept, so that a breach
/// costs no more than the limit, and a `HeaderMap` is never asked to hold more than it can.
struct FieldList {
    part: Part,
    limit: usize,
    /// The list's size so far (RFC 7541 §4.1: name, value and 32 per field).
    size: usize,
    status: Option<StatusCode>,
    /// A regular field came (a pseudo-header may no longer).
    regular: bool,
    content_length: Option<u64>,
    headers: HeaderMap,
    /// The first breach: the stream fails with it; the rest of the block is only decoded.
    error: Option<String>,
}

impl FieldList {
    fn new(limit: usize, part: Part) -> FieldList {
        FieldList {
            part,
            limit,
            size: 0,
            status: None,
            regular: false,
            content_length: None,
            headers: HeaderMap::new(),
            error: None,
        }
    }

    fn push(&mut self, f: Field<'_>) {
        if self.error.is_some() || self.part == Part::Ignored {
            return;
        }
        self.size += f.name.len() + f.value.len() + 32;
        if self.size > self.limit {
            self.headers = HeaderMap::new();
            self.error = Some(format!(
                "the answer's header list is over the limit of {} bytes \
                 (SETTINGS_MAX_HEADER_LIST_SIZE)",
                self.limit
            ));
            return;
        }
        if f.name.first() == Some(&b':') {
            self.error = self.pseudo(f.name, f.value).err();
            return;
        }
        self.regular = true;
        let Some((name, value)) = f.typed else {
            self.error = Some(field_problem(f.name, f.value));
            return;
        };
        if name == http::header::CONTENT_LENGTH {
            let n = std::str::from_utf8(f.value)
                .ok()
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|v| v.parse::<u64>().ok());
            match (n, self.content_length) {
                (None, _) => {
                    self.error = Some(format!(
                        "invalid content-length {:?}",
                        String::from_utf8_lossy(f.value)
                    ));
                    return;
                }
                (Some(n), Some(m)) if n != m => {
                    self.error = Some(format!("conflicting content-lengths {m} and {n}"));
                    return;
                }
                (n, _) => self.content_length = n,
            }
        }
        if self.headers.try_append(name, value).is_err() {
            self.headers = HeaderMap::new();
            self.error = Some("more header fields than a header map can hold".into());
        }
    }

    /// A pseudo-header: only `:status`, once, first, and not in trailers (RFC 9113 §8.3).
    fn pseudo(&mut self, name: &[u8], value: &[u8]) -> Result<(), String> {
        if name == b":status" && self.part != Part::Trailers && !self.regular {
            if self.status.is_some() {
                return Err("a second :status".into());
            }
            let status = (value.len() == 3 && value.iter().all(u8::is_ascii_digit))
                .then(|| std::str::from_utf8(value).ok()?.parse::<u16>().ok())
                .flatten()
                .and_then(|s| StatusCode::from_u16(s).ok())
                .ok_or_else(|| format!(":status {:?}", String::from_utf8_lossy(value)))?;
            self.status = Some(status);
            return Ok(());
        }
        // Named only when it is refused: every answer has a `:status`.
        let shown = String::from_utf8_lossy(name);
        if self.part == Part::Trailers {
            return Err(format!("pseudo-header {shown} in trailers"));
        }
        if self.regular {
            return Err(format!("pseudo-header {shown} after a regular field"));
        }
        Err(format!("pseudo-header {shown} in an answer"))
    }
}

/// Why a regular field has no typed form: what RFC 9113 §8.2 it breaks.
fn field_problem(name: &[u8], value: &[u8]) -> String {
    let shown = String::from_utf8_lossy(name);
    if name.iter().any(u8::is_ascii_uppercase) {
        format!("field name {shown:?} has uppercase letters (RFC 9113 §8.2.1)")
    } else if http::HeaderName::from_bytes(name).is_err() {
        format!("invalid field name {shown:?}")
    } else if field_name(name).is_none() {
        format!("connection-specific field {shown} (RFC 9113 §8.2.2)")
    } else {
        let _ = value;
        format!("invalid value of {shown} (a control character, or whitespace at an end)")
    }
}
