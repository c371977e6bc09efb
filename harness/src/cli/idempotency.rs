//! `harness idempotency URL`: any endpoint's Idempotency-Key handling, probed.

use std::time::Duration;

use clap::Args;
use reports::Outcome;

use super::args::{parse_duration, sync_mode, ConnectArgs, Output, SyncArg};
use super::exit::CliError;
use super::output::emit;
use super::signals::stop_on_signals;

/// `harness idempotency` flags.
#[derive(Debug, Args)]
pub(super) struct IdempotencyArgs {
    /// Full URL of the create endpoint, e.g. http://127.0.0.1:8080/orders.
    url: String,
    /// Bursts, each with a fresh key.
    #[arg(long, value_name = "N", default_value_t = 20)]
    rounds: usize,
    /// Requests in flight at once: each burst's, sent together.
    #[arg(short = 'c', long, value_name = "N", default_value_t = 10)]
    concurrency: usize,
    /// Method of the create endpoint.
    #[arg(short = 'm', long, value_name = "METHOD", default_value = "POST")]
    method: String,
    /// Header carrying the key.
    #[arg(long, value_name = "NAME", default_value = "Idempotency-Key")]
    key_header: String,
    /// JSON body (strings may contain {{round}}).
    #[arg(long, value_name = "JSON")]
    json: Option<String>,
    /// Extra header, `Name: value` (repeatable).
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    headers: Vec<String>,
    /// URL or path with {key} answering JSON with a `count` of resources stored under the key.
    #[arg(long, value_name = "URL")]
    verify: Option<String>,
    /// The endpoint accepts requests without a key (do not expect 400).
    #[arg(long)]
    key_optional: bool,
    /// Per-request timeout.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    timeout: Duration,
    /// Makes the keys reproducible.
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// How each burst is released [default: release over HTTP/1.1, single-packet over HTTP/2].
    #[arg(long, value_enum, value_name = "MODE")]
    sync: Option<SyncArg>,
    #[command(flatten)]
    connect: ConnectArgs,
    #[command(flatten)]
    output: Output,
}

pub(super) async fn idempotency(a: IdempotencyArgs) -> Result<Outcome, CliError> {
    let mut cfg = crate::probe::ProbeConfig::new(a.url);
    cfg.rounds = a.rounds;
    cfg.concurrency = a.concurrency;
    cfg.method = a.method;
    cfg.key_header = a.key_header;
    if let Some(j) = &a.json {
        cfg.body = serde_json::from_str(j)
            .map_err(|e| CliError::Input(format!("--json is not valid JSON: {e}")))?;
    }
    for h in &a.headers {
        let (k, v) = h
            .split_once(':')
            .ok_or_else(|| CliError::Input(format!("-H {h:?}: expected `Name: value`")))?;
        cfg.headers
            .push((k.trim().to_string(), v.trim().to_string()));
    }
    cfg.verify = a.verify;
    cfg.require_key = !a.key_optional;
    cfg.timeout = a.timeout;
    cfg.seed = a.seed;
    cfg.connect = a.connect.connect()?;
    cfg.sync = sync_mode(a.sync, cfg.connect.http2);
    cfg.stop = stop_on_signals();
    let outcome = crate::probe::probe(&cfg)
        .await
        .map_err(|e| CliError::of_kind(e.kind(), e.to_string()))?;
    emit(&crate::report::probe_report(&outcome), &a.output)
}
