//! `harness simulate herd`: the thundering-herd simulation, no network.

use std::time::Duration;

use clap::{Args, Subcommand};
use reports::Outcome;

use super::args::{parse_duration, Format};
use super::exit::CliError;
use super::output::print_out;

#[derive(Debug, Subcommand)]
pub(super) enum Simulation {
    /// The thundering herd: clients that fail together and retry on the same backoff schedule.
    Herd(HerdArgs),
}

/// `harness simulate herd` flags.
#[derive(Debug, Args)]
pub(super) struct HerdArgs {
    /// Clients that fail together at t = 0.
    #[arg(long, value_name = "N", default_value_t = 500)]
    clients: u32,
    /// Retries per client, after the request that failed with every other client's.
    #[arg(
        long = "retries",
        alias = "attempts",
        value_name = "N",
        default_value_t = 5
    )]
    attempts: u32,
    /// First backoff, doubling on each retry, e.g. `1s` or `100ms`.
    #[arg(long = "backoff", value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    base: Duration,
    /// Longest backoff, e.g. `30s` (default: no cap within the attempts).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    cap: Option<Duration>,
    /// Counting window, e.g. `250ms`.
    #[arg(long, value_name = "DURATION", default_value = "250ms", value_parser = parse_duration)]
    window: Duration,
    /// none, full, equal, decorrelated, or all.
    #[arg(long, value_name = "KIND", default_value = "all")]
    jitter: String,
    /// Seed of the random draws.
    #[arg(long, value_name = "N", default_value_t = 1)]
    seed: u64,
    /// table, json (a list of rows) or markdown.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    format: Format,
}

pub(super) fn simulate_herd(a: &HerdArgs) -> Result<Outcome, CliError> {
    use crate::simulate::{herd, parse_jitter, HerdConfig, Jitter, KINDS};
    let cfg = HerdConfig {
        clients: a.clients,
        attempts: a.attempts,
        base_s: a.base.as_secs_f64(),
        cap_s: a.cap.map(|c| c.as_secs_f64()),
        window_s: a.window.as_secs_f64(),
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
        Format::Markdown => {
            let mut t = format!(
                "{} clients fail at t=0, {} retries from {} s doubling; retries per {} s window\n\n",
                cfg.clients, cfg.attempts, cfg.base_s, cfg.window_s
            );
            t.push_str(
                "| jitter | retries | peak per window | peak req/s | busy s | last retry s |\n",
            );
            t.push_str("| --- | ---: | ---: | ---: | ---: | ---: |\n");
            for r in &rows {
                t.push_str(&format!(
                    "| {} | {} | {} | {:.0} | {:.2} | {:.2} |\n",
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
        Format::Table => {
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
    Ok(Outcome::Passed)
}
