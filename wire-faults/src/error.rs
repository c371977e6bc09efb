//! What a reader says when the bytes are not what its protocol allows.

/// Bytes a reader could not take: the connection cannot be read as its protocol from here on.
///
/// After one, the reader refuses more input; the proxy closes the connection, or forwards it
/// unread from here on (its buffered bytes are [`take_unread`](crate::pg::FrontendReader::take_unread)),
/// as it is configured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// A message declared a length above the reader's bound.
    #[error("{what} of {len} bytes is larger than the limit of {max} bytes")]
    TooLarge {
        /// The message, as the protocol names it.
        what: String,
        /// Its declared (or reached) length.
        len: u64,
        /// The bound.
        max: u64,
    },
    /// The connection ended in the middle of a message.
    #[error("the connection closed in the middle of {what} ({have} bytes of it had come)")]
    Truncated {
        /// The message, as far as it was known.
        what: String,
        /// How many of its bytes had come.
        have: u64,
    },
    /// The bytes are not this protocol at all (an HTTP request to a PostgreSQL proxy, say).
    #[error("not {protocol}: {detail}")]
    NotProtocol {
        /// `PostgreSQL`, `RESP`.
        protocol: &'static str,
        /// What was seen instead.
        detail: String,
    },
    /// A message of the protocol that breaks its rules.
    #[error("{protocol} violation: {detail}")]
    Malformed {
        /// `PostgreSQL`, `RESP`.
        protocol: &'static str,
        /// What is wrong.
        detail: String,
    },
}

/// The first bytes of `b` shown for an error message: printable ASCII as it is, others escaped,
/// at most 24 bytes.
pub(crate) fn shown(b: &[u8]) -> String {
    let mut s = String::new();
    for &c in b.iter().take(24) {
        if (0x20..0x7f).contains(&c) {
            s.push(char::from(c));
        } else {
            s.push_str(&format!("\\x{c:02x}"));
        }
    }
    if b.len() > 24 {
        s.push('…');
    }
    s
}
