//! `report.html`: self-contained, escaped, and with charts that show what the data says.

mod common;

use reports::html::escape;
use reports::model::{Series, Timeline};
use reports::to_html;

/// The markup of the chart `<svg>` with this id.
fn svg<'a>(html: &'a str, id: &str) -> &'a str {
    let start = html
        .find(&format!("<svg id=\"{id}\""))
        .unwrap_or_else(|| panic!("no svg #{id}"));
    let end = html[start..].find("</svg>").unwrap() + start;
    &html[start..end]
}

/// The `<title>` texts of a chart's marks, which say what each mark stands for.
fn titles(svg: &str) -> Vec<&str> {
    svg.split("<title>")
        .skip(1)
        .filter_map(|s| s.split("</title>").next())
        .collect()
}

#[test]
fn is_self_contained() {
    let html = to_html(&common::sample());
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.trim_end().ends_with("</html>"));
    for forbidden in [
        "<script",
        "<link",
        "src=",
        "href=",
        "url(",
        "@import",
        "@font-face",
    ] {
        assert!(!html.contains(forbidden), "found {forbidden}");
    }
    assert!(html.contains("Content-Security-Policy"));
    assert!(html.contains("default-src 'none'"));
    assert!(html.contains("<style>"));
}

#[test]
fn has_the_three_charts_and_the_checks() {
    let html = to_html(&common::sample());
    for id in ["chart-timeline", "chart-latency", "chart-retry-delays"] {
        let s = svg(&html, id);
        assert!(s.contains("class=\"chart\""), "{id}");
        assert!(s.contains("viewBox="), "{id}");
    }
    assert!(svg(&html, "chart-timeline").contains("<rect"));
    assert!(svg(&html, "chart-latency").contains("<rect"));
    assert!(svg(&html, "chart-retry-delays").contains("<circle"));
    assert!(html.contains("<h1>FAILED: thundering-herd-no-jitter</h1>"));
    assert!(html.contains("<span class=\"badge fail\">fail</span>"));
    assert!(html.contains("<span class=\"badge weak\">weak</span>"));
    assert!(html.contains("attempt 2: 500 retries, every delay exactly 1000 ms"));
    assert!(html.contains("key <code>order-7f3a</code>"));
    assert!(html.contains("spread_ratio = <b>0</b>"));
    assert!(html.contains("started 2025-11-30 08:59:00 UTC"));
}

#[test]
fn timeline_shows_the_sawtooth_of_missing_jitter() {
    let html = to_html(&common::sample());
    let chart = svg(&html, "chart-timeline");
    let marks = titles(chart);
    // Four series in each of the five waves, nothing anywhere else.
    assert_eq!(chart.matches("<rect").count(), 20, "{chart}");
    assert_eq!(marks.len(), 20);
    for wave_start in ["1", "3", "7", "15", "31"] {
        let prefix = format!(
            "{wave_start}–{} s · 503: 440",
            reports_seconds(wave_start.parse::<f64>().unwrap() + 0.25)
        );
        assert!(
            marks.contains(&prefix.as_str()),
            "no wave at {wave_start} s: {marks:?}"
        );
    }
    // Every wave is as tall as the first one: the signature in the seed lesson.
    let heights: Vec<f64> = chart
        .split("<rect ")
        .skip(1)
        .filter(|r| r.contains("· 503:"))
        .map(|r| attr(r, "height"))
        .collect();
    assert_eq!(heights.len(), 5);
    assert!(
        heights.iter().all(|h| (h - heights[0]).abs() < 0.05),
        "{heights:?}"
    );
    assert!(html.contains("Peak 500 requests in one 250 ms window (2000 req/s) at 1 s"));
    assert!(html.contains("load in 5 of 128 windows (1.25 s)"));
    assert!(html.contains("last request before 31.25 s"));
    // Successes at the base of each stack, failures above them.
    let wave = &marks[..4];
    assert!(
        wave[0].contains("201") && wave[1].contains("503"),
        "{wave:?}"
    );
    assert!(
        wave[2].contains("fault:drop") && wave[3].contains("error:timeout"),
        "{wave:?}"
    );
    // A legend names every series with its total.
    for entry in [
        "201 (250)",
        "503 (2200)",
        "fault:drop (30)",
        "error:timeout (20)",
    ] {
        assert!(html.contains(entry), "legend lacks {entry}");
    }
}

fn reports_seconds(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

fn attr(tag: &str, name: &str) -> f64 {
    let start = tag.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
    let end = tag[start..].find('"').unwrap() + start;
    tag[start..end].parse().unwrap()
}

#[test]
fn long_timelines_merge_windows_but_keep_every_request() {
    let mut r = common::sample();
    let counts: Vec<u64> = (0..5_000)
        .map(|i| if i % 100 == 0 { 50 } else { 1 })
        .collect();
    let total: u64 = counts.iter().sum();
    r.timeline = Some(Timeline {
        window_ms: 100.0,
        series: vec![Series {
            label: "200".into(),
            counts,
        }],
    });
    let html = to_html(&r);
    let chart = svg(&html, "chart-timeline");
    let bars = chart.matches("<rect").count();
    assert!((400..=480).contains(&bars), "{bars} bars");
    let drawn: u64 = titles(chart)
        .iter()
        .map(|t| t.rsplit(": ").next().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(drawn, total);
    assert!(html.contains("bars merge 11 windows each"));
}

#[test]
fn latency_chart_has_overall_and_per_phase_bars() {
    let html = to_html(&common::sample());
    let chart = svg(&html, "chart-latency");
    // all requests, incident, retry-storm, retry-storm from intended start: five bars each.
    assert_eq!(chart.matches("<rect").count(), 20);
    let marks = titles(chart);
    assert!(marks.contains(&"all requests: p99 1520 ms"), "{marks:?}");
    assert!(marks.contains(&"incident: p50 1.90 ms"), "{marks:?}");
    assert!(
        marks.contains(&"retry-storm (from its scheduled time): max 3100 ms"),
        "{marks:?}"
    );
    assert!(!chart.contains("NaN"));
}

#[test]
fn retry_delay_chart_tells_jitter_from_none() {
    let html = to_html(&common::sample());
    let chart = svg(&html, "chart-retry-delays");
    assert_eq!(chart.matches("<circle").count(), 2_500);
    for attempt in 2..=6 {
        assert!(chart.contains(&format!(">attempt {attempt}</text>")));
    }
    assert_eq!(chart.matches("all equal: no jitter").count(), 5);

    let jittered = to_html(&common::passing_sample());
    let chart = svg(&jittered, "chart-retry-delays");
    assert!(!chart.contains("no jitter"));
    assert!(chart.contains("spread 100% of max"), "{chart}");
    // With full jitter the dots of a row land on many different x positions.
    let xs: std::collections::BTreeSet<&str> = chart
        .split("<circle cx=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .collect();
    assert!(xs.len() > 400, "{} distinct positions", xs.len());
}

#[test]
fn retry_delay_chart_of_many_retries_draws_one_dot_per_percentile() {
    // 5,000 retries before attempt 2, as a report carries them: the count, the exact extremes,
    // and the delay at each percentile.
    let mut r = common::sample();
    r.retry_delays = vec![reports::model::AttemptDelays {
        attempt: 2,
        delays_ms: (0..=100).map(|p| 10.0 * f64::from(p)).collect(),
        count: Some(5_000),
        min_ms: Some(0.25),
        max_ms: Some(1_000.0),
    }];
    let html = to_html(&r);
    let chart = svg(&html, "chart-retry-delays");
    assert_eq!(
        chart.matches("<circle").count(),
        reports::model::DELAY_POINTS
    );
    assert!(
        chart.contains("n=5000 (101 drawn, one per percentile)"),
        "{chart}"
    );
    assert!(chart.contains("0.25"), "the exact shortest delay: {chart}");
    assert!(chart.contains("median 500"), "{chart}");
}

#[test]
fn empty_data_gives_a_note_not_a_broken_chart() {
    let html = to_html(&common::empty());
    assert!(!html.contains("<svg"), "no chart should be drawn");
    assert!(html.contains("id=\"chart-timeline-empty\""));
    assert!(html.contains("id=\"chart-latency-empty\""));
    assert!(html.contains("id=\"chart-retry-delays-empty\""));
    assert!(html.contains("No checks ran."));

    let mut r = common::empty();
    r.timeline = Some(Timeline {
        window_ms: 250.0,
        series: vec![Series {
            label: "200".into(),
            counts: vec![0; 10],
        }],
    });
    let html = to_html(&r);
    assert!(html.contains("No requests in any time window."));
}

#[test]
fn non_finite_figures_do_not_break_the_svg() {
    let mut r = common::sample();
    r.latency_ms.p999 = f64::NAN;
    r.latency_ms.max = f64::INFINITY;
    r.retry_delays[0].delays_ms.push(f64::NAN);
    let html = to_html(&r);
    for id in ["chart-timeline", "chart-latency", "chart-retry-delays"] {
        let s = svg(&html, id);
        assert!(!s.contains("NaN") && !s.contains("inf"), "{id}");
    }
}

#[test]
fn model_text_is_escaped() {
    let r = common::hostile();
    let html = to_html(&r);
    for raw in [
        "<script>",
        "<img src=x",
        "</td></tr><script>",
        "<i>metric</i>",
        "<svg onload",
        "<iframe",
        "<b>bold</b>",
        "key'\"<>&",
        "echo <x>",
    ] {
        assert!(!html.contains(raw), "unescaped {raw}");
    }
    assert!(html.contains("&lt;script&gt;alert(&#39;scenario&#39;)&lt;/script&gt;"));
    assert!(html.contains("a | b &lt;b&gt;bold&lt;/b&gt; &amp; &quot;quoted&quot;"));
    assert!(html.contains("key <code>key&#39;&quot;&lt;&gt;&amp;</code>"));
    assert!(html.contains("&lt;script&gt;503&lt;/script&gt;"));
    assert_eq!(escape("<a href='x'>&"), "&lt;a href=&#39;x&#39;&gt;&amp;");
    assert_eq!(
        escape("\u{1b}]0;t\u{7}\u{202e}x\ny"),
        "\\u{1b}]0;t\\u{7}\\u{202e}x\ny"
    );
}

#[test]
fn counts_tcp_connections_beside_the_requests() {
    let out = to_html(&common::with_connections());
    assert!(out.contains("TCP connections"));
    assert!(out.contains("closed 5, timed_out 2"));
    assert!(!out.contains("<b>pg</b>"), "a proxy's name is escaped");
}

#[test]
fn counts_protocol_statements_beside_the_requests() {
    let out = to_html(&common::with_statements());
    assert!(out.contains("Statements and commands"));
    assert!(out.contains("drop 2, error 3"), "{out}");
    assert!(out.contains("LOADING 4"), "{out}");
    assert!(!out.contains("<b>db</b>"), "a proxy's name is escaped");
    assert!(!to_html(&common::sample()).contains("Statements and commands"));
}
