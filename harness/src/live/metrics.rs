//! `/metrics` on the dashboard's address: the live snapshot as Prometheus metrics, for a
//! Prometheus that scrapes the load while it runs (the harness's half of the Grafana dashboard
//! under `deploy/grafana/`, whose test checks it against [`ALL`]).
//!
//! Every figure is the snapshot's, so the page, `/snapshot` and a scrape agree: counters are the
//! phase's totals so far (they only grow), gauges are the latest second's. A phase is a label,
//! so a scenario's phases are series of one metric. A family with no sample yet (no retry) is
//! left out of a scrape; this list names them all.

use prometheus_client::encoding::text::encode as write_text;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::Snapshot;

/// The prefix of every name.
pub const PREFIX: &str = "harness";

pub use primitives::metric::{Kind, Metric, CONTENT_TYPE};

/// `attempts`.
pub const ATTEMPTS: Metric = Metric {
    prefix: PREFIX,
    name: "attempts",
    kind: Kind::Counter,
    help: "Every attempt sent, by phase and how it ended: a status (503), error:KIND or unknown",
    always: true,
};

/// `operations`.
pub const OPERATIONS: Metric = Metric {
    prefix: PREFIX,
    name: "operations",
    kind: Kind::Counter,
    help: "Operations finished (after their retries), by phase",
    always: true,
};

/// `in_flight_operations`.
pub const IN_FLIGHT: Metric = Metric {
    prefix: PREFIX,
    name: "in_flight_operations",
    kind: Kind::Gauge,
    help: "Operations started and not yet ended, by phase",
    always: true,
};

/// `retries`.
pub const RETRIES: Metric = Metric {
    prefix: PREFIX,
    name: "retries",
    kind: Kind::Counter,
    help: "Retries sent, by phase and the index of the attempt they made (2 for the first retry)",
    always: true,
};

/// `attempt_latency_seconds`.
pub const LATENCY: Metric = Metric {
    prefix: PREFIX,
    name: "attempt_latency_seconds",
    kind: Kind::Gauge,
    help: "Per-attempt latency from the send so far, by phase and quantile (1 is the slowest), from the phase's HDR histogram",
    always: true,
};

/// `phase_running`.
pub const PHASE_RUNNING: Metric = Metric {
    prefix: PREFIX,
    name: "phase_running",
    kind: Kind::Gauge,
    help: "1 while the phase runs, 0 once it is done, by phase and kind",
    always: true,
};

/// `run_elapsed_seconds`.
pub const RUN_ELAPSED: Metric = Metric {
    prefix: PREFIX,
    name: "run_elapsed_seconds",
    kind: Kind::Gauge,
    help: "Seconds since the run started",
    always: true,
};

/// Every metric `/metrics` exports.
pub const ALL: &[Metric] = &[
    ATTEMPTS,
    OPERATIONS,
    IN_FLIGHT,
    RETRIES,
    LATENCY,
    PHASE_RUNNING,
    RUN_ELAPSED,
];

type Labels = Vec<(&'static str, String)>;

fn counter(registry: &mut Registry, m: &Metric) -> Family<Labels, Counter> {
    let f = Family::<Labels, Counter>::default();
    registry.register(m.name, m.help, f.clone());
    f
}

fn gauge(
    registry: &mut Registry,
    m: &Metric,
) -> Family<Labels, Gauge<f64, std::sync::atomic::AtomicU64>> {
    let f = Family::<Labels, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
    registry.register(m.name, m.help, f.clone());
    f
}

/// `snapshot` as OpenMetrics text.
pub fn encode_snapshot(snapshot: &Snapshot) -> Result<String, std::fmt::Error> {
    let mut registry = Registry::with_prefix(PREFIX);
    let attempts = counter(&mut registry, &ATTEMPTS);
    let operations = counter(&mut registry, &OPERATIONS);
    let in_flight = gauge(&mut registry, &IN_FLIGHT);
    let retries = counter(&mut registry, &RETRIES);
    let latency = gauge(&mut registry, &LATENCY);
    let running = gauge(&mut registry, &PHASE_RUNNING);
    let elapsed = Gauge::<f64, std::sync::atomic::AtomicU64>::default();
    elapsed.set(snapshot.elapsed_s);
    registry.register(RUN_ELAPSED.name, RUN_ELAPSED.help, elapsed);
    for p in &snapshot.phases {
        let phase = || vec![("phase", p.name.clone())];
        for (outcome, n) in &p.by_outcome {
            let mut l = phase();
            l.push(("outcome", outcome.clone()));
            attempts.get_or_create(&l).inc_by(*n);
        }
        operations.get_or_create(&phase()).inc_by(p.operations_done);
        in_flight.get_or_create(&phase()).set(p.in_flight as f64);
        for (attempt, n) in &p.retries_by_attempt {
            let mut l = phase();
            l.push(("attempt", attempt.to_string()));
            retries.get_or_create(&l).inc_by(*n);
        }
        if p.latency_ms.count > 0 {
            let l = &p.latency_ms;
            for (q, ms) in [
                ("0.5", l.p50),
                ("0.9", l.p90),
                ("0.99", l.p99),
                ("0.999", l.p999),
                ("1", l.max),
            ] {
                let mut labels = phase();
                labels.push(("quantile", q.to_string()));
                latency.get_or_create(&labels).set(ms / 1000.0);
            }
        }
        let mut l = phase();
        l.push(("kind", p.kind.to_string()));
        running
            .get_or_create(&l)
            .set(if p.state == "running" { 1.0 } else { 0.0 });
    }
    let mut text = String::new();
    write_text(&mut text, &registry)?;
    Ok(text)
}

/// `snapshot` as OpenMetrics text, or a comment saying why it could not be written.
pub fn encode(snapshot: &Snapshot) -> String {
    encode_snapshot(snapshot).unwrap_or_else(|e| format!("# encoding the metrics failed: {e}\n"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::PhaseSnapshot;

    fn snapshot() -> Snapshot {
        Snapshot {
            seq: 3,
            title: "t".into(),
            state: "running",
            elapsed_s: 2.5,
            phases: vec![PhaseSnapshot {
                name: "orders".into(),
                kind: "clients",
                state: "running",
                elapsed_s: 2.0,
                operations_done: 40,
                in_flight: 4,
                by_outcome: [("201".to_string(), 40), ("503".to_string(), 6)]
                    .into_iter()
                    .collect(),
                attempts: 46,
                attempts_per_s: 20,
                latency_ms: reports::model::Latency {
                    p50: 2.0,
                    p90: 4.0,
                    p99: 8.0,
                    p999: 9.0,
                    max: 12.0,
                    mean: 2.5,
                    count: 46,
                },
                retries_by_attempt: [(2, 6)].into_iter().collect(),
            }],
            server: None,
            series: Vec::new(),
            checks: Vec::new(),
            report: None,
        }
    }

    #[test]
    fn names_are_unique_and_series_as_prometheus_names_them() {
        let mut names: Vec<_> = ALL.iter().map(|m| m.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
        assert_eq!(ATTEMPTS.series(), "harness_attempts_total");
        assert_eq!(IN_FLIGHT.series(), "harness_in_flight_operations");
    }

    #[test]
    fn a_snapshot_reads_as_the_metrics_it_names() {
        let text = encode(&snapshot());
        for line in [
            "harness_attempts_total{phase=\"orders\",outcome=\"503\"} 6",
            "harness_operations_total{phase=\"orders\"} 40",
            "harness_in_flight_operations{phase=\"orders\"} 4.0",
            "harness_retries_total{phase=\"orders\",attempt=\"2\"} 6",
            "harness_attempt_latency_seconds{phase=\"orders\",quantile=\"0.99\"} 0.008",
            "harness_phase_running{phase=\"orders\",kind=\"clients\"} 1.0",
            "harness_run_elapsed_seconds 2.5",
        ] {
            assert!(text.contains(line), "{line} in:\n{text}");
        }
        for m in ALL {
            let kind = m.kind.name();
            let name = m.family();
            assert!(
                text.contains(&format!("# TYPE {name} {kind}")),
                "{name}: {text}"
            );
            assert!(
                text.contains(&format!("# HELP {name} {}", m.help)),
                "{text}"
            );
        }
        assert!(text.ends_with("# EOF\n"), "{text}");
    }
}
