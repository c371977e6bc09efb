//! HTTP/2's wire format (RFC 9113 §4, §6): the frame types, flags, error codes and settings by
//! name, a frame read off the connection's bytes, each control frame's payload checked for its
//! size and read, and the frames this side writes. Nothing here knows a stream or a window: the
//! connection's state (`state.rs`) decides what a frame means.
//!
//! A payload of the wrong size is a FRAME_SIZE_ERROR of the whole connection (RFC 9113 §4.2), so
//! these readers fail as [`ConnError`]; the connection answers it with GOAWAY.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use history::ErrorKind;

use crate::AttemptError;

/// What a client sends first on every connection (RFC 9113 §3.4).
pub(super) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

// Frame types.
pub(super) const DATA: u8 = 0x0;
pub(super) const HEADERS: u8 = 0x1;
pub(super) const PRIORITY: u8 = 0x2;
pub(super) const RST_STREAM: u8 = 0x3;
pub(super) const SETTINGS: u8 = 0x4;
pub(super) const PUSH_PROMISE: u8 = 0x5;
pub(super) const PING: u8 = 0x6;
pub(super) const GOAWAY: u8 = 0x7;
pub(super) const WINDOW_UPDATE: u8 = 0x8;
pub(super) const CONTINUATION: u8 = 0x9;

// Flags.
pub(super) const END_STREAM: u8 = 0x1;
pub(super) const ACK: u8 = 0x1;
pub(super) const END_HEADERS: u8 = 0x4;
pub(super) const PADDED: u8 = 0x8;
pub(super) const PRIORITY_FLAG: u8 = 0x20;

// Error codes.
pub(super) const NO_ERROR: u32 = 0x0;
pub(super) const PROTOCOL_ERROR: u32 = 0x1;
pub(super) const FLOW_CONTROL_ERROR: u32 = 0x3;
pub(super) const FRAME_SIZE_ERROR: u32 = 0x6;
pub(super) const REFUSED_STREAM: u32 = 0x7;
pub(super) const CANCEL: u32 = 0x8;
pub(super) const COMPRESSION_ERROR: u32 = 0x9;

// Settings (RFC 9113 §6.5.2, RFC 8441 §3).
pub(super) const SETTINGS_HEADER_TABLE_SIZE: u16 = 0x1;
pub(super) const SETTINGS_ENABLE_PUSH: u16 = 0x2;
pub(super) const SETTINGS_MAX_CONCURRENT_STREAMS: u16 = 0x3;
pub(super) const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
pub(super) const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;
pub(super) const SETTINGS_MAX_HEADER_LIST_SIZE: u16 = 0x6;
pub(super) const SETTINGS_ENABLE_CONNECT_PROTOCOL: u16 = 0x8;

/// The largest frame this side accepts (the protocol's default; never raised).
pub(super) const MAX_FRAME: usize = 16_384;
/// The largest stream id (and window increment): 31 bits, the frame head's reserved bit cleared.
pub(super) const MAX_STREAM_ID: u32 = (1 << 31) - 1;

/// One whole frame read off the connection.
pub(super) struct Frame {
    pub(super) kind: u8,
    pub(super) flags: u8,
    /// The stream id, its reserved bit cleared.
    pub(super) id: u32,
    pub(super) payload: Bytes,
}

/// The next whole frame at the start of `rbuf`, taken out of it; `None` while its bytes are not
/// all there. A frame over [`MAX_FRAME`] fails before its payload is waited for.
pub(super) fn next_frame(rbuf: &mut BytesMut) -> Result<Option<Frame>, ConnError> {
    if rbuf.len() < 9 {
        return Ok(None);
    }
    let h = &rbuf[..9];
    let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
    if len > MAX_FRAME {
        return Err(ConnError::new(
            FRAME_SIZE_ERROR,
            &format!("a frame of {len} bytes, over the {MAX_FRAME} allowed"),
        ));
    }
    if rbuf.len() < 9 + len {
        return Ok(None);
    }
    let (kind, flags) = (h[3], h[4]);
    let id = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & MAX_STREAM_ID;
    rbuf.advance(9);
    let payload = rbuf.split_to(len).freeze();
    Ok(Some(Frame {
        kind,
        flags,
        id,
        payload,
    }))
}

/// The frames that concern one stream: the server opens none (push is off), so one of these on
/// a stream this side never opened breaks the connection (RFC 9113 §5.1).
pub(super) fn is_on_stream(kind: u8) -> bool {
    matches!(
        kind,
        DATA | HEADERS | RST_STREAM | WINDOW_UPDATE | CONTINUATION | PUSH_PROMISE
    )
}

/// A HEADERS payload's header block fragment: its padding and priority stripped.
pub(super) fn headers_fragment(p: &mut Bytes, flags: u8) -> Result<Bytes, ConnError> {
    let mut block = unpad(p, flags)?;
    if flags & PRIORITY_FLAG != 0 {
        if block.len() < 5 {
            return Err(ConnError::new(
                FRAME_SIZE_ERROR,
                "HEADERS too short for its priority",
            ));
        }
        block.advance(5);
    }
    Ok(block)
}

/// RST_STREAM's error code.
pub(super) fn rst_stream_code(mut p: Bytes) -> Result<u32, ConnError> {
    if p.len() != 4 {
        return Err(ConnError::new(
            FRAME_SIZE_ERROR,
            "RST_STREAM of the wrong size",
        ));
    }
    Ok(p.get_u32())
}

/// The parameters of a SETTINGS frame that is not an acknowledgement, in order.
pub(super) fn settings(mut p: Bytes) -> Result<impl Iterator<Item = (u16, u32)>, ConnError> {
    if !p.len().is_multiple_of(6) {
        return Err(ConnError::new(
            FRAME_SIZE_ERROR,
            "SETTINGS of a length not a multiple of 6",
        ));
    }
    Ok(std::iter::from_fn(move || {
        p.has_remaining().then(|| (p.get_u16(), p.get_u32()))
    }))
}

/// PING's eight bytes of opaque data.
pub(super) fn ping_data(p: &Bytes) -> Result<&[u8], ConnError> {
    if p.len() != 8 {
        return Err(ConnError::new(FRAME_SIZE_ERROR, "PING of the wrong size"));
    }
    Ok(p)
}

/// GOAWAY's last stream id and error code (its debug data is not read).
pub(super) fn goaway(mut p: Bytes) -> Result<(u32, u32), ConnError> {
    if p.len() < 8 {
        return Err(ConnError::new(FRAME_SIZE_ERROR, "GOAWAY too short"));
    }
    let last = p.get_u32() & MAX_STREAM_ID;
    Ok((last, p.get_u32()))
}

/// WINDOW_UPDATE's increment.
pub(super) fn window_increment(mut p: Bytes) -> Result<i64, ConnError> {
    if p.len() != 4 {
        return Err(ConnError::new(
            FRAME_SIZE_ERROR,
            "WINDOW_UPDATE of the wrong size",
        ));
    }
    Ok(i64::from(p.get_u32() & MAX_STREAM_ID))
}

/// A breach that ends the connection: the GOAWAY code it is answered with, and every stream's
/// error.
#[derive(Debug)]
pub(super) struct ConnError {
    pub(super) code: u32,
    pub(super) error: AttemptError,
}

impl ConnError {
    pub(super) fn new(code: u32, what: &str) -> ConnError {
        ConnError {
            code,
            error: protocol(&format!("{what} ({})", error_name(code))),
        }
    }

    pub(super) fn protocol(what: &str) -> ConnError {
        ConnError::new(PROTOCOL_ERROR, what)
    }
}

/// Strips a PADDED frame's padding.
pub(super) fn unpad(p: &mut Bytes, flags: u8) -> Result<Bytes, ConnError> {
    if flags & PADDED == 0 {
        return Ok(p.clone());
    }
    if p.is_empty() {
        return Err(ConnError::new(
            FRAME_SIZE_ERROR,
            "padded frame without its pad length",
        ));
    }
    let pad = usize::from(p.get_u8());
    if pad > p.len() {
        return Err(ConnError::protocol("padding longer than the frame"));
    }
    Ok(p.slice(..p.len() - pad))
}

/// A stream failed for a breach of HTTP/2, as the error kind `protocol`.
pub(super) fn protocol(what: &str) -> AttemptError {
    AttemptError {
        kind: ErrorKind::Protocol,
        message: format!("HTTP/2 protocol error: {what}"),
    }
}

/// A stream the server provably did not process, as the error kind `refused`.
pub(super) fn refused(what: &str) -> AttemptError {
    AttemptError {
        kind: ErrorKind::Refused,
        message: what.to_string(),
    }
}

/// A frame type's name, for messages.
pub(super) fn frame_name(kind: u8) -> &'static str {
    match kind {
        DATA => "DATA",
        HEADERS => "HEADERS",
        PRIORITY => "PRIORITY",
        RST_STREAM => "RST_STREAM",
        SETTINGS => "SETTINGS",
        PUSH_PROMISE => "PUSH_PROMISE",
        PING => "PING",
        GOAWAY => "GOAWAY",
        WINDOW_UPDATE => "WINDOW_UPDATE",
        CONTINUATION => "CONTINUATION",
        _ => "a frame",
    }
}

/// An error code's name, for messages.
pub(super) fn error_name(code: u32) -> String {
    let name = match code {
        0x0 => "NO_ERROR",
        0x1 => "PROTOCOL_ERROR",
        0x2 => "INTERNAL_ERROR",
        0x3 => "FLOW_CONTROL_ERROR",
        0x4 => "SETTINGS_TIMEOUT",
        0x5 => "STREAM_CLOSED",
        0x6 => "FRAME_SIZE_ERROR",
        0x7 => "REFUSED_STREAM",
        0x8 => "CANCEL",
        0x9 => "COMPRESSION_ERROR",
        0xa => "CONNECT_ERROR",
        0xb => "ENHANCE_YOUR_CALM",
        0xc => "INADEQUATE_SECURITY",
        0xd => "HTTP_1_1_REQUIRED",
        _ => return format!("error code {code:#x}"),
    };
    name.to_string()
}

/// Writes a frame's 9-byte head.
pub(super) fn frame_head(out: &mut BytesMut, len: usize, kind: u8, flags: u8, id: u32) {
    let len = len as u32;
    out.put_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags]);
    out.put_u32(id & MAX_STREAM_ID);
}

/// A header block as HEADERS and, past the frame size, CONTINUATION frames.
pub(super) fn write_headers(
    out: &mut BytesMut,
    id: u32,
    block: &[u8],
    end_stream: bool,
    max_frame: usize,
) {
    let mut chunks = block.chunks(max_frame.max(1)).peekable();
    let first = chunks.next().unwrap_or(&[]);
    let only = chunks.peek().is_none();
    let mut flags = if end_stream { END_STREAM } else { 0 };
    if only {
        flags |= END_HEADERS;
    }
    frame_head(out, first.len(), HEADERS, flags, id);
    out.extend_from_slice(first);
    while let Some(c) = chunks.next() {
        let last = chunks.peek().is_none();
        frame_head(
            out,
            c.len(),
            CONTINUATION,
            if last { END_HEADERS } else { 0 },
            id,
        );
        out.extend_from_slice(c);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_over_the_frame_size_goes_on_in_continuations() {
        let block = vec![7u8; 40_000];
        let mut out = BytesMut::new();
        write_headers(&mut out, 3, &block, true, 16_384);
        let mut kinds = Vec::new();
        let mut p = out.freeze();
        let mut total = 0;
        while p.len() >= 9 {
            let len = (usize::from(p[0]) << 16) | (usize::from(p[1]) << 8) | usize::from(p[2]);
            kinds.push((p[3], p[4]));
            p.advance(9 + len);
            total += len;
        }
        assert_eq!(total, 40_000);
        assert_eq!(
            kinds,
            [
                (HEADERS, END_STREAM),
                (CONTINUATION, 0),
                (CONTINUATION, END_HEADERS)
            ]
        );
    }
}
