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
/// server, the harness, the wire protocols and the webhooks crate can share its draws, template
/// syntax and globs without sharing anything else, and a draw cannot change with a dependency's version.
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

/// The wire protocols are read and decided on as pure functions over bytes: a proxy, a fuzzer
/// and a test share them, and none of them needs a runtime, a socket or the server.
#[test]
fn the_wire_protocols_are_pure() {
    assert_free_of("wire-faults", RUNTIME_AND_IO);
    assert_free_of("wire-faults", &["fault-server", "harness", "transport"]);
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

/// The crates held to "no module circle" (ARCHITECTURE.md): every member of the workspace.
const ACYCLIC_CRATES: &[&str] = &[
    "yaml-config",
    "primitives",
    "history",
    "verdict",
    "checks",
    "retry-policy",
    "transport",
    "grpc",
    "webhooks",
    "openapi",
    "wire-faults",
    "fault-server",
    "harness",
    "reports",
    "fuzzing",
];

/// The modules of a crate, level by level: for the crate root (`""`) and each directory module
/// (`"config"`, `"orders"`, `"a/b"`), each module directly below it (a file `x.rs` or a directory
/// `x/`) and which of its siblings it names. A module names a sibling through `crate::…`,
/// `super::…`, `self::…` or, in a module with modules of its own, their bare names; and through a
/// name the level's face re-exports (`use super::Orders` names `store` when `mod.rs` says
/// `pub use store::Orders`). The face itself — `lib.rs`, a directory's `mod.rs` — declares and
/// re-exports its modules and is not one of them: a parent declaring its children is no arrow
/// between them. The binaries' roots (`main.rs`, `bin/`) are other crates, and test modules are
/// cut off (see [`code_lines`]).
fn module_graphs(src: &Path) -> BTreeMap<String, BTreeMap<String, BTreeSet<String>>> {
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
    let mut files = Vec::new();
    walk(src, &mut files);
    files.sort();
    // Each library file's module path: `lib.rs` is [], `x.rs` and `x/mod.rs` are [x].
    let mut modules: Vec<(Vec<String>, PathBuf)> = Vec::new();
    for file in files {
        let rel = file.strip_prefix(src).expect("under src");
        let mut parts: Vec<String> = rel
            .iter()
            .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
            .collect();
        if parts == ["main"] || parts[0] == "bin" {
            continue;
        }
        if parts == ["lib"] || parts.last().is_some_and(|p| p == "mod") {
            parts.pop();
        }
        modules.push((parts, file));
    }
    let paths: BTreeSet<Vec<String>> = modules.iter().map(|(p, _)| p.clone()).collect();
    let children = |of: &[String]| -> BTreeSet<String> {
        paths
            .iter()
            .filter(|p| p.len() > of.len() && p[..of.len()] == *of)
            .map(|p| p[of.len()].clone())
            .collect()
    };
    let code: BTreeMap<Vec<String>, String> = modules
        .iter()
        .map(|(p, f)| (p.clone(), code_lines(f).join("\n")))
        .collect();
    // What each face re-exports, by name: level → name → the module it comes from.
    let mut reexported: BTreeMap<Vec<String>, BTreeMap<String, String>> = BTreeMap::new();
    for (level, text) in &code {
        let below = children(level);
        for stmt in pub_uses(text) {
            for path in use_paths(&stmt) {
                if let (Some(from), Some(name)) = (path.first(), path.last()) {
                    if below.contains(from) && path.len() > 1 {
                        reexported
                            .entry(level.clone())
                            .or_default()
                            .insert(name.clone(), from.clone());
                    }
                }
            }
        }
    }
    let mut levels: BTreeSet<Vec<String>> = paths
        .iter()
        .filter(|p| !children(p).is_empty())
        .cloned()
        .collect();
    levels.insert(Vec::new());
    let mut out = BTreeMap::new();
    for level in levels {
        let below = children(&level);
        let none = BTreeMap::new();
        let faced = reexported.get(&level).unwrap_or(&none);
        let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (module, text) in &code {
            if module.len() <= level.len() || module[..level.len()] != *level {
                continue;
            }
            let node = module[level.len()].clone();
            let edges = graph.entry(node.clone()).or_default();
            for named in named_modules(text, module, &children(module)) {
                if named.len() <= level.len() || named[..level.len()] != *level {
                    continue;
                }
                let next = &named[level.len()];
                let sibling = if below.contains(next) {
                    Some(next.clone())
                } else {
                    faced.get(next).cloned()
                };
                edges.extend(sibling.filter(|s| *s != node));
            }
        }
        out.insert(level.join("/"), graph);
    }
    out
}

/// The `pub use …;` statements of `code` (`pub(crate)` and `pub(super)` too), each whole even
/// when it spans lines.
fn pub_uses(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("use ") {
        let before = code[..i].trim_end();
        let public = before.ends_with("pub") || (before.ends_with(')') && before.contains("pub("));
        let line_start = code[..i].rfind('\n').map_or(0, |n| n + 1);
        if !public || !code[line_start..i].trim_start().starts_with("pub") {
            continue;
        }
        if let Some(end) = code[i..].find(';') {
            out.push(code[i + 4..i + end].to_string());
        }
    }
    out
}

/// Every path a `use` tree (the text after `use`) names, groups expanded: `a::{b, c::{d, e}}`
/// gives `a::b`, `a::c::d` and `a::c::e`; `self` in a group names its parent.
fn use_paths(tree: &str) -> Vec<Vec<String>> {
    fn parse(s: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let s = s.trim();
        let Some(open) = s.find('{') else {
            let mut path = prefix.to_vec();
            let chain = s.split(" as ").next().unwrap_or(s);
            for seg in chain.split("::").map(str::trim).filter(|x| !x.is_empty()) {
                if seg != "self" {
                    path.push(seg.to_string());
                }
            }
            out.push(path);
            return;
        };
        let mut path = prefix.to_vec();
        path.extend(
            s[..open]
                .split("::")
                .map(str::trim)
                .filter(|x| !x.is_empty())
                .map(str::to_string),
        );
        let inner = s[open + 1..].trim_end().trim_end_matches('}');
        let mut depth = 0usize;
        let mut part = String::new();
        for c in inner.chars() {
            match c {
                '{' => depth += 1,
                '}' => depth = depth.saturating_sub(1),
                ',' if depth == 0 => {
                    parse(&part, &path, out);
                    part.clear();
                    continue;
                }
                _ => {}
            }
            part.push(c);
        }
        if !part.trim().is_empty() {
            parse(&part, &path, out);
        }
    }
    let mut out = Vec::new();
    parse(tree, &[], &mut out);
    out
}

/// The module paths (from the crate root) that `code`, the code of module `module` whose own
/// modules are `own`, names: through `crate::`, `super::` (as often as written), `self::`, or
/// the bare name of one of its own modules; each path with its whole chain, groups expanded.
fn named_modules(code: &str, module: &[String], own: &BTreeSet<String>) -> Vec<Vec<String>> {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = Vec::new();
    let bytes: Vec<(usize, char)> = code.char_indices().collect();
    let mut i = 0;
    while i < bytes.len() {
        let (at, c) = bytes[i];
        let starts_word = ident(c)
            && !code[..at].ends_with(|p: char| ident(p) || p == ':' || p == '\'' || p == '"');
        if !starts_word {
            i += 1;
            continue;
        }
        let word: String = code[at..].chars().take_while(|c| ident(*c)).collect();
        let rest = &code[at + word.len()..];
        i += word.chars().count();
        if !rest.starts_with("::") {
            continue;
        }
        // The anchor, and what follows it.
        let (base, mut tail): (Vec<String>, &str) = match word.as_str() {
            "crate" => (Vec::new(), &rest[2..]),
            "self" => (module.to_vec(), &rest[2..]),
            "super" => {
                let mut up = 1;
                let mut tail = &rest[2..];
                while let Some(t) = tail.strip_prefix("super::") {
                    up += 1;
                    tail = t;
                }
                if up > module.len() {
                    continue;
                }
                (module[..module.len() - up].to_vec(), tail)
            }
            w if own.contains(w) => {
                let mut base = module.to_vec();
                base.push(w.to_string());
                (base, &rest[2..])
            }
            _ => continue,
        };
        // The tree after the anchor: up to the end of its chain, or of its group.
        let mut end = 0;
        let mut depth = 0usize;
        for (j, ch) in tail.char_indices() {
            match ch {
                '{' => depth += 1,
                '}' if depth > 0 => depth -= 1,
                c if depth == 0 && !(ident(c) || c == ':') => {
                    end = j;
                    break;
                }
                _ => {}
            }
            end = j + ch.len_utf8();
        }
        tail = &tail[..end];
        for path in use_paths(tail) {
            let mut full = base.clone();
            full.extend(path);
            out.push(full);
        }
    }
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

/// Every module circle of the crate whose sources are `src`, one per level that has one, each
/// said as `level: a → b → a`.
fn module_circles(src: &Path) -> Vec<String> {
    module_graphs(src)
        .iter()
        .filter_map(|(level, graph)| {
            let cycle = find_cycle(graph)?;
            let at = |m: &String| {
                if level.is_empty() {
                    m.clone()
                } else {
                    format!("{level}/{m}")
                }
            };
            Some(cycle.iter().map(at).collect::<Vec<_>>().join(" → "))
        })
        .collect()
}

/// Protects "no module circle" (ARCHITECTURE.md): in every crate of [`ACYCLIC_CRATES`], the
/// modules of each level — the crate's own, and the files of each directory module — do not
/// import each other in a circle, so every module can be read, and tested, with only the ones
/// below it in mind.
#[test]
fn no_crate_has_a_module_circle() {
    let graphs = module_graphs(&root().join("fault-server/src"));
    assert!(
        graphs[""]
            .get("dispatch")
            .is_some_and(|e| e.contains("state"))
            && graphs["orders"]
                .get("routes")
                .is_some_and(|e| e.contains("store")),
        "the module graphs were not read (routes names Orders through orders/mod.rs): {graphs:?}"
    );
    let mut found = Vec::new();
    for krate in ACYCLIC_CRATES {
        for circle in module_circles(&root().join(krate).join("src")) {
            found.push(format!("{krate}: {circle}"));
        }
    }
    assert!(
        found.is_empty(),
        "modules import each other in a circle; move what both need into a module of its own \
         below them:\n{}",
        found.join("\n")
    );
}

/// Every workspace member is held to "no module circle" and to "no exit number": a new crate
/// cannot be left out by forgetting it.
#[test]
fn every_crate_is_held_to_no_module_circle_and_no_exit_number() {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let members = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("members = "))
        .expect("the workspace's `members = [...]` line");
    let members: BTreeSet<&str> = members.split('"').skip(1).step_by(2).collect();
    let listed: BTreeSet<&str> = ACYCLIC_CRATES.iter().copied().collect();
    assert_eq!(members, listed, "ACYCLIC_CRATES lists every member");
    let listed: BTreeSet<&str> = NO_EXIT_NUMBERS.iter().copied().collect();
    assert_eq!(members, listed, "NO_EXIT_NUMBERS lists every member");
}

/// The circle finder on a crate made for it: two modules that name each other (one through
/// `crate::`, one through `super::`), and inside a directory module two files that do (one
/// through a name its `mod.rs` re-exports over several lines), are found and named; the same
/// crate with one arrow removed has none.
#[test]
fn the_circle_finder_finds_a_circle_made_on_purpose() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let src = dir.path().join("src");
    let write = |path: &str, text: &str| {
        let path = src.join(path);
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("directories");
        std::fs::write(path, text).expect("a fixture file");
    };
    write(
        "lib.rs",
        "mod a;\nmod b;\nmod d;\nmod low;\npub use a::A;\n",
    );
    write("low.rs", "pub struct Low;\n");
    write("a.rs", "use crate::b::B;\npub struct A(B);\n");
    write("b.rs", "use super::low::Low;\npub struct B(Low);\n");
    write(
        "d/mod.rs",
        "mod x;\nmod y;\npub use x::{\n    X,\n    XToo,\n};\npub(crate) use y::Y;\n",
    );
    write(
        "d/x.rs",
        "use super::y::Y;\npub struct X(Y);\npub struct XToo;\n",
    );
    write("d/y.rs", "pub struct Y;\n");
    assert_eq!(module_circles(&src), Vec::<String>::new(), "no circle yet");

    // The circles, on purpose.
    write(
        "b.rs",
        "use super::low::Low;\npub struct B(Low, Option<Box<super::a::A>>);\n",
    );
    write("d/y.rs", "pub struct Y(Option<Box<super::XToo>>);\n");
    assert_eq!(
        module_circles(&src),
        ["a → b → a", "d/x → d/y → d/x"],
        "both circles, named"
    );
    // A comment, or a test module, naming a module is no arrow.
    write(
        "b.rs",
        "// uses super::a::A in a comment\nuse super::low::Low;\npub struct B(Low);\n\
         #[cfg(test)]\nmod tests {\n    use crate::a::A;\n}\n",
    );
    assert_eq!(module_circles(&src), ["d/x → d/y → d/x"]);
}

/// Protects the orders store's arrow (ARCHITECTURE.md): the store picks a backend and calls it;
/// the backends speak only the types of `orders/backend.rs` and never name the store, so a
/// backend can be read and changed without the store's replies in mind.
#[test]
fn the_orders_backends_do_not_know_the_store() {
    let graphs = module_graphs(&root().join("fault-server/src"));
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

/// The crates whose libraries choose no exit number: every member. An exit number is the
/// command line's to choose: a library says what kind of failure it met (the harness's
/// `FailureKind`) or how a run came out (`reports::Outcome`), and a binary's entry point
/// (`main.rs`, `src/bin/`) or the harness's CLI (`harness/src/cli/`, its numbers in `exit.rs`)
/// maps it.
const NO_EXIT_NUMBERS: &[&str] = &[
    "yaml-config",
    "primitives",
    "history",
    "verdict",
    "checks",
    "retry-policy",
    "transport",
    "grpc",
    "webhooks",
    "openapi",
    "wire-faults",
    "fault-server",
    "harness",
    "reports",
    "fuzzing",
];

/// Whether `code` (comments and tests cut) chooses a process's exit number.
fn chooses_exit_number(code: &str) -> bool {
    ["process::exit", "ExitCode", "fn exit_code"]
        .iter()
        .any(|w| code.contains(w))
}

/// Protects "only the command line chooses an exit number" (ARCHITECTURE.md): the libraries of
/// [`NO_EXIT_NUMBERS`] name no `process::exit`, no `ExitCode` and no `exit_code` function but in
/// the harness's CLI; the binaries' entry points (`main.rs`) may.
#[test]
fn no_library_chooses_an_exit_number() {
    let mut found = Vec::new();
    for krate in NO_EXIT_NUMBERS {
        for path in rust_files(&format!("{krate}/src")) {
            let rel = relative(&path);
            if rel.ends_with("/src/main.rs")
                || rel.contains("/src/bin/")
                || rel.starts_with("harness/src/cli/")
            {
                continue;
            }
            if chooses_exit_number(&code_lines(&path).join("\n")) {
                found.push(rel);
            }
        }
    }
    assert!(
        found.is_empty(),
        "a library chooses an exit number; return an error that says what kind of failure it \
         is and let the command line choose: {found:?}"
    );
    let main = code_lines(&root().join("fault-server/src/main.rs")).join("\n");
    assert!(
        chooses_exit_number(&main),
        "the fault server's entry point was read"
    );
    let exit = code_lines(&root().join("harness/src/cli/exit.rs")).join("\n");
    assert!(
        chooses_exit_number(&exit),
        "the harness's exit numbers are chosen in cli/exit.rs"
    );
}

/// The paths ARCHITECTURE.md names in backticks: a span that ends in `.rs` or `/` (a file or a
/// directory; no spaces, no `::`), with the crate whose paragraph or section named it; in a
/// section about one crate, a name in a bullet that opens with a directory is in that directory.
fn architecture_paths(text: &str) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    // A section about one crate ("## The harness, room by room") names its files relatively.
    let mut section: Option<String> = None;
    let mut krate: Option<String> = None;
    let mut dir: Option<String> = None;
    for line in text.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            section = title
                .starts_with("The harness")
                .then(|| "harness".to_string());
        }
        if line.is_empty() || line.starts_with('#') {
            krate = section.clone();
        }
        // In a section about one crate, a bullet that opens with a directory (`- `cli/`: …`)
        // names that directory's files.
        if line.starts_with("- ") || line.is_empty() {
            dir = line
                .strip_prefix("- `")
                .and_then(|rest| rest.split_once('`'))
                .map(|(d, _)| d)
                .filter(|d| d.ends_with('/'))
                .map(str::to_string);
        }
        if let Some(name) = line
            .strip_prefix("**`")
            .and_then(|rest| rest.split_once("`**"))
            .map(|(name, _)| name)
        {
            krate = Some(name.to_string());
        }
        for (i, span) in line.split('`').enumerate() {
            let path_like = i % 2 == 1
                && (span.ends_with(".rs") || span.ends_with('/'))
                && !span.contains([' ', ':', '{', '<', '*'])
                && !span.starts_with('/');
            if path_like {
                let span = match (&section, &dir) {
                    (Some(_), Some(d)) if span != d => format!("{d}{span}"),
                    _ => span.to_string(),
                };
                out.push((krate.clone(), span));
            }
        }
    }
    out
}

/// Protects ARCHITECTURE.md as a true map: at most about 200 lines; every workspace member has
/// its paragraph (`**`name`**`); every file or directory it names exists, at the workspace's
/// root or in the `src/` of the crate whose paragraph (or room) names it.
#[test]
fn the_architecture_map_names_only_what_exists_and_every_crate() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    assert!(
        text.lines().count() <= 210,
        "ARCHITECTURE.md is a map of about 200 lines, not a manual ({} lines); details belong \
         in the module docs",
        text.lines().count()
    );
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).expect("Cargo.toml");
    let members = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("members = "))
        .expect("the workspace's `members = [...]` line");
    let missing: Vec<&str> = members
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|m| !text.contains(&format!("**`{m}`**")))
        .collect();
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md has no paragraph for {missing:?}"
    );
    let paths = architecture_paths(&text);
    assert!(paths.len() > 40, "the paths were not read: {paths:?}");
    let absent: Vec<String> = paths
        .iter()
        .filter(|(krate, p)| {
            let at_root = root().join(p).exists();
            let in_crate = krate
                .as_ref()
                .is_some_and(|k| root().join(k).join("src").join(p).exists());
            !at_root && !in_crate
        })
        .map(|(krate, p)| format!("{p} (in {})", krate.as_deref().unwrap_or("no crate")))
        .collect();
    assert!(
        absent.is_empty(),
        "ARCHITECTURE.md names what does not exist: {absent:?}"
    );
}

/// The map's path reader on a made-up text: a crate's relative names, a root path, and what is
/// not a path.
#[test]
fn the_architecture_path_reader_reads_paths_only() {
    let text = "**`transport`** — `h2conn/` and `hpack/`, `transport::Conn`, `/__harness/`\n\n\
                | x | `harness/src/cli/` |\n\n## The harness, room by room\n\n\
                - `cli/`: `mod.rs` and\n  `exit.rs`;\n- `load.rs`\n";
    assert_eq!(
        architecture_paths(text),
        [
            (Some("transport".into()), "h2conn/".into()),
            (Some("transport".into()), "hpack/".into()),
            (None, "harness/src/cli/".into()),
            (Some("harness".into()), "cli/".into()),
            (Some("harness".into()), "cli/mod.rs".into()),
            (Some("harness".into()), "cli/exit.rs".into()),
            (Some("harness".into()), "load.rs".into()),
        ]
    );
}
