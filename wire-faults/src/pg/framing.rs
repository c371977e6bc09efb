//! Cutting a PostgreSQL byte stream into messages: a tag byte, a 4-byte length that counts
//! itself, the body. Before the first typed message comes the startup phase, whose messages have
//! a length and no tag.
//!
//! One limit per resource, checked where the bytes arrive: a message read whole may not be
//! longer than the reader's bound, which is checked on its declared length, before any of its
//! body is buffered. The few messages that carry bulk data and whose content no decision needs
//! (DataRow, CopyData) are not buffered at all: they come out as pieces as their bytes arrive,
//! so a gigabyte row costs the proxy nothing but the time to pass it on.

use bytes::{Buf, Bytes, BytesMut};

use crate::error::{shown, WireError};

/// PostgreSQL's own bound on a startup-phase message (`MAX_STARTUP_PACKET_LENGTH`).
pub const MAX_STARTUP: usize = 10_000;

/// A piece of a message passed on as its bytes arrive, not read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    /// The message's tag (`D` DataRow, `d` CopyData).
    pub tag: u8,
    /// These bytes of it (the first piece starts with the tag and the length).
    pub bytes: Bytes,
    /// The first piece of its message.
    pub first: bool,
    /// The last piece of its message.
    pub last: bool,
}

/// A message cut from the stream: whole, or a piece of one that is passed through.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Frame {
    /// A whole message: its tag (none in the startup phase) and all its bytes.
    Whole { tag: Option<u8>, raw: Bytes },
    /// A piece of a message passed through.
    Piece(Piece),
}

/// The framing state shared by both directions' readers.
#[derive(Debug)]
pub(crate) struct Framer {
    buf: BytesMut,
    max: usize,
    /// Inside a passed-through message: its tag and how many of its bytes are still to come.
    through: Option<(u8, usize)>,
    failed: Option<WireError>,
    /// Bytes taken from the stream so far (for a truncated message's report).
    pub(crate) consumed: u64,
}

impl Framer {
    pub(crate) fn new(max: usize) -> Framer {
        Framer {
            buf: BytesMut::new(),
            max,
            through: None,
            failed: None,
            consumed: 0,
        }
    }

    pub(crate) fn push(&mut self, data: &[u8]) {
        if self.failed.is_none() {
            self.buf.extend_from_slice(data);
        }
    }

    pub(crate) fn fail(&mut self, e: WireError) -> WireError {
        self.failed = Some(e.clone());
        e
    }

    /// A message cut from the stream that could not be read: it goes back in front of the
    /// unread bytes (so that a proxy forwarding unread loses none of it), and the reader fails.
    pub(crate) fn refuse(&mut self, raw: Bytes, e: WireError) -> WireError {
        let mut buf = BytesMut::with_capacity(raw.len() + self.buf.len());
        buf.extend_from_slice(&raw);
        buf.extend_from_slice(&self.buf);
        self.buf = buf;
        self.consumed = self.consumed.saturating_sub(raw.len() as u64);
        self.fail(e)
    }

    pub(crate) fn failed(&self) -> Option<&WireError> {
        self.failed.as_ref()
    }

    /// The bytes read but not yet given out, and everything pushed after a failure is refused:
    /// what a proxy forwards unread once it gave up reading.
    pub(crate) fn take_unread(&mut self) -> Bytes {
        std::mem::take(&mut self.buf).freeze()
    }

    pub(crate) fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// A startup-phase message (no tag), whole, when its bytes are all there.
    pub(crate) fn next_untagged(&mut self) -> Result<Option<Frame>, WireError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.buf.len() < 4 {
            return Ok(None);
        }
        let len = u32::from_be_bytes([self.buf[0], self.buf[1], self.buf[2], self.buf[3]]) as usize;
        if !(8..=MAX_STARTUP).contains(&len) {
            let looks = if self.buf[..4]
                .iter()
                .all(|b| b.is_ascii_graphic() || *b == b' ')
            {
                " (it reads as text: another protocol, such as HTTP, on a PostgreSQL port?)"
            } else {
                ""
            };
            return Err(self.fail(WireError::NotProtocol {
                protocol: "PostgreSQL",
                detail: format!(
                    "a startup message declares {len} bytes (8 to {MAX_STARTUP} are possible); the stream begins \"{}\"{looks}",
                    shown(&self.buf)
                ),
            }));
        }
        if self.buf.len() < len {
            return Ok(None);
        }
        self.consumed += len as u64;
        Ok(Some(Frame::Whole {
            tag: None,
            raw: self.buf.split_to(len).freeze(),
        }))
    }

    /// A typed message whole, or the next piece of one passed through (`through(tag)`); `known`
    /// says which tags this direction may send.
    pub(crate) fn next_tagged(
        &mut self,
        known: fn(u8) -> bool,
        through: fn(u8) -> bool,
        side: &'static str,
    ) -> Result<Option<Frame>, WireError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if let Some((tag, left)) = self.through {
            if self.buf.is_empty() {
                return Ok(None);
            }
            let n = left.min(self.buf.len());
            self.consumed += n as u64;
            let bytes = self.buf.split_to(n).freeze();
            let last = n == left;
            self.through = if last { None } else { Some((tag, left - n)) };
            return Ok(Some(Frame::Piece(Piece {
                tag,
                bytes,
                first: false,
                last,
            })));
        }
        if self.buf.is_empty() {
            return Ok(None);
        }
        let tag = self.buf[0];
        if !known(tag) {
            return Err(self.fail(WireError::NotProtocol {
                protocol: "PostgreSQL",
                detail: format!(
                    "{side} message type {} is not one PostgreSQL's protocol 3 has; the bytes begin \"{}\"",
                    shown(&[tag]),
                    shown(&self.buf)
                ),
            }));
        }
        if self.buf.len() < 5 {
            return Ok(None);
        }
        let len = i32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]);
        if len < 4 {
            return Err(self.fail(WireError::Malformed {
                protocol: "PostgreSQL",
                detail: format!(
                    "{side} message {} declares a length of {len} (at least 4: the length counts itself)",
                    shown(&[tag])
                ),
            }));
        }
        // `len` is at most i32::MAX: the total fits a usize on every target this builds for.
        let total = len as usize + 1;
        if through(tag) {
            let n = total.min(self.buf.len());
            self.consumed += n as u64;
            let bytes = self.buf.split_to(n).freeze();
            let last = n == total;
            if !last {
                self.through = Some((tag, total - n));
            }
            return Ok(Some(Frame::Piece(Piece {
                tag,
                bytes,
                first: true,
                last,
            })));
        }
        if total > self.max {
            return Err(self.fail(WireError::TooLarge {
                what: format!("{side} message {}", shown(&[tag])),
                len: total as u64,
                max: self.max as u64,
            }));
        }
        if self.buf.len() < total {
            // Room for the rest once, not byte by byte as it trickles in.
            self.buf.reserve(total - self.buf.len());
            return Ok(None);
        }
        self.consumed += total as u64;
        Ok(Some(Frame::Whole {
            tag: Some(tag),
            raw: self.buf.split_to(total).freeze(),
        }))
    }

    /// At the end of the stream: an error when a message was left unfinished.
    pub(crate) fn finish(&mut self, startup: bool) -> Result<(), WireError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if let Some((tag, left)) = self.through {
            return Err(self.fail(WireError::Truncated {
                what: format!("message {} ({left} bytes missing)", shown(&[tag])),
                have: self.consumed,
            }));
        }
        if self.buf.is_empty() {
            return Ok(());
        }
        let what = if startup {
            "a startup message".to_string()
        } else {
            format!("message {}", shown(&self.buf[..1]))
        };
        let have = self.buf.len() as u64;
        self.buf.advance(self.buf.len());
        Err(self.fail(WireError::Truncated { what, have }))
    }
}

/// A cursor over a message body: the protocol's integers and NUL-terminated strings, each read
/// checked against what is left.
pub(crate) struct Body<'a> {
    pub(crate) rest: &'a [u8],
    what: &'static str,
}

impl<'a> Body<'a> {
    pub(crate) fn new(rest: &'a [u8], what: &'static str) -> Body<'a> {
        Body { rest, what }
    }

    fn short(&self, need: &str) -> WireError {
        WireError::Malformed {
            protocol: "PostgreSQL",
            detail: format!("{} ends where {need} was due", self.what),
        }
    }

    pub(crate) fn u8(&mut self) -> Result<u8, WireError> {
        let (&b, rest) = self
            .rest
            .split_first()
            .ok_or_else(|| self.short("a byte"))?;
        self.rest = rest;
        Ok(b)
    }

    pub(crate) fn i16(&mut self) -> Result<i16, WireError> {
        match self.rest {
            [a, b, rest @ ..] => {
                self.rest = rest;
                Ok(i16::from_be_bytes([*a, *b]))
            }
            _ => Err(self.short("a 16-bit integer")),
        }
    }

    pub(crate) fn i32(&mut self) -> Result<i32, WireError> {
        match self.rest {
            [a, b, c, d, rest @ ..] => {
                self.rest = rest;
                Ok(i32::from_be_bytes([*a, *b, *c, *d]))
            }
            _ => Err(self.short("a 32-bit integer")),
        }
    }

    /// A count: a 16-bit integer that may not be negative.
    pub(crate) fn count(&mut self) -> Result<usize, WireError> {
        let n = self.i16()?;
        usize::try_from(n).map_err(|_| WireError::Malformed {
            protocol: "PostgreSQL",
            detail: format!("{} gives a negative count ({n})", self.what),
        })
    }

    pub(crate) fn bytes(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.rest.len() < n {
            return Err(self.short(&format!("{n} bytes")));
        }
        let (b, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(b)
    }

    /// A NUL-terminated string, without its NUL.
    pub(crate) fn cstr(&mut self) -> Result<&'a [u8], WireError> {
        let Some(i) = self.rest.iter().position(|b| *b == 0) else {
            return Err(self.short("the end of a string (NUL)"));
        };
        let s = &self.rest[..i];
        self.rest = &self.rest[i + 1..];
        Ok(s)
    }

    /// Nothing may be left.
    pub(crate) fn end(&self) -> Result<(), WireError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(WireError::Malformed {
                protocol: "PostgreSQL",
                detail: format!(
                    "{} has {} bytes after its last field",
                    self.what,
                    self.rest.len()
                ),
            })
        }
    }
}
