//! PostgreSQL's protocol 3: the two directions' readers, the messages a fault sends, the
//! statement text as rules see it, the rules, and the per-connection state machine.

pub mod answer;
pub mod backend;
mod framing;
pub mod frontend;
mod rules;
mod session;
pub mod sql;

pub use backend::{Backend, BackendItem, BackendMessage, BackendReader, ErrorFields};
pub use framing::{Piece, MAX_STARTUP};
pub use frontend::{Frontend, FrontendItem, FrontendMessage, FrontendReader};
pub use rules::PgProxy;
pub use session::PgSession;
