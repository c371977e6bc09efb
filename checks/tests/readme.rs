//! The README's table of checks is written from the checks' own descriptions ([`CheckSpec::ABOUT`]):
//! a check added or changed without its row fails here.

use checks::ChecksConfig;

#[test]
fn the_readme_table_is_the_checks_own_description() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md at the workspace root");
    let rows: Vec<&str> = readme
        .lines()
        .skip_while(|l| !l.starts_with("| check | catches | how | limits |"))
        .skip(2)
        .take_while(|l| l.starts_with("| `"))
        .collect();
    let expected: Vec<String> = ChecksConfig::about()
        .into_iter()
        .map(|(name, a)| format!("| `{name}` | {} | {} | {} |", a.catches, a.how, a.limits))
        .collect();
    assert_eq!(
        rows,
        expected,
        "README.md's table of checks differs from the checks' descriptions; the rows should read:\n{}",
        expected.join("\n")
    );
}
