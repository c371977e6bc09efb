//! Reproducible random draws that do not depend on arrival order.
//!
//! A shared RNG stream would make "which request got the 503" depend on which request the scheduler
//! happened to run first. Instead every draw is a pure function of (seed, rule, subject, attempt):
//! the same key's second attempt gets the same fate in every run with the same seed, however the
//! requests interleave. The hash and the mixing are `primitives::draw`'s; the parts, and their
//! order, are the schedule's, and pinned by the tests below: a seed replays the same faults in
//! every build.

use primitives::draw::{splitmix64, unit, Fnv};

/// A uniform draw in [0, 1) from the given parts.
pub fn uniform(seed: u64, rule: &str, subject: &str, attempt: u64, salt: u64) -> f64 {
    let mut h = Fnv::new();
    h.write_u64(seed);
    h.write(rule.as_bytes());
    h.write(&[0xff]);
    h.write(subject.as_bytes());
    h.write(&[0xfe]);
    h.write_u64(attempt);
    h.write_u64(salt);
    unit(splitmix64(h.finish()))
}

/// A standard normal draw (Box–Muller over two uniform draws).
pub fn normal(seed: u64, rule: &str, subject: &str, attempt: u64) -> f64 {
    let u1 = uniform(seed, rule, subject, attempt, 1).max(f64::MIN_POSITIVE);
    let u2 = uniform(seed, rule, subject, attempt, 2);
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_seed_dependent() {
        assert_eq!(uniform(1, "r", "k", 1, 0), uniform(1, "r", "k", 1, 0));
        assert_ne!(uniform(1, "r", "k", 1, 0), uniform(2, "r", "k", 1, 0));
        assert_ne!(uniform(1, "r", "k", 1, 0), uniform(1, "r", "k", 2, 0));
    }

    /// The draws of every earlier build, bit for bit: a schedule's seed means the same faults.
    #[test]
    fn draws_are_pinned() {
        let bits = |s, r, k, a, salt| uniform(s, r, k, a, salt).to_bits();
        assert_eq!(bits(1, "r", "k", 1, 0), 0x3fe7_fd73_471a_8ac2);
        assert_eq!(bits(42, "rule-1", "key-7", 3, 7), 0x3fe7_4490_a439_38bd);
        assert_eq!(bits(0, "", "", 0, 0), 0x3fcd_4ae3_1b2a_2e84);
    }

    #[test]
    fn roughly_uniform() {
        let n = 20_000;
        let below: usize = (0..n)
            .filter(|i| uniform(42, "rule", &i.to_string(), 1, 0) < 0.3)
            .count();
        let frac = below as f64 / n as f64;
        assert!((frac - 0.3).abs() < 0.02, "{frac}");
        let mean: f64 = (0..n)
            .map(|i| normal(42, "r", &i.to_string(), 1))
            .sum::<f64>()
            / n as f64;
        assert!(mean.abs() < 0.05, "{mean}");
    }
}
