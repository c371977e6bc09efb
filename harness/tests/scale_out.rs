//! A run split into shards, as an Indexed Job runs it: shard processes started with
//! `JOB_COMPLETION_INDEX`, `HARNESS_SHARDS` and one `HARNESS_START_AT`, each from its own loopback
//! address, against two fault-server replicas on their own addresses that share one database;
//! then `harness merge` with the replicas' journals fetched from them.
//!
//! The database is PostgreSQL when `FAULT_SERVER_TEST_DATABASE_URL` names one (`.ci/run` starts
//! it; without it the PostgreSQL case says it skips, unless `HARNESS_REQUIRE_TOOLS=1`), and an
//! SQLite file both replicas open otherwise.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use assert_cmd::cargo::CommandCargoExt;
use history::Entry;
use reports::Report;

fn harness() -> Command {
    Command::cargo_bin("harness").unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Fault-server replicas in a background runtime, each on its own loopback address.
struct Replicas {
    urls: Vec<String>,
    _rt: tokio::runtime::Runtime,
}

fn replicas(config: &str, addrs: &[&str]) -> Replicas {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut urls = Vec::new();
    for (i, addr) in addrs.iter().enumerate() {
        let cfg = fault_server::Config::from_yaml(config, "replica.yaml").unwrap();
        let opts = fault_server::ServerOptions {
            bind: format!("{addr}:0").parse().unwrap(),
            replica_id: Some(format!("replica-{i}")),
            seed: Some(1),
            ..Default::default()
        };
        let s = rt
            .block_on(fault_server::FaultServer::start(cfg, opts))
            .unwrap_or_else(|e| panic!("replica on {addr}: {e}"));
        urls.push(s.url());
        rt.spawn(async move {
            let _keep = s;
            std::future::pending::<()>().await
        });
    }
    Replicas { urls, _rt: rt }
}

const SCENARIO: &str = r#"
name: sharded-orders
seed: 11
target: http://127.0.0.1:9
phases:
  - name: steady
    rate: { rps: 120, duration: 1s, connections: 6 }
    request: { method: GET, path: "/orders/none-{{seq}}" }
  - name: same-key-bursts
    burst: { size: 10, rounds: 3, every: 1500ms }
    request:
      method: POST
      path: /orders
      headers: { Idempotency-Key: "{{key}}" }
      json: { sku: "A-{{round}}", qty: 1 }
checks:
  duplicates: {}
  thresholds: { rules: ["p99 < 20s"] }
"#;

const SHARDS: u32 = 3;

/// The scenario's seed, steady phase and burst timing, as the shards schedule them.
const SEED: u64 = 11;
const STEADY_MS: u64 = 1000;
const ROUNDS: u64 = 3;
const EVERY_MS: u64 = 1500;

/// What a sharded run left: the shards' reports, the merged report and journal, merge's exit
/// code, and the common start (ms since the Unix epoch).
struct Sharded {
    shards: Vec<Report>,
    merged: Report,
    journal: Vec<Entry>,
    code: i32,
    start_at_ms: u64,
}

/// Runs the scenario as `SHARDS` processes started the way an Indexed Job starts its pods, then
/// merges their reports with the replicas' journals.
fn run_sharded(dir: &Path, urls: &[String]) -> Sharded {
    let scenario = dir.join("scenario.yaml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    // Far enough ahead for every process to be up, even on a busy machine.
    let start_at = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
        + 4000;
    let children: Vec<_> = (0..SHARDS)
        .map(|i| {
            harness()
                .arg("run")
                .arg(&scenario)
                .args(["--target", &urls[i as usize % urls.len()]])
                .args(["--format", "json", "--report-dir"])
                .arg(dir.join(format!("shard-{i}")))
                .env("JOB_COMPLETION_INDEX", i.to_string())
                .env("HARNESS_SHARDS", SHARDS.to_string())
                .env("HARNESS_START_AT", start_at.to_string())
                .env("HARNESS_SOURCE_ADDR", format!("127.0.0.{}", 4 + i))
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut shards = Vec::new();
    for (i, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output().unwrap();
        // A shard judges only what it saw (no journal): its exit code is not the run's.
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "shard {i}: {}",
            text(&out)
        );
        // What it printed is its report.json, as `kubectl logs` would collect it.
        let printed: Report = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("shard {i} printed no report: {e}\n{}", text(&out)));
        let written = read_report(&dir.join(format!("shard-{i}/report.json")));
        assert_eq!(printed, written);
        assert!(
            written
                .notes
                .iter()
                .any(|n| n.starts_with("no journal:") && n.contains("harness merge")),
            "shard {i} says why its journal checks judged nothing: {:?}",
            written.notes
        );
        shards.push(written);
    }
    let merged_dir = dir.join("merged");
    let mut merge = harness();
    merge.arg("merge");
    for i in 0..SHARDS {
        merge.arg(dir.join(format!("shard-{i}/report.json")));
    }
    merge.arg("--fault-url").args(urls);
    let out = merge
        .args(["--format", "json", "--report-dir"])
        .arg(&merged_dir)
        .output()
        .unwrap();
    let code = out.status.code().unwrap_or(-1);
    assert!(matches!(code, 0 | 1), "merge: {}", text(&out));
    let merged = read_report(&merged_dir.join("report.json"));
    let journal = std::fs::read_to_string(merged_dir.join("journal.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    Sharded {
        shards,
        merged,
        journal,
        code,
        start_at_ms: start_at,
    }
}

fn read_report(p: &Path) -> Report {
    let text = std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    reports::from_json(&text).unwrap()
}

/// The merged counts are the sums, and the merged percentiles are those of every shard's
/// samples together (the histograms decoded and added here, independently of the merge).
fn assert_exact_merge(shards: &[Report], merged: &Report) {
    let sum = |f: &dyn Fn(&Report) -> u64| shards.iter().map(f).sum::<u64>();
    assert_eq!(merged.requests.sent, sum(&|r| r.requests.sent));
    assert_eq!(merged.requests.completed, sum(&|r| r.requests.completed));
    for (status, n) in &merged.requests.by_status {
        assert_eq!(
            *n,
            sum(&|r| r.requests.by_status.get(status).copied().unwrap_or(0))
        );
    }
    // 120 rps for 1 s (every one sent, or counted as never started on a busy machine), and 3
    // rounds of 10.
    let q = &merged.phases[0].requests;
    assert_eq!(q.sent + q.not_started + q.cancelled, 120, "{q:?}");
    assert_eq!(merged.phases[1].requests.sent, 30, "{:?}", merged.phases[1]);
    let mut union = harness::metrics::decode_hdr("").unwrap();
    for r in shards {
        let m = r
            .mergeable
            .as_ref()
            .expect("a shard report carries its histograms");
        union
            .add(harness::metrics::decode_hdr(&m.latency_hdr).unwrap())
            .unwrap();
    }
    assert_eq!(union.len(), merged.requests.completed);
    assert_eq!(merged.latency_ms, harness::metrics::latency_ms(&union));
    let info = merged
        .shard
        .as_ref()
        .expect("the merged report names its shards");
    assert_eq!(info.merged, vec![0, 1, 2]);
    for (i, r) in shards.iter().enumerate() {
        let s = r.shard.as_ref().expect("a shard report says which shard");
        assert_eq!((s.index, s.count), (i as u32, SHARDS));
    }
}

/// Every burst key's requests: from every shard's clients, through both replicas.
fn burst_keys(journal: &[Entry]) -> std::collections::BTreeMap<String, Vec<&Entry>> {
    let mut by_key: std::collections::BTreeMap<String, Vec<&Entry>> = Default::default();
    for e in journal.iter().filter(|e| e.method == "POST") {
        if let Some(k) = &e.idempotency_key {
            by_key.entry(k.clone()).or_default().push(e);
        }
    }
    assert_eq!(by_key.len(), ROUNDS as usize, "one key per round");
    for (k, es) in &by_key {
        assert_eq!(es.len(), 10, "{k}: the round's 10 requests");
        let clients: std::collections::BTreeSet<_> = es.iter().map(|e| &e.client_id).collect();
        assert_eq!(clients.len(), 10, "{k}: ten clients across the shards");
        let replicas: std::collections::BTreeSet<_> = es.iter().map(|e| &e.replica).collect();
        assert_eq!(replicas.len(), 2, "{k}: both replicas saw the key");
    }
    by_key
}

/// Every round fires at one instant from the common start on every shard: round k (from 1) at
/// the start plus the steady phase plus (k − 1) × `every`, with the key derived from the seed, the
/// start and the round. Asserted on the replicas' wall clocks (`unix_us`, the clock the merge
/// orders by), without a bound a busy machine could break: each of round k's requests arrives
/// at or after round k's instant and before round k + 1's (rounds are neither early nor
/// overlapping). How closely a round's requests arrive is the machine's: printed, not asserted.
fn assert_rounds_keep_their_instants(
    case: &str,
    by_key: &std::collections::BTreeMap<String, Vec<&Entry>>,
    start_at_ms: u64,
) {
    // The shards put the wall-clock start on their monotonic clocks once, before the wait; NTP
    // may slew the wall clock against it by up to 0.05 %: 5 ms over the few seconds of a run.
    const CLOCKS_US: u64 = 5_000;
    for fragment in [
        format!("seed: {SEED}\n"),
        format!("duration: {}s,", STEADY_MS / 1000),
        format!("rounds: {ROUNDS}, every: {EVERY_MS}ms"),
    ] {
        assert!(
            SCENARIO.contains(&fragment),
            "the scenario has {fragment:?}"
        );
    }
    let keys = harness::driver::Keys::shared(SEED, start_at_ms);
    for round in 1..=ROUNDS {
        let key = keys.key(1, round);
        let es = by_key.get(&key).unwrap_or_else(|| {
            panic!("{case}: round {round}'s key {key} (from the seed and the start) is not in the journal: {:?}", by_key.keys())
        });
        let at_us = (start_at_ms + STEADY_MS + (round - 1) * EVERY_MS) * 1000;
        let next_us = at_us + EVERY_MS * 1000;
        let first = es.iter().map(|e| e.unix_us).min().unwrap();
        let last = es.iter().map(|e| e.unix_us).max().unwrap();
        assert!(
            first + CLOCKS_US >= at_us,
            "{case}: round {round} arrived {} µs before its instant",
            at_us - first
        );
        assert!(
            last < next_us,
            "{case}: round {round} ran into round {}: its last request arrived {} µs after its instant",
            round + 1,
            last - at_us
        );
        let clients: std::collections::BTreeSet<_> = es.iter().map(|e| &e.client_id).collect();
        println!(
            "{case}: round {round}: {} requests from {} clients arrived {:.3} ms after the round's instant, spread over {:.3} ms",
            es.len(),
            clients.len(),
            first.saturating_sub(at_us) as f64 / 1000.0,
            (last - first) as f64 / 1000.0
        );
    }
}

fn database_cases() -> Vec<(&'static str, String)> {
    let mut cases = Vec::new();
    match std::env::var("FAULT_SERVER_TEST_DATABASE_URL") {
        Ok(url) if !url.is_empty() => cases.push(("postgres", url)),
        _ if std::env::var("HARNESS_REQUIRE_TOOLS").as_deref() == Ok("1") => {
            panic!("FAULT_SERVER_TEST_DATABASE_URL is not set, and HARNESS_REQUIRE_TOOLS=1 requires the PostgreSQL case")
        }
        _ => eprintln!(
            "skipping the PostgreSQL case: FAULT_SERVER_TEST_DATABASE_URL is not set (.ci/run sets it)"
        ),
    }
    cases.push(("sqlite", String::new()));
    cases
}

fn config(mode: &str, database: &str) -> String {
    format!(
        "orders: {{ idempotency: {mode}, work_delay: 300ms, database: \"{database}\" }}\nstate: shared\n"
    )
}

#[test]
fn three_shards_against_two_replicas_merge_into_one_exact_verdict() {
    for (kind, url) in database_cases() {
        for (mode, passes) in [("unique", true), ("check-then-insert", false)] {
            let dir = tempfile::tempdir().unwrap();
            let database = if kind == "sqlite" {
                dir.path().join("orders.db").display().to_string()
            } else {
                url.clone()
            };
            let mut yaml = config(mode, &database);
            if kind == "sqlite" {
                yaml = yaml.replace("state: shared\n", "");
            }
            let r = replicas(&yaml, &["127.0.0.2", "127.0.0.3"]);
            let Sharded {
                shards,
                merged,
                journal,
                code,
                start_at_ms,
            } = run_sharded(dir.path(), &r.urls);
            let case = format!("{kind}/{mode}");
            assert_exact_merge(&shards, &merged);
            let by_key = burst_keys(&journal);
            assert_rounds_keep_their_instants(&case, &by_key, start_at_ms);
            let duplicates = merged
                .checks
                .iter()
                .find(|c| c.name == "duplicates")
                .unwrap_or_else(|| panic!("{case}: no duplicates verdict"));
            if passes {
                assert_eq!(code, 0, "{case}: {:?}", merged.checks);
                for (k, es) in &by_key {
                    let created: std::collections::BTreeSet<_> =
                        es.iter().filter_map(|e| e.created.as_ref()).collect();
                    assert_eq!(created.len(), 1, "{case}: {k} made exactly one order");
                }
            } else {
                assert_eq!(code, 1, "{case}: {:?}", merged.checks);
                assert_eq!(duplicates.verdict, reports::Verdict::Fail, "{case}");
                let named: Vec<&str> = duplicates
                    .evidence
                    .iter()
                    .filter_map(|e| e.key.as_deref())
                    .collect();
                assert!(!named.is_empty(), "{case}: the failure names its keys");
                assert!(
                    named.iter().all(|k| by_key.contains_key(*k)),
                    "{case}: {named:?}"
                );
            }
            assert!(
                merged.notes.iter().any(|n| n.contains("wall-clock order")),
                "{case}: the clock assumption is stated: {:?}",
                merged.notes
            );
        }
    }
}

#[test]
fn shard_flags_and_merge_inputs_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("s.yaml");
    std::fs::write(&scenario, SCENARIO).unwrap();
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut c = harness();
        c.arg("run").arg(&scenario).args(args);
        for (k, v) in env {
            c.env(k, v);
        }
        c.env_remove("HARNESS_START_AT");
        c.output().unwrap()
    };
    for (args, env, says) in [
        (vec!["--shard", "3/3"], vec![], "out of range"),
        (vec!["--shard", "1/3"], vec![], "needs a common start"),
        (
            vec![],
            vec![("JOB_COMPLETION_INDEX", "1")],
            "HARNESS_SHARDS",
        ),
        (
            vec!["--shard", "0/3", "--start-at", "next tuesday"],
            vec![],
            "RFC 3339",
        ),
        (
            vec!["--shard", "0/3", "--start-at", "2999-01-01T00:00:00Z"],
            vec![],
            "at most",
        ),
        (
            vec!["--shard", "0/7", "--start-at", "0"],
            vec![],
            "rate.connections",
        ),
    ] {
        let out = run(&args, &env);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?} {env:?}: {}",
            text(&out)
        );
        assert!(text(&out).contains(says), "{args:?}: {}", text(&out));
    }
    // Merge: a missing shard is refused, and so is a file that is no report.
    let report = |i: u32| {
        let mut r: Report = serde_json::from_value(serde_json::json!({
            "schema_version": 1, "scenario": "s", "passed": true, "duration_ms": 1,
            "requests": {"sent": 1, "completed": 1, "errors": 0, "retries": 0, "by_status": {"200": 1}},
            "latency_ms": {"p50": 1.0, "p90": 1.0, "p99": 1.0, "p999": 1.0, "max": 1.0},
            "checks": [],
        }))
        .unwrap();
        r.shard = Some(reports::model::ShardInfo {
            index: i,
            count: 3,
            ..Default::default()
        });
        r.mergeable = Some(reports::model::Mergeable::default());
        let p = dir.path().join(format!("r{i}.json"));
        std::fs::write(&p, serde_json::to_string(&r).unwrap()).unwrap();
        p
    };
    let (r0, r1) = (report(0), report(1));
    let out = harness().arg("merge").arg(&r0).arg(&r1).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("shard 2 of 3 missing"),
        "{}",
        text(&out)
    );
    let out = harness()
        .arg("merge")
        .arg(&r0)
        .arg(&scenario)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("s.yaml"), "{}", text(&out));
}

#[test]
fn analyze_merges_several_journals_and_states_its_clock_assumption() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, replica: &str, base_mono_ms: f64, keys: &[(&str, u64, &str)]| {
        let mut text = String::new();
        for (i, (key, wall_ms, order)) in keys.iter().enumerate() {
            let mut e = history::sample::entry(i as u64 + 1, base_mono_ms + i as f64 * 10.0)
                .key(key)
                .created(order)
                .build();
            e.unix_us = wall_ms * 1000;
            e.unix_ms = *wall_ms;
            e.replica = Some(replica.into());
            text.push_str(&serde_json::to_string(&e).unwrap());
            text.push('\n');
        }
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    // One key created on each replica: a duplicate only the union shows.
    let a = write(
        "a.jsonl",
        "a",
        50_000.0,
        &[("k1", 1_000, "o1"), ("k2", 1_010, "o2")],
    );
    let b = write("b.jsonl", "b", 3.0, &[("k1", 1_005, "o3")]);
    let checks = dir.path().join("checks.yaml");
    std::fs::write(&checks, "duplicates: {}\n").unwrap();
    let analyze = |journals: &[&PathBuf]| {
        let mut c = harness();
        c.arg("analyze");
        for j in journals {
            c.arg(j);
        }
        c.arg("--checks").arg(&checks).output().unwrap()
    };
    let alone = analyze(&[&a]);
    assert_eq!(alone.status.code(), Some(0), "{}", text(&alone));
    let both = analyze(&[&a, &b]);
    assert_eq!(both.status.code(), Some(1), "{}", text(&both));
    let out = text(&both);
    assert!(out.contains("k1"), "{out}");
    assert!(
        out.contains("note: 3 entries from 2 journals (2 replicas: a, b)"),
        "{out}"
    );
}

#[test]
fn a_shard_waits_for_the_common_start_and_reports_when_it_began() {
    let dir = tempfile::tempdir().unwrap();
    let scenario = dir.path().join("s.yaml");
    std::fs::write(
        &scenario,
        "server: {}\nphases:\n  - name: p\n    clients: { concurrency: 2, requests: 4 }\n    request: { path: / }\nchecks: { thresholds: { rules: [\"p99 < 20s\"] } }\n",
    )
    .unwrap();
    let now_ms = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    let start_at = now_ms() + 1500;
    let out = harness()
        .arg("run")
        .arg(&scenario)
        .args([
            "--shard",
            "1/2",
            "--start-at",
            &start_at.to_string(),
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let r: Report = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        r.started_unix_ms >= start_at,
        "{} < {start_at}",
        r.started_unix_ms
    );
    let s = r.shard.unwrap();
    assert_eq!(
        (s.index, s.count, s.start_at_unix_ms),
        (1, 2, Some(start_at))
    );
    assert!(s.late_ms >= 0.0);
    // Shard 1 of 2 ran its half: 1 client, 2 requests.
    assert_eq!(r.requests.sent, 2);
    // A start long past is no wait: the shard says how late it is.
    let out = harness()
        .arg("run")
        .arg(&scenario)
        .args([
            "--shard",
            "0/2",
            "--start-at",
            &(now_ms() - 5000).to_string(),
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let r: Report = serde_json::from_slice(&out.stdout).unwrap();
    assert!(r.shard.unwrap().late_ms >= 5000.0);
}
