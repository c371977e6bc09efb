//! Seeded draws that do not depend on the order things happen in.
//!
//! A shared random stream would make "which request got the 503" or "which event was duplicated"
//! depend on which one the scheduler happened to reach first. Instead each draw hashes what it
//! decides (a seed, a rule or a decision's name, whose it is, an attempt) with [`Fnv`], mixes the
//! hash with [`splitmix64`], and reads the word as a number in [0, 1) with [`unit`]: the same
//! parts give the same draw in every run, however the work interleaves. Each user writes its own
//! parts in its own order (the fault server's schedule in `fault_server::draw`, the webhook
//! provider's in `webhooks`'s `draw.rs`).

/// FNV-1a, 64 bits: a hash that is stable across Rust versions and platforms, unlike
/// `DefaultHasher`. Its low bits are weak; mix the result with [`splitmix64`] before use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fnv(u64);

impl Fnv {
    /// The hash of nothing (FNV's offset basis).
    pub const fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }

    /// Adds `bytes`.
    pub fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }

    /// Adds `v` as its eight little-endian bytes.
    pub fn write_u64(&mut self, v: u64) {
        self.write(&v.to_le_bytes());
    }

    /// The hash so far.
    pub fn finish(&self) -> u64 {
        self.0
    }
}

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv::new()
    }
}

/// SplitMix64's increment: the golden ratio's fraction, odd, so the state visits every word.
const GOLDEN_GAMMA: u64 = 0x9e37_79b9_7f4a_7c15;

/// SplitMix64's finalizer: spreads every bit of `z` over the word (FNV's weak low bits, a seed).
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

/// A well-mixed word's 53 high bits as a uniform number in [0, 1): every value a multiple of
/// 2^-53, as many as an `f64` holds exactly.
pub fn unit(word: u64) -> f64 {
    (word >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv_is_the_reference_fnv_1a() {
        // The FNV-1a test vectors of draft-eastlake-fnv: "" and "a" and "foobar".
        assert_eq!(Fnv::new().finish(), 0xcbf2_9ce4_8422_2325);
        let hash = |s: &str| {
            let mut h = Fnv::new();
            h.write(s.as_bytes());
            h.finish()
        };
        assert_eq!(hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(hash("foobar"), 0x8594_4171_f739_67e8);
        let mut h = Fnv::default();
        h.write_u64(1);
        let mut bytes = Fnv::new();
        bytes.write(&[1, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(h, bytes);
    }

    #[test]
    fn the_generator_is_splitmix64() {
        // The reference sequence of SplitMix64 from state 0 (Vigna's splitmix64.c).
        let mut state = 0;
        assert_eq!(splitmix64_next(&mut state), 0xe220_a839_7b1d_cdaf);
        assert_eq!(splitmix64_next(&mut state), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(state, GOLDEN_GAMMA.wrapping_mul(2));
        assert_eq!(splitmix64(0), 0xe220_a839_7b1d_cdaf);
        let mut state = 12_345;
        assert_eq!(
            [splitmix64_next(&mut state), splitmix64_next(&mut state)],
            [0x2211_8258_a9d1_11a0, 0x346e_dce5_f713_f8ed]
        );
    }

    #[test]
    fn unit_spans_zero_to_one_exclusive() {
        assert_eq!(unit(0), 0.0);
        assert_eq!(unit(u64::MAX), 1.0 - f64::EPSILON / 2.0);
        assert_eq!(unit(1 << 63), 0.5);
        assert_eq!(unit((1 << 11) - 1), 0.0, "the low 11 bits are not read");
    }
}
