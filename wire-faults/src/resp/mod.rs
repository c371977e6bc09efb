//! Redis's protocol, RESP2 and RESP3: the reader of both directions, the errors a fault sends,
//! the rules, and the per-connection state machine.

pub mod answer;
mod reader;
mod rules;
mod session;

pub use reader::{Command, ReplyHead, ReplyPiece, RespReader, MAX_DEPTH, MAX_LINE};
pub use rules::RedisProxy;
pub use session::RedisSession;
