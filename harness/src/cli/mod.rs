//! The `harness` command line: flags are parsed and validated here, once, then handed to the
//! library as resolved values.
//!
//! Exit codes: `0` every check passed; `1` a check failed; `2` bad input (usage, scenario file,
//! journal); `3` the run could not be carried out (target unreachable, port in use).

mod deliver;

use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use reports::Report;
use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio_util::sync::CancellationToken;

use crate::http::Connect;
use crate::plan::SyncMode;
use crate::scenario::{self, Overrides};
use crate::tls::TlsOptions;

/// Chaos and load testing: faults, retries and real concurrency, checked.
#[derive(Debug, Parser)]
#[command(name = "harness", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Threads the run's async runtime has (default: one per core), and the threads an HTTP/2
    /// or gRPC load drives its connections on (default: one per core, half of them against a
    /// server on this machine). Against a server on the same machine, fewer often go further,
    /// leaving the cores to the server (as wrk's and h2load's `-t 1`).
    #[arg(
        long,
        global = true,
        value_name = "N",
        env = "HARNESS_THREADS",
        value_parser = clap::value_parser!(u16).range(1..=1024)
    )]
    threads: Option<u16>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a scenario file: embedded fault server and/or target URL, the load phases, the checks.
    Run {
        /// The scenario file (YAML).
        scenario: PathBuf,
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        shards: ShardArgs,
    },
    /// Merge the reports of a run's shards into one report, judge the checks on the union of
    /// the fault-server replicas' journals, and exit as `run` does.
    Merge {
        /// The shards' report.json files.
        #[arg(required = true, value_name = "REPORT")]
        reports: Vec<PathBuf>,
        /// Journal files of the fault-server replicas (JSON lines).
        #[arg(long, value_name = "FILE", num_args = 1.., conflicts_with = "fault_url")]
        journal: Vec<PathBuf>,
        /// Fault-server replicas to fetch the journals from (`GET /__harness/journal`).
        #[arg(long, value_name = "URL", num_args = 1..)]
        fault_url: Vec<String>,
        /// Bearer token of the replicas' control API.
        #[arg(
            long,
            value_name = "TOKEN",
            env = "FAULT_SERVER_CONTROL_TOKEN",
            hide_env_values = true
        )]
        control_token: Option<String>,
        #[command(flatten)]
        connect: ConnectArgs,
        #[command(flatten)]
        output: Output,
    },
    /// Start the scenario's fault server, run CMD with HARNESS_FAULT_URL set to it
    /// (HARNESS_PROXY_<NAME>_ADDR to each of its TCP proxies, and the
    /// scenario's phases, if any, against its target), then check what happened.
    Exec {
        /// The scenario file (YAML).
        scenario: PathBuf,
        #[command(flatten)]
        common: Common,
        /// How long to wait for the target to accept connections after CMD starts.
        #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
        wait: Duration,
        /// The command and its arguments.
        #[arg(last = true, required = true, value_name = "CMD")]
        command: Vec<String>,
    },
    /// Ad-hoc load against a URL: open model (`--rate`) or closed (`--concurrency`).
    Load(LoadArgs),
    /// Probe any endpoint's Idempotency-Key handling: concurrent same-key bursts, a replay, a
    /// different body with the same key, and no key.
    Idempotency(IdempotencyArgs),
    /// Play a webhook provider against a consumer: signed deliveries, at least once, with
    /// duplicates, reordering, forgeries and lost acknowledgements; then the delivery checks.
    Deliver(Box<deliver::DeliverArgs>),
    /// Probe every unsafe operation of an OpenAPI 3.0/3.1 document for what its method
    /// promises: keyed POST/PATCH by same-key bursts, unkeyed POST/PATCH by a retry after a lost
    /// response, PUT/DELETE repeated and concurrent. One row per operation.
    Audit(AuditArgs),
    /// Write a commented scenario file per unsafe operation of an OpenAPI document: the audit's
    /// probe of that operation, through the embedded fault server in front of the API.
    Init(InitArgs),
    /// Simulations that need no network.
    Simulate {
        #[command(subcommand)]
        what: Simulation,
    },
    /// Run the checks on journal files written by fault servers (several: merged by wall clock).
    Analyze {
        /// The journals (JSON lines).
        #[arg(required = true, value_name = "JOURNAL")]
        journal: Vec<PathBuf>,
        /// Checks and thresholds (YAML, the `checks:` section of a scenario).
        #[arg(long, value_name = "FILE")]
        checks: Option<PathBuf>,
        #[command(flatten)]
        output: Output,
    },
    /// Render a saved report again, or compare two.
    Report {
        /// `report.json` of a run (with `--compare`: the baseline).
        report: PathBuf,
        /// Compare against this newer report; exit 1 on a regression beyond the tolerances.
        #[arg(long, value_name = "NEW.json")]
        compare: Option<PathBuf>,
        /// Tolerances for `--compare` (YAML).
        #[arg(long, value_name = "FILE")]
        tolerances: Option<PathBuf>,
        /// Output format.
        #[arg(long, value_enum, default_value_t = ReportFormat::Table)]
        format: ReportFormat,
    },
}

/// A run split over several processes (the pods of an Indexed Job).
#[derive(Debug, Args, Default)]
struct ShardArgs {
    /// Run shard I of N (I from 0); without it, JOB_COMPLETION_INDEX and HARNESS_SHARDS.
    #[arg(long, value_name = "I/N")]
    shard: Option<String>,
    /// The run's common start: RFC 3339 or unix milliseconds; every shard waits for it.
    #[arg(long, value_name = "TIME", env = "HARNESS_START_AT")]
    start_at: Option<String>,
}

/// Flags shared by `run` and `exec`.
#[derive(Debug, Args)]
struct Common {
    /// Seed for every random choice (overrides the scenario's).
    #[arg(long, value_name = "N")]
    seed: Option<u64>,
    /// Multiply every scenario duration (0.05 runs a 31 s experiment in about 1.5 s).
    #[arg(long, value_name = "F")]
    time_scale: Option<f64>,
    /// Send the load here instead of the scenario's target.
    #[arg(long, value_name = "URL")]
    target: Option<String>,
    /// Proxy mode: the embedded fault server forwards what no rule answers to this dependency
    /// (overrides the URL of the scenario's `server.upstream`).
    #[arg(long, value_name = "URL", value_parser = fault_server::config::UpstreamUrl::parse)]
    upstream: Option<fault_server::config::UpstreamUrl>,
    #[command(flatten)]
    connect: ConnectArgs,
    #[command(flatten)]
    output: Output,
}

/// How a URL is reached: TLS and the protocol (every command that takes a URL).
#[derive(Debug, Args, Clone, Default)]
pub(crate) struct ConnectArgs {
    /// Trust the CA certificates in this PEM file (besides the public roots).
    #[arg(long, value_name = "FILE")]
    cacert: Option<PathBuf>,
    /// Trust any TLS certificate (a self-made one, say).
    #[arg(short = 'k', long)]
    insecure: bool,
    /// Client certificate (PEM) for mutual TLS; needs --key.
    #[arg(long, value_name = "FILE", requires = "key")]
    cert: Option<PathBuf>,
    /// Private key (PEM) of --cert.
    #[arg(long, value_name = "FILE", requires = "cert")]
    key: Option<PathBuf>,
    /// Speak HTTP/2: ALPN h2 over TLS, prior knowledge (h2c) over plain http.
    #[arg(long)]
    pub(crate) http2: bool,
    /// HTTP/2 (--http2, or a grpc:// URL): concurrent streams (workers) per connection
    /// [default: 100].
    #[arg(long, value_name = "N")]
    streams: Option<u32>,
    /// Connect from this local address (e.g. 127.0.0.4: one loopback address per shard).
    #[arg(long, value_name = "IP", env = "HARNESS_SOURCE_ADDR")]
    source_addr: Option<std::net::IpAddr>,
    /// Largest header list an answer may have (RFC 7541 sizes; advertised to HTTP/2 servers as
    /// SETTINGS_MAX_HEADER_LIST_SIZE); a larger one fails its attempt as `protocol` [default: 64KiB].
    #[arg(long, value_name = "SIZE", value_parser = yaml_config::parse_size)]
    max_header_list: Option<u64>,
}

impl ConnectArgs {
    fn tls(&self) -> TlsOptions {
        TlsOptions {
            ca: self.cacert.clone(),
            insecure: self.insecure,
            cert: self.cert.clone(),
            key: self.key.clone(),
            trusted_pem: Vec::new(),
        }
    }

    /// The settings, for a command with no scenario; `streams` checked against its bounds.
    fn connect(&self) -> Result<Connect, CliError> {
        if self.streams.is_some() && !self.http2 {
            return Err(CliError::Input(
                "--streams needs HTTP/2: add --http2 (a grpc:// URL speaks it already)".into(),
            ));
        }
        let streams = self.streams.unwrap_or(crate::scenario::DEFAULT_STREAMS);
        if streams == 0 || streams > 10_000 {
            return Err(CliError::Input(format!(
                "--streams {streams}: give 1 to 10000 streams per connection"
            )));
        }
        let max_header_list = self
            .max_header_list
            .map(|n| {
                crate::scenario::check_header_list(n)
                    .map_err(|m| CliError::Input(format!("--max-header-list: {m}")))
            })
            .transpose()?;
        Ok(Connect {
            tls: self.tls(),
            http2: self.http2,
            streams,
            source: self.source_addr,
            max_header_list,
            ..Connect::default()
        })
    }
}

/// How a burst's requests are made to arrive together.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum SyncArg {
    /// Open every connection, then write every request at once (HTTP/1.1's default).
    Release,
    /// HTTP/1.1: everything but each request's last byte first, then the last bytes together.
    LastByte,
    /// HTTP/2: every request but its last frame first, then every last frame in one write
    /// (HTTP/2's default).
    SinglePacket,
}

/// Where and how results are written.
#[derive(Debug, Args)]
pub(crate) struct Output {
    /// Write report.json, junit.xml, report.html and summary.md into DIR.
    #[arg(long, value_name = "DIR")]
    report_dir: Option<PathBuf>,
    /// What to print on stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Table,
    Json,
    Markdown,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum ReportFormat {
    Table,
    Json,
    Junit,
    Html,
    Markdown,
}

#[derive(Debug, Subcommand)]
enum Simulation {
    /// The thundering herd: clients that fail together and retry on the same backoff schedule.
    Herd(HerdArgs),
}

/// `harness simulate herd` flags.
#[derive(Debug, Args)]
struct HerdArgs {
    /// Clients that fail together at t = 0.
    #[arg(long, default_value_t = 500)]
    clients: u32,
    /// Retries per client.
    #[arg(long, default_value_t = 5)]
    attempts: u32,
    /// First backoff in seconds, doubling on each retry.
    #[arg(long, default_value_t = 1.0)]
    base: f64,
    /// Longest backoff in seconds (default: no cap within the attempts).
    #[arg(long)]
    cap: Option<f64>,
    /// Counting window in seconds.
    #[arg(long, default_value_t = 0.25)]
    window: f64,
    /// none, full, equal, decorrelated, or all.
    #[arg(long, default_value = "all")]
    jitter: String,
    /// Seed of the random draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// table or json (a list of rows).
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

/// `harness idempotency` flags.
#[derive(Debug, Args)]
struct IdempotencyArgs {
    /// Full URL of the create endpoint, e.g. http://127.0.0.1:8080/orders.
    url: String,
    /// Bursts, each with a fresh key.
    #[arg(long, default_value_t = 20)]
    rounds: usize,
    /// Requests per burst, released together.
    #[arg(short = 'c', long, default_value_t = 10)]
    concurrency: usize,
    /// Method of the create endpoint.
    #[arg(short = 'm', long, default_value = "POST")]
    method: String,
    /// Header carrying the key.
    #[arg(long, default_value = "Idempotency-Key")]
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
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    timeout: Duration,
    /// Makes the keys reproducible.
    #[arg(long)]
    seed: Option<u64>,
    /// How each burst is released [default: release over HTTP/1.1, single-packet over HTTP/2].
    #[arg(long, value_enum, value_name = "MODE")]
    sync: Option<SyncArg>,
    #[command(flatten)]
    connect: ConnectArgs,
    #[command(flatten)]
    output: Output,
}

/// `harness audit` flags.
#[derive(Debug, Args)]
struct AuditArgs {
    /// The OpenAPI document: a file (JSON or YAML) or an http(s):// URL.
    #[arg(long = "openapi", value_name = "SPEC")]
    openapi: String,
    /// The API's base URL (the document's paths are appended to it).
    #[arg(long, value_name = "URL")]
    base: String,
    /// Header sent with every request, `Name: value` (repeatable): credentials.
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    headers: Vec<String>,
    /// Only these operations: operation ids, or path globs starting with `/` (`/orders/*`;
    /// `**` crosses segments). Repeatable, or comma-separated.
    #[arg(long, value_name = "ID|GLOB", value_delimiter = ',')]
    only: Vec<String>,
    /// Not these operations (ids or path globs, as --only).
    #[arg(long, value_name = "ID|GLOB", value_delimiter = ',')]
    skip: Vec<String>,
    /// The idempotency-key header [default: Idempotency-Key, on the operations that declare it].
    /// Given, it is also sent to every POST and PATCH that does not declare it ("forced").
    #[arg(long, value_name = "NAME")]
    key_header: Option<String>,
    /// Same-key bursts per keyed operation.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Requests released together (a burst; concurrent PUTs and DELETEs).
    #[arg(short = 'c', long, default_value_t = 10)]
    concurrency: usize,
    /// Per-request timeout.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    timeout: Duration,
    /// Seeds the requests built from the document (keys are fresh every run).
    #[arg(long, default_value_t = 1)]
    seed: u64,
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

/// `harness init` flags.
#[derive(Debug, Args)]
struct InitArgs {
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
    /// Only these operations (ids or path globs, as `audit --only`).
    #[arg(long, value_name = "ID|GLOB", value_delimiter = ',')]
    only: Vec<String>,
    /// Not these operations (ids or path globs).
    #[arg(long, value_name = "ID|GLOB", value_delimiter = ',')]
    skip: Vec<String>,
    /// The idempotency-key header; given, every POST and PATCH is written with it (as `audit`).
    #[arg(long, value_name = "NAME")]
    key_header: Option<String>,
    /// Same-key bursts in a keyed operation's scenario.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Requests per burst (and concurrent PUTs and DELETEs).
    #[arg(short = 'c', long, default_value_t = 10)]
    concurrency: usize,
    /// Seeds the requests built from the document (the same seed as `audit --seed` builds the
    /// same requests).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Replace files that exist.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    connect: ConnectArgs,
}

/// `harness load` flags.
#[derive(Debug, Args)]
struct LoadArgs {
    /// The URL to load: http(s)://, or grpc(s):// with --call.
    url: String,
    /// Open model: requests per second, whatever the latency.
    #[arg(long, value_name = "R", conflicts_with = "concurrency")]
    rate: Option<f64>,
    /// Closed model: this many connections, each sending its next request when the last ends.
    #[arg(short = 'c', long, value_name = "C")]
    concurrency: Option<u32>,
    /// Stop after this long (default 10s when --requests is not given). For a gRPC call, `-d`
    /// also takes the request message, as grpcurl does: a value that starts with `{`.
    #[arg(short = 'd', long, value_name = "DURATION", value_parser = parse_duration_or_data)]
    duration: Option<DurationOrData>,
    /// Stop after this many requests.
    #[arg(short = 'n', long, value_name = "N")]
    requests: Option<u64>,
    /// HTTP method.
    #[arg(short = 'm', long, default_value = "GET")]
    method: String,
    /// Request header, `Name: value` (repeatable).
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    headers: Vec<String>,
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
    #[command(flatten)]
    connect: ConnectArgs,
    #[command(flatten)]
    output: Output,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    yaml_config::parse_duration(s)
}

/// What `harness load -d` was given: a duration, or a gRPC call's message.
#[derive(Debug, Clone)]
enum DurationOrData {
    /// `-d 10s`.
    Duration(Duration),
    /// `-d '{"sku":"x"}'`.
    Data(String),
}

fn parse_duration_or_data(s: &str) -> Result<DurationOrData, String> {
    if s.trim_start().starts_with('{') {
        return Ok(DurationOrData::Data(s.to_string()));
    }
    parse_duration(s).map(DurationOrData::Duration)
}

/// A failure with its exit code.
enum CliError {
    /// Bad input: exit 2.
    Input(String),
    /// Could not run: exit 3.
    Run(String),
}

impl CliError {
    fn code(&self) -> u8 {
        match self {
            CliError::Input(_) => 2,
            CliError::Run(_) => 3,
        }
    }
}

/// The command line as the parser knows it — every subcommand and flag with its help — for the
/// generated reference (`docs/src/reference/cli.md`).
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

/// Entry point of the `harness` binary.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = cli.threads {
        builder.worker_threads(usize::from(n));
        crate::driver::set_threads(usize::from(n));
    }
    let runtime = match builder.enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(3);
        }
    };
    match runtime.block_on(dispatch(cli.command)) {
        Ok(code) => ExitCode::from(code),
        Err(f) => {
            match &f {
                CliError::Input(m) | CliError::Run(m) => eprintln!("error: {m}"),
            }
            ExitCode::from(f.code())
        }
    }
}

async fn dispatch(cmd: Command) -> Result<u8, CliError> {
    match cmd {
        Command::Run {
            scenario,
            common,
            shards,
        } => run(&scenario, &common, &shards).await,
        Command::Merge {
            reports,
            journal,
            fault_url,
            control_token,
            connect,
            output,
        } => {
            merge(
                &reports,
                &journal,
                &fault_url,
                control_token.as_deref(),
                &connect,
                &output,
            )
            .await
        }
        Command::Exec {
            scenario,
            common,
            wait,
            command,
        } => exec(&scenario, &common, wait, &command).await,
        Command::Load(args) => load(args).await,
        Command::Idempotency(args) => idempotency(args).await,
        Command::Deliver(args) => deliver(*args).await,
        Command::Audit(args) => audit(args).await,
        Command::Init(args) => init(args).await,
        Command::Simulate {
            what: Simulation::Herd(args),
        } => simulate_herd(&args),
        Command::Analyze {
            journal,
            checks,
            output,
        } => analyze(&journal, checks.as_deref(), &output),
        Command::Report {
            report,
            compare,
            tolerances,
            format,
        } => report_cmd(&report, compare.as_deref(), tolerances.as_deref(), format),
    }
}

fn overrides(c: &Common) -> Overrides {
    Overrides {
        seed: c.seed,
        time_scale: c.time_scale,
        target: c.target.clone(),
        tls: c.connect.tls(),
        http2: c.connect.http2,
        streams: c.connect.streams,
        max_header_list: c.connect.max_header_list,
        shard: crate::shard::Shard::WHOLE,
        start_at_unix_ms: None,
        source: c.connect.source_addr,
        upstream: c.upstream.clone(),
    }
}

/// The shard and common start of a run, from the flags and an Indexed Job's environment.
fn shard_overrides(a: &ShardArgs, o: &mut Overrides) -> Result<(), CliError> {
    use crate::shard::{parse_start_at, Shard, MAX_START_AHEAD};
    let shard = match &a.shard {
        Some(s) => Shard::parse(s).map_err(|e| CliError::Input(format!("--shard: {e}")))?,
        None => Shard::from_env(|k| std::env::var(k).ok())
            .map_err(CliError::Input)?
            .unwrap_or(Shard::WHOLE),
    };
    let start_at = match &a.start_at {
        Some(t) => {
            Some(parse_start_at(t).map_err(|e| CliError::Input(format!("--start-at: {e}")))?)
        }
        None => None,
    };
    if let Some(at) = start_at {
        let ahead = at.saturating_sub(crate::shard::now_unix_ms());
        if ahead > MAX_START_AHEAD.as_millis() as u64 {
            return Err(CliError::Input(format!(
                "--start-at: {} is {} s from now; a run starts at most {} s ahead",
                a.start_at.as_deref().unwrap_or_default(),
                ahead / 1000,
                MAX_START_AHEAD.as_secs()
            )));
        }
    }
    if shard.is_split() && start_at.is_none() {
        return Err(CliError::Input(format!(
            "shard {shard}: a run split into shards needs a common start, so that every shard runs each phase together: give --start-at TIME or HARNESS_START_AT (RFC 3339 or unix ms, a little ahead of when the last shard starts)"
        )));
    }
    o.shard = shard;
    o.start_at_unix_ms = start_at;
    Ok(())
}

/// Cancelled on the first Ctrl-C or SIGTERM (what CI sends when it cancels a job): the load
/// stops, what is in flight is cancelled, and the report on what was done is still written,
/// marked interrupted. A second signal exits at once.
fn stop_on_signals() -> CancellationToken {
    let stop = CancellationToken::new();
    let s = stop.clone();
    tokio::spawn(async move {
        let mut term = signal(SignalKind::terminate()).ok();
        if next_signal(&mut term).await.is_some() {
            eprintln!(
                "interrupted: stopping the load, then checking what was done (again to quit at once)"
            );
            s.cancel();
            if let Some(code) = next_signal(&mut term).await {
                std::process::exit(i32::from(code));
            }
        }
    });
    stop
}

/// Waits for Ctrl-C or SIGTERM; the exit code a shell gives a process they kill.
async fn next_signal(term: &mut Option<Signal>) -> Option<u8> {
    let terminated = async {
        match term {
            Some(t) => t.recv().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.is_ok().then_some(130),
        Some(()) = terminated => Some(143),
    }
}

async fn run(path: &Path, common: &Common, shards: &ShardArgs) -> Result<u8, CliError> {
    let mut o = overrides(common);
    shard_overrides(shards, &mut o)?;
    let plan = scenario::load(path, &o).map_err(|e| CliError::Input(e.to_string()))?;
    if plan.phases.is_empty() {
        return Err(CliError::Input(format!(
            "{}: at `phases`: nothing to run; add a phase (or use `harness exec` to drive the load with a command)",
            path.display()
        )));
    }
    let stop = stop_on_signals();
    let outcome = crate::run::run_plan(&plan, stop, crate::progress::wanted())
        .await
        .map_err(|e| CliError::Run(e.to_string()))?;
    emit(&outcome.report, &common.output)
}

async fn exec(
    path: &Path,
    common: &Common,
    wait: Duration,
    command: &[String],
) -> Result<u8, CliError> {
    let plan =
        scenario::load(path, &overrides(common)).map_err(|e| CliError::Input(e.to_string()))?;
    // With phases, the command may be the service under test itself (a webhook consumer the
    // phases deliver to); without them it is the load, and needs a server to load.
    if plan.server.is_none() && plan.phases.is_empty() {
        return Err(CliError::Input(format!(
            "{}: at `server`: `harness exec` needs an embedded fault server to point the command at (or phases that drive the command's service)",
            path.display()
        )));
    }
    let stop = stop_on_signals();
    let mut session = crate::run::Session::start(&plan)
        .await
        .map_err(|e| CliError::Run(e.to_string()))?;
    let url = session.server_url().unwrap_or_default();
    let (program, args) = command
        .split_first()
        .ok_or_else(|| CliError::Input("no command given after --".into()))?;
    // The command's stdout goes to our stderr: stdout carries the report (`--format json` must
    // stay parseable).
    let stdout = std::io::stderr()
        .as_fd()
        .try_clone_to_owned()
        .map(std::process::Stdio::from)
        .unwrap_or_else(|_| std::process::Stdio::inherit());
    // A fault server with a certificate of its own: the command gets it to trust, as a file.
    let ca_file = match session.certificate_pem() {
        Some(pem) => {
            let f = tempfile::Builder::new()
                .prefix("harness-fault-ca")
                .suffix(".pem")
                .tempfile()
                .and_then(|mut f| {
                    f.write_all(pem.as_bytes())?;
                    Ok(f)
                })
                .map_err(|e| CliError::Run(format!("cannot write the fault server's CA: {e}")))?;
            Some(f)
        }
        None => None,
    };
    let mut cmd = tokio::process::Command::new(program);
    if let Some(f) = &ca_file {
        cmd.env("HARNESS_FAULT_CA", f.path());
    }
    if session.server_url().is_some() {
        cmd.env("HARNESS_FAULT_URL", &url);
    }
    cmd.envs(session.proxy_env());
    let mut child = cmd
        .args(args)
        .stdout(stdout)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| CliError::Run(format!("cannot start {program:?}: {e}")))?;
    let drove = !plan.phases.is_empty();
    let driven = session
        .drive(&plan, stop.clone(), crate::progress::wanted(), wait)
        .await;
    let exit_code = if drove {
        // The command is a service under test, still serving: it is stopped once the checks
        // have asked its system of record (the verify step), and its stop is no failure.
        match child.try_wait() {
            Ok(Some(status)) => status.code(),
            _ => Some(0),
        }
    } else {
        tokio::select! {
            status = child.wait() => status.ok().and_then(|s| s.code()),
            () = stop.cancelled() => {
                session.interrupt();
                let _ = child.start_kill();
                child.wait().await.ok().and_then(|s| s.code())
            }
        }
    };
    if let Err(e) = driven {
        return Err(CliError::Run(e.to_string()));
    }
    let exec = reports::model::Exec {
        command: command.to_vec(),
        exit_code,
    };
    let outcome = session.finish(&plan, Some(exec)).await;
    if drove {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    emit(&outcome.report, &common.output)
}

async fn load(mut a: LoadArgs) -> Result<u8, CliError> {
    let grpc = ::grpc::target::is_grpc_url(&a.url);
    a.connect.http2 |= grpc;
    let (duration, data) = match a.duration {
        Some(DurationOrData::Duration(d)) => (Some(d), None),
        Some(DurationOrData::Data(j)) => (None, Some(j)),
        None => (None, None),
    };
    let json = match (data, a.json) {
        (Some(_), Some(_)) => {
            return Err(CliError::Input(
                "the message is given twice: -d '{…}' and --json; give one".into(),
            ))
        }
        (d, j) => d.or(j),
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
        grpc: grpc_flags,
        timeout: a.timeout,
        connections: a.connections,
        connect,
        thresholds: a.thresholds,
        max_error_rate: a.max_error_rate,
    })
    .map_err(CliError::Input)?;
    let stop = stop_on_signals();
    let report = crate::load::run(&opts, stop, crate::progress::wanted())
        .await
        .map_err(|e| CliError::Run(e.to_string()))?;
    emit(&report, &a.output)
}

async fn idempotency(a: IdempotencyArgs) -> Result<u8, CliError> {
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
        .map_err(|e| match e.exit_code() {
            2 => CliError::Input(e.to_string()),
            _ => CliError::Run(e.to_string()),
        })?;
    emit(&crate::run::probe_report(&outcome), &a.output)
}

async fn deliver(a: deliver::DeliverArgs) -> Result<u8, CliError> {
    let connect = a.connect.connect()?;
    let o = Overrides {
        seed: a.seed,
        time_scale: a.time_scale,
        tls: connect.tls.clone(),
        http2: connect.http2,
        streams: a.connect.streams,
        max_header_list: a.connect.max_header_list,
        source: connect.source,
        ..Overrides::default()
    };
    let plan = a.plan(&o).map_err(CliError::Input)?;
    let stop = stop_on_signals();
    let outcome = crate::run::run_plan(&plan, stop, crate::progress::wanted())
        .await
        .map_err(|e| CliError::Run(e.to_string()))?;
    emit(&outcome.report, &a.output)
}

async fn audit(a: AuditArgs) -> Result<u8, CliError> {
    let mut cfg = crate::audit::AuditConfig::new(a.openapi, a.base);
    cfg.headers = parse_headers(&a.headers)?;
    cfg.only = a.only;
    cfg.skip = a.skip;
    if let Some(k) = a.key_header {
        cfg.key_header = k;
        cfg.force_key = true;
    }
    cfg.rounds = a.rounds;
    cfg.concurrency = a.concurrency;
    cfg.timeout = a.timeout;
    cfg.seed = a.seed;
    cfg.verify = a.verify;
    cfg.connect = a.connect.connect()?;
    cfg.sync = sync_mode(a.sync, cfg.connect.http2);
    cfg.stop = stop_on_signals();
    let outcome = crate::audit::audit(&cfg)
        .await
        .map_err(|e| match e.exit_code() {
            2 => CliError::Input(e.to_string()),
            _ => CliError::Run(e.to_string()),
        })?;
    emit(&crate::audit::audit_report(&outcome), &a.output)
}

async fn init(a: InitArgs) -> Result<u8, CliError> {
    let mut cfg = crate::audit::AuditConfig::new(a.from_openapi, a.base.unwrap_or_default());
    cfg.headers = parse_headers(&a.headers)?;
    cfg.only = a.only;
    cfg.skip = a.skip;
    if let Some(k) = a.key_header {
        cfg.key_header = k;
        cfg.force_key = true;
    }
    cfg.rounds = a.rounds;
    cfg.concurrency = a.concurrency;
    cfg.seed = a.seed;
    cfg.connect = a.connect.connect()?;
    let outcome = crate::audit::init::init(&cfg, &a.out, a.force)
        .await
        .map_err(|e| match e.exit_code() {
            2 => CliError::Input(e.to_string()),
            _ => CliError::Run(e.to_string()),
        })?;
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
    Ok(0)
}

/// `-H 'Name: value'` flags as pairs.
fn parse_headers(headers: &[String]) -> Result<Vec<(String, String)>, CliError> {
    headers
        .iter()
        .map(|h| {
            let (k, v) = h
                .split_once(':')
                .ok_or_else(|| CliError::Input(format!("-H {h:?}: expected `Name: value`")))?;
            Ok((k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

/// The release mode asked for, else the protocol's own.
fn sync_mode(arg: Option<SyncArg>, http2: bool) -> SyncMode {
    match (arg, http2) {
        (None, false) => SyncMode::Release,
        (None, true) => SyncMode::SinglePacket,
        (Some(SyncArg::Release), _) => SyncMode::Release,
        (Some(SyncArg::LastByte), _) => SyncMode::LastByte,
        (Some(SyncArg::SinglePacket), _) => SyncMode::SinglePacket,
    }
}

fn simulate_herd(a: &HerdArgs) -> Result<u8, CliError> {
    use crate::simulate::{herd, parse_jitter, HerdConfig, Jitter, KINDS};
    let cfg = HerdConfig {
        clients: a.clients,
        attempts: a.attempts,
        base_s: a.base,
        cap_s: a.cap,
        window_s: a.window,
        seed: a.seed,
    };
    let kinds: Vec<Jitter> = if a.jitter == "all" {
        KINDS.to_vec()
    } else {
        vec![parse_jitter(&a.jitter).map_err(|e| CliError::Input(format!("--jitter: {e}")))?]
    };
    let mut rows = Vec::new();
    for j in kinds {
        rows.push(herd(&cfg, j).map_err(|e| CliError::Input(e.to_string()))?);
    }
    let text = match a.format {
        Format::Json => {
            serde_json::to_string_pretty(&rows).map_err(|e| CliError::Run(e.to_string()))?
        }
        Format::Table | Format::Markdown => {
            let mut t = format!(
                "{} clients fail at t=0, {} retries from {} s doubling; retries per {} s window\n\n",
                cfg.clients, cfg.attempts, cfg.base_s, cfg.window_s
            );
            t.push_str(&format!(
                "{:<14} {:>8} {:>16} {:>11} {:>9} {:>11}\n",
                "jitter", "retries", "peak per window", "peak req/s", "busy s", "last retry"
            ));
            for r in &rows {
                t.push_str(&format!(
                    "{:<14} {:>8} {:>16} {:>11.0} {:>9.2} {:>10.2}s\n",
                    r.jitter.as_str(),
                    r.retries,
                    r.peak_per_window,
                    r.peak_per_s,
                    r.busy_s,
                    r.end_s
                ));
            }
            t
        }
    };
    print_out(&text)?;
    Ok(0)
}

fn analyze(journals: &[PathBuf], checks: Option<&Path>, output: &Output) -> Result<u8, CliError> {
    let cfg = match checks {
        Some(p) => {
            let text = std::fs::read_to_string(p)
                .map_err(|e| CliError::Input(format!("{}: cannot read: {e}", p.display())))?;
            checks::ChecksConfig::parse(&text, &p.display().to_string())
                .map_err(|e| CliError::Input(e.to_string()))?
        }
        None => checks::ChecksConfig::default(),
    };
    let report = match journals {
        [one] => {
            crate::analyze::analyze_file(one, &cfg).map_err(|e| CliError::Input(e.to_string()))?
        }
        several => {
            // Merged by wall clock into a file of their own, then read as one journal.
            let tmp = tempfile::NamedTempFile::new()
                .map_err(|e| CliError::Run(format!("cannot create a temporary file: {e}")))?;
            let union =
                crate::merge::merge_journals(several, tmp.path(), None).map_err(merge_error)?;
            let mut r = crate::analyze::analyze_file(tmp.path(), &cfg)
                .map_err(|e| CliError::Input(e.to_string()))?;
            let names: Vec<String> = several.iter().map(|p| p.display().to_string()).collect();
            r.scenario = format!("analyze {}", names.join(" "));
            r.notes
                .push(crate::merge::clock_note(&union, several.len()));
            r
        }
    };
    emit(&report, output)
}

/// Largest `report.json` read: a run's report is a few hundred KiB at most (nothing in it grows
/// with the requests), so a bigger file is not one, and is refused before it is read.
const REPORT_MAX_BYTES: u64 = 64 << 20;

/// A saved report, read within [`REPORT_MAX_BYTES`]; bad input (exit 2) in words otherwise.
fn read_report(p: &Path) -> Result<Report, CliError> {
    use std::io::Read as _;
    let bad = |m: String| CliError::Input(format!("{}: {m}", p.display()));
    let file = std::fs::File::open(p).map_err(|e| bad(format!("cannot read: {e}")))?;
    let mut text = String::new();
    file.take(REPORT_MAX_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| bad(format!("cannot read: {e}")))?;
    if text.len() as u64 > REPORT_MAX_BYTES {
        return Err(bad(format!(
            "more than {} MiB: not a report.json the harness wrote (a report holds histograms, \
             not samples)",
            REPORT_MAX_BYTES >> 20
        )));
    }
    reports::from_json(&text).map_err(|e| bad(e.to_string()))
}

fn merge_error(e: crate::merge::MergeError) -> CliError {
    match e {
        crate::merge::MergeError::Input(m) => CliError::Input(m),
        crate::merge::MergeError::Journal(e) => CliError::Input(e.to_string()),
        crate::merge::MergeError::Run(m) => CliError::Run(m),
    }
}

async fn merge(
    paths: &[PathBuf],
    journals: &[PathBuf],
    fault_urls: &[String],
    token: Option<&str>,
    connect: &ConnectArgs,
    output: &Output,
) -> Result<u8, CliError> {
    let mut reports = Vec::with_capacity(paths.len());
    for p in paths {
        reports.push((p.display().to_string(), read_report(p)?));
    }
    let merged = crate::merge::merge_reports(&reports).map_err(merge_error)?;
    drop(reports);
    // Fetched journals go to files of their own first: one replica's journal in memory at a time.
    let fetched_dir = tempfile::tempdir()
        .map_err(|e| CliError::Run(format!("cannot create a temporary directory: {e}")))?;
    let mut sources: Vec<PathBuf> = journals.to_vec();
    if !fault_urls.is_empty() {
        let how = connect.connect()?;
        for (i, url) in fault_urls.iter().enumerate() {
            let dest = fetched_dir.path().join(format!("replica-{i}.jsonl"));
            crate::merge::fetch_journal(url, token, &how, &dest)
                .await
                .map_err(CliError::Run)?;
            sources.push(dest);
        }
    }
    let report = if sources.is_empty() {
        crate::merge::judge(merged, None).map_err(merge_error)?
    } else {
        let (out, _keep) = match &output.report_dir {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .map_err(|e| CliError::Run(format!("{}: cannot create: {e}", dir.display())))?;
                (dir.join("journal.jsonl"), None)
            }
            None => {
                let tmp = tempfile::NamedTempFile::new()
                    .map_err(|e| CliError::Run(format!("cannot create a temporary file: {e}")))?;
                (tmp.path().to_path_buf(), Some(tmp))
            }
        };
        let base = merged.report.started_unix_ms.saturating_mul(1000);
        let union =
            crate::merge::merge_journals(&sources, &out, Some(base)).map_err(merge_error)?;
        crate::merge::judge(merged, Some((&out, &union, sources.len()))).map_err(merge_error)?
    };
    emit(&report, output)
}

fn report_cmd(
    path: &Path,
    compare: Option<&Path>,
    tolerances: Option<&Path>,
    format: ReportFormat,
) -> Result<u8, CliError> {
    let base = read_report(path)?;
    let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    if let Some(new_path) = compare {
        let new = read_report(new_path)?;
        let tol = match tolerances {
            Some(p) => {
                let text = std::fs::read_to_string(p)
                    .map_err(|e| CliError::Input(format!("{}: cannot read: {e}", p.display())))?;
                yaml_config::from_yaml_str::<reports::compare::Tolerances>(
                    &text,
                    &p.display().to_string(),
                )
                .map_err(|e| CliError::Input(e.to_string()))?
            }
            None => reports::compare::Tolerances::default(),
        };
        let cmp = reports::compare::compare(&base, &new, &tol);
        let text = match format {
            ReportFormat::Json => cmp.to_json_pretty(),
            _ => cmp.render_terminal(color),
        };
        print_out(&text)?;
        return Ok(u8::from(cmp.is_regression()));
    }
    let fmt = match format {
        ReportFormat::Table => reports::Format::Table,
        ReportFormat::Json => reports::Format::Json,
        ReportFormat::Junit => reports::Format::Junit,
        ReportFormat::Html => reports::Format::Html,
        ReportFormat::Markdown => reports::Format::Markdown,
    };
    let text = reports::render(&base, fmt, color).map_err(|e| CliError::Run(e.to_string()))?;
    print_out(&text)?;
    Ok(base.outcome().exit_code())
}

fn print_out(text: &str) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    let r = out.write_all(text.as_bytes()).and_then(|_| {
        if text.ends_with('\n') {
            Ok(())
        } else {
            out.write_all(b"\n")
        }
    });
    match r {
        Ok(()) => Ok(()),
        // A closed pipe (`| head`) is not an error worth a message.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(CliError::Run(format!("cannot write to stdout: {e}"))),
    }
}

/// Writes the report directory and prints the chosen format; returns whether the run passed.
fn emit(report: &Report, output: &Output) -> Result<u8, CliError> {
    if let Some(dir) = &output.report_dir {
        reports::write_report_dir(report, dir).map_err(|e| CliError::Run(e.to_string()))?;
    }
    let color = std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let text = match output.format {
        Format::Table => reports::render(report, reports::Format::Table, color),
        Format::Json => reports::render(report, reports::Format::Json, false),
        Format::Markdown => reports::render(report, reports::Format::Markdown, false),
    }
    .map_err(|e| CliError::Run(e.to_string()))?;
    print_out(&text)?;
    Ok(report.outcome().exit_code())
}
