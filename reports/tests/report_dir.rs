//! `--report-dir` and `harness report`: the four files, and rendering by format name.

mod common;

use reports::{from_json, render, write_report_dir, Format, ReportError};

#[test]
fn writes_the_four_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("nested").join("out");
    let r = common::sample();
    let files = write_report_dir(&r, &dir).unwrap();
    let names: Vec<String> = files
        .all()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        ["report.json", "junit.xml", "report.html", "summary.md"]
    );
    for p in files.all() {
        assert!(p.starts_with(&dir));
        assert!(std::fs::metadata(p).unwrap().len() > 100, "{}", p.display());
    }
    let back = from_json(&std::fs::read_to_string(&files.json).unwrap()).unwrap();
    assert_eq!(back, r);
    assert!(std::fs::read_to_string(&files.junit)
        .unwrap()
        .contains("<testsuite name=\"thundering-herd-no-jitter\""));
    assert!(std::fs::read_to_string(&files.html)
        .unwrap()
        .contains("id=\"chart-timeline\""));
    assert!(std::fs::read_to_string(&files.markdown)
        .unwrap()
        .starts_with("## ❌ FAILED"));

    // Writing again replaces the files.
    let files = write_report_dir(&common::passing_sample(), &dir).unwrap();
    assert!(std::fs::read_to_string(&files.markdown)
        .unwrap()
        .starts_with("## ✅ PASSED"));
}

#[test]
fn an_unwritable_dir_names_the_path() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let err = write_report_dir(&common::sample(), &file.join("out")).unwrap_err();
    assert!(matches!(err, ReportError::Write { .. }), "{err:?}");
    assert!(err.to_string().contains("not-a-dir"), "{err}");
}

#[test]
fn formats_parse_and_render() {
    let r = common::sample();
    for f in Format::ALL {
        assert_eq!(f.name().parse::<Format>().unwrap(), f);
        assert_eq!(f.to_string(), f.name());
        let out = render(&r, f, false).unwrap();
        assert!(!out.is_empty());
        assert!(!out.contains('\u{1b}'), "{f}");
    }
    assert_eq!("md".parse::<Format>().unwrap(), Format::Markdown);
    assert!(render(&r, Format::Json, false)
        .unwrap()
        .contains("\"schema_version\": 1"));
    assert!(render(&r, Format::Junit, false)
        .unwrap()
        .starts_with("<?xml"));
    assert!(render(&r, Format::Html, false)
        .unwrap()
        .starts_with("<!DOCTYPE html>"));
    assert!(render(&r, Format::Table, true).unwrap().contains('\u{1b}'));
    let err = "yaml".parse::<Format>().unwrap_err();
    assert!(
        err.to_string().contains("unknown report format `yaml`"),
        "{err}"
    );
}
