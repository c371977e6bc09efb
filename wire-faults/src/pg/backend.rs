//! The server's side of PostgreSQL's protocol 3, as far as a statement's outcome goes.
//!
//! What tells a statement's fate: CommandComplete (`C`, its tag: `INSERT 0 1`, `COMMIT`, or
//! `ROLLBACK` for a COMMIT of a failed transaction), ErrorResponse (`E`, with its SQLSTATE), and
//! ReadyForQuery (`Z`), which ends each simple Query and each extended pipeline (at its `Sync`)
//! with the transaction status: `I` idle, `T` in a block, `E` in a failed block. Everything else
//! is forwarded as it is; NoticeResponse, ParameterStatus and NotificationResponse may come at any
//! time and answer nothing.
//!
//! The messages are cut here (framing, with this crate's bounds) and the few whose content
//! matters are decoded by `postgres-protocol`'s `backend::Message::parse`, the decoder
//! tokio-postgres uses. It is not handed the stream itself: it reserves whatever length a
//! header declares before checking it, and it refuses message types it does not know
//! (NegotiateProtocolVersion, CopyBothResponse, FunctionCallResponse) that a proxy must pass on.

use bytes::{Bytes, BytesMut};
use fallible_iterator::FallibleIterator;
use history::TxStatus;
use postgres_protocol::message::backend::Message;

use super::framing::{Frame, Framer, Piece};
use crate::error::WireError;

/// A server message, read whole: its bytes as they came, and what they say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendMessage {
    /// Every byte of it: what the proxy relays.
    pub raw: Bytes,
    /// What it says.
    pub kind: Backend,
}

/// What a server message says, as far as a statement's outcome needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    /// An error: the statement (or the pipeline's message) failed.
    Error(ErrorFields),
    /// A statement completed, with its tag.
    CommandComplete {
        /// `INSERT 0 1`, `SELECT 3`, `COMMIT`, `ROLLBACK`, …
        tag: String,
    },
    /// The end of a simple Query or of an extended pipeline, with the transaction status.
    ReadyForQuery {
        /// `I`, `T` or `E`.
        status: TxStatus,
    },
    /// An empty Query's answer (in place of CommandComplete).
    EmptyQuery,
    /// An Execute stopped at its row limit (in place of CommandComplete).
    PortalSuspended,
    /// A message that may come at any time and answers no statement: NoticeResponse,
    /// ParameterStatus, NotificationResponse.
    Async {
        /// Its tag.
        tag: u8,
    },
    /// Any other message (ParseComplete, RowDescription, Authentication, …).
    Other {
        /// Its tag.
        tag: u8,
    },
}

/// The fields of an ErrorResponse that a proxy journals.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ErrorFields {
    /// `ERROR`, `FATAL`, `PANIC` (the non-localized `V` field when sent, else `S`).
    pub severity: String,
    /// The SQLSTATE (`C`).
    pub sqlstate: String,
    /// The primary message (`M`).
    pub message: String,
}

/// A message or a piece of one, as the reader gives it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendItem {
    /// A message read whole.
    Message(BackendMessage),
    /// A piece of a DataRow or CopyData message, passed on as it arrives.
    Piece(Piece),
}

fn known(tag: u8) -> bool {
    matches!(
        tag,
        b'R' | b'K'
            | b'S'
            | b'Z'
            | b'T'
            | b'D'
            | b'C'
            | b'I'
            | b'E'
            | b'N'
            | b'A'
            | b'1'
            | b'2'
            | b'3'
            | b'n'
            | b't'
            | b's'
            | b'G'
            | b'H'
            | b'W'
            | b'd'
            | b'c'
            | b'V'
            | b'v'
    )
}

fn through(tag: u8) -> bool {
    tag == b'D' || tag == b'd'
}

/// Reads a server's byte stream, in chunks of any size, into messages.
#[derive(Debug)]
pub struct BackendReader {
    framer: Framer,
}

impl BackendReader {
    /// A reader reading no message but DataRow and CopyData longer than `max_message` bytes.
    pub fn new(max_message: usize) -> BackendReader {
        BackendReader {
            framer: Framer::new(max_message.max(5)),
        }
    }

    /// Appends bytes as they came from the server.
    pub fn push(&mut self, bytes: &[u8]) {
        self.framer.push(bytes);
    }

    /// The next message, or piece of one, when its bytes are there; `Ok(None)` until more come.
    /// An error is final.
    pub fn next_item(&mut self) -> Result<Option<BackendItem>, WireError> {
        let Some(frame) = self.framer.next_tagged(known, through, "server")? else {
            return Ok(None);
        };
        let (tag, raw) = match frame {
            Frame::Piece(p) => return Ok(Some(BackendItem::Piece(p))),
            Frame::Whole { tag, raw } => (tag.unwrap_or(0), raw),
        };
        match decode(tag, &raw) {
            Ok(kind) => Ok(Some(BackendItem::Message(BackendMessage { raw, kind }))),
            Err(e) => Err(self.framer.refuse(raw, e)),
        }
    }

    /// At the end of the server's stream: an error when a message was left unfinished.
    pub fn finish(&mut self) -> Result<(), WireError> {
        self.framer.finish(false)
    }

    /// The error that stopped the reader, if one did.
    pub fn error(&self) -> Option<&WireError> {
        self.framer.failed()
    }

    /// The bytes read but not given out.
    pub fn take_unread(&mut self) -> Bytes {
        self.framer.take_unread()
    }

    /// How many bytes wait in the reader for the rest of their message.
    pub fn buffered(&self) -> usize {
        self.framer.buffered()
    }
}

fn malformed(e: impl std::fmt::Display, what: &str) -> WireError {
    WireError::Malformed {
        protocol: "PostgreSQL",
        detail: format!("the server's {what}: {e}"),
    }
}

fn decode(tag: u8, raw: &Bytes) -> Result<Backend, WireError> {
    let what = match tag {
        b'E' => "ErrorResponse",
        b'C' => "CommandComplete",
        b'Z' => "ReadyForQuery",
        b'I' => return Ok(Backend::EmptyQuery),
        b's' => return Ok(Backend::PortalSuspended),
        b'N' | b'S' | b'A' => return Ok(Backend::Async { tag }),
        _ => return Ok(Backend::Other { tag }),
    };
    let mut buf = BytesMut::from(&raw[..]);
    let message = match Message::parse(&mut buf) {
        Ok(Some(m)) => m,
        Ok(None) => return Err(malformed("incomplete", what)),
        Err(e) => return Err(malformed(e, what)),
    };
    Ok(match message {
        Message::ErrorResponse(body) => {
            let mut fields = ErrorFields::default();
            let mut it = body.fields();
            loop {
                match it.next() {
                    Ok(Some(f)) => {
                        let v = String::from_utf8_lossy(f.value_bytes()).into_owned();
                        match f.type_() {
                            b'V' => fields.severity = v,
                            b'S' if fields.severity.is_empty() => fields.severity = v,
                            b'C' => fields.sqlstate = v,
                            b'M' => fields.message = v,
                            _ => {}
                        }
                    }
                    Ok(None) => break,
                    Err(e) => return Err(malformed(e, what)),
                }
            }
            Backend::Error(fields)
        }
        Message::CommandComplete(body) => Backend::CommandComplete {
            tag: body.tag().map_err(|e| malformed(e, what))?.to_string(),
        },
        Message::ReadyForQuery(body) => Backend::ReadyForQuery {
            status: TxStatus::from_byte(body.status()).ok_or_else(|| {
                malformed(
                    format!(
                        "transaction status {} (I, T or E)",
                        crate::error::shown(&[body.status()])
                    ),
                    what,
                )
            })?,
        },
        _ => Backend::Other { tag },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg::answer;

    #[test]
    fn reads_an_answer_with_its_error_tag_and_status() {
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&[b'1', 0, 0, 0, 4]);
        bytes.extend_from_slice(&answer::command_complete("INSERT 0 1"));
        bytes.extend_from_slice(&answer::error_response(
            "ERROR",
            "40001",
            "could not serialize",
        ));
        bytes.extend_from_slice(&answer::ready_for_query(TxStatus::Failed));
        let mut r = BackendReader::new(1 << 16);
        r.push(&bytes);
        let mut kinds = Vec::new();
        while let Some(BackendItem::Message(m)) = r.next_item().expect("valid") {
            kinds.push(m.kind);
        }
        assert_eq!(
            kinds,
            vec![
                Backend::Other { tag: b'1' },
                Backend::CommandComplete {
                    tag: "INSERT 0 1".into()
                },
                Backend::Error(ErrorFields {
                    severity: "ERROR".into(),
                    sqlstate: "40001".into(),
                    message: "could not serialize".into()
                }),
                Backend::ReadyForQuery {
                    status: TxStatus::Failed
                },
            ]
        );
    }

    #[test]
    fn a_bad_status_or_length_is_an_error_not_a_panic() {
        let mut r = BackendReader::new(1 << 16);
        r.push(&[b'Z', 0, 0, 0, 5, b'Q']);
        let e = r.next_item().expect_err("bad status").to_string();
        assert!(e.contains("transaction status Q"), "{e}");
        let mut r = BackendReader::new(1 << 16);
        r.push(&[b'C', 0, 0, 0, 2]);
        assert!(r
            .next_item()
            .expect_err("bad length")
            .to_string()
            .contains("length of 2"));
        let mut r = BackendReader::new(1 << 16);
        r.push(b"-ERR unknown command\r\n");
        assert!(r
            .next_item()
            .expect_err("not pg")
            .to_string()
            .starts_with("not PostgreSQL"));
    }
}
