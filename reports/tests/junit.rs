//! `junit.xml`: parsed back as CI reporters would read it.

mod common;

use quick_junit::{NonSuccessKind, TestCaseStatus};
use quick_xml::events::Event;
use reports::junit::CLASSNAME;
use reports::to_junit_xml;

/// Reads the document with a plain XML parser, failing on anything not well-formed, and returns the
/// number of `<testcase>` and `<failure>` elements.
fn well_formed_counts(xml: &str) -> (usize, usize) {
    let mut reader = quick_xml::Reader::from_str(xml);
    reader.config_mut().check_end_names = true;
    let (mut cases, mut failures) = (0, 0);
    loop {
        match reader.read_event() {
            Ok(Event::Eof) => break,
            Ok(Event::Start(e) | Event::Empty(e)) => match e.name().as_ref() {
                b"testcase" => cases += 1,
                b"failure" => failures += 1,
                _ => {}
            },
            Ok(_) => {}
            Err(e) => panic!(
                "not well-formed at byte {}: {e}\n{xml}",
                reader.buffer_position()
            ),
        }
    }
    (cases, failures)
}

#[test]
fn one_suite_one_case_per_check() {
    let r = common::sample();
    let xml = to_junit_xml(&r).unwrap();
    assert!(xml.starts_with("<?xml"), "{xml}");
    assert_eq!(well_formed_counts(&xml), (6, 2));

    let doc = quick_junit::Report::deserialize_from_str(&xml).unwrap();
    assert_eq!(doc.tests, 6);
    assert_eq!(doc.failures, 2);
    assert_eq!(doc.errors, 0);
    assert_eq!(doc.test_suites.len(), 1);
    let suite = &doc.test_suites[0];
    assert_eq!(suite.name.as_str(), "thundering-herd-no-jitter");
    assert_eq!(suite.tests, 6);
    assert_eq!(suite.failures, 2);
    let names: Vec<&str> = suite.test_cases.iter().map(|c| c.name.as_str()).collect();
    let expected: Vec<&str> = r.checks.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, expected);
    for case in &suite.test_cases {
        assert_eq!(case.classname.as_ref().map(|c| c.as_str()), Some(CLASSNAME));
    }
    assert!(suite
        .properties
        .iter()
        .any(|p| p.name.as_str() == "seed" && p.value.as_str() == "42"));
}

#[test]
fn a_failed_check_is_a_failure_with_its_evidence() {
    let xml = to_junit_xml(&common::sample()).unwrap();
    let doc = quick_junit::Report::deserialize_from_str(&xml).unwrap();
    let jitter = &doc.test_suites[0].test_cases[0];
    match &jitter.status {
        TestCaseStatus::NonSuccess {
            kind,
            message,
            description,
            ..
        } => {
            assert_eq!(*kind, NonSuccessKind::Failure);
            assert_eq!(
                message.as_ref().unwrap().as_str(),
                common::sample().checks[0].summary
            );
            let text = description.as_ref().unwrap().as_str();
            assert!(
                text.contains("attempt 2: 500 retries, every delay exactly 1000 ms"),
                "{text}"
            );
            assert!(text.contains("seq 501, 502"), "{text}");
            assert!(
                text.contains("attempt 6"),
                "all evidence belongs in junit: {text}"
            );
            assert!(
                text.contains("spread_ratio = 0") && !text.contains("spread_ratio = 0.0"),
                "{text}"
            );
        }
        other => panic!("jitter should fail, got {other:?}"),
    }
}

#[test]
fn weak_and_inconclusive_pass_but_say_so() {
    let xml = to_junit_xml(&common::sample()).unwrap();
    let doc = quick_junit::Report::deserialize_from_str(&xml).unwrap();
    let cases = &doc.test_suites[0].test_cases;
    let find = |name: &str| cases.iter().find(|c| c.name.as_str() == name).unwrap();
    for (name, word) in [("amplification", "weak"), ("retry_after", "inconclusive")] {
        let case = find(name);
        assert!(
            matches!(case.status, TestCaseStatus::Success { .. }),
            "{name}: {:?}",
            case.status
        );
        let out = case.system_out.as_ref().unwrap().as_str();
        assert!(out.contains(&format!("verdict: {word}")), "{out}");
    }
    let out = find("duplicates").system_out.as_ref().unwrap().as_str();
    assert!(out.contains("verdict: pass"), "{out}");
}

#[test]
fn hostile_text_stays_well_formed() {
    let r = common::hostile();
    let xml = to_junit_xml(&r).unwrap();
    assert_eq!(well_formed_counts(&xml), (6, 2));
    assert!(!xml.contains("<script>"), "{xml}");
    for raw in ['\u{1b}', '\u{7}', '\u{202e}'] {
        assert!(
            !xml.contains(raw),
            "control characters are not allowed in XML 1.0: {raw:?}"
        );
    }
    let doc = quick_junit::Report::deserialize_from_str(&xml).unwrap();
    assert_eq!(doc.test_suites[0].name.as_str(), r.scenario);
    match &doc.test_suites[0].test_cases[0].status {
        TestCaseStatus::NonSuccess { message, .. } => {
            let m = message.as_ref().unwrap().as_str();
            assert!(m.starts_with("a | b <b>bold</b> & \"quoted\" ]]>"), "{m}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn no_checks_is_an_empty_suite() {
    let xml = to_junit_xml(&common::empty()).unwrap();
    assert_eq!(well_formed_counts(&xml), (0, 0));
    let doc = quick_junit::Report::deserialize_from_str(&xml).unwrap();
    assert_eq!(doc.test_suites.len(), 1);
    assert_eq!(doc.tests, 0);
}
