//! A call's status as the wire carries it: `grpc-status` (a decimal code), `grpc-message`
//! (percent-encoded UTF-8) and `grpc-status-details-bin` (kept as bytes: a `google.rpc.Status`
//! the caller may decode), and the status a client makes up when the server sent none — from
//! the HTTP status, by the table of gRPC's `http-grpc-status-mapping.md`.

use bytes::Bytes;
use http::{HeaderMap, HeaderName};

pub use history::GrpcCode as Code;

/// `grpc-status`.
pub const GRPC_STATUS: &str = "grpc-status";
/// `grpc-message`.
pub const GRPC_MESSAGE: &str = "grpc-message";
/// `grpc-status-details-bin`.
pub const GRPC_STATUS_DETAILS: &str = "grpc-status-details-bin";

/// The end of a call: a code, a message and, when sent, the details.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The code.
    pub code: Code,
    /// The message, percent-decoded.
    pub message: String,
    /// `grpc-status-details-bin`, base64-decoded.
    pub details: Option<Bytes>,
}

impl Status {
    /// A status with `code` and `message`.
    pub fn new(code: Code, message: impl Into<String>) -> Status {
        Status {
            code,
            message: message.into(),
            details: None,
        }
    }

    /// The status in `fields` (trailers, or the headers of a Trailers-Only response), if
    /// `grpc-status` is there. A value that is not a code becomes UNKNOWN (a number gRPC does
    /// not define) or INTERNAL (not a number), with the value in the message.
    pub fn from_fields(fields: &HeaderMap) -> Option<Status> {
        // Looked up by `HeaderName`: a `&str` key is parsed and checked on every lookup, and
        // every answer of a load is read here.
        const STATUS: HeaderName = HeaderName::from_static(GRPC_STATUS);
        const MESSAGE: HeaderName = HeaderName::from_static(GRPC_MESSAGE);
        const DETAILS: HeaderName = HeaderName::from_static(GRPC_STATUS_DETAILS);
        use crate::metadata::first;
        let raw = first(fields, &STATUS)?;
        let message = first(fields, &MESSAGE)
            .map(|v| percent_decode(v.as_bytes()))
            .unwrap_or_default();
        let details =
            first(fields, &DETAILS).and_then(|v| crate::metadata::decode_binary(v.as_bytes()).ok());
        let raw = raw.as_bytes();
        let digits = !raw.is_empty() && raw.iter().all(u8::is_ascii_digit);
        let number = digits
            .then(|| std::str::from_utf8(raw).ok()?.parse::<u64>().ok())
            .flatten();
        let code = match number {
            Some(n) => match Code::from_number(n) {
                Some(c) => c,
                None => {
                    return Some(Status {
                        code: Code::Unknown,
                        message: format!("grpc-status {n} is not a known code: {message}"),
                        details,
                    })
                }
            },
            None => {
                return Some(Status {
                    code: Code::Internal,
                    message: format!(
                        "malformed grpc-status {:?}: {message}",
                        String::from_utf8_lossy(raw)
                    ),
                    details,
                })
            }
        };
        Some(Status {
            code,
            message,
            details,
        })
    }

    /// The status for an answer without `grpc-status`, from its HTTP status.
    pub fn from_http(status: u16) -> Status {
        Status::new(
            code_for_http(status),
            format!("no grpc-status; HTTP status {status}"),
        )
    }
}

/// The gRPC code for an HTTP status when no `grpc-status` came ("This table is to be used only
/// for clients that received a response that did not include grpc-status").
pub fn code_for_http(status: u16) -> Code {
    match status {
        400 | 431 => Code::Internal,
        401 => Code::Unauthenticated,
        403 => Code::PermissionDenied,
        404 => Code::Unimplemented,
        429 | 502..=504 => Code::Unavailable,
        _ => Code::Unknown,
    }
}

/// `grpc-message`'s encoding: bytes outside printable ASCII, and `%`, as `%XX`.
pub fn percent_encode(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    for b in message.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `grpc-message` decoded. The spec: "When decoding invalid values, implementations MUST NOT
/// error or throw away the message" — a broken `%` sequence is kept as it is, and bytes that are
/// not UTF-8 become U+FFFD.
pub fn percent_decode(raw: &[u8]) -> String {
    let hex = |b: u8| char::from(b).to_digit(16).map(|d| d as u8);
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' && i + 2 < raw.len() {
            if let (Some(h), Some(l)) = (hex(raw[i + 1]), hex(raw[i + 2])) {
                out.push(h << 4 | l);
                i += 3;
                continue;
            }
        }
        out.push(raw[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn fields(pairs: &[(&'static str, &[u8])]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_bytes(v).unwrap());
        }
        h
    }

    #[test]
    fn grpc_status_and_message_are_read() {
        let s = Status::from_fields(&fields(&[
            ("grpc-status", b"14"),
            ("grpc-message", b"back%20end %E2%9C%93 down 100%25"),
        ]))
        .unwrap();
        assert_eq!(s.code, Code::Unavailable);
        assert_eq!(s.message, "back end \u{2713} down 100%");
        assert_eq!(s.details, None);
        assert_eq!(
            Status::from_fields(&fields(&[("grpc-message", b"x")])),
            None
        );
        let ok = Status::from_fields(&fields(&[("grpc-status", b"0")])).unwrap();
        assert_eq!((ok.code, ok.message.as_str()), (Code::Ok, ""));
    }

    #[test]
    fn a_bad_grpc_status_is_still_a_status() {
        let s = Status::from_fields(&fields(&[("grpc-status", b"99")])).unwrap();
        assert_eq!(s.code, Code::Unknown);
        assert!(s.message.contains("99"), "{}", s.message);
        for bad in [&b"fourteen"[..], b"-1", b"", b"1 4", b"+4"] {
            let s = Status::from_fields(&fields(&[("grpc-status", bad)])).unwrap();
            assert_eq!(s.code, Code::Internal, "{bad:?}");
        }
    }

    #[test]
    fn details_are_kept_as_bytes_padded_or_not() {
        for v in [&b"CAUSBW5vcGUh"[..], b"CAUSBW5vcGUh", b"CAU", b"CAU="] {
            let s = Status::from_fields(&fields(&[
                ("grpc-status", b"5"),
                ("grpc-status-details-bin", v),
            ]))
            .unwrap();
            let d = s.details.expect("decoded");
            assert_eq!(&d[..2], b"\x08\x05", "{v:?}");
        }
    }

    #[test]
    fn percent_encoding_round_trips_and_broken_escapes_survive() {
        for m in ["plain", "100% sure", "ünïcode ✓", "tab\tnew\nline", ""] {
            let e = percent_encode(m);
            assert!(e.bytes().all(|b| (0x20..=0x7e).contains(&b)), "{e}");
            assert_eq!(percent_decode(e.as_bytes()), m);
        }
        assert_eq!(percent_decode(b"50%"), "50%");
        assert_eq!(percent_decode(b"%zz%4"), "%zz%4");
        assert_eq!(percent_decode(b"%41%4a%"), "AJ%");
        assert_eq!(percent_decode(b"%FF"), "\u{FFFD}");
    }

    #[test]
    fn http_statuses_map_by_the_table() {
        let table = [
            (400, Code::Internal),
            (401, Code::Unauthenticated),
            (403, Code::PermissionDenied),
            (404, Code::Unimplemented),
            (429, Code::Unavailable),
            (431, Code::Internal),
            (502, Code::Unavailable),
            (503, Code::Unavailable),
            (504, Code::Unavailable),
            (200, Code::Unknown),
            (500, Code::Unknown),
            (418, Code::Unknown),
        ];
        for (http, code) in table {
            assert_eq!(code_for_http(http), code, "{http}");
        }
        assert!(Status::from_http(503).message.contains("503"));
    }
}
