//! The rates at which `jitter` errs, per jitter family, over a simulated grid of fleets (base
//! delays 10 ms–2 s, 20–500 callers, parallel clients and event loops, an idle and a busy
//! machine: `support/jitter_sim.rs`). The checks reference gives the full table
//! (`cargo run --release -p checks --example jitter_rates`); this test holds the bounds a
//! threshold must not move a rate past:
//! - no jitter said of ±20 % or any wider family: under 0.1 % of runs;
//! - pass or weak said of no jitter at all: under 0.1 % of runs.
//!
//! Undecided (inconclusive) is no error: it is said where the data cannot decide, and its rate
//! is bounded too, so that a threshold cannot buy the bounds by deciding nothing.

#[path = "support/jitter_sim.rs"]
mod jitter_sim;

use checks::JitterConfig;
use jitter_sim::{rates, Condition, Family, Tally};

/// Runs per cell: 20 × 48 cells = 960 runs per family and condition, 1,920 per family.
const RUNS: usize = 20;

fn family_rates(family: Family) -> (Tally, Tally) {
    let cfg = JitterConfig::default();
    let idle = rates(family, Condition::Idle, RUNS, 11, &cfg, |_, _, _, _| {});
    let busy = rates(family, Condition::Busy, RUNS, 12, &cfg, |_, _, _, _| {});
    (idle, busy)
}

fn both(t: (Tally, Tally)) -> Tally {
    let (a, b) = t;
    Tally {
        runs: a.runs + b.runs,
        pass: a.pass + b.pass,
        weak: a.weak + b.weak,
        undecided: a.undecided + b.undecided,
        fail: a.fail + b.fail,
    }
}

#[test]
fn each_family_stays_within_its_bounds() {
    let mut report = String::new();
    for family in Family::ALL {
        let t = both(family_rates(family));
        report += &format!(
            "{}: pass {:.2} %, weak {:.2} %, undecided {:.2} %, fail {:.2} % of {}\n",
            family.name(),
            t.pct(t.pass),
            t.pct(t.weak),
            t.pct(t.undecided),
            t.pct(t.fail),
            t.runs
        );
        match family {
            // Jitter is not said of none (pass or weak: a missed herd).
            Family::None => {
                assert!(t.pct(t.pass + t.weak) < 0.1, "{report}");
                assert!(t.pct(t.undecided) < 10.0, "{report}");
            }
            // ±10 % is the border: any verdict may be right.
            Family::Proportional(10) => {}
            // No jitter is not said of ±20 % or wider; undecided only where the delays are
            // too short to tell (about a sixth of the grid).
            _ => {
                assert!(t.pct(t.fail) < 0.1, "{report}");
                assert!(t.pct(t.undecided) < 20.0, "{report}");
            }
        }
        match family {
            Family::Equal | Family::Full | Family::Decorrelated | Family::Proportional(50) => {
                assert!(t.pct(t.pass) > 75.0, "{report}")
            }
            Family::Proportional(20) => assert!(t.pct(t.weak) > 70.0, "{report}"),
            _ => {}
        }
    }
    println!("{report}");
}
