//! What a session tells the proxy to do with each message: the only way decisions leave it.

use std::time::Duration;

use bytes::Bytes;

/// Which side of a proxied connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client (the service under test).
    Client,
    /// The server (the database, the cache).
    Server,
}

/// What the proxy does with a message from the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToServer {
    /// Wait this long first; the client's messages behind it wait too.
    pub delay: Duration,
    /// What goes to the server.
    pub send: Outgoing,
    /// Bytes for the client in the server's name, sent after the delay (the `N` that refuses
    /// an SSLRequest; an error that refuses a connection or answers a command).
    pub answer: Option<Bytes>,
    /// Close both connections once this is done.
    pub close: bool,
}

/// What goes to the server in answer to a client's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outgoing {
    /// The message, as it came.
    Forward,
    /// These bytes in its place.
    Replace(Bytes),
    /// Nothing.
    Nothing,
}

impl ToServer {
    /// Forward the message at once.
    pub fn forward() -> ToServer {
        ToServer {
            delay: Duration::ZERO,
            send: Outgoing::Forward,
            answer: None,
            close: false,
        }
    }

    /// Forward nothing; answer the client with `bytes`.
    pub fn answer(bytes: Bytes) -> ToServer {
        ToServer {
            delay: Duration::ZERO,
            send: Outgoing::Nothing,
            answer: Some(bytes),
            close: false,
        }
    }

    /// Forward nothing and close both connections.
    pub fn close() -> ToServer {
        ToServer {
            delay: Duration::ZERO,
            send: Outgoing::Nothing,
            answer: None,
            close: true,
        }
    }
}

/// What the proxy does with a message (or the first piece of one) from the server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToClient {
    /// Wait this long first; the server's messages behind it wait too.
    pub delay: Duration,
    /// What the client gets of it.
    pub relay: Relay,
    /// Bytes the proxy answered in the server's name, due right after this message (a Redis
    /// error for a command pipelined behind the one this answers).
    pub then: Option<Bytes>,
    /// Close both connections after this.
    pub close: bool,
}

/// What the client gets of a server's message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Relay {
    /// The message, as it came.
    Relay,
    /// Nothing: it is withheld.
    Swallow,
    /// These bytes in its place.
    Replace(Bytes),
}

impl ToClient {
    /// Relay the message at once.
    pub fn relay() -> ToClient {
        ToClient {
            delay: Duration::ZERO,
            relay: Relay::Relay,
            then: None,
            close: false,
        }
    }

    /// Withhold the message.
    pub fn swallow() -> ToClient {
        ToClient {
            relay: Relay::Swallow,
            ..ToClient::relay()
        }
    }
}
