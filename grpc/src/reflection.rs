//! The client side of gRPC server reflection (`grpc.reflection.v1.ServerReflection`, falling
//! back to `v1alpha`), message by message: the requests to send and what to make of each answer,
//! until the server's services and every file they need are known and make a [`Schema`].
//!
//! Why messages and not a call: reflection is one bidirectional stream, and streams belong to the
//! transport. This module decides what to ask next from what came back — list the services, ask
//! for the file that defines each, then for each dependency not yet seen — so the stream's owner
//! only frames, sends and feeds back. [`reflect`] does that over any [`Exchange`], one whole call
//! per request, which the reflection services answer as they answer a stream. What a server may
//! make it hold is bounded: at most [`MAX_FILES`] files, each name asked for once.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use bytes::Bytes;
use prost::Message;
use prost_reflect::DescriptorPool;
use prost_types::FileDescriptorProto;
use protox::file::{FileResolver, GoogleFileResolver};

use crate::call::{attempt, AttemptHeaders, CallRequest, Exchange};
use crate::frame::DEFAULT_MAX_MESSAGE;
use crate::metadata::Metadata;
use crate::schema::Schema;
use crate::status::{Code, Status};

/// The most files a reflection session accepts.
pub const MAX_FILES: usize = 10_000;

/// Which reflection service to speak.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReflectionVersion {
    /// `grpc.reflection.v1`.
    V1,
    /// `grpc.reflection.v1alpha`, which older servers offer alone.
    V1Alpha,
}

impl ReflectionVersion {
    /// The stream's `:path`.
    pub fn path(self) -> &'static str {
        match self {
            ReflectionVersion::V1 => "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
            ReflectionVersion::V1Alpha => {
                "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
            }
        }
    }

    /// The version to try after this one ended with `code`: v1alpha after v1 was
    /// UNIMPLEMENTED; nothing otherwise. (Both versions' messages are the same.)
    pub fn fallback(self, code: Code) -> Option<ReflectionVersion> {
        (self == ReflectionVersion::V1 && code == Code::Unimplemented)
            .then_some(ReflectionVersion::V1Alpha)
    }
}

/// `ServerReflectionRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct ServerReflectionRequest {
    /// The host the request is about.
    #[prost(string, tag = "1")]
    pub host: String,
    /// What is asked.
    #[prost(oneof = "MessageRequest", tags = "3, 4, 5, 6, 7")]
    pub message_request: Option<MessageRequest>,
}

/// What a `ServerReflectionRequest` asks.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum MessageRequest {
    /// The file of this name.
    #[prost(string, tag = "3")]
    FileByFilename(String),
    /// The file that defines this symbol.
    #[prost(string, tag = "4")]
    FileContainingSymbol(String),
    /// The file that defines this extension.
    #[prost(message, tag = "5")]
    FileContainingExtension(ExtensionRequest),
    /// The extension numbers of this type.
    #[prost(string, tag = "6")]
    AllExtensionNumbersOfType(String),
    /// The services (the value is ignored).
    #[prost(string, tag = "7")]
    ListServices(String),
}

/// `ExtensionRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct ExtensionRequest {
    /// The extended type.
    #[prost(string, tag = "1")]
    pub containing_type: String,
    /// The extension's number.
    #[prost(int32, tag = "2")]
    pub extension_number: i32,
}

/// `ServerReflectionResponse`.
#[derive(Clone, PartialEq, Message)]
pub struct ServerReflectionResponse {
    /// The host.
    #[prost(string, tag = "1")]
    pub valid_host: String,
    /// The request this answers.
    #[prost(message, optional, tag = "2")]
    pub original_request: Option<ServerReflectionRequest>,
    /// The answer.
    #[prost(oneof = "MessageResponse", tags = "4, 5, 6, 7")]
    pub message_response: Option<MessageResponse>,
}

/// What a `ServerReflectionResponse` answers.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum MessageResponse {
    /// Serialized `FileDescriptorProto`s.
    #[prost(message, tag = "4")]
    FileDescriptorResponse(FileDescriptorResponse),
    /// Extension numbers.
    #[prost(message, tag = "5")]
    AllExtensionNumbersResponse(ExtensionNumberResponse),
    /// The services.
    #[prost(message, tag = "6")]
    ListServicesResponse(ListServiceResponse),
    /// A failure.
    #[prost(message, tag = "7")]
    ErrorResponse(ErrorResponse),
}

/// `FileDescriptorResponse`.
#[derive(Clone, PartialEq, Message)]
pub struct FileDescriptorResponse {
    /// Each a serialized `FileDescriptorProto`.
    #[prost(bytes = "vec", repeated, tag = "1")]
    pub file_descriptor_proto: Vec<Vec<u8>>,
}

/// `ExtensionNumberResponse`.
#[derive(Clone, PartialEq, Message)]
pub struct ExtensionNumberResponse {
    /// The type.
    #[prost(string, tag = "1")]
    pub base_type_name: String,
    /// Its extension numbers.
    #[prost(int32, repeated, tag = "2")]
    pub extension_number: Vec<i32>,
}

/// `ListServiceResponse`.
#[derive(Clone, PartialEq, Message)]
pub struct ListServiceResponse {
    /// The services.
    #[prost(message, repeated, tag = "1")]
    pub service: Vec<ServiceResponse>,
}

/// `ServiceResponse`.
#[derive(Clone, PartialEq, Message)]
pub struct ServiceResponse {
    /// A service's full name.
    #[prost(string, tag = "1")]
    pub name: String,
}

/// `ErrorResponse`.
#[derive(Clone, PartialEq, Message)]
pub struct ErrorResponse {
    /// A gRPC status code.
    #[prost(int32, tag = "1")]
    pub error_code: i32,
    /// Why.
    #[prost(string, tag = "2")]
    pub error_message: String,
}

/// Reflection that could not produce a schema.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReflectionError {
    /// An answer that is not a `ServerReflectionResponse`.
    #[error("not a server reflection response: {0}")]
    Decode(String),
    /// The server answered a request with an error.
    #[error("server reflection: {request}: {code}: {message}")]
    Server {
        /// What was asked.
        request: String,
        /// The status code in the answer.
        code: String,
        /// Its message.
        message: String,
    },
    /// An answer to nothing that was asked, or of a kind that was not.
    #[error("server reflection: unexpected answer: {0}")]
    Unexpected(String),
    /// More files than [`MAX_FILES`].
    #[error("server reflection: more than {MAX_FILES} files")]
    TooManyFiles,
    /// The stream ended with requests unanswered.
    #[error("server reflection ended with {0} requests unanswered")]
    Unfinished(usize),
    /// The files do not make a consistent set.
    #[error("server reflection: {0}")]
    Descriptors(String),
}

/// One reflection session: what to ask, and what the answers so far amount to.
#[derive(Debug)]
pub struct Reflection {
    host: String,
    /// Requests sent and not yet answered, in order (answers come in order on the stream).
    waiting: VecDeque<MessageRequest>,
    asked_files: BTreeSet<String>,
    asked_symbols: BTreeSet<String>,
    files: BTreeMap<String, FileDescriptorProto>,
    services: Vec<String>,
}

impl Reflection {
    /// A session about `host` (the call's authority; may be empty).
    pub fn new(host: &str) -> Reflection {
        Reflection {
            host: host.to_string(),
            waiting: VecDeque::new(),
            asked_files: BTreeSet::new(),
            asked_symbols: BTreeSet::new(),
            files: BTreeMap::new(),
            services: Vec::new(),
        }
    }

    /// The first request: list the services.
    pub fn start(&mut self) -> Bytes {
        self.ask(MessageRequest::ListServices(String::new()))
    }

    /// A request for the file that defines `symbol` (a service or message name), for when the
    /// services are already known.
    pub fn ask_symbol(&mut self, symbol: &str) -> Option<Bytes> {
        self.asked_symbols
            .insert(symbol.to_string())
            .then(|| self.ask(MessageRequest::FileContainingSymbol(symbol.to_string())))
    }

    fn ask(&mut self, request: MessageRequest) -> Bytes {
        self.waiting.push_back(request.clone());
        Bytes::from(
            ServerReflectionRequest {
                host: self.host.clone(),
                message_request: Some(request),
            }
            .encode_to_vec(),
        )
    }

    /// Requests sent and not yet answered.
    pub fn unanswered(&self) -> usize {
        self.waiting.len()
    }

    /// The services the server listed (reflection's own left out).
    pub fn services(&self) -> &[String] {
        &self.services
    }

    /// Takes one answer; returns the requests it calls for (protobuf-encoded, unframed).
    pub fn on_response(&mut self, bytes: &[u8]) -> Result<Vec<Bytes>, ReflectionError> {
        let response = ServerReflectionResponse::decode(bytes)
            .map_err(|e| ReflectionError::Decode(e.to_string()))?;
        let asked = self.waiting.pop_front().ok_or_else(|| {
            ReflectionError::Unexpected("an answer with no request waiting".into())
        })?;
        let mut next = Vec::new();
        match (response.message_response, &asked) {
            (
                Some(MessageResponse::ListServicesResponse(list)),
                MessageRequest::ListServices(_),
            ) => {
                for s in list.service {
                    if s.name.starts_with("grpc.reflection.") {
                        continue;
                    }
                    self.services.push(s.name.clone());
                    if let Some(r) = self.ask_symbol(&s.name) {
                        next.push(r);
                    }
                }
            }
            (
                Some(MessageResponse::FileDescriptorResponse(files)),
                MessageRequest::FileByFilename(_) | MessageRequest::FileContainingSymbol(_),
            ) => {
                for raw in files.file_descriptor_proto {
                    let file = FileDescriptorProto::decode(&raw[..]).map_err(|e| {
                        ReflectionError::Decode(format!("a FileDescriptorProto: {e}"))
                    })?;
                    for dep in &file.dependency {
                        if !self.files.contains_key(dep) && self.asked_files.insert(dep.clone()) {
                            next.push(self.ask(MessageRequest::FileByFilename(dep.clone())));
                        }
                    }
                    self.asked_files.insert(file.name().to_string());
                    self.files.insert(file.name().to_string(), file);
                    if self.files.len() > MAX_FILES {
                        return Err(ReflectionError::TooManyFiles);
                    }
                }
            }
            (Some(MessageResponse::ErrorResponse(e)), MessageRequest::FileByFilename(name))
                if name.starts_with("google/protobuf/") && builtin(name).is_some() =>
            {
                // A server that does not serve the well-known types ({e:?}): they are built in
                // (`into_schema` adds them).
                let _ = e;
            }
            (Some(MessageResponse::ErrorResponse(e)), asked) => {
                let code = u64::try_from(e.error_code)
                    .ok()
                    .and_then(Code::from_number)
                    .map_or_else(|| e.error_code.to_string(), |c| c.to_string());
                return Err(ReflectionError::Server {
                    request: describe(asked),
                    code,
                    message: e.error_message,
                });
            }
            (other, asked) => {
                return Err(ReflectionError::Unexpected(format!(
                    "{} in answer to {}",
                    other.map_or("nothing", |o| match o {
                        MessageResponse::FileDescriptorResponse(_) => "files",
                        MessageResponse::AllExtensionNumbersResponse(_) => "extension numbers",
                        MessageResponse::ListServicesResponse(_) => "a service list",
                        MessageResponse::ErrorResponse(_) => "an error",
                    }),
                    describe(asked)
                )))
            }
        }
        Ok(next)
    }

    /// The schema of everything learned; every request must have been answered.
    pub fn into_schema(self) -> Result<Schema, ReflectionError> {
        if !self.waiting.is_empty() {
            return Err(ReflectionError::Unfinished(self.waiting.len()));
        }
        let mut files = self.files;
        // Well-known types a server left out come from the built-in copies.
        let missing: Vec<String> = files
            .values()
            .flat_map(|f| f.dependency.iter())
            .filter(|d| !files.contains_key(*d))
            .cloned()
            .collect();
        for name in missing {
            if let Some(f) = builtin(&name) {
                files.insert(name, f);
            }
        }
        let mut pool = DescriptorPool::new();
        pool.add_file_descriptor_protos(files.into_values())
            .map_err(|e| ReflectionError::Descriptors(e.to_string()))?;
        Ok(Schema::from_pool(pool))
    }
}

/// Why reflection over unary exchanges failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReflectFailure {
    /// A reflection call ended with a status other than OK (after the v1alpha fallback).
    #[error("server reflection ({path}): {code}: {message}")]
    Status {
        /// The reflection path tried last.
        path: &'static str,
        /// The status's code.
        code: Code,
        /// Its message.
        message: String,
    },
    /// The answers did not make a schema.
    #[error(transparent)]
    Reflection(#[from] ReflectionError),
}

/// Reflection through any [`Exchange`], one stream per request: each request is sent as a whole
/// call (one message, then the end of the stream), which the reflection services of grpc-go,
/// grpc-java and grpcio answer with one message each. v1 first; v1alpha when v1 is UNIMPLEMENTED.
pub async fn reflect<E: Exchange>(
    transport: &mut E,
    host: &str,
    timeout: std::time::Duration,
) -> Result<Schema, ReflectFailure> {
    let mut version = ReflectionVersion::V1;
    loop {
        match reflect_with(transport, host, version, timeout).await {
            Err(ReflectFailure::Status { code, .. }) if version.fallback(code).is_some() => {
                version = version.fallback(code).unwrap_or(version);
            }
            other => return other,
        }
    }
}

async fn reflect_with<E: Exchange>(
    transport: &mut E,
    host: &str,
    version: ReflectionVersion,
    timeout: std::time::Duration,
) -> Result<Schema, ReflectFailure> {
    let mut session = Reflection::new(host);
    let mut queue = VecDeque::from([session.start()]);
    while let Some(message) = queue.pop_front() {
        let call = CallRequest {
            path: version.path().to_string(),
            message,
            metadata: Metadata::new(),
            encoding: None,
            user_agent: None,
        };
        let answer = attempt(
            transport,
            &call,
            AttemptHeaders::default(),
            timeout,
            DEFAULT_MAX_MESSAGE,
        )
        .await;
        let failed = |s: Status| ReflectFailure::Status {
            path: version.path(),
            code: s.code,
            message: s.message,
        };
        if answer.status.code != Code::Ok {
            return Err(failed(answer.status));
        }
        if answer.messages.len() != 1 {
            return Err(ReflectionError::Unexpected(format!(
                "{} answers to one request",
                answer.messages.len()
            ))
            .into());
        }
        queue.extend(session.on_response(&answer.messages[0])?);
    }
    Ok(session.into_schema()?)
}

/// protox's copy of a well-known type's file.
fn builtin(name: &str) -> Option<FileDescriptorProto> {
    GoogleFileResolver::new()
        .open_file(name)
        .ok()
        .map(|f| f.file_descriptor_proto().clone())
}

fn describe(r: &MessageRequest) -> String {
    match r {
        MessageRequest::FileByFilename(n) => format!("file {n:?}"),
        MessageRequest::FileContainingSymbol(s) => format!("the file of symbol {s:?}"),
        MessageRequest::FileContainingExtension(e) => {
            format!(
                "the file of extension {} of {:?}",
                e.extension_number, e.containing_type
            )
        }
        MessageRequest::AllExtensionNumbersOfType(t) => format!("the extensions of {t:?}"),
        MessageRequest::ListServices(_) => "the list of services".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reflection server's answers, made from a compiled schema: what grpc-go's and
    /// grpcio's reflection services send (the symbol's file alone, dependencies on request).
    struct Server {
        pool: DescriptorPool,
        serve_well_known: bool,
    }

    impl Server {
        fn answer(&self, request: &[u8]) -> Bytes {
            let req = ServerReflectionRequest::decode(request).unwrap();
            let file = |name: &str| {
                self.pool
                    .get_file_by_name(name)
                    .filter(|_| self.serve_well_known || !name.starts_with("google/"))
                    .map(|f| f.file_descriptor_proto().encode_to_vec())
            };
            let not_found = |what: &str| {
                MessageResponse::ErrorResponse(ErrorResponse {
                    error_code: 5,
                    error_message: format!("{what} not found"),
                })
            };
            let response = match req.message_request.clone().unwrap() {
                MessageRequest::ListServices(_) => {
                    let mut service: Vec<ServiceResponse> = self
                        .pool
                        .services()
                        .map(|s| ServiceResponse {
                            name: s.full_name().to_string(),
                        })
                        .collect();
                    service.push(ServiceResponse {
                        name: "grpc.reflection.v1.ServerReflection".into(),
                    });
                    MessageResponse::ListServicesResponse(ListServiceResponse { service })
                }
                MessageRequest::FileByFilename(n) => match file(&n) {
                    Some(f) => MessageResponse::FileDescriptorResponse(FileDescriptorResponse {
                        file_descriptor_proto: vec![f],
                    }),
                    None => not_found(&n),
                },
                MessageRequest::FileContainingSymbol(s) => {
                    let svc = self.pool.get_service_by_name(&s);
                    match svc.and_then(|s| file(s.parent_file().name())) {
                        Some(f) => {
                            MessageResponse::FileDescriptorResponse(FileDescriptorResponse {
                                file_descriptor_proto: vec![f],
                            })
                        }
                        None => not_found(&s),
                    }
                }
                _ => not_found("that"),
            };
            Bytes::from(
                ServerReflectionResponse {
                    valid_host: String::new(),
                    original_request: Some(req),
                    message_response: Some(response),
                }
                .encode_to_vec(),
            )
        }
    }

    fn compiled() -> (tempfile::TempDir, Schema) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("a")).unwrap();
        std::fs::write(
            dir.path().join("a/common.proto"),
            "syntax = \"proto3\";\npackage a;\nimport \"google/protobuf/timestamp.proto\";\nmessage When { google.protobuf.Timestamp at = 1; }\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("a/svc.proto"),
            "syntax = \"proto3\";\npackage a;\nimport \"a/common.proto\";\nservice Clock { rpc Now(When) returns (When); }\nservice Other { rpc X(When) returns (When); }\n",
        )
        .unwrap();
        let s = Schema::compile(&[dir.path().join("a/svc.proto")], &[dir.path()]).unwrap();
        (dir, s)
    }

    /// Runs a session against `server` as the stream would: each request answered in order.
    fn session(server: &Server) -> Result<Schema, ReflectionError> {
        let mut r = Reflection::new("localhost");
        let mut queue = VecDeque::from([r.start()]);
        let mut rounds = 0;
        while let Some(req) = queue.pop_front() {
            rounds += 1;
            assert!(rounds < 100, "the session does not end");
            queue.extend(r.on_response(&server.answer(&req))?);
        }
        assert_eq!(r.services(), ["a.Clock", "a.Other"]);
        r.into_schema()
    }

    #[test]
    fn services_and_their_files_make_a_schema() {
        let (_d, compiled) = compiled();
        for serve_well_known in [true, false] {
            let server = Server {
                pool: compiled.pool().clone(),
                serve_well_known,
            };
            let schema = session(&server).unwrap();
            assert_eq!(schema.services(), ["a.Clock", "a.Other"]);
            let m = schema.method("a.Clock/Now").unwrap();
            let bytes = m
                .encode_request(r#"{"at":"2024-05-06T07:08:09Z"}"#)
                .unwrap();
            assert_eq!(
                m.decode_response(&bytes).unwrap(),
                r#"{"at":"2024-05-06T07:08:09Z"}"#
            );
        }
    }

    #[test]
    fn requests_are_the_protocols_messages() {
        let mut r = Reflection::new("h");
        let first = r.start();
        // host "h" (field 1), list_services "" (field 7).
        assert_eq!(&first[..], b"\x0a\x01h\x3a\x00");
        assert_eq!(r.unanswered(), 1);
        let again = r.ask_symbol("a.B").unwrap();
        assert_eq!(&again[..], b"\x0a\x01h\x22\x03a.B");
        assert!(r.ask_symbol("a.B").is_none(), "each symbol is asked once");
    }

    #[test]
    fn errors_and_strange_answers_are_reported() {
        let mut r = Reflection::new("");
        r.start();
        let e = r.on_response(b"\xff\xff").unwrap_err();
        assert!(matches!(e, ReflectionError::Decode(_)), "{e}");
        let mut r = Reflection::new("");
        r.start();
        let err = ServerReflectionResponse {
            message_response: Some(MessageResponse::ErrorResponse(ErrorResponse {
                error_code: 12,
                error_message: "no".into(),
            })),
            ..Default::default()
        };
        let e = r.on_response(&err.encode_to_vec()).unwrap_err().to_string();
        assert!(
            e.contains("UNIMPLEMENTED") && e.contains("list of services"),
            "{e}"
        );
        let mut r = Reflection::new("");
        let e = r.on_response(&err.encode_to_vec()).unwrap_err();
        assert!(matches!(e, ReflectionError::Unexpected(_)), "{e}");
        let mut r = Reflection::new("");
        r.start();
        let files = ServerReflectionResponse {
            message_response: Some(MessageResponse::FileDescriptorResponse(Default::default())),
            ..Default::default()
        };
        let e = r
            .on_response(&files.encode_to_vec())
            .unwrap_err()
            .to_string();
        assert!(e.contains("files in answer to the list of services"), "{e}");
        let mut r = Reflection::new("");
        r.start();
        assert_eq!(r.into_schema().unwrap_err(), ReflectionError::Unfinished(1));
    }

    #[test]
    fn v1_falls_back_to_v1alpha_only_when_unimplemented() {
        let v1 = ReflectionVersion::V1;
        assert_eq!(
            v1.fallback(Code::Unimplemented),
            Some(ReflectionVersion::V1Alpha)
        );
        assert_eq!(v1.fallback(Code::Unavailable), None);
        assert_eq!(
            ReflectionVersion::V1Alpha.fallback(Code::Unimplemented),
            None
        );
        assert!(v1
            .path()
            .starts_with("/grpc.reflection.v1.ServerReflection/"));
        assert!(ReflectionVersion::V1Alpha.path().contains("v1alpha"));
    }
}
