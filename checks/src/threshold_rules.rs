//! Threshold rules such as `p99 < 200ms`, `error_rate < 1%`, `throughput > 500/s`.
//!
//! Why a small language: a scenario states its service-level expectations in the terms people
//! already use (k6's thresholds), and a CI gate fails on them. Rules are parsed once, when the
//! configuration is read, so a typo is reported with its column and what was expected, before any
//! load is sent.
//!
//! Grammar: `METRIC OP VALUE[UNIT]`, spaces optional.
//! - METRIC: `p50`, `p99`, `p99.9`, `p(95)`; `p999` reads as p99.9 and `p9999` as p99.99 (a
//!   number above 100 gets its decimal point after two digits); `avg` (or `mean`), `med`, `min`,
//!   `max` — all latencies; `error_rate`, `request_failure_rate`, `transport_error_rate`;
//!   `throughput`.
//! - OP: `<`, `<=`, `>`, `>=`.
//! - UNIT: for latencies `us` (or `µs`), `ms`, `s`, or none for milliseconds (as k6); for the
//!   rates `%`, or none for a fraction (`0.01`); for `throughput` `/s` (or `rps`), `/min`, or none
//!   for per second.
//!
//! The three rates count different things, and each keeps its one meaning everywhere a report
//! shows it:
//! - `error_rate`: **operation failures** — operations (what a caller asked for once, whatever
//!   its retries) that failed after their retries (no answer, a 5xx, a failing gRPC status, or a
//!   fallback), over operations;
//! - `request_failure_rate`: **request failures** — attempts (retries included) answered with a
//!   5xx or a failing gRPC status, or not answered at all, over attempts sent;
//! - `transport_error_rate`: **transport errors** — attempts that got no answer at all
//!   (connect, timeout, reset, closed, malformed), over attempts sent.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// What a rule measures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Metric {
    /// A latency percentile in (0, 100].
    Percentile(f64),
    /// Mean latency.
    Mean,
    /// Median latency.
    Median,
    /// Smallest latency.
    Min,
    /// Largest latency.
    Max,
    /// Operation failures: operations that failed after their retries, over operations, as a
    /// fraction.
    ErrorRate,
    /// Request failures: attempts answered with a 5xx (or a failing gRPC status) or not at all,
    /// over attempts sent, as a fraction.
    RequestFailureRate,
    /// Transport errors: attempts that got no answer at all, over attempts sent, as a fraction.
    TransportErrorRate,
    /// Requests per second.
    Throughput,
}

impl Metric {
    /// True for the latency metrics (values in milliseconds).
    pub fn is_latency(self) -> bool {
        !self.is_rate() && self != Metric::Throughput
    }

    /// True for the three failure rates (values as fractions).
    pub fn is_rate(self) -> bool {
        matches!(
            self,
            Metric::ErrorRate | Metric::RequestFailureRate | Metric::TransportErrorRate
        )
    }

    /// The metric's name in a rule, for a rate or throughput; `None` for a latency.
    pub fn name(self) -> Option<&'static str> {
        match self {
            Metric::ErrorRate => Some("error_rate"),
            Metric::RequestFailureRate => Some("request_failure_rate"),
            Metric::TransportErrorRate => Some("transport_error_rate"),
            Metric::Throughput => Some("throughput"),
            _ => None,
        }
    }
}

/// A comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
}

impl Op {
    fn as_str(self) -> &'static str {
        match self {
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        }
    }
}

/// One parsed threshold rule; its limit is in ms, a fraction, or per second.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct Rule {
    /// The rule as written.
    pub text: String,
    /// What it measures.
    pub metric: Metric,
    /// How the measurement compares to the limit.
    pub op: Op,
    /// The limit: ms for latencies, a fraction for the error rate, per second for throughput.
    pub limit: f64,
}

/// A rule that does not parse: where, and what was expected there.
#[derive(Debug, Clone, PartialEq, Error)]
#[error("threshold {rule:?}: column {column}: expected {expected}, found {found}")]
pub struct RuleError {
    /// The rule as written.
    pub rule: String,
    /// 1-based column (in characters) of the problem.
    pub column: usize,
    /// What the parser expected there.
    pub expected: String,
    /// What it found (quoted), or `end of rule`.
    pub found: String,
}

struct Parser<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Parser<'a> {
    fn rest(&self) -> &'a str {
        self.text.get(self.pos..).unwrap_or("")
    }

    fn skip_spaces(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start().len();
    }

    fn error(&self, expected: &str, found_len: usize) -> RuleError {
        let rest = self.rest();
        let found: String = rest.chars().take(found_len.max(1)).collect();
        RuleError {
            rule: self.text.to_string(),
            column: self.text.get(..self.pos).map_or(0, |s| s.chars().count()) + 1,
            expected: expected.to_string(),
            found: if rest.is_empty() {
                "end of rule".to_string()
            } else {
                format!("{found:?}")
            },
        }
    }

    /// The longest prefix of the rest whose chars satisfy `f`.
    fn take_while(&mut self, f: impl Fn(char) -> bool) -> &'a str {
        let rest = self.rest();
        let end = rest.find(|c| !f(c)).unwrap_or(rest.len());
        self.pos += end;
        rest.get(..end).unwrap_or("")
    }

    fn eat(&mut self, s: &str) -> bool {
        if self.rest().starts_with(s) {
            self.pos += s.len();
            true
        } else {
            false
        }
    }

    fn number(&mut self, expected: &str) -> Result<f64, RuleError> {
        let start = self.pos;
        let digits = self.take_while(|c| c.is_ascii_digit() || c == '.');
        match digits.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(v),
            _ => {
                self.pos = start;
                let len = self.rest().find(char::is_whitespace).unwrap_or(usize::MAX);
                Err(self.error(expected, len))
            }
        }
    }

    fn metric(&mut self) -> Result<Metric, RuleError> {
        const EXPECTED: &str = "a metric (pNN, p(NN), avg, med, min, max, error_rate, \
             request_failure_rate, transport_error_rate or throughput)";
        let start = self.pos;
        let word = self.take_while(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.');
        let metric = match word {
            "avg" | "mean" => Metric::Mean,
            "med" => Metric::Median,
            "min" => Metric::Min,
            "max" => Metric::Max,
            "error_rate" => Metric::ErrorRate,
            "request_failure_rate" => Metric::RequestFailureRate,
            "transport_error_rate" => Metric::TransportErrorRate,
            "throughput" => Metric::Throughput,
            "p" if self.eat("(") => {
                let p = self.number("a percentile between 0 and 100")?;
                if !self.eat(")") {
                    return Err(self.error("`)`", 1));
                }
                percentile(p).ok_or_else(|| {
                    self.pos = start + 2;
                    self.error("a percentile between 0 and 100", 1)
                })?
            }
            w if w.len() > 1 && w.starts_with('p') => {
                let digits = w.get(1..).unwrap_or("");
                let parsed = digits.parse::<f64>().ok().and_then(|p| {
                    if p > 100.0 && !digits.contains('.') {
                        // p999 → 99.9
                        let (a, b) = digits.split_at(2);
                        format!("{a}.{b}").parse().ok().and_then(percentile)
                    } else {
                        percentile(p)
                    }
                });
                match parsed {
                    Some(m) => m,
                    None => {
                        self.pos = start;
                        return Err(self.error(EXPECTED, w.len()));
                    }
                }
            }
            w => {
                self.pos = start;
                return Err(self.error(EXPECTED, w.len()));
            }
        };
        Ok(metric)
    }

    fn op(&mut self) -> Result<Op, RuleError> {
        for (s, op) in [("<=", Op::Le), (">=", Op::Ge), ("<", Op::Lt), (">", Op::Gt)] {
            if self.eat(s) {
                return Ok(op);
            }
        }
        Err(self.error("a comparison (<, <=, > or >=)", 1))
    }

    /// The unit after a value, as a factor to the canonical unit.
    fn unit(&mut self, metric: Metric) -> Result<f64, RuleError> {
        let start = self.pos;
        let unit = self.take_while(|c| !c.is_whitespace());
        let (factor, expected) = if metric.is_latency() {
            let f = match unit {
                "" | "ms" => Some(1.0),
                "us" | "µs" => Some(0.001),
                "s" => Some(1000.0),
                _ => None,
            };
            (f, "a duration unit (us, ms or s)")
        } else if metric.is_rate() {
            let f = match unit {
                "" => Some(1.0),
                "%" => Some(0.01),
                _ => None,
            };
            (f, "`%` or nothing")
        } else {
            let f = match unit {
                "" | "/s" | "rps" => Some(1.0),
                "/min" | "/m" => Some(1.0 / 60.0),
                _ => None,
            };
            (f, "a rate unit (/s or /min)")
        };
        factor.ok_or_else(|| {
            self.pos = start;
            self.error(expected, unit.chars().count())
        })
    }
}

/// The shape of a rule as a regular expression, for the JSON Schema: each metric with the units
/// it takes. The percentile's range (0, 100] is the parser's to check.
pub const RULE_PATTERN: &str = r"^\s*((p[0-9.]+|p\([0-9.]+\)|avg|mean|med|min|max)\s*(<=|>=|<|>)\s*[0-9.]+(us|µs|ms|s)?|(error_rate|request_failure_rate|transport_error_rate)\s*(<=|>=|<|>)\s*[0-9.]+%?|throughput\s*(<=|>=|<|>)\s*[0-9.]+(/s|rps|/min|/m)?)\s*$";

impl schemars::JsonSchema for Rule {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ThresholdRule".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "description": "METRIC OP VALUE[UNIT]: `p99 < 200ms`, `p(99.9) <= 1s`, `avg < 50ms`, `error_rate < 1%` (operations failed after their retries), `request_failure_rate < 5%` (attempts answered 5xx or not at all), `transport_error_rate < 1%` (attempts not answered), `throughput > 500/s`. A latency without a unit is in milliseconds.",
            "type": "string",
            "pattern": RULE_PATTERN
        })
    }
}

fn percentile(p: f64) -> Option<Metric> {
    (p > 0.0 && p <= 100.0).then_some(Metric::Percentile(p))
}

impl Rule {
    /// Parses one rule.
    pub fn parse(text: &str) -> Result<Rule, RuleError> {
        let mut p = Parser { text, pos: 0 };
        p.skip_spaces();
        let metric = p.metric()?;
        p.skip_spaces();
        let op = p.op()?;
        p.skip_spaces();
        let value = p.number("a number")?;
        let factor = p.unit(metric)?;
        p.skip_spaces();
        if !p.rest().is_empty() {
            return Err(p.error("the end of the rule", p.rest().len()));
        }
        Ok(Rule {
            text: text.trim().to_string(),
            metric,
            op,
            limit: value * factor,
        })
    }

    /// True when `measured` (in the rule's canonical unit) satisfies the rule.
    pub fn holds(&self, measured: f64) -> bool {
        match self.op {
            Op::Lt => measured < self.limit,
            Op::Le => measured <= self.limit,
            Op::Gt => measured > self.limit,
            Op::Ge => measured >= self.limit,
        }
    }

    /// `value` in the rule's terms, as the reports show figures (three significant digits): `212 ms`,
    /// `1.2%`, `480/s`.
    pub fn show(&self, value: f64) -> String {
        match self.metric {
            m if m.is_rate() => verdict::text::percent(value),
            Metric::Throughput => format!("{}/s", verdict::text::sig3(value)),
            _ => format!("{} ms", verdict::text::sig3(value)),
        }
    }

    /// The comparison sign.
    pub fn op_str(&self) -> &'static str {
        self.op.as_str()
    }
}

impl FromStr for Rule {
    type Err = RuleError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Rule::parse(s)
    }
}

impl TryFrom<String> for Rule {
    type Error = RuleError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Rule::parse(&s)
    }
}

impl From<Rule> for String {
    fn from(r: Rule) -> String {
        r.text
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(s: &str) -> Rule {
        Rule::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn parses_the_k6_forms() {
        let r = ok("p99 < 200ms");
        assert_eq!(
            (r.metric, r.op, r.limit),
            (Metric::Percentile(99.0), Op::Lt, 200.0)
        );
        assert_eq!(ok("p50<=20ms").op, Op::Le);
        assert_eq!(ok("p(99.9) < 1s").limit, 1000.0);
        assert_eq!(ok("p999 < 1s").metric, Metric::Percentile(99.9));
        assert_eq!(ok("p99.9 < 1s").metric, Metric::Percentile(99.9));
        assert_eq!(ok("avg < 500us").limit, 0.5);
        assert_eq!(ok("max < 2").limit, 2.0);
        let e = ok("error_rate < 1%");
        assert_eq!((e.metric, e.limit), (Metric::ErrorRate, 0.01));
        assert_eq!(ok("error_rate <= 0.05").limit, 0.05);
        let r = ok("request_failure_rate < 5%");
        assert_eq!((r.metric, r.limit), (Metric::RequestFailureRate, 0.05));
        let t = ok("transport_error_rate<=0.5%");
        assert_eq!((t.metric, t.limit), (Metric::TransportErrorRate, 0.005));

        let t = ok("throughput > 500/s");
        assert_eq!(
            (t.metric, t.op, t.limit),
            (Metric::Throughput, Op::Gt, 500.0)
        );
        assert_eq!(ok("throughput >= 600/min").limit, 10.0);
        assert_eq!(ok("  med >= 1ms ").text, "med >= 1ms");
    }

    #[test]
    fn holds_compares_in_canonical_units() {
        assert!(ok("p99 < 200ms").holds(199.9));
        assert!(!ok("p99 < 200ms").holds(200.0));
        assert!(ok("p99 <= 200ms").holds(200.0));
        assert!(ok("throughput > 500/s").holds(501.0));
    }

    #[test]
    fn errors_say_where_and_what_was_expected() {
        let e = Rule::parse("p99 < 200xs").expect_err("bad unit");
        assert_eq!(e.column, 10);
        assert_eq!(e.expected, "a duration unit (us, ms or s)");
        assert_eq!(e.found, "\"xs\"");
        assert_eq!(
            e.to_string(),
            "threshold \"p99 < 200xs\": column 10: expected a duration unit (us, ms or s), \
             found \"xs\""
        );
        let e = Rule::parse("latency < 2ms").expect_err("bad metric");
        assert_eq!((e.column, e.found.as_str()), (1, "\"latency\""));
        let e = Rule::parse("p99 = 2ms").expect_err("bad op");
        assert_eq!((e.column, e.found.as_str()), (5, "\"=\""));
        let e = Rule::parse("p99 <").expect_err("no value");
        assert_eq!((e.column, e.expected.as_str()), (6, "a number"));
        assert_eq!(e.found, "end of rule");
        let e = Rule::parse("error_rate < 1ms").expect_err("wrong unit kind");
        assert_eq!(e.expected, "`%` or nothing");
        let e = Rule::parse("p(101) < 1s").expect_err("percentile range");
        assert_eq!(e.column, 3);
        let e = Rule::parse("p99 < 1s or so").expect_err("trailing");
        assert_eq!((e.column, e.expected.as_str()), (10, "the end of the rule"));
    }
}
