//! The README's table of checks is written from the checks' own descriptions ([`CheckSpec::ABOUT`]):
//! a check added or changed without its row fails here. `UPDATE_README=1 cargo test -p checks
//! --test readme` rewrites the rows.
//!
//! [`CheckSpec::ABOUT`]: checks::CheckSpec::ABOUT

use checks::ChecksConfig;

const HEADER: &str = "| check | catches | how | passes only when | limits |";

#[test]
fn the_readme_table_is_the_checks_own_description() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md");
    let readme = std::fs::read_to_string(path).expect("README.md at the workspace root");
    let lines: Vec<&str> = readme.lines().collect();
    let start = lines
        .iter()
        .position(|l| l.starts_with(HEADER))
        .expect("the README has a table of checks")
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
        std::fs::write(path, out.join("\n") + "\n").expect("README.md is writable");
        return;
    }
    assert_eq!(
        lines[start..end].to_vec(),
        expected,
        "README.md's table of checks differs from the checks' descriptions \
         (UPDATE_README=1 cargo test -p checks --test readme rewrites it)"
    );
}
