//! A fleet of calls under backon 1.6 (the published Rust retry crate) with reqwest 0.13 as the HTTP
//! client: a `harness conform` adapter, as calibration/python/fleet.py is for Python's libraries.
//!
//! Each call is one logical operation — POST $HARNESS_FAULT_URL/orders with a JSON body, an
//! Idempotency-Key made once per call and `x-client-id: c<i>` — under backon's retry; an answer
//! other than 2xx is an error (`error_for_status`, what reqwest users write). The calls are released
//! together. Exits 0 whatever their outcome (the harness judges the journal); a one-line summary
//! goes to stderr.
//!
//!   backon_fleet default      `op.retry(ExponentialBuilder::default())`: backon's defaults
//!                             (exponential.rs:9-13: no jitter, factor 2, 1 s, at most 3 retries)
//!                             and its default `when`, which retries every error (retry.rs:99)
//!   backon_fleet documented   the same builder with what backon's documentation adds: `.when`
//!                             retrying only transient errors (README.md:39-43: "When to retry")
//!                             and `.adjust` waiting the Retry-After header (retry.rs:264-329)
//!
//! Env: HARNESS_FAULT_URL; the number of calls is HARNESS_CALLS, else CALIB_CLIENTS, else 40; at
//! most HARNESS_CONCURRENCY run at once when it is set (else all of them).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use backon::{ExponentialBuilder, Retryable};
use reqwest::header::HeaderMap;
use reqwest::StatusCode;
use tokio::sync::{Barrier, Semaphore};

/// What one attempt failed with.
#[derive(Debug)]
enum AttemptError {
    /// An answer other than 2xx, with its headers (Retry-After).
    Status(StatusCode, HeaderMap),
    /// No answer: the connection failed or was dropped.
    Transport(reqwest::Error),
}

impl fmt::Display for AttemptError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AttemptError::Status(s, _) => write!(f, "HTTP {}", s.as_u16()),
            AttemptError::Transport(e) => write!(f, "transport: {e}"),
        }
    }
}

impl std::error::Error for AttemptError {}

impl AttemptError {
    /// A failure that may go away: no answer, a 5xx, 408 or 429.
    fn transient(&self) -> bool {
        match self {
            AttemptError::Status(s, _) => {
                s.is_server_error()
                    || *s == StatusCode::REQUEST_TIMEOUT
                    || *s == StatusCode::TOO_MANY_REQUESTS
            }
            AttemptError::Transport(_) => true,
        }
    }

    /// The Retry-After of the answer, in whole seconds.
    fn retry_after(&self) -> Option<Duration> {
        match self {
            AttemptError::Status(_, h) => h
                .get(reqwest::header::RETRY_AFTER)?
                .to_str()
                .ok()?
                .trim()
                .parse::<u64>()
                .ok()
                .map(Duration::from_secs),
            AttemptError::Transport(_) => None,
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Default,
    Documented,
}

fn env_number(names: &[&str], default: usize) -> usize {
    names
        .iter()
        .find_map(|n| std::env::var(n).ok()?.trim().parse().ok())
        .unwrap_or(default)
}

async fn attempt(
    client: &reqwest::Client,
    url: &str,
    i: usize,
    key: &str,
) -> Result<StatusCode, AttemptError> {
    let response = client
        .post(url)
        .header("content-type", "application/json")
        .header("idempotency-key", key)
        .header("x-client-id", format!("c{i}"))
        .body(format!(r#"{{"sku":"sku-{i}","qty":1}}"#))
        .send()
        .await
        .map_err(AttemptError::Transport)?;
    let status = response.status();
    let headers = response.headers().clone();
    // The body is read so that the connection is reused.
    let _ = response.bytes().await;
    if status.is_success() {
        Ok(status)
    } else {
        Err(AttemptError::Status(status, headers))
    }
}

/// One operation: a key made once, every attempt under backon's retry.
async fn operation(client: reqwest::Client, url: Arc<str>, i: usize, mode: Mode) -> String {
    let key = uuid::Uuid::new_v4().to_string();
    let once = || attempt(&client, &url, i, &key);
    let outcome = match mode {
        Mode::Default => once.retry(ExponentialBuilder::default()).await,
        Mode::Documented => {
            once.retry(ExponentialBuilder::default())
                .when(AttemptError::transient)
                .adjust(|e, backoff| match e.retry_after() {
                    Some(wait) if backoff.is_some() => Some(wait),
                    _ => backoff,
                })
                .await
        }
    };
    match outcome {
        Ok(s) => s.as_u16().to_string(),
        Err(AttemptError::Status(s, _)) => format!("HTTP {}", s.as_u16()),
        Err(AttemptError::Transport(_)) => "transport error".to_string(),
    }
}

#[tokio::main]
async fn main() {
    let mode = match std::env::args().nth(1).as_deref() {
        None | Some("default") => Mode::Default,
        Some("documented") => Mode::Documented,
        Some(other) => {
            eprintln!("backon_fleet: unknown mode {other:?} (default, documented)");
            std::process::exit(2);
        }
    };
    let Ok(base) = std::env::var("HARNESS_FAULT_URL") else {
        eprintln!("backon_fleet: HARNESS_FAULT_URL is not set");
        std::process::exit(2);
    };
    let url: Arc<str> = format!("{}/orders", base.trim_end_matches('/')).into();
    let n = env_number(&["HARNESS_CALLS", "CALIB_CLIENTS"], 40);
    let at_once = env_number(&["HARNESS_CONCURRENCY"], n).max(1);
    let client = match reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("backon_fleet: no HTTP client: {e}");
            std::process::exit(2);
        }
    };
    let start = Arc::new(Barrier::new(n + 1));
    let slots = Arc::new(Semaphore::new(at_once));
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (client, url, start, slots) =
                (client.clone(), url.clone(), start.clone(), slots.clone());
            tokio::spawn(async move {
                start.wait().await;
                let _slot = slots.acquire_owned().await;
                operation(client, url, i, mode).await
            })
        })
        .collect();
    // Every call waits on the barrier; this releases them together.
    tokio::time::sleep(Duration::from_millis(100)).await;
    start.wait().await;
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for t in tasks {
        let outcome = t.await.unwrap_or_else(|_| "panicked".to_string());
        *counts.entry(outcome).or_default() += 1;
    }
    eprintln!("backon_fleet: {n} calls: {counts:?}");
}
