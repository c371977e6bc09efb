//! A circuit breaker: stop calling a dependency that is failing, probe it, resume when it heals.
//!
//! Retries make an outage worse; a breaker makes it cheaper. It opens when, over the sampling
//! window, at least `min_requests` calls were seen and the failure ratio reached `failure_ratio`
//! (the minimum throughput keeps two early failures from opening it). While open, calls are not
//! made: the fallback answers. After `open_for` it lets `half_open_probes` calls through; a success
//! closes it, a failure opens it again.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// A resolved breaker configuration.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BreakerSpec {
    /// Share of failed calls in the window that opens it.
    pub failure_ratio: f64,
    /// Calls the window must hold before it may open (the minimum throughput).
    pub min_requests: u32,
    /// How far back calls count.
    pub window: Duration,
    /// How long it stays open before letting probes through.
    pub open_for: Duration,
    /// Calls let through at once while half-open.
    pub half_open_probes: u32,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum State {
    Closed,
    Open { until: Instant },
    HalfOpen { in_flight: u32 },
}

/// Breaker state, shared by the clients of a phase.
#[derive(Debug)]
pub struct Breaker {
    spec: BreakerSpec,
    state: State,
    window: VecDeque<(Instant, bool)>,
    /// How many times it opened.
    pub opened: u64,
}

/// Whether a call may go ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permit {
    /// Closed: call.
    Call,
    /// Half-open: this call is a probe.
    Probe,
    /// Open: do not call; use the fallback.
    Rejected,
}

impl Breaker {
    /// A closed breaker.
    pub fn new(spec: BreakerSpec) -> Breaker {
        Breaker {
            spec,
            state: State::Closed,
            window: VecDeque::new(),
            opened: 0,
        }
    }

    /// Asks to make a call now.
    pub fn permit(&mut self, now: Instant) -> Permit {
        match self.state {
            State::Closed => Permit::Call,
            State::Open { until } if now < until => Permit::Rejected,
            State::Open { .. } => {
                self.state = State::HalfOpen { in_flight: 1 };
                Permit::Probe
            }
            State::HalfOpen { in_flight } if in_flight < self.spec.half_open_probes => {
                self.state = State::HalfOpen {
                    in_flight: in_flight + 1,
                };
                Permit::Probe
            }
            State::HalfOpen { .. } => Permit::Rejected,
        }
    }

    /// Records a call's result (`ok` = not a transient failure).
    pub fn record(&mut self, now: Instant, permit: Permit, ok: bool) {
        if permit == Permit::Probe {
            if ok {
                self.state = State::Closed;
                self.window.clear();
            } else {
                self.trip(now);
            }
            return;
        }
        if !matches!(self.state, State::Closed) {
            return;
        }
        self.window.push_back((now, ok));
        while self
            .window
            .front()
            .is_some_and(|(t, _)| now.saturating_duration_since(*t) > self.spec.window)
        {
            self.window.pop_front();
        }
        let n = self.window.len() as u32;
        let failures = self.window.iter().filter(|(_, ok)| !ok).count() as f64;
        if n >= self.spec.min_requests && failures / f64::from(n.max(1)) >= self.spec.failure_ratio
        {
            self.trip(now);
        }
    }

    fn trip(&mut self, now: Instant) {
        self.state = State::Open {
            until: now + self.spec.open_for,
        };
        self.window.clear();
        self.opened += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> BreakerSpec {
        BreakerSpec {
            failure_ratio: 0.5,
            min_requests: 4,
            window: Duration::from_secs(10),
            open_for: Duration::from_secs(1),
            half_open_probes: 1,
        }
    }

    #[test]
    fn opens_after_minimum_throughput_probes_and_recovers() {
        let t = Instant::now();
        let mut b = Breaker::new(spec());
        for _ in 0..3 {
            let p = b.permit(t);
            b.record(t, p, false);
        }
        assert_eq!(
            b.permit(t),
            Permit::Call,
            "three failures are below the minimum throughput"
        );
        b.record(t, Permit::Call, false);
        assert_eq!(b.permit(t), Permit::Rejected);
        let later = t + Duration::from_millis(1100);
        assert_eq!(b.permit(later), Permit::Probe);
        assert_eq!(b.permit(later), Permit::Rejected, "one probe at a time");
        b.record(later, Permit::Probe, false);
        assert_eq!(b.permit(later), Permit::Rejected, "a failed probe reopens");
        let again = later + Duration::from_millis(1100);
        assert_eq!(b.permit(again), Permit::Probe);
        b.record(again, Permit::Probe, true);
        assert_eq!(b.permit(again), Permit::Call);
        assert_eq!(b.opened, 2);
    }
}
