//! The gRPC status codes, as data: the journal records them, the retry policy decides on them and
//! the checks judge them, so the one list lives here, beside the error kinds.
//!
//! Why here and not in the gRPC crate: the checks and the retry policy must not depend on a
//! runtime or a socket (ARCHITECTURE.md), and the gRPC crate speaks over `transport`. A code is a
//! number and a name; nothing about it needs more than this crate.

use std::fmt;
use std::str::FromStr;

use serde::{de, Deserialize, Deserializer, Serialize, Serializer};

/// A gRPC status code (the seventeen of `grpc/status.proto`'s `google.rpc.Code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum GrpcCode {
    /// Not an error.
    Ok = 0,
    /// The operation was cancelled, typically by the caller.
    Cancelled = 1,
    /// An unknown error, or a status from another error space.
    Unknown = 2,
    /// The client gave an invalid argument.
    InvalidArgument = 3,
    /// The deadline expired before the operation could complete.
    DeadlineExceeded = 4,
    /// Some requested entity was not found.
    NotFound = 5,
    /// The entity a client tried to create already exists.
    AlreadyExists = 6,
    /// The caller may not execute the operation.
    PermissionDenied = 7,
    /// A resource has been exhausted (a quota, a file system).
    ResourceExhausted = 8,
    /// The system is not in a state the operation requires.
    FailedPrecondition = 9,
    /// The operation was aborted, typically by a concurrency conflict.
    Aborted = 10,
    /// The operation was attempted past the valid range.
    OutOfRange = 11,
    /// The operation is not implemented or supported.
    Unimplemented = 12,
    /// An invariant of the underlying system is broken.
    Internal = 13,
    /// The service is currently unavailable; most likely transient.
    Unavailable = 14,
    /// Unrecoverable data loss or corruption.
    DataLoss = 15,
    /// The request lacks valid authentication credentials.
    Unauthenticated = 16,
}

/// A status code that is neither one of the seventeen names nor a number from 0 to 16.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownGrpcCode(pub String);

impl fmt::Display for UnknownGrpcCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not a gRPC status code (a name such as UNAVAILABLE, or a number from 0 to 16)",
            self.0
        )
    }
}

impl std::error::Error for UnknownGrpcCode {}

impl GrpcCode {
    /// Every code, by number.
    pub const ALL: [GrpcCode; 17] = [
        GrpcCode::Ok,
        GrpcCode::Cancelled,
        GrpcCode::Unknown,
        GrpcCode::InvalidArgument,
        GrpcCode::DeadlineExceeded,
        GrpcCode::NotFound,
        GrpcCode::AlreadyExists,
        GrpcCode::PermissionDenied,
        GrpcCode::ResourceExhausted,
        GrpcCode::FailedPrecondition,
        GrpcCode::Aborted,
        GrpcCode::OutOfRange,
        GrpcCode::Unimplemented,
        GrpcCode::Internal,
        GrpcCode::Unavailable,
        GrpcCode::DataLoss,
        GrpcCode::Unauthenticated,
    ];

    /// The canonical name: `UNAVAILABLE`.
    pub fn as_str(self) -> &'static str {
        match self {
            GrpcCode::Ok => "OK",
            GrpcCode::Cancelled => "CANCELLED",
            GrpcCode::Unknown => "UNKNOWN",
            GrpcCode::InvalidArgument => "INVALID_ARGUMENT",
            GrpcCode::DeadlineExceeded => "DEADLINE_EXCEEDED",
            GrpcCode::NotFound => "NOT_FOUND",
            GrpcCode::AlreadyExists => "ALREADY_EXISTS",
            GrpcCode::PermissionDenied => "PERMISSION_DENIED",
            GrpcCode::ResourceExhausted => "RESOURCE_EXHAUSTED",
            GrpcCode::FailedPrecondition => "FAILED_PRECONDITION",
            GrpcCode::Aborted => "ABORTED",
            GrpcCode::OutOfRange => "OUT_OF_RANGE",
            GrpcCode::Unimplemented => "UNIMPLEMENTED",
            GrpcCode::Internal => "INTERNAL",
            GrpcCode::Unavailable => "UNAVAILABLE",
            GrpcCode::DataLoss => "DATA_LOSS",
            GrpcCode::Unauthenticated => "UNAUTHENTICATED",
        }
    }

    /// The number on the wire (`grpc-status: 14`).
    pub fn number(self) -> u8 {
        self as u8
    }

    /// The code numbered `n`, if there is one.
    pub fn from_number(n: u64) -> Option<GrpcCode> {
        usize::try_from(n)
            .ok()
            .and_then(|i| GrpcCode::ALL.get(i).copied())
    }

    /// The code named `name`, in any case (gRFC A6: `["UNAVAILABLE"]` or `["unavailable"]`).
    pub fn from_name(name: &str) -> Option<GrpcCode> {
        GrpcCode::ALL
            .into_iter()
            .find(|c| c.as_str().eq_ignore_ascii_case(name))
    }
}

impl GrpcCode {
    /// The HTTP status `google/rpc/code.proto` maps the code to (its "HTTP Mapping" lines, as
    /// gRPC-to-HTTP gateways answer): 499 for CANCELLED, 400 for INVALID_ARGUMENT, 503 for
    /// UNAVAILABLE, … So a check that classifies HTTP answers — a client error, a server error, a
    /// transient failure — classifies a call's status the same way.
    pub fn http_equivalent(self) -> u16 {
        match self {
            GrpcCode::Ok => 200,
            GrpcCode::Cancelled => 499,
            GrpcCode::Unknown | GrpcCode::Internal | GrpcCode::DataLoss => 500,
            GrpcCode::InvalidArgument | GrpcCode::FailedPrecondition | GrpcCode::OutOfRange => 400,
            GrpcCode::DeadlineExceeded => 504,
            GrpcCode::NotFound => 404,
            GrpcCode::AlreadyExists | GrpcCode::Aborted => 409,
            GrpcCode::PermissionDenied => 403,
            GrpcCode::Unauthenticated => 401,
            GrpcCode::ResourceExhausted => 429,
            GrpcCode::Unimplemented => 501,
            GrpcCode::Unavailable => 503,
        }
    }
}

impl fmt::Display for GrpcCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name in any case, or a number written as digits.
impl FromStr for GrpcCode {
    type Err = UnknownGrpcCode;

    fn from_str(s: &str) -> Result<GrpcCode, UnknownGrpcCode> {
        let t = s.trim();
        let by_number = || {
            (!t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()))
                .then(|| t.parse::<u64>().ok().and_then(GrpcCode::from_number))
                .flatten()
        };
        GrpcCode::from_name(t)
            .or_else(by_number)
            .ok_or_else(|| UnknownGrpcCode(s.to_string()))
    }
}

/// Written by name, as reports and journals show it.
impl Serialize for GrpcCode {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// Read from a name (any case) or a number: a service config may give either (gRFC A6).
impl schemars::JsonSchema for GrpcCode {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "GrpcCode".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let names: Vec<&str> = GrpcCode::ALL.iter().map(|c| c.as_str()).collect();
        schemars::json_schema!({
            "description": "A gRPC status code, by name (`UNAVAILABLE`) or number (`14`).",
            "anyOf": [
                { "type": "string", "enum": names },
                { "type": "integer", "minimum": 0, "maximum": 16 }
            ]
        })
    }
}

impl<'de> Deserialize<'de> for GrpcCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<GrpcCode, D::Error> {
        struct Visitor;
        impl de::Visitor<'_> for Visitor {
            type Value = GrpcCode;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a gRPC status code: a name such as UNAVAILABLE, or a number 0..=16")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<GrpcCode, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<GrpcCode, E> {
                GrpcCode::from_number(v).ok_or_else(|| E::custom(UnknownGrpcCode(v.to_string())))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<GrpcCode, E> {
                u64::try_from(v)
                    .ok()
                    .and_then(GrpcCode::from_number)
                    .ok_or_else(|| E::custom(UnknownGrpcCode(v.to_string())))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<GrpcCode, E> {
                // JSON has one number type: 14.0 is 14, 14.5 is no code.
                (v.fract() == 0.0 && (0.0..=16.0).contains(&v))
                    .then(|| GrpcCode::from_number(v as u64))
                    .flatten()
                    .ok_or_else(|| E::custom(UnknownGrpcCode(v.to_string())))
            }
        }
        d.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seventeen_codes_numbered_in_order_with_their_names() {
        for (i, c) in GrpcCode::ALL.iter().enumerate() {
            assert_eq!(usize::from(c.number()), i);
            assert_eq!(GrpcCode::from_number(i as u64), Some(*c));
            assert_eq!(GrpcCode::from_name(c.as_str()), Some(*c));
            assert_eq!(c.as_str().to_lowercase().parse::<GrpcCode>(), Ok(*c));
        }
        assert_eq!(GrpcCode::from_number(17), None);
        assert_eq!(GrpcCode::Unavailable.as_str(), "UNAVAILABLE");
        assert_eq!(GrpcCode::Unauthenticated.number(), 16);
        assert_eq!(GrpcCode::DeadlineExceeded.to_string(), "DEADLINE_EXCEEDED");
    }

    #[test]
    fn http_equivalents_are_code_protos() {
        let table = [
            (GrpcCode::Ok, 200),
            (GrpcCode::Cancelled, 499),
            (GrpcCode::Unknown, 500),
            (GrpcCode::InvalidArgument, 400),
            (GrpcCode::DeadlineExceeded, 504),
            (GrpcCode::NotFound, 404),
            (GrpcCode::AlreadyExists, 409),
            (GrpcCode::PermissionDenied, 403),
            (GrpcCode::ResourceExhausted, 429),
            (GrpcCode::FailedPrecondition, 400),
            (GrpcCode::Aborted, 409),
            (GrpcCode::OutOfRange, 400),
            (GrpcCode::Unimplemented, 501),
            (GrpcCode::Internal, 500),
            (GrpcCode::Unavailable, 503),
            (GrpcCode::DataLoss, 500),
            (GrpcCode::Unauthenticated, 401),
        ];
        assert_eq!(table.len(), GrpcCode::ALL.len());
        for (code, http) in table {
            assert_eq!(code.http_equivalent(), http, "{code}");
        }
    }

    #[test]
    fn parsed_from_a_name_or_digits_and_nothing_else() {
        assert_eq!("14".parse::<GrpcCode>(), Ok(GrpcCode::Unavailable));
        assert_eq!(
            " unavailable ".parse::<GrpcCode>(),
            Ok(GrpcCode::Unavailable)
        );
        for bad in ["", "17", "-1", "+4", "UNAVAILABLE_", "0x0e", "Unavail"] {
            let e = bad.parse::<GrpcCode>().unwrap_err();
            assert!(
                e.to_string().contains("not a gRPC status code"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn serde_reads_names_and_numbers_and_writes_names() {
        let codes: Vec<GrpcCode> =
            serde_json::from_str(r#"["UNAVAILABLE", "aborted", 4, 13.0]"#).unwrap();
        assert_eq!(
            codes,
            [
                GrpcCode::Unavailable,
                GrpcCode::Aborted,
                GrpcCode::DeadlineExceeded,
                GrpcCode::Internal
            ]
        );
        assert_eq!(
            serde_json::to_string(&GrpcCode::NotFound).unwrap(),
            r#""NOT_FOUND""#
        );
        for bad in ["17", "-3", "2.5", r#""NOPE""#, "true"] {
            assert!(serde_json::from_str::<GrpcCode>(bad).is_err(), "{bad}");
        }
    }
}
