//! `harness audit`: every unsafe operation of an OpenAPI document probed for what its method
//! promises, one row each.

use std::time::Duration;

use clap::Args;
use reports::Outcome;

use super::args::{
    parse_duration, parse_headers, sync_mode, ConnectArgs, OperationArgs, Output, SyncArg,
};
use super::exit::CliError;
use super::output::emit;
use super::signals::stop_on_signals;

/// `harness audit` flags.
#[derive(Debug, Args)]
pub(super) struct AuditArgs {
    /// The OpenAPI document: a file (JSON or YAML) or an http(s):// URL.
    #[arg(long = "openapi", value_name = "SPEC")]
    openapi: String,
    /// The API's base URL (the document's paths are appended to it).
    #[arg(long, value_name = "URL")]
    base: String,
    /// Header sent with every request, `Name: value` (repeatable): credentials.
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    headers: Vec<String>,
    #[command(flatten)]
    ops: OperationArgs,
    /// Per-request timeout.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    timeout: Duration,
    /// URL or path with {key} answering JSON with a `count` of resources stored under the key
    /// (for the keyed operations; by default each resource is looked up with the document's GET).
    #[arg(long, value_name = "URL")]
    verify: Option<String>,
    /// How each burst is released [default: release over HTTP/1.1, single-packet over HTTP/2].
    #[arg(long, value_enum, value_name = "MODE")]
    sync: Option<SyncArg>,
    #[command(flatten)]
    connect: ConnectArgs,
    #[command(flatten)]
    output: Output,
}

pub(super) async fn audit(a: AuditArgs) -> Result<Outcome, CliError> {
    let mut cfg = crate::audit::AuditConfig::new(a.openapi, a.base);
    cfg.headers = parse_headers(&a.headers)?;
    a.ops.apply(&mut cfg);
    cfg.timeout = a.timeout;
    cfg.verify = a.verify;
    cfg.connect = a.connect.connect()?;
    cfg.sync = sync_mode(a.sync, cfg.connect.http2);
    cfg.stop = stop_on_signals();
    let outcome = crate::audit::audit(&cfg)
        .await
        .map_err(|e| CliError::of_kind(e.kind(), e.to_string()))?;
    emit(&crate::audit::audit_report(&outcome), &a.output)
}
