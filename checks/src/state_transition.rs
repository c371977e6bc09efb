//! `state_transition`: a resource left the same state more than once.
//!
//! Why: idempotency by conditional state transition (`UPDATE orders SET status = 'paid' WHERE id =
//! ? AND status = 'pending'`) lets exactly one of two concurrent pay requests win; the affected-row
//! count tells the other it was a repeat. The read-then-write version lets both read `pending` and
//! both "pay": the card is charged twice although the final state looks right. The journal records
//! each transition a request made (`transition`, e.g. `pending->paid`) and the resource it acted on
//! (`resource`); two transitions of one resource out of the same state are that race, proven.
//!
//! (A resource may legitimately move on — `pending->paid`, then `paid->shipped` — so the check
//! counts transitions per resource *and source state*.) `transitions` limits the check to some
//! transitions; empty: all of them.
//!
//! Metrics: `transitions`, `resources`, `repeated`.

use history::Facts;
use serde::{Deserialize, Serialize};
use verdict::{CheckResult, Verdict};

use super::evidence::{attach, Findings};
use super::idle::IdleMap;
use super::spec::{About, CheckSpec};
use super::{Attempt, Check, Context};

/// Configuration of the `state_transition` check.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct StateTransitionConfig {
    /// Only these transitions (e.g. `pending->paid`); empty: every transition.
    pub transitions: Vec<String>,
}

/// The `state_transition` check.
pub(crate) struct StateTransitionCheck {
    cfg: StateTransitionConfig,
    /// (resource, source state) → transitions made, with their seqs.
    seen: IdleMap<(String, String), Vec<(String, u64)>>,
    now_us: u64,
    findings: Findings,
    transitions: u64,
    resources: u64,
}

impl StateTransitionCheck {
    /// A check configured by `cfg`.
    pub(crate) fn new(cfg: &StateTransitionConfig, ctx: Context) -> Self {
        StateTransitionCheck {
            cfg: cfg.clone(),
            seen: IdleMap::new(ctx.horizon_us),
            now_us: 0,
            findings: Findings::new(ctx.max_evidence),
            transitions: 0,
            resources: 0,
        }
    }

    fn judge(&mut self, (resource, from): (String, String), made: Vec<(String, u64)>) {
        self.resources += 1;
        if made.len() > 1 {
            let list: Vec<&str> = made.iter().map(|(t, _)| t.as_str()).collect();
            self.findings.push(
                format!(
                    "{resource} left state {from} {} times ({})",
                    made.len(),
                    list.join(", ")
                ),
                Some(resource),
                made.iter().map(|(_, s)| *s).collect(),
            );
        }
    }
}

impl Check for StateTransitionCheck {
    fn name(&self) -> &'static str {
        "state_transition"
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        let e = a.entry;
        self.now_us = self.now_us.max(e.t_recv_us);
        let mut expired = Vec::new();
        self.seen.expire(self.now_us, |k, v| expired.push((k, v)));
        for (k, v) in expired {
            self.judge(k, v);
        }
        let (Some(resource), Some(transition)) = (&e.resource, &e.transition) else {
            return;
        };
        if !self.cfg.transitions.is_empty() && !self.cfg.transitions.contains(transition) {
            return;
        }
        self.transitions += 1;
        let from = transition
            .split_once("->")
            .map_or(transition.as_str(), |(f, _)| f)
            .trim()
            .to_string();
        self.seen
            .touch(
                &(resource.clone(), from),
                e.t_recv_us.max(e.t_done_us),
                Vec::new,
            )
            .push((transition.clone(), e.seq));
    }

    fn finish(mut self: Box<Self>, _facts: &Facts) -> CheckResult {
        let seen = std::mem::replace(&mut self.seen, IdleMap::new(0));
        for (k, v) in seen.drain() {
            self.judge(k, v);
        }
        let (verdict, summary) = if let Some(first) = self.findings.first_detail() {
            (
                Verdict::Fail,
                format!(
                    "{} resources made the same transition twice; first: {first}",
                    self.findings.total()
                ),
            )
        } else if self.transitions == 0 {
            (
                Verdict::Inconclusive,
                "not enough data: no request recorded a state transition".to_string(),
            )
        } else {
            (
                Verdict::Pass,
                format!(
                    "{} transitions, none repeated out of the same state",
                    self.transitions
                ),
            )
        };
        let result = CheckResult::new("state_transition", verdict, summary)
            .metric("transitions", self.transitions)
            .metric("resources", self.resources)
            .metric("repeated", self.findings.total());
        attach(result, self.findings)
    }
}

impl CheckSpec for StateTransitionConfig {
    const NAME: &'static str = "state_transition";
    const ABOUT: About = About {
        catches: "paying twice",
        how:
            "per resource, two transitions out of the same state (journal `transition`, `resource`)",
        evidence: "a request recorded a state transition",
        limits: "sees transitions the server records (the fault server's pay endpoint)",
    };

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(StateTransitionCheck::new(self, ctx))
    }
}

#[cfg(test)]
mod tests {
    use verdict::Verdict;

    use crate::testutil::{entry, run_one};

    const NAME: &str = "state_transition";

    fn pay(seq: u64, t: u32, order: &str) -> history::sample::EntryBuilder {
        entry(seq, t).at("POST", &format!("/orders/{order}/pay"))
    }

    #[test]
    fn fails_a_double_payment() {
        // read-then-write: both concurrent requests saw `pending`.
        let j = [
            pay(1, 0, "o1").transition("o1", "pending->paid").build(),
            pay(2, 1, "o1").transition("o1", "pending->paid").build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{}", r.summary);
        assert_eq!(r.evidence[0].key.as_deref(), Some("o1"));
        assert_eq!(r.evidence[0].seqs, vec![1, 2]);
    }

    #[test]
    fn passes_one_payment_and_a_no_op_repeat() {
        // conditional update: the repeat changes nothing and records no transition.
        let j = [
            pay(1, 0, "o1").transition("o1", "pending->paid").build(),
            pay(2, 1, "o1").build(),
            pay(3, 2, "o2").transition("o2", "pending->paid").build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Pass, "{}", r.summary);
        assert_eq!(r.metrics["transitions"], 2);
    }

    #[test]
    fn borderline_a_resource_moving_on_and_filters() {
        let j = [
            pay(1, 0, "o1").transition("o1", "pending->paid").build(),
            entry(2, 5).transition("o1", "paid->shipped").build(),
            entry(3, 6).transition("o2", "paid->refunded").build(),
            entry(4, 7).transition("o2", "paid->refunded").build(),
        ];
        assert_eq!(run_one(NAME, "{}", &j).verdict, Verdict::Fail);
        let only_pay = "{ transitions: [pending->paid] }";
        assert_eq!(run_one(NAME, only_pay, &j).verdict, Verdict::Pass);
        assert_eq!(run_one(NAME, "{}", &j[..2]).verdict, Verdict::Pass);
        let none = [entry(1, 0).build()];
        assert_eq!(run_one(NAME, "{}", &none).verdict, Verdict::Inconclusive);
    }
}
