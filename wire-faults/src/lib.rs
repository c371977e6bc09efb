//! PostgreSQL and Redis wire protocols read as pure functions over bytes, and the faults a
//! proxy decides per statement, transaction or command.
//!
//! A TCP proxy can delay or cut bytes; it cannot answer one statement with a serialization
//! failure, or let a COMMIT reach the database and lose its answer — the lost response of the
//! exactly-once argument, one layer down, where duplicate orders are born. That needs a proxy
//! that reads the protocol. This crate is the reading and the deciding, with no socket, no
//! runtime and no clock, so that a proxy, a fuzzer and a test share one parser and one state
//! machine:
//!
//! - [`pg`]: PostgreSQL's protocol 3 — [`pg::FrontendReader`] (startup, SSLRequest and
//!   GSSENCRequest, simple Query, the extended protocol's Parse/Bind/Describe/Execute/Close/
//!   Sync/Flush, pipelined, Terminate), [`pg::BackendReader`] (CommandComplete, ErrorResponse
//!   with its SQLSTATE, ReadyForQuery with the transaction status `I`/`T`/`E`), the messages a
//!   fault sends ([`pg::answer`]), statement text normalized ([`pg::sql`]), and
//!   [`pg::PgSession`], one connection's state machine.
//! - [`resp`]: RESP2 and RESP3 — [`resp::RespReader`] (commands as arrays or inline, replies of
//!   every type), the errors a fault sends ([`resp::answer`]: `-LOADING`, `-BUSY`, `-READONLY`,
//!   `-TRYAGAIN`, `-MOVED slot host:port`, `-OOM`), and [`resp::RedisSession`].
//! - [`config`]: the rules as a proxy's YAML holds them (`protocol: postgres` with `postgres:`,
//!   `protocol: redis` with `redis:`), with serde and JSON Schema, validated.
//!
//! Readers take chunks of any size (a message split across reads, several in one read) and
//! give out messages; each has bounds checked where the bytes arrive (a message's declared
//! length against the configured maximum, a RESP line, RESP nesting), reports a message cut
//! by the close, names bytes that are not its protocol, never panics, and buffers nothing it
//! does not need: DataRow, CopyData and Redis replies pass through in pieces as they come.
//!
//! # How a proxy drives a session
//!
//! Per proxy, once (and again whenever its rules change): [`pg::PgProxy::new`] or
//! [`resp::RedisProxy::new`] from the validated configuration, with the fault server's seeded
//! draw ([`Draw`]). Per accepted connection: a session ([`pg::PgSession::new`],
//! [`resp::RedisSession::new`]) and one reader per direction. Then, with the connection's two
//! directions handled in one task (or under one lock), in the order bytes arrive:
//!
//! ```text
//! client bytes ──► reader.push(chunk); while let Some(item) = reader.next_item()?:
//!                    message ──► session.on_client(&msg, now_us, &mut host) ─► ToServer
//!                                 delay: hold this message and those behind it
//!                                 send: Forward (msg.raw) | Replace(bytes) | Nothing
//!                                 answer: bytes to the client in the server's name
//!                                 close: close both sides afterwards
//!                    piece   ──► forward piece.bytes (COPY data)
//! server bytes ──► reader.push(chunk); while let Some(item) = reader.next_item()?:
//!                    message ──► session.on_server(&msg, now_us)      ─► ToClient
//!                    piece   ──► session.on_server_piece(piece.first) ─► ToClient
//!                                 delay: hold it and those behind it
//!                                 relay: Relay (msg.raw) | Swallow | Replace(bytes)
//!                                 then: bytes due right after it (Redis: an error answered
//!                                       for a command pipelined behind)
//!                                 close: close both sides afterwards
//! a reader's Err(e) ──► session.on_violation(side, &e, now_us, &mut host)
//!                         Close: close both sides | Forward: pass reader.take_unread() and
//!                         everything after it through unread (the session stays quiet)
//! either side closes ──► session.on_closed(side, now_us)
//! after each call ──► session.take_journal() into the journal (entries carry their seq)
//! ```
//!
//! [`Host`] gives a session the journal's next `seq` (taken when a statement or command
//! arrives; every `seq` taken is given back in an entry) and the wall clock of a journal time.
//! Redis's side is the same with [`resp::RespReader::next_command`] and
//! [`resp::RespReader::next_reply_piece`] into [`resp::RedisSession::on_command`] and
//! [`resp::RedisSession::on_reply`]. A delay never blocks the session: the proxy holds the
//! message (and what queues behind it) and keeps reading the other direction.
//!
//! Every statement and command becomes one [`history::Entry`] whose `protocol` field says what
//! was read ([`history::PgStatement`], [`history::RedisCommand`]): the statement's normalized
//! text up to a bound (its parameters never, only a digest of them), its transaction's number,
//! the fault, the answer's SQLSTATE or tag, the time it took, and whether the database
//! committed — for a COMMIT whose answer a `drop` withheld too, from the answer the client
//! never saw.

#![warn(missing_docs)]

pub mod config;
mod draw;
pub mod error;
mod journal;
pub mod pg;
pub mod resp;
mod step;

pub use draw::Draw;
pub use error::WireError;
/// The journal entry a session gives out (from `history`).
pub use history::Entry;
pub use journal::Host;
pub use step::{Outgoing, Relay, Side, ToClient, ToServer};
