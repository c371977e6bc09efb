//! Reproducible random draws that do not depend on arrival order.
//!
//! A shared RNG stream would make "which request got the 503" depend on which request the scheduler
//! happened to run first. Instead every draw is a pure function of (seed, rule, subject, attempt):
//! the same key's second attempt gets the same fate in every run with the same seed, however the
//! requests interleave.

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
    // 53 high-quality bits → [0, 1).
    (splitmix64(h.finish()) >> 11) as f64 / (1u64 << 53) as f64
}

/// A standard normal draw (Box–Muller over two uniform draws).
pub fn normal(seed: u64, rule: &str, subject: &str, attempt: u64) -> f64 {
    let u1 = uniform(seed, rule, subject, attempt, 1).max(f64::MIN_POSITIVE);
    let u2 = uniform(seed, rule, subject, attempt, 2);
    (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
}

/// FNV-1a: stable across Rust versions and platforms, unlike `DefaultHasher`.
struct Fnv(u64);

impl Fnv {
    fn new() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.write(&v.to_le_bytes());
    }
    fn finish(&self) -> u64 {
        self.0
    }
}

/// SplitMix64's increment: the golden ratio's fraction, odd, so the state visits every word.
const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's finalizer: spreads a word's bits (FNV's weak low bits here; seeds elsewhere).
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(GOLDEN_GAMMA);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// SplitMix64 as a generator: the next word of the sequence whose state is `state`, which it
/// advances (a small deterministic stream, e.g. for synthetic data).
pub fn splitmix64_next(state: &mut u64) -> u64 {
    let z = splitmix64(*state);
    *state = state.wrapping_add(GOLDEN_GAMMA);
    z
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

    #[test]
    fn the_generator_is_splitmix64() {
        // The reference sequence of SplitMix64 from state 0 (Vigna's splitmix64.c).
        let mut state = 0;
        assert_eq!(splitmix64_next(&mut state), 0xe220_a839_7b1d_cdaf);
        assert_eq!(splitmix64_next(&mut state), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(state, GOLDEN_GAMMA.wrapping_mul(2));
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
