//! Jitter: spreading retries so clients that failed together do not retry together.
//!
//! Exponential backoff alone stretches one client's retries but keeps all clients synchronized:
//! every retry wave is as tall as the first failure (the sawtooth after an incident). Full jitter
//! draws the whole wait at random, equal jitter keeps half of it, decorrelated jitter grows from
//! the previous wait (`min(cap, U(base, prev × 3))`).

use std::time::Duration;

use rand::{rngs::StdRng, RngExt};
use serde::{Deserialize, Serialize};

/// How a backoff delay is randomized.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Jitter {
    /// No randomness: the signature of a thundering herd.
    None,
    /// `U(0, d)`.
    #[default]
    Full,
    /// `d/2 + U(0, d/2)`.
    Equal,
    /// `min(cap, U(base, prev × 3))`.
    Decorrelated,
}

impl Jitter {
    /// The name a scenario file (and `harness simulate herd --jitter`) gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            Jitter::None => "none",
            Jitter::Full => "full",
            Jitter::Equal => "equal",
            Jitter::Decorrelated => "decorrelated",
        }
    }

    /// The jittered wait given the backoff's delay `d`, its base and cap, and the previous wait.
    pub fn apply(
        self,
        d: Duration,
        base: Duration,
        cap: Duration,
        prev: Duration,
        rng: &mut StdRng,
    ) -> Duration {
        let u: f64 = rng.random();
        if self == Jitter::None {
            return d;
        }
        let secs = self.spread_secs(
            d.as_secs_f64(),
            base.as_secs_f64(),
            cap.as_secs_f64(),
            prev.as_secs_f64(),
            u,
        );
        Duration::try_from_secs_f64(secs).unwrap_or(cap).min(cap)
    }

    /// The formula itself, in seconds: the wait for the backoff's delay `d`, its `base` and
    /// `cap`, the previous wait `prev`, and a uniform draw `u` in [0, 1). [`Jitter::apply`] and
    /// the harness's herd simulation (which draws its own `u`) both compute waits with it.
    pub fn spread_secs(self, d: f64, base: f64, cap: f64, prev: f64, u: f64) -> f64 {
        match self {
            Jitter::None => d,
            Jitter::Full => u * d,
            Jitter::Equal => d / 2.0 + u * d / 2.0,
            Jitter::Decorrelated => {
                let hi = (prev.max(base) * 3.0).max(base);
                (base + (hi - base) * u).min(cap)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn ranges() {
        let mut rng = StdRng::seed_from_u64(1);
        let d = Duration::from_secs(4);
        let (b, cap) = (Duration::from_secs(1), Duration::from_secs(30));
        for _ in 0..1000 {
            assert_eq!(Jitter::None.apply(d, b, cap, b, &mut rng), d);
            assert!(Jitter::Full.apply(d, b, cap, b, &mut rng) <= d);
            let e = Jitter::Equal.apply(d, b, cap, b, &mut rng);
            assert!(e >= d / 2 && e <= d);
            let x = Jitter::Decorrelated.apply(d, b, cap, Duration::from_secs(2), &mut rng);
            assert!(x >= b && x <= Duration::from_secs(6));
        }
    }
}
