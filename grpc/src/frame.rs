//! The Length-Prefixed-Message: a compressed flag (one byte), a length (four bytes, big endian)
//! and the message. DATA frames do not align with messages, so the decoder is fed whatever
//! arrives and yields whole messages.
//!
//! One limit, checked where the bytes arrive: a message's declared length above the maximum is
//! refused before any of it is buffered, and a compressed message may not inflate past it
//! either, so a peer cannot make the decoder hold more than one maximum-sized message.

use std::io::Read;

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// The prefix's size.
pub const PREFIX_LEN: usize = 5;

/// gRPC's default limit on a received message (4 MiB, as the reference implementations use).
pub const DEFAULT_MAX_MESSAGE: usize = 4 << 20;

/// How messages are compressed (`grpc-encoding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Not compressed.
    Identity,
    /// gzip (RFC 1952).
    Gzip,
}

impl Encoding {
    /// The `grpc-encoding` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Identity => "identity",
            Encoding::Gzip => "gzip",
        }
    }

    /// The encoding a `grpc-encoding` value names, if this crate speaks it.
    pub fn parse(value: &str) -> Result<Encoding, FrameError> {
        match value.trim() {
            v if v.eq_ignore_ascii_case("identity") => Ok(Encoding::Identity),
            v if v.eq_ignore_ascii_case("gzip") => Ok(Encoding::Gzip),
            other => Err(FrameError::UnsupportedEncoding(other.to_string())),
        }
    }
}

/// A message stream that breaks the framing rules or a limit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A message longer than the maximum.
    #[error("a message of {len} bytes is over the limit of {max} bytes")]
    TooLarge {
        /// Its declared (or inflated) length.
        len: u64,
        /// The limit.
        max: usize,
    },
    /// The compressed flag is set but no `grpc-encoding` was negotiated.
    #[error("a compressed message, but the response named no grpc-encoding")]
    CompressedWithoutEncoding,
    /// The flag byte is neither 0 nor 1.
    #[error("invalid compressed flag {0} (expected 0 or 1)")]
    BadFlag(u8),
    /// The stream ended inside a message.
    #[error("the stream ended inside a message ({have} of {need} bytes)")]
    Truncated {
        /// Bytes there are.
        have: usize,
        /// Bytes the prefix promised (prefix included).
        need: usize,
    },
    /// A `grpc-encoding` this crate does not speak.
    #[error("unsupported grpc-encoding {0:?} (identity and gzip are supported)")]
    UnsupportedEncoding(String),
    /// The message did not decompress.
    #[error("cannot decompress a message: {0}")]
    Decompress(String),
}

/// `message` with its prefix, compressed as `encoding` says.
pub fn encode(message: &[u8], encoding: Encoding) -> Bytes {
    let mut out = BytesMut::new();
    encode_into(&mut out, message, encoding);
    out.freeze()
}

/// Appends `message` with its prefix to `out`.
pub fn encode_into(out: &mut BytesMut, message: &[u8], encoding: Encoding) {
    match encoding {
        Encoding::Identity => {
            out.reserve(PREFIX_LEN + message.len());
            out.put_u8(0);
            out.put_u32(len_u32(message.len()));
            out.put_slice(message);
        }
        Encoding::Gzip => {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            // Writing to a Vec cannot fail.
            let _ = std::io::Write::write_all(&mut gz, message);
            let packed = gz.finish().unwrap_or_default();
            out.reserve(PREFIX_LEN + packed.len());
            out.put_u8(1);
            out.put_u32(len_u32(packed.len()));
            out.put_slice(&packed);
        }
    }
}

/// A length as the prefix holds it; a message of 4 GiB or more cannot be framed at all, and
/// nothing in this crate builds one (the limits are far below).
fn len_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Whole messages out of a stream of DATA bytes.
#[derive(Debug)]
pub struct Decoder {
    buf: BytesMut,
    max: usize,
    encoding: Option<Encoding>,
}

impl Decoder {
    /// A decoder of messages up to `max` bytes; `encoding` is the response's `grpc-encoding`
    /// (`None` when it named none: then a compressed message is an error).
    pub fn new(max: usize, encoding: Option<Encoding>) -> Decoder {
        Decoder {
            buf: BytesMut::new(),
            max,
            encoding,
        }
    }

    /// Adds bytes as they arrived.
    pub fn push(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next whole message, if one is buffered.
    pub fn next_message(&mut self) -> Result<Option<Bytes>, FrameError> {
        if self.buf.len() < PREFIX_LEN {
            return Ok(None);
        }
        let flag = self.buf[0];
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]);
        let compressed = match flag {
            0 => false,
            1 => true,
            f => return Err(FrameError::BadFlag(f)),
        };
        if u64::from(len) > self.max as u64 {
            return Err(FrameError::TooLarge {
                len: u64::from(len),
                max: self.max,
            });
        }
        let len = len as usize;
        if compressed && matches!(self.encoding, None | Some(Encoding::Identity)) {
            return Err(FrameError::CompressedWithoutEncoding);
        }
        if self.buf.len() < PREFIX_LEN + len {
            return Ok(None);
        }
        self.buf.advance(PREFIX_LEN);
        let body = self.buf.split_to(len).freeze();
        if !compressed {
            return Ok(Some(body));
        }
        let mut out = Vec::new();
        let limit = self.max as u64 + 1;
        flate2::read::GzDecoder::new(&body[..])
            .take(limit)
            .read_to_end(&mut out)
            .map_err(|e| FrameError::Decompress(e.to_string()))?;
        if out.len() > self.max {
            return Err(FrameError::TooLarge {
                len: out.len() as u64,
                max: self.max,
            });
        }
        Ok(Some(Bytes::from(out)))
    }

    /// The stream ended: an error if it ended inside a message.
    pub fn finish(&self) -> Result<(), FrameError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let need = if self.buf.len() >= PREFIX_LEN {
            PREFIX_LEN
                + u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize
        } else {
            PREFIX_LEN
        };
        Err(FrameError::Truncated {
            have: self.buf.len(),
            need,
        })
    }
}

/// Every message of a whole body, at most `max` bytes each.
pub fn decode_all(
    body: &[u8],
    max: usize,
    encoding: Option<Encoding>,
) -> Result<Vec<Bytes>, FrameError> {
    let mut d = Decoder::new(max, encoding);
    d.push(body);
    let mut out = Vec::new();
    while let Some(m) = d.next_message()? {
        out.push(m);
    }
    d.finish()?;
    Ok(out)
}

/// [`decode_all`] of a body held in [`Bytes`]: a body that is exactly one uncompressed message
/// within `max` — a unary call's answer — is sliced, not copied.
pub fn decode_all_bytes(
    body: &Bytes,
    max: usize,
    encoding: Option<Encoding>,
) -> Result<Vec<Bytes>, FrameError> {
    if let [0, a, b, c, d, ..] = body[..] {
        let len = u32::from_be_bytes([a, b, c, d]) as usize;
        if body.len() - PREFIX_LEN == len && len <= max {
            return Ok(vec![body.slice(PREFIX_LEN..)]);
        }
    }
    decode_all(body, max, encoding)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sliced or copied, the same messages and the same errors.
    #[test]
    fn a_body_in_bytes_decodes_as_a_slice_does() {
        let one = encode(b"hello", Encoding::Identity);
        let mut two = one.to_vec();
        two.extend_from_slice(&encode(b"", Encoding::Identity));
        let gz = encode(b"zipped", Encoding::Gzip);
        let cases: Vec<(Vec<u8>, usize, Option<Encoding>)> = vec![
            (one.to_vec(), 10, None),
            (one.to_vec(), 5, None),
            (one.to_vec(), 4, None),
            (two, 10, None),
            (gz.to_vec(), 10, Some(Encoding::Gzip)),
            (gz.to_vec(), 10, None),
            (one[..7].to_vec(), 10, None),
            (vec![2, 0, 0, 0, 0], 10, None),
            (vec![0, 0, 0], 10, None),
            (Vec::new(), 10, None),
        ];
        for (body, max, enc) in cases {
            let sliced = decode_all_bytes(&Bytes::from(body.clone()), max, enc);
            let copied = decode_all(&body, max, enc);
            assert_eq!(
                format!("{sliced:?}"),
                format!("{copied:?}"),
                "{body:?} max {max}"
            );
        }
    }

    #[test]
    fn a_message_is_flag_length_bytes() {
        assert_eq!(
            &encode(b"hi", Encoding::Identity)[..],
            b"\x00\x00\x00\x00\x02hi"
        );
        assert_eq!(
            &encode(b"", Encoding::Identity)[..],
            b"\x00\x00\x00\x00\x00"
        );
        let msgs = decode_all(b"\x00\x00\x00\x00\x02hi\x00\x00\x00\x00\x00", 10, None).unwrap();
        assert_eq!(msgs, [Bytes::from_static(b"hi"), Bytes::new()]);
    }

    #[test]
    fn messages_split_anywhere_across_data_frames() {
        let mut stream = BytesMut::new();
        for m in [&b"alpha"[..], b"", b"a longer third message"] {
            encode_into(&mut stream, m, Encoding::Identity);
        }
        for chunk in 1..=stream.len() {
            let mut d = Decoder::new(100, None);
            let mut got = Vec::new();
            for piece in stream.chunks(chunk) {
                d.push(piece);
                while let Some(m) = d.next_message().unwrap() {
                    got.push(m);
                }
            }
            d.finish().unwrap();
            assert_eq!(got.len(), 3, "chunks of {chunk}");
            assert_eq!(&got[2][..], b"a longer third message");
        }
    }

    #[test]
    fn the_limit_is_checked_on_the_prefix_before_buffering() {
        let mut d = Decoder::new(4, None);
        d.push(b"\x00\x00\x00\x00\x05");
        assert_eq!(
            d.next_message(),
            Err(FrameError::TooLarge { len: 5, max: 4 })
        );
        let mut d = Decoder::new(DEFAULT_MAX_MESSAGE, None);
        d.push(b"\x00\xff\xff\xff\xff");
        assert!(matches!(d.next_message(), Err(FrameError::TooLarge { .. })));
    }

    #[test]
    fn truncation_and_bad_flags_are_errors() {
        let e = decode_all(b"\x00\x00\x00\x00\x05abc", 10, None).unwrap_err();
        assert_eq!(e, FrameError::Truncated { have: 8, need: 10 });
        assert!(decode_all(b"\x00\x00", 10, None).is_err());
        assert_eq!(
            decode_all(b"\x02\x00\x00\x00\x00", 10, None),
            Err(FrameError::BadFlag(2))
        );
    }

    #[test]
    fn a_compressed_message_needs_a_negotiated_encoding() {
        let packed = encode(b"hello hello hello", Encoding::Gzip);
        assert_eq!(packed[0], 1);
        assert_eq!(
            decode_all(&packed, 100, None),
            Err(FrameError::CompressedWithoutEncoding)
        );
        assert_eq!(
            decode_all(&packed, 100, Some(Encoding::Identity)),
            Err(FrameError::CompressedWithoutEncoding)
        );
        let msgs = decode_all(&packed, 100, Some(Encoding::Gzip)).unwrap();
        assert_eq!(&msgs[0][..], b"hello hello hello");
        // An uncompressed message is fine whatever the encoding.
        let plain = encode(b"x", Encoding::Identity);
        assert_eq!(
            decode_all(&plain, 10, Some(Encoding::Gzip)).unwrap().len(),
            1
        );
    }

    #[test]
    fn a_gzip_bomb_stops_at_the_limit_and_garbage_is_refused() {
        let big = vec![0u8; 1 << 20];
        let packed = encode(&big, Encoding::Gzip);
        assert!(packed.len() < 10_000);
        assert!(matches!(
            decode_all(&packed, 1000, Some(Encoding::Gzip)),
            Err(FrameError::TooLarge { max: 1000, .. })
        ));
        let garbage = b"\x01\x00\x00\x00\x03abc";
        assert!(matches!(
            decode_all(garbage, 100, Some(Encoding::Gzip)),
            Err(FrameError::Decompress(_))
        ));
    }

    #[test]
    fn encodings_by_name() {
        assert_eq!(Encoding::parse("gzip"), Ok(Encoding::Gzip));
        assert_eq!(Encoding::parse(" Identity "), Ok(Encoding::Identity));
        let e = Encoding::parse("snappy").unwrap_err().to_string();
        assert!(e.contains("snappy") && e.contains("gzip"), "{e}");
    }
}
