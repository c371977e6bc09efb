//! Retry budgets: a cap on retry *volume*, shared by every client of a phase.
//!
//! "At most 3 retries" bounds one request, not the system: when everything fails, every request
//! retries 3 times and the dependency sees 4× its load exactly when it is weakest. A budget bounds
//! retries as a share of first attempts (`ratio`: each first attempt deposits `ratio` tokens, each
//! retry spends one) or as a rate (`token_bucket`).

use std::time::Instant;

/// A resolved budget.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BudgetSpec {
    /// Retries may be at most `ratio` of first attempts, plus `reserve` to start with.
    Ratio {
        /// Retry tokens each first attempt deposits.
        ratio: f64,
        /// Tokens at the start.
        reserve: f64,
    },
    /// At most `capacity` retries at once, refilled at `refill_per_s`.
    TokenBucket {
        /// Most tokens held.
        capacity: f64,
        /// Tokens added per second.
        refill_per_s: f64,
    },
}

/// Budget state.
#[derive(Debug)]
pub struct Budget {
    spec: BudgetSpec,
    tokens: f64,
    last: Instant,
}

impl Budget {
    /// A full budget at `now`.
    pub fn new(spec: BudgetSpec, now: Instant) -> Budget {
        let tokens = match spec {
            BudgetSpec::Ratio { reserve, .. } => reserve,
            BudgetSpec::TokenBucket { capacity, .. } => capacity,
        };
        Budget {
            spec,
            tokens,
            last: now,
        }
    }

    /// Records a first attempt.
    pub fn deposit(&mut self) {
        if let BudgetSpec::Ratio { ratio, .. } = self.spec {
            self.tokens += ratio;
        }
    }

    /// Takes one retry from the budget at `now`, if it can afford it.
    pub fn withdraw(&mut self, now: Instant) -> bool {
        if let BudgetSpec::TokenBucket {
            capacity,
            refill_per_s,
        } = self.spec
        {
            let dt = now.saturating_duration_since(self.last).as_secs_f64();
            self.last = now;
            self.tokens = (self.tokens + dt * refill_per_s).min(capacity);
        }
        // Ten deposits of 0.1 add up to 0.9999…; a tolerance keeps "10 % of requests" exact.
        if self.tokens >= 1.0 - 1e-9 {
            self.tokens = (self.tokens - 1.0).max(0.0);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_caps_retries_to_a_share_of_requests() {
        let now = Instant::now();
        let mut b = Budget::new(
            BudgetSpec::Ratio {
                ratio: 0.1,
                reserve: 0.0,
            },
            now,
        );
        let mut allowed = 0;
        for _ in 0..100 {
            b.deposit();
            if b.withdraw(now) {
                allowed += 1;
            }
        }
        assert_eq!(allowed, 10, "exactly 10 % of 100 requests");
    }

    #[test]
    fn token_bucket_empties() {
        let now = Instant::now();
        let mut b = Budget::new(
            BudgetSpec::TokenBucket {
                capacity: 3.0,
                refill_per_s: 2.0,
            },
            now,
        );
        assert_eq!((0..5).filter(|_| b.withdraw(now)).count(), 3);
        // Half a second later, one token has come back (in virtual time).
        let later = now + std::time::Duration::from_millis(500);
        assert_eq!((0..5).filter(|_| b.withdraw(later)).count(), 1);
    }
}
