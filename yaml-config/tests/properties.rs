//! The parsers' promises, on inputs nobody wrote by hand.

use std::time::Duration;

use proptest::prelude::*;
use yaml_config::{locate, parse_duration, parse_size, Dur};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn a_written_duration_reads_back(ms in 0u64..=yaml_config::MAX_DURATION.as_millis() as u64) {
        prop_assert_eq!(parse_duration(&format!("{ms}ms")), Ok(Duration::from_millis(ms)));
        prop_assert_eq!(parse_duration(&format!("{}s", ms / 1000)), Ok(Duration::from_secs(ms / 1000)));
        let d: Dur = yaml_config::from_yaml_str(&format!("{ms}ms"), "d").expect("in bounds");
        prop_assert_eq!(d.0, Duration::from_millis(ms));
    }

    #[test]
    fn a_duration_past_the_bound_is_refused_with_the_bound(
        extra in 1u64..=u64::MAX / 2000,
    ) {
        let ms = yaml_config::MAX_DURATION.as_millis() as u64 + extra;
        let e = yaml_config::from_yaml_str::<Dur>(&format!("{ms}ms"), "d").expect_err("too long");
        prop_assert!(e.to_string().contains("366 days"), "{}", e);
    }

    #[test]
    fn any_text_is_a_duration_or_a_message(s in "\\PC{0,40}") {
        if let Err(m) = parse_duration(&s) {
            prop_assert!(!m.is_empty());
        }
        if let Err(m) = parse_size(&s) {
            prop_assert!(!m.is_empty());
        }
    }

    #[test]
    fn a_written_size_reads_back(n in 0u64..=1u64 << 40) {
        prop_assert_eq!(parse_size(&n.to_string()), Ok(n));
        prop_assert_eq!(parse_size(&format!("{}KiB", n >> 10)), Ok((n >> 10) << 10));
        prop_assert_eq!(parse_size(&format!("{}MiB", n >> 20)), Ok((n >> 20) << 20));
    }

    /// `locate` answers a position inside the text, or nothing, for any text and any path.
    #[test]
    fn a_located_field_is_inside_the_text(
        text in "[a-z:{}\\[\\], \\-\\n\"']{0,200}",
        path in "[a-z.\\[\\]0-9]{0,30}",
    ) {
        if let Some((line, column)) = locate(&text, &path) {
            let lines: Vec<&str> = text.split('\n').collect();
            prop_assert!(line >= 1 && line <= lines.len(), "line {} of {}", line, lines.len());
            prop_assert!(column >= 1 && column <= lines[line - 1].chars().count() + 1);
        }
    }

    /// A document nested deeper than the bound is refused before it is parsed.
    #[test]
    fn deep_nesting_is_refused_not_parsed(depth in yaml_config::MAX_NESTING + 1..500, flow in any::<bool>()) {
        let text = if flow {
            format!("{}{}", "[".repeat(depth), "]".repeat(depth))
        } else {
            (0..depth).map(|i| format!("{}a:\n", "  ".repeat(i))).collect()
        };
        let e = yaml_config::from_yaml_str::<serde_norway::Value>(&text, "deep").expect_err("too deep");
        let m = e.to_string();
        prop_assert!(m.contains("nest") || m.contains("recursion limit"), "{}", m);
    }
}
