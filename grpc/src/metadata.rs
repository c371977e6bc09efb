//! The headers a gRPC call carries besides its messages: custom metadata (ASCII, or binary under
//! a `-bin` key, base64 on the wire), `grpc-timeout`, and A6's `grpc-previous-rpc-attempts` and
//! `grpc-retry-pushback-ms`.
//!
//! Every value a peer sends is parsed here into a typed one or refused with a message that says
//! what was wrong; none of them panics or allocates without bound.

use std::time::Duration;

use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};
use base64::Engine;
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use retry_policy::grpc::Pushback;

/// `grpc-timeout`.
pub const GRPC_TIMEOUT: &str = "grpc-timeout";
/// `grpc-previous-rpc-attempts`.
pub const GRPC_PREVIOUS_RPC_ATTEMPTS: &str = "grpc-previous-rpc-attempts";
/// `grpc-retry-pushback-ms`.
pub const GRPC_RETRY_PUSHBACK_MS: &str = "grpc-retry-pushback-ms";

/// The names above and `grpc-encoding` as [`HeaderName`]s, for lookups: a `&str` key is parsed
/// and checked again on every lookup, and a server reads these on every call.
pub mod names {
    use http::HeaderName;

    /// `grpc-timeout`.
    pub const TIMEOUT: HeaderName = HeaderName::from_static(super::GRPC_TIMEOUT);
    /// `grpc-previous-rpc-attempts`.
    pub const PREVIOUS_RPC_ATTEMPTS: HeaderName =
        HeaderName::from_static(super::GRPC_PREVIOUS_RPC_ATTEMPTS);
    /// `grpc-encoding`.
    pub const ENCODING: HeaderName = HeaderName::from_static("grpc-encoding");
}

/// A metadata entry or header value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetadataError {
    /// Not `key: value`.
    #[error("{0:?} is not metadata: expected 'key: value'")]
    Syntax(String),
    /// The key has characters outside `0-9 a-z _ - .`.
    #[error("metadata key {0:?} may hold only 0-9, a-z, '_', '-' and '.'")]
    Key(String),
    /// The key is one gRPC or HTTP/2 reserves.
    #[error("metadata key {0:?} is reserved: the call sets it itself")]
    Reserved(String),
    /// An ASCII value with characters outside space and printable ASCII.
    #[error(
        "the value of {0:?} may hold only printable ASCII and spaces (use a -bin key for bytes)"
    )]
    Value(String),
    /// A `-bin` value that is not base64.
    #[error("the value of {0:?} is not base64 (a -bin key's value is given in base64)")]
    Base64(String),
    /// A malformed `grpc-timeout`.
    #[error("grpc-timeout {0:?} is not 1 to 8 digits followed by H, M, S, m, u or n")]
    Timeout(String),
    /// A malformed `grpc-previous-rpc-attempts`.
    #[error("grpc-previous-rpc-attempts {0:?} is not a non-negative integer")]
    PreviousAttempts(String),
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// Printable ASCII.
    Ascii(String),
    /// Bytes, under a key ending in `-bin`.
    Binary(Bytes),
}

/// A call's custom metadata, in the order given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Metadata {
    entries: Vec<(String, Value)>,
}

impl Metadata {
    /// No metadata.
    pub fn new() -> Metadata {
        Metadata::default()
    }

    /// Adds `key: value`: for a `-bin` key the value is base64 (padded or not), else printable
    /// ASCII. The key is lower-cased, as HTTP/2 requires.
    pub fn insert(&mut self, key: &str, value: &str) -> Result<(), MetadataError> {
        let key = check_key(key)?;
        let value = if key.ends_with("-bin") {
            Value::Binary(
                decode_binary(value.trim().as_bytes())
                    .map_err(|_| MetadataError::Base64(key.clone()))?,
            )
        } else {
            let v = value.trim();
            if !v.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
                return Err(MetadataError::Value(key));
            }
            Value::Ascii(v.to_string())
        };
        self.entries.push((key, value));
        Ok(())
    }

    /// Adds bytes under a `-bin` key.
    pub fn insert_binary(&mut self, key: &str, value: Bytes) -> Result<(), MetadataError> {
        let key = check_key(key)?;
        if !key.ends_with("-bin") {
            return Err(MetadataError::Key(format!(
                "{key} (binary values need a key ending in -bin)"
            )));
        }
        self.entries.push((key, Value::Binary(value)));
        Ok(())
    }

    /// Adds a `-H 'key: value'` line.
    pub fn insert_line(&mut self, line: &str) -> Result<(), MetadataError> {
        let (k, v) = line
            .split_once(':')
            .filter(|(k, _)| !k.trim().is_empty())
            .ok_or_else(|| MetadataError::Syntax(line.to_string()))?;
        self.insert(k.trim(), v)
    }

    /// The entries.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &Value)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// The first value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Appends every entry to `headers`, binary values in unpadded base64 ("should emit
    /// un-padded values").
    pub fn write_to(&self, headers: &mut HeaderMap) {
        for (k, v) in &self.entries {
            // Keys and values were checked on insertion; both conversions hold.
            let Ok(name) = HeaderName::from_bytes(k.as_bytes()) else {
                continue;
            };
            let value = match v {
                Value::Ascii(s) => HeaderValue::from_str(s),
                Value::Binary(b) => HeaderValue::from_str(&STANDARD_NO_PAD.encode(b)),
            };
            if let Ok(value) = value {
                headers.append(name, value);
            }
        }
    }
}

/// Keys a caller may not set: the call's own headers, HTTP/2's and gRPC's reserved ones.
fn check_key(key: &str) -> Result<String, MetadataError> {
    let key = key.trim().to_ascii_lowercase();
    let valid = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b"_-.".contains(&b));
    if !valid {
        return Err(MetadataError::Key(key));
    }
    let reserved = key.starts_with("grpc-")
        || [
            "content-type",
            "te",
            "connection",
            "host",
            "transfer-encoding",
            "upgrade",
            "keep-alive",
        ]
        .contains(&key.as_str());
    if reserved {
        return Err(MetadataError::Reserved(key));
    }
    Ok(key)
}

/// A binary header's value: base64, padded or not ("Implementations MUST accept padded and
/// un-padded values"); values joined with `,` are decoded one by one and concatenated.
pub fn decode_binary(raw: &[u8]) -> Result<Bytes, base64::DecodeError> {
    let mut out = Vec::new();
    for part in raw.split(|&b| b == b',') {
        let part = part.trim_ascii();
        let trimmed: &[u8] = {
            let mut end = part.len();
            while end > 0 && part[end - 1] == b'=' {
                end -= 1;
            }
            &part[..end]
        };
        let decoded = STANDARD_NO_PAD
            .decode(trimmed)
            .or_else(|_| STANDARD.decode(part))?;
        out.extend_from_slice(&decoded);
    }
    Ok(Bytes::from(out))
}

/// Units of `grpc-timeout`, finest first, with their length.
const UNITS: [(char, u128); 6] = [
    ('n', 1),
    ('u', 1_000),
    ('m', 1_000_000),
    ('S', 1_000_000_000),
    ('M', 60_000_000_000),
    ('H', 3_600_000_000_000),
];

/// The largest TimeoutValue: "positive integer as ASCII string of at most 8 digits".
const MAX_TIMEOUT_VALUE: u128 = 99_999_999;

/// `d` as a `grpc-timeout` value: the finest unit in which it fits in 8 digits, rounded up so
/// the server never sees a deadline shorter than the client's. Beyond 99999999 hours, that.
pub fn encode_timeout(d: Duration) -> String {
    let nanos = d.as_nanos();
    for (unit, len) in UNITS {
        let value = nanos.div_ceil(len);
        if value <= MAX_TIMEOUT_VALUE {
            return format!("{value}{unit}");
        }
    }
    format!("{MAX_TIMEOUT_VALUE}H")
}

/// A `grpc-timeout` value.
pub fn parse_timeout(raw: &[u8]) -> Result<Duration, MetadataError> {
    let bad = || MetadataError::Timeout(String::from_utf8_lossy(raw).into_owned());
    let (&unit, digits) = raw.split_last().ok_or_else(bad)?;
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    let value: u64 = std::str::from_utf8(digits)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(bad)?;
    let (_, len) = UNITS
        .iter()
        .find(|(u, _)| *u as u32 == u32::from(unit))
        .ok_or_else(bad)?;
    let nanos = u128::from(value) * len;
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| bad())?;
    Ok(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}

/// `grpc-retry-pushback-ms` in `fields`, as A6 reads it: absent is `None`; a non-negative
/// signed 32-bit integer is a delay; a negative one, or anything unparseable, or more than one
/// value, is [`Pushback::Stop`] ("If the value for pushback is negative or unparseble, then it
/// will be seen as the server asking the client not to retry at all").
pub fn pushback(fields: &HeaderMap) -> Option<Pushback> {
    static PUSHBACK: HeaderName = HeaderName::from_static(GRPC_RETRY_PUSHBACK_MS);
    let mut values = all(fields, &PUSHBACK);
    let first = values.next()?;
    if values.next().is_some() {
        return Some(Pushback::Stop);
    }
    Some(parse_pushback(first.as_bytes()))
}

/// The largest header block looked up by comparing names (see [`first`]).
const SCANNED: usize = 8;

/// The first value of `name` in `fields`, as [`HeaderMap::get`] gives it. An answer's header
/// blocks hold a handful of fields, and a `HeaderMap` look-up hashes a name that is not one of
/// HTTP's standard headers — every gRPC name — byte by byte, every time: comparing it with the
/// few names there costs a fraction of that, and every answer of a load is read this way.
pub fn first<'a>(fields: &'a HeaderMap, name: &HeaderName) -> Option<&'a HeaderValue> {
    if fields.keys_len() > SCANNED {
        return fields.get(name);
    }
    fields.iter().find_map(|(n, v)| (n == name).then_some(v))
}

/// Every value of `name` in `fields`, in order, looked up as [`first`] does.
pub fn all<'a>(
    fields: &'a HeaderMap,
    name: &'a HeaderName,
) -> impl Iterator<Item = &'a HeaderValue> + 'a {
    let (scan, hashed) = match fields.keys_len() > SCANNED {
        true => (None, Some(fields.get_all(name).iter())),
        false => (Some(fields.iter()), None),
    };
    let scanned = scan
        .into_iter()
        .flatten()
        .filter_map(move |(n, v)| (n == name).then_some(v));
    scanned.chain(hashed.into_iter().flatten())
}

/// One `grpc-retry-pushback-ms` value (see [`pushback`]).
pub fn parse_pushback(raw: &[u8]) -> Pushback {
    let text = std::str::from_utf8(raw).unwrap_or("");
    let digits = text.strip_prefix('-').unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Pushback::Stop;
    }
    match text.parse::<i32>() {
        Ok(ms) if ms >= 0 => Pushback::After(Duration::from_millis(ms as u64)),
        _ => Pushback::Stop,
    }
}

/// `grpc-previous-rpc-attempts` in `fields`, when present.
pub fn previous_attempts(fields: &HeaderMap) -> Result<Option<u32>, MetadataError> {
    let Some(v) = fields.get(&names::PREVIOUS_RPC_ATTEMPTS) else {
        return Ok(None);
    };
    let bad =
        || MetadataError::PreviousAttempts(String::from_utf8_lossy(v.as_bytes()).into_owned());
    let text = v.to_str().map_err(|_| bad())?;
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    text.parse().map(Some).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_is_found_as_a_header_map_finds_it_in_small_blocks_and_large() {
        let status = HeaderName::from_static("grpc-status");
        let pb = HeaderName::from_static(GRPC_RETRY_PUSHBACK_MS);
        for filler in [0, SCANNED + 4] {
            let mut fields = HeaderMap::new();
            for i in 0..filler {
                let name = HeaderName::try_from(format!("x-filler-{i}")).unwrap();
                fields.insert(name, HeaderValue::from(i));
            }
            fields.append(&pb, HeaderValue::from_static("10"));
            fields.insert(&status, HeaderValue::from_static("14"));
            fields.append(&pb, HeaderValue::from_static("-1"));
            assert_eq!(first(&fields, &status), fields.get(&status), "{filler}");
            assert_eq!(first(&fields, &pb), fields.get(&pb), "{filler}");
            let absent = HeaderName::from_static("grpc-message");
            assert_eq!(first(&fields, &absent), None, "{filler}");
            let values: Vec<_> = all(&fields, &pb).collect();
            let expected: Vec<_> = fields.get_all(&pb).iter().collect();
            assert_eq!(values, expected, "{filler}");
            assert_eq!(values.len(), 2);
            assert_eq!(
                pushback(&fields),
                Some(Pushback::Stop),
                "two values: {filler}"
            );
        }
    }

    #[test]
    fn timeouts_use_the_finest_unit_that_fits_eight_digits() {
        let cases = [
            (Duration::from_millis(250), "250000u"),
            (Duration::from_nanos(1500), "1500n"),
            (Duration::from_nanos(99_999_999), "99999999n"),
            (Duration::from_secs(1), "1000000u"),
            (Duration::from_secs(100), "100000m"),
            (Duration::from_secs(100_000), "100000S"),
            (Duration::from_secs(100_000_000), "1666667M"),
            (Duration::from_secs(10_000_000_000), "2777778H"),
            (Duration::ZERO, "0n"),
            (Duration::MAX, "99999999H"),
        ];
        for (d, s) in cases {
            assert_eq!(encode_timeout(d), s, "{d:?}");
            assert!(s.len() <= 9);
        }
    }

    #[test]
    fn timeouts_parse_and_round_trip_up_to_rounding() {
        for (s, d) in [
            ("1H", Duration::from_secs(3600)),
            ("2M", Duration::from_secs(120)),
            ("3S", Duration::from_secs(3)),
            ("40m", Duration::from_millis(40)),
            ("5u", Duration::from_micros(5)),
            ("6n", Duration::from_nanos(6)),
            ("99999999H", Duration::from_secs(99_999_999 * 3600)),
        ] {
            assert_eq!(parse_timeout(s.as_bytes()), Ok(d), "{s}");
        }
        for ms in [1u64, 999, 1000, 86_400_000, 7] {
            let d = Duration::from_millis(ms);
            let back = parse_timeout(encode_timeout(d).as_bytes()).unwrap();
            assert!(
                back >= d && back - d < Duration::from_millis(1),
                "{d:?} → {back:?}"
            );
        }
        for bad in [
            "",
            "S",
            "100",
            "123456789m",
            "1s",
            "-1S",
            "1.5S",
            " 1S",
            "1x",
            "１S",
        ] {
            let e = parse_timeout(bad.as_bytes()).unwrap_err();
            assert!(e.to_string().contains("grpc-timeout"), "{bad}: {e}");
        }
    }

    #[test]
    fn pushback_as_a6_reads_it() {
        let p = |v: &str| parse_pushback(v.as_bytes());
        assert_eq!(p("0"), Pushback::After(Duration::ZERO));
        assert_eq!(p("2500"), Pushback::After(Duration::from_millis(2500)));
        assert_eq!(
            p("2147483647"),
            Pushback::After(Duration::from_millis(2_147_483_647))
        );
        for stop in [
            "-1",
            "-2147483648",
            "2147483648",
            "",
            "abc",
            "1.5",
            "+5",
            " 5",
            "5ms",
            "-",
        ] {
            assert_eq!(p(stop), Pushback::Stop, "{stop:?}");
        }
        let mut h = HeaderMap::new();
        assert_eq!(pushback(&h), None);
        h.insert(GRPC_RETRY_PUSHBACK_MS, HeaderValue::from_static("100"));
        assert_eq!(
            pushback(&h),
            Some(Pushback::After(Duration::from_millis(100)))
        );
        h.append(GRPC_RETRY_PUSHBACK_MS, HeaderValue::from_static("100"));
        assert_eq!(pushback(&h), Some(Pushback::Stop), "more than one value");
    }

    #[test]
    fn previous_attempts_are_counts() {
        let mut h = HeaderMap::new();
        assert_eq!(previous_attempts(&h), Ok(None));
        h.insert(GRPC_PREVIOUS_RPC_ATTEMPTS, HeaderValue::from_static("3"));
        assert_eq!(previous_attempts(&h), Ok(Some(3)));
        for bad in ["", "-1", "x", "99999999999"] {
            h.insert(
                GRPC_PREVIOUS_RPC_ATTEMPTS,
                HeaderValue::from_str(bad).unwrap(),
            );
            assert!(previous_attempts(&h).is_err(), "{bad}");
        }
    }

    #[test]
    fn metadata_is_checked_and_binary_values_go_as_base64() {
        let mut m = Metadata::new();
        m.insert_line("Idempotency-Key: abc-123").unwrap();
        m.insert_line("trace-bin: AAEC/w==").unwrap();
        m.insert_line("raw-bin: AAEC/w").unwrap();
        m.insert_binary("blob-bin", Bytes::from_static(b"\x00\xff"))
            .unwrap();
        assert_eq!(
            m.get("idempotency-key"),
            Some(&Value::Ascii("abc-123".into()))
        );
        assert_eq!(
            m.get("trace-bin"),
            Some(&Value::Binary(Bytes::from_static(b"\x00\x01\x02\xff")))
        );
        assert_eq!(m.get("raw-bin"), m.get("trace-bin"));
        let mut h = HeaderMap::new();
        m.write_to(&mut h);
        assert_eq!(h["trace-bin"], "AAEC/w");
        assert_eq!(h["blob-bin"], "AP8");
        assert_eq!(h["idempotency-key"], "abc-123");

        let errors = [
            ("no colon", "Syntax"),
            (": v", "Syntax"),
            ("Bad Key: v", "Key"),
            ("k@y: v", "Key"),
            ("grpc-timeout: 1S", "Reserved"),
            ("content-type: x", "Reserved"),
            ("te: trailers", "Reserved"),
            ("x-bin: !!!", "Base64"),
            ("x: caf\u{e9}", "Value"),
        ];
        for (line, kind) in errors {
            let e = Metadata::new().insert_line(line).unwrap_err();
            assert!(format!("{e:?}").starts_with(kind), "{line}: {e:?}");
        }
        assert!(Metadata::new()
            .insert_binary("plain", Bytes::new())
            .is_err());
    }

    #[test]
    fn joined_binary_values_are_split_before_decoding() {
        assert_eq!(&decode_binary(b"AAE=,Ag").unwrap()[..], b"\x00\x01\x02");
        assert!(decode_binary(b"@@").is_err());
    }
}
