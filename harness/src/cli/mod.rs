//! The `harness` command line: flags are parsed and validated here, once, then handed to the
//! library as resolved values.
//!
//! This file holds the parser's top (`Cli`, `Command`) and the dispatch; `args.rs` the flag
//! groups several commands share; one file per command's handler (`run.rs`, `exec.rs`,
//! `load.rs`, `conform.rs`, `idempotency.rs`, `deliver.rs`, `audit.rs`, `init.rs`, `simulate.rs`,
//! `analyze.rs`, `merge.rs`, `report.rs`), none naming another; `output.rs` what they print;
//! `signals.rs` Ctrl-C and SIGTERM; `exit.rs` the one place an outcome or a failure's kind
//! becomes an exit number: `0` every check passed; `1` a check failed or nothing was decided;
//! `2` bad input (usage, scenario file, journal); `3` the run could not be carried out (target
//! unreachable, port in use); `4` interrupted, what was done still judged; `130` or `143` a
//! second signal.

mod analyze;
mod args;
mod audit;
mod conform;
mod deliver;
mod exec;
pub mod exit;
mod idempotency;
mod init;
mod load;
mod merge;
mod output;
mod report;
mod run;
mod signals;
mod simulate;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use reports::Outcome;

use args::{parse_duration, Common, Output, ShardArgs, TlsArgs};
use exit::CliError;

/// Chaos and load testing: faults, retries and real concurrency, checked.
#[derive(Debug, Parser)]
#[command(name = "harness", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Threads for the runtime and HTTP/2 connections (default: one per core; see the book's
    /// load page).
    #[arg(
        long,
        global = true,
        value_name = "N",
        env = "HARNESS_THREADS",
        hide_env_values = true,
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
        tls: TlsArgs,
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
    Load(load::LoadArgs),
    /// Hold a retrying client to a suite of rules: its adapter (CMD) run once per case against
    /// the embedded fault server, one scorecard row per rule (`--list` shows them).
    Conform(conform::ConformArgs),
    /// Probe any endpoint's Idempotency-Key handling: concurrent same-key bursts, a replay, a
    /// different body with the same key, and no key.
    Idempotency(idempotency::IdempotencyArgs),
    /// Play a webhook provider against a consumer: signed deliveries, at least once, with
    /// duplicates, reordering, forgeries and lost acknowledgements; then the delivery checks.
    Deliver(Box<deliver::DeliverArgs>),
    /// Probe every unsafe operation of an OpenAPI 3.0/3.1 document for what its method
    /// promises: keyed POST/PATCH by same-key bursts, unkeyed POST/PATCH by a retry after a lost
    /// response, PUT/DELETE repeated and concurrent. One row per operation.
    Audit(audit::AuditArgs),
    /// Write a commented scenario file per unsafe operation of an OpenAPI document: the audit's
    /// probe of that operation, through the embedded fault server in front of the API.
    Init(init::InitArgs),
    /// Simulations that need no network.
    Simulate {
        #[command(subcommand)]
        what: simulate::Simulation,
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
        /// Compare against this newer report; exit 1 on a regression beyond the tolerances, or
        /// when a check the baseline judged is missing or newly inconclusive.
        #[arg(long, value_name = "NEW.json")]
        compare: Option<PathBuf>,
        /// Tolerances for `--compare` (YAML).
        #[arg(long, value_name = "FILE", requires = "compare")]
        tolerances: Option<PathBuf>,
        /// With `--compare`: accept a new run that judged less (a check missing, or
        /// inconclusive where the baseline decided).
        #[arg(long, requires = "compare")]
        allow_missing: bool,
        /// With `--compare`: compare reports of different scenarios (names or checks differ)
        /// instead of refusing (exit 2).
        #[arg(long, requires = "compare")]
        force: bool,
        /// Output format.
        #[arg(long, value_enum, default_value_t = report::ReportFormat::Table)]
        format: report::ReportFormat,
    },
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
            return exit::usage(&e);
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
        Err(e) => return exit::could_not_start(&format!("cannot start the async runtime: {e}")),
    };
    exit::status(runtime.block_on(dispatch(cli.command)))
}

async fn dispatch(cmd: Command) -> Result<Outcome, CliError> {
    match cmd {
        Command::Run {
            scenario,
            common,
            shards,
        } => run::run(&scenario, &common, &shards).await,
        Command::Merge {
            reports,
            journal,
            fault_url,
            control_token,
            tls,
            output,
        } => {
            merge::merge(
                &reports,
                &journal,
                &fault_url,
                control_token.as_deref(),
                &tls,
                &output,
            )
            .await
        }
        Command::Exec {
            scenario,
            common,
            wait,
            command,
        } => exec::exec(&scenario, &common, wait, &command).await,
        Command::Load(args) => load::load(args).await,
        Command::Conform(args) => conform::conform(args).await,
        Command::Idempotency(args) => idempotency::idempotency(args).await,
        Command::Deliver(args) => deliver::deliver(*args).await,
        Command::Audit(args) => audit::audit(args).await,
        Command::Init(args) => init::init(args).await,
        Command::Simulate {
            what: simulate::Simulation::Herd(args),
        } => simulate::simulate_herd(&args),
        Command::Analyze {
            journal,
            checks,
            output,
        } => analyze::analyze(&journal, checks.as_deref(), &output),
        Command::Report {
            report,
            compare,
            tolerances,
            allow_missing,
            force,
            format,
        } => report::report_cmd(
            &report,
            compare.as_deref(),
            report::CompareFlags {
                tolerances: tolerances.as_deref(),
                allow_missing,
                force,
            },
            format,
        ),
    }
}
