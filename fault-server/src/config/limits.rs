//! `limits:` — what one client may cost the server (body and head sizes, the time to send them,
//! connections, memory held), with the bounds of each.

use std::time::Duration;

use serde::Deserialize;
use yaml_config::{ConfigError, Dur, Size};

/// Bounds on what a client may cost the server. A request over one is refused — `413`, `408`,
/// `431`, `400`, or `503` at the connection limit — and journaled with outcome `rejected`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Largest request body read; a larger one is answered `413` and the rest is not read.
    pub max_body: Size,
    /// How long a request's head may take to arrive, counted from when the server starts waiting
    /// for it: after the connection opens, and after each response on a kept-alive connection.
    /// So it is also the idle timeout of a kept-alive connection. A head late by this is
    /// answered `408` and the connection closed.
    pub header_timeout: Dur,
    /// How long a request's body may take to arrive, counted from its head; a body late by this
    /// is answered `408` and the connection closed. (Entries are numbered when a head arrives
    /// and journaled in that order, so a body that never ends must not wait for ever.)
    pub body_timeout: Dur,
    /// Most bytes of request bodies held at once, all connections together; a body that would go
    /// over is answered `503` with `Retry-After: 1` before more of it is read.
    pub body_memory: Size,
    /// Largest request head (request line and headers); a larger one is answered `431`.
    pub max_head: Size,
    /// Most connections served at once; beyond them a request is answered `503` (the control API
    /// is still served). Default: 10,000, or fewer when the process may open fewer files.
    pub max_connections: Option<u32>,
    /// Most Idempotency-Keys whose attempt count is remembered (the oldest is forgotten first).
    pub tracked_keys: u32,
    /// How long writing a response may make no progress — the client's HTTP/2 flow-control
    /// window stays closed, or its socket stays full — before the server gives up on it: the
    /// HTTP/2 stream is reset (the connection's other streams go on), the HTTP/1.1 connection
    /// closed, and the entry journaled `send_timeout`. A slow reader that keeps reading is never
    /// cut.
    pub send_timeout: Dur,
    /// After refusing a request whose body is still arriving (`413`, `408`, `503`), at most this
    /// many more bytes of it are read and discarded before the connection closes, so that the
    /// client reads the answer instead of a reset.
    pub drain_bytes: Size,
    /// ... and for at most this long.
    pub drain_time: Dur,
    /// Most bytes of upstream answers (proxy mode) held at once, all requests together, from
    /// the moment they are read until they are written to the client; an answer that would go
    /// over is answered `503` with `Retry-After: 1`.
    pub response_memory: Size,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_body: Size(16 << 20),
            header_timeout: Dur(Duration::from_secs(10)),
            body_timeout: Dur(Duration::from_secs(30)),
            body_memory: Size(256 << 20),
            max_head: Size(64 << 10),
            max_connections: None,
            tracked_keys: 200_000,
            send_timeout: Dur(Duration::from_secs(30)),
            drain_bytes: Size(8 << 20),
            drain_time: Dur(Duration::from_secs(5)),
            response_memory: Size(256 << 20),
        }
    }
}

/// The bounds of the limits themselves, each stated in its message.
pub fn validate_limits(l: &LimitsConfig, origin: &str) -> Result<(), ConfigError> {
    let bad = |field: &str, message: String| {
        Err(ConfigError::at(origin, format!("limits.{field}"), message))
    };
    if l.max_body.0 == 0 || l.max_body.0 > (1 << 30) {
        return bad(
            "max_body",
            format!("{} bytes; give 1 byte to 1 GiB", l.max_body.0),
        );
    }
    if l.header_timeout.0 < Duration::from_millis(10)
        || l.header_timeout.0 > Duration::from_secs(3600)
    {
        return bad(
            "header_timeout",
            format!("{:?}; give 10ms to 1h", l.header_timeout.0),
        );
    }
    if l.body_timeout.0 < Duration::from_millis(10) || l.body_timeout.0 > Duration::from_secs(3600)
    {
        return bad(
            "body_timeout",
            format!("{:?}; give 10ms to 1h", l.body_timeout.0),
        );
    }
    if l.body_memory.0 < l.max_body.0 || l.body_memory.0 > (64 << 30) {
        return bad(
            "body_memory",
            format!(
                "{} bytes; give max_body ({} bytes) to 64 GiB",
                l.body_memory.0, l.max_body.0
            ),
        );
    }
    if l.max_head.0 < 8192 || l.max_head.0 > (16 << 20) {
        return bad(
            "max_head",
            format!("{} bytes; give 8KiB to 16MiB", l.max_head.0),
        );
    }
    if let Some(n) = l.max_connections {
        if n == 0 || n > 1_000_000 {
            return bad("max_connections", format!("{n}; give 1 to 1000000"));
        }
    }
    if l.tracked_keys == 0 || l.tracked_keys > 10_000_000 {
        return bad(
            "tracked_keys",
            format!("{}; give 1 to 10000000", l.tracked_keys),
        );
    }
    for (field, d) in [
        ("send_timeout", l.send_timeout),
        ("drain_time", l.drain_time),
    ] {
        if d.0 < Duration::from_millis(10) || d.0 > Duration::from_secs(3600) {
            return bad(field, format!("{:?}; give 10ms to 1h", d.0));
        }
    }
    if l.drain_bytes.0 > (1 << 30) {
        return bad(
            "drain_bytes",
            format!("{} bytes; give 0 to 1 GiB", l.drain_bytes.0),
        );
    }
    if l.response_memory.0 < (64 << 10) || l.response_memory.0 > (64 << 30) {
        return bad(
            "response_memory",
            format!("{} bytes; give 64KiB to 64 GiB", l.response_memory.0),
        );
    }
    Ok(())
}
