//! gRPC on the server's side: which requests are gRPC calls, what a call's head says (its method,
//! `grpc-timeout`, `grpc-previous-rpc-attempts`, `grpc-encoding`), its messages decoded and
//! checked against the method's request type, and the services that answer it — the built-in
//! `orders.v1.Orders` on the orders store (served by `crate::orders::grpc`, so that the config,
//! which builds these services to check them, stays below the store), and any service of the
//! config's `.proto` files with a canned answer per method.
//!
//! Why here and not in the `grpc` crate: that crate is the client's side and knows no server.
//! What both sides share — the framing, the metadata, the status — is used from it.
//!
//! Why a call is decoded before the schedule decides: a create's idempotency key may be its
//! `request_id` field rather than metadata, and the journal, the key's attempt count and the
//! schedule's `attempts` matcher all need the key. Decoding is bounded (`grpc.max_message`, and
//! a compressed message may not inflate past it) and never panics, whatever the bytes
//! ([`Services::decode`] is a fuzzing target). What it refuses is answered as gRPC servers
//! answer it: a malformed `grpc-timeout` or an undecodable message INTERNAL, an unknown method
//! or encoding UNIMPLEMENTED, a message over the limit RESOURCE_EXHAUSTED — unless a fault
//! answers the call first.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use grpc::frame::{self, Encoding, FrameError};
use grpc::{Schema, Status};
use history::GrpcCode;
use http::header::CONTENT_TYPE;
use http::HeaderMap;
use prost_reflect::{DynamicMessage, MessageDescriptor};

/// Whether a request is a gRPC call: its `content-type` is `application/grpc` or
/// `application/grpc+…` (`+proto`, `+json`).
pub fn is_grpc(headers: &HeaderMap) -> bool {
    headers.get(CONTENT_TYPE).is_some_and(|v| {
        let v = v.as_bytes();
        v.len() >= 16
            && v[..16].eq_ignore_ascii_case(b"application/grpc")
            && matches!(v.get(16), None | Some(b'+') | Some(b';'))
    })
}

/// What a call's head says about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallHead {
    /// `pkg.Service/Method`: the `:path` without its leading `/`.
    pub method: String,
    /// `grpc-previous-rpc-attempts`, when the call carried a valid one.
    pub previous_attempts: Option<u32>,
    /// `grpc-timeout`: what was left of the call's deadline when it was sent.
    pub timeout: Option<Duration>,
    /// `grpc-encoding`: how the request's messages are compressed.
    pub encoding: Option<Encoding>,
    /// What the head breaks, as the status a server answers it with: a malformed
    /// `grpc-timeout` (INTERNAL), a `grpc-encoding` this server does not speak (UNIMPLEMENTED).
    pub refused: Option<Status>,
}

impl CallHead {
    /// Reads the head of a call to `path`.
    pub fn read(path: &str, headers: &HeaderMap) -> CallHead {
        let mut head = CallHead {
            method: path.strip_prefix('/').unwrap_or(path).to_string(),
            previous_attempts: grpc::metadata::previous_attempts(headers).ok().flatten(),
            timeout: None,
            encoding: None,
            refused: None,
        };
        if let Some(t) = headers.get(&grpc::metadata::names::TIMEOUT) {
            match grpc::metadata::parse_timeout(t.as_bytes()) {
                Ok(d) => head.timeout = Some(d),
                Err(e) => head.refused = Some(Status::new(GrpcCode::Internal, e.to_string())),
            }
        }
        if let Some(e) = headers.get(&grpc::metadata::names::ENCODING) {
            match Encoding::parse(std::str::from_utf8(e.as_bytes()).unwrap_or("?")) {
                Ok(Encoding::Identity) => {}
                Ok(enc) => head.encoding = Some(enc),
                Err(e) => {
                    head.refused.get_or_insert(Status::new(
                        GrpcCode::Unimplemented,
                        format!("{e}; this server accepts identity, gzip"),
                    ));
                }
            }
        }
        head
    }

    /// The call's deadline as milliseconds, rounded up (the journal's `grpc_timeout_ms`).
    pub fn timeout_ms(&self) -> Option<u64> {
        self.timeout
            .map(|d| u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX))
    }

    /// Which attempt of its call this is: 1 + `grpc-previous-rpc-attempts`.
    pub fn attempt(&self) -> u32 {
        self.previous_attempts.unwrap_or(0).saturating_add(1)
    }
}

/// The services could not be built from the config.
#[derive(Debug, thiserror::Error)]
pub enum ServicesError {
    /// The `.proto` files do not compile.
    #[error(transparent)]
    Schema(#[from] grpc::SchemaError),
    /// A canned answer names no method of the `.proto` files (or of the built-in service), or
    /// does not fit its type.
    #[error("{message}")]
    Response {
        /// The method, as written under `responses`.
        method: String,
        /// What is wrong.
        message: String,
    },
    /// `responses` names a method of no built-in service when no `.proto` file is given.
    #[error("`responses` names {0:?}, which is not a built-in method, and no .proto file is given (`grpc.protos`)")]
    NoProtos(String),
}

/// Who answers a call.
#[derive(Debug, Clone)]
pub enum Target {
    /// `orders.v1.Orders/CreateOrder`, on the store.
    CreateOrder,
    /// `orders.v1.Orders/GetOrder`, on the store.
    GetOrder,
    /// A method of the config's `.proto` files: this encoded answer.
    Canned(Bytes),
}

/// A call decoded: who answers it and its request messages.
#[derive(Debug, Clone)]
pub struct Decoded {
    /// Who answers it.
    pub target: Target,
    /// The request messages, decoded as the method's request type (one for a unary call).
    pub requests: Vec<DynamicMessage>,
    /// The response type.
    pub output: MessageDescriptor,
}

impl Decoded {
    /// The create's `request_id`, when it is a create that carries one.
    pub fn request_id(&self) -> Option<String> {
        if !matches!(self.target, Target::CreateOrder) {
            return None;
        }
        let v = self.requests.first()?.get_field_by_name("request_id")?;
        v.as_str().filter(|s| !s.is_empty()).map(str::to_string)
    }
}

/// The services this server answers gRPC calls with, built once at start.
#[derive(Debug)]
pub struct Services {
    orders: Schema,
    user: Option<Schema>,
    canned: HashMap<String, Bytes>,
    /// Every method served, by `pkg.Service/Method`, with who answers it: routed once at start,
    /// not per call.
    routes: HashMap<String, (grpc::Method, Target)>,
    max_message: usize,
}

impl Services {
    /// The built-in orders service and the services of `protos` (compiled with
    /// `import_paths`) with their canned answers (`responses`, by method), no message above
    /// `max_message` bytes: what the config's `grpc` section says.
    pub fn new(
        protos: &[PathBuf],
        import_paths: &[PathBuf],
        responses: &BTreeMap<String, serde_json::Value>,
        max_message: u64,
    ) -> Result<Services, ServicesError> {
        let orders = grpc::orders::schema()?;
        let user = if protos.is_empty() {
            None
        } else {
            Some(Schema::compile(protos, import_paths)?)
        };
        let max_message = usize::try_from(max_message).unwrap_or(usize::MAX);
        let mut canned = HashMap::new();
        for (name, json) in responses {
            let bad = |message: String| ServicesError::Response {
                method: name.clone(),
                message,
            };
            // A built-in method's canned answer replaces the store's.
            let method = match (orders.method(name), &user) {
                (Ok(m), _) => m,
                (Err(_), Some(schema)) => schema.method(name).map_err(|e| bad(e.to_string()))?,
                (Err(e), None) => {
                    return Err(match e {
                        grpc::SchemaError::NoService { .. } => {
                            ServicesError::NoProtos(name.clone())
                        }
                        e => bad(e.to_string()),
                    })
                }
            };
            let encoded = grpc::schema::json_to_protobuf(&method.output(), &json.to_string())
                .map_err(|e| bad(e.to_string()))?;
            if encoded.len() > max_message {
                return Err(bad(format!(
                    "the answer is {} bytes, over grpc.max_message ({max_message} bytes)",
                    encoded.len()
                )));
            }
            canned.insert(method.path()[1..].to_string(), encoded);
        }
        let mut services = Services {
            orders,
            user,
            canned,
            routes: HashMap::new(),
            max_message,
        };
        let methods: Vec<grpc::Method> = services
            .orders
            .methods()
            .into_iter()
            .chain(services.user.iter().flat_map(Schema::methods))
            .collect();
        for m in methods {
            let name = m.path()[1..].to_string();
            if !services.routes.contains_key(&name) {
                if let Ok(route) = services.route_uncached(&name) {
                    services.routes.insert(name, route);
                }
            }
        }
        Ok(services)
    }

    /// The largest message a call may carry.
    pub fn max_message(&self) -> usize {
        self.max_message
    }

    /// Decodes a call: routes its method, reads its messages from `body` (within
    /// `grpc.max_message` each) and decodes them as the method's request type. The error is
    /// the status a gRPC server answers with.
    pub fn decode(&self, head: &CallHead, body: &[u8]) -> Result<Decoded, Status> {
        if let Some(refused) = &head.refused {
            return Err(refused.clone());
        }
        let (method, target) = self.route(&head.method)?;
        let messages = frame::decode_all(body, self.max_message, head.encoding).map_err(|e| {
            let code = match e {
                FrameError::TooLarge { .. } => GrpcCode::ResourceExhausted,
                _ => GrpcCode::Internal,
            };
            Status::new(code, format!("the request's messages: {e}"))
        })?;
        let input = method.input();
        if !method.descriptor().is_client_streaming() && messages.len() != 1 {
            return Err(Status::new(
                GrpcCode::Internal,
                format!(
                    "{} takes one request message; the call sent {}",
                    head.method,
                    messages.len()
                ),
            ));
        }
        let mut requests = Vec::with_capacity(messages.len());
        for m in messages {
            let decoded = DynamicMessage::decode(input.clone(), m).map_err(|e| {
                Status::new(
                    GrpcCode::Internal,
                    format!("the request is not a {}: {e}", input.full_name()),
                )
            })?;
            requests.push(decoded);
        }
        Ok(Decoded {
            target,
            requests,
            output: method.output(),
        })
    }

    /// The method named `name` and who answers it; UNIMPLEMENTED when no service has it.
    fn route(&self, name: &str) -> Result<(grpc::Method, Target), Status> {
        match self.routes.get(name) {
            Some(route) => Ok(route.clone()),
            None => self.route_uncached(name),
        }
    }

    /// [`Services::route`] worked out from the schemas: what [`Services::new`] caches, and what
    /// says why a method is not served.
    fn route_uncached(&self, name: &str) -> Result<(grpc::Method, Target), Status> {
        if let Ok(m) = self.orders.method(name) {
            if let Some(answer) = self.canned.get(&m.path()[1..]) {
                return Ok((m, Target::Canned(answer.clone())));
            }
            let target = if m.descriptor().name() == "CreateOrder" {
                Target::CreateOrder
            } else {
                Target::GetOrder
            };
            return Ok((m, target));
        }
        let unknown = |e: grpc::SchemaError| {
            Status::new(
                GrpcCode::Unimplemented,
                format!("{e} (served: the built-in {})", grpc::orders::SERVICE),
            )
        };
        let Some(user) = &self.user else {
            return Err(unknown(
                self.orders
                    .method(name)
                    .err()
                    .unwrap_or(grpc::SchemaError::MethodSyntax(name.to_string())),
            ));
        };
        let m = user.method(name).map_err(unknown)?;
        let answer = self
            .canned
            .get(&m.path()[1..])
            .cloned()
            // The response type's default message: every field at its default, zero bytes.
            .unwrap_or_default();
        Ok((m, Target::Canned(answer)))
    }
}

/// How the server answers a call it processed, with what the journal records about it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct GrpcReply {
    /// The status.
    pub(crate) code: GrpcCode,
    /// `grpc-message` (none when empty).
    pub(crate) message: String,
    /// The response message, encoded (sent after Response-Headers when the status is OK).
    pub(crate) response: Option<Bytes>,
    /// `grpc-retry-pushback-ms`.
    pub(crate) pushback_ms: Option<i64>,
    /// Id of an order the call created.
    pub(crate) created: Option<String>,
    /// An idempotent replay.
    pub(crate) replayed: bool,
    /// The order the call acted on.
    pub(crate) resource: Option<String>,
    /// Why the store refused the call without acting on it (journaled `rejected`).
    pub(crate) refused: Option<&'static str>,
}

impl GrpcReply {
    /// An OK answer carrying `response`.
    pub(crate) fn ok(response: Bytes) -> GrpcReply {
        GrpcReply {
            code: GrpcCode::Ok,
            message: String::new(),
            response: Some(response),
            pushback_ms: None,
            created: None,
            replayed: false,
            resource: None,
            refused: None,
        }
    }

    /// A call ended with `status`, no message.
    pub(crate) fn status(status: Status) -> GrpcReply {
        GrpcReply {
            code: status.code,
            message: status.message,
            response: None,
            ..GrpcReply::ok(Bytes::new())
        }
    }
}

/// `value` as JSON text with every object's keys in order, so that one request gives one text
/// (and one hash) however its maps were ordered on the wire.
pub(crate) fn canonical_json(value: &serde_json::Value) -> String {
    fn write(v: &serde_json::Value, out: &mut String) {
        match v {
            serde_json::Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().collect();
                keys.sort();
                out.push('{');
                for (i, k) in keys.into_iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&serde_json::Value::String(k.clone()).to_string());
                    out.push(':');
                    write(&m[k], out);
                }
                out.push('}');
            }
            serde_json::Value::Array(a) => {
                out.push('[');
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(x, out);
                }
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }
    let mut out = String::new();
    write(value, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn grpc_calls_are_told_by_their_content_type() {
        for yes in [
            "application/grpc",
            "application/grpc+proto",
            "Application/GRPC;charset=x",
        ] {
            assert!(is_grpc(&headers(&[("content-type", yes)])), "{yes}");
        }
        for no in [
            "application/grpc-web",
            "application/json",
            "application/grp",
        ] {
            assert!(!is_grpc(&headers(&[("content-type", no)])), "{no}");
        }
        assert!(!is_grpc(&HeaderMap::new()));
    }

    #[test]
    fn the_head_gives_method_attempt_and_deadline_and_what_it_breaks() {
        let h = CallHead::read(
            "/orders.v1.Orders/CreateOrder",
            &headers(&[
                ("grpc-timeout", "1500m"),
                ("grpc-previous-rpc-attempts", "2"),
                ("grpc-encoding", "gzip"),
            ]),
        );
        assert_eq!(h.method, "orders.v1.Orders/CreateOrder");
        assert_eq!(h.previous_attempts, Some(2));
        assert_eq!(h.attempt(), 3);
        assert_eq!(h.timeout_ms(), Some(1500));
        assert_eq!(h.encoding, Some(Encoding::Gzip));
        assert_eq!(h.refused, None);
        let h = CallHead::read("/a.B/C", &headers(&[("grpc-timeout", "1500u")]));
        assert_eq!((h.timeout_ms(), h.attempt()), (Some(2), 1), "rounded up");
        let h = CallHead::read("/a.B/C", &headers(&[("grpc-timeout", "soon")]));
        assert_eq!(h.refused.map(|s| s.code), Some(GrpcCode::Internal));
        let h = CallHead::read("/a.B/C", &headers(&[("grpc-encoding", "snappy")]));
        assert_eq!(h.refused.map(|s| s.code), Some(GrpcCode::Unimplemented));
        let h = CallHead::read("/a.B/C", &headers(&[("grpc-previous-rpc-attempts", "x")]));
        assert_eq!(h.previous_attempts, None, "an invalid count is no count");
    }

    fn services() -> Services {
        Services::new(&[], &[], &BTreeMap::new(), 4 << 20).expect("the built-in services")
    }

    #[test]
    fn calls_decode_as_their_request_type_or_get_the_status_a_server_answers() {
        let s = services();
        let create = grpc::orders::schema()
            .unwrap()
            .method(grpc::orders::CREATE_ORDER)
            .unwrap();
        let msg = create
            .encode_request(r#"{"requestId":"k-1","sku":"A","qty":1}"#)
            .unwrap();
        let head = CallHead::read("/orders.v1.Orders/CreateOrder", &HeaderMap::new());
        let body = frame::encode(&msg, Encoding::Identity);
        let d = s.decode(&head, &body).expect("decodes");
        assert!(matches!(d.target, Target::CreateOrder));
        assert_eq!(d.request_id().as_deref(), Some("k-1"));
        assert_eq!(d.output.full_name(), "orders.v1.Order");
        let gz = frame::encode(&msg, Encoding::Gzip);
        let zipped = CallHead {
            encoding: Some(Encoding::Gzip),
            ..head.clone()
        };
        assert_eq!(
            s.decode(&zipped, &gz).unwrap().request_id().as_deref(),
            Some("k-1")
        );

        let code = |head: &CallHead, body: &[u8]| s.decode(head, body).unwrap_err().code;
        assert_eq!(code(&head, b""), GrpcCode::Internal, "no message");
        let two = [body.clone(), body.clone()].concat();
        assert_eq!(code(&head, &two), GrpcCode::Internal, "two messages");
        assert_eq!(
            code(&head, b"\x00\x00\x00\x00\x03\xff\xff\xff"),
            GrpcCode::Internal
        );
        assert_eq!(
            code(&head, &body[..body.len() - 1]),
            GrpcCode::Internal,
            "cut short"
        );
        assert_eq!(
            code(&head, &gz),
            GrpcCode::Internal,
            "compressed, not announced"
        );
        assert_eq!(
            code(&head, b"\x00\x7f\xff\xff\xff"),
            GrpcCode::ResourceExhausted
        );
        let other = CallHead::read("/shop.v1.Shop/Buy", &HeaderMap::new());
        let e = s.decode(&other, &body).unwrap_err();
        assert_eq!(e.code, GrpcCode::Unimplemented);
        assert!(e.message.contains("shop.v1.Shop"), "{}", e.message);
        let other = CallHead::read("/orders.v1.Orders/PayOrder", &HeaderMap::new());
        assert_eq!(code(&other, &body), GrpcCode::Unimplemented);
    }

    #[test]
    fn a_canned_answer_for_a_built_in_method_replaces_the_store() {
        let responses = BTreeMap::from([(
            "orders.v1.Orders/GetOrder".to_string(),
            serde_json::json!({"id": "ord_1", "status": "ORDER_STATUS_PAID"}),
        )]);
        let s = Services::new(&[], &[], &responses, 4 << 20).expect("canned built-in");
        let get = grpc::orders::schema()
            .unwrap()
            .method(grpc::orders::GET_ORDER)
            .unwrap();
        let body = frame::encode(
            &get.encode_request(r#"{"id":"x"}"#).unwrap(),
            Encoding::Identity,
        );
        let head = CallHead::read("/orders.v1.Orders/GetOrder", &HeaderMap::new());
        let Target::Canned(answer) = s.decode(&head, &body).unwrap().target else {
            panic!("the canned answer, not the store");
        };
        assert_eq!(
            get.decode_response(&answer).unwrap(),
            r#"{"id":"ord_1","status":"ORDER_STATUS_PAID"}"#
        );
        // CreateOrder still goes to the store.
        let head = CallHead::read("/orders.v1.Orders/CreateOrder", &HeaderMap::new());
        let create = grpc::orders::schema()
            .unwrap()
            .method(grpc::orders::CREATE_ORDER)
            .unwrap();
        let body = frame::encode(&create.encode_request("{}").unwrap(), Encoding::Identity);
        assert!(matches!(
            s.decode(&head, &body).unwrap().target,
            Target::CreateOrder
        ));
        let e = Services::new(
            &[],
            &[],
            &BTreeMap::from([("a.B/C".into(), serde_json::json!({}))]),
            1 << 20,
        )
        .unwrap_err();
        assert!(e.to_string().contains("no .proto file"), "{e}");
    }

    #[test]
    fn canonical_json_orders_keys_at_every_depth() {
        let v: serde_json::Value =
            serde_json::from_str(r#"{"b":{"y":1,"x":[{"q":2,"p":"\"s"}]},"a":null}"#).unwrap();
        assert_eq!(
            canonical_json(&v),
            r#"{"a":null,"b":{"x":[{"p":"\"s","q":2}],"y":1}}"#
        );
    }
}
