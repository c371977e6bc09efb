//! Replays the saved fuzzing corpus and every crash ever found (`fuzz/corpus/TARGET/`,
//! `fuzz/regressions/TARGET/`) through the targets, on the stable toolchain: what once broke a
//! parser stays fixed, and what the fuzzer learned to reach stays reachable.

use std::path::{Path, PathBuf};

fn inputs(target: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz");
    let mut files = Vec::new();
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        files.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_file()));
    }
    files.sort();
    files
}

#[test]
fn every_saved_input_runs_clean() {
    let mut total = 0;
    for (name, run) in fuzzing::TARGETS {
        let files = inputs(name);
        assert!(!files.is_empty(), "no saved inputs for {name}");
        for f in &files {
            let data = std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            // A panic names the file: `cargo fuzz run TARGET FILE` reproduces it.
            eprintln!("{name}: {}", f.display());
            run(&data);
        }
        total += files.len();
    }
    eprintln!("{total} inputs replayed");
}
