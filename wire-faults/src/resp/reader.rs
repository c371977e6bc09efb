//! Cutting a RESP byte stream (RESP2 and RESP3) into commands and replies.
//!
//! RESP frames are typed by their first byte and nest: simple strings `+`, errors `-`,
//! integers `:`, bulk strings `$len` (and RESP3's blob errors `!` and verbatim strings `=`),
//! arrays `*n`, and RESP3's null `_`, double `,`, boolean `#`, big number `(`, map `%n` (2n
//! elements), set `~n`, push `>n` (out of band: it answers no command) and attribute `|n` (2n
//! elements, then the frame it annotates). A client sends arrays of bulk strings, or an inline
//! command: one line of words.
//!
//! The scanner here is incremental: it keeps its place (the open aggregates' remaining counts,
//! the bulk bytes still to skip, a partial line) between chunks, so a value arriving in a
//! thousand reads is read once. Its bounds are checked where the bytes arrive: a line (a
//! header, an inline command) of at most 64 KiB, aggregates nested at most 64 deep, a command
//! of at most the configured size — checked on a bulk's declared length before its bytes come.
//! Replies are not buffered at all: they come out as pieces as their bytes arrive, the first
//! with the reply's head (its type, an error's code).
//!
//! `redis-protocol` decodes a command once the scanner has found its end (the arguments as
//! ranges of the buffer, no copy). It is not handed the stream itself: it decodes from the
//! start of its buffer on every call (a value arriving in a thousand reads would be parsed a
//! thousand times), recurses once per nesting level with no bound, and does not read inline
//! commands.

use bytes::{Buf, Bytes, BytesMut};
use redis_protocol::resp2::decode::decode_range;
use redis_protocol::resp2::types::RangeFrame;

use crate::error::{shown, WireError};

/// The longest line: a frame's header or an inline command (Redis's own inline bound).
pub const MAX_LINE: usize = 64 * 1024;
/// The deepest nesting of aggregates.
pub const MAX_DEPTH: usize = 64;

/// A command read whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    /// Every byte of it, as it came.
    pub raw: Bytes,
    /// Its arguments, the name first (slices of `raw`).
    pub args: Vec<Bytes>,
    /// Sent as an inline command.
    pub inline: bool,
}

impl Command {
    /// The command's name, upper-case (lossy UTF-8).
    pub fn name(&self) -> String {
        self.args
            .first()
            .map(|a| String::from_utf8_lossy(a).to_ascii_uppercase())
            .unwrap_or_default()
    }
}

/// What a reply is, from its first line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyHead {
    /// `simple`, `error`, `integer`, `bulk`, `null`, `array`, `map`, `set`, `push`, `double`,
    /// `boolean`, `big_number`, `verbatim`, `attribute`.
    pub kind: &'static str,
    /// For an error (`-`), its code: the first word.
    pub error: Option<String>,
}

/// A piece of a reply, passed on as its bytes arrive.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyPiece {
    /// The reply's head, on its first piece.
    pub head: Option<ReplyHead>,
    /// These bytes of it.
    pub bytes: Bytes,
    /// The first piece of its reply.
    pub first: bool,
    /// The last piece of its reply.
    pub last: bool,
}

/// Where the scanner is inside a frame.
#[derive(Debug, Default)]
struct Scan {
    /// Remaining elements of each open aggregate, innermost last.
    stack: Vec<u64>,
    /// Bulk payload bytes still to come, then its CRLF.
    bulk: u64,
    /// CRLF bytes of a bulk still to come (2, 1, 0).
    crlf: u8,
    /// A line read so far (without its end).
    line: Vec<u8>,
    /// A message has begun.
    started: bool,
    /// The message is an inline command.
    inline: bool,
    /// The head of the reply being read (replies).
    head: Option<ReplyHead>,
    /// The head was given out with a piece.
    head_given: bool,
}

/// Which side's frames a reader reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Commands,
    Replies,
}

/// Reads RESP, in chunks of any size: commands whole, replies in pieces.
#[derive(Debug)]
pub struct RespReader {
    mode: Mode,
    buf: BytesMut,
    /// Commands: how many bytes of `buf` the scanner has read.
    scanned: usize,
    max_message: usize,
    scan: Scan,
    failed: Option<WireError>,
}

/// The scanner's verdict on some bytes.
enum Progress {
    /// The message ends after this many bytes.
    Complete(usize),
    /// All bytes read; the message goes on.
    More,
}

impl RespReader {
    /// A reader of a client's commands, none longer than `max_message` bytes.
    pub fn commands(max_message: usize) -> RespReader {
        RespReader::new(Mode::Commands, max_message)
    }

    /// A reader of a server's replies (of any size: they are not buffered).
    pub fn replies() -> RespReader {
        RespReader::new(Mode::Replies, usize::MAX)
    }

    fn new(mode: Mode, max_message: usize) -> RespReader {
        RespReader {
            mode,
            buf: BytesMut::new(),
            scanned: 0,
            max_message: max_message.max(16),
            scan: Scan::default(),
            failed: None,
        }
    }

    /// Appends bytes as they came.
    pub fn push(&mut self, bytes: &[u8]) {
        if self.failed.is_none() {
            self.buf.extend_from_slice(bytes);
        }
    }

    fn fail(&mut self, e: WireError) -> WireError {
        self.failed = Some(e.clone());
        e
    }

    /// The next command, when its bytes are all there. An error is final.
    pub fn next_command(&mut self) -> Result<Option<Command>, WireError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        loop {
            // Redis skips empty lines between commands; so does this.
            if !self.scan.started && self.scanned == 0 {
                let blank = self
                    .buf
                    .iter()
                    .take_while(|b| **b == b'\r' || **b == b'\n')
                    .count();
                self.buf.advance(blank);
            }
            if self.scanned >= self.buf.len() {
                return Ok(None);
            }
            let from = self.scanned;
            let end = match self.scan_bytes(from) {
                Ok(Progress::Complete(n)) => from + n,
                Ok(Progress::More) => {
                    self.scanned = self.buf.len();
                    if self.scanned > self.max_message {
                        return Err(self.fail(WireError::TooLarge {
                            what: "a command".into(),
                            len: self.scanned as u64,
                            max: self.max_message as u64,
                        }));
                    }
                    return Ok(None);
                }
                Err(e) => return Err(self.fail(e)),
            };
            if end > self.max_message {
                return Err(self.fail(WireError::TooLarge {
                    what: "a command".into(),
                    len: end as u64,
                    max: self.max_message as u64,
                }));
            }
            let raw = self.buf.split_to(end).freeze();
            self.scanned = 0;
            let inline = std::mem::take(&mut self.scan.inline);
            self.scan = Scan::default();
            let args = if inline {
                match inline_args(&raw) {
                    Ok(a) => a,
                    Err(e) => return Err(self.fail(e)),
                }
            } else {
                match array_args(&raw) {
                    Ok(a) => a,
                    Err(e) => return Err(self.fail(e)),
                }
            };
            if args.is_empty() {
                // An empty array or a blank inline line: Redis ignores it.
                continue;
            }
            return Ok(Some(Command { raw, args, inline }));
        }
    }

    /// The next piece of a reply, when some of its bytes are there. An error is final.
    pub fn next_reply_piece(&mut self) -> Result<Option<ReplyPiece>, WireError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.buf.is_empty() {
            return Ok(None);
        }
        let first = !self.scan.started;
        let progress = match self.scan_bytes(0) {
            Ok(p) => p,
            Err(e) => return Err(self.fail(e)),
        };
        let (n, last) = match progress {
            Progress::Complete(n) => (n, true),
            Progress::More => (self.buf.len(), false),
        };
        let bytes = self.buf.split_to(n).freeze();
        // The head goes out once, with the piece in which its line ended.
        let head = if self.scan.head_given {
            None
        } else {
            self.scan.head.clone()
        };
        self.scan.head_given |= head.is_some();
        if last {
            self.scan = Scan::default();
        }
        Ok(Some(ReplyPiece {
            head,
            bytes,
            first,
            last,
        }))
    }

    /// At the end of the stream: an error when a frame was left unfinished.
    pub fn finish(&mut self) -> Result<(), WireError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.scan.started || !self.buf.is_empty() {
            let have = self.buf.len() as u64;
            let what = match self.mode {
                Mode::Commands => "a command",
                Mode::Replies => "a reply",
            };
            return Err(self.fail(WireError::Truncated {
                what: what.into(),
                have,
            }));
        }
        Ok(())
    }

    /// The error that stopped the reader, if one did.
    pub fn error(&self) -> Option<&WireError> {
        self.failed.as_ref()
    }

    /// The bytes read but not given out: what the proxy forwards unread once it stopped reading.
    pub fn take_unread(&mut self) -> Bytes {
        self.scanned = 0;
        std::mem::take(&mut self.buf).freeze()
    }

    /// How many bytes wait in the reader.
    pub fn buffered(&self) -> usize {
        self.buf.len() + self.scan.line.len()
    }
}

fn malformed(detail: String) -> WireError {
    WireError::Malformed {
        protocol: "RESP",
        detail,
    }
}

impl RespReader {
    /// Reads `buf[from..]` on from where the scanner stopped: where the message ends, if it does
    /// there.
    fn scan_bytes(&mut self, from: usize) -> Result<Progress, WireError> {
        let data = &self.buf[from..];
        let s = &mut self.scan;
        let mut i = 0;
        while i < data.len() {
            if s.bulk > 0 {
                let n = (data.len() - i).min(usize::try_from(s.bulk).unwrap_or(usize::MAX));
                i += n;
                s.bulk -= n as u64;
                continue;
            }
            if s.crlf > 0 {
                let want = if s.crlf == 2 { b'\r' } else { b'\n' };
                if data[i] != want {
                    return Err(malformed(format!(
                        "a bulk string is followed by \"{}\" where CRLF was due",
                        shown(&data[i..])
                    )));
                }
                i += 1;
                s.crlf -= 1;
                if s.crlf == 0 && element_done(s) {
                    return Ok(Progress::Complete(i));
                }
                continue;
            }
            if !s.started {
                s.started = true;
                let b = data[i];
                if self.mode == Mode::Commands && b != b'*' {
                    s.inline = true;
                } else if !b"+-:$*_,#(!=%~>|".contains(&b) {
                    return Err(WireError::NotProtocol {
                        protocol: "RESP",
                        detail: format!(
                            "a frame cannot begin with {}; the bytes begin \"{}\"",
                            shown(&[b]),
                            shown(&data[i..])
                        ),
                    });
                }
            }
            // A line, to its LF.
            let rest = &data[i..];
            let Some(nl) = rest.iter().position(|b| *b == b'\n') else {
                if s.line.len() + rest.len() > MAX_LINE {
                    return Err(too_long_line(s.inline));
                }
                s.line.extend_from_slice(rest);
                return Ok(Progress::More);
            };
            if s.line.len() + nl > MAX_LINE {
                return Err(too_long_line(s.inline));
            }
            s.line.extend_from_slice(&rest[..nl]);
            i += nl + 1;
            let line = std::mem::take(&mut s.line);
            if s.inline {
                return Ok(Progress::Complete(i));
            }
            let Some(content) = line.strip_suffix(b"\r") else {
                return Err(malformed(format!(
                    "the line \"{}\" ends with LF alone (RESP ends lines with CRLF)",
                    shown(&line)
                )));
            };
            if header(s, content, self.mode, self.max_message)? {
                return Ok(Progress::Complete(i));
            }
        }
        Ok(Progress::More)
    }
}

fn too_long_line(inline: bool) -> WireError {
    WireError::TooLarge {
        what: if inline {
            "an inline command".to_string()
        } else {
            "a RESP header line".to_string()
        },
        len: MAX_LINE as u64 + 1,
        max: MAX_LINE as u64,
    }
}

/// One element finished: the open aggregates count it; true when the message is whole.
fn element_done(s: &mut Scan) -> bool {
    while let Some(top) = s.stack.last_mut() {
        *top -= 1;
        if *top > 0 {
            return false;
        }
        s.stack.pop();
    }
    true
}

fn number(content: &[u8]) -> Result<i64, WireError> {
    std::str::from_utf8(&content[1..])
        .ok()
        .and_then(|t| t.parse::<i64>().ok())
        .ok_or_else(|| {
            malformed(format!(
                "\"{}\" has no number where its length or value was due",
                shown(content)
            ))
        })
}

/// Reads a frame's header line (`content` without its CRLF); true when the message is whole.
fn header(s: &mut Scan, content: &[u8], mode: Mode, max: usize) -> Result<bool, WireError> {
    let Some(&t) = content.first() else {
        return Err(malformed("an empty line where a frame was due".into()));
    };
    let top = s.stack.is_empty() && s.head.is_none();
    if top && mode == Mode::Replies {
        let null = (t == b'$' || t == b'*') && &content[1..] == b"-1";
        s.head = Some(ReplyHead {
            kind: if null { "null" } else { kind_name(t) },
            error: (t == b'-').then(|| {
                let text = String::from_utf8_lossy(&content[1..]);
                text.split_whitespace()
                    .next()
                    .unwrap_or("")
                    .chars()
                    .take(64)
                    .collect()
            }),
        });
    }
    match t {
        b'+' | b'-' | b'_' | b',' | b'#' | b'(' => Ok(element_done(s)),
        b':' => {
            number(content)?;
            Ok(element_done(s))
        }
        b'$' | b'!' | b'=' => {
            if content.get(1) == Some(&b'?') {
                return Err(malformed(
                    "a streamed string ($?): no Redis server or client sends one, and it is not read here".into(),
                ));
            }
            let n = number(content)?;
            if n == -1 && t == b'$' {
                return Ok(element_done(s));
            }
            let n = u64::try_from(n).map_err(|_| malformed(format!("a string of length {n}")))?;
            if mode == Mode::Commands && n > max as u64 {
                return Err(WireError::TooLarge {
                    what: "a command's argument".into(),
                    len: n,
                    max: max as u64,
                });
            }
            s.bulk = n;
            s.crlf = 2;
            Ok(false)
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            if content.get(1) == Some(&b'?') {
                return Err(malformed(
                    "a streamed aggregate (?): no Redis server or client sends one, and it is not read here".into(),
                ));
            }
            let n = number(content)?;
            if n == -1 && t == b'*' {
                return Ok(element_done(s));
            }
            let n =
                u64::try_from(n).map_err(|_| malformed(format!("an aggregate of {n} elements")))?;
            if mode == Mode::Commands && t != b'*' {
                return Err(malformed(format!(
                    "a command holds {} (a command is an array of bulk strings)",
                    kind_name(t)
                )));
            }
            let elements = match t {
                b'%' => n.saturating_mul(2),
                b'|' => n.saturating_mul(2).saturating_add(1),
                _ => n,
            };
            if elements == 0 {
                return Ok(element_done(s));
            }
            if s.stack.len() >= MAX_DEPTH {
                return Err(malformed(format!(
                    "aggregates nested deeper than {MAX_DEPTH}"
                )));
            }
            s.stack.push(elements);
            Ok(false)
        }
        other => Err(WireError::NotProtocol {
            protocol: "RESP",
            detail: format!(
                "a frame cannot begin with {}; the line is \"{}\"",
                shown(&[other]),
                shown(content)
            ),
        }),
    }
}

fn kind_name(t: u8) -> &'static str {
    match t {
        b'+' => "simple",
        b'-' | b'!' => "error",
        b':' => "integer",
        b'$' => "bulk",
        b'*' => "array",
        b'_' => "null",
        b',' => "double",
        b'#' => "boolean",
        b'(' => "big_number",
        b'=' => "verbatim",
        b'%' => "map",
        b'~' => "set",
        b'>' => "push",
        b'|' => "attribute",
        _ => "unknown",
    }
}

/// A whole array command's arguments, decoded by `redis-protocol`.
fn array_args(raw: &Bytes) -> Result<Vec<Bytes>, WireError> {
    let (frame, used) = match decode_range(raw) {
        Ok(Some(f)) => f,
        Ok(None) => return Err(malformed("a command ends early".into())),
        Err(e) => return Err(malformed(format!("a command: {e}"))),
    };
    if used != raw.len() {
        return Err(malformed(format!(
            "a command of {} bytes was read as {used}",
            raw.len()
        )));
    }
    let items = match frame {
        RangeFrame::Array(items) => items,
        RangeFrame::Null => Vec::new(),
        _ => return Err(malformed("a command is an array of bulk strings".into())),
    };
    items
        .into_iter()
        .map(|f| match f {
            RangeFrame::BulkString((start, end)) if start <= end && end <= raw.len() => {
                Ok(raw.slice(start..end))
            }
            _ => Err(malformed(
                "a command's arguments are bulk strings ($), nothing else".into(),
            )),
        })
        .collect()
}

/// An inline command's words, split as Redis splits them (`sdssplitargs`): spaces separate
/// words, "double quotes" take `\n`, `\t`, `\xHH` and friends, 'single quotes' take `\'`.
fn inline_args(raw: &Bytes) -> Result<Vec<Bytes>, WireError> {
    let line = raw.strip_suffix(b"\n").unwrap_or(raw);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let mut out = Vec::new();
    let mut i = 0;
    let unbalanced = || malformed("unbalanced quotes in an inline command".to_string());
    while i < line.len() {
        while i < line.len() && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= line.len() {
            break;
        }
        let mut word = Vec::new();
        match line[i] {
            b'"' => {
                i += 1;
                loop {
                    let Some(&c) = line.get(i) else {
                        return Err(unbalanced());
                    };
                    i += 1;
                    match c {
                        b'"' => break,
                        b'\\' => {
                            let Some(&e) = line.get(i) else {
                                return Err(unbalanced());
                            };
                            i += 1;
                            let hex = |b: u8| (b as char).to_digit(16);
                            match e {
                                b'n' => word.push(b'\n'),
                                b'r' => word.push(b'\r'),
                                b't' => word.push(b'\t'),
                                b'b' => word.push(8),
                                b'a' => word.push(7),
                                b'x' => match (
                                    line.get(i).and_then(|b| hex(*b)),
                                    line.get(i + 1).and_then(|b| hex(*b)),
                                ) {
                                    (Some(h), Some(l)) => {
                                        word.push((h * 16 + l) as u8);
                                        i += 2;
                                    }
                                    _ => word.push(b'x'),
                                },
                                other => word.push(other),
                            }
                        }
                        other => word.push(other),
                    }
                }
                if line.get(i).is_some_and(|b| !b.is_ascii_whitespace()) {
                    return Err(unbalanced());
                }
            }
            b'\'' => {
                i += 1;
                loop {
                    let Some(&c) = line.get(i) else {
                        return Err(unbalanced());
                    };
                    i += 1;
                    match c {
                        b'\'' => break,
                        b'\\' if line.get(i) == Some(&b'\'') => {
                            word.push(b'\'');
                            i += 1;
                        }
                        other => word.push(other),
                    }
                }
                if line.get(i).is_some_and(|b| !b.is_ascii_whitespace()) {
                    return Err(unbalanced());
                }
            }
            _ => {
                while i < line.len() && !line[i].is_ascii_whitespace() {
                    word.push(line[i]);
                    i += 1;
                }
            }
        }
        out.push(Bytes::from(word));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commands(bytes: &[u8]) -> Result<Vec<Command>, WireError> {
        let mut r = RespReader::commands(1 << 20);
        r.push(bytes);
        let mut out = Vec::new();
        while let Some(c) = r.next_command()? {
            out.push(c);
        }
        r.finish()?;
        Ok(out)
    }

    fn words(c: &Command) -> Vec<String> {
        c.args
            .iter()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect()
    }

    #[test]
    fn arrays_and_inline_commands() {
        let got = commands(
            b"*2\r\n$3\r\nGET\r\n$5\r\nuser1\r\n\r\nset k \"a b\\x41\" 'it\\'s'\r\nPING\n*0\r\n",
        )
        .expect("valid");
        assert_eq!(got.len(), 3);
        assert_eq!(words(&got[0]), ["GET", "user1"]);
        assert!(!got[0].inline);
        assert_eq!(words(&got[1]), ["set", "k", "a bA", "it's"]);
        assert_eq!(got[1].name(), "SET");
        assert!(got[1].inline);
        assert_eq!(words(&got[2]), ["PING"]);
    }

    #[test]
    fn bad_commands_are_named() {
        let e = commands(b"*1\r\n:5\r\n")
            .expect_err("not a bulk")
            .to_string();
        assert!(e.contains("bulk strings"), "{e}");
        let e = commands(b"*1\r\n$3\r\nGETXX\r\n")
            .expect_err("no crlf")
            .to_string();
        assert!(e.contains("CRLF"), "{e}");
        let e = commands(b"set \"unterminated\r\n")
            .expect_err("quotes")
            .to_string();
        assert!(e.contains("unbalanced"), "{e}");
        let e = commands(b"*1\r\n$2000000\r\n")
            .expect_err("too large")
            .to_string();
        assert!(e.contains("larger than the limit"), "{e}");
        let e = commands(b"*2\r\n$3\r\nGET\r\n")
            .expect_err("truncated")
            .to_string();
        assert!(e.contains("closed in the middle of a command"), "{e}");
        let mut deep = Vec::new();
        for _ in 0..100 {
            deep.extend_from_slice(b"*1\r\n");
        }
        assert!(commands(&deep).is_err());
    }

    #[test]
    fn replies_pass_in_pieces_with_their_head() {
        let mut r = RespReader::replies();
        r.push(b"-LOADING Redis is loading\r\n$5\r\nhel");
        let a = r.next_reply_piece().expect("valid").expect("a piece");
        assert!(a.first && a.last);
        assert_eq!(
            a.head,
            Some(ReplyHead {
                kind: "error",
                error: Some("LOADING".into())
            })
        );
        let b = r.next_reply_piece().expect("valid").expect("a piece");
        assert!(b.first && !b.last);
        assert_eq!(b.head.as_ref().map(|h| h.kind), Some("bulk"));
        assert_eq!(r.next_reply_piece().expect("valid"), None);
        r.push(b"lo\r\n%1\r\n+a\r\n*2\r\n:1\r\n_\r\n>2\r\n+x\r\n+y\r\n");
        let c = r.next_reply_piece().expect("valid").expect("a piece");
        assert!(!c.first && c.last && c.head.is_none());
        let d = r.next_reply_piece().expect("valid").expect("a piece");
        assert!(d.first && d.last);
        assert_eq!(&d.bytes[..], b"%1\r\n+a\r\n*2\r\n:1\r\n_\r\n");
        let e = r.next_reply_piece().expect("valid").expect("a piece");
        assert_eq!(e.head.map(|h| h.kind), Some("push"));
        r.finish().expect("nothing left");
    }

    #[test]
    fn a_reply_that_is_not_resp_is_named() {
        let mut r = RespReader::replies();
        r.push(b"HTTP/1.1 200 OK\r\n");
        let e = r.next_reply_piece().expect_err("not resp").to_string();
        assert!(e.starts_with("not RESP") && e.contains("HTTP/1.1"), "{e}");
    }
}
