//! The flag groups several commands share, each defined once: how a URL is reached
//! ([`ConnectArgs`]), where results go ([`Output`]), how a burst is released ([`SyncArg`]), a
//! run's shard ([`ShardArgs`]), what `run` and `exec` share ([`Common`]) and what `audit` and
//! `init` share ([`OperationArgs`]); and the small parsers of flag values.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::exit::CliError;
use crate::http::Connect;
use crate::plan::SyncMode;
use crate::scenario::Overrides;
use crate::tls::TlsOptions;

/// A run split over several processes (the pods of an Indexed Job).
#[derive(Debug, Args, Default)]
pub(super) struct ShardArgs {
    /// Run shard I of N (I from 0); without it, JOB_COMPLETION_INDEX and HARNESS_SHARDS.
    #[arg(long, value_name = "I/N")]
    pub(super) shard: Option<String>,
    /// The run's common start: RFC 3339 or unix milliseconds; every shard waits for it.
    #[arg(
        long,
        value_name = "TIME",
        env = "HARNESS_START_AT",
        hide_env_values = true
    )]
    pub(super) start_at: Option<String>,
}

/// Flags shared by `run` and `exec`.
#[derive(Debug, Args)]
pub(super) struct Common {
    /// Seed for every random choice (overrides the scenario's).
    #[arg(long, value_name = "N")]
    pub(super) seed: Option<u64>,
    /// Multiply every scenario duration (0.05 runs a 31 s experiment in about 1.5 s).
    #[arg(long, value_name = "F")]
    pub(super) time_scale: Option<f64>,
    /// Send the load here instead of the scenario's target.
    #[arg(long, value_name = "URL")]
    pub(super) target: Option<String>,
    /// Proxy mode: the embedded fault server forwards what no rule answers to this dependency
    /// (overrides the URL of the scenario's `server.upstream`).
    #[arg(long, value_name = "URL", value_parser = fault_server::config::UpstreamUrl::parse)]
    pub(super) upstream: Option<fault_server::config::UpstreamUrl>,
    #[command(flatten)]
    pub(super) connect: ConnectArgs,
    #[command(flatten)]
    pub(super) output: Output,
    #[command(flatten)]
    pub(super) dashboard: DashboardArgs,
}

/// `--dashboard`: the run, live, in a browser (`run`, `exec`, `load`, `deliver`).
#[derive(Debug, Args, Clone, Default)]
pub(super) struct DashboardArgs {
    /// Serve a live dashboard of the run: a page at /, a snapshot a second as Server-Sent
    /// Events at /events, the latest at /snapshot and as Prometheus metrics at /metrics. ADDR is IP or IP:PORT (default 127.0.0.1 and
    /// a free port); the URL is printed when the run starts
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1")]
    pub(super) dashboard: Option<String>,
}

impl DashboardArgs {
    /// Starts the dashboard when asked for, and says where it is on stderr.
    pub(super) async fn start(
        &self,
        title: &str,
    ) -> Result<Option<std::sync::Arc<crate::live::Board>>, CliError> {
        let Some(given) = &self.dashboard else {
            return Ok(None);
        };
        let addr = parse_dashboard_addr(given)?;
        let board = crate::live::Board::start(title, addr).await.map_err(|e| {
            use std::io::ErrorKind;
            let why = format!("--dashboard {given}: cannot listen there: {e}");
            match e.kind() {
                // The address given is the fault: taken, not this machine's, or not ours to use.
                ErrorKind::AddrInUse => CliError::Input(format!(
                    "{why}; give another port, or an IP alone for a free one"
                )),
                ErrorKind::AddrNotAvailable | ErrorKind::PermissionDenied => CliError::Input(why),
                _ => CliError::Run(why),
            }
        })?;
        eprintln!("dashboard: {}", board.url());
        Ok(Some(board))
    }
}

/// `--dashboard`'s ADDR: an IP address (then a free port) or IP:PORT.
fn parse_dashboard_addr(s: &str) -> Result<std::net::SocketAddr, CliError> {
    if let Ok(ip) = s.parse::<std::net::IpAddr>() {
        return Ok(std::net::SocketAddr::new(ip, 0));
    }
    s.parse::<std::net::SocketAddr>().map_err(|_| {
        CliError::Input(format!(
            "--dashboard {s:?}: expected an IP address or IP:PORT, e.g. 127.0.0.1 or 127.0.0.1:8089"
        ))
    })
}

/// How TLS is spoken to a URL (every command that fetches one).
#[derive(Debug, Args, Clone, Default)]
pub(super) struct TlsArgs {
    /// Trust the CA certificates in this PEM file (besides the public roots).
    #[arg(long, value_name = "FILE")]
    pub(super) cacert: Option<PathBuf>,
    /// Trust any TLS certificate (a self-made one, say).
    #[arg(short = 'k', long)]
    pub(super) insecure: bool,
    /// Client certificate (PEM) for mutual TLS; needs --key.
    #[arg(long, value_name = "FILE", requires = "key")]
    pub(super) cert: Option<PathBuf>,
    /// Private key (PEM) of --cert.
    #[arg(long, value_name = "FILE", requires = "cert")]
    pub(super) key: Option<PathBuf>,
}

impl TlsArgs {
    pub(super) fn options(&self) -> TlsOptions {
        TlsOptions {
            ca: self.cacert.clone(),
            insecure: self.insecure,
            cert: self.cert.clone(),
            key: self.key.clone(),
            trusted_pem: Vec::new(),
        }
    }

    /// The settings for a command that only fetches (HTTP/1.1, this TLS).
    pub(super) fn connect(&self) -> Connect {
        Connect {
            tls: self.options(),
            ..Connect::default()
        }
    }
}

/// How a URL is loaded: TLS and the protocol (every command that sends load to a URL).
#[derive(Debug, Args, Clone, Default)]
pub(super) struct ConnectArgs {
    #[command(flatten)]
    pub(super) tls: TlsArgs,
    /// Speak HTTP/2: ALPN h2 over TLS, prior knowledge (h2c) over plain http.
    #[arg(long)]
    pub(crate) http2: bool,
    /// HTTP/2 (--http2, or a grpc:// URL): concurrent streams (workers) per connection
    /// [default: 100].
    #[arg(long, value_name = "N")]
    pub(super) streams: Option<u32>,
    /// Connect from this local address (e.g. 127.0.0.4: one loopback address per shard).
    #[arg(
        long,
        value_name = "IP",
        env = "HARNESS_SOURCE_ADDR",
        hide_env_values = true
    )]
    pub(super) source_addr: Option<std::net::IpAddr>,
    /// Largest header list an answer may have (RFC 7541 sizes; advertised to HTTP/2 servers as
    /// SETTINGS_MAX_HEADER_LIST_SIZE); a larger one fails its attempt as `protocol` [default: 64KiB].
    #[arg(long, value_name = "SIZE", value_parser = yaml_config::parse_size)]
    pub(super) max_header_list: Option<u64>,
}

impl ConnectArgs {
    pub(super) fn tls(&self) -> TlsOptions {
        self.tls.options()
    }

    /// The settings, for a command with no scenario; `streams` checked against its bounds.
    pub(super) fn connect(&self) -> Result<Connect, CliError> {
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
pub(super) enum SyncArg {
    /// Open every connection, then write every request at once (HTTP/1.1's default).
    Release,
    /// HTTP/1.1: everything but each request's last byte first, then the last bytes together.
    LastByte,
    /// HTTP/2: every request but its last frame first, then every last frame in one write
    /// (HTTP/2's default).
    SinglePacket,
}

/// The release mode asked for, else the protocol's own.
pub(super) fn sync_mode(arg: Option<SyncArg>, http2: bool) -> SyncMode {
    match (arg, http2) {
        (None, false) => SyncMode::Release,
        (None, true) => SyncMode::SinglePacket,
        (Some(SyncArg::Release), _) => SyncMode::Release,
        (Some(SyncArg::LastByte), _) => SyncMode::LastByte,
        (Some(SyncArg::SinglePacket), _) => SyncMode::SinglePacket,
    }
}

/// Where and how results are written.
#[derive(Debug, Args, Clone)]
pub(super) struct Output {
    /// Write report.json, junit.xml, report.html and summary.md into DIR.
    #[arg(long, value_name = "DIR")]
    pub(super) report_dir: Option<PathBuf>,
    /// What to print on stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub(super) format: Format,
}

/// What a command prints on stdout.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(super) enum Format {
    Table,
    Json,
    Markdown,
}

/// The flags `audit` and `init` share: which operations of the document, the key header, the
/// bursts' shape and the seed the requests are built from.
#[derive(Debug, Args)]
pub(super) struct OperationArgs {
    /// Only these operations: operation ids, or path globs starting with `/` (`/orders/*`;
    /// `**` crosses segments). Repeatable, or comma-separated.
    #[arg(long, value_name = "ID|GLOB", value_delimiter = ',')]
    pub(super) only: Vec<String>,
    /// Not these operations (ids or path globs, as --only).
    #[arg(long, value_name = "ID|GLOB", value_delimiter = ',')]
    pub(super) skip: Vec<String>,
    /// The idempotency-key header [default: Idempotency-Key, on the operations that declare it].
    /// Given, it is also sent to every POST and PATCH that does not declare it ("forced").
    #[arg(long, value_name = "NAME")]
    pub(super) key_header: Option<String>,
    /// Same-key bursts per keyed operation.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub(super) rounds: usize,
    /// Requests in flight at once: each burst's, sent together (and the concurrent PUTs and
    /// DELETEs).
    #[arg(short = 'c', long, value_name = "N", default_value_t = 10)]
    pub(super) concurrency: usize,
    /// Seeds the requests built from the document: `audit` and `init` build the same requests
    /// from the same seed (keys are fresh every run).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(super) seed: u64,
}

impl OperationArgs {
    /// Sets these flags' part of an audit's configuration.
    pub(super) fn apply(self, cfg: &mut crate::audit::AuditConfig) {
        cfg.only = self.only;
        cfg.skip = self.skip;
        if let Some(k) = self.key_header {
            cfg.key_header = k;
            cfg.force_key = true;
        }
        cfg.rounds = self.rounds;
        cfg.concurrency = self.concurrency;
        cfg.seed = self.seed;
    }
}

pub(super) fn overrides(c: &Common) -> Overrides {
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
pub(super) fn shard_overrides(a: &ShardArgs, o: &mut Overrides) -> Result<(), CliError> {
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

/// `-H 'Name: value'` flags as pairs.
pub(super) fn parse_headers(headers: &[String]) -> Result<Vec<(String, String)>, CliError> {
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

pub(super) fn parse_duration(s: &str) -> Result<Duration, String> {
    yaml_config::parse_duration(s)
}
