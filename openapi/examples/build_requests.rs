//! Loads an OpenAPI document and builds a request for every operation, then prints what it made
//! and how long each step took: the measurement of BENCHMARKS.md ("OpenAPI request building").
//!
//! `cargo run --release -p openapi --example build_requests -- FILE [SEED] [--print]`
//!
//! With `--print`, every request is printed as HTTP/1.1 text; without, one line per operation
//! that got no request, and the totals. Exits 1 when an operation got no request.

use std::process::ExitCode;
use std::time::Instant;

use openapi::{Api, Config, LinkPlan, RequestBuilder};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let print = args.iter().any(|a| a == "--print");
    let rest: Vec<&String> = args.iter().filter(|a| *a != "--print").collect();
    let Some(path) = rest.first() else {
        eprintln!("usage: build_requests FILE [SEED] [--print]");
        return ExitCode::from(2);
    };
    let seed = match rest.get(1).map(|s| s.parse::<u64>()) {
        None => 0,
        Some(Ok(s)) => s,
        Some(Err(e)) => {
            eprintln!("SEED: {e}");
            return ExitCode::from(2);
        }
    };
    let started = Instant::now();
    let api = match Api::from_file(path.as_ref(), &Config::default()) {
        Ok(api) => api,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let loaded = started.elapsed();
    let plan = LinkPlan::new(&api);
    let planned = started.elapsed();
    let mut builder = match RequestBuilder::new(&api, seed) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let results = builder.build_all();
    let built = started.elapsed();
    let mut failed = 0;
    let mut bytes = 0usize;
    for r in &results {
        match r {
            Ok(request) => {
                let text = request.to_http();
                bytes += text.len();
                if print {
                    println!("{}\n", String::from_utf8_lossy(&text));
                }
            }
            Err(why) => {
                failed += 1;
                println!("{why}");
            }
        }
    }
    let unsafe_ops = api.unsafe_operations().count();
    let keyed = api
        .unsafe_operations()
        .filter(|o| o.key_header.is_some())
        .count();
    println!(
        "OpenAPI {}: {} operations ({unsafe_ops} unsafe, {keyed} with an idempotency key), {} \
         bindings; {} requests built ({bytes} bytes), {failed} with a stated reason; load {:.0} \
         ms, plan {:.0} ms, build {:.0} ms, total {:.0} ms",
        api.version(),
        api.operations().len(),
        plan.bindings().len(),
        results.len() - failed,
        loaded.as_secs_f64() * 1e3,
        (planned - loaded).as_secs_f64() * 1e3,
        (built - planned).as_secs_f64() * 1e3,
        built.as_secs_f64() * 1e3,
    );
    if failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
