//! `harness audit`'s table in every format: one row per operation, its verdict and its evidence.

mod common;

use quick_xml::events::Event;
use reports::junit::OPERATION_CLASSNAME;
use reports::model::OperationVerdict;
use reports::{from_json, render_terminal, to_html, to_json_pretty, to_junit_xml, to_markdown};

#[test]
fn the_json_report_lists_every_operation_with_its_verdict_word() {
    let r = common::audit_sample();
    let json: serde_json::Value = serde_json::from_str(&to_json_pretty(&r)).unwrap();
    let ops = json["operations"].as_array().expect("operations");
    assert_eq!(ops.len(), 5);
    let verdicts: Vec<&str> = ops.iter().map(|o| o["verdict"].as_str().unwrap()).collect();
    assert_eq!(verdicts, ["pass", "fail", "fail", "pass", "inconclusive"]);
    for field in [
        "method",
        "path",
        "operation_id",
        "key_header",
        "summary",
        "evidence",
    ] {
        assert!(ops[1].get(field).is_some(), "{field} missing: {}", ops[1]);
    }
    assert_eq!(ops[1]["operation_id"], "createOrderRacy");
    assert_eq!(ops[1]["key_header"], "Idempotency-Key");
    assert_eq!(ops[1]["evidence"][0]["seqs"].as_array().unwrap().len(), 7);
    assert_eq!(json["passed"], false);
    // And back: the saved report renders again as it was.
    assert_eq!(from_json(&to_json_pretty(&r)).unwrap(), r);
}

#[test]
fn a_report_without_operations_has_no_operations_field() {
    let json: serde_json::Value = serde_json::from_str(&to_json_pretty(&common::sample())).unwrap();
    assert!(json.get("operations").is_none());
}

#[test]
fn junit_has_one_test_case_per_operation_failing_the_failed_ones() {
    let xml = to_junit_xml(&common::audit_sample()).unwrap();
    let mut reader = quick_xml::Reader::from_str(&xml);
    let (mut names, mut failures) = (Vec::new(), 0);
    let mut in_case = String::new();
    loop {
        match reader.read_event().unwrap() {
            Event::Eof => break,
            Event::Start(e) | Event::Empty(e) => match e.name().as_ref() {
                b"testcase" => {
                    let attr = |n: &[u8]| {
                        e.attributes()
                            .flatten()
                            .find(|a| a.key.as_ref() == n)
                            .map(|a| String::from_utf8_lossy(&a.value).into_owned())
                            .unwrap_or_default()
                    };
                    assert_eq!(attr(b"classname"), OPERATION_CLASSNAME);
                    in_case = attr(b"name");
                    names.push(in_case.clone());
                }
                b"failure" => {
                    failures += 1;
                    assert!(
                        in_case.contains("createOrderRacy") || in_case.contains("createNote"),
                        "{in_case} failed"
                    );
                }
                _ => {}
            },
            _ => {}
        }
    }
    assert_eq!(names.len(), 5, "{xml}");
    assert_eq!(names[0], "POST /orders (createOrder)");
    assert_eq!(failures, 2);
    assert!(xml.contains("verdict: INCONCLUSIVE — could not build a valid request"));
    assert!(xml.contains("key created 7 resources"));
}

#[test]
fn the_terminal_shows_the_table_and_the_evidence() {
    let text = render_terminal(&common::audit_sample(), false);
    assert!(text.starts_with("FAILED"), "{text}");
    assert!(
        text.contains("2 of 5 operations failed, 1 inconclusive"),
        "{text}"
    );
    let table = &text[text.find("Operations").expect("a table")..];
    for cell in [
        "POST /racy-orders",
        "max 7 (20 of 20 keys)",
        "200, same",
        "422",
        "INCONCLUSIVE",
        "key created 7 resources",
        "not safe to retry",
    ] {
        assert!(table.contains(cell), "{cell} missing:\n{table}");
    }
    assert!(!text.contains('\u{1b}'), "no colour asked for");
}

#[test]
fn markdown_has_the_table_and_the_evidence_of_what_did_not_pass() {
    let md = to_markdown(&common::audit_sample());
    assert!(md.contains("### Operations"), "{md}");
    let rows: Vec<&str> = md
        .lines()
        .skip_while(|l| !l.starts_with("| | method"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .collect();
    assert_eq!(rows.len(), 5, "{md}");
    assert!(rows[1].contains("/racy-orders") && rows[1].contains("FAIL"));
    // `{id}` and the path's braces stay readable; `_` in an id is escaped, not emphasis.
    assert!(rows[3].contains("/orders/{id}"), "{}", rows[3]);
    assert!(md.contains("#### Operation evidence"));
    assert!(md.contains("key created 7 resources"));
    assert!(md.contains("the list grew by 2"));
}

#[test]
fn html_links_each_row_to_its_evidence() {
    let r = common::audit_sample();
    let html = to_html(&r);
    assert!(html.contains("<section id=\"operations\">"));
    for o in &r.operations {
        let anchor = o.anchor();
        assert!(html.contains(&format!("href=\"#{anchor}\"")), "{anchor}");
        assert!(html.contains(&format!("id=\"{anchor}\"")), "{anchor}");
    }
    // A failed operation's evidence is open; the request is escaped text.
    assert!(html.contains("id=\"op-createOrderRacy\" open"));
    assert!(html.contains("<pre class=\"request\">POST /racy-orders HTTP/1.1"));
    assert_eq!(
        r.operations
            .iter()
            .filter(|o| o.verdict == OperationVerdict::Fail)
            .count(),
        html.matches("<span class=\"badge fail\">FAIL</span>")
            .count()
    );
}
