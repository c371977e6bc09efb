//! Messages a proxy sends in the database's name, and the one it sends the database in the
//! client's.
//!
//! `postgres-protocol` writes only the client's messages (a driver never writes a server's), so
//! the few server messages a fault needs are written here, as the protocol's documentation lays
//! them out: ErrorResponse (`E`: fields, each a type byte and a NUL-terminated string, then a
//! NUL), ReadyForQuery (`Z`), CommandComplete (`C`), and the one-byte `N` that refuses an
//! SSLRequest or GSSENCRequest so that the client goes on in plaintext.

use bytes::{BufMut, Bytes, BytesMut};
use history::TxStatus;
use postgres_protocol::message::frontend;

/// The answer to an SSLRequest or a GSSENCRequest: `N`, go on without encryption.
pub const REFUSE_ENCRYPTION: &[u8] = b"N";

/// A statement the database refuses whatever its schema: sent in place of a statement that a
/// fault answers with an error, so that the database's own transaction fails with it (a block
/// becomes failed, an implicit transaction is rolled back, a pipeline is skipped to its Sync)
/// exactly as if the statement had failed there. The error the database answers is replaced
/// by the fault's.
pub const REFUSED_STATEMENT: &str =
    "-- a fault injected by a proxy: this statement is refused on purpose\nINJECTED FAULT";

/// The name of the prepared statement [`refused_parse`] does not make (its text does not parse);
/// a name of its own, so that the client's unnamed statement is left as it was.
pub const REFUSED_STATEMENT_NAME: &str = "chaos_harness_injected_fault";

/// An ErrorResponse with this severity (`ERROR`, `FATAL`), SQLSTATE and message.
pub fn error_response(severity: &str, sqlstate: &str, message: &str) -> Bytes {
    let mut body = BytesMut::new();
    for (field, value) in [
        (b'S', severity),
        (b'V', severity),
        (b'C', sqlstate),
        (b'M', message),
    ] {
        body.put_u8(field);
        put_cstr(&mut body, value);
    }
    body.put_u8(0);
    tagged(b'E', &body)
}

/// A ReadyForQuery with this transaction status.
pub fn ready_for_query(status: TxStatus) -> Bytes {
    let b = match status {
        TxStatus::Idle => b'I',
        TxStatus::Transaction => b'T',
        TxStatus::Failed => b'E',
    };
    tagged(b'Z', &[b])
}

/// A CommandComplete with this tag.
pub fn command_complete(tag: &str) -> Bytes {
    let mut body = BytesMut::new();
    put_cstr(&mut body, tag);
    tagged(b'C', &body)
}

/// A simple Query the database refuses ([`REFUSED_STATEMENT`]): sent in place of a simple
/// Query a fault answers with an error.
pub fn refused_query() -> Bytes {
    let mut buf = BytesMut::new();
    // The text has no NUL: writing cannot fail.
    let _ = frontend::query(REFUSED_STATEMENT, &mut buf);
    buf.freeze()
}

/// A Parse the database refuses: sent in place of an Execute a fault answers with an error.
pub fn refused_parse() -> Bytes {
    let mut buf = BytesMut::new();
    let _ = frontend::parse(
        REFUSED_STATEMENT_NAME,
        REFUSED_STATEMENT,
        std::iter::empty(),
        &mut buf,
    );
    buf.freeze()
}

/// A NUL-terminated string; a NUL inside it ends it there (the protocol cannot carry one).
fn put_cstr(buf: &mut BytesMut, s: &str) {
    let s = s.as_bytes();
    let end = s.iter().position(|b| *b == 0).unwrap_or(s.len());
    buf.put_slice(&s[..end]);
    buf.put_u8(0);
}

fn tagged(tag: u8, body: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(body.len() + 5);
    out.put_u8(tag);
    // Bodies here are a few hundred bytes at most (messages are bounded by the configuration).
    out.put_u32(u32::try_from(body.len() + 4).unwrap_or(u32::MAX));
    out.put_slice(body);
    out.freeze()
}
