//! A phase's stop as its workers check it, at every poll of every operation.
//!
//! Waiting on the phase's `CancellationToken` beside each operation cost, per poll, the token's
//! lock and a poll of its notification: at hundreds of thousands of requests a second, that
//! showed. Here one task waits on the token and fires the signal; a worker's wait reads a flag
//! and, only when it was not yet registered (or is polled by another task), takes a lock.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::task::{Context, Poll, Waker};

/// Fired once, when the phase stops; wakes every wait registered on it.
#[derive(Debug, Default)]
pub struct StopSignal {
    fired: AtomicBool,
    wakers: Mutex<Vec<Waker>>,
}

impl StopSignal {
    /// Fires the signal: every wait resolves, now and later.
    pub fn fire(&self) {
        self.fired.store(true, Ordering::Release);
        let wakers = std::mem::take(&mut *self.wakers.lock().unwrap_or_else(|p| p.into_inner()));
        for w in wakers {
            w.wake();
        }
    }

    /// Whether the signal has fired.
    pub fn is_fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }
}

/// One worker's wait on a [`StopSignal`], polled again and again (it resolves once fired).
#[derive(Debug)]
pub struct StopWait {
    signal: std::sync::Arc<StopSignal>,
    /// Where this wait's waker is in the signal's list, and the waker.
    registered: Option<(usize, Waker)>,
}

impl StopWait {
    /// A wait on `signal`.
    pub fn new(signal: std::sync::Arc<StopSignal>) -> StopWait {
        StopWait {
            signal,
            registered: None,
        }
    }
}

impl Future for StopWait {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.signal.is_fired() {
            return Poll::Ready(());
        }
        if let Some((_, w)) = &self.registered {
            if w.will_wake(cx.waker()) {
                return Poll::Pending;
            }
        }
        let this = &mut *self;
        let mut wakers = this.signal.wakers.lock().unwrap_or_else(|p| p.into_inner());
        // Checked again under the lock: `fire` sets the flag before it takes the wakers.
        if this.signal.is_fired() {
            return Poll::Ready(());
        }
        let w = cx.waker().clone();
        match this.registered {
            Some((i, _)) => wakers[i] = w.clone(),
            None => {
                wakers.push(w.clone());
                this.registered = Some((wakers.len() - 1, w));
                return Poll::Pending;
            }
        }
        if let Some((_, old)) = &mut this.registered {
            *old = w;
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    /// Waits registered before the signal fires wake when it does, one registered again from
    /// another task too; a wait made after it resolves at once.
    #[tokio::test]
    async fn every_wait_resolves_once_fired() {
        let signal = Arc::new(StopSignal::default());
        let mut waits = Vec::new();
        for _ in 0..3 {
            let s = signal.clone();
            waits.push(tokio::spawn(async move { StopWait::new(s).await }));
        }
        // One wait polled first by one task, then moved to and polled by another.
        let mut moved = StopWait::new(signal.clone());
        let pending = std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut moved).poll(cx))).await;
        assert!(pending.is_pending());
        let moved = tokio::spawn(moved);
        tokio::task::yield_now().await;
        for w in &waits {
            assert!(!w.is_finished());
        }
        signal.fire();
        for w in waits {
            tokio::time::timeout(Duration::from_secs(10), w)
                .await
                .expect("woken")
                .expect("no panic");
        }
        tokio::time::timeout(Duration::from_secs(10), moved)
            .await
            .expect("the moved wait woken through its new task")
            .expect("no panic");
        StopWait::new(signal).await;
    }
}
