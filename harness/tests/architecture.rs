//! The architecture's invariants, as ARCHITECTURE.md states them, checked against the crate graph
//! in `Cargo.lock`: a crate that must not know about sockets, servers or databases does not
//! depend, even indirectly, on the crates that provide them.

use std::collections::{BTreeMap, BTreeSet};

/// Crates that bring an async runtime, a socket, an HTTP stack or a database.
const RUNTIME_AND_IO: &[&str] = &[
    "tokio",
    "mio",
    "socket2",
    "hyper",
    "hyper-util",
    "axum",
    "h2",
    "rustls",
    "tokio-rustls",
    "rusqlite",
    "r2d2",
    "r2d2_sqlite",
    "sqlx",
    "tokio-postgres",
    "reqwest",
];

/// Every package of the lock file with the names of its dependencies.
fn lock_graph() -> BTreeMap<String, Vec<String>> {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../Cargo.lock"))
        .expect("Cargo.lock at the workspace root");
    let mut graph = BTreeMap::new();
    for block in text.split("[[package]]").skip(1) {
        let mut name = None;
        let mut deps = Vec::new();
        let mut in_deps = false;
        for line in block.lines() {
            let line = line.trim();
            if let Some(n) = line.strip_prefix("name = ") {
                name = Some(n.trim_matches('"').to_string());
            } else if line.starts_with("dependencies = [") {
                in_deps = !line.ends_with(']');
            } else if in_deps {
                if line == "]" {
                    in_deps = false;
                } else {
                    let dep = line.trim_matches(|c| c == '"' || c == ',');
                    deps.push(dep.split(' ').next().unwrap_or(dep).to_string());
                }
            }
        }
        if let Some(n) = name {
            graph.entry(n).or_insert_with(Vec::new).extend(deps);
        }
    }
    graph
}

/// Every crate `root` depends on, directly or not (normal, build and dev dependencies alike, as
/// the lock file does not tell them apart: the bound is conservative).
fn closure(graph: &BTreeMap<String, Vec<String>>, root: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut todo = vec![root.to_string()];
    while let Some(c) = todo.pop() {
        for d in graph.get(&c).into_iter().flatten() {
            if seen.insert(d.clone()) {
                todo.push(d.clone());
            }
        }
    }
    seen
}

fn assert_free_of(krate: &str, forbidden: &[&str]) {
    let graph = lock_graph();
    assert!(graph.contains_key(krate), "{krate} is not in Cargo.lock");
    let deps = closure(&graph, krate);
    let found: Vec<&&str> = forbidden.iter().filter(|f| deps.contains(**f)).collect();
    assert!(
        found.is_empty(),
        "{krate} must not depend on {found:?} (see ARCHITECTURE.md); it depends on {deps:?}"
    );
}

#[test]
fn the_history_is_data() {
    assert_free_of("history", RUNTIME_AND_IO);
}

#[test]
fn the_checks_know_no_runtime_server_or_database() {
    assert_free_of("checks", RUNTIME_AND_IO);
    assert_free_of("checks", &["fault-server", "harness"]);
}

#[test]
fn the_reports_only_render() {
    assert_free_of("reports", RUNTIME_AND_IO);
    assert_free_of("reports", &["history", "checks", "fault-server", "harness"]);
}

#[test]
fn the_yaml_loader_stands_alone() {
    assert_free_of("yaml-config", RUNTIME_AND_IO);
}

#[test]
fn the_fault_server_does_not_know_the_harness() {
    assert_free_of("fault-server", &["harness", "checks"]);
}

#[test]
fn the_retry_policy_decides_and_sends_nothing() {
    assert_free_of("retry-policy", RUNTIME_AND_IO);
    assert_free_of("retry-policy", &["http", "harness", "fault-server"]);
}
