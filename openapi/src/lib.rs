//! An OpenAPI 3.0 or 3.1 document in, a valid request for each of its operations out.
//!
//! ```no_run
//! use openapi::{Api, Config, LinkPlan, RequestBuilder};
//!
//! let api = Api::from_file("openapi.yaml".as_ref(), &Config::default())?;
//! let plan = LinkPlan::new(&api);
//! let mut builder = RequestBuilder::new(&api, 42)?;
//! for id in plan.order() {
//!     let op = api.operation(id).expect("the plan names the document's operations");
//!     match builder.build(op) {
//!         Ok(request) => println!("{} {}", request.method, request.target()),
//!         Err(why) => println!("{why}"),
//!     }
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The parts, in the order data flows through them:
//! - `load` reads bytes (a file, or bytes the caller fetched from a URL) as JSON or YAML, checks
//!   the version, bundles referenced local files and checks that every `$ref` lands;
//! - `dialect` puts every schema in the terms of one JSON Schema draft (3.0 → draft 4, 3.1 →
//!   2020-12);
//! - [`operation`] reads the operations: parameters, bodies, responses, links, security, the
//!   idempotency key;
//! - [`request`] builds a request per operation from examples or from `generate`, each value
//!   checked by `validate` (the `jsonschema` crate);
//! - [`link`] says which operation's answer feeds which parameter, in which order to call them,
//!   and how to look at a resource afterwards.
//!
//! # Why a typed walk of `serde_json::Value`, and not `openapiv3` or `oas3`
//!
//! `openapiv3` reads 3.0 only and `oas3` 3.1 only, so both would be needed and every later step
//! written twice. Both turn Schema Objects into Rust types that keep only the keywords their
//! authors modelled (`openapiv3` has no `const` or type arrays; neither keeps the node's place),
//! while the validator needs the schema as JSON, exactly as written, and the generator needs
//! every keyword the validator will judge. And neither follows `$ref`s for the caller. Here the
//! document stays one `serde_json::Value`, the OpenAPI objects around the schemas (paths,
//! operations, parameters, media types, responses, links, security) are read into the types of
//! [`operation`] with their pointers, and schemas are read where they are, by pointer, by both the
//! generator and the validator. Parsing is `serde_json`/`serde_norway`, validation `jsonschema`,
//! regex sampling `rand_regex`: the crate writes only the OpenAPI-specific parts.
//!
//! The crate knows no scenario, check, server or socket: it builds requests and reads answers
//! the caller recorded, and sends nothing.

#![warn(missing_docs)]

mod dialect;
mod document;
mod error;
mod formats;
mod generate;
pub mod link;
mod load;
pub mod operation;
mod parameter;
mod pointer;
mod regex;
pub mod request;
pub mod security;
mod style;
mod validate;

use std::path::Path;

pub use document::Document;
pub use error::LoadError;
pub use generate::{MAX_DEPTH, MAX_ITEMS, MAX_STRING, SOFT_DEPTH};
pub use link::{
    resource_field, Binding, FillError, LinkPlan, Recorded, ValueSource, Verification, VerifyFrom,
};
pub use load::{Version, BUNDLE_KEY, MAX_DOCUMENT_BYTES, MAX_FILES};
pub use operation::{KeyHeader, Location, Method, Operation};
pub use request::{Body, ParamValue, Request, RequestBuilder, Source, Unbuildable, ATTEMPTS};
pub use security::Security;

/// The idempotency-key header looked for when none is configured.
pub const DEFAULT_KEY_HEADER: &str = "Idempotency-Key";

/// How a document is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The idempotency-key header's name (compared without case).
    pub key_header: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            key_header: DEFAULT_KEY_HEADER.to_string(),
        }
    }
}

/// A loaded document and its operations.
#[derive(Debug, Clone)]
pub struct Api {
    document: Document,
    operations: Vec<Operation>,
    servers: Vec<String>,
    warnings: Vec<String>,
}

impl Api {
    /// Reads the document at `path` (JSON or YAML) and the local files it references.
    pub fn from_file(path: &Path, config: &Config) -> Result<Api, LoadError> {
        let loaded = load::from_file(path)?;
        Api::new(loaded, path.display().to_string(), config)
    }

    /// Reads a document from bytes the caller obtained, typically fetched from `origin` (a URL,
    /// used in messages). References to other documents are refused.
    pub fn from_bytes(bytes: &[u8], origin: &str, config: &Config) -> Result<Api, LoadError> {
        let loaded = load::from_bytes(bytes, origin)?;
        Api::new(loaded, origin.to_string(), config)
    }

    fn new(mut loaded: load::Loaded, origin: String, config: &Config) -> Result<Api, LoadError> {
        dialect::normalize(&mut loaded.json, loaded.version);
        let servers = servers(&loaded.json);
        let document = Document::new(loaded.json, loaded.version, origin);
        let (operations, warnings) = operation::read_operations(&document, &config.key_header)?;
        Ok(Api {
            document,
            operations,
            servers,
            warnings,
        })
    }

    /// The document.
    pub fn document(&self) -> &Document {
        &self.document
    }

    /// The OpenAPI version.
    pub fn version(&self) -> Version {
        self.document.version()
    }

    /// Every operation, in document order (paths sorted, methods in path-item order).
    pub fn operations(&self) -> &[Operation] {
        &self.operations
    }

    /// The operation with id `id`.
    pub fn operation(&self, id: &str) -> Option<&Operation> {
        self.operations.iter().find(|o| o.id == id)
    }

    /// The unsafe operations (POST, PUT, PATCH, DELETE): the ones an audit probes.
    pub fn unsafe_operations(&self) -> impl Iterator<Item = &Operation> {
        self.operations.iter().filter(|o| o.is_unsafe())
    }

    /// The `servers` URLs, their variables replaced by their defaults. A request's
    /// [`Request::target`] is relative to one of them.
    pub fn servers(&self) -> &[String] {
        &self.servers
    }

    /// What was odd but did not stop loading: an undeclared path parameter, a repeated id.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The header names any operation asks for as credentials (for a `-H` hint).
    pub fn auth_headers(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .operations
            .iter()
            .flat_map(|o| o.security.headers())
            .collect();
        out.sort();
        out.dedup();
        out
    }
}

fn servers(json: &serde_json::Value) -> Vec<String> {
    let Some(serde_json::Value::Array(list)) = json.get("servers") else {
        return Vec::new();
    };
    list.iter()
        .filter_map(|s| {
            let mut url = s.get("url")?.as_str()?.to_string();
            if let Some(serde_json::Value::Object(vars)) = s.get("variables") {
                for (name, var) in vars {
                    if let Some(d) = var.get("default").and_then(|d| d.as_str()) {
                        url = url.replace(&format!("{{{name}}}"), d);
                    }
                }
            }
            Some(url)
        })
        .collect()
}
