//! The built-in suites: each rule a retrying client is held to, where it comes from, the case
//! (fault schedule) it is judged on and the check that judges it.
//!
//! A case is a scenario file under `harness/conform/` with a fault server and no checks: the
//! rules of the suite that name it choose its checks. The calls the adapter makes per case are
//! the fewest that let its checks decide (`jitter` needs a group of retries that failed
//! together; the others one operation each, ten for margin).

/// A suite a rule belongs to: the protocol the adapter speaks in its cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Suite {
    /// `POST /orders` with an Idempotency-Key.
    Http,
    /// `orders.v1.Orders/CreateOrder`, the key in metadata.
    Grpc,
    /// Both, one case at a time (`HARNESS_PROTOCOL` says which a case wants).
    All,
}

impl Suite {
    /// Its name on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Suite::Http => "http",
            Suite::Grpc => "grpc",
            Suite::All => "all",
        }
    }

    fn has(self, p: Protocol) -> bool {
        matches!(
            (self, p),
            (Suite::All, _) | (Suite::Http, Protocol::Http) | (Suite::Grpc, Protocol::Grpc)
        )
    }
}

/// The protocol a case's calls use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// HTTP/1.1 or HTTP/2, `POST /orders`.
    Http,
    /// gRPC over HTTP/2 cleartext.
    Grpc,
}

impl Protocol {
    /// `HARNESS_PROTOCOL`'s value.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Http => "http",
            Protocol::Grpc => "grpc",
        }
    }
}

/// One fault schedule the adapter is run against.
#[derive(Debug)]
pub struct Case {
    /// Its name: the file's, `first-two-503`.
    pub name: &'static str,
    /// What its fault server does.
    pub about: &'static str,
    /// The scenario (fault server only).
    pub yaml: &'static str,
    /// The protocol of its calls.
    pub protocol: Protocol,
    /// Calls the adapter makes (`HARNESS_CALLS`), all released together.
    pub calls: u32,
    /// Whether its verdicts rest on delays measured in milliseconds: such cases run alone, so
    /// that no other case shares the cores with them.
    pub timing: bool,
    /// The deadline each call is given (`HARNESS_DEADLINE_MS`): all of its attempts and waits
    /// within it.
    pub deadline_ms: Option<u32>,
}

/// One rule.
#[derive(Debug)]
pub struct Rule {
    /// Stable identifier (`--only`, `--require`, the JUnit test case).
    pub id: &'static str,
    /// The rule in a sentence.
    pub title: &'static str,
    /// Where it comes from.
    pub source: &'static str,
    /// The case it is judged on.
    pub case: &'static str,
    /// The check that judges it, with its configuration (YAML flow mapping).
    pub check: &'static str,
    /// Its configuration in the case.
    pub config: &'static str,
    /// A rule a client may not claim (a breaker): its failure reads "not present" unless
    /// `--require`d.
    pub optional: bool,
}

/// The deadline of a call in `outage-deadline` (ms).
pub const DEADLINE_MS: u32 = 2000;

/// Every case, in the order they are reported.
pub const CASES: &[Case] = &[
    Case {
        name: "first-two-503",
        about: "attempts 1 and 2 of every key answered 503, attempt 3 creates the order",
        yaml: include_str!("../../conform/first-two-503.yaml"),
        protocol: Protocol::Http,
        calls: 30,
        timing: true,
        deadline_ms: None,
    },
    Case {
        name: "first-400",
        about: "the first attempt of every key answered 400 invalid order",
        yaml: include_str!("../../conform/first-400.yaml"),
        protocol: Protocol::Http,
        calls: 10,
        timing: false,
        deadline_ms: None,
    },
    Case {
        name: "lost-response",
        about: "the first attempt of every key creates the order and its response is dropped",
        yaml: include_str!("../../conform/lost-response.yaml"),
        protocol: Protocol::Http,
        calls: 10,
        timing: false,
        deadline_ms: None,
    },
    Case {
        name: "retry-after-2s",
        about: "the first attempt of every key answered 503 with Retry-After: 2",
        yaml: include_str!("../../conform/retry-after-2s.yaml"),
        protocol: Protocol::Http,
        calls: 10,
        timing: false,
        deadline_ms: None,
    },
    Case {
        name: "outage-10s",
        about: "every create answered 503 for the first 10 s",
        yaml: include_str!("../../conform/outage-10s.yaml"),
        protocol: Protocol::Http,
        calls: 10,
        timing: true,
        deadline_ms: None,
    },
    Case {
        name: "outage-deadline",
        about: "every create answered 503 for the first 8 s; each call has a deadline of 2 s",
        yaml: include_str!("../../conform/outage-deadline.yaml"),
        protocol: Protocol::Http,
        calls: 10,
        timing: false,
        deadline_ms: Some(DEADLINE_MS),
    },
    Case {
        name: "grpc-unavailable",
        about: "attempts 1 and 2 of every call answered UNAVAILABLE",
        yaml: include_str!("../../conform/grpc-unavailable.yaml"),
        protocol: Protocol::Grpc,
        calls: 10,
        timing: false,
        deadline_ms: None,
    },
    Case {
        name: "grpc-invalid-argument",
        about: "the first attempt of every call answered INVALID_ARGUMENT",
        yaml: include_str!("../../conform/grpc-invalid-argument.yaml"),
        protocol: Protocol::Grpc,
        calls: 10,
        timing: false,
        deadline_ms: None,
    },
    Case {
        name: "grpc-pushback",
        about: "the first attempt answered UNAVAILABLE with grpc-retry-pushback-ms: 1500",
        yaml: include_str!("../../conform/grpc-pushback.yaml"),
        protocol: Protocol::Grpc,
        calls: 10,
        timing: false,
        deadline_ms: None,
    },
    Case {
        name: "grpc-committed",
        about: "the first attempt's headers sent, then UNAVAILABLE: the call is committed",
        yaml: include_str!("../../conform/grpc-committed.yaml"),
        protocol: Protocol::Grpc,
        calls: 10,
        timing: false,
        deadline_ms: None,
    },
    Case {
        name: "grpc-slow-answer",
        about: "the first attempt of every call processed at once, its answer held 2 s; the server ignores keys",
        yaml: include_str!("../../conform/grpc-slow-answer.yaml"),
        protocol: Protocol::Grpc,
        calls: 10,
        timing: false,
        deadline_ms: None,
    },
    Case {
        name: "grpc-jitter",
        about: "attempts 1 and 2 of every call answered UNAVAILABLE, a fleet released together",
        yaml: include_str!("../../conform/grpc-jitter.yaml"),
        protocol: Protocol::Grpc,
        calls: 30,
        timing: true,
        deadline_ms: None,
    },
];

/// Every rule, in the order of the scorecard.
pub const RULES: &[Rule] = &[
    Rule {
        id: "transient-retried",
        title: "a transient failure (503) is retried",
        source: "RFC 9110 §15.6.4 (503: a temporary overload the server is likely to recover from); the seed's checklist",
        case: "first-two-503",
        check: "transient_retried",
        config: "{}",
        optional: false,
    },
    Rule {
        id: "no-retry-4xx",
        title: "a 400 is not retried",
        source: "RFC 9110 §15.5 (4xx: the client seems to have erred; sent again, the request fails again); the seed's checklist",
        case: "first-400",
        check: "retry_on_4xx",
        config: "{}",
        optional: false,
    },
    Rule {
        id: "jitter",
        title: "retries after a shared failure are jittered",
        source: "AWS Architecture Blog, Exponential Backoff and Jitter (full, equal, decorrelated); the seed's checklist",
        case: "first-two-503",
        check: "jitter",
        config: "{}",
        optional: false,
    },
    Rule {
        id: "backoff-grows",
        title: "the wait between retries grows",
        source: "the seed's checklist (exponential backoff); gRFC A6 (backoffMultiplier)",
        case: "first-two-503",
        check: "backoff_growth",
        config: "{}",
        optional: false,
    },
    Rule {
        id: "retry-after",
        title: "Retry-After is honoured",
        source: "RFC 9110 §10.2.3 (Retry-After: how long to wait before a follow-up request)",
        case: "retry-after-2s",
        check: "retry_after",
        config: "{}",
        optional: false,
    },
    Rule {
        id: "key-kept",
        title: "the Idempotency-Key is kept across retries",
        source: "draft-ietf-httpapi-idempotency-key-header §2 (a retry of the same request carries the same key)",
        case: "lost-response",
        check: "key_stability",
        config: "{}",
        optional: false,
    },
    Rule {
        id: "lost-response-once",
        title: "a lost response retried makes no duplicate",
        source: "draft-ietf-httpapi-idempotency-key-header §1 (retrying a non-idempotent request safely); the seed's checklist",
        case: "lost-response",
        check: "duplicates",
        config: "{}",
        optional: false,
    },
    Rule {
        id: "attempts-bounded",
        title: "the attempts of one call are bounded",
        source: "the seed's checklist (max retries); gRFC A6 (maxAttempts at most 5)",
        case: "outage-10s",
        check: "attempts_bound",
        config: "{}",
        optional: false,
    },
    Rule {
        id: "deadline",
        title: "a call's deadline bounds its retries",
        source: "the seed's checklist (total timeout: retries within the caller's deadline); gRFC A6 (retries never extend the deadline)",
        case: "outage-deadline",
        check: "total_timeout",
        // DEADLINE_MS, and 100 ms for the last answer to reach the client and the scheduling of
        // a busy machine.
        config: "{ budget_ms: 2000, tolerance_ms: 100 }",
        optional: true,
    },
    Rule {
        id: "breaker",
        title: "a sustained outage is met with a breaker or a budget",
        source: "the seed's checklist (circuit breaker); M. Nygard, Release It!, Circuit Breaker",
        case: "outage-10s",
        check: "circuit_breaker",
        config: "{}",
        optional: true,
    },
    Rule {
        id: "grpc-unavailable-retried",
        title: "an UNAVAILABLE call is retried",
        source: "gRFC A6 (retryableStatusCodes; UNAVAILABLE is the status to retry)",
        case: "grpc-unavailable",
        check: "transient_retried",
        config: "{}",
        optional: false,
    },
    Rule {
        id: "grpc-attempts",
        title: "attempts are bounded and grpc-previous-rpc-attempts counts up",
        source: "gRFC A6 (maxAttempts at most 5; grpc-previous-rpc-attempts on every retry)",
        case: "grpc-unavailable",
        check: "grpc_attempts",
        config: "{}",
        optional: false,
    },
    Rule {
        id: "grpc-non-retryable",
        title: "INVALID_ARGUMENT is not retried",
        source: "gRFC A6 (only retryableStatusCodes are retried)",
        case: "grpc-invalid-argument",
        check: "grpc_non_retryable",
        config: "{}",
        optional: false,
    },
    Rule {
        id: "grpc-pushback",
        title: "grpc-retry-pushback-ms is honoured",
        source: "gRFC A6 (pushback: the server's delay replaces the client's backoff)",
        case: "grpc-pushback",
        check: "grpc_pushback",
        config: "{}",
        optional: false,
    },
    Rule {
        id: "grpc-committed",
        title: "a committed call is not retried",
        source: "gRFC A6 (once response headers are received, the RPC is committed)",
        case: "grpc-committed",
        check: "grpc_committed",
        config: "{}",
        optional: false,
    },
    Rule {
        id: "grpc-no-hedging",
        title: "a call to a method that is not idempotent is not hedged",
        source: "gRFC A6 (hedgingPolicy: the same RPC sent several times, each copy processed by the server); grpc.io, Request Hedging (for methods safe to run more than once)",
        case: "grpc-slow-answer",
        check: "duplicates",
        config: "{}",
        optional: false,
    },
    Rule {
        id: "grpc-backoff-grows",
        title: "the wait between gRPC retries grows",
        source: "gRFC A6 (current_backoff multiplied by backoffMultiplier after each attempt)",
        case: "grpc-jitter",
        check: "backoff_growth",
        config: "{}",
        optional: false,
    },
    Rule {
        id: "grpc-jitter",
        title: "gRPC retries are jittered",
        source: "gRFC A6 (the delay before a retry is random(0, current_backoff))",
        case: "grpc-jitter",
        check: "jitter",
        config: "{}",
        optional: false,
    },
];

/// The case named `name`.
pub fn case(name: &str) -> Option<&'static Case> {
    CASES.iter().find(|c| c.name == name)
}

/// The rules of `suite`, narrowed to `only` when it names any; an unknown name in `only` is bad
/// input, said with the rules there are.
pub fn select(suite: Suite, only: &[String]) -> Result<Vec<&'static Rule>, String> {
    known(only, "--only")?;
    Ok(RULES
        .iter()
        .filter(|r| case(r.case).is_some_and(|c| suite.has(c.protocol)))
        .filter(|r| only.is_empty() || only.iter().any(|o| o == r.id))
        .collect())
}

/// An error naming the first of `ids` that is no rule, with the rules there are.
pub fn known(ids: &[String], flag: &str) -> Result<(), String> {
    match ids
        .iter()
        .find(|id| !RULES.iter().any(|r| r.id == id.as_str()))
    {
        None => Ok(()),
        Some(bad) => Err(format!(
            "{flag} {bad:?}: no such rule; the rules are {}",
            RULES.iter().map(|r| r.id).collect::<Vec<_>>().join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_names_a_case_and_a_check_that_exist() {
        for r in RULES {
            assert!(case(r.case).is_some(), "{}: no case {}", r.id, r.case);
            assert!(
                checks::CHECK_NAMES.contains(&r.check),
                "{}: no check {}",
                r.id,
                r.check
            );
        }
        let mut ids: Vec<_> = RULES.iter().map(|r| r.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), RULES.len(), "rule ids are unique");
    }

    #[test]
    fn every_case_is_a_scenario_with_a_server_and_no_checks() {
        for c in CASES {
            let plan = crate::scenario::load_str(
                c.yaml,
                std::path::Path::new(c.name),
                &Default::default(),
            )
            .unwrap_or_else(|e| panic!("{}: {e}", c.name));
            assert_eq!(plan.name, c.name);
            assert!(plan.server.is_some(), "{}", c.name);
            assert!(plan.phases.is_empty(), "{}", c.name);
            assert!(
                RULES.iter().any(|r| r.case == c.name),
                "{}: no rule is judged on it",
                c.name
            );
        }
    }

    #[test]
    fn selection_by_suite_and_only() {
        let http = select(Suite::Http, &[]).expect("http");
        assert!(http.iter().all(|r| !r.id.starts_with("grpc-")));
        let grpc = select(Suite::Grpc, &[]).expect("grpc");
        assert!(grpc.iter().all(|r| r.id.starts_with("grpc-")));
        assert_eq!(select(Suite::All, &[]).expect("all").len(), RULES.len());
        let one = select(Suite::Http, &["jitter".to_string()]).expect("one");
        assert_eq!(one.len(), 1);
        let e = select(Suite::Http, &["jiter".to_string()]).expect_err("unknown");
        assert!(
            e.contains("\"jiter\"") && e.contains("transient-retried"),
            "{e}"
        );
    }

    /// The deadline rule's budget is the deadline its case gives the adapter.
    #[test]
    fn the_deadline_rule_judges_the_deadline_its_case_gives() {
        let rule = RULES.iter().find(|r| r.id == "deadline").expect("deadline");
        let case = case(rule.case).expect("case");
        assert_eq!(case.deadline_ms, Some(DEADLINE_MS));
        let cfg: checks::TotalTimeoutConfig = serde_norway::from_str(rule.config).expect("config");
        assert_eq!(cfg.budget_ms, Some(u64::from(DEADLINE_MS)));
        assert!(CASES
            .iter()
            .filter(|c| c.name != case.name)
            .all(|c| c.deadline_ms.is_none()));
    }
}
