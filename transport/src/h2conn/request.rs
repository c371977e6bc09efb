//! A request as HTTP/2 frames: its header block encoded in place in the connection's output,
//! behind the head of its HEADERS frame, through the connection's HPACK encoder.

use bytes::{BufMut, Bytes, BytesMut};
use http::Method;

use super::frame::{frame_head, write_headers, END_HEADERS, END_STREAM, HEADERS};
use crate::hpack::encode::{int, string};
use crate::hpack::Encoder;
use crate::Outgoing;

/// A request's `:scheme` and `:authority`, fixed per connection.
#[derive(Debug, Clone)]
pub(crate) struct Origin {
    https: bool,
    /// `:authority` as a header field, encoded once (it is the same in every request).
    authority: Bytes,
}

impl Origin {
    pub(crate) fn new(https: bool, authority: &str) -> Origin {
        let mut b = BytesMut::with_capacity(authority.len() + 4);
        int(&mut b, 0x00, 4, 1);
        string(&mut b, authority.as_bytes());
        Origin {
            https,
            authority: b.freeze(),
        }
    }
}

/// Connection-specific headers, which HTTP/2 forbids (RFC 9113 §8.2.2); `host` goes as
/// `:authority`.
const NOT_IN_H2: [&str; 6] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "host",
];

/// Queues `req`'s HEADERS on stream `id` in `out`: its header block encoded in place, after a
/// frame head written first and filled in once the block's length is known; a block over
/// `max_frame` is moved into HEADERS and CONTINUATIONs.
pub(super) fn queue_request(
    out: &mut BytesMut,
    encoder: &mut Encoder,
    id: u32,
    req: &Outgoing,
    origin: &Origin,
    end_stream: bool,
    max_frame: usize,
) {
    let start = out.len();
    frame_head(out, 0, HEADERS, 0, id);
    encode_request_into(out, encoder, req, origin);
    let len = out.len() - start - 9;
    if len <= max_frame {
        let flags = END_HEADERS | if end_stream { END_STREAM } else { 0 };
        let h = &mut out[start..start + 9];
        h[0] = (len >> 16) as u8;
        h[1] = (len >> 8) as u8;
        h[2] = len as u8;
        h[4] = flags;
        return;
    }
    let block = out.split_off(start + 9);
    out.truncate(start);
    write_headers(out, id, &block, end_stream, max_frame);
}

#[cfg(test)]
fn encode_request(req: &Outgoing, origin: &Origin) -> BytesMut {
    let mut b = BytesMut::new();
    encode_request_into(&mut b, &mut Encoder::default(), req, origin);
    b
}

/// Appends `req`'s HPACK header block to `b`, through the connection's `encoder`: the
/// pseudo-headers from the static table where it has them, the regular fields as the encoder
/// decides, connection-specific ones left out.
fn encode_request_into(b: &mut BytesMut, encoder: &mut Encoder, req: &Outgoing, origin: &Origin) {
    b.reserve(64 + req.uri.len() + 32 * req.headers.len());
    encoder.start_block(b);
    match req.method {
        Method::GET => b.put_u8(0x82),
        Method::POST => b.put_u8(0x83),
        ref m => {
            int(b, 0x00, 4, 2);
            string(b, m.as_str().as_bytes());
        }
    }
    b.put_u8(if origin.https { 0x87 } else { 0x86 });
    if req.uri == "/" {
        b.put_u8(0x84);
    } else {
        encoder.path(b, req.uri.as_bytes());
    }
    b.extend_from_slice(&origin.authority);
    for (name, value) in &req.headers {
        let n = name.as_str();
        if NOT_IN_H2.contains(&n) || n == "content-length" {
            continue;
        }
        if n == "te" && !value.as_bytes().eq_ignore_ascii_case(b"trailers") {
            continue;
        }
        encoder.field(b, name, value);
    }
    if !req.body.is_empty() {
        // content-length, static index 28.
        int(b, 0x00, 4, 28);
        string(b, itoa::Buffer::new().format(req.body.len()).as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hpack::Decoder;
    use http::{HeaderMap, HeaderValue};

    fn origin() -> Origin {
        Origin::new(false, "127.0.0.1:8080")
    }

    #[test]
    fn a_request_block_decodes_to_the_request() {
        let mut headers = HeaderMap::new();
        headers.insert("idempotency-key", HeaderValue::from_static("k-1"));
        headers.insert("connection", HeaderValue::from_static("keep-alive"));
        headers.insert("host", HeaderValue::from_static("elsewhere"));
        let long = format!("/orders?{}", "x".repeat(300));
        let req = Outgoing {
            method: Method::PUT,
            uri: long.clone(),
            headers,
            body: Bytes::from_static(b"{}"),
        };
        let block = encode_request(&req, &origin());
        let mut d = Decoder::new();
        let mut fields: Vec<(String, String)> = Vec::new();
        d.decode(&block, |f| {
            fields.push((
                String::from_utf8(f.name.to_vec()).unwrap(),
                String::from_utf8(f.value.to_vec()).unwrap(),
            ))
        })
        .unwrap();
        let want: Vec<(String, String)> = [
            (":method", "PUT"),
            (":scheme", "http"),
            (":path", long.as_str()),
            (":authority", "127.0.0.1:8080"),
            ("idempotency-key", "k-1"),
            ("content-length", "2"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        assert_eq!(fields, want);
        let get = Outgoing {
            method: Method::GET,
            uri: "/".into(),
            headers: HeaderMap::new(),
            body: Bytes::new(),
        };
        let block = encode_request(&get, &Origin::new(true, "a"));
        assert_eq!(&block[..], &[0x82, 0x87, 0x84, 0x01, 0x01, b'a']);
    }

    /// Through one connection's encoder, a field sent a second time goes into the server's
    /// table and is one byte after that; a field that never repeats, and a credential, never
    /// goes in; when the server shrinks its table the next block says so first. Every block
    /// decodes, with the decoder's own table, to exactly the fields sent.
    #[test]
    fn repeated_fields_are_indexed_and_every_block_decodes_as_sent() {
        let mut encoder = Encoder::default();
        let mut decoder = Decoder::new();
        let mut sizes = Vec::new();
        for i in 0..60 {
            match i {
                30 => encoder.set_limit(300),
                45 => encoder.set_limit(0),
                _ => {}
            }
            let path = if i % 7 == 6 { "/other.S/N" } else { "/pkg.S/M" };
            let key = format!("key-{i:03}");
            // In an order that turns every few blocks, so that a look-up does not always find
            // its field where the one before it suggests.
            let mut regular = vec![
                ("content-type", "application/grpc".to_string()),
                ("te", "trailers".to_string()),
                ("idempotency-key", key.clone()),
            ];
            regular.rotate_left(i / 4 % 3);
            let mut headers = HeaderMap::new();
            for (name, value) in &regular {
                headers.insert(*name, HeaderValue::from_str(value).unwrap());
            }
            headers.insert("authorization", HeaderValue::from_static("Bearer s3cret"));
            let req = Outgoing {
                method: Method::POST,
                uri: path.into(),
                headers,
                body: Bytes::from_static(b"xyz"),
            };
            let mut block = BytesMut::new();
            encode_request_into(&mut block, &mut encoder, &req, &origin());
            sizes.push(block.len());
            let mut fields: Vec<(String, String)> = Vec::new();
            decoder
                .decode(&block, |f| {
                    fields.push((
                        String::from_utf8(f.name.to_vec()).unwrap(),
                        String::from_utf8(f.value.to_vec()).unwrap(),
                    ))
                })
                .unwrap_or_else(|e| panic!("block {i}: {e:?}"));
            let want: Vec<(String, String)> = [
                (":method", "POST"),
                (":scheme", "http"),
                (":path", path),
                (":authority", "127.0.0.1:8080"),
            ]
            .into_iter()
            .chain(regular.iter().map(|(n, v)| (*n, v.as_str())))
            .chain([("authorization", "Bearer s3cret"), ("content-length", "3")])
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
            assert_eq!(fields, want, "block {i}");
        }
        // The first block is all literals; from the third, the path, content-type and te are
        // indexed (one byte each); the key and the credential stay literals.
        assert!(sizes[2] + 40 < sizes[0], "{sizes:?}");
        assert_eq!(sizes[3], sizes[2], "{sizes:?}");
        // In another order, they are found as well.
        assert_eq!((sizes[4], sizes[8]), (sizes[2], sizes[2]), "{sizes:?}");
        // With no table left, blocks are literals again (the first of them says so first).
        assert_eq!(sizes[50], sizes[0], "{sizes:?}");
        assert!(encoder.is_empty());
    }

    /// A request queued in place frames the same bytes as its block encoded apart and then
    /// framed, within one frame and past it, after what was queued before.
    #[test]
    fn a_request_queued_in_place_is_framed_as_its_block() {
        for (uri, max_frame, end) in [("/", 16_384, true), ("/a?b=c", 16_384, false)]
            .into_iter()
            .chain([("/long-enough-for-three-frames", 16, true)])
        {
            let req = Outgoing {
                method: Method::GET,
                uri: uri.into(),
                headers: HeaderMap::new(),
                body: Bytes::new(),
            };
            let mut apart = BytesMut::from(&b"before"[..]);
            write_headers(
                &mut apart,
                5,
                &encode_request(&req, &origin()),
                end,
                max_frame,
            );
            let mut in_place = BytesMut::from(&b"before"[..]);
            queue_request(
                &mut in_place,
                &mut Encoder::default(),
                5,
                &req,
                &origin(),
                end,
                max_frame,
            );
            assert_eq!(in_place, apart, "{uri} at {max_frame}");
        }
    }
}
