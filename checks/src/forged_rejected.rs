//! `forged_rejected`: a forged, stale or replayed webhook delivery was refused and took no effect.
//!
//! Why: a webhook endpoint is a public URL that moves money. A consumer that skips the signature
//! check, parses and acts before it verifies, or checks the signature but not its age, does what
//! anyone who can reach the URL asks — a security finding, not a flaky test. The sender forges a
//! share of deliveries on purpose (a wrong secret, no signature, a body changed after signing, a
//! genuine delivery older than the tolerance, a valid old signature under a fresh timestamp),
//! each carrying an event id of its own, and this check holds the consumer to two things:
//!
//! - the answer is a 4xx: a 2xx accepted the forgery; a 5xx or no answer refused it in a way a
//!   provider reads as "try again" (weak);
//! - the forgery took no effect: the consumer's count for the forgery's id (asked through
//!   `effects_once.verify`) is 0 — a consumer that acts first and verifies second answers 400
//!   and has already charged.
//!
//! Metrics: `forged`, `refused`, `accepted`, `not_4xx`, `took_effect`, `effects_counted`, and
//! `forged_<kind>` per forgery.

use std::collections::{BTreeMap, HashMap};

use history::Facts;
use serde::{Deserialize, Serialize};
use verdict::{CheckResult, Verdict};

use super::evidence::{attach, Findings};
use super::spec::{About, CheckSpec};
use super::{Attempt, Check, Context};

/// Configuration of the `forged_rejected` check (nothing to set: the effects are counted by
/// `effects_once.verify`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ForgedRejectedConfig {}

/// One forged delivery as the journal saw it.
#[derive(Debug)]
struct Forged {
    how: String,
    seq: u64,
}

/// The `forged_rejected` check.
pub(crate) struct ForgedRejectedCheck {
    /// Forged deliveries by their event id, to set beside the consumer's counts.
    forged: HashMap<String, Forged>,
    by_kind: BTreeMap<String, u64>,
    total: u64,
    refused: u64,
    accepted: Findings,
    weak: Findings,
}

impl ForgedRejectedCheck {
    pub(crate) fn new(ctx: Context) -> Self {
        ForgedRejectedCheck {
            forged: HashMap::new(),
            by_kind: BTreeMap::new(),
            total: 0,
            refused: 0,
            accepted: Findings::new(ctx.max_evidence),
            weak: Findings::new(ctx.max_evidence),
        }
    }
}

impl Check for ForgedRejectedCheck {
    fn name(&self) -> &'static str {
        "forged_rejected"
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        let e = a.entry;
        let (Some(how), true) = (&e.forged, e.is_delivery()) else {
            return;
        };
        self.total += 1;
        *self.by_kind.entry(how.clone()).or_default() += 1;
        let id = e.idempotency_key.clone().unwrap_or_default();
        let event = format!(
            "forged ({how}) delivery of {} {}",
            e.event_type.as_deref().unwrap_or("an event"),
            id
        );
        match e.status.filter(|_| e.answered()) {
            Some(s) if (400..500).contains(&s) => self.refused += 1,
            Some(s) if (200..300).contains(&s) => self.accepted.push(
                format!("{event} was accepted: answered {s}"),
                Some(id.clone()),
                vec![e.seq],
            ),
            Some(s) => self.weak.push(
                format!("{event} was answered {s}, not a 4xx: a provider would deliver it again"),
                Some(id.clone()),
                vec![e.seq],
            ),
            None => self.weak.push(
                format!(
                    "{event} got no answer ({}): a provider would deliver it again",
                    e.outcome.as_str()
                ),
                Some(id.clone()),
                vec![e.seq],
            ),
        }
        if self.forged.len() < super::effects_once::EVENTS_KEPT {
            self.forged.insert(
                id,
                Forged {
                    how: how.clone(),
                    seq: e.seq,
                },
            );
        }
    }

    fn finish(mut self: Box<Self>, facts: &Facts) -> CheckResult {
        let mut took_effect = 0u64;
        let mut counted = 0u64;
        if let Some(Ok(counts)) = facts.effects.as_ref().map(|s| &s.counts) {
            for k in counts {
                let (Some(f), Ok(n)) = (self.forged.get(&k.key), &k.count) else {
                    continue;
                };
                counted += 1;
                if *n > 0 {
                    took_effect += 1;
                    self.accepted.push(
                        format!(
                            "forged ({}) delivery {} took {n} effect{} in the consumer's system of \
                             record",
                            f.how,
                            k.key,
                            if *n == 1 { "" } else { "s" }
                        ),
                        Some(k.key.clone()),
                        vec![f.seq],
                    );
                }
            }
        }
        let accepted = self.accepted.total() - took_effect;
        let not_4xx = self.weak.total();
        let effects_note = if counted > 0 {
            format!(", and none of the {counted} counted took an effect")
        } else {
            " (their effects were not counted: give `--verify URL_WITH_{event_id}`; in a scenario \
             `effects_once.verify`)"
                .to_string()
        };
        let (verdict, summary, findings) = if !self.accepted.is_empty() {
            let first = self.accepted.first_detail().unwrap_or_default().to_string();
            (
                Verdict::Fail,
                format!(
                    "security: {accepted} of {} forged deliveries accepted, {took_effect} took an \
                     effect; first: {first}",
                    self.total
                ),
                Some(self.accepted),
            )
        } else if self.total == 0 {
            (
                Verdict::Inconclusive,
                "not enough data: no forged delivery was sent (give `--forged F`; in a scenario \
                 `forged`: a share of events)"
                    .to_string(),
                None,
            )
        } else if !self.weak.is_empty() {
            let first = self.weak.first_detail().unwrap_or_default().to_string();
            (
                Verdict::Weak,
                format!(
                    "{not_4xx} of {} forged deliveries were refused without a 4xx{effects_note}; \
                     first: {first}",
                    self.total
                ),
                Some(self.weak),
            )
        } else {
            (
                Verdict::Pass,
                format!(
                    "all {} forged deliveries were answered 4xx{effects_note}",
                    self.total
                ),
                None,
            )
        };
        let mut result = CheckResult::new("forged_rejected", verdict, summary)
            .metric("forged", self.total)
            .metric("refused", self.refused)
            .metric("accepted", accepted)
            .metric("not_4xx", not_4xx)
            .metric("took_effect", took_effect)
            .metric("effects_counted", counted);
        for (kind, n) in &self.by_kind {
            result = result.metric(&format!("forged_{kind}"), *n);
        }
        match findings {
            Some(f) => attach(result, f),
            None => result,
        }
    }
}

impl CheckSpec for ForgedRejectedConfig {
    const NAME: &'static str = "forged_rejected";
    const ABOUT: About = About {
        catches: "a forged, stale or replayed webhook accepted (a security finding)",
        how: "each forged delivery (journal `forged`) must be answered 4xx, and its own event id \
              must have no effect in the consumer's count (`effects_once.verify`)",
        evidence: "at least one forged delivery was sent and every one was \
                   answered 4xx and, where the effects were counted, took none; a 5xx or no \
                   answer is weak",
        limits: "without `effects_once.verify` an effect taken before a 4xx is not seen",
    };

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(ForgedRejectedCheck::new(ctx))
    }
}

#[cfg(test)]
mod tests {
    use history::{Facts, KeyCount, Outcome, StoreCounts};
    use verdict::Verdict;

    use crate::testutil::{entry, judge_one, run_one};

    const NAME: &str = "forged_rejected";

    fn forged(seq: u64, id: &str, how: &str) -> history::sample::EntryBuilder {
        entry(seq, seq as f64)
            .delivery(id, "in_1", "invoice.paid", 2)
            .forged(how)
    }

    fn effects(c: &[(&str, u64)]) -> Facts {
        Facts {
            effects: Some(StoreCounts {
                source: "GET /effects/{event_id}".into(),
                counts: Ok(c
                    .iter()
                    .map(|(k, n)| KeyCount {
                        key: k.to_string(),
                        count: Ok(*n),
                    })
                    .collect()),
            }),
            ..Facts::default()
        }
    }

    #[test]
    fn fails_a_forgery_answered_2xx() {
        let j = [
            forged(1, "f1", "signature").status(400).build(),
            forged(2, "f2", "stale").status(200).build(),
            entry(3, 3.0)
                .delivery("e1", "in_1", "invoice.paid", 2)
                .build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{r}");
        assert!(r.summary.starts_with("security: 1 of 2"), "{r}");
        assert_eq!(r.evidence[0].key.as_deref(), Some("f2"));
        assert_eq!(r.metrics["forged_stale"], 1);
    }

    #[test]
    fn fails_a_forgery_refused_after_it_took_effect() {
        // Parse first, verify second: 400, and the effect already taken.
        let j = [
            forged(1, "f1", "tampered").status(400).build(),
            forged(2, "f2", "missing").status(400).build(),
        ];
        let r = judge_one(NAME, "{}", &j, &effects(&[("f1", 1), ("f2", 0), ("e1", 1)]));
        assert_eq!(r.verdict, Verdict::Fail, "{r}");
        assert!(r.summary.contains("1 took an effect"), "{r}");
        assert!(
            r.evidence[0]
                .detail
                .contains("forged (tampered) delivery f1 took 1 effect"),
            "{r}"
        );
        assert_eq!(r.metrics["accepted"], 0);
        assert_eq!(r.metrics["took_effect"], 1);
    }

    #[test]
    fn passes_every_forgery_refused_with_no_effect() {
        let j = [
            forged(1, "f1", "signature").status(400).build(),
            forged(2, "f2", "replayed").status(401).build(),
        ];
        let r = judge_one(NAME, "{}", &j, &effects(&[("f1", 0), ("f2", 0)]));
        assert_eq!(r.verdict, Verdict::Pass, "{r}");
        assert!(
            r.summary.contains("none of the 2 counted took an effect"),
            "{r}"
        );
        // On the answers alone it passes too, and says the effects were not counted.
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Pass, "{r}");
        assert!(
            r.summary.contains("were not counted: give `--verify"),
            "{r}"
        );
    }

    #[test]
    fn a_5xx_or_no_answer_is_weak_and_no_forgery_is_inconclusive() {
        let j = [
            forged(1, "f1", "signature").status(500).build(),
            forged(2, "f2", "signature")
                .no_response(Outcome::Hung)
                .build(),
            forged(3, "f3", "signature").status(403).build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Weak, "{r}");
        assert_eq!(r.metrics["not_4xx"], 2);
        let genuine = [entry(1, 0).delivery("e1", "s", "t", 1).build()];
        let r = run_one(NAME, "{}", &genuine);
        assert_eq!(r.verdict, Verdict::Inconclusive, "{r}");
        assert!(r.summary.contains("(give `--forged F`"), "{r}");
    }
}
