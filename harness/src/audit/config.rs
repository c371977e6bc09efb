//! What an audit is asked to do (`AuditConfig`, from the command line or a test), why it could
//! not be carried out (`AuditError`), and which key header an operation is probed with: what
//! every part of the audit reads, below all of them.

use std::time::Duration;

use openapi::{Method, Operation};
use tokio_util::sync::CancellationToken;

use crate::http::Connect;
use crate::plan::SyncMode;

/// Most rounds (same-key bursts) per keyed operation.
pub const MAX_ROUNDS: usize = 1000;
/// Most requests released together.
pub const MAX_CONCURRENCY: usize = 1000;

/// What to audit and how hard.
#[derive(Debug, Clone)]
pub struct AuditConfig {
    /// The OpenAPI document: a file, or an `http(s)://` URL.
    pub spec: String,
    /// The API's base URL: `http://127.0.0.1:8080` or `https://api.example.com/v1`.
    pub base: String,
    /// Sent with every request (credentials).
    pub headers: Vec<(String, String)>,
    /// Only these operations (ids, or path globs such as `/orders/**`); all when empty.
    pub only: Vec<String>,
    /// Not these operations (ids or path globs).
    pub skip: Vec<String>,
    /// The idempotency-key header's name.
    pub key_header: String,
    /// Probe every POST and PATCH with `key_header`, declared or not.
    pub force_key: bool,
    /// Same-key bursts per keyed operation.
    pub rounds: usize,
    /// Requests per burst, released together.
    pub concurrency: usize,
    /// Limit for one request.
    pub timeout: Duration,
    /// Seeds the requests built (the keys are fresh every run).
    pub seed: u64,
    /// TLS settings and the protocol.
    pub connect: Connect,
    /// How a burst's requests are made to arrive together.
    pub sync: SyncMode,
    /// A URL (or path) with `{key}` answering JSON with a `count`, for the keyed operations.
    pub verify: Option<String>,
    /// Cancelled on Ctrl-C or SIGTERM: no more operations, and what was done is reported.
    pub stop: CancellationToken,
}

impl AuditConfig {
    /// The defaults, for `spec` against `base`.
    pub fn new(spec: impl Into<String>, base: impl Into<String>) -> AuditConfig {
        AuditConfig {
            spec: spec.into(),
            base: base.into(),
            headers: Vec::new(),
            only: Vec::new(),
            skip: Vec::new(),
            key_header: openapi::DEFAULT_KEY_HEADER.to_string(),
            force_key: false,
            rounds: 5,
            concurrency: 10,
            timeout: Duration::from_secs(5),
            seed: 1,
            connect: Connect::default(),
            sync: SyncMode::Release,
            verify: None,
            stop: CancellationToken::new(),
        }
    }
}

/// Why the audit could not be carried out (an operation that fails is a row, not an error).
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The document cannot be read or is not OpenAPI 3.0/3.1.
    #[error("{0}")]
    Spec(String),
    /// A setting is out of range or malformed.
    #[error("invalid audit setting `{field}`: {reason}")]
    InvalidConfig {
        /// The setting's name.
        field: &'static str,
        /// What is wrong and what would work.
        reason: String,
    },
    /// A file cannot be written.
    #[error("cannot write {path}: {reason}")]
    Write {
        /// The file or directory.
        path: String,
        /// The operating system's error.
        reason: String,
    },
    /// The API (or the document's URL) cannot be reached.
    #[error("cannot reach {url}: {reason}")]
    Unreachable {
        /// The URL.
        url: String,
        /// The operating system's error, or what went wrong.
        reason: String,
    },
}

impl AuditError {
    /// What kind of failure it is: bad input, or an audit that could not be carried out.
    pub fn kind(&self) -> crate::failure::FailureKind {
        use crate::failure::FailureKind;
        match self {
            AuditError::Spec(_) | AuditError::InvalidConfig { .. } => FailureKind::BadInput,
            AuditError::Unreachable { .. } | AuditError::Write { .. } => FailureKind::CouldNotRun,
        }
    }
}

impl AuditConfig {
    /// The key header `op` is probed with, and where it comes from (`declared, required`,
    /// `declared`, `forced`).
    pub(crate) fn key_of(&self, op: &Operation) -> Option<(String, &'static str)> {
        if let Some(k) = &op.key_header {
            let how = if k.required {
                "declared, required"
            } else {
                "declared"
            };
            return Some((k.name.clone(), how));
        }
        (self.force_key && matches!(op.method, Method::Post | Method::Patch))
            .then(|| (self.key_header.clone(), "forced"))
    }
}
