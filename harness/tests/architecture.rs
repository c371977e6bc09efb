//! The architecture's invariants, as ARCHITECTURE.md states them, checked against the crate graph
//! in `Cargo.lock` — a crate that must not know about sockets, servers or databases does not
//! depend, even indirectly, on the crates that provide them — and against the sources, for what
//! the graph cannot see: which module uses what inside a crate.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

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

/// The checks decide verdicts and the reports render them: the verdict model is a crate of its
/// own below both, so the checks pull in no renderer (no terminal tables, no XML writer).
#[test]
fn the_checks_do_not_know_the_renderers() {
    assert_free_of(
        "checks",
        &["reports", "comfy-table", "crossterm", "quick-junit"],
    );
}

#[test]
fn the_verdict_model_is_data() {
    assert_free_of("verdict", RUNTIME_AND_IO);
    assert_free_of("verdict", &["history", "checks", "reports", "harness"]);
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

/// Protects the primitives' invariant (ARCHITECTURE.md): no dependency at all, so the fault
/// server, the harness and the webhooks crate can share its draws and template syntax without
/// sharing anything else, and a draw cannot change with a dependency's version.
#[test]
fn the_primitives_depend_on_nothing() {
    let graph = lock_graph();
    let deps = graph
        .get("primitives")
        .expect("primitives is in Cargo.lock");
    assert!(
        deps.is_empty(),
        "primitives must depend on nothing (see ARCHITECTURE.md); it depends on {deps:?}"
    );
}

#[test]
fn the_fault_server_does_not_know_the_harness() {
    assert_free_of("fault-server", &["harness", "checks"]);
}

#[test]
fn the_transport_knows_no_scenario_check_or_server() {
    assert_free_of(
        "transport",
        &[
            "harness",
            "fault-server",
            "checks",
            "reports",
            "retry-policy",
            "hyper",
        ],
    );
}

#[test]
fn the_grpc_crate_knows_no_scenario_check_or_server() {
    assert_free_of(
        "grpc",
        &[
            "harness",
            "fault-server",
            "checks",
            "reports",
            "hyper",
            "axum",
        ],
    );
}

#[test]
fn the_openapi_reader_knows_no_scenario_check_server_or_socket() {
    assert_free_of("openapi", RUNTIME_AND_IO);
    assert_free_of(
        "openapi",
        &[
            "harness",
            "fault-server",
            "checks",
            "reports",
            "history",
            "transport",
            "retry-policy",
            "http",
        ],
    );
}

#[test]
fn the_retry_policy_decides_and_sends_nothing() {
    assert_free_of("retry-policy", RUNTIME_AND_IO);
    assert_free_of("retry-policy", &["http", "harness", "fault-server"]);
}

#[test]
fn the_webhooks_crate_knows_no_scenario_check_or_server() {
    assert_free_of(
        "webhooks",
        &[
            "harness",
            "fault-server",
            "checks",
            "reports",
            "transport",
            "history",
            "retry-policy",
        ],
    );
}

// ---------------------------------------------------------------------------------------------
// What the crate graph cannot see: which module uses what, read from the sources.

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every `.rs` file under `dir` (relative to the workspace root), sorted.
fn rust_files(dir: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|x| x == "rs") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&root().join(dir), &mut out);
    out.sort();
    out
}

/// The source files of every workspace member that the build compiles outside `cargo test`:
/// `src/` and `examples/`.
fn workspace_sources() -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let members = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("members = "))
        .expect("the workspace's `members = [...]` line");
    let mut out = Vec::new();
    for krate in members.split('"').skip(1).step_by(2) {
        for dir in ["src", "examples"] {
            if root().join(krate).join(dir).is_dir() {
                out.extend(rust_files(&format!("{krate}/{dir}")));
            }
        }
    }
    assert!(
        out.len() > 50,
        "the workspace's sources were not found: {out:?}"
    );
    out
}

/// A file's code as it is built outside `cargo test`, one string per line: cut at its test module
/// (the line `#[cfg(test)]` followed by `mod tests {`), and with comment lines blanked, so that a
/// module doc saying "sleeps never" is not code. In this code base a test module is the last item
/// of its file; that is checked here, so the cut can never hide code that follows it.
fn code_lines(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let lines: Vec<&str> = text.lines().collect();
    let cut = lines
        .windows(2)
        .position(|w| w[0] == "#[cfg(test)]" && w[1] == "mod tests {")
        .unwrap_or(lines.len());
    if cut < lines.len() {
        let close = lines[cut..]
            .iter()
            .position(|l| *l == "}")
            .map(|i| cut + i)
            .unwrap_or_else(|| panic!("{}: the test module does not close", relative(path)));
        assert!(
            lines[close + 1..].iter().all(|l| l.trim().is_empty()),
            "{}:{}: code after the test module; the architecture tests cut a file at its \
             `#[cfg(test)] mod tests`, so keep that module last",
            relative(path),
            close + 2
        );
    }
    lines[..cut]
        .iter()
        .map(|l| {
            if l.trim_start().starts_with("//") {
                String::new()
            } else {
                l.to_string()
            }
        })
        .collect()
}

/// `path` relative to the workspace root, for messages and comparisons.
fn relative(path: &Path) -> String {
    let root = root().canonicalize().unwrap_or_else(|_| root());
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    path.strip_prefix(&root)
        .unwrap_or(&path)
        .to_string_lossy()
        .replace('\\', "/")
}

/// Whether `word` occurs in `line` as a whole identifier.
fn has_word(line: &str, word: &str) -> bool {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    line.match_indices(word).any(|(i, _)| {
        !line[..i].chars().next_back().is_some_and(ident)
            && !line[i + word.len()..].chars().next().is_some_and(ident)
    })
}

/// Protects the retry policy's purity (ARCHITECTURE.md: "decides only — reads no clock, sends
/// nothing, sleeps never"): its non-test code names no clock, no sleep, no socket and no
/// runtime. The crate graph already keeps tokio out; this also catches `std`'s clock and sockets,
/// which the graph cannot see.
#[test]
fn the_retry_policy_reads_no_clock_and_sleeps_never() {
    const FORBIDDEN: &[&str] = &["Instant::now", "SystemTime", "sleep", "std::net", "tokio"];
    let mut found = Vec::new();
    for path in rust_files("retry-policy/src") {
        for (i, line) in code_lines(&path).iter().enumerate() {
            for f in FORBIDDEN.iter().filter(|f| line.contains(**f)) {
                found.push(format!(
                    "{}:{}: `{f}`: {}",
                    relative(&path),
                    i + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the retry policy is given `now` and only decides; the executor \
         (harness/src/operation.rs) reads the clock, sleeps and sends:\n{}",
        found.join("\n")
    );
}

/// Protects the webhooks crate's purity (ARCHITECTURE.md: "pure except the example"): its
/// library code names no clock, sleep, socket, file, process or runtime — the signer and the
/// verifier are given the time, the redelivery decision is given `now`. Its dev-dependencies
/// (the example consumer's axum, tokio and rusqlite) are in the lock file beside its own, so the
/// crate graph cannot tell this; the sources can.
#[test]
fn the_webhooks_crate_is_pure() {
    const FORBIDDEN: &[&str] = &[
        "Instant::now",
        "SystemTime",
        "sleep",
        "std::net",
        "std::fs",
        "std::process",
        "tokio",
        "axum",
        "rusqlite",
    ];
    let files = rust_files("webhooks/src");
    assert!(files.len() >= 5, "webhooks/src was not read: {files:?}");
    let mut found = Vec::new();
    for path in files {
        for (i, line) in code_lines(&path).iter().enumerate() {
            for f in FORBIDDEN.iter().filter(|f| line.contains(**f)) {
                found.push(format!(
                    "{}:{}: `{f}`: {}",
                    relative(&path),
                    i + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the webhooks crate decides and signs only; the sender (the harness) reads the clock, \
         sleeps and sends, and the example consumer (webhooks/examples) serves:\n{}",
        found.join("\n")
    );
}

/// Whether the `Report {` at byte `at` of `line` builds a value of the reports model: not a
/// definition (`struct`, `enum`, `impl … for`, a function's `-> Report {`), not another type's
/// variant (`Command::Report {`) and not the declaration of a variant named `Report` (a line of
/// its own after a doc comment, an attribute or the previous variant).
fn builds_report(line: &str, at: usize, previous: &str) -> bool {
    let before = line[..at].trim_end();
    // The path in front of the name, if any: `reports::model::` of `reports::model::Report`.
    let unqualified = match before.ends_with("::") {
        true => before.trim_end_matches(|c: char| c.is_alphanumeric() || c == '_' || c == ':'),
        false => before,
    };
    let path = &before[unqualified.len()..];
    if !(path.is_empty() || path.ends_with("reports::") || path.ends_with("model::")) {
        return false;
    }
    let before = unqualified.trim_end();
    let last = before
        .rsplit(|c: char| c.is_whitespace() || c == '(')
        .next()
        .unwrap_or("");
    if ["struct", "enum", "impl", "for", "->", "trait", "union"].contains(&last) {
        return false;
    }
    if before.is_empty() && path.is_empty() {
        let p = previous.trim();
        return !(p.is_empty() || p.ends_with(',') || p.ends_with('{') || p.starts_with("#["));
    }
    true
}

/// Protects "every report is built by `ReportBuilder`" (ARCHITECTURE.md): outside tests, the
/// only struct literal of `reports::Report` is `ReportBuilder::new`'s in harness/src/report.rs,
/// so every command's report gets its outcome decided in one place, from the verdicts.
#[test]
fn every_report_is_built_by_the_report_builder() {
    let mut literals = Vec::new();
    for path in workspace_sources() {
        let lines = code_lines(&path);
        let mut previous = "";
        for (i, line) in lines.iter().enumerate() {
            for (at, _) in line.match_indices("Report {") {
                let whole = !line[..at].ends_with(|c: char| c.is_alphanumeric() || c == '_');
                if whole && builds_report(line, at, previous) {
                    literals.push(format!("{}:{}: {}", relative(&path), i + 1, line.trim()));
                }
            }
            if !line.trim().is_empty() {
                previous = line;
            }
        }
    }
    assert_eq!(
        literals
            .iter()
            .map(|l| l.split(':').next().unwrap_or(""))
            .collect::<Vec<_>>(),
        ["harness/src/report.rs"],
        "a `Report {{ … }}` literal outside ReportBuilder (harness/src/report.rs) is a report \
         whose outcome nobody decided; build it with ReportBuilder:\n{}",
        literals.join("\n")
    );
}

/// Protects "the policy is used only through `operation::execute`" (and a gRPC call's through
/// `operation::execute_grpc`) (ARCHITECTURE.md): outside the retry-policy crate, the policies'
/// state machines (`Attempts`, `GrpcCall`) appear in code only in harness/src/operation.rs, so
/// the driver, the relay and the example service all retry through the one executor.
#[test]
fn the_retry_state_machine_runs_only_in_the_executor() {
    let mut found = Vec::new();
    for path in workspace_sources() {
        let rel = relative(&path);
        if rel.starts_with("retry-policy/") || rel == "harness/src/operation.rs" {
            continue;
        }
        for (i, line) in code_lines(&path).iter().enumerate() {
            if has_word(line, "Attempts") || has_word(line, "GrpcCall") {
                found.push(format!("{rel}:{}: {}", i + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "retry_policy::Attempts and GrpcCall are driven by harness/src/operation.rs alone; call \
         operation::execute (or execute_grpc) with a transport and an Observer instead:\n{}",
        found.join("\n")
    );
}

/// The fault-server module a source file belongs to: `src/x.rs` and `src/x/**` are `x`; the crate
/// root (`lib.rs`) and the binary (`main.rs`, whose `crate` is another crate) are none.
fn fault_server_module(path: &Path) -> Option<String> {
    let rel = relative(path);
    let inside = rel.strip_prefix("fault-server/src/")?;
    let first = inside.split('/').next()?;
    let module = first.strip_suffix(".rs").unwrap_or(first);
    (!["lib", "main"].contains(&module)).then(|| module.to_string())
}

/// The modules `code` names through `crate::`: `use crate::x::…`, `crate::x::y` in an
/// expression, and each first segment of `use crate::{x, y::z}`.
fn crate_paths(code: &str) -> BTreeSet<String> {
    paths_after(code, "crate::")
}

/// The first segment of every path in `code` that starts with `prefix` (`crate::`, `super::`,
/// `crate::orders::`): `prefix x::…` gives `x`, and `prefix {x, y::z}` gives `x` and `y`.
fn paths_after(code: &str, prefix: &str) -> BTreeSet<String> {
    let ident = |s: &str| {
        s.trim_start()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect::<String>()
    };
    let mut out = BTreeSet::new();
    for (i, _) in code.match_indices(prefix) {
        if code[..i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        let rest = &code[i + prefix.len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut part = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.insert(ident(&part));
                        part.clear();
                        continue;
                    }
                    _ => {}
                }
                part.push(c);
            }
            out.insert(ident(&part));
        } else {
            out.insert(ident(rest));
        }
    }
    out.remove("");
    out
}

/// A cycle in `graph`, as the modules along it (the first repeated at the end), if there is one.
fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|n| n == node) {
            let mut cycle = path[i..].to_vec();
            cycle.push(node.to_string());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        path.push(node.to_string());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(c) = visit(next, graph, done, path) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(node.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|n| visit(n, graph, &mut done, &mut Vec::new()))
}

/// Protects "no module cycle" in the fault server (ARCHITECTURE.md): the graph of which module
/// names which through `crate::` has no cycle, so every room can be read, and tested, with only
/// the rooms below it in mind (`state` under the ones that serve a request).
#[test]
fn the_fault_server_modules_have_no_cycle() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in rust_files("fault-server/src") {
        let Some(module) = fault_server_module(&path) else {
            continue;
        };
        let uses = crate_paths(&code_lines(&path).join("\n"));
        let edges = graph.entry(module.clone()).or_default();
        edges.extend(uses.into_iter().filter(|m| *m != module));
    }
    assert!(
        graph.contains_key("state") && graph["dispatch"].contains("state"),
        "the module graph was not read: {graph:?}"
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!(
            "fault-server modules import each other in a cycle: {}; move what both need into \
             the lower one (shared state lives in state.rs)",
            cycle.join(" → ")
        );
    }
}

/// The files of each fault-server directory module (`src/orders/`, `src/grpc/`, …) and which of
/// its siblings each names: through `super::x`, `crate::dir::x`, or a name the directory's
/// `mod.rs` re-exports from `x` (`use super::Orders` names `store` when `mod.rs` says
/// `pub use store::Orders`). `mod.rs` itself is the directory's face, not one of its rooms: a
/// parent declaring its children is no arrow between them.
fn fault_server_nested_graphs() -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
    let mut dirs: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for path in rust_files("fault-server/src") {
        let rel = relative(&path);
        let inside = rel.strip_prefix("fault-server/src/").unwrap_or(&rel);
        if let Some((dir, _)) = inside.split_once('/') {
            dirs.entry(dir.to_string()).or_default().push(path);
        }
    }
    let stem = |p: &Path| {
        p.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let mut out = BTreeMap::new();
    for (dir, files) in dirs {
        let children: BTreeSet<String> = files
            .iter()
            .map(|p| stem(p))
            .filter(|s| s != "mod")
            .collect();
        // What `mod.rs` re-exports, by name: `pub use store::{Orders, ResourceReply};`.
        let mut reexported: BTreeMap<String, String> = BTreeMap::new();
        if let Some(face) = files.iter().find(|p| stem(p) == "mod") {
            for line in code_lines(face) {
                let Some((_, path)) = line.split_once("use ") else {
                    continue;
                };
                let Some((from, names)) = path.trim().trim_end_matches(';').split_once("::") else {
                    continue;
                };
                if !children.contains(from) {
                    continue;
                }
                let names = names.trim_start_matches('{').trim_end_matches('}');
                for name in names.split(',') {
                    let name = name.trim().rsplit("::").next().unwrap_or_default();
                    let name = name.split(" as ").last().unwrap_or_default().trim();
                    if !name.is_empty() {
                        reexported.insert(name.to_string(), from.to_string());
                    }
                }
            }
        }
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for path in files.iter().filter(|p| stem(p) != "mod") {
            let module = stem(path);
            let code = code_lines(path).join("\n");
            let mut named = paths_after(&code, "super::");
            named.extend(paths_after(&code, &format!("crate::{dir}::")));
            let edges = graph.entry(module.clone()).or_default();
            for name in named {
                let sibling = if children.contains(&name) {
                    Some(name)
                } else {
                    reexported.get(&name).cloned()
                };
                edges.extend(sibling.filter(|s| *s != module));
            }
        }
        out.insert(dir, graph);
    }
    out
}

/// Protects "no module cycle" one level down (ARCHITECTURE.md): inside each directory module the
/// files do not import each other in a cycle either — the orders store once named its backends
/// while they named it for their rows and errors, and the crate-level graph above could not see
/// it, since both ends were `orders`.
#[test]
fn the_fault_server_nested_modules_have_no_cycle() {
    let graphs = fault_server_nested_graphs();
    assert!(
        graphs
            .get("orders")
            .is_some_and(|g| g.get("routes").is_some_and(|e| e.contains("store"))),
        "the nested module graph was not read (routes names Orders through mod.rs): {graphs:?}"
    );
    for (dir, graph) in &graphs {
        if let Some(cycle) = find_cycle(graph) {
            panic!(
                "fault-server/src/{dir}/: its files import each other in a cycle: {}; move what \
                 both need into a module of its own below them",
                cycle
                    .iter()
                    .map(|m| format!("{dir}::{m}"))
                    .collect::<Vec<_>>()
                    .join(" → ")
            );
        }
    }
}

/// Protects the orders store's arrow (ARCHITECTURE.md): the store picks a backend and calls it;
/// the backends speak only the types of `orders/backend.rs` and never name the store, so a
/// backend can be read and changed without the store's replies in mind.
#[test]
fn the_orders_backends_do_not_know_the_store() {
    let graphs = fault_server_nested_graphs();
    let orders = graphs
        .get("orders")
        .expect("fault-server/src/orders/ was read");
    for backend in ["sqlite", "postgres"] {
        let edges = orders
            .get(backend)
            .unwrap_or_else(|| panic!("orders/{backend}.rs was not read: {orders:?}"));
        assert!(
            edges.contains("backend"),
            "orders/{backend}.rs should speak the types of orders/backend.rs: {edges:?}"
        );
        assert!(
            !edges.contains("store"),
            "orders/{backend}.rs names the store ({edges:?}): what a backend needs of it \
             belongs in orders/backend.rs"
        );
    }
    assert!(
        orders["store"].contains("sqlite") && orders["store"].contains("postgres"),
        "the store picks its backend: {:?}",
        orders["store"]
    );
}
