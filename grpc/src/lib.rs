//! gRPC on top of the project's `transport`: what a gRPC client needs besides HTTP/2.
//!
//! - [`schema`]: `.proto` files compiled at run time (protox), methods looked up by name, JSON ↔
//!   protobuf by the proto3 JSON mapping (prost-reflect);
//! - [`orders`]: the shipped `orders.v1.Orders` service, built in;
//! - [`reflection`]: server reflection's messages, for a target that describes itself;
//! - [`frame`]: the Length-Prefixed-Message framing, bounded;
//! - [`status`]: status codes, `grpc-status` and `grpc-message`, and the status made of an HTTP
//!   answer that carried none;
//! - [`metadata`]: custom metadata, `grpc-timeout`, and gRFC A6's `grpc-previous-rpc-attempts`
//!   and `grpc-retry-pushback-ms`;
//! - [`call`]: a unary call's request and the reading of its answer, over the [`call::Exchange`]
//!   boundary a transport implements;
//! - [`target`]: `grpc://` and `grpcs://` made into the transport's HTTP/2 target;
//! - [`service_config`]: the service config (`retryPolicy`, `hedgingPolicy`, `retryThrottling`,
//!   `timeout`), validated as A6 says into `retry_policy::grpc`'s types, which play it.
//!
//! Why a crate of its own: gRPC is HTTP/2 plus a five-byte prefix, trailers and a status, and the
//! load driver, the fault server and the checks each need a part of it. Here it is in one place,
//! knowing no scenario, check or server.
//!
//! *Invariant:* depends on `transport` (and the pure `history` and `retry-policy`), never on the
//! harness, the fault server or the checks.

#![warn(missing_docs)]

pub mod call;
pub mod frame;
pub mod metadata;
pub mod orders;
pub mod reflection;
pub mod schema;
pub mod service_config;
pub mod status;
pub mod target;

pub use call::{CallRequest, CallResponse, Exchange, HttpAnswer};
pub use schema::{Method, Schema, SchemaError};
pub use service_config::{ConfigError, ServiceConfig};
pub use status::{Code, Status};
