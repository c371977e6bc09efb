//! What every command that sends load needs before and while it runs: the target reachable
//! (TCP, and TLS for `https://`), and the error of a run that could not be carried out. `run`,
//! `exec`, `deliver`, `load` and the library's workloads share them.

use std::time::Duration;

use crate::failure::FailureKind;
use crate::http::Target;

/// The run could not be carried out (a failure of kind [`FailureKind::CouldNotRun`]).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot start the embedded fault server: {0}")]
    /// The embedded fault server could not start.
    Server(#[from] fault_server::StartError),
    #[error("{0}")]
    /// The target URL is unusable.
    Target(#[from] crate::http::TargetError),
    #[error("cannot start the relay tiers: {0}")]
    /// The relay tiers could not start.
    Relay(#[from] crate::relay::RelayError),
    #[error("target {url} is unreachable: {source}")]
    /// The target does not accept connections.
    Unreachable {
        /// The URL.
        url: String,
        /// The OS error.
        source: std::io::Error,
    },
    #[error("target {url}: {reason}")]
    /// The TLS handshake with the target failed.
    Tls {
        /// The URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// A worker of a phase died: what it measured is lost, so the run cannot be judged.
    #[error("phase {phase:?}: {} of its workers died ({}); the run cannot be judged on what is left", .total, .messages.join("; "))]
    WorkerDied {
        /// The phase's name.
        phase: String,
        /// Workers that died.
        total: u64,
        /// The first of their messages.
        messages: Vec<String>,
    },
}

impl RunError {
    /// The error for a phase whose recorder counted dead workers, if it did.
    pub fn worker_died(phase: &str, rec: &crate::metrics::Recorder) -> Option<RunError> {
        (rec.worker_failures_total > 0).then(|| RunError::WorkerDied {
            phase: phase.to_string(),
            total: rec.worker_failures_total,
            messages: rec.worker_failures.clone(),
        })
    }
}

/// Checks that a connection to the target can be made: TCP, and for `https://` the TLS
/// handshake, so a certificate the client does not trust stops the run before any load, with
/// the reason.
pub async fn ensure_reachable(target: &Target) -> Result<(), RunError> {
    let unreachable = |source| RunError::Unreachable {
        url: target.url.clone(),
        source,
    };
    let tcp = match tokio::time::timeout(Duration::from_secs(5), target.connect_tcp()).await {
        Ok(Ok(s)) => s,
        Ok(Err(source)) => return Err(unreachable(source)),
        Err(_) => {
            return Err(unreachable(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "connect timed out after 5 s",
            )))
        }
    };
    let Some(tls) = &target.tls else {
        return Ok(());
    };
    match tokio::time::timeout(Duration::from_secs(5), tls.handshake(&target.host, tcp)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(RunError::Tls {
            url: target.url.clone(),
            reason: e.message,
        }),
        Err(_) => Err(RunError::Tls {
            url: target.url.clone(),
            reason: "TLS handshake timed out after 5 s (is the server speaking TLS?)".into(),
        }),
    }
}

impl RunError {
    /// What kind of failure it is: always a run that could not be carried out.
    pub fn kind(&self) -> FailureKind {
        FailureKind::CouldNotRun
    }
}
