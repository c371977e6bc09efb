//! An interrupted run and a run that decided nothing say so in every format, and never read as
//! passed.

mod common;

use reports::{render, Format, Outcome, Report};

fn with(outcome: Outcome) -> Report {
    let mut r = common::passing_sample();
    r.outcome = Some(outcome);
    r.interrupted = outcome == Outcome::Interrupted;
    r
}

#[test]
fn every_format_says_interrupted_or_no_verdict() {
    for (outcome, word, case) in [
        (Outcome::Interrupted, "INTERRUPTED", "interrupted"),
        (Outcome::NoVerdict, "NO VERDICT", "no_verdict"),
    ] {
        let r = with(outcome);
        let table = render(&r, Format::Table, false).unwrap();
        assert!(table.starts_with(word), "{table}");
        assert!(table.contains(outcome.explanation()), "{table}");
        let md = render(&r, Format::Markdown, false).unwrap();
        assert!(md.contains(&format!("{word}: ")), "{md}");
        let html = render(&r, Format::Html, false).unwrap();
        assert!(html.contains(&format!("<title>{word}: ")), "{html}");
        assert!(html.contains("verdict undecided"), "{html}");
        let junit = render(&r, Format::Junit, false).unwrap();
        assert!(
            junit.contains(&format!(
                "<testcase name=\"{case}\" classname=\"harness.run\">"
            )),
            "{junit}"
        );
        assert!(junit.contains(&format!("type=\"{word}\"")), "{junit}");
        let json: serde_json::Value =
            serde_json::from_str(&render(&r, Format::Json, false).unwrap()).unwrap();
        assert_eq!(json["passed"], false);
        assert_eq!(json["outcome"], case);
        assert_eq!(json["interrupted"], outcome == Outcome::Interrupted);
        assert_ne!(outcome, Outcome::Passed);
    }
}

#[test]
fn a_passed_run_has_no_extra_test_case() {
    let r = with(Outcome::Passed);
    let junit = render(&r, Format::Junit, false).unwrap();
    assert!(!junit.contains("harness.run"), "{junit}");
    assert!(
        junit.contains("name=\"outcome\" value=\"passed\""),
        "{junit}"
    );
}

#[test]
fn reports_written_before_the_outcome_field_derive_it() {
    let mut v = serde_json::to_value(common::passing_sample()).unwrap();
    let o = v.as_object_mut().unwrap();
    o.remove("outcome");
    o.remove("interrupted");
    let r: Report = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(r.outcome(), Outcome::Passed);
    v["passed"] = serde_json::json!(false);
    let r: Report = serde_json::from_value(v).unwrap();
    assert_eq!(r.outcome(), Outcome::Failed);
}

#[test]
fn passed_is_derived_from_the_outcome_and_still_written() {
    for outcome in [
        Outcome::Passed,
        Outcome::Failed,
        Outcome::NoVerdict,
        Outcome::Interrupted,
    ] {
        let r = with(outcome);
        assert_eq!(r.passed(), outcome == Outcome::Passed);
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["passed"], outcome == Outcome::Passed, "{outcome:?}");
    }
    // A document that contradicts itself is read by its outcome.
    let mut v = serde_json::to_value(with(Outcome::Failed)).unwrap();
    v["passed"] = serde_json::json!(true);
    let r: Report = serde_json::from_value(v).unwrap();
    assert!(!r.passed());
}
