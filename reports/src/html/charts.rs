//! The page's charts, drawn as inline SVG: requests over time, latency percentiles, retry
//! delays per attempt. Each is written by one `write_` function from the report's figures, on
//! round axes, in colours that follow the kind of outcome.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::escape;
use crate::format;
use crate::model::{AttemptDelays, Latency, Report, Timeline};

/// Width of every chart's coordinate system; the page scales it to the window.
const CHART_W: f64 = 960.0;
/// Most bars the timeline draws; beyond, adjacent windows are merged so each bar stays visible.
const MAX_BARS: usize = 480;
/// Most dots drawn per attempt in the retry-delay chart; beyond, an even sample is drawn.
const MAX_DOTS: usize = 1_500;

/// A y-axis with round tick values: the step is 1, 2 or 5 times a power of ten.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Axis {
    step: f64,
    top: f64,
}

impl Axis {
    fn new(max: f64, ticks: usize, integer: bool) -> Axis {
        if !max.is_finite() || max <= 0.0 {
            return Axis {
                step: 1.0,
                top: 1.0,
            };
        }
        let raw = max / ticks.max(1) as f64;
        let mag = 10f64.powf(raw.log10().floor());
        let norm = raw / mag;
        let mut step = if norm <= 1.0 {
            mag
        } else if norm <= 2.0 {
            2.0 * mag
        } else if norm <= 5.0 {
            5.0 * mag
        } else {
            10.0 * mag
        };
        if integer && step < 1.0 {
            step = 1.0;
        }
        let top = (max / step).ceil() * step;
        Axis { step, top }
    }

    fn ticks(self) -> impl Iterator<Item = f64> {
        let n = (self.top / self.step).round() as usize;
        (0..=n).map(move |i| i as f64 * self.step)
    }
}

/// A tick value without float noise: `0.1`, not `0.30000000000000004`.
fn tick_label(v: f64) -> String {
    if v.abs() >= 1.0 && (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else {
        format::seconds(v)
    }
}

/// A coordinate with one decimal: enough for a screen, and it keeps the file small.
fn n(v: f64) -> String {
    if v.is_finite() {
        format!("{v:.1}")
    } else {
        "0".to_string()
    }
}

fn no_data(out: &mut String, id: &str, text: &str) -> std::fmt::Result {
    writeln!(out, "<p class=\"no-data\" id=\"{id}-empty\">{text}</p>")
}

fn legend(out: &mut String, items: &[(String, &str)]) -> std::fmt::Result {
    writeln!(out, "<ul class=\"legend\">")?;
    for (label, color) in items {
        writeln!(
            out,
            "<li><span class=\"swatch\" style=\"background:{color}\"></span>{}</li>",
            escape(label)
        )?;
    }
    writeln!(out, "</ul>")
}

/// Series order from the bottom of a stack up: successes at the base, failures on top, so a wave of
/// 5xx or of transport errors sits where the eye lands first.
fn label_rank(label: &str) -> u8 {
    if label.starts_with("fault:") {
        4
    } else if label.starts_with("error:") {
        5
    } else {
        match label.as_bytes().first() {
            Some(b'2') => 0,
            Some(b'3') => 1,
            Some(b'4') => 2,
            Some(b'5') => 3,
            _ => 6,
        }
    }
}

/// Shades per kind of outcome: green for 2xx, amber for 4xx, red for 5xx, purple for injected faults,
/// grey and brown for transport errors, so the kind reads before the legend does.
fn palette(rank: u8) -> &'static [&'static str] {
    match rank {
        0 => &["#2e9e4f", "#7cc68a", "#1b6b34", "#b5e0b9"],
        1 => &["#3b7dd8", "#8db4ea", "#1f4f94"],
        2 => &["#f0a020", "#c7741a", "#f6c86e", "#8f5410"],
        3 => &["#d62728", "#8f1414", "#f07f80", "#b0413e"],
        4 => &["#8e44ad", "#c39bd3", "#5b2c6f", "#a569bd"],
        5 => &["#4d4d4d", "#9c7a4a", "#a6a6a6", "#262626"],
        _ => &["#17a2b8", "#0e6e7d", "#7fd3df"],
    }
}

/// Colour for each series label, stable for a given set of labels.
fn series_colors(labels: &[&str]) -> BTreeMap<String, &'static str> {
    let mut used: BTreeMap<u8, usize> = BTreeMap::new();
    let mut out = BTreeMap::new();
    for label in labels {
        let rank = label_rank(label);
        let i = used.entry(rank).or_insert(0);
        let colors = palette(rank);
        out.insert((*label).to_string(), colors[*i % colors.len()]);
        *i += 1;
    }
    out
}

/// The figures Exercise 1 compares jitter strategies by, read off the raw windows.
struct TimelineStats {
    peak: u64,
    peak_start_s: f64,
    active_windows: usize,
    last_active_end_s: Option<f64>,
}

fn timeline_stats(totals: &[u64], window_s: f64) -> TimelineStats {
    let mut peak = 0;
    let mut peak_at = 0;
    for (i, t) in totals.iter().enumerate() {
        if *t > peak {
            peak = *t;
            peak_at = i;
        }
    }
    let last = totals.iter().rposition(|t| *t > 0);
    TimelineStats {
        peak,
        peak_start_s: peak_at as f64 * window_s,
        active_windows: totals.iter().filter(|t| **t > 0).count(),
        last_active_end_s: last.map(|i| (i + 1) as f64 * window_s),
    }
}

pub(super) fn write_timeline(t: Option<&Timeline>, out: &mut String) -> std::fmt::Result {
    const ID: &str = "chart-timeline";
    let Some(t) = t else {
        return no_data(
            out,
            ID,
            "No timeline in this report: no requests were recorded over time.",
        );
    };
    let len = t.series.iter().map(|s| s.counts.len()).max().unwrap_or(0);
    let mut totals = vec![0u64; len];
    for s in &t.series {
        for (i, c) in s.counts.iter().enumerate() {
            totals[i] += c;
        }
    }
    let window_ok = t.window_ms.is_finite() && t.window_ms > 0.0;
    if len == 0 || totals.iter().all(|c| *c == 0) || !window_ok {
        return no_data(out, ID, "No requests in any time window.");
    }

    let window_s = t.window_ms / 1_000.0;
    let merge = len.div_ceil(MAX_BARS);
    let bars = len.div_ceil(merge);
    let bar_s = window_s * merge as f64;

    let mut series: Vec<_> = t.series.iter().collect();
    series.sort_by(|a, b| {
        label_rank(&a.label)
            .cmp(&label_rank(&b.label))
            .then_with(|| a.label.cmp(&b.label))
    });
    let labels: Vec<&str> = series.iter().map(|s| s.label.as_str()).collect();
    let colors = series_colors(&labels);

    let merged = |counts: &[u64], bar: usize| -> u64 {
        counts
            .iter()
            .skip(bar * merge)
            .take(merge)
            .copied()
            .sum::<u64>()
    };
    let bar_totals: Vec<u64> = (0..bars).map(|b| merged(&totals, b)).collect();
    let max_total = bar_totals.iter().copied().max().unwrap_or(0);

    let (left, right, top, bottom, height) = (60.0, 16.0, 14.0, 44.0, 320.0);
    let plot_w = CHART_W - left - right;
    let plot_h = height - top - bottom;
    let y_axis = Axis::new(max_total as f64, 5, true);
    let y = |v: f64| top + plot_h - plot_h * v / y_axis.top;
    let bw = plot_w / bars as f64;
    let gap = if bw > 4.0 { 1.0 } else { 0.0 };
    let window_label = format::duration_ms((bar_s * 1_000.0).round() as u64);

    writeln!(
        out,
        "<svg id=\"{ID}\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"Requests per {window_label} window, stacked by outcome\">",
        n(CHART_W),
        n(height)
    )?;
    for v in y_axis.ticks() {
        writeln!(
            out,
            "<line class=\"grid\" x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\"/><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            n(left),
            n(left + plot_w),
            n(y(v)),
            n(y(v)),
            n(left - 6.0),
            n(y(v) + 4.0),
            tick_label(v)
        )?;
    }
    for b in 0..bars {
        let x = left + b as f64 * bw;
        let mut stacked = 0u64;
        for s in &series {
            let c = merged(&s.counts, b);
            if c == 0 {
                continue;
            }
            let y_top = y((stacked + c) as f64);
            let y_bottom = y(stacked as f64);
            stacked += c;
            let color = colors.get(&s.label).copied().unwrap_or("#888888");
            writeln!(
                out,
                "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{color}\"><title>{}–{} s · {}: {c}</title></rect>",
                n(x),
                n(y_top),
                n((bw - gap).max(0.5)),
                n((y_bottom - y_top).max(0.5)),
                format::seconds(b as f64 * bar_s),
                format::seconds((b + 1) as f64 * bar_s),
                escape(&s.label)
            )?;
        }
    }
    let total_s = bars as f64 * bar_s;
    let x_axis = Axis::new(total_s, 10, false);
    for v in x_axis.ticks().take_while(|v| *v <= total_s + 1e-9) {
        let x = left + plot_w * v / total_s;
        writeln!(
            out,
            "<line class=\"axis\" x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\"/><text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            n(x),
            n(x),
            n(top + plot_h),
            n(top + plot_h + 5.0),
            n(x),
            n(top + plot_h + 18.0),
            tick_label(v)
        )?;
    }
    writeln!(
        out,
        "<line class=\"axis\" x1=\"{l}\" x2=\"{l}\" y1=\"{t}\" y2=\"{b}\"/><line class=\"axis\" x1=\"{l}\" x2=\"{r}\" y1=\"{b}\" y2=\"{b}\"/>",
        l = n(left),
        r = n(left + plot_w),
        t = n(top),
        b = n(top + plot_h)
    )?;
    writeln!(
        out,
        "<text class=\"title\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">time since start (s)</text>",
        n(left + plot_w / 2.0),
        n(height - 6.0)
    )?;
    writeln!(
        out,
        "<text class=\"title\" transform=\"translate(14 {}) rotate(-90)\" text-anchor=\"middle\">requests per {window_label}</text>",
        n(top + plot_h / 2.0)
    )?;
    writeln!(out, "</svg>")?;

    let items: Vec<(String, &str)> = series
        .iter()
        .map(|s| {
            let total: u64 = s.counts.iter().sum();
            // The fault server's names for what it did; the client's error kinds name the same
            // event as it saw it.
            let label = match s.label.as_str() {
                "dropped" => "dropped (no answer: the client's closed)".to_string(),
                "reset" => "reset (the client's reset)".to_string(),
                other => other.to_string(),
            };
            (
                format!("{label} ({total})"),
                colors.get(&s.label).copied().unwrap_or("#888888"),
            )
        })
        .collect();
    legend(out, &items)?;

    let st = timeline_stats(&totals, window_s);
    let raw_window = format::duration_ms(t.window_ms.round() as u64);
    let mut stats = format!(
        "Peak {} requests in one {raw_window} window ({} req/s) at {} s · load in {} of {len} windows ({} s)",
        st.peak,
        format::rate(st.peak as f64 / window_s),
        format::seconds(st.peak_start_s),
        st.active_windows,
        format::seconds(st.active_windows as f64 * window_s)
    );
    if let Some(end) = st.last_active_end_s {
        stats.push_str(&format!(
            " · last request before {} s",
            format::seconds(end)
        ));
    }
    if merge > 1 {
        stats.push_str(&format!(
            " · bars merge {merge} windows each to fit the chart"
        ));
    }
    writeln!(out, "<p class=\"stats\">{}</p>", escape(&stats))?;
    writeln!(
        out,
        "<p class=\"note\">How to read it: tall waves at regular, widening intervals with nothing between them are clients coming back at the same moment — retries without jitter, or every client waiting the same Retry-After. The <code>jitter</code> and <code>retry_after</code> checks above say which.</p>"
    )
}

/// Shades for p50 → max: darker is further into the tail; max in grey, as it is a single sample.
const PERCENTILE_COLORS: [&str; 5] = ["#9ecae1", "#6baed6", "#3182bd", "#08519c", "#6b6b6b"];

pub(super) fn write_latency(r: &Report, out: &mut String) -> std::fmt::Result {
    const ID: &str = "chart-latency";
    let mut groups: Vec<(String, &Latency)> = vec![("all requests".to_string(), &r.latency_ms)];
    for p in &r.phases {
        groups.push((p.name.clone(), &p.latency_ms));
        if let Some(intended) = &p.latency_intended_ms {
            groups.push((format!("{} (from its scheduled time)", p.name), intended));
        }
    }
    groups.retain(|(_, l)| !format::latency_is_empty(l));
    if groups.is_empty() {
        return no_data(out, ID, "No latency figures: no request completed.");
    }

    let max = groups
        .iter()
        .flat_map(|(_, l)| format::percentiles(l).map(|(_, v)| v))
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max);
    let (left, right, top, bottom, height) = (64.0, 16.0, 18.0, 48.0, 300.0);
    let plot_w = CHART_W - left - right;
    let plot_h = height - top - bottom;
    let axis = Axis::new(max, 5, false);
    let y = |v: f64| top + plot_h - plot_h * v.clamp(0.0, axis.top) / axis.top;
    let group_w = plot_w / groups.len() as f64;
    let bw = (group_w * 0.8 / 5.0).min(56.0);

    writeln!(
        out,
        "<svg id=\"{ID}\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"Latency percentiles in milliseconds\">",
        n(CHART_W),
        n(height)
    )?;
    for v in axis.ticks() {
        writeln!(
            out,
            "<line class=\"grid\" x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\"/><text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>",
            n(left),
            n(left + plot_w),
            n(y(v)),
            n(y(v)),
            n(left - 6.0),
            n(y(v) + 4.0),
            tick_label(v)
        )?;
    }
    for (g, (name, l)) in groups.iter().enumerate() {
        let x0 = left + g as f64 * group_w + (group_w - 5.0 * bw) / 2.0;
        for (i, (pname, v)) in format::percentiles(l).iter().enumerate() {
            let v = if v.is_finite() { v.max(0.0) } else { 0.0 };
            let x = x0 + i as f64 * bw;
            let y_top = y(v);
            writeln!(
                out,
                "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"><title>{}: {pname} {} ms</title></rect>",
                n(x + 1.0),
                n(y_top),
                n((bw - 2.0).max(0.5)),
                n((top + plot_h - y_top).max(0.5)),
                PERCENTILE_COLORS[i],
                escape(name),
                format::ms(v)
            )?;
            if bw >= 22.0 {
                writeln!(
                    out,
                    "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
                    n(x + bw / 2.0),
                    n(y_top - 4.0),
                    format::ms(v)
                )?;
            }
        }
        // Long phase names are cut so neighbouring group labels do not overlap.
        let max_chars = ((group_w / 6.5) as usize).max(4);
        let mut label: String = name.chars().take(max_chars).collect();
        if name.chars().count() > max_chars {
            label.pop();
            label.push('…');
        }
        writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            n(left + (g as f64 + 0.5) * group_w),
            n(top + plot_h + 18.0),
            escape(&label)
        )?;
    }
    writeln!(
        out,
        "<line class=\"axis\" x1=\"{l}\" x2=\"{l}\" y1=\"{t}\" y2=\"{b}\"/><line class=\"axis\" x1=\"{l}\" x2=\"{r}\" y1=\"{b}\" y2=\"{b}\"/>",
        l = n(left),
        r = n(left + plot_w),
        t = n(top),
        b = n(top + plot_h)
    )?;
    writeln!(
        out,
        "<text class=\"title\" transform=\"translate(14 {}) rotate(-90)\" text-anchor=\"middle\">milliseconds</text>",
        n(top + plot_h / 2.0)
    )?;
    writeln!(out, "</svg>")?;
    let items: Vec<(String, &str)> = format::percentiles(&r.latency_ms)
        .iter()
        .zip(PERCENTILE_COLORS)
        .map(|((name, _), c)| (name.to_string(), c))
        .collect();
    legend(out, &items)
}

/// Colours per attempt row, so neighbouring rows are told apart at a glance.
const ATTEMPT_COLORS: [&str; 6] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#d62728", "#8c564b",
];

/// A deterministic vertical offset in [-0.5, 0.5) per dot: the same report always draws the same
/// picture, and dots with equal delays still spread enough to show how many there are.
fn spread(i: usize) -> f64 {
    let h = (i as u64)
        .wrapping_add(0x9E37_79B9_7F4A_7C15)
        .wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let h = (h ^ (h >> 31)).wrapping_mul(0x94D0_49BB_1331_11EB);
    ((h >> 11) as f64 / (1u64 << 53) as f64) - 0.5
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

pub(super) fn write_retry_delays(delays: &[AttemptDelays], out: &mut String) -> std::fmt::Result {
    const ID: &str = "chart-retry-delays";
    // Per attempt: the delays listed (every one, or one per percentile), how many retries there
    // were, and the exact shortest and longest.
    struct Row {
        attempt: u32,
        d: Vec<f64>,
        count: u64,
        per_percentile: bool,
        lo: f64,
        hi: f64,
    }
    let mut rows: Vec<Row> = delays
        .iter()
        .filter_map(|a| {
            let mut d: Vec<f64> = a
                .delays_ms
                .iter()
                .copied()
                .filter(|v| v.is_finite() && *v >= 0.0)
                .collect();
            d.sort_by(f64::total_cmp);
            let (lo, hi) = a
                .range_ms()
                .filter(|(lo, hi)| lo.is_finite() && hi.is_finite())?;
            (!d.is_empty()).then(|| Row {
                attempt: a.attempt,
                count: a.count().max(d.len() as u64),
                per_percentile: !a.lists_every_delay(),
                d,
                lo,
                hi,
            })
        })
        .collect();
    rows.sort_by_key(|r| r.attempt);
    if rows.is_empty() {
        return no_data(
            out,
            ID,
            "No retries were observed, so there are no retry delays to show.",
        );
    }

    let max = rows.iter().map(|r| r.hi).fold(0.0, f64::max);
    let (left, right, top, bottom, row_h) = (86.0, 230.0, 10.0, 44.0, 46.0);
    let plot_w = CHART_W - left - right;
    let height = top + rows.len() as f64 * row_h + bottom;
    let axis = Axis::new(max, 8, false);
    let x = |v: f64| left + plot_w * v / axis.top;
    let plot_bottom = top + rows.len() as f64 * row_h;

    writeln!(
        out,
        "<svg id=\"{ID}\" class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 {} {}\" role=\"img\" aria-label=\"Retry delay of every retry, one row per attempt\">",
        n(CHART_W),
        n(height)
    )?;
    for v in axis.ticks() {
        writeln!(
            out,
            "<line class=\"grid\" x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\"/><text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            n(x(v)),
            n(x(v)),
            n(top),
            n(plot_bottom),
            n(x(v)),
            n(plot_bottom + 16.0),
            tick_label(v)
        )?;
    }
    for (row, r) in rows.iter().enumerate() {
        let (attempt, d, lo, hi) = (r.attempt, &r.d, r.lo, r.hi);
        let mid = top + (row as f64 + 0.5) * row_h;
        let color = ATTEMPT_COLORS[row % ATTEMPT_COLORS.len()];
        writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">attempt {attempt}</text>",
            n(left - 8.0),
            n(mid + 4.0)
        )?;
        writeln!(
            out,
            "<line x1=\"{}\" x2=\"{}\" y1=\"{m}\" y2=\"{m}\" stroke=\"{color}\" stroke-opacity=\"0.35\" stroke-width=\"2\"/>",
            n(x(lo)),
            n(x(hi)),
            m = n(mid)
        )?;
        let stride = d.len().div_ceil(MAX_DOTS);
        for (i, v) in d.iter().enumerate().step_by(stride) {
            writeln!(
                out,
                "<circle cx=\"{}\" cy=\"{}\" r=\"3\" fill=\"{color}\" fill-opacity=\"0.5\"/>",
                n(x(*v)),
                n(mid + spread(i) * row_h * 0.6)
            )?;
        }
        let median = quantile(d, 0.5);
        writeln!(
            out,
            "<line x1=\"{mx}\" x2=\"{mx}\" y1=\"{}\" y2=\"{}\" stroke=\"#1d2329\" stroke-width=\"2\"><title>attempt {attempt}: median {} ms</title></line>",
            n(mid - row_h * 0.4),
            n(mid + row_h * 0.4),
            format::ms(median),
            mx = n(x(median))
        )?;
        // Width relative to the longest delay: about 100% for full jitter, 50% for equal jitter,
        // 0% for none, whatever the backoff.
        let spread_pct = if hi > 0.0 {
            (hi - lo) * 100.0 / hi
        } else {
            0.0
        };
        let note = if r.count > 1 && hi == lo {
            "all equal: no jitter".to_string()
        } else {
            format!("spread {spread_pct:.0}% of max")
        };
        let shown = if r.per_percentile {
            format!(" ({} drawn, one per percentile)", d.len().div_ceil(stride))
        } else if stride > 1 {
            format!(" (1 in {stride} drawn)")
        } else {
            String::new()
        };
        writeln!(
            out,
            "<text x=\"{x}\" y=\"{}\">n={}{shown} · {}–{} ms</text><text x=\"{x}\" y=\"{}\">{note}</text>",
            n(mid - 3.0),
            r.count,
            format::ms(lo),
            format::ms(hi),
            n(mid + 11.0),
            x = n(left + plot_w + 12.0)
        )?;
    }
    writeln!(
        out,
        "<line class=\"axis\" x1=\"{l}\" x2=\"{r}\" y1=\"{b}\" y2=\"{b}\"/>",
        l = n(left),
        r = n(left + plot_w),
        b = n(plot_bottom)
    )?;
    writeln!(
        out,
        "<text class=\"title\" x=\"{}\" y=\"{}\" text-anchor=\"middle\">delay before the attempt (ms)</text>",
        n(left + plot_w / 2.0),
        n(height - 6.0)
    )?;
    writeln!(out, "</svg>")?;
    writeln!(
        out,
        "<p class=\"note\">One dot per retry (beyond 101 retries, one per percentile); the dark tick is the median. Without jitter every dot of a row sits on one spot; with full jitter they spread from zero to the backoff.</p>"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axis_steps_are_round() {
        assert_eq!(
            Axis::new(500.0, 5, true),
            Axis {
                step: 100.0,
                top: 500.0
            }
        );
        assert_eq!(
            Axis::new(31.0, 10, false),
            Axis {
                step: 5.0,
                top: 35.0
            }
        );
        assert_eq!(Axis::new(3.0, 5, true).step, 1.0);
        assert_eq!(Axis::new(0.0, 5, true).top, 1.0);
        assert_eq!(Axis::new(f64::NAN, 5, true).top, 1.0);
    }

    #[test]
    fn labels_stack_successes_below_failures() {
        let mut labels = vec!["error:timeout", "503", "fault:drop", "201", "429"];
        labels.sort_by_key(|l| label_rank(l));
        assert_eq!(labels, ["201", "429", "503", "fault:drop", "error:timeout"]);
    }

    #[test]
    fn colors_follow_the_kind_of_outcome() {
        let c = series_colors(&["200", "201", "503"]);
        assert_eq!(c["200"], palette(0)[0]);
        assert_eq!(c["201"], palette(0)[1]);
        assert_eq!(c["503"], palette(3)[0]);
    }

    #[test]
    fn stats_find_peak_and_quiet_windows() {
        let st = timeline_stats(&[0, 0, 0, 0, 500, 0, 0, 0, 0, 0, 0, 0, 480, 0], 0.25);
        assert_eq!(st.peak, 500);
        assert_eq!(st.peak_start_s, 1.0);
        assert_eq!(st.active_windows, 2);
        assert_eq!(st.last_active_end_s, Some(3.25));
    }

    #[test]
    fn spread_stays_in_its_band() {
        assert!((0..10_000).map(spread).all(|s| (-0.5..0.5).contains(&s)));
    }
}
