//! A model of fleets retrying after failing together, for the rates at which `jitter` errs.
//!
//! Each run is one attempt group: `n` callers failed together and each retries once after the
//! wait its jitter family draws around a base delay `d`; what the server would see (when each
//! failure ended, when each retry arrived) is judged by `checks::jitter::group::judge` exactly as
//! the check judges a journal's group.
//!
//! The clients, as measured on this project's machines (calibration/RESULTS.md):
//! - `parallel`: threads, goroutines, processes — each caller on its own. The failures end over
//!   0.5–20 ms; each caller notices its failure and fires its timer late by an exponential draw
//!   (mean 0.15 ms idle, 1 ms busy).
//! - `event loop`: one thread handles every caller. The first attempts leave one after another,
//!   the loop handles the failures in their order at 0.1, 0.3 or 1 ms each (three times that
//!   busy), and its timers fire in their due order, each send taking half a handling.
//!
//! Conditions: `idle`, `busy` (the slower figures above), and `stalled`: busy, and the process
//! held up for 20–200 ms at a random point of the retries' span, after which everything that fell
//! due meanwhile leaves at once (0.05 ms apart) — the starved process of a loaded CI runner.

use checks::jitter::group::{judge, Finding, Retry};
use checks::JitterConfig;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

/// The jitter families, as their waits around a base delay `d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// Exactly `d`.
    None,
    /// `d × U(1 − p, 1 + p)`, `p` in percent.
    Proportional(u32),
    /// `d/2 + U(0, d/2)`.
    Equal,
    /// `U(0, d)`.
    Full,
    /// The first retry of decorrelated jitter: `U(d, 3d)`.
    Decorrelated,
}

impl Family {
    /// Every family the rates are given for.
    pub const ALL: [Family; 7] = [
        Family::None,
        Family::Proportional(10),
        Family::Proportional(20),
        Family::Proportional(50),
        Family::Equal,
        Family::Full,
        Family::Decorrelated,
    ];

    /// Its name in the rates table.
    pub fn name(self) -> String {
        match self {
            Family::None => "none".into(),
            Family::Proportional(p) => format!("±{p} %"),
            Family::Equal => "equal".into(),
            Family::Full => "full".into(),
            Family::Decorrelated => "decorrelated".into(),
        }
    }

    fn wait(self, d: f64, rng: &mut StdRng) -> f64 {
        let u = rng.random::<f64>();
        match self {
            Family::None => d,
            Family::Proportional(p) => {
                let p = p as f64 / 100.0;
                d * (1.0 - p + 2.0 * p * u)
            }
            Family::Equal => d / 2.0 + u * d / 2.0,
            Family::Full => u * d,
            Family::Decorrelated => d + 2.0 * d * u,
        }
    }
}

/// How the callers share the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Model {
    /// Each caller on its own.
    Parallel,
    /// One event loop for all.
    EventLoop,
}

/// How loaded the machine is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Condition {
    /// Nothing else runs.
    Idle,
    /// Other work shares the cores.
    Busy,
    /// Busy, and the process held up once during the retries.
    Stalled,
}

/// The base delays (ms), fleet sizes and clients of the grid.
pub const DELAYS_MS: [f64; 6] = [10.0, 30.0, 100.0, 300.0, 1000.0, 2000.0];
/// Fleet sizes of the grid.
pub const CALLERS: [usize; 4] = [20, 50, 200, 500];
/// Clients of the grid.
pub const MODELS: [Model; 2] = [Model::Parallel, Model::EventLoop];

fn exp(rng: &mut StdRng, mean: f64) -> f64 {
    -mean * (1.0 - rng.random::<f64>()).ln()
}

fn uniform(rng: &mut StdRng, lo: f64, hi: f64) -> f64 {
    lo + (hi - lo) * rng.random::<f64>()
}

/// One group as the server would see it: (failure end, retry arrival) per caller, in ms.
pub fn simulate(
    family: Family,
    d: f64,
    n: usize,
    model: Model,
    condition: Condition,
    rng: &mut StdRng,
) -> Vec<(f64, f64)> {
    let busy = condition != Condition::Idle;
    let sigma = if busy { 1.0 } else { 0.15 };
    let mut failed = Vec::with_capacity(n);
    let mut fired = vec![0.0; n];
    match model {
        Model::Parallel => {
            let spread = uniform(rng, 0.5, 20.0);
            for _ in 0..n {
                failed.push(uniform(rng, 0.0, spread));
            }
            failed.sort_by(f64::total_cmp);
            for (i, &e) in failed.iter().enumerate() {
                let noticed = e + 0.05 + exp(rng, sigma);
                fired[i] = noticed + family.wait(d, rng) + exp(rng, sigma);
            }
        }
        Model::EventLoop => {
            let h = [0.1, 0.3, 1.0][rng.random_range(0..3usize)] * if busy { 3.0 } else { 1.0 };
            let mut sent = 0.0;
            for _ in 0..n {
                sent += h * uniform(rng, 0.5, 1.5) * 0.3;
                failed.push(sent + 0.1);
            }
            let mut handled = f64::NEG_INFINITY;
            let mut due = Vec::with_capacity(n);
            for &e in &failed {
                handled = (e + 0.05).max(handled) + h * uniform(rng, 0.5, 1.5);
                due.push(handled + family.wait(d, rng));
            }
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&a, &b| due[a].total_cmp(&due[b]));
            let mut last = f64::NEG_INFINITY;
            for i in order {
                let send = 0.5 * h * uniform(rng, 0.5, 1.5);
                last = (due[i] + exp(rng, sigma)).max(last + send);
                fired[i] = last;
            }
        }
    }
    if condition == Condition::Stalled && n > 0 {
        let lo = fired.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = fired.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let start = uniform(rng, lo - 50.0, hi);
        let end = start + uniform(rng, 20.0, 200.0);
        let mut inside: Vec<usize> = (0..n)
            .filter(|&i| fired[i] >= start && fired[i] < end)
            .collect();
        inside.sort_by(|&a, &b| fired[a].total_cmp(&fired[b]));
        for (k, i) in inside.into_iter().enumerate() {
            fired[i] = end + 0.05 * k as f64;
        }
    }
    failed
        .into_iter()
        .zip(fired)
        .map(|(e, f)| (e, f + 0.05))
        .collect()
}

/// What the check says of one simulated group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Said {
    /// Jittered (pass).
    Pass,
    /// Weak.
    Weak,
    /// Undecided (inconclusive).
    Undecided,
    /// No jitter, or immediate retries (fail).
    Fail,
}

/// Judges one simulated group with `cfg`.
pub fn say(group: &[(f64, f64)], cfg: &JitterConfig) -> Said {
    let retries: Vec<Retry> = group
        .iter()
        .enumerate()
        .map(|(i, &(e, r))| Retry {
            failed_us: (e * 1000.0 + 1e6) as u64,
            failed_seq: i as u64,
            arrived_us: (r * 1000.0 + 1e6) as u64,
            seq: i as u64,
        })
        .collect();
    match judge(&retries, cfg).map(|j| j.finding) {
        Some(Finding::Jittered) => Said::Pass,
        Some(Finding::Small(_)) => Said::Weak,
        Some(Finding::Undecided(_)) | None => Said::Undecided,
        Some(Finding::NoJitter(_) | Finding::NoBackoff | Finding::Immediate) => Said::Fail,
    }
}

/// Counts of what was said, per family.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    /// Runs.
    pub runs: u64,
    /// Said pass.
    pub pass: u64,
    /// Said weak.
    pub weak: u64,
    /// Said undecided.
    pub undecided: u64,
    /// Said fail.
    pub fail: u64,
}

impl Tally {
    /// Adds one run.
    pub fn add(&mut self, said: Said) {
        self.runs += 1;
        match said {
            Said::Pass => self.pass += 1,
            Said::Weak => self.weak += 1,
            Said::Undecided => self.undecided += 1,
            Said::Fail => self.fail += 1,
        }
    }

    /// A count as a percentage of the runs.
    pub fn pct(&self, count: u64) -> f64 {
        if self.runs == 0 {
            0.0
        } else {
            100.0 * count as f64 / self.runs as f64
        }
    }
}

/// Runs `runs` groups per cell of the grid for `family` under `condition`, seeded.
pub fn rates(
    family: Family,
    condition: Condition,
    runs: usize,
    seed: u64,
    cfg: &JitterConfig,
    mut per_cell: impl FnMut(f64, Model, usize, &Tally),
) -> Tally {
    let mut all = Tally::default();
    for (di, &d) in DELAYS_MS.iter().enumerate() {
        for (mi, &model) in MODELS.iter().enumerate() {
            for (ni, &n) in CALLERS.iter().enumerate() {
                let fi = Family::ALL.iter().position(|&f| f == family).unwrap_or(99);
                let cell = [
                    seed,
                    fi as u64,
                    condition as u64,
                    di as u64,
                    mi as u64,
                    ni as u64,
                ];
                let mut rng = StdRng::seed_from_u64(mix(&cell));
                let mut cell = Tally::default();
                for _ in 0..runs {
                    let said = say(&simulate(family, d, n, model, condition, &mut rng), cfg);
                    cell.add(said);
                    all.add(said);
                }
                per_cell(d, model, n, &cell);
            }
        }
    }
    all
}

/// One seed from several numbers (splitmix64 steps).
fn mix(parts: &[u64]) -> u64 {
    let mut h = 0x243F_6A88_85A3_08D3u64;
    for &p in parts {
        h = h.wrapping_add(p).wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = h;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        h = z ^ (z >> 31);
    }
    h
}
