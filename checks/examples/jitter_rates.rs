//! Prints the rates at which `jitter` passes, weakens, leaves undecided or fails each jitter
//! family, over the simulated grid of `checks/tests/support/jitter_sim.rs` (the table in the
//! checks reference).
//!
//!   cargo run --release -p checks --example jitter_rates -- [RUNS_PER_CELL] [SEED] [--cells]
//!
//! `--cells` also prints every cell (base delay, client, fleet size) that said fail on a jittered
//! family or anything but fail on `none`.

#[path = "../tests/support/jitter_sim.rs"]
mod jitter_sim;

use checks::JitterConfig;
use jitter_sim::{rates, Condition, Family, Model};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let cells = args.iter().any(|a| a == "--cells");
    let mut nums = args.iter().filter(|a| !a.starts_with("--"));
    let runs: usize = nums.next().and_then(|s| s.parse().ok()).unwrap_or(200);
    let seed: u64 = nums.next().and_then(|s| s.parse().ok()).unwrap_or(1);
    let cfg = JitterConfig::default();
    println!(
        "{runs} runs per cell, seed {seed}; 6 base delays × 2 clients × 4 fleet sizes per family\n"
    );
    for condition in [Condition::Idle, Condition::Busy, Condition::Stalled] {
        println!("{condition:?}\n");
        println!("| family | runs | pass | weak | undecided | fail |");
        println!("| --- | --- | --- | --- | --- | --- |");
        for family in Family::ALL {
            let t = rates(family, condition, runs, seed, &cfg, |d, model, n, cell| {
                let wrong = if family == Family::None {
                    cell.runs - cell.fail
                } else if family == Family::Proportional(10) {
                    0
                } else {
                    cell.fail
                };
                if cells && wrong > 0 {
                    let m = match model {
                        Model::Parallel => "parallel",
                        Model::EventLoop => "event loop",
                    };
                    eprintln!(
                        "  {condition:?} {} d={d} ms {m} n={n}: pass {} weak {} undecided {} fail {}",
                        family.name(),
                        cell.pass,
                        cell.weak,
                        cell.undecided,
                        cell.fail
                    );
                }
            });
            println!(
                "| {} | {} | {:.2} % | {:.2} % | {:.2} % | {:.2} % |",
                family.name(),
                t.runs,
                t.pct(t.pass),
                t.pct(t.weak),
                t.pct(t.undecided),
                t.pct(t.fail)
            );
        }
        println!();
    }
}
