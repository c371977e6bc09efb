//! The JSON Schemas in `docs/schema/` are the ones the types generate, and every scenario and
//! example config in the repository is valid under the schema its first line names, by an
//! independent validator (the `jsonschema` crate), so an editor that reads that line agrees with
//! the loader. `UPDATE_SCHEMAS=1 cargo test -p harness --test schema` writes the schemas again.

use std::path::{Path, PathBuf};

use harness::fault_server::Config;
use harness::scenario::{self, Overrides};
use serde_json::{json, Value};

const SCENARIO: &str = "docs/schema/scenario.schema.json";
const FAULT_SERVER: &str = "docs/schema/fault-server.schema.json";
const MODELINE: &str = "# yaml-language-server: $schema=";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate is in the workspace")
        .to_path_buf()
}

fn generated(which: &str) -> String {
    let schema = match which {
        SCENARIO => scenario::schema(),
        FAULT_SERVER => Config::schema(),
        other => panic!("no schema {other}"),
    };
    serde_json::to_string_pretty(&schema).expect("a schema serializes") + "\n"
}

fn validator(which: &str) -> jsonschema::Validator {
    let text = std::fs::read_to_string(root().join(which))
        .unwrap_or_else(|e| panic!("{which}: {e} (UPDATE_SCHEMAS=1 writes it)"));
    let schema: Value = serde_json::from_str(&text).expect("the committed schema is JSON");
    jsonschema::draft7::new(&schema)
        .unwrap_or_else(|e| panic!("{which} is not a valid schema: {e}"))
}

/// The validator's complaints about `doc`, one line each; empty when it is valid.
fn errors(v: &jsonschema::Validator, doc: &Value) -> Vec<String> {
    v.iter_errors(doc)
        .map(|e| format!("at {}: {e}", e.instance_path()))
        .collect()
}

fn yaml(text: &str) -> Value {
    serde_norway::from_str(text).unwrap_or_else(|e| panic!("YAML: {e}\n{text}"))
}

#[test]
fn the_committed_schemas_are_the_generated_ones() {
    let update = std::env::var_os("UPDATE_SCHEMAS").is_some();
    for which in [SCENARIO, FAULT_SERVER] {
        let path = root().join(which);
        let want = generated(which);
        if update {
            std::fs::create_dir_all(path.parent().expect("docs/schema")).expect("docs/schema");
            std::fs::write(&path, &want).expect("the schema is writable");
            continue;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "{which} differs from the schema the types generate \
             (UPDATE_SCHEMAS=1 cargo test -p harness --test schema writes it)"
        );
    }
}

#[test]
fn field_docs_come_from_the_doc_comments() {
    let s: Value = serde_json::from_str(&generated(SCENARIO)).expect("JSON");
    assert_eq!(
        s["properties"]["time_scale"]["description"],
        "Multiplies every duration; `--time-scale` overrides."
    );
    let f: Value = serde_json::from_str(&generated(FAULT_SERVER)).expect("JSON");
    let desc = f["properties"]["seed"]["description"]
        .as_str()
        .unwrap_or("");
    assert!(desc.starts_with("Seed for every random decision"), "{desc}");
}

/// Every YAML file a user is shown as an example, with the schema its modeline names.
fn examples() -> Vec<(PathBuf, &'static str)> {
    let mut files = Vec::new();
    for dir in ["scenarios", "bench", "calibration", "fault-server/examples"] {
        collect(&root().join(dir), &mut files);
    }
    assert!(files.len() >= 35, "found only {} files", files.len());
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).expect("readable");
            let first = text.lines().next().unwrap_or("");
            let named = first.strip_prefix(MODELINE).unwrap_or_else(|| {
                panic!(
                    "{}: the first line is not `{MODELINE}…` (editors read the schema from it)",
                    path.display()
                )
            });
            let target = path.parent().expect("in a directory").join(named);
            let which = [SCENARIO, FAULT_SERVER]
                .into_iter()
                .find(|w| same_file(&target, &root().join(w)))
                .unwrap_or_else(|| {
                    panic!(
                        "{}: {named} is not one of docs/schema's schemas",
                        path.display()
                    )
                });
            (path, which)
        })
        .collect()
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .collect();
    entries.sort();
    for p in entries {
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if p.is_dir() {
            // Installed packages and results are not ours to validate.
            if !matches!(name, "node_modules" | "results" | ".cache") {
                collect(&p, out);
            }
        } else if name.ends_with(".yaml") || name.ends_with(".yml") {
            out.push(p);
        }
    }
}

#[test]
fn every_example_is_valid_under_the_schema_it_names() {
    let scenario = validator(SCENARIO);
    let server = validator(FAULT_SERVER);
    let mut bad = Vec::new();
    let mut kinds = [0, 0];
    for (path, which) in examples() {
        let v = if which == SCENARIO {
            &scenario
        } else {
            &server
        };
        kinds[usize::from(which == FAULT_SERVER)] += 1;
        let doc = yaml(&std::fs::read_to_string(&path).expect("readable"));
        for e in errors(v, &doc) {
            bad.push(format!("{}: {e}", path.display()));
        }
    }
    assert!(
        bad.is_empty(),
        "invalid under their schema:\n{}",
        bad.join("\n")
    );
    assert!(
        kinds[0] >= 30 && kinds[1] >= 2,
        "scenarios, configs: {kinds:?}"
    );
}

#[test]
fn a_misspelled_field_anywhere_in_an_example_is_refused() {
    let scenario = validator(SCENARIO);
    let server = validator(FAULT_SERVER);
    for (path, which) in examples() {
        let v = if which == SCENARIO {
            &scenario
        } else {
            &server
        };
        let doc = yaml(&std::fs::read_to_string(&path).expect("readable"));
        // Every object in the document, one at a time, gets a field no type has.
        let mut pointers = Vec::new();
        objects(&doc, String::new(), &mut pointers);
        for ptr in pointers {
            let mut d = doc.clone();
            if let Some(Value::Object(m)) = d.pointer_mut(&ptr) {
                m.insert("tiemout".into(), json!("1s"));
            }
            // Free-form maps (headers, JSON bodies, gRPC messages, captures) take any name: skip those.
            if free_form(&ptr) {
                continue;
            }
            assert!(
                !errors(v, &d).is_empty(),
                "{}: `tiemout` at {ptr:?} was accepted",
                path.display()
            );
        }
    }
}

fn objects(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            out.push(at.clone());
            for (k, x) in m {
                objects(
                    x,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    out,
                );
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                objects(x, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

fn free_form(ptr: &str) -> bool {
    let last = ptr.rsplit('/').next().unwrap_or("");
    let inside = |name: &str| ptr.split('/').any(|s| s == name);
    matches!(
        last,
        "headers" | "capture" | "metadata" | "by_rule" | "by_status"
    ) || inside("json")
        || inside("headers")
        // A gRPC request's message is the method's proto3 JSON: its type checks it, at load.
        || inside("message")
        || inside("responses")
}

/// A scenario with `patch` merged into a known-good one.
fn scenario_with(patch: &str) -> String {
    format!(
        "name: t\nserver: {{ orders: {{ idempotency: unique }} }}\n\
         phases:\n  - name: p\n    clients: {{ concurrency: 1, requests: 1 }}\n    \
         request: {{ method: POST, path: /orders }}\n{patch}"
    )
}

#[test]
fn what_the_loader_refuses_for_its_shape_the_schema_refuses_too() {
    let v = validator(SCENARIO);
    let base = scenario_with("");
    assert_eq!(errors(&v, &yaml(&base)), Vec::<String>::new());
    let cases = [
        "tiem_scale: 2\n",
        "time_scale: 0\n",
        "client: { jitter: partial }\n",
        "client: { timeout: 5 parsecs }\n",
        "client: { backoff: { kind: quadratic } }\n",
        "checks: { thresholds: { rules: [\"p99 around 200ms\"] } }\n",
        "checks: { duplicate: {} }\n",
        "server: { rules: [{ fault: { status: 700 } }] }\n",
        "server: { rules: [{ fault: explode }] }\n",
        "server: { rules: [{ fault: { status: 503, drop: {} } }] }\n",
        "server: { rules: [{ match: { attempts: \"first\" }, fault: drop }] }\n",
        "server: { rules: [{ match: { probability: 1.5 }, fault: drop }] }\n",
        "server: { rules: [{ match: { path: orders }, fault: drop }] }\n",
        "server: { rules: [{ fault: { delay: { fixed: 1s, uniform: [1s, 2s] } } }] }\n",
        "server: { limits: { max_body: 16 megs } }\n",
        "server: { tls: self-made }\n",
        "server: { upstream: ftp://example.com }\n",
        "server: { orders: { idempotency: optimistic } }\n",
        "http: { version: 2, stream: 10 }\n",
    ];
    for patch in cases {
        let text = scenario_with(patch);
        // The loader refuses each (this is what the schema must agree with) …
        let loaded = scenario::load_str(&text, Path::new("t.yaml"), &Overrides::default());
        assert!(loaded.is_err(), "the loader accepted {patch:?}");
        // … and so does the schema, where a field's shape is at fault.
        let doc = match serde_norway::from_str::<Value>(&text) {
            Ok(d) => d,
            Err(_) => continue,
        };
        assert!(
            !errors(&v, &doc).is_empty(),
            "the schema accepted {patch:?}"
        );
    }
}

#[test]
fn every_duration_and_size_the_loader_reads_the_schema_accepts() {
    let v = validator(SCENARIO);
    let durations = [
        "0",
        "250ms",
        "1.5s",
        "2m",
        "24h",
        "1h 30m",
        "1h30m",
        "2days",
        "1 week",
        ".5s",
        "10us",
        "10µs",
        "3 secs",
        "1yr",
        "90 minutes",
        "7d",
        "1.25h",
        "15 msec",
        "2hrs",
    ];
    for d in durations {
        let text = scenario_with(&format!("client: {{ timeout: \"{d}\" }}\n"));
        let loaded = scenario::load_str(&text, Path::new("t.yaml"), &Overrides::default());
        let accepted = errors(&v, &yaml(&text)).is_empty();
        if loaded.is_ok() {
            assert!(accepted, "the loader reads {d:?}, the schema refuses it");
        }
    }
    for bad in ["5 parsecs", "fast", "1.5d", "-1s", "1,5s"] {
        let text = scenario_with(&format!("client: {{ timeout: \"{bad}\" }}\n"));
        assert!(
            scenario::load_str(&text, Path::new("t.yaml"), &Overrides::default()).is_err(),
            "the loader reads {bad:?}"
        );
        assert!(
            !errors(&v, &yaml(&text)).is_empty(),
            "the schema accepts {bad:?}"
        );
    }
    let server = validator(FAULT_SERVER);
    for s in ["65536", "64KiB", "10 MiB", "1GiB", "1.5MB", "100kB", "12B"] {
        let text = format!("limits: {{ max_body: \"{s}\" }}\n");
        if Config::from_yaml(&text, "t").is_ok() {
            assert!(
                errors(&server, &yaml(&text)).is_empty(),
                "the loader reads size {s:?}, the schema refuses it"
            );
        }
    }
}
