//! Reproducible random choices for protocol rules, whatever the arrival order.
//!
//! A `probability` rule must fault the same statements in every run with the same seed, however
//! the connections interleave. So a draw is not taken from a shared random stream: it is a pure
//! function of (seed, rule, subject, attempt), as the fault server's HTTP draws are — the
//! subject being what was asked (a transaction's statements and their values so far, a Redis
//! command with its arguments) and the attempt how many times that subject came (a retry of
//! the same transaction is attempt 2).
//!
//! The function itself is the fault server's, handed in through [`Draw`], so that one seed
//! decides HTTP and protocol faults alike; this crate only counts the attempts.

use std::collections::HashMap;
use std::sync::Mutex;

/// A uniform draw in [0, 1), a pure function of its inputs (and of a seed it holds).
pub trait Draw: Send + Sync {
    /// The draw for `rule` on `subject`'s `attempt`-th occurrence (from 1).
    fn uniform(&self, rule: &str, subject: &str, attempt: u64) -> f64;
}

impl<F> Draw for F
where
    F: Fn(&str, &str, u64) -> f64 + Send + Sync,
{
    fn uniform(&self, rule: &str, subject: &str, attempt: u64) -> f64 {
        self(rule, subject, attempt)
    }
}

/// How many times each subject has come, over every connection of a proxy.
///
/// Bounded: two generations of at most `cap` subjects each; when the newer fills up the older
/// is forgotten. A subject forgotten comes back as attempt 1 — the same in every run that sees
/// the same subjects in the same numbers, so the draws still replay.
#[derive(Debug)]
pub(crate) struct SubjectCounts {
    cap: usize,
    maps: Mutex<(HashMap<String, u64>, HashMap<String, u64>)>,
}

impl SubjectCounts {
    pub(crate) fn new(cap: usize) -> SubjectCounts {
        SubjectCounts {
            cap: cap.max(1),
            maps: Mutex::new((HashMap::new(), HashMap::new())),
        }
    }

    /// Counts one more occurrence of `subject`; returns its number (from 1).
    pub(crate) fn bump(&self, subject: &str) -> u64 {
        let mut guard = match self.maps.lock() {
            Ok(g) => g,
            // A panic elsewhere while counting leaves counts that are still counts.
            Err(poisoned) => poisoned.into_inner(),
        };
        let (current, previous) = &mut *guard;
        let n = match current.get_mut(subject) {
            Some(n) => {
                *n += 1;
                return *n;
            }
            None => previous.get(subject).copied().unwrap_or(0) + 1,
        };
        if current.len() >= self.cap {
            *previous = std::mem::take(current);
        }
        current.insert(subject.to_string(), n);
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attempts_count_per_subject_and_stay_bounded() {
        let a = SubjectCounts::new(2);
        assert_eq!((a.bump("x"), a.bump("x"), a.bump("y")), (1, 2, 1));
        // "z" fills the newer generation: "x" moves to the older and keeps its count.
        assert_eq!(a.bump("z"), 1);
        assert_eq!(a.bump("x"), 3);
        for i in 0..100 {
            a.bump(&format!("s{i}"));
        }
        let maps = a.maps.lock().unwrap();
        assert!(maps.0.len() <= 2 && maps.1.len() <= 2);
    }
}
