//! `fault:` — what a rule does: a status, a delay, a hang, a drop, a reset, a malformed answer,
//! an HTTP/2 GOAWAY, a gRPC status, a forward. Each fault's shorthand (`fault: drop`, `status:
//! 503`, `delay: 200ms`, `grpc: UNAVAILABLE`) is read by a hand-written `Deserialize`, and its
//! `JsonSchema` is written beside it so the schema takes what the reader takes.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use schemars::{json_schema, JsonSchema, Schema, SchemaGenerator};
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use yaml_config::{parse_duration, Dur};

/// What a rule does: the fault, written `fault: drop` or `fault: { status: { code: 503 } }`.
#[derive(Debug, Clone, PartialEq)]
pub enum FaultConfig {
    /// Answer with this status, headers and body; the request is not processed.
    Status(StatusFault),
    /// Wait before or after processing (or forwarding) the request, then give its response.
    Delay(DelayFault),
    /// Send nothing and hold the connection until the client leaves or the cap passes.
    Hang(HangFault),
    /// Process the request fully (an order really is created), then close with no response.
    Drop,
    /// Abort the connection with a TCP RST.
    Reset(ResetFault),
    /// Send a broken response, then close.
    Malformed(MalformedFault),
    /// End the connection: with GOAWAY over HTTP/2, by closing it over HTTP/1.1; the request is
    /// not processed.
    GoAway,
    /// Forward the request to the upstream and relay its answer (proxy mode): what a request no
    /// rule matches gets anyway, written as a rule to exempt paths from the rules after it.
    Forward,
    /// gRPC: answer Trailers-Only with this status (and `grpc-retry-pushback-ms`); the call is
    /// not processed, and not committed.
    Grpc(GrpcFault),
    /// gRPC: send Response-Headers and part of a response message, then a failing status: the
    /// call was committed (gRFC A6: its client may not retry it).
    GrpcAfterHeaders(GrpcAfterHeadersFault),
}

/// A gRPC status to answer a call with, Trailers-Only.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrpcFault {
    /// The status code, by name (`UNAVAILABLE`) or number (`14`).
    pub code: history::GrpcCode,
    /// `grpc-message`; a short note that the status was injected when absent.
    #[serde(default)]
    pub message: Option<String>,
    /// `grpc-retry-pushback-ms`: the client must wait this long before its next attempt; a
    /// negative value asks it not to retry at all (gRFC A6). Not sent when absent.
    #[serde(default, deserialize_with = "pushback")]
    pub pushback_ms: Option<i64>,
}

/// A committed call's failure: Response-Headers, part of a message, then this status.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GrpcAfterHeadersFault {
    /// The status code the call ends with, by name or number.
    pub code: history::GrpcCode,
    /// `grpc-message`; a short note that the status was injected when absent.
    #[serde(default)]
    pub message: Option<String>,
    /// `grpc-retry-pushback-ms` in the trailers (which a client must ignore: the call is
    /// committed).
    #[serde(default, deserialize_with = "pushback")]
    pub pushback_ms: Option<i64>,
    /// Process the call first (an order really is created), then fail it after its headers.
    #[serde(default)]
    pub process: bool,
}

/// `pushback_ms`: a signed 32-bit number of milliseconds, as gRFC A6 reads the header.
fn pushback<'de, D: Deserializer<'de>>(d: D) -> Result<Option<i64>, D::Error> {
    Ok(Some(i64::deserialize(d)?))
}

/// `grpc: UNAVAILABLE` or `grpc: { code: UNAVAILABLE, message, pushback_ms }`.
struct GrpcShorthand<T>(T);

impl<'de, T: Deserialize<'de> + From<history::GrpcCode>> Deserialize<'de> for GrpcShorthand<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de> + From<history::GrpcCode>> Visitor<'de> for V<T> {
            type Value = GrpcShorthand<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a gRPC status code (UNAVAILABLE, or 14), or a map with `code` and optional `message`, `pushback_ms`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                let code = v.parse::<history::GrpcCode>().map_err(E::custom)?;
                Ok(GrpcShorthand(T::from(code)))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                let code = history::GrpcCode::from_number(v)
                    .ok_or_else(|| E::custom(history::UnknownGrpcCode(v.to_string())))?;
                Ok(GrpcShorthand(T::from(code)))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                match u64::try_from(v) {
                    Ok(n) => self.visit_u64(n),
                    Err(_) => Err(E::custom(history::UnknownGrpcCode(v.to_string()))),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                T::deserialize(de::value::MapAccessDeserializer::new(map)).map(GrpcShorthand)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

impl From<history::GrpcCode> for GrpcFault {
    fn from(code: history::GrpcCode) -> GrpcFault {
        GrpcFault {
            code,
            message: None,
            pushback_ms: None,
        }
    }
}

impl From<history::GrpcCode> for GrpcAfterHeadersFault {
    fn from(code: history::GrpcCode) -> GrpcAfterHeadersFault {
        GrpcAfterHeadersFault {
            code,
            message: None,
            pushback_ms: None,
            process: false,
        }
    }
}

impl FaultConfig {
    /// The fault's kind as the journal names it.
    pub fn kind(&self) -> &'static str {
        match self {
            FaultConfig::Status(_) => "status",
            FaultConfig::Delay(_) => "delay",
            FaultConfig::Hang(_) => "hang",
            FaultConfig::Drop => "drop",
            FaultConfig::GoAway => "goaway",
            FaultConfig::Reset(_) => "reset",
            FaultConfig::Malformed(_) => "malformed",
            FaultConfig::Forward => "forward",
            FaultConfig::Grpc(_) => "grpc",
            FaultConfig::GrpcAfterHeaders(_) => "grpc_after_headers",
        }
    }
}

/// A canned response.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StatusFault {
    /// Status code, 100–599.
    pub code: StatusCode,
    /// Extra response headers.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Response body; a short problem description when absent.
    #[serde(default)]
    pub body: Option<String>,
    /// `Retry-After` in seconds.
    #[serde(default)]
    pub retry_after: Option<u64>,
    /// `Retry-After` as an HTTP-date this long after the response is sent.
    #[serde(default)]
    pub retry_after_date: Option<Dur>,
}

/// How long a `delay` waits.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DelaySpec {
    /// Always the same.
    Fixed(Duration),
    /// Uniform between the two bounds.
    Uniform(Duration, Duration),
    /// Log-normal with this median and shape σ (the log's standard deviation).
    Lognormal {
        /// The median delay.
        median: Duration,
        /// The log's standard deviation.
        sigma: f64,
    },
}

/// A `delay`: how long, and on which side of the request's processing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DelayFault {
    /// How long.
    pub spec: DelaySpec,
    /// Before the request is processed (or forwarded), or after, before its answer is sent.
    pub when: DelayWhen,
}

/// Which side of the processing a `delay` waits on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DelayWhen {
    /// The request waits before it is processed: a client that gives up first changed nothing.
    #[default]
    Before,
    /// The request is processed (the upstream has answered), then its answer waits: a client
    /// that gives up first does not know its order was made.
    After,
}

/// `delay:` as a map: one of `fixed`, `uniform`, `lognormal`, and `when`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(extend("oneOf" = [
    { "required": ["fixed"] },
    { "required": ["uniform"] },
    { "required": ["lognormal"] }
]))]
struct DelayMap {
    /// Always this long.
    #[serde(default)]
    fixed: Option<Dur>,
    /// Uniform between the two bounds: `[50ms, 150ms]`.
    #[serde(default)]
    uniform: Option<[Dur; 2]>,
    /// Log-normal: `{ median: 100ms, sigma: 0.5 }`.
    #[serde(default)]
    lognormal: Option<Lognormal>,
    /// `before` (default): wait, then process; `after`: process (or forward), then hold the
    /// answer.
    #[serde(default)]
    when: DelayWhen,
}

impl JsonSchema for DelayFault {
    fn schema_name() -> Cow<'static, str> {
        "DelayFault".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "Wait, then give the normal response: a duration (`200ms`), or a map with one of `fixed`, `uniform: [50ms, 150ms]`, `lognormal: { median: 100ms, sigma: 0.5 }` and optional `when: before | after`.",
            "anyOf": [
                generator.subschema_for::<Dur>(),
                generator.subschema_for::<DelayMap>()
            ]
        })
    }
}

impl<'de> Deserialize<'de> for DelayFault {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = DelayFault;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration (\"200ms\"), or a map with one of `fixed`, `uniform: [50ms, 150ms]`, `lognormal: { median: 100ms, sigma: 0.5 }` and optional `when: before | after`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DelayFault, E> {
                Ok(DelayFault {
                    spec: DelaySpec::deserialize(de::value::StrDeserializer::<E>::new(v))?,
                    when: DelayWhen::Before,
                })
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<DelayFault, E> {
                Ok(DelayFault {
                    spec: DelaySpec::deserialize(de::value::U64Deserializer::<E>::new(v))?,
                    when: DelayWhen::Before,
                })
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<DelayFault, E> {
                Ok(DelayFault {
                    spec: DelaySpec::deserialize(de::value::F64Deserializer::<E>::new(v))?,
                    when: DelayWhen::Before,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<DelayFault, A::Error> {
                let f = DelayMap::deserialize(de::value::MapAccessDeserializer::new(map))?;
                let spec = match (f.fixed, f.uniform, f.lognormal) {
                    (Some(d), None, None) => DelaySpec::Fixed(d.0),
                    (None, Some([a, b]), None) => DelaySpec::Uniform(a.0, b.0),
                    (None, None, Some(l)) => l.spec(),
                    _ => {
                        return Err(de::Error::custom(
                            "a delay has one of `fixed`, `uniform` or `lognormal`",
                        ))
                    }
                };
                Ok(DelayFault { spec, when: f.when })
            }
        }
        d.deserialize_any(V)
    }
}

/// `lognormal: { median, sigma }`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct Lognormal {
    /// The median delay.
    median: Dur,
    /// The log's standard deviation, at least 0.
    #[schemars(range(min = 0))]
    sigma: f64,
}

impl Lognormal {
    fn spec(&self) -> DelaySpec {
        DelaySpec::Lognormal {
            median: self.median.0,
            sigma: self.sigma,
        }
    }
}

/// Options of a `hang`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HangFault {
    /// Close the connection after this long; the server-wide `hang_cap` when absent.
    #[serde(default)]
    pub cap: Option<Dur>,
    /// Process the request before hanging (the client cannot know it was).
    #[serde(default)]
    pub process: bool,
}

/// Options of a `reset`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResetFault {
    /// Process the request before resetting.
    #[serde(default)]
    pub process: bool,
    /// HTTP/2: the RST_STREAM's error code (`internal_error` when absent). gRPC clients read
    /// it: `refused_stream` is UNAVAILABLE and safe to retry transparently (the server says it
    /// did not process the call), `cancel` CANCELLED, `enhance_your_calm` RESOURCE_EXHAUSTED,
    /// the others INTERNAL. Over HTTP/1.1 a reset is a TCP RST whatever this says.
    #[serde(default)]
    pub code: Option<H2ErrorCode>,
}

/// An HTTP/2 error code (RFC 9113 §7), by its name in lower case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum H2ErrorCode {
    /// NO_ERROR (0x0).
    NoError,
    /// PROTOCOL_ERROR (0x1).
    ProtocolError,
    /// INTERNAL_ERROR (0x2).
    InternalError,
    /// FLOW_CONTROL_ERROR (0x3).
    FlowControlError,
    /// SETTINGS_TIMEOUT (0x4).
    SettingsTimeout,
    /// STREAM_CLOSED (0x5).
    StreamClosed,
    /// FRAME_SIZE_ERROR (0x6).
    FrameSizeError,
    /// REFUSED_STREAM (0x7).
    RefusedStream,
    /// CANCEL (0x8).
    Cancel,
    /// COMPRESSION_ERROR (0x9).
    CompressionError,
    /// CONNECT_ERROR (0xa).
    ConnectError,
    /// ENHANCE_YOUR_CALM (0xb).
    EnhanceYourCalm,
    /// INADEQUATE_SECURITY (0xc).
    InadequateSecurity,
    /// HTTP_1_1_REQUIRED (0xd).
    Http11Required,
}

impl H2ErrorCode {
    /// The code's number on the wire.
    pub fn number(self) -> u32 {
        self as u32
    }
}

/// The kinds of broken response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum MalformedKind {
    /// A status line that is not HTTP.
    #[default]
    BadStatusLine,
    /// A valid status line and headers, then the connection closes mid-body.
    TruncatedBody,
    /// A `Content-Length` that is not a number.
    BadHeader,
    /// The connection closes in the middle of the headers.
    PartialHeaders,
}

impl MalformedKind {
    /// The bytes sent, and the status they claim (if a status line was sent).
    pub fn bytes(self) -> (&'static [u8], Option<u16>) {
        match self {
            MalformedKind::BadStatusLine => (b"HTTP/1.1 TWO-HUNDRED NOT OK\r\n\r\n", None),
            MalformedKind::TruncatedBody => (
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 64\r\n\r\n{\"id\":\"ord_",
                Some(200),
            ),
            MalformedKind::BadHeader => (
                b"HTTP/1.1 200 OK\r\ncontent-length: twelve\r\n\r\nhello world\n",
                None,
            ),
            MalformedKind::PartialHeaders => (b"HTTP/1.1 200 OK\r\ncontent-ty", None),
        }
    }
}

/// Options of a `malformed`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MalformedFault {
    /// Which breakage.
    #[serde(default)]
    pub kind: MalformedKind,
    /// Process the request before answering.
    #[serde(default)]
    pub process: bool,
}

/// A status code in 100..=599.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusCode(pub u16);

impl JsonSchema for StatusCode {
    fn schema_name() -> Cow<'static, str> {
        "StatusCode".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        json_schema!({
            "description": "An HTTP status code, 100 to 599.",
            "type": "integer",
            "minimum": 100,
            "maximum": 599
        })
    }
}

/// A status code as written, held as the number it is: `Config::validate` holds it to its
/// range with every other bound. One that is no 16-bit number has no value to hold, so it is
/// refused here, with the same words.
fn code(v: i128) -> Result<u16, String> {
    u16::try_from(v).or_else(|_| bounds::status_code(v))
}

impl<'de> Deserialize<'de> for StatusCode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        code(i128::from(u64::deserialize(d)?))
            .map(StatusCode)
            .map_err(de::Error::custom)
    }
}

impl JsonSchema for FaultConfig {
    fn schema_name() -> Cow<'static, str> {
        "FaultConfig".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let status = json_schema!({
            "description": "Answer with this status (and headers, body, Retry-After); the request is not processed. `503`, or `{ code: 503, retry_after: 1, headers: {…}, body: \"…\" }`.",
            "anyOf": [
                generator.subschema_for::<StatusCode>(),
                generator.subschema_for::<StatusFault>()
            ]
        });
        let mut hang = generator.subschema_for::<Option<HangFault>>();
        hang.insert(
            "description".into(),
            "Send nothing and hold the connection until the client leaves or the cap passes."
                .into(),
        );
        let mut reset = generator.subschema_for::<Option<ResetFault>>();
        reset.insert(
            "description".into(),
            "Abort the connection with a TCP RST.".into(),
        );
        let mut malformed = generator.subschema_for::<Option<MalformedFault>>();
        malformed.insert(
            "description".into(),
            "Send a broken response, then close.".into(),
        );
        let grpc = json_schema!({
            "description": "Answer a gRPC call with this status, Trailers-Only (`grpc-retry-pushback-ms` with `pushback_ms`); the call is not processed. `UNAVAILABLE`, `14`, or `{ code: UNAVAILABLE, message: \"…\", pushback_ms: 200 }`.",
            "anyOf": [
                generator.subschema_for::<history::GrpcCode>(),
                generator.subschema_for::<GrpcFault>()
            ]
        });
        let grpc_after_headers = json_schema!({
            "description": "Fail a gRPC call after its Response-Headers and part of a message (a committed call). `INTERNAL`, or `{ code: INTERNAL, message, pushback_ms, process: true }`.",
            "anyOf": [
                generator.subschema_for::<history::GrpcCode>(),
                generator.subschema_for::<GrpcAfterHeadersFault>()
            ]
        });
        json_schema!({
            "description": "What happens to a matching request: `drop`, `reset`, `hang`, `malformed`, `goaway`, `forward`, or a map with one fault and its options.",
            "anyOf": [
                {
                    "type": "string",
                    "enum": ["drop", "reset", "hang", "malformed", "goaway", "forward"]
                },
                {
                    "type": "object",
                    "minProperties": 1,
                    "maxProperties": 1,
                    "additionalProperties": false,
                    "properties": {
                        "status": status,
                        "delay": {
                            "description": "Wait, then give the normal response (or, with `when: after`, process first and hold the answer).",
                            "allOf": [generator.subschema_for::<DelayFault>()]
                        },
                        "hang": hang,
                        "drop": { "description": "Process the request fully (an order really is created), then close with no response." },
                        "reset": reset,
                        "malformed": malformed,
                        "goaway": { "description": "End the connection: GOAWAY over HTTP/2, a close over HTTP/1.1; the request is not processed." },
                        "forward": { "description": "Forward the request to the upstream and relay its answer (proxy mode)." },
                        "grpc": grpc,
                        "grpc_after_headers": grpc_after_headers
                    }
                }
            ]
        })
    }
}

impl<'de> Deserialize<'de> for FaultConfig {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        const KINDS: &[&str] = &[
            "status",
            "delay",
            "hang",
            "drop",
            "reset",
            "malformed",
            "goaway",
            "forward",
            "grpc",
            "grpc_after_headers",
        ];
        impl<'de> Visitor<'de> for V {
            type Value = FaultConfig;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a fault: drop, reset, hang, malformed, goaway, forward, or a map with one of status, delay, hang, reset, malformed, grpc, grpc_after_headers",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<FaultConfig, E> {
                match v {
                    "drop" => Ok(FaultConfig::Drop),
                    "goaway" => Ok(FaultConfig::GoAway),
                    "forward" => Ok(FaultConfig::Forward),
                    "reset" => Ok(FaultConfig::Reset(ResetFault::default())),
                    "hang" => Ok(FaultConfig::Hang(HangFault::default())),
                    "malformed" => Ok(FaultConfig::Malformed(MalformedFault::default())),
                    "status" | "delay" | "grpc" | "grpc_after_headers" => Err(E::custom(format!(
                        "fault `{v}` needs options, e.g. `{v}: {}`",
                        match v {
                            "status" => "503",
                            "delay" => "200ms",
                            _ => "UNAVAILABLE",
                        }
                    ))),
                    other => Err(E::unknown_variant(other, KINDS)),
                }
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<FaultConfig, A::Error> {
                let Some(kind) = map.next_key::<String>()? else {
                    return Err(de::Error::custom(
                        "empty fault: name one of status, delay, hang, drop, reset, malformed, goaway, forward, grpc, grpc_after_headers",
                    ));
                };
                let fault = match kind.as_str() {
                    "status" => FaultConfig::Status(map.next_value::<StatusShorthand>()?.0),
                    "delay" => FaultConfig::Delay(map.next_value::<DelayFault>()?),
                    "hang" => FaultConfig::Hang(
                        map.next_value::<Option<HangFault>>()?.unwrap_or_default(),
                    ),
                    "drop" => {
                        map.next_value::<de::IgnoredAny>()?;
                        FaultConfig::Drop
                    }
                    "goaway" => {
                        map.next_value::<de::IgnoredAny>()?;
                        FaultConfig::GoAway
                    }
                    "forward" => {
                        map.next_value::<de::IgnoredAny>()?;
                        FaultConfig::Forward
                    }
                    "reset" => FaultConfig::Reset(
                        map.next_value::<Option<ResetFault>>()?.unwrap_or_default(),
                    ),
                    "malformed" => FaultConfig::Malformed(
                        map.next_value::<Option<MalformedFault>>()?
                            .unwrap_or_default(),
                    ),
                    "grpc" => FaultConfig::Grpc(map.next_value::<GrpcShorthand<GrpcFault>>()?.0),
                    "grpc_after_headers" => FaultConfig::GrpcAfterHeaders(
                        map.next_value::<GrpcShorthand<GrpcAfterHeadersFault>>()?.0,
                    ),
                    other => return Err(de::Error::unknown_variant(other, KINDS)),
                };
                if let Some(extra) = map.next_key::<String>()? {
                    return Err(de::Error::custom(format!(
                        "a rule has one fault; found `{extra}` beside `{kind}`"
                    )));
                }
                Ok(fault)
            }
        }
        d.deserialize_any(V)
    }
}

/// `status: 503` or `status: { code: 503, ... }`.
struct StatusShorthand(StatusFault);

/// `status: 503`: the code, and nothing else.
fn code_only<E: de::Error>(v: i128) -> Result<StatusShorthand, E> {
    Ok(StatusShorthand(StatusFault {
        code: StatusCode(code(v).map_err(E::custom)?),
        headers: BTreeMap::new(),
        body: None,
        retry_after: None,
        retry_after_date: None,
    }))
}

impl<'de> Deserialize<'de> for StatusShorthand {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = StatusShorthand;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a status code, or a map with `code` and optional `headers`, `body`, `retry_after`, `retry_after_date`")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                code_only(i128::from(v))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                code_only(i128::from(v))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                StatusFault::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(StatusShorthand)
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for DelaySpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(rename_all = "snake_case", deny_unknown_fields)]
        enum Full {
            Fixed(Dur),
            Uniform([Dur; 2]),
            Lognormal(Lognormal),
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = DelaySpec;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a duration (\"200ms\"), `{ uniform: [50ms, 150ms] }` or `{ lognormal: { median: 100ms, sigma: 0.5 } }`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<DelaySpec, E> {
                parse_duration(v).map(DelaySpec::Fixed).map_err(E::custom)
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<DelaySpec, E> {
                Dur::deserialize(de::value::U64Deserializer::<E>::new(v))
                    .map(|d| DelaySpec::Fixed(d.0))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<DelaySpec, E> {
                Dur::deserialize(de::value::F64Deserializer::<E>::new(v))
                    .map(|d| DelaySpec::Fixed(d.0))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<DelaySpec, A::Error> {
                match Full::deserialize(de::value::MapAccessDeserializer::new(map))? {
                    Full::Fixed(d) => Ok(DelaySpec::Fixed(d.0)),
                    Full::Uniform([a, b]) => Ok(DelaySpec::Uniform(a.0, b.0)),
                    Full::Lognormal(l) => Ok(l.spec()),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// The bounds of a fault's values, each checked in one place: by `rule_bounds` on every rule a
/// file, the control API or the builder gives (and a status code's while it is read).
pub(super) mod bounds {
    use std::time::Duration;

    /// A status code in 100..=599 (`v` as written: a negative one is out of range too).
    pub(crate) fn status_code(v: i128) -> Result<u16, String> {
        u16::try_from(v)
            .ok()
            .filter(|c| (100..=599).contains(c))
            .ok_or_else(|| format!("status code {v} is out of range (expected 100 to 599)"))
    }

    /// A pushback is a signed 32-bit number of milliseconds (gRFC A6).
    pub(crate) fn pushback_ms(v: i64) -> Result<(), String> {
        if i32::try_from(v).is_ok() {
            Ok(())
        } else {
            Err(format!(
                "pushback_ms {v} is out of range: gRFC A6 reads a signed 32-bit number of milliseconds ({} to {})",
                i32::MIN,
                i32::MAX
            ))
        }
    }

    /// A uniform delay's bounds are in order.
    pub(crate) fn uniform_delay(lo: Duration, hi: Duration) -> Result<(), &'static str> {
        if lo > hi {
            Err("uniform delay: the first bound must not exceed the second")
        } else {
            Ok(())
        }
    }

    /// A lognormal delay's sigma is a number ≥ 0.
    pub(crate) fn lognormal_sigma(sigma: f64) -> Result<(), &'static str> {
        if sigma.is_finite() && sigma >= 0.0 {
            Ok(())
        } else {
            Err("lognormal delay: sigma must be a number ≥ 0")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::*;

    #[test]
    fn parses_every_fault_form() {
        let cfg = Config::from_yaml(
            r#"
seed: 7
rules:
  - id: a
    match: { method: POST, path: /orders, attempts: "1-2" }
    fault: { status: { code: 503, retry_after: 1 } }
  - fault: { status: 400 }
  - fault: drop
  - fault: reset
  - fault: hang
  - fault: { hang: { cap: 2s } }
  - fault: { malformed: { kind: truncated-body } }
  - fault: { delay: 200ms }
  - fault: { delay: { uniform: [50ms, 150ms] } }
  - fault: { delay: { lognormal: { median: 100ms, sigma: 0.5 } } }
"#,
            "t.yaml",
        )
        .unwrap();
        assert_eq!(cfg.rules.len(), 10);
        assert_eq!(cfg.rules[1].fault.kind(), "status");
        assert_eq!(
            cfg.rules[5].fault,
            FaultConfig::Hang(HangFault {
                cap: Some(Dur(Duration::from_secs(2))),
                process: false
            })
        );
        assert_eq!(
            cfg.rules[8].fault,
            FaultConfig::Delay(DelayFault {
                spec: DelaySpec::Uniform(Duration::from_millis(50), Duration::from_millis(150)),
                when: DelayWhen::Before
            })
        );
        assert_eq!(rule_id(&cfg.rules[1], 1), "rule-2");
    }
}
