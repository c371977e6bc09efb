//! `harness conform -- CMD`: a retrying client held to a suite of rules, one scorecard.
//!
//! The user's adapter (CMD) wraps their client as it ships: it reads `HARNESS_FAULT_URL`,
//! `HARNESS_CALLS`, `HARNESS_CONCURRENCY` and `HARNESS_PROTOCOL` (and `HARNESS_DEADLINE_MS`, in
//! the case that gives each call a deadline) and makes that many calls of one documented
//! operation, released together. For each case of the suite ([`suite::CASES`])
//! the embedded fault server is started with the case's schedule, the adapter is run against
//! it, and the checks of the rules judged on that case read its journal. Each rule's row is its
//! check's verdict, except that an optional rule (a breaker) a client fails reads "not present"
//! unless it was required, and a case the adapter did not run through (an exit code other than
//! 0, no call, its time limit) leaves its rules inconclusive and the scorecard failed.
//!
//! Cases whose verdicts rest on no timing run side by side; the timing ones (jitter, the
//! breaker) one at a time after them.

pub mod suite;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use reports::model::{ConformCase, ConformRule, Conformance, Exec, RuleVerdict};
use reports::{CheckResult, Report, Verdict};
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;

pub use suite::{Case, Protocol, Rule, Suite, CASES, RULES};

/// What a conformance run needs besides its rules.
#[derive(Debug, Clone)]
pub struct Settings {
    /// The adapter and its arguments.
    pub command: Vec<String>,
    /// The suite asked for (reported).
    pub suite: Suite,
    /// Optional rules the client must keep.
    pub require: Vec<String>,
    /// How long one case may take before its adapter is stopped.
    pub case_timeout: Duration,
    /// Timing-free cases run at once, at most this many.
    pub parallel: usize,
    /// The seed of every case's fault server (`--seed`), else each case's own.
    pub seed: Option<u64>,
}

/// Most bytes of the adapter's stderr kept per case, to say why a case did not run.
const STDERR_KEPT: usize = 4096;

/// A case run: its row and its full report (every check's evidence).
pub struct CaseRun {
    /// The row of the scorecard's cases.
    pub row: ConformCase,
    /// The report `harness exec` would have written for it.
    pub report: Option<Report>,
}

/// The scorecard's parts: the rules' rows, the cases' rows and each case's report.
pub struct Scorecard {
    /// What the report carries.
    pub conformance: Conformance,
    /// Each case's own report, by case name.
    pub reports: BTreeMap<String, Report>,
    /// Whether a signal stopped it.
    pub interrupted: bool,
}

/// Runs `rules` (from [`suite::select`]) with the adapter; `stop` is cancelled on Ctrl-C.
pub async fn run(rules: &[&'static Rule], s: &Settings, stop: CancellationToken) -> Scorecard {
    let mut cases: Vec<&'static Case> = CASES
        .iter()
        .filter(|c| rules.iter().any(|r| r.case == c.name))
        .collect();
    // Timing-free first, side by side; then the timing cases, alone.
    cases.sort_by_key(|c| c.timing);
    let (free, timed): (Vec<_>, Vec<_>) = cases.into_iter().partition(|c| !c.timing);
    let mut runs: Vec<CaseRun> = Vec::new();
    // After Ctrl-C no case starts: their rules read "its case did not run".
    for chunk in free.chunks(s.parallel.max(1)) {
        if stop.is_cancelled() {
            break;
        }
        let batch = chunk.iter().map(|c| run_case(c, rules, s, stop.clone()));
        runs.extend(futures_util::future::join_all(batch).await);
    }
    for c in timed {
        if stop.is_cancelled() {
            break;
        }
        runs.push(run_case(c, rules, s, stop.clone()).await);
    }
    let by_case: BTreeMap<&str, &CaseRun> = runs.iter().map(|r| (r.row.name.as_str(), r)).collect();
    let rows = rules
        .iter()
        .map(|rule| {
            let required = s.require.iter().any(|r| r == rule.id);
            row(rule, required, by_case.get(rule.case).copied())
        })
        .collect();
    let reports = runs
        .iter()
        .filter_map(|r| Some((r.row.name.clone(), r.report.clone()?)))
        .collect();
    Scorecard {
        conformance: Conformance {
            suite: s.suite.name().to_string(),
            command: s.command.clone(),
            rules: rows,
            cases: runs.into_iter().map(|r| r.row).collect(),
        },
        reports,
        interrupted: stop.is_cancelled(),
    }
}

/// The checks of the rules judged on `case`, as a scenario's `checks` block.
fn checks_of(case: &Case, rules: &[&Rule]) -> checks::ChecksConfig {
    let mut yaml = String::new();
    let mut seen = std::collections::BTreeSet::new();
    for r in rules.iter().filter(|r| r.case == case.name) {
        if seen.insert(r.check) {
            yaml.push_str(&format!("{}: {}\n", r.check, r.config));
        }
    }
    // The rules are the suite's own: a configuration that does not parse is a bug caught by the
    // suite's tests, never the user's input.
    checks::ChecksConfig::from_yaml(&yaml).unwrap_or_else(|_| checks::ChecksConfig::none())
}

async fn run_case(
    case: &'static Case,
    rules: &[&'static Rule],
    s: &Settings,
    stop: CancellationToken,
) -> CaseRun {
    let started = Instant::now();
    let mut row = ConformCase {
        name: case.name.to_string(),
        about: case.about.to_string(),
        calls: case.calls,
        requests: 0,
        exit_code: None,
        duration_ms: 0,
        problem: None,
    };
    let overrides = crate::scenario::Overrides {
        seed: s.seed,
        ..Default::default()
    };
    let source = format!("harness/conform/{}.yaml", case.name);
    let mut plan = match crate::scenario::load_str(case.yaml, Path::new(&source), &overrides) {
        Ok(p) => p,
        Err(e) => {
            row.problem = Some(format!("the case's scenario does not load: {e}"));
            return CaseRun { row, report: None };
        }
    };
    plan.checks = checks_of(case, rules);
    let mut session = match crate::run::Session::start(&plan).await {
        Ok(s) => s,
        Err(e) => {
            row.problem = Some(format!("the fault server did not start: {e}"));
            return CaseRun { row, report: None };
        }
    };
    let (exit_code, problem) = run_adapter(case, s, &session, &stop).await;
    if stop.is_cancelled() {
        session.interrupt();
    }
    let exec = Exec {
        command: s.command.clone(),
        exit_code,
    };
    let report = session.finish(&plan, Some(exec)).await.report;
    row.exit_code = exit_code;
    row.requests = report.requests.sent;
    row.duration_ms = started.elapsed().as_millis() as u64;
    row.problem = problem.or_else(|| {
        (report.requests.sent == 0 && !stop.is_cancelled())
            .then(|| "the adapter made no call to HARNESS_FAULT_URL".to_string())
    });
    CaseRun {
        row,
        report: Some(report),
    }
}

/// Runs the adapter against the case's server: its exit code, and what went wrong if it did.
async fn run_adapter(
    case: &Case,
    s: &Settings,
    session: &crate::run::Session,
    stop: &CancellationToken,
) -> (Option<i32>, Option<String>) {
    let Some((program, args)) = s.command.split_first() else {
        return (None, Some("no adapter command".to_string()));
    };
    let url = session.server_url().unwrap_or_default();
    let ca = match session.certificate_pem() {
        Some(pem) => match write_ca(&pem) {
            Ok(f) => Some(f),
            Err(e) => return (None, Some(e)),
        },
        None => None,
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .env("HARNESS_FAULT_URL", &url)
        .env("HARNESS_CALLS", case.calls.to_string())
        .env("HARNESS_CONCURRENCY", case.calls.to_string())
        .env("HARNESS_PROTOCOL", case.protocol.name())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(f) = &ca {
        cmd.env("HARNESS_FAULT_CA", f.path());
    }
    // Only the case that gives a deadline sets one; one in the harness's own environment is not
    // passed on to the others.
    match case.deadline_ms {
        Some(ms) => cmd.env("HARNESS_DEADLINE_MS", ms.to_string()),
        None => cmd.env_remove("HARNESS_DEADLINE_MS"),
    };
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return (None, Some(format!("cannot start {program:?}: {e}"))),
    };
    // The adapter's stderr is read as it comes (a full pipe would stall it); its last bytes say
    // why a case failed.
    let stderr = child.stderr.take();
    let tail = tokio::spawn(async move {
        let mut kept: Vec<u8> = Vec::new();
        if let Some(mut err) = stderr {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                kept.extend_from_slice(&buf[..n]);
                if kept.len() > STDERR_KEPT {
                    kept.drain(..kept.len() - STDERR_KEPT);
                }
            }
        }
        kept
    });
    let waited = tokio::select! {
        r = tokio::time::timeout(s.case_timeout, child.wait()) => Some(r),
        () = stop.cancelled() => None,
    };
    let (code, problem) = match waited {
        Some(Ok(Ok(status))) => match status.code() {
            Some(0) => (Some(0), None),
            Some(c) => (Some(c), Some(format!("the adapter exited {c}"))),
            None => (None, Some("the adapter was killed by a signal".to_string())),
        },
        Some(Ok(Err(e))) => (None, Some(format!("cannot wait for the adapter: {e}"))),
        Some(Err(_)) => {
            let _ = child.start_kill();
            let _ = child.wait().await;
            (
                None,
                Some(format!(
                    "the adapter did not finish within {} s (--case-timeout) and was stopped",
                    s.case_timeout.as_secs()
                )),
            )
        }
        None => {
            let _ = child.start_kill();
            let _ = child.wait().await;
            (None, Some("interrupted".to_string()))
        }
    };
    let kept = tail.await.unwrap_or_default();
    let problem = problem.map(|p| {
        let text = String::from_utf8_lossy(&kept);
        match text.trim().lines().last() {
            Some(last) if !last.is_empty() => format!("{p}; its stderr ended: {last}"),
            _ => p,
        }
    });
    (code, problem)
}

fn write_ca(pem: &str) -> Result<tempfile::NamedTempFile, String> {
    use std::io::Write as _;
    tempfile::Builder::new()
        .prefix("harness-fault-ca")
        .suffix(".pem")
        .tempfile()
        .and_then(|mut f| {
            f.write_all(pem.as_bytes())?;
            Ok(f)
        })
        .map_err(|e| format!("cannot write the fault server's CA: {e}"))
}

/// A rule's row from its case's run.
fn row(rule: &Rule, required: bool, run: Option<&CaseRun>) -> ConformRule {
    let mut row = ConformRule {
        id: rule.id.to_string(),
        title: rule.title.to_string(),
        source: rule.source.to_string(),
        case: rule.case.to_string(),
        check: rule.check.to_string(),
        required,
        verdict: RuleVerdict::Inconclusive,
        figure: String::new(),
        evidence: Vec::new(),
    };
    let Some(run) = run else {
        row.figure = "its case did not run".to_string();
        return row;
    };
    if let Some(p) = &run.row.problem {
        row.figure = format!("not judged: {p}");
        return row;
    }
    let result: Option<&CheckResult> = run
        .report
        .as_ref()
        .and_then(|r| r.checks.iter().find(|c| c.name == rule.check));
    let Some(result) = result else {
        row.figure = format!("not judged: the check {} gave no result", rule.check);
        return row;
    };
    row.verdict = verdict_of(rule, required, result.verdict);
    row.figure = if row.verdict == RuleVerdict::NotPresent {
        format!("not present: {}", result.summary)
    } else {
        result.summary.clone()
    };
    row.evidence = result.evidence.clone();
    row
}

/// A rule's verdict from its check's: an optional rule not kept is "not present", unless
/// required.
pub fn verdict_of(rule: &Rule, required: bool, v: Verdict) -> RuleVerdict {
    match v {
        Verdict::Pass => RuleVerdict::Pass,
        Verdict::Weak => RuleVerdict::Weak,
        Verdict::Fail if rule.optional && !required => RuleVerdict::NotPresent,
        Verdict::Fail => RuleVerdict::Fail,
        Verdict::Inconclusive => RuleVerdict::Inconclusive,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(id: &str) -> &'static Rule {
        RULES.iter().find(|r| r.id == id).expect("rule")
    }

    #[test]
    fn an_optional_rule_not_kept_is_not_present_unless_required() {
        let breaker = rule("breaker");
        assert_eq!(
            verdict_of(breaker, false, Verdict::Fail),
            RuleVerdict::NotPresent
        );
        assert_eq!(verdict_of(breaker, true, Verdict::Fail), RuleVerdict::Fail);
        assert_eq!(verdict_of(breaker, false, Verdict::Pass), RuleVerdict::Pass);
        let jitter = rule("jitter");
        assert_eq!(verdict_of(jitter, false, Verdict::Fail), RuleVerdict::Fail);
        assert_eq!(verdict_of(jitter, false, Verdict::Weak), RuleVerdict::Weak);
    }

    #[test]
    fn a_case_runs_the_checks_of_its_rules_once_each() {
        let case = suite::case("first-two-503").expect("case");
        let cfg = checks_of(case, RULES.iter().collect::<Vec<_>>().as_slice());
        assert_eq!(
            cfg.enabled_names(),
            vec!["transient_retried", "jitter", "backoff_growth"]
        );
        let unavailable = suite::case("grpc-unavailable").expect("case");
        let cfg = checks_of(unavailable, RULES.iter().collect::<Vec<_>>().as_slice());
        assert_eq!(
            cfg.enabled_names(),
            vec!["transient_retried", "grpc_attempts"]
        );
    }
}
