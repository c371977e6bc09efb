//! A connection's request timer: one runtime timer for the connection's life, moved lazily.
//!
//! A fresh `tokio::time::timeout` per request inserts into and removes from the runtime's timer
//! wheel under its lock; even re-arming one timer per request converts each deadline into the
//! wheel's ticks, which was a few percent of an HTTP/2 load's client time. Here a request only
//! says its deadline: the runtime's timer, still set to an earlier request's deadline, fires
//! early at most once per timeout, and only then is it moved to the deadline now waited for.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use tokio::time::{Instant, Sleep};

/// One connection's timer (see the module doc).
#[derive(Default)]
pub(crate) struct Timer {
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Timer {
    /// Resolves once `deadline` has passed (never before it).
    pub(crate) fn until(&mut self, deadline: Instant) -> impl Future<Output = ()> + '_ {
        if let Some(s) = &mut self.sleep {
            // A later deadline is left for when the timer fires; an earlier one cannot be.
            if s.deadline() > deadline {
                s.as_mut().reset(deadline);
            }
        }
        let sleep = self
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        std::future::poll_fn(move |cx| loop {
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            if sleep.deadline() >= deadline {
                return Poll::Ready(());
            }
            sleep.as_mut().reset(deadline);
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// With the clock paused, a deadline is kept to the millisecond whatever the timer was set
    /// to before: later deadlines after earlier ones, an earlier one after a later one, and one
    /// after the timer already fired.
    #[tokio::test(start_paused = true)]
    async fn every_deadline_is_kept_however_the_timer_was_set() {
        let mut t = Timer::default();
        let start = Instant::now();
        for (after_ms, then_wait_ms) in [(50, 0), (80, 10), (30, 0), (200, 300), (40, 0)] {
            let from = Instant::now();
            let deadline = from + Duration::from_millis(after_ms);
            t.until(deadline).await;
            assert_eq!(Instant::now() - from, Duration::from_millis(after_ms));
            tokio::time::sleep(Duration::from_millis(then_wait_ms)).await;
        }
        // A deadline left before it came (a request answered in time) does not fire early for
        // the next, later one.
        let early = Instant::now() + Duration::from_millis(10);
        let done = tokio::time::timeout(Duration::from_millis(5), t.until(early)).await;
        assert!(done.is_err());
        let from = Instant::now();
        t.until(from + Duration::from_millis(100)).await;
        assert_eq!(Instant::now() - from, Duration::from_millis(100));
        assert!(Instant::now() - start >= Duration::from_millis(700));
    }
}
