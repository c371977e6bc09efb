//! Which jitter family a client's retries read as: the names of the AWS Architecture Blog's
//! "Exponential Backoff and Jitter" (none, equal, full, decorrelated) and the proportional
//! jitter gRPC and many libraries draw (the backoff × U(1 − f, 1 + f)).
//!
//! The family is read from the shape of the delays, not from their milliseconds, so it does not
//! depend on the backoff a client chose:
//! - **The width of the first retries** (the lowest attempt group judged in the largest cluster,
//!   the one least disturbed by caps and by the end of the run): the width of the uniform draw
//!   the delays' spread amounts to (the group's [`Measure::width_ms`], which does not count a
//!   drift the failure order explains), as ± a fraction of the median delay. Full jitter,
//!   U(0, b), reads ±100 %; equal jitter, b/2 + U(0, b/2), ±33 % (as does p-retry's
//!   b × U(1, 2)); proportional jitter ±f.
//! - **How the spread changes from one attempt to the next**: the ratio of the slow retries'
//!   delay to the fast ones' (p90 / p10). Every family that scales one draw by the backoff keeps
//!   it, whatever the backoff's growth; decorrelated jitter, U(base, 3 × previous delay), keeps
//!   the floor at the base while the ceiling grows, so the ratio widens (×1.7 at the median of
//!   30 retries, against ×1.0 for a proportional ±50 % with the same first draw: the simulation
//!   in this file's tests), and its floor stays ([`FLOOR_KEPT`]) where a growing backoff moves
//!   every other family's.
//!
//! What the thresholds err on (simulated, 3,000 runs each): a proportional ±50 % and
//! decorrelated jitter have the same first draw (a ratio of 3 between its ends), so only the next
//! attempt tells them apart. From 30 retries per group decorrelated jitter is named so in about
//! three runs of four (the others proportional, the summary saying decorrelated could not be ruled
//! out), and a proportional ±50 % is named decorrelated in about one run in 65; from 100 retries,
//! 97 runs in 100 and never. A proportional ±50 % reads equal in about one run in five at 30
//! retries (its width straddles [`EQUAL_TO`]); full jitter reads full in 97 runs of 100 and
//! more in simulation, but a real client's handling time adds to every delay and narrows the
//! reading (full-jitter libraries read ±61 % to ±82 % on the calibration matrix). Where the
//! readings cannot tell two families apart they name both ([`Reading::alternative`]:
//! "proportional or full jitter", "proportional or decorrelated jitter"). Additive jitter
//! (`b + U(0, J)` with J much larger than b, stamina's default) spreads like full jitter and is
//! named so.

use super::group::Measure;

/// Full jitter: the first retries' width at least ±62 % of the median (±100 % drawn; 30 draws
/// read ±63 % to ±150 %).
pub const FULL: f64 = 0.62;
/// From this width up (and fast delays under [`DECORRELATED_FLOOR`] of slow ones), a reading
/// short of [`FULL`] may still be full jitter: a client's handling time adds to every delay, and
/// 120 ms of it on U(0, 500 ms) reads ±68 % (the calibration matrix read full-jitter libraries
/// at ±61 % to ±82 % on a busy machine).
pub const FULL_MAYBE: f64 = 0.5;
/// Full jitter too: the first retries' fast delays (p10) under this fraction of their slow ones
/// (p90), whatever the width reads (U(0, b) puts them at 0.1 b and 0.9 b; a ratio of 3 between
/// the ends of the draw, as decorrelated jitter's first and a proportional ±50 %, at 0.43).
pub const FULL_FLOOR: f64 = 0.25;
/// Equal jitter: from ±24 % up to [`EQUAL_TO`] (±33 % drawn; 30 draws read ±23 % to ±39 %).
pub const EQUAL_FROM: f64 = 0.24;
/// The widest reading named equal jitter.
pub const EQUAL_TO: f64 = 0.42;
/// The widening of the p90 / p10 ratio from one attempt to the next at or above which the
/// delays may be decorrelated (30 decorrelated draws widen it ×1.3 to ×2.6 between the 5th and
/// 95th percentiles of runs; a proportional ±50 % reaches ×1.38 at its 95th, hence the spread's
/// growth and the floor asked for as well).
pub const DECORRELATED_WIDENING: f64 = 1.35;
/// Decorrelated jitter's first draw, U(base, 3 base), puts the fast delays (p10) at 0.43 of the
/// slow ones (p90); under this fraction the draw reaches down towards zero (full jitter, whose
/// p90 / p10 ratio is too unsteady to read a widening from).
pub const DECORRELATED_FLOOR: f64 = 0.33;
/// And its spread, as ± a fraction of the median, grows by at least this factor into the next
/// attempt (U(base, 3 × previous) spreads ±47 % at the first retry and ±75 % at the second),
/// where every family that scales one draw keeps it (×1.0).
pub const DECORRELATED_SPREAD_GROWTH: f64 = 1.3;
/// Decorrelated jitter keeps its floor: the fast delays (p10) of the next attempt's retries
/// within these factors of the first's (×0.87 to ×1.76 at the 2nd and 98th percentiles of 30
/// retries), where a backoff that grows moves the floor of every other family with it, and full
/// jitter's floor near zero swings widely.
pub const FLOOR_KEPT: std::ops::RangeInclusive<f64> = 0.7..=1.45;
/// Up to this widening the delays scale together (a proportional family); between it and
/// [`DECORRELATED_WIDENING`] the reading cannot tell.
pub const PROPORTIONAL_WIDENING: f64 = 1.2;

/// A jitter family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// The delays do not spread: every client retries at the same moment.
    None,
    /// The backoff × U(1 − f, 1 + f), f under about a third (gRPC's ±20 %) or the wide ones
    /// (±50 %).
    Proportional,
    /// b/2 + U(0, b/2): ±33 %.
    Equal,
    /// U(0, b): ±100 %.
    Full,
    /// U(base, 3 × the previous delay).
    Decorrelated,
}

impl Family {
    /// Its name in the report (`metrics.family`).
    pub fn name(self) -> &'static str {
        match self {
            Family::None => "none",
            Family::Proportional => "proportional",
            Family::Equal => "equal",
            Family::Full => "full",
            Family::Decorrelated => "decorrelated",
        }
    }
}

/// A judged group of retries, as the family reads it.
#[derive(Debug, Clone, Copy)]
pub struct Group<'a> {
    /// The cluster's start (µs): groups of one cluster are the same operations' retries.
    pub cluster_us: u64,
    /// Members of the cluster.
    pub members: usize,
    /// The attempt its retries made.
    pub attempt: u32,
    /// Its readings.
    pub measure: &'a Measure,
}

/// The family and what it was read from.
#[derive(Debug, Clone, PartialEq)]
pub struct Reading {
    /// The family.
    pub family: Family,
    /// The first retries' width as ± a fraction of their median delay.
    pub spread: f64,
    /// The attempt whose retries gave `spread`.
    pub attempt: u32,
    /// The first retries' fast delays (p10) as a fraction of their slow ones (p90).
    pub floor: f64,
    /// The largest widening of the p90 / p10 ratio between consecutive attempt groups of one
    /// cluster, with the attempt it widened into, when two were judged.
    pub widening: Option<(f64, u32)>,
    /// A family the readings cannot rule out.
    pub alternative: Option<Family>,
}

impl Reading {
    /// The family as the report names it: "full jitter", or with the one the readings cannot
    /// rule out, "proportional or full jitter".
    pub fn named(&self) -> String {
        match self.alternative {
            Some(a) => format!("{} or {} jitter", self.family.name(), a.name()),
            None => format!("{} jitter", self.family.name()),
        }
    }

    /// What the reading rests on, in a clause.
    pub fn why(&self) -> String {
        let spread = format!(
            "the retries before attempt {} spread ±{:.0} % around their median",
            self.attempt,
            100.0 * self.spread
        );
        let widened = |w: f64, k: u32| {
            format!(
                "the ratio of their slow delays to their fast ones (p90 / p10) widened ×{w:.2} \
                 into attempt {k}"
            )
        };
        match (self.family, self.widening) {
            (Family::Decorrelated, Some((w, k))) => format!(
                "{} (≥ ×{DECORRELATED_WIDENING}: the floor stays while the ceiling grows); {spread}",
                widened(w, k)
            ),
            (Family::Full, _) => format!(
                "{spread} (full: ≥ ±{:.0} %, or fast delays under {FULL_FLOOR} × slow ones)",
                100.0 * FULL
            ),
            (Family::Equal, _) => format!(
                "{spread} (equal ±{:.0} % to ±{:.0} %)",
                100.0 * EQUAL_FROM,
                100.0 * EQUAL_TO
            ),
            _ if self.alternative == Some(Family::Full) => format!(
                "{spread}, its fast delays at {:.2} of its slow ones (full: ≥ ±{:.0} % or under \
                 {FULL_FLOOR}; from ±{:.0} % and under {DECORRELATED_FLOOR} full jitter cannot be \
                 ruled out: the time a client takes to handle its failures adds to every delay, \
                 and narrows full jitter's spread this far)",
                self.floor,
                100.0 * FULL,
                100.0 * FULL_MAYBE
            ),
            (_, Some((w, k))) if self.alternative == Some(Family::Decorrelated) => {
                format!(
                    "{spread}; {} (≥ ×{PROPORTIONAL_WIDENING}), so decorrelated jitter cannot be \
                     ruled out",
                    widened(w, k)
                )
            }
            _ => spread,
        }
    }
}

/// The spread of a group: the width of its delays as ± a fraction of their median.
fn spread(m: &Measure) -> f64 {
    if m.median_ms > 0.0 {
        m.width_ms / (2.0 * m.median_ms)
    } else {
        0.0
    }
}

/// The p90 / p10 ratio of a group's delays (the fast delays floored at 1 ms).
fn ratio(m: &Measure) -> f64 {
    m.p90_ms / m.p10_ms.max(1.0)
}

/// Reads the family of jittered groups (every one judged jitter, of any width); `None` when
/// there is none.
pub fn read(groups: &[Group<'_>]) -> Option<Reading> {
    let first = groups
        .iter()
        .max_by(|a, b| {
            a.members
                .cmp(&b.members)
                .then(b.cluster_us.cmp(&a.cluster_us))
                .then(b.attempt.cmp(&a.attempt))
        })
        .copied()?;
    let first = groups
        .iter()
        .filter(|g| g.cluster_us == first.cluster_us)
        .min_by_key(|g| g.attempt)
        .copied()
        .unwrap_or(first);
    // Each pair of consecutive attempt groups of one cluster: how much the p90 / p10 ratio
    // widened, and whether the floor stayed while the spread grew.
    let pairs: Vec<(f64, bool, u32)> = groups
        .iter()
        .filter_map(|a| {
            let b = groups.iter().find(|b| {
                b.cluster_us == a.cluster_us && b.attempt == a.attempt.saturating_add(1)
            })?;
            let w = ratio(b.measure) / ratio(a.measure);
            let kept = FLOOR_KEPT.contains(&(b.measure.p10_ms / a.measure.p10_ms.max(1.0)))
                && spread(b.measure) >= DECORRELATED_SPREAD_GROWTH * spread(a.measure);
            w.is_finite().then_some((w, kept, b.attempt))
        })
        .collect();
    let widening = pairs
        .iter()
        .map(|&(w, _, k)| (w, k))
        .max_by(|x, y| x.0.total_cmp(&y.0));
    let decorrelated = pairs
        .iter()
        .any(|&(w, kept, _)| kept && w >= DECORRELATED_WIDENING);
    let s = spread(first.measure);
    let floor = first.measure.p10_ms / first.measure.p90_ms;
    let family = if s >= FULL || floor < FULL_FLOOR {
        Family::Full
    } else if floor >= DECORRELATED_FLOOR && decorrelated {
        Family::Decorrelated
    } else if (EQUAL_FROM..EQUAL_TO).contains(&s) {
        Family::Equal
    } else {
        Family::Proportional
    };
    let alternative = match family {
        Family::Proportional if s >= FULL_MAYBE && floor < DECORRELATED_FLOOR => Some(Family::Full),
        Family::Proportional | Family::Equal
            if s >= EQUAL_FROM && widening.is_some_and(|(w, _)| w >= PROPORTIONAL_WIDENING) =>
        {
            Some(Family::Decorrelated)
        }
        _ => None,
    };
    Some(Reading {
        family,
        spread: s,
        attempt: first.attempt,
        floor,
        widening,
        alternative,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::quantile;
    use rand::rngs::StdRng;
    use rand::{RngExt, SeedableRng};

    /// A measure of `delays` as the group judge makes it (no drift: the local width is the
    /// global one).
    fn measure(delays: &[f64]) -> Measure {
        let mut delays = delays.to_vec();
        delays.sort_by(f64::total_cmp);
        let q = |p| quantile(&delays, p).unwrap_or(f64::NAN);
        let (p10, p90) = (q(0.1), q(0.9));
        Measure {
            n: delays.len(),
            median_ms: q(0.5),
            chosen_ms: q(0.5),
            min_ms: q(0.0),
            p10_ms: p10,
            p90_ms: p90,
            global_width_ms: (p90 - p10) / 0.8,
            local_width_ms: (p90 - p10) / 0.8,
            width_ms: (p90 - p10) / 0.8,
            jitter: 0.0,
            failure_spread_ms: 0.0,
            arrival_spread_ms: 0.0,
            order_corr: 0.0,
            slope: None,
        }
    }

    /// The family of `n` operations' two retries drawn by `draw(rng, k, previous)`, over
    /// `trials` seeds: how often each family is read.
    fn rates(
        trials: u64,
        n: usize,
        mut draw: impl FnMut(&mut StdRng, u32, f64) -> f64,
    ) -> Vec<(&'static str, f64)> {
        let mut counts = std::collections::BTreeMap::new();
        for seed in 0..trials {
            let mut rng = StdRng::seed_from_u64(seed);
            let mut groups = [Vec::new(), Vec::new()];
            for _ in 0..n {
                let mut prev = 0.0;
                for (k, g) in groups.iter_mut().enumerate() {
                    prev = draw(&mut rng, k as u32, prev);
                    g.push(prev);
                }
            }
            let ms: Vec<Measure> = groups.iter().map(|g| measure(g)).collect();
            let gs: Vec<Group> = ms
                .iter()
                .enumerate()
                .map(|(k, m)| Group {
                    cluster_us: 0,
                    members: n,
                    attempt: k as u32 + 2,
                    measure: m,
                })
                .collect();
            let f = read(&gs).map_or("unread", |r| r.family.name());
            *counts.entry(f).or_insert(0u64) += 1;
        }
        counts
            .into_iter()
            .map(|(f, c)| (f, c as f64 / trials as f64))
            .collect()
    }

    fn rate(r: &[(&'static str, f64)], family: &str) -> f64 {
        r.iter()
            .find(|(f, _)| *f == family)
            .map_or(0.0, |(_, x)| *x)
    }

    fn b(k: u32) -> f64 {
        500.0 * f64::powi(2.0, k as i32)
    }

    #[test]
    fn each_family_is_read_as_itself_from_thirty_retries() {
        let full = rates(400, 30, |r, k, _| r.random::<f64>() * b(k));
        assert!(rate(&full, "full") >= 0.97, "{full:?}");
        let equal = rates(400, 30, |r, k, _| {
            b(k) / 2.0 + r.random::<f64>() * b(k) / 2.0
        });
        assert!(rate(&equal, "equal") >= 0.9, "{equal:?}");
        assert_eq!(rate(&equal, "decorrelated"), 0.0, "{equal:?}");
        let grpc = rates(400, 30, |r, k, _| {
            100.0 * 1.6f64.powi(k as i32) * r.random_range(0.8..1.2)
        });
        assert!(rate(&grpc, "proportional") >= 0.97, "{grpc:?}");
        let decorrelated = rates(400, 30, |r, _, prev| {
            let prev: f64 = if prev > 0.0 { prev } else { 100.0 };
            r.random_range(100.0..3.0 * prev)
        });
        // Three runs in four; the others read as proportional, their summary saying that
        // decorrelated jitter could not be ruled out, or as full.
        assert!(
            rate(&decorrelated, "decorrelated") >= 0.7,
            "{decorrelated:?}"
        );
        assert_eq!(rate(&decorrelated, "none"), 0.0);
        // A proportional ±50 % starts as decorrelated jitter does: only the widening differs.
        let wide = rates(400, 30, |r, k, _| {
            500.0 * 1.5f64.powi(k as i32) * r.random_range(0.5..1.5)
        });
        assert!(rate(&wide, "decorrelated") <= 0.04, "{wide:?}");
        // Additive jitter much wider than the backoff (stamina's 0.1 s · 2^k + U(0, 1 s)).
        let additive = rates(400, 30, |r, k, _| {
            100.0 * f64::powi(2.0, k as i32) + r.random::<f64>() * 1000.0
        });
        assert!(rate(&additive, "full") >= 0.8, "{additive:?}");
    }

    #[test]
    fn the_reading_says_what_it_rests_on() {
        let m1 = measure(&[100.0, 150.0, 200.0, 250.0, 300.0]);
        let m2 = measure(&[100.0, 200.0, 400.0, 700.0, 900.0]);
        let gs = [
            Group {
                cluster_us: 0,
                members: 5,
                attempt: 2,
                measure: &m1,
            },
            Group {
                cluster_us: 0,
                members: 5,
                attempt: 3,
                measure: &m2,
            },
        ];
        let r = read(&gs).expect("read");
        assert_eq!(r.family, Family::Decorrelated, "{r:?}");
        assert_eq!(r.attempt, 2);
        assert!(r.why().contains("into attempt 3"), "{}", r.why());
        assert_eq!(r.named(), "decorrelated jitter");
        // Full jitter through a slow client's handling: ±56 %, its floor at 0.3.
        let slow = measure(&[100.0, 225.0, 390.0, 470.0, 520.0]);
        let r = read(&[Group {
            cluster_us: 0,
            members: 5,
            attempt: 2,
            measure: &slow,
        }])
        .expect("read");
        assert_eq!(r.family, Family::Proportional, "{r:?}");
        assert_eq!(r.alternative, Some(Family::Full), "{r:?}");
        assert_eq!(r.named(), "proportional or full jitter");
        assert!(
            r.why().contains("full jitter cannot be ruled out"),
            "{}",
            r.why()
        );
        assert!(read(&[]).is_none());
    }
}
