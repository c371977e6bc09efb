//! Reproducible draws that do not depend on delivery order.
//!
//! Which event is duplicated, which subject is reversed, which delivery is forged: each is a pure
//! function of (seed, what is being decided, whose it is), never a step of a shared random stream.
//! A sender that delivers concurrently, or a test that asks about one event alone, gets the same
//! answer as a run that walks the events in order — the fault server's schedule decides its random
//! faults the same way, for the same reason.

/// A uniform draw in [0, 1) for `what` (the decision) about `whose` (an event id, a subject), with
/// `salt` telling apart several draws of one decision.
pub(crate) fn uniform(seed: u64, what: &str, whose: &str, salt: u64) -> f64 {
    // 53 well-mixed bits → [0, 1).
    (word(seed, what, whose, salt) >> 11) as f64 / (1u64 << 53) as f64
}

/// A well-mixed 64-bit word for the same parts as [`uniform`].
pub(crate) fn word(seed: u64, what: &str, whose: &str, salt: u64) -> u64 {
    let mut h = Fnv::new();
    h.write(&seed.to_le_bytes());
    h.write(what.as_bytes());
    // Separators, so that ("ab", "c") and ("a", "bc") hash apart.
    h.write(&[0xff]);
    h.write(whose.as_bytes());
    h.write(&[0xfe]);
    h.write(&salt.to_le_bytes());
    splitmix64(h.0)
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
}

/// SplitMix64's finalizer: FNV's low bits are weak; this spreads every input bit over the word.
pub(crate) fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_draw_is_a_function_of_its_parts() {
        assert_eq!(uniform(1, "dup", "evt_1", 0), uniform(1, "dup", "evt_1", 0));
        assert_ne!(uniform(1, "dup", "evt_1", 0), uniform(2, "dup", "evt_1", 0));
        assert_ne!(uniform(1, "dup", "evt_1", 0), uniform(1, "fog", "evt_1", 0));
        assert_ne!(uniform(1, "dup", "evt_1", 0), uniform(1, "dup", "evt_2", 0));
        assert_ne!(uniform(1, "dup", "evt_1", 0), uniform(1, "dup", "evt_1", 1));
        assert_ne!(word(1, "ab", "c", 0), word(1, "a", "bc", 0));
    }

    #[test]
    fn draws_are_roughly_uniform() {
        let n = 20_000;
        let below = (0..n)
            .filter(|i| uniform(42, "dup", &format!("evt_{i}"), 0) < 0.3)
            .count();
        let share = below as f64 / n as f64;
        assert!((share - 0.3).abs() < 0.02, "{share}");
        assert!((0..n).all(|i| (0.0..1.0).contains(&uniform(7, "x", &i.to_string(), 0))));
    }

    #[test]
    fn splitmix_is_the_reference_finalizer() {
        // Vigna's splitmix64.c from state 0: its first output.
        assert_eq!(splitmix64(0), 0xe220_a839_7b1d_cdaf);
    }
}
