//! Writes synthetic shard reports for benchmarking `harness merge`.
//!
//!   cargo run --release -p harness --example gen_shard_reports -- DIR SHARDS [SAMPLES] [SEED]
//!
//! Shard `i` of SHARDS gets `DIR/shard-i.json`: one rate phase whose SAMPLES latencies (default
//! 1,000,000) are drawn from a long-tailed distribution (most around a millisecond, a tail to a few
//! seconds), as `harness run --shard i/SHARDS` would report them, histograms included.

use std::collections::BTreeMap;
use std::time::Duration;

use harness::metrics::{encode_hdr, Recorder};
use harness::report::ReportBuilder;
use primitives::draw::{splitmix64_next, unit};
use reports::model::{Mergeable, PhaseHistograms, ShardInfo};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: gen_shard_reports DIR SHARDS [SAMPLES] [SEED]";
    let dir = std::path::PathBuf::from(args.first().ok_or(usage)?);
    let shards: u32 = args.get(1).ok_or(usage)?.parse()?;
    let samples: u64 = args.get(2).map_or(Ok(1_000_000), |s| s.parse())?;
    let mut seed: u64 = args.get(3).map_or(Ok(1), |s| s.parse())?;
    std::fs::create_dir_all(&dir)?;
    // A threshold the merge judges on the merged figures.
    let checks = serde_json::to_value(checks::ChecksConfig::parse(
        "thresholds: { rules: [\"p99 < 10s\"] }",
        "gen_shard_reports",
    )?)?;
    for i in 0..shards {
        let mut rec = Recorder::new(false);
        for _ in 0..samples {
            let u = unit(splitmix64_next(&mut seed));
            // 300 µs to ~3 s: u^12 puts most samples near the bottom and a long tail above.
            let us = 300.0 + 3_000_000.0 * u.powi(12);
            rec.latency(Duration::from_micros(us as u64));
            rec.result(Some(if u > 0.999 { 503 } else { 200 }), None);
        }
        rec.operations = samples;
        let over = Duration::from_secs(60);
        let phase = harness::report::phase(
            "steady",
            "rate",
            &rec,
            over,
            true,
            BTreeMap::from([("operations".to_string(), serde_json::json!(samples))]),
        );
        let hdr = encode_hdr(&rec.latency);
        let report = ReportBuilder::new("merge-benchmark")
            .started_unix_ms(1_764_583_200_000)
            .duration(over)
            .measured(&rec, over)
            .phases(vec![phase])
            .shard(Some(ShardInfo {
                index: i,
                count: shards,
                start_at_unix_ms: Some(1_764_583_200_000),
                ..ShardInfo::default()
            }))
            .mergeable(Some(Mergeable {
                latency_hdr: hdr.clone(),
                phases: vec![PhaseHistograms {
                    latency_hdr: hdr.clone(),
                    intended_hdr: Some(hdr),
                }],
                operations: samples,
                failed_operations: 0,
                checks: checks.clone(),
                retry_delays: Vec::new(),
            }))
            .build();
        std::fs::write(
            dir.join(format!("shard-{i}.json")),
            serde_json::to_string(&report)?,
        )?;
    }
    Ok(())
}
