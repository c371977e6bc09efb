//! Ctrl-C and SIGTERM: the first stops the load and lets the report on what was done be
//! written (marked interrupted); a second ends the process at once.

use tokio::signal::unix::{signal, Signal as UnixSignal, SignalKind};
use tokio_util::sync::CancellationToken;

use super::exit::{self, Signal};

/// Cancelled on the first Ctrl-C or SIGTERM (what CI sends when it cancels a job): the load
/// stops, what is in flight is cancelled, and the report on what was done is still written,
/// marked interrupted. A second signal exits at once.
pub(super) fn stop_on_signals() -> CancellationToken {
    let stop = CancellationToken::new();
    let s = stop.clone();
    tokio::spawn(async move {
        let mut term = signal(SignalKind::terminate()).ok();
        if next_signal(&mut term).await.is_some() {
            eprintln!(
                "interrupted: stopping the load, then checking what was done (again to quit at once)"
            );
            s.cancel();
            if let Some(again) = next_signal(&mut term).await {
                exit::at_once(again);
            }
        }
    });
    stop
}

/// Waits for Ctrl-C or SIGTERM.
async fn next_signal(term: &mut Option<UnixSignal>) -> Option<Signal> {
    let terminated = async {
        match term {
            Some(t) => t.recv().await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.is_ok().then_some(Signal::Interrupt),
        Some(()) = terminated => Some(Signal::Terminate),
    }
}
