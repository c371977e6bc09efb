//! Progress on a terminal; silence when output is piped or under `CI`.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressStyle};

/// Whether progress should be drawn: stderr is a terminal and `CI` is not set.
pub fn wanted() -> bool {
    std::io::stderr().is_terminal() && std::env::var_os("CI").is_none()
}

/// A phase's progress bar, fed by a shared counter.
pub struct Progress {
    bar: Option<ProgressBar>,
    ticker: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    /// Starts drawing when `enabled`; `total` is the expected number of operations, if known.
    pub fn start(enabled: bool, name: &str, total: Option<u64>, done: Arc<AtomicU64>) -> Progress {
        if !enabled {
            return Progress {
                bar: None,
                ticker: None,
            };
        }
        let bar = match total {
            Some(n) => ProgressBar::new(n),
            None => ProgressBar::new_spinner(),
        };
        let style = ProgressStyle::with_template(
            "{prefix:>16} [{elapsed_precise}] {wide_bar} {pos}/{len} ops",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        bar.set_style(style);
        bar.set_prefix(name.to_string());
        let b = bar.clone();
        let ticker = tokio::spawn(async move {
            loop {
                b.set_position(done.load(Ordering::Relaxed));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        Progress {
            bar: Some(bar),
            ticker: Some(ticker),
        }
    }

    /// Clears the bar.
    pub fn finish(self) {
        if let Some(t) = self.ticker {
            t.abort();
        }
        if let Some(b) = self.bar {
            b.finish_and_clear();
        }
    }
}
