//! A scripted HTTP/2 peer for tests: frames written byte by byte as a test names them, over a
//! blocking socket, with no HTTP/2 library in between — only HPACK (loona-hpack) to encode the
//! header blocks a test sends and decode the ones the server answers with. Whatever the server
//! does (a reset, a GOAWAY, a close) is seen as it came.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// Frame types.
pub const DATA: u8 = 0;
pub const HEADERS: u8 = 1;
pub const PRIORITY: u8 = 2;
pub const RST_STREAM: u8 = 3;
pub const SETTINGS: u8 = 4;
pub const PING: u8 = 6;
pub const GOAWAY: u8 = 7;
pub const WINDOW_UPDATE: u8 = 8;
pub const CONTINUATION: u8 = 9;

/// Flags.
pub const END_STREAM: u8 = 0x1;
pub const ACK: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;

/// SETTINGS identifiers.
pub const SETTINGS_INITIAL_WINDOW_SIZE: u16 = 0x4;
pub const SETTINGS_MAX_FRAME_SIZE: u16 = 0x5;

/// Error codes.
pub const NO_ERROR: u32 = 0x0;
pub const PROTOCOL_ERROR: u32 = 0x1;
pub const FRAME_SIZE_ERROR: u32 = 0x6;
pub const REFUSED_STREAM: u32 = 0x7;
pub const CANCEL: u32 = 0x8;
pub const ENHANCE_YOUR_CALM: u32 = 0xb;

/// One frame.
#[derive(Debug, Clone)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
    /// The header block this frame completes, decoded (HPACK's table is the connection's: every
    /// block is decoded as it arrives, in order).
    pub fields: Option<Vec<(String, String)>>,
}

impl Frame {
    /// Bytes it took on the wire, its 9-byte header included.
    pub fn wire_len(&self) -> u64 {
        9 + self.payload.len() as u64
    }

    /// The error code of a RST_STREAM or GOAWAY.
    pub fn error_code(&self) -> Option<u32> {
        let at = match self.kind {
            RST_STREAM => 0,
            GOAWAY => 4,
            _ => return None,
        };
        let b = self.payload.get(at..at + 4)?;
        Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// A frame's bytes: length, type, flags, stream, payload.
pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len();
    let mut f = vec![(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A SETTINGS payload.
pub fn settings(pairs: &[(u16, u32)]) -> Vec<u8> {
    let mut p = Vec::new();
    for (id, v) in pairs {
        p.extend_from_slice(&id.to_be_bytes());
        p.extend_from_slice(&v.to_be_bytes());
    }
    p
}

/// One client connection.
pub struct Client {
    pub sock: TcpStream,
    enc: loona_hpack::Encoder<'static>,
    dec: loona_hpack::Decoder<'static>,
    /// A header block being gathered from HEADERS and CONTINUATION frames.
    block: Vec<u8>,
}

impl Client {
    /// Connects, sends the preface and a SETTINGS frame with `settings`.
    pub fn connect(addr: SocketAddr, settings_: &[(u16, u32)]) -> Client {
        let mut sock = TcpStream::connect(addr).expect("connect");
        sock.set_read_timeout(Some(Duration::from_secs(30))).ok();
        sock.set_write_timeout(Some(Duration::from_secs(30))).ok();
        sock.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
            .expect("preface");
        sock.write_all(&frame(SETTINGS, 0, 0, &settings(settings_)))
            .expect("SETTINGS");
        Client {
            sock,
            enc: loona_hpack::Encoder::new(),
            dec: loona_hpack::Decoder::new(),
            block: Vec::new(),
        }
    }

    /// Writes raw bytes.
    pub fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.sock.write_all(bytes)
    }

    /// Writes a frame.
    pub fn send(&mut self, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
        self.sock
            .write_all(&frame(kind, flags, stream, payload))
            .expect("write a frame");
    }

    /// A header block for `fields`, HPACK-encoded.
    pub fn encode(&mut self, fields: &[(&str, &str)]) -> Vec<u8> {
        self.enc
            .encode(fields.iter().map(|(n, v)| (n.as_bytes(), v.as_bytes())))
    }

    /// A request's HEADERS: `:method`, `:scheme`, `:path`, `:authority`, then `extra`.
    pub fn request(
        &mut self,
        stream: u32,
        method: &str,
        path: &str,
        extra: &[(&str, &str)],
        end: bool,
    ) {
        let mut fields = vec![
            (":method", method),
            (":scheme", "http"),
            (":path", path),
            (":authority", "127.0.0.1"),
        ];
        fields.extend_from_slice(extra);
        let block = self.encode(&fields);
        self.send_block(stream, &block, end);
    }

    /// A header block as HEADERS and as many CONTINUATION frames as 16 KiB frames take.
    pub fn send_block(&mut self, stream: u32, block: &[u8], end: bool) {
        let pieces: Vec<&[u8]> = block.chunks(16 << 10).collect();
        let pieces = if pieces.is_empty() {
            vec![&block[..0]]
        } else {
            pieces
        };
        let last = pieces.len() - 1;
        for (i, piece) in pieces.iter().enumerate() {
            let mut flags = if i == last { END_HEADERS } else { 0 };
            if i == 0 && end {
                flags |= END_STREAM;
            }
            let kind = if i == 0 { HEADERS } else { CONTINUATION };
            self.send(kind, flags, stream, piece);
        }
    }

    /// WINDOW_UPDATE for `stream` (0: the connection).
    pub fn window_update(&mut self, stream: u32, n: u32) {
        self.send(WINDOW_UPDATE, 0, stream, &n.to_be_bytes());
    }

    /// RST_STREAM.
    pub fn reset(&mut self, stream: u32, code: u32) {
        self.send(RST_STREAM, 0, stream, &code.to_be_bytes());
    }

    /// The next frame; SETTINGS and PING are acknowledged on the way. `None` when the
    /// connection ended (or nothing came within the read timeout).
    pub fn next(&mut self) -> Option<Frame> {
        let mut head = [0u8; 9];
        self.sock.read_exact(&mut head).ok()?;
        let n = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
        let mut payload = vec![0u8; n];
        self.sock.read_exact(&mut payload).ok()?;
        let mut f = Frame {
            kind: head[3],
            flags: head[4],
            stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
            payload,
            fields: None,
        };
        f.fields = self.decode_block(&f);
        match (f.kind, f.flags & ACK) {
            (SETTINGS, 0) => {
                let _ = self.sock.write_all(&frame(SETTINGS, ACK, 0, &[]));
            }
            (PING, 0) => {
                let _ = self.sock.write_all(&frame(PING, ACK, 0, &f.payload));
            }
            _ => {}
        }
        Some(f)
    }

    /// The fields of the header block `f` ends, decoded when it arrived.
    pub fn fields(&mut self, f: &Frame) -> Option<Vec<(String, String)>> {
        f.fields.clone()
    }

    /// The fields of a complete header block that `f` ends (a HEADERS or CONTINUATION frame with
    /// END_HEADERS); `None` while the block goes on (or `f` carries none).
    fn decode_block(&mut self, f: &Frame) -> Option<Vec<(String, String)>> {
        let mut payload = &f.payload[..];
        match f.kind {
            HEADERS => {
                self.block.clear();
                let mut start = 0;
                let mut end = payload.len();
                if f.flags & 0x8 != 0 {
                    let pad = usize::from(payload[0]);
                    start = 1;
                    end -= pad;
                }
                if f.flags & 0x20 != 0 {
                    start += 5;
                }
                payload = &payload[start..end];
            }
            CONTINUATION => {}
            _ => return None,
        }
        self.block.extend_from_slice(payload);
        if f.flags & END_HEADERS == 0 {
            return None;
        }
        let decoded = self
            .dec
            .decode(&self.block)
            .expect("the server's HPACK decodes");
        Some(
            decoded
                .into_iter()
                .map(|(n, v)| {
                    (
                        String::from_utf8_lossy(&n).into_owned(),
                        String::from_utf8_lossy(&v).into_owned(),
                    )
                })
                .collect(),
        )
    }
}

/// One header field as an HPACK literal without indexing and without Huffman coding (RFC 7541
/// §6.2.2): it leaves the decoder's table as it was.
pub fn literal(name: &str, value: &str) -> Vec<u8> {
    let mut out = vec![0x00];
    for s in [name, value] {
        // A 7-bit prefix integer (RFC 7541 §5.1), the H bit clear.
        let mut n = s.len();
        if n < 127 {
            out.push(n as u8);
        } else {
            out.push(127);
            n -= 127;
            while n >= 128 {
                out.push((n % 128) as u8 | 0x80);
                n /= 128;
            }
            out.push(n as u8);
        }
        out.extend_from_slice(s.as_bytes());
    }
    out
}

/// A header block's `:status`.
pub fn status(fields: &[(String, String)]) -> Option<u16> {
    fields
        .iter()
        .find(|(n, _)| n == ":status")
        .and_then(|(_, v)| v.parse().ok())
}
