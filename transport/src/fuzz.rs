//! Entry points for the fuzz targets (the `fuzzing` crate): the HTTP/2 frame reader and the HPACK
//! decoder, without a socket, so that a fuzzer runs them hundreds of thousands of times a second.
//! Not an API: what they return may change with the code they reach.

use std::time::Duration;

use bytes::Bytes;
use http::Method;

use crate::{AttemptError, Outgoing, Reply};

/// The limits [`h2_frames`] reads with: small, so that a fuzzer reaches them.
pub const MAX_BODY: u64 = 64 << 10;
/// See [`MAX_BODY`].
pub const MAX_HEADER_LIST: usize = 4 << 10;

/// What the client made of a server's bytes on one connection.
pub struct Frames {
    /// The outcome of each request, in order: a GET on stream 1, a HEAD on 3, a POST with a
    /// 100 KB body on 5 (past the initial windows), and GETs on 7 and 9.
    pub answers: Vec<Result<Reply, AttemptError>>,
    /// What the client wrote: its requests, and its answers to the server's frames.
    pub written: Bytes,
}

/// The requests [`h2_frames`] opens.
fn requests() -> Vec<Outgoing> {
    let get = |uri: &str| Outgoing {
        method: Method::GET,
        uri: uri.into(),
        headers: http::HeaderMap::new(),
        body: Bytes::new(),
    };
    vec![
        get("/"),
        Outgoing {
            method: Method::HEAD,
            ..get("/head")
        },
        Outgoing {
            method: Method::POST,
            body: Bytes::from(vec![b'x'; 100_000]),
            ..get("/orders")
        },
        get("/a"),
        get("/b"),
    ]
}

/// Opens five streams (see [`Frames::answers`]) and reads `server` as the server's bytes,
/// `piece` bytes per read.
pub fn h2_frames(server: &[u8], piece: usize) -> Frames {
    let limits = crate::h2conn::Limits {
        max_body: MAX_BODY,
        max_header_list: MAX_HEADER_LIST,
        keepalive: Duration::from_secs(3600),
        idle_timeout: Duration::from_secs(3600),
    };
    let r = crate::h2conn::replay(server, piece, &requests(), limits);
    Frames {
        answers: r.answers,
        written: r.written,
    }
}

/// A decoded header block: its fields, name and value, in order.
pub type Block = Vec<(Vec<u8>, Vec<u8>)>;

/// Decodes header blocks one after another with one decoder, as a connection does: each block's
/// fields (name, value) in order, up to and including the first block that fails (its error).
pub fn hpack_blocks<'a>(blocks: impl IntoIterator<Item = &'a [u8]>) -> Vec<Result<Block, String>> {
    let mut d = crate::hpack::Decoder::new();
    let mut out = Vec::new();
    for block in blocks {
        let mut fields = Vec::new();
        let r = d.decode(block, |f| fields.push((f.name.to_vec(), f.value.to_vec())));
        match r {
            Ok(()) => out.push(Ok(fields)),
            Err(e) => {
                out.push(Err(e.0.to_string()));
                break;
            }
        }
    }
    out
}
