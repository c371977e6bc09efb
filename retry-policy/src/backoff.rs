//! How long to wait before retry n: fixed, linear or exponential, capped.

use std::time::Duration;

use serde::Deserialize;

/// The growth of the wait between attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum BackoffKind {
    /// Always `base`.
    Fixed,
    /// `base × n`.
    Linear,
    /// `base × factor^(n-1)`.
    #[default]
    Exponential,
}

/// A resolved backoff.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// How the wait grows.
    pub kind: BackoffKind,
    /// The first wait.
    pub base: Duration,
    /// The longest wait.
    pub cap: Duration,
    /// Growth per retry of an exponential backoff.
    pub factor: f64,
}

impl Backoff {
    /// The un-jittered wait before retry `n` (1 = the first retry).
    pub fn delay(&self, n: u32) -> Duration {
        let n = n.max(1);
        let d = match self.kind {
            BackoffKind::Fixed => self.base,
            BackoffKind::Linear => self.base.saturating_mul(n),
            BackoffKind::Exponential => {
                let f = self.factor.powi(i32::try_from(n - 1).unwrap_or(i32::MAX));
                Duration::try_from_secs_f64(self.base.as_secs_f64() * f).unwrap_or(self.cap)
            }
        };
        d.min(self.cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_schedule() {
        let b = Backoff {
            kind: BackoffKind::Exponential,
            base: Duration::from_secs(1),
            cap: Duration::from_secs(60),
            factor: 2.0,
        };
        let d: Vec<u64> = (1..=5).map(|n| b.delay(n).as_secs()).collect();
        assert_eq!(d, [1, 2, 4, 8, 16]);
        let capped = Backoff {
            cap: Duration::from_secs(5),
            ..b
        };
        assert_eq!(capped.delay(5), Duration::from_secs(5));
        let lin = Backoff {
            kind: BackoffKind::Linear,
            ..b
        };
        assert_eq!(lin.delay(3), Duration::from_secs(3));
        let fixed = Backoff {
            kind: BackoffKind::Fixed,
            ..b
        };
        assert_eq!(fixed.delay(4), Duration::from_secs(1));
    }
}
