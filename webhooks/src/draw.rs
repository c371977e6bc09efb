//! Reproducible draws that do not depend on delivery order.
//!
//! Which event is duplicated, which subject is reversed, which delivery is forged: each is a pure
//! function of (seed, what is being decided, whose it is), never a step of a shared random stream.
//! A sender that delivers concurrently, or a test that asks about one event alone, gets the same
//! answer as a run that walks the events in order — the fault server's schedule decides its random
//! faults the same way, for the same reason, with the same hash and mixing (`primitives::draw`).

use primitives::draw::{splitmix64, unit, Fnv};

/// A uniform draw in [0, 1) for `what` (the decision) about `whose` (an event id, a subject), with
/// `salt` telling apart several draws of one decision.
pub(crate) fn uniform(seed: u64, what: &str, whose: &str, salt: u64) -> f64 {
    unit(word(seed, what, whose, salt))
}

/// A well-mixed 64-bit word for the same parts as [`uniform`].
pub(crate) fn word(seed: u64, what: &str, whose: &str, salt: u64) -> u64 {
    let mut h = Fnv::new();
    h.write_u64(seed);
    h.write(what.as_bytes());
    // Separators, so that ("ab", "c") and ("a", "bc") hash apart.
    h.write(&[0xff]);
    h.write(whose.as_bytes());
    h.write(&[0xfe]);
    h.write_u64(salt);
    splitmix64(h.finish())
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

    /// The draws of every earlier build, bit for bit: a run's seed means the same chaos and the
    /// same event ids.
    #[test]
    fn draws_are_pinned() {
        assert_eq!(word(1, "dup", "evt_1", 0), 0x6c34_10fd_5de9_ed05);
        assert_eq!(word(7, "forgery-ids", "", 0), 0xfcd3_c718_6dfc_600a);
        assert_eq!(word(9, "event-id", "12", 2), 0x2793_8016_2ad7_6305);
        assert_eq!(
            uniform(1, "dup", "evt_1", 0).to_bits(),
            0x3fdb_0d04_3f57_7a7a
        );
        assert_eq!(
            uniform(9, "event-id", "12", 2).to_bits(),
            0x3fc3_c9c0_0b15_6bb0
        );
    }
}
