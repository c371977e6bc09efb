//! The RESP errors a fault answers a command with, as Redis words them.
//!
//! Written by `redis-protocol`'s RESP2 encoder: a simple error (`-CODE message\r\n`), which
//! RESP3 clients read alike.

use bytes::Bytes;
use redis_protocol::resp2::encode::encode;
use redis_protocol::resp2::types::{OwnedFrame, Resp2Frame};

use crate::config::RedisError;

/// The message Redis sends with each of the errors a fault can answer, after the code.
pub fn default_message(code: &str) -> &'static str {
    match code {
        "LOADING" => "Redis is loading the dataset in memory",
        "BUSY" => {
            "Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
        }
        "READONLY" => "You can't write against a read only replica.",
        "TRYAGAIN" => "Multiple keys request during rehashing of slot",
        "OOM" => "command not allowed when used memory > 'maxmemory'.",
        _ => "",
    }
}

/// The error frame for `e`, for a command whose first key is `key` (MOVED and ASK name the
/// key's cluster slot).
pub fn error_reply(e: &RedisError, key: Option<&[u8]>) -> Bytes {
    let text = match e.code.as_str() {
        "MOVED" | "ASK" => format!(
            "{} {} {}",
            e.code,
            redis_protocol::redis_keyslot(key.unwrap_or(b"")),
            e.to.as_deref().unwrap_or("127.0.0.1:6379")
        ),
        code => {
            let message = e.message.as_deref().unwrap_or(default_message(code));
            if message.is_empty() {
                code.to_string()
            } else {
                format!("{code} {message}")
            }
        }
    };
    simple_error(&text)
}

/// `-text\r\n`; CR and LF in `text` become spaces (an error is one line).
pub fn simple_error(text: &str) -> Bytes {
    let frame = OwnedFrame::Error(text.replace(['\r', '\n'], " "));
    let mut buf = vec![0u8; frame.encode_len(false)];
    match encode(&mut buf, &frame, false) {
        Ok(n) => {
            buf.truncate(n);
            Bytes::from(buf)
        }
        // The buffer is the frame's own length: encoding cannot run out of room.
        Err(_) => Bytes::from(format!("-{text}\r\n")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(code: &str, to: Option<&str>) -> RedisError {
        RedisError {
            code: code.into(),
            message: None,
            to: to.map(str::to_string),
        }
    }

    #[test]
    fn errors_as_redis_sends_them() {
        assert_eq!(
            &error_reply(&err("LOADING", None), None)[..],
            b"-LOADING Redis is loading the dataset in memory\r\n"
        );
        assert_eq!(
            &error_reply(&err("READONLY", None), Some(b"k"))[..],
            b"-READONLY You can't write against a read only replica.\r\n"
        );
        // The slot of "foo" is 12182 (the Redis Cluster specification's example).
        assert_eq!(
            &error_reply(&err("MOVED", Some("10.0.0.2:7001")), Some(b"foo"))[..],
            b"-MOVED 12182 10.0.0.2:7001\r\n"
        );
        assert_eq!(&simple_error("ERR a\r\nb")[..], b"-ERR a  b\r\n");
    }
}
