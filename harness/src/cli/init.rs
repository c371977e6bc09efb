//! `harness init --from-openapi SPEC`: a commented scenario file per unsafe operation.

use std::path::PathBuf;

use clap::Args;
use reports::Outcome;

use super::args::{parse_headers, OperationArgs, TlsArgs};
use super::exit::CliError;
use super::output::print_out;

/// `harness init` flags.
#[derive(Debug, Args)]
pub(super) struct InitArgs {
    /// The OpenAPI document: a file (JSON or YAML) or an http(s):// URL.
    #[arg(long = "from-openapi", value_name = "SPEC")]
    from_openapi: String,
    /// Where the scenario files go (created when missing).
    #[arg(long, value_name = "DIR", default_value = ".")]
    out: PathBuf,
    /// The API's base URL, written as each scenario's `server.upstream` [default: the document's
    /// first server].
    #[arg(long, value_name = "URL")]
    base: Option<String>,
    /// Header sent when the document is fetched from a URL, `Name: value` (repeatable). Never
    /// written into the files.
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    headers: Vec<String>,
    #[command(flatten)]
    ops: OperationArgs,
    /// Replace files that exist.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    tls: TlsArgs,
}

pub(super) async fn init(a: InitArgs) -> Result<Outcome, CliError> {
    let mut cfg = crate::audit::AuditConfig::new(a.from_openapi, a.base.unwrap_or_default());
    cfg.headers = parse_headers(&a.headers)?;
    a.ops.apply(&mut cfg);
    cfg.connect = a.tls.connect();
    let outcome = crate::audit::init::init(&cfg, &a.out, a.force)
        .await
        .map_err(|e| CliError::of_kind(e.kind(), e.to_string()))?;
    let mut text = String::new();
    for w in &outcome.written {
        text.push_str(&format!(
            "wrote {}  {}  ({})\n",
            w.path.display(),
            w.label,
            w.probe.describe()
        ));
    }
    for (op, why) in &outcome.skipped {
        text.push_str(&format!("skipped {op}: {why}\n"));
    }
    if !outcome.written.is_empty() {
        text.push_str(&format!(
            "{} scenario(s) for the API at {}; run one with `harness run FILE --upstream URL`\n",
            outcome.written.len(),
            outcome.upstream
        ));
    }
    print_out(&text)?;
    if outcome.written.is_empty() {
        return Err(CliError::Input(
            "no scenario written: no unsafe operation got a valid request (see above)".into(),
        ));
    }
    Ok(Outcome::Passed)
}
