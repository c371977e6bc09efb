//! A timer finer than the runtime's, for the toxics' due times.
//!
//! Tokio's timer wheel ticks each millisecond and rounds a deadline up to its tick, so a `latency`
//! of 10 ms would add between 10 and 11 ms (and a `slicer`'s 100 µs gaps would be whole
//! milliseconds). Here one thread keeps the deadlines that connections wait for, in a heap, and
//! sleeps until the earliest (a futex wait with a timeout: tens of microseconds late at most on an
//! idle machine), then wakes the tasks whose time came. A connection registers at most one
//! deadline at a time; one it no longer waits for is forgotten when its time passes.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

struct State {
    /// Deadlines by time; an entry whose sleeper now waits for another time is skipped.
    heap: BinaryHeap<Reverse<(Instant, u64)>>,
    /// What each sleeper waits for now, and whom to wake.
    waiting: HashMap<u64, (Instant, Waker)>,
    next_id: u64,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The timer's thread: wakes each sleeper at its deadline.
    fn run(&self) {
        let mut st = self.lock();
        loop {
            let now = Instant::now();
            while let Some(Reverse((at, id))) = st.heap.peek().copied() {
                if at > now {
                    break;
                }
                st.heap.pop();
                if st.waiting.get(&id).is_some_and(|(d, _)| *d == at) {
                    if let Some((_, w)) = st.waiting.remove(&id) {
                        w.wake();
                    }
                }
            }
            st = match st.heap.peek() {
                Some(Reverse((at, _))) => {
                    let wait = at.saturating_duration_since(Instant::now());
                    self.changed
                        .wait_timeout(st, wait)
                        .map_or_else(|p| p.into_inner().0, |(g, _)| g)
                }
                None => self.changed.wait(st).unwrap_or_else(|p| p.into_inner()),
            };
        }
    }
}

fn shared() -> &'static Arc<Shared> {
    static TIMER: OnceLock<Arc<Shared>> = OnceLock::new();
    TIMER.get_or_init(|| {
        let s = Arc::new(Shared {
            state: Mutex::new(State {
                heap: BinaryHeap::new(),
                waiting: HashMap::new(),
                next_id: 0,
            }),
            changed: Condvar::new(),
        });
        let t = s.clone();
        // If the thread cannot start, sleepers are still woken by whatever else wakes their
        // task; the pipe then only writes late. It is started once per process.
        let _ = std::thread::Builder::new()
            .name("tcp-proxy-timer".into())
            .spawn(move || t.run());
        s
    })
}

/// Starts the timer's thread now, so that the first connection to wait does not wait for it.
pub(crate) fn start() {
    shared();
}

/// A sleep that can be moved to another deadline, or to none (pending for ever).
pub(crate) struct Sleep {
    id: u64,
    deadline: Option<Instant>,
    registered: Option<Instant>,
}

impl Sleep {
    pub(crate) fn new() -> Sleep {
        let mut st = shared().lock();
        st.next_id += 1;
        Sleep {
            id: st.next_id,
            deadline: None,
            registered: None,
        }
    }

    /// Waits for `deadline` from now on (none: never ready).
    pub(crate) fn reset(&mut self, deadline: Option<Instant>) {
        self.deadline = deadline;
    }
}

impl Future for Sleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(deadline) = self.deadline else {
            return Poll::Pending;
        };
        if Instant::now() >= deadline {
            self.registered = None;
            return Poll::Ready(());
        }
        let timer = shared();
        let mut st = timer.lock();
        let fresh = match st.waiting.get(&self.id) {
            Some((d, w)) => *d != deadline || !w.will_wake(cx.waker()),
            None => true,
        };
        if fresh {
            let earliest = st.heap.peek().map(|Reverse((t, _))| *t);
            st.waiting.insert(self.id, (deadline, cx.waker().clone()));
            if self.registered != Some(deadline) {
                st.heap.push(Reverse((deadline, self.id)));
            }
            drop(st);
            self.registered = Some(deadline);
            if earliest.is_none_or(|e| deadline < e) {
                timer.changed.notify_one();
            }
        }
        Poll::Pending
    }
}

impl Drop for Sleep {
    fn drop(&mut self) {
        shared().lock().waiting.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn wakes_at_the_deadline_not_at_the_next_millisecond() {
        let mut lates = Vec::new();
        for _ in 0..20 {
            let mut s = Sleep::new();
            let at = Instant::now() + Duration::from_micros(1300);
            s.reset(Some(at));
            (&mut s).await;
            lates.push(Instant::now().duration_since(at));
        }
        lates.sort();
        // Never early; late by the wake-up only (generous: a busy machine).
        assert!(lates[10] < Duration::from_millis(5), "{lates:?}");
    }

    #[tokio::test]
    async fn a_moved_deadline_is_the_one_kept() {
        let mut s = Sleep::new();
        let early = Instant::now() + Duration::from_millis(5);
        s.reset(Some(Instant::now() + Duration::from_secs(60)));
        assert!(tokio::time::timeout(Duration::from_millis(20), &mut s)
            .await
            .is_err());
        s.reset(Some(early));
        tokio::time::timeout(Duration::from_secs(5), &mut s)
            .await
            .expect("the new deadline wakes it");
        assert!(Instant::now() >= early);
    }
}
