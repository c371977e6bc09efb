//! `harness load URL`: ad-hoc load, open model (`--rate`) or closed (`--concurrency`).

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use reports::Outcome;

use super::args::{parse_duration, ConnectArgs, DashboardArgs, Output};
use super::exit::CliError;
use super::output::emit;
use super::signals::stop_on_signals;

/// `harness load` flags.
#[derive(Debug, Args)]
pub(super) struct LoadArgs {
    /// The URL to load: http(s)://, or grpc(s):// with --call.
    url: String,
    /// Open model: requests per second, whatever the latency (oha's -q).
    #[arg(short = 'q', long, value_name = "RPS", conflicts_with = "concurrency")]
    rate: Option<f64>,
    /// Closed model: requests in flight at once, each on a connection of its own that sends
    /// its next request when the last ends.
    #[arg(short = 'c', long, value_name = "N")]
    concurrency: Option<u32>,
    /// Stop after this long, e.g. `30s` (default 10s when --requests is not given) (oha's -z).
    #[arg(short = 'z', long, value_name = "DURATION", value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Stop after this many requests.
    #[arg(short = 'n', long, value_name = "N")]
    requests: Option<u64>,
    /// HTTP method.
    #[arg(short = 'm', long, value_name = "METHOD", default_value = "GET")]
    method: String,
    /// Request header, `Name: value` (repeatable).
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    headers: Vec<String>,
    /// Request body, sent as given (as curl's and oha's -d); no content-type unless -T. For a
    /// gRPC call, the request message in the proto3 JSON mapping.
    #[arg(short = 'd', long = "data", value_name = "BODY", conflicts_with_all = ["json", "data_file"])]
    data: Option<String>,
    /// Request body read from a file, sent as it is (oha's -D).
    #[arg(
        short = 'D',
        long = "data-file",
        value_name = "FILE",
        conflicts_with = "json"
    )]
    data_file: Option<PathBuf>,
    /// The body's content type, e.g. `text/plain` (oha's -T).
    #[arg(
        short = 'T',
        long = "content-type",
        value_name = "TYPE",
        conflicts_with = "json"
    )]
    content_type: Option<String>,
    /// JSON request body (sets content-type: application/json); for a gRPC call, the request
    /// message in the proto3 JSON mapping.
    #[arg(long, value_name = "JSON")]
    json: Option<String>,
    /// gRPC: the method to call, `pkg.Service/Method` (the URL is grpc://HOST:PORT or grpcs://).
    #[arg(long, value_name = "METHOD")]
    call: Option<String>,
    /// gRPC: a .proto file that defines the method (repeatable); `orders.v1.Orders` is built in.
    /// Without it, any other service's schema comes from the target's server reflection.
    #[arg(long = "proto", value_name = "FILE")]
    protos: Vec<PathBuf>,
    /// gRPC: take the schema from the target's server reflection even for the built-in
    /// `orders.v1.Orders` (without --proto, other services always do).
    #[arg(long, conflicts_with = "protos")]
    reflect: bool,
    /// gRPC: where the .proto files' imports are found (repeatable), as protoc's -I.
    #[arg(long = "import-path", value_name = "DIR")]
    import_paths: Vec<PathBuf>,
    /// gRPC: each call's deadline, sent as grpc-timeout (the attempt fails as DEADLINE_EXCEEDED
    /// when it passes).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    deadline: Option<Duration>,
    /// Per-request timeout.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    timeout: Duration,
    /// Connections available in rate mode (a request that finds none free starts late).
    #[arg(long, value_name = "N")]
    connections: Option<u32>,
    /// A threshold the load must meet, as in a scenario's `thresholds` (repeatable): `p99 <
    /// 200ms`, `error_rate < 1%`, `throughput > 500/s`. Exit 1 when one fails.
    #[arg(long = "threshold", value_name = "RULE")]
    thresholds: Vec<String>,
    /// Most operations allowed to fail (no response or a 5xx), as `1%` or `0.01`; applied
    /// unless a --threshold rule on error_rate is given [default: 1%; 100% turns it off].
    #[arg(long, value_name = "RATE")]
    max_error_rate: Option<String>,
    /// Stop the load as soon as a threshold fails on the figures so far (judged once a second);
    /// the load then fails, and its report says which rule stopped it and when.
    #[arg(long)]
    abort_on_fail: bool,
    /// With --abort-on-fail: how long into the load no threshold may stop it yet (the first
    /// seconds rest on few requests).
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration, requires = "abort_on_fail")]
    abort_after: Duration,
    #[command(flatten)]
    connect: ConnectArgs,
    #[command(flatten)]
    output: Output,
    #[command(flatten)]
    dashboard: DashboardArgs,
}

/// Refuses a URL whose scheme `command` does not take, naming those it does.
fn accepted_scheme(url: &str, command: &str, accepted: &[&str]) -> Result<(), CliError> {
    let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase());
    match scheme {
        Some(s) if accepted.contains(&s.as_str()) => Ok(()),
        _ => Err(CliError::Input(format!(
            "{url}: {command} takes {}",
            accepted
                .iter()
                .map(|s| format!("{s}://HOST:PORT"))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

pub(super) async fn load(mut a: LoadArgs) -> Result<Outcome, CliError> {
    accepted_scheme(&a.url, "harness load", &["http", "https", "grpc", "grpcs"])?;
    let grpc = ::grpc::target::is_grpc_url(&a.url);
    a.connect.http2 |= grpc;
    let duration = a.duration;
    let (output, dashboard) = (a.output.clone(), a.dashboard.clone());
    let (abort_on_fail, abort_after) = (a.abort_on_fail, a.abort_after);
    if let Some(d) = &a.data {
        if yaml_config::parse_duration(d).is_ok() {
            eprintln!(
                "note: -d {d:?} is the request body (as in curl and oha); the load's duration is \
                 -z / --duration"
            );
        }
    }
    let body = match (&a.data, &a.data_file) {
        (Some(d), _) => Some(d.clone()),
        (None, Some(p)) => Some(std::fs::read_to_string(p).map_err(|e| {
            CliError::Input(format!("-D {}: cannot read it as text: {e}", p.display()))
        })?),
        (None, None) => None,
    };
    // A gRPC call's message is JSON, given with -d as with --json.
    let (json, data) = if grpc {
        (a.json.or(body), None)
    } else {
        (a.json, body)
    };
    let connect = a.connect.connect()?;
    let grpc_flags = match (grpc, a.call) {
        (true, Some(call)) => {
            let reflected = if crate::load::needs_reflection(&call, &a.protos, a.reflect) {
                if !a.import_paths.is_empty() {
                    return Err(CliError::Input(
                        "--import-path without --proto: name the .proto files with --proto".into(),
                    ));
                }
                let schema = crate::load::reflect(&a.url, &connect, a.timeout)
                    .await
                    .map_err(|e| match e {
                        crate::load::ReflectError::Unreachable(m) => CliError::Run(m),
                        crate::load::ReflectError::NoSchema(m) => {
                            CliError::Input(format!("--call {call}: {m}"))
                        }
                    })?;
                Some(schema)
            } else {
                None
            };
            Some(crate::load::GrpcFlags {
                call,
                protos: a.protos,
                import_paths: a.import_paths,
                deadline: a.deadline,
                reflected,
            })
        }
        (true, None) => {
            return Err(CliError::Input(format!(
                "{}: a gRPC target needs the method to call: --call pkg.Service/Method",
                a.url
            )))
        }
        (false, call) => {
            if call.is_some() || !a.protos.is_empty() || a.deadline.is_some() || a.reflect {
                return Err(CliError::Input(format!(
                    "--call, --proto, --reflect and --deadline are for a gRPC target: grpc://HOST:PORT, not {}",
                    a.url
                )));
            }
            None
        }
    };
    let opts = crate::load::LoadOptions::from_flags(crate::load::LoadFlags {
        url: a.url,
        rate: a.rate,
        concurrency: a.concurrency,
        duration,
        requests: a.requests,
        method: a.method,
        headers: a.headers,
        json,
        data,
        content_type: a.content_type,
        grpc: grpc_flags,
        timeout: a.timeout,
        connections: a.connections,
        connect,
        thresholds: a.thresholds,
        max_error_rate: a.max_error_rate,
    })
    .map_err(CliError::Input)?;
    let mut opts = opts;
    let title = format!("load {}", opts.target.url);
    opts.live = dashboard.start(&title).await?;
    if abort_on_fail {
        opts.live
            .get_or_insert_with(|| crate::live::Board::headless(&title));
        opts.abort_after = Some(abort_after);
    }
    if let Some(board) = &opts.live {
        board.checks(vec!["thresholds".to_string()], opts.thresholds.clone());
    }
    let stop = stop_on_signals();
    let report = crate::load::run(&opts, stop, crate::progress::wanted())
        .await
        .map_err(|e| CliError::Run(e.to_string()))?;
    if let Some(board) = &opts.live {
        board.finish(&report).await;
    }
    emit(&report, &output)
}
