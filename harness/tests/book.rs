//! The book (`docs/`) stays true: its command-line reference is the parser's own help, every page
//! is in `SUMMARY.md`, every link between pages (and from the README) reaches a page and a heading
//! that exist, and every shell block is run here with the checkout's `harness` — or is marked
//! `sh,not-run`, which the book shows as "not run by the tests".
//!
//! `UPDATE_DOCS=1 cargo test -p harness --test book` writes `docs/src/reference/cli.md` again.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate is in the workspace")
        .to_path_buf()
}

fn src() -> PathBuf {
    root().join("docs/src")
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A page's text with `{{#include FILE}}` replaced by FILE, as mdBook does.
fn expanded(page: &Path) -> String {
    let text = read(page);
    let mut out = String::new();
    for line in text.lines() {
        match line
            .trim()
            .strip_prefix("{{#include ")
            .and_then(|r| r.strip_suffix("}}"))
        {
            Some(file) => out.push_str(&read(&page.parent().expect("a directory").join(file))),
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).expect("docs/src is readable") {
            let p = e.expect("an entry").path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&src(), &mut out);
    out.sort();
    out
}

// ---------------------------------------------------------------------------------------------
// The command-line reference.

/// Every command's `--help`, from the root down, with env values hidden so the page does not
/// depend on the environment it was written in.
fn cli_reference() -> String {
    fn hide_env(c: clap::Command) -> clap::Command {
        c.mut_args(|a| a.hide_env_values(true))
            .mut_subcommands(hide_env)
    }
    fn walk(c: &mut clap::Command, path: &str, out: &mut String) {
        let name = if path.is_empty() {
            c.get_name().to_string()
        } else {
            format!("{path} {}", c.get_name())
        };
        out.push_str(&format!("\n## `{name}`\n\n```text\n"));
        let help = c.render_long_help().to_string();
        for line in help.trim_end().lines() {
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out.push_str("```\n");
        let mut subs: Vec<clap::Command> = c
            .get_subcommands()
            .filter(|s| s.get_name() != "help")
            .cloned()
            .collect();
        for s in &mut subs {
            walk(s, &name, out);
        }
    }
    let mut cmd = hide_env(harness::cli::command()).term_width(100);
    cmd.build();
    let mut out = String::from(
        "# Command line\n\n\
         Every command and flag of `harness`, as `harness help COMMAND` prints it. This page is \
         generated\nfrom the parser itself by `harness/tests/book.rs`, which fails when it is \
         stale;\n`UPDATE_DOCS=1 cargo test -p harness --test book` writes it again. The \
         fault server's flags are\non [their own page](fault-server-cli.md); what the exit \
         codes mean is on [Exit codes](exit-codes.md).\n",
    );
    walk(&mut cmd, "", &mut out);
    out
}

#[test]
fn the_cli_reference_is_the_parsers_own_help() {
    let path = src().join("reference/cli.md");
    let want = cli_reference();
    if std::env::var_os("UPDATE_DOCS").is_some() {
        std::fs::write(&path, &want).expect("cli.md is writable");
        return;
    }
    let have = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        have == want,
        "docs/src/reference/cli.md is stale (UPDATE_DOCS=1 cargo test -p harness --test book \
         writes it)"
    );
    // Every subcommand has its section.
    for sub in harness::cli::command().get_subcommands() {
        let name = sub.get_name();
        if name != "help" {
            assert!(have.contains(&format!("## `harness {name}`")), "{name}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Structure and links.

#[test]
fn every_page_is_in_the_summary_and_every_entry_exists() {
    let summary = read(&src().join("SUMMARY.md"));
    let listed: BTreeSet<PathBuf> = links(&summary).into_iter().map(|l| src().join(l)).collect();
    for p in &listed {
        assert!(
            p.is_file(),
            "SUMMARY.md lists {}, which does not exist",
            p.display()
        );
    }
    for p in pages() {
        if p.file_name().is_some_and(|n| n == "SUMMARY.md") {
            continue;
        }
        assert!(listed.contains(&p), "{} is not in SUMMARY.md", p.display());
    }
}

/// Inline link targets `](…)` outside code, in order.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
            continue;
        }
        if fence {
            continue;
        }
        // Inline code spans are not links.
        let mut plain = String::new();
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                plain.push_str(part);
            }
        }
        let mut rest = plain.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            if let Some(end) = rest.find(')') {
                out.push(rest[..end].to_string());
                rest = &rest[end..];
            }
        }
    }
    out
}

/// mdBook's id for a heading: lower case, spaces as `-`, other punctuation dropped.
fn anchor(heading: &str) -> String {
    let text: String = heading.replace('`', "");
    text.trim()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c.to_lowercase().collect::<String>())
            } else if c == ' ' {
                Some("-".into())
            } else {
                None
            }
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut fence = false;
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fence = !fence;
        }
        if fence {
            continue;
        }
        if let Some(h) = line.strip_prefix('#') {
            let a = anchor(h.trim_start_matches('#'));
            let n = seen.entry(a.clone()).or_insert(0);
            out.insert(if *n == 0 {
                a.clone()
            } else {
                format!("{a}-{n}")
            });
            *n += 1;
        }
    }
    out
}

fn check_links(page: &Path, text: &str, within: &Path, bad: &mut Vec<String>) {
    for link in links(text) {
        if link.starts_with("http://")
            || link.starts_with("https://")
            || link.starts_with("mailto:")
        {
            continue;
        }
        let (file, frag) = match link.split_once('#') {
            Some((f, a)) => (f, Some(a)),
            None => (link.as_str(), None),
        };
        let target = if file.is_empty() {
            page.to_path_buf()
        } else {
            page.parent().expect("a directory").join(file)
        };
        let Ok(target) = target.canonicalize() else {
            bad.push(format!("{}: {link}: no such file", page.display()));
            continue;
        };
        if !target.starts_with(within) {
            bad.push(format!(
                "{}: {link}: outside {}",
                page.display(),
                within.display()
            ));
            continue;
        }
        if let Some(a) = frag {
            if target.extension().is_some_and(|x| x == "md")
                && !anchors(&expanded(&target)).contains(a)
            {
                bad.push(format!("{}: {link}: no heading #{a}", page.display()));
            }
        }
    }
}

#[test]
fn every_link_reaches_a_page_and_a_heading() {
    let mut bad = Vec::new();
    let within = src().canonicalize().expect("docs/src");
    for p in pages() {
        check_links(&p, &expanded(&p), &within, &mut bad);
    }
    // The README links into the book and the repository.
    let readme = root().join("README.md");
    let repo = root().canonicalize().expect("the repository");
    check_links(&readme, &read(&readme), &repo, &mut bad);
    assert!(bad.is_empty(), "broken links:\n{}", bad.join("\n"));
}

#[test]
fn the_link_checker_sees_a_broken_link() {
    let within = src().canonicalize().expect("docs/src");
    let page = src().join("guide/first-run.md");
    let mut bad = Vec::new();
    check_links(
        &page,
        "[a](../reference/checks.md#no-such-heading) [b](nowhere.md) [c](../../../README.md) \
         `[d](nowhere.md)` [e](../reference/checks.md#the-checks)",
        &within,
        &mut bad,
    );
    assert_eq!(bad.len(), 3, "{bad:#?}");
}

// ---------------------------------------------------------------------------------------------
// Shell blocks.

/// A fenced shell block: where it is, its info string, its text.
struct Block {
    page: PathBuf,
    line: usize,
    info: String,
    text: String,
}

fn shell_blocks() -> Vec<Block> {
    let mut out = Vec::new();
    for page in pages() {
        let text = expanded(&page);
        let mut open: Option<(usize, String, String)> = None;
        for (i, line) in text.lines().enumerate() {
            let t = line.trim_start();
            match &mut open {
                None => {
                    if let Some(info) = t.strip_prefix("```") {
                        open = Some((i + 1, info.trim().to_string(), String::new()));
                    }
                }
                Some((start, info, body)) => {
                    if t.starts_with("```") {
                        let lang = info.split(',').next().unwrap_or("");
                        if matches!(lang, "sh" | "bash" | "shell" | "console" | "zsh") {
                            out.push(Block {
                                page: page.clone(),
                                line: *start,
                                info: info.clone(),
                                text: std::mem::take(body),
                            });
                        }
                        open = None;
                    } else {
                        body.push_str(line);
                        body.push('\n');
                    }
                }
            }
        }
    }
    out
}

/// The exit status a block expects: `exit=N` in its info string, else 0.
fn expected_exit(info: &str) -> i32 {
    info.split(',')
        .find_map(|a| a.strip_prefix("exit="))
        .map(|n| n.parse().expect("exit=N takes a number"))
        .unwrap_or(0)
}

#[test]
fn every_shell_block_is_run_or_marked_not_run() {
    let blocks = shell_blocks();
    assert!(
        blocks.len() >= 10,
        "found only {} shell blocks",
        blocks.len()
    );
    let mut unmarked = Vec::new();
    let mut run = 0;
    for b in &blocks {
        let attrs: Vec<&str> = b.info.split(',').skip(1).collect();
        let lang = b.info.split(',').next().unwrap_or("");
        if lang != "sh"
            || attrs
                .iter()
                .any(|a| *a != "not-run" && !a.starts_with("exit="))
        {
            unmarked.push(format!(
                "{}:{}: `{}`: shell blocks are `sh` (run by this test) or `sh,not-run`",
                b.page.display(),
                b.line,
                b.info
            ));
        }
        if !attrs.contains(&"not-run") {
            run += 1;
        }
    }
    assert!(unmarked.is_empty(), "{}", unmarked.join("\n"));
    assert!(run >= 3, "only {run} blocks are run");
}

#[test]
fn the_books_commands_run_as_shown() {
    let work = std::env::temp_dir().join(format!("harness-book-{}", std::process::id()));
    let bin = work.join("bin");
    std::fs::create_dir_all(&bin).expect("a temporary directory");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_harness"), bin.join("harness"))
        .expect("a symlink to the harness");
    // The commands name the repository's files by their paths from its root.
    for dir in ["scenarios", "fault-server", "bench", "calibration"] {
        std::os::unix::fs::symlink(root().join(dir), work.join(dir)).expect("a symlink");
    }
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut failed = Vec::new();
    for b in shell_blocks() {
        if b.info.split(',').any(|a| a == "not-run") {
            continue;
        }
        let out = Command::new("bash")
            .args(["--noprofile", "--norc", "-eo", "pipefail", "-c", &b.text])
            .current_dir(&work)
            .env("PATH", &path)
            .env("CI", "1")
            .env_remove("HARNESS_THREADS")
            .output()
            .expect("bash runs");
        let code = out.status.code().unwrap_or(-1);
        if code != expected_exit(&b.info) {
            failed.push(format!(
                "{}:{}: exit {code}, expected {}\n{}\nstdout:\n{}\nstderr:\n{}",
                b.page.display(),
                b.line,
                expected_exit(&b.info),
                b.text,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&work);
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}

/// Every fenced block of the README and the book, whatever its language: (file, line, text).
fn all_blocks() -> Vec<(PathBuf, usize, String)> {
    let mut files = pages();
    files.push(root().join("README.md"));
    let mut out = Vec::new();
    for f in files {
        let text = if f.starts_with(src()) {
            expanded(&f)
        } else {
            read(&f)
        };
        let mut open: Option<(usize, String)> = None;
        for (i, line) in text.lines().enumerate() {
            let t = line.trim_start();
            match &mut open {
                None if t.starts_with("```") => open = Some((i + 1, String::new())),
                None => {}
                Some((start, body)) => {
                    if t.starts_with("```") {
                        out.push((f.clone(), *start, std::mem::take(body)));
                        open = None;
                    } else {
                        body.push_str(line);
                        body.push('\n');
                    }
                }
            }
        }
    }
    out
}

/// Repository paths a text names: `scenarios/…`, `docs/…`, `calibration/…`, `bench/…`,
/// `deploy/…`, `harness/…`, `fault-server/…` followed by a file name with an extension.
fn repo_paths(text: &str) -> Vec<String> {
    const ROOTS: [&str; 7] = [
        "scenarios/",
        "docs/",
        "calibration/",
        "bench/",
        "deploy/",
        "harness/",
        "fault-server/",
    ];
    let mut out = Vec::new();
    for word in text.split(|c: char| c.is_whitespace() || "`'\"()[]{},;=:".contains(c)) {
        let w = word.trim_start_matches("./").trim_end_matches('.');
        if ROOTS.iter().any(|r| w.starts_with(r))
            && w.rsplit('/').next().is_some_and(|f| f.contains('.'))
            && !w.contains('*')
            && !w.contains('$')
            && !w.contains('<')
        {
            out.push(w.to_string());
        }
    }
    out
}

/// Every `harness …` command line of a block (continuation lines joined), as words.
fn harness_commands(text: &str) -> Vec<Vec<String>> {
    let joined = text.replace("\\\n", " ");
    let mut out = Vec::new();
    for line in joined.lines() {
        let t = line.trim_start().trim_start_matches("$ ");
        let Some(rest) = t.strip_prefix("harness ") else {
            continue;
        };
        let rest = rest.split(" #").next().unwrap_or(rest);
        let rest = rest.split(['|', '>', '&']).next().unwrap_or(rest);
        out.push(rest.split_whitespace().map(str::to_string).collect());
    }
    out
}

/// Every repository path the README and the book name exists, and every `harness` command they
/// show — run by the tests or not — names a subcommand and flags the parser has.
#[test]
fn every_path_and_command_in_the_readme_and_the_book_exists() {
    let mut missing = Vec::new();
    let mut helps: BTreeMap<String, String> = BTreeMap::new();
    let mut checked = 0;
    for (file, line, text) in all_blocks() {
        for p in repo_paths(&text) {
            if !root().join(&p).exists() {
                missing.push(format!("{}:{line}: {p} does not exist", file.display()));
            }
        }
        for words in harness_commands(&text) {
            let mut sub: Vec<&str> = Vec::new();
            for w in &words {
                if w.starts_with('-') || w.contains('/') || w.contains('.') || sub.len() == 2 {
                    break;
                }
                sub.push(w);
                if *w != "simulate" {
                    break;
                }
            }
            if sub.is_empty() {
                continue;
            }
            let key = sub.join(" ");
            let help = helps.entry(key.clone()).or_insert_with(|| {
                let out = Command::new(env!("CARGO_BIN_EXE_harness"))
                    .args(&sub)
                    .arg("--help")
                    .output()
                    .expect("harness runs");
                if out.status.success() {
                    String::from_utf8_lossy(&out.stdout).into_owned()
                } else {
                    String::new()
                }
            });
            if help.is_empty() {
                missing.push(format!(
                    "{}:{line}: `harness {key}` is no subcommand",
                    file.display()
                ));
                continue;
            }
            checked += 1;
            for w in words.iter().filter(|w| w.starts_with('-') && w.len() > 1) {
                let flag = w.split('=').next().unwrap_or(w);
                if flag == "--" {
                    break;
                }
                let known = if flag.starts_with("--") {
                    help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n"))
                } else {
                    help.contains(&format!("{flag}, "))
                };
                if !known {
                    missing.push(format!(
                        "{}:{line}: `harness {key}` has no flag {flag}",
                        file.display()
                    ));
                }
            }
        }
    }
    assert!(checked >= 20, "only {checked} harness commands found");
    assert!(missing.is_empty(), "{}", missing.join("\n"));
}

/// The checker above finds what it exists for: a path that is not there, a flag the parser
/// does not have.
#[test]
fn the_path_and_command_finder_reads_what_it_should() {
    assert_eq!(
        repo_paths("run `scenarios/resilience.yaml` and ./docs/src/x.md."),
        vec!["scenarios/resilience.yaml", "docs/src/x.md"]
    );
    assert_eq!(
        harness_commands("$ harness load URL -c 4 \\\n  -z 10s | jq .\nnot harness\n"),
        vec![vec!["load", "URL", "-c", "4", "-z", "10s"]]
    );
}
