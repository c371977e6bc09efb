//! The tables of checks — the README's and the book's (`docs/src/reference/checks.md`) — are
//! written from the checks' own descriptions ([`CheckSpec::ABOUT`]): a check added or changed
//! without its row fails here. `UPDATE_README=1 cargo test -p checks --test readme` rewrites the
//! rows.
//!
//! [`CheckSpec::ABOUT`]: checks::CheckSpec::ABOUT

use checks::ChecksConfig;

const HEADER: &str = "| check | catches | how | passes only when | limits |";

#[test]
fn the_readme_table_is_the_checks_own_description() {
    table_is_the_checks_own_description(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"));
}

#[test]
fn the_books_table_is_the_checks_own_description() {
    table_is_the_checks_own_description(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/src/reference/checks.md"
    ));
}

fn table_is_the_checks_own_description(path: &str) {
    let readme = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let lines: Vec<&str> = readme.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with(HEADER))
        .unwrap_or_else(|| panic!("{path} has a table of checks"))
        + 2;
    let end = start
        + lines[start..]
            .iter()
            .take_while(|l| l.starts_with("| `"))
            .count();
    let expected: Vec<String> = ChecksConfig::about()
        .into_iter()
        .map(|(name, a)| {
            format!(
                "| `{name}` | {} | {} | {} | {} |",
                a.catches, a.how, a.evidence, a.limits
            )
        })
        .collect();
    if std::env::var_os("UPDATE_README").is_some() {
        let mut out: Vec<String> = lines[..start].iter().map(|l| l.to_string()).collect();
        out.extend(expected.iter().cloned());
        out.extend(lines[end..].iter().map(|l| l.to_string()));
        std::fs::write(path, out.join("\n") + "\n").expect("the page is writable");
        return;
    }
    assert_eq!(
        lines[start..end].to_vec(),
        expected,
        "{path}: the table of checks differs from the checks' descriptions \
         (UPDATE_README=1 cargo test -p checks --test readme rewrites it)"
    );
}
