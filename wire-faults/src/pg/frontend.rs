//! The client's side of PostgreSQL's protocol 3: what psycopg, asyncpg, JDBC and tokio-postgres
//! send.
//!
//! A connection opens in the startup phase: an SSLRequest or GSSENCRequest (answered with one
//! byte, `S`, `G` or `N`, after which the client sends its StartupMessage in the clear or starts
//! TLS), a CancelRequest (a connection of its own), or the StartupMessage with the user and the
//! database. From then on every message has a tag: authentication answers (`p`), a simple
//! `Query` (`Q`, one or more statements as text), or the extended protocol — `Parse` (`P`: a
//! statement's text, into a named or the unnamed prepared statement), `Bind` (`B`: a portal made
//! of a statement and its parameter values), `Describe` (`D`), `Execute` (`E`: run a portal),
//! `Close` (`C`), `Flush` (`H`) and `Sync` (`S`: the end of a pipeline; the server answers
//! ReadyForQuery) — and `Terminate` (`X`).
//!
//! `postgres-protocol` (the crate tokio-postgres speaks through) writes these messages but does
//! not read them — a client never has to — so this side's reader is ours; its tests read what
//! `postgres-protocol` writes.

use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::framing::{Body, Frame, Framer, Piece};
use crate::error::WireError;

/// The code of an SSLRequest, in place of a protocol version.
pub const SSL_REQUEST: i32 = 80_877_103;
/// The code of a GSSENCRequest.
pub const GSSENC_REQUEST: i32 = 80_877_104;
/// The code of a CancelRequest.
pub const CANCEL_REQUEST: i32 = 80_877_102;

/// A client message, read whole: its bytes as they came, and what they say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontendMessage {
    /// Every byte of it, tag and length included: what the proxy forwards.
    pub raw: Bytes,
    /// What it says.
    pub kind: Frontend,
}

/// What a client message says, as far as a proxy's decisions need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frontend {
    /// The StartupMessage: the protocol version and the connection's parameters.
    Startup {
        /// The protocol version the client asks for (`3.0` is 196608).
        version: i32,
        /// `user`.
        user: Option<String>,
        /// `database` (the user's name when absent).
        database: Option<String>,
    },
    /// The client asks for TLS; a proxy that answers `N` gets the StartupMessage in the clear.
    SslRequest,
    /// The client asks for GSSAPI encryption; answered `N` likewise.
    GssEncRequest,
    /// A request to cancel the query running on another connection.
    CancelRequest,
    /// A simple Query: one or more statements as text.
    Query {
        /// The text, without its NUL.
        text: Bytes,
    },
    /// Parse: a statement's text into a prepared statement (`""` is the unnamed one).
    Parse {
        /// The prepared statement's name.
        name: Bytes,
        /// The statement's text.
        text: Bytes,
    },
    /// Bind: a portal made of a prepared statement and its parameters' values.
    Bind {
        /// The portal's name (`""` is the unnamed one).
        portal: Bytes,
        /// The prepared statement's name.
        statement: Bytes,
        /// A digest of the values (16 hex digits); the values are not kept.
        params: String,
    },
    /// Describe a prepared statement (`S`) or a portal (`P`).
    Describe {
        /// `S` or `P`.
        target: u8,
        /// Its name.
        name: Bytes,
    },
    /// Execute a portal.
    Execute {
        /// The portal's name.
        portal: Bytes,
        /// At most this many rows (0: all).
        max_rows: i32,
    },
    /// Close a prepared statement (`S`) or a portal (`P`).
    Close {
        /// `S` or `P`.
        target: u8,
        /// Its name.
        name: Bytes,
    },
    /// Sync: the end of a pipeline of extended-protocol messages.
    Sync,
    /// Flush: send what is answered so far.
    Flush,
    /// Terminate: the client closes the connection.
    Terminate,
    /// CopyDone (`c`) after a COPY FROM STDIN's data.
    CopyDone,
    /// CopyFail (`f`).
    CopyFail,
    /// An authentication answer (`p`) or a FunctionCall (`F`): forwarded as it is.
    Other {
        /// The tag.
        tag: u8,
    },
}

/// A message or a piece of one, as the reader gives it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrontendItem {
    /// A message read whole.
    Message(FrontendMessage),
    /// A piece of a CopyData message, passed on as it arrives.
    Piece(Piece),
}

/// Reads a client's byte stream, in chunks of any size, into messages.
#[derive(Debug)]
pub struct FrontendReader {
    framer: Framer,
    startup: bool,
}

fn known(tag: u8) -> bool {
    matches!(
        tag,
        b'Q' | b'P'
            | b'B'
            | b'D'
            | b'E'
            | b'C'
            | b'S'
            | b'H'
            | b'X'
            | b'p'
            | b'F'
            | b'd'
            | b'c'
            | b'f'
    )
}

fn through(tag: u8) -> bool {
    tag == b'd'
}

impl FrontendReader {
    /// A reader for a new connection (in the startup phase), reading no message longer than
    /// `max_message` bytes whole.
    pub fn new(max_message: usize) -> FrontendReader {
        FrontendReader {
            framer: Framer::new(max_message.max(5)),
            startup: true,
        }
    }

    /// Appends bytes as they came from the client.
    pub fn push(&mut self, bytes: &[u8]) {
        self.framer.push(bytes);
    }

    /// The next message, or piece of one, when its bytes are there; `Ok(None)` until more come.
    /// An error is final: every later call returns it again.
    pub fn next_item(&mut self) -> Result<Option<FrontendItem>, WireError> {
        let frame = if self.startup {
            self.framer.next_untagged()?
        } else {
            self.framer.next_tagged(known, through, "client")?
        };
        let Some(frame) = frame else { return Ok(None) };
        let (tag, raw) = match frame {
            Frame::Piece(p) => return Ok(Some(FrontendItem::Piece(p))),
            Frame::Whole { tag, raw } => (tag, raw),
        };
        let kind = match tag {
            None => self.startup_message(&raw),
            Some(tag) => parse_tagged(tag, &raw),
        };
        match kind {
            Ok(kind) => Ok(Some(FrontendItem::Message(FrontendMessage { raw, kind }))),
            Err(e) => Err(self.framer.refuse(raw, e)),
        }
    }

    fn startup_message(&mut self, raw: &Bytes) -> Result<Frontend, WireError> {
        let mut b = Body::new(&raw[4..], "a startup message");
        let code = b.i32()?;
        match code {
            // The client waits for one byte and then sends its StartupMessage (or TLS):
            // still the startup phase.
            SSL_REQUEST => return Ok(Frontend::SslRequest),
            GSSENC_REQUEST => return Ok(Frontend::GssEncRequest),
            CANCEL_REQUEST => {
                b.bytes(8)?;
                b.end()?;
                return Ok(Frontend::CancelRequest);
            }
            _ => {}
        }
        if code >> 16 != 3 {
            return Err(WireError::NotProtocol {
                protocol: "PostgreSQL",
                detail: format!(
                    "a startup message asks for protocol {}.{} (only 3.x is spoken)",
                    code >> 16,
                    code & 0xffff
                ),
            });
        }
        let (mut user, mut database) = (None, None);
        loop {
            let name = b.cstr()?;
            if name.is_empty() {
                break;
            }
            let value = String::from_utf8_lossy(b.cstr()?).into_owned();
            match name {
                b"user" => user = Some(value),
                b"database" => database = Some(value),
                _ => {}
            }
        }
        b.end()?;
        self.startup = false;
        Ok(Frontend::Startup {
            version: code,
            user,
            database,
        })
    }

    /// At the end of the client's stream: an error when a message was left unfinished.
    pub fn finish(&mut self) -> Result<(), WireError> {
        self.framer.finish(self.startup)
    }

    /// The error that stopped the reader, if one did.
    pub fn error(&self) -> Option<&WireError> {
        self.framer.failed()
    }

    /// The bytes read but not given out: what the proxy forwards unread once it stopped reading.
    pub fn take_unread(&mut self) -> Bytes {
        self.framer.take_unread()
    }

    /// How many bytes wait in the reader for the rest of their message.
    pub fn buffered(&self) -> usize {
        self.framer.buffered()
    }

    /// Whether the reader is still in the startup phase.
    pub fn in_startup(&self) -> bool {
        self.startup
    }
}

fn slice(raw: &Bytes, part: &[u8]) -> Bytes {
    raw.slice_ref(part)
}

fn parse_tagged(tag: u8, raw: &Bytes) -> Result<Frontend, WireError> {
    let body = &raw[5..];
    let what = match tag {
        b'Q' => "a Query message",
        b'P' => "a Parse message",
        b'B' => "a Bind message",
        b'D' => "a Describe message",
        b'E' => "an Execute message",
        b'C' => "a Close message",
        _ => "a message",
    };
    let mut b = Body::new(body, what);
    let kind = match tag {
        b'Q' => {
            let text = b.cstr()?;
            b.end()?;
            Frontend::Query {
                text: slice(raw, text),
            }
        }
        b'P' => {
            let name = b.cstr()?;
            let text = b.cstr()?;
            let types = b.count()?;
            b.bytes(types * 4)?;
            b.end()?;
            Frontend::Parse {
                name: slice(raw, name),
                text: slice(raw, text),
            }
        }
        b'B' => {
            let portal = b.cstr()?;
            let statement = b.cstr()?;
            let formats = b.count()?;
            b.bytes(formats * 2)?;
            let n = b.count()?;
            let mut digest = Sha256::new();
            digest.update((n as u16).to_be_bytes());
            for _ in 0..n {
                let len = b.i32()?;
                digest.update(len.to_be_bytes());
                if len >= 0 {
                    digest.update(b.bytes(len as usize)?);
                } else if len != -1 {
                    return Err(WireError::Malformed {
                        protocol: "PostgreSQL",
                        detail: format!("a Bind message gives a parameter the length {len} (-1 is NULL, else at least 0)"),
                    });
                }
            }
            let results = b.count()?;
            b.bytes(results * 2)?;
            b.end()?;
            let d = digest.finalize();
            Frontend::Bind {
                portal: slice(raw, portal),
                statement: slice(raw, statement),
                params: d[..8].iter().map(|x| format!("{x:02x}")).collect(),
            }
        }
        b'D' | b'C' => {
            let target = b.u8()?;
            if target != b'S' && target != b'P' {
                return Err(WireError::Malformed {
                    protocol: "PostgreSQL",
                    detail: format!(
                        "{what} names {} (S for a statement or P for a portal)",
                        crate::error::shown(&[target])
                    ),
                });
            }
            let name = slice(raw, b.cstr()?);
            b.end()?;
            if tag == b'D' {
                Frontend::Describe { target, name }
            } else {
                Frontend::Close { target, name }
            }
        }
        b'E' => {
            let portal = b.cstr()?;
            let max_rows = b.i32()?;
            b.end()?;
            Frontend::Execute {
                portal: slice(raw, portal),
                max_rows,
            }
        }
        b'S' | b'H' | b'X' | b'c' => {
            b.end().map_err(|_| WireError::Malformed {
                protocol: "PostgreSQL",
                detail: format!(
                    "message {} has a body ({} bytes); it has none",
                    char::from(tag),
                    body.len()
                ),
            })?;
            match tag {
                b'S' => Frontend::Sync,
                b'H' => Frontend::Flush,
                b'X' => Frontend::Terminate,
                _ => Frontend::CopyDone,
            }
        }
        b'f' => Frontend::CopyFail,
        other => Frontend::Other { tag: other },
    };
    Ok(kind)
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use postgres_protocol::message::frontend;

    use super::*;

    fn read_all(reader: &mut FrontendReader) -> Vec<Frontend> {
        let mut out = Vec::new();
        while let Some(item) = reader.next_item().expect("valid") {
            if let FrontendItem::Message(m) = item {
                out.push(m.kind);
            }
        }
        out
    }

    /// What tokio-postgres sends to open a connection and run one statement with a parameter.
    fn a_session() -> BytesMut {
        let mut buf = BytesMut::new();
        frontend::ssl_request(&mut buf);
        frontend::startup_message([("user", "app"), ("database", "shop")], &mut buf).unwrap();
        frontend::parse("", "INSERT INTO orders (sku) VALUES ($1)", [0], &mut buf).unwrap();
        frontend::bind(
            "",
            "",
            [1],
            ["sku-1"],
            |v, out| {
                out.extend_from_slice(v.as_bytes());
                Ok(postgres_protocol::IsNull::No)
            },
            [1],
            &mut buf,
        )
        .map_err(|_| "bind")
        .unwrap();
        frontend::describe(b'P', "", &mut buf).unwrap();
        frontend::execute("", 0, &mut buf).unwrap();
        frontend::sync(&mut buf);
        frontend::query("COMMIT", &mut buf).unwrap();
        frontend::close(b'S', "s1", &mut buf).unwrap();
        frontend::flush(&mut buf);
        frontend::terminate(&mut buf);
        buf
    }

    #[test]
    fn reads_what_postgres_protocol_writes() {
        let mut r = FrontendReader::new(1 << 20);
        r.push(&a_session());
        let got = read_all(&mut r);
        assert_eq!(got.len(), 11, "{got:?}");
        assert_eq!(got[0], Frontend::SslRequest);
        assert_eq!(
            got[1],
            Frontend::Startup {
                version: 196_608,
                user: Some("app".into()),
                database: Some("shop".into())
            }
        );
        assert!(
            matches!(&got[2], Frontend::Parse { name, text } if name.is_empty() && &text[..] == b"INSERT INTO orders (sku) VALUES ($1)")
        );
        let Frontend::Bind { params, .. } = &got[3] else {
            panic!("{:?}", got[3])
        };
        assert_eq!(params.len(), 16);
        assert!(matches!(got[4], Frontend::Describe { target: b'P', .. }));
        assert!(matches!(got[5], Frontend::Execute { max_rows: 0, .. }));
        assert_eq!(got[6], Frontend::Sync);
        assert!(matches!(&got[7], Frontend::Query { text } if &text[..] == b"COMMIT"));
        assert!(matches!(&got[8], Frontend::Close { target: b'S', name } if &name[..] == b"s1"));
        assert_eq!(got[9], Frontend::Flush);
        assert_eq!(got[10], Frontend::Terminate);
        r.finish().expect("nothing left over");
    }

    #[test]
    fn the_same_values_give_the_same_digest_and_others_another() {
        let digest = |v: &str| {
            let mut buf = BytesMut::new();
            frontend::startup_message([("user", "u")], &mut buf).unwrap();
            frontend::bind(
                "",
                "",
                [0],
                [v],
                |v, out| {
                    out.extend_from_slice(v.as_bytes());
                    Ok(postgres_protocol::IsNull::No)
                },
                [],
                &mut buf,
            )
            .map_err(|_| "bind")
            .unwrap();
            let mut r = FrontendReader::new(1 << 20);
            r.push(&buf);
            match read_all(&mut r).pop() {
                Some(Frontend::Bind { params, .. }) => params,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(digest("a"), digest("a"));
        assert_ne!(digest("a"), digest("b"));
    }

    #[test]
    fn http_on_a_postgres_port_is_named_for_what_it_is() {
        let mut r = FrontendReader::new(1 << 20);
        r.push(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
        let e = r.next_item().expect_err("not PostgreSQL").to_string();
        assert!(e.starts_with("not PostgreSQL:"), "{e}");
        assert!(e.contains("GET / HTTP/1.1"), "{e}");
        assert!(e.contains("HTTP"), "{e}");
        // Final: the same error again, and nothing more is taken.
        r.push(b"more");
        assert_eq!(r.next_item().expect_err("still").to_string(), e);
    }

    #[test]
    fn a_message_over_the_bound_is_refused_on_its_declared_length() {
        let mut buf = BytesMut::new();
        frontend::startup_message([("user", "u")], &mut buf).unwrap();
        let mut r = FrontendReader::new(64);
        r.push(&buf);
        assert!(matches!(r.next_item(), Ok(Some(FrontendItem::Message(_)))));
        // A Query header that declares 1 GB: refused before its body is waited for.
        r.push(&[b'Q', 0x40, 0, 0, 0]);
        let e = r.next_item().expect_err("too large");
        assert!(matches!(e, WireError::TooLarge { max: 64, .. }), "{e}");
        assert!(r.buffered() <= 5);
    }

    #[test]
    fn a_message_cut_by_the_close_is_reported() {
        let mut buf = BytesMut::new();
        frontend::startup_message([("user", "u")], &mut buf).unwrap();
        frontend::query("SELECT 1", &mut buf).unwrap();
        let mut r = FrontendReader::new(1 << 20);
        r.push(&buf[..buf.len() - 3]);
        assert_eq!(read_all(&mut r).len(), 1);
        let e = r.finish().expect_err("truncated").to_string();
        assert!(e.contains("closed in the middle of message Q"), "{e}");
    }

    #[test]
    fn a_message_that_breaks_its_rules_is_left_unread_for_a_proxy_that_forwards_it() {
        let mut buf = BytesMut::new();
        frontend::startup_message([("user", "u")], &mut buf).unwrap();
        let startup = buf.len();
        // A Sync with a body: framed whole, then refused.
        buf.extend_from_slice(b"S\x00\x00\x00\x05!");
        frontend::sync(&mut buf);
        let mut r = FrontendReader::new(1 << 20);
        r.push(&buf);
        assert!(matches!(r.next_item(), Ok(Some(FrontendItem::Message(_)))));
        assert!(matches!(r.next_item(), Err(WireError::Malformed { .. })));
        assert_eq!(
            &r.take_unread()[..],
            &buf[startup..],
            "the refused message and what follows"
        );
    }

    #[test]
    fn copy_data_passes_through_in_pieces() {
        let mut buf = BytesMut::new();
        frontend::startup_message([("user", "u")], &mut buf).unwrap();
        let start = buf.len();
        frontend::CopyData::new(&[7u8; 100][..])
            .unwrap()
            .write(&mut buf);
        frontend::copy_done(&mut buf);
        // A reader whose bound is below the CopyData's size still passes it.
        let mut r = FrontendReader::new(16);
        r.push(&buf[..start + 50]);
        let mut pieces = Vec::new();
        while let Some(item) = r.next_item().expect("valid") {
            pieces.push(item);
        }
        r.push(&buf[start + 50..]);
        while let Some(item) = r.next_item().expect("valid") {
            pieces.push(item);
        }
        let copied: Vec<&Piece> = pieces
            .iter()
            .filter_map(|p| match p {
                FrontendItem::Piece(p) => Some(p),
                _ => None,
            })
            .collect();
        assert_eq!(copied.len(), 2);
        assert!(copied[0].first && !copied[0].last && copied[1].last);
        assert_eq!(
            copied.iter().map(|p| p.bytes.len()).sum::<usize>(),
            105,
            "tag, length and 100 bytes"
        );
        assert!(matches!(
            pieces.last(),
            Some(FrontendItem::Message(FrontendMessage {
                kind: Frontend::CopyDone,
                ..
            }))
        ));
    }
}
