//! `effects_once`: every webhook event took exactly one effect in the consumer's system of record.
//!
//! Why: providers deliver at least once — again after a timeout or a non-2xx, twice at once,
//! again after an answer lost on the way back — and a consumer that charges, ships or emails on
//! each delivery does it twice. Its answers do not show it (a duplicate charge is answered `200`
//! like the first); its database does. So this check reads the consumer's own count of effects
//! per event id, asked after the run through `verify` (a GET per event, or an SQL count against
//! SQLite or PostgreSQL, with `{event_id}`), and sets it beside what the journal says the sender
//! delivered:
//!
//! - more than one effect for an event: the duplicate this check exists for;
//! - no effect for an event the consumer acknowledged (answered 2xx): the event is lost — the
//!   provider will never deliver it again;
//! - no effect for an event never acknowledged: not a finding here (the provider gave up on a
//!   consumer that refused it; `ack_latency` and `duplicate_ack` say why).
//!
//! Forged deliveries carry ids of their own and are `forged_rejected`'s business.
//!
//! Metrics: `events`, `counted`, `acknowledged`, `once`, `duplicated`, `lost`,
//! `extra_effects`, `unreadable`.

use std::collections::HashMap;

use history::Facts;
use serde::{Deserialize, Serialize};
use verdict::{CheckResult, Evidence, Verdict};

use super::duplicates::VerifyConfig;
use super::evidence::{attach, Findings};
use super::spec::{About, CheckSpec, Invalid};
use super::{Attempt, Check, Context};

/// Configuration of the `effects_once` check.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct EffectsOnceConfig {
    /// Where to count each event's effects after a harness run: a URL (or a path on the
    /// target) with `{event_id}` answering JSON with a count, or an SQL query with `{event_id}`
    /// against SQLite (`sqlite: FILE`) or PostgreSQL (`postgres: URL`). The counts of forged
    /// deliveries' ids, asked the same way, are what `forged_rejected` reads. Ignored by
    /// `analyze`.
    pub verify: Option<VerifyConfig>,
}

/// Most events the check follows; a run of more is judged on these (the verify step asks about
/// fewer still).
pub(crate) const EVENTS_KEPT: usize = 1_000_000;

/// What the journal says of one event.
#[derive(Debug, Default)]
struct EventState {
    deliveries: u32,
    /// The first 2xx answer's seq.
    acknowledged: Option<u64>,
    /// The first few deliveries' seqs, for evidence.
    seqs: Vec<u64>,
}

/// The `effects_once` check.
pub(crate) struct EffectsOnceCheck {
    events: HashMap<String, EventState>,
    untracked: u64,
    max_evidence: usize,
}

impl EffectsOnceCheck {
    pub(crate) fn new(ctx: Context) -> Self {
        EffectsOnceCheck {
            events: HashMap::new(),
            untracked: 0,
            max_evidence: ctx.max_evidence,
        }
    }
}

impl Check for EffectsOnceCheck {
    fn name(&self) -> &'static str {
        "effects_once"
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        let e = a.entry;
        if !e.is_genuine_delivery() {
            return;
        }
        let Some(id) = &e.idempotency_key else { return };
        if !self.events.contains_key(id) {
            if self.events.len() >= EVENTS_KEPT {
                self.untracked += 1;
                return;
            }
            self.events.insert(id.clone(), EventState::default());
        }
        let Some(state) = self.events.get_mut(id) else {
            return;
        };
        state.deliveries += 1;
        if state.seqs.len() < 8 {
            state.seqs.push(e.seq);
        }
        if e.answered() && e.status.is_some_and(|s| (200..300).contains(&s)) {
            state.acknowledged.get_or_insert(e.seq);
        }
    }

    fn finish(self: Box<Self>, facts: &Facts) -> CheckResult {
        let acknowledged = self
            .events
            .values()
            .filter(|s| s.acknowledged.is_some())
            .count() as u64;
        let base = |verdict, summary: String| {
            CheckResult::new("effects_once", verdict, summary)
                .metric("events", self.events.len() as u64)
                .metric("acknowledged", acknowledged)
        };
        if self.events.is_empty() {
            return base(
                Verdict::Inconclusive,
                "not enough data: no webhook event was delivered".into(),
            );
        }
        let Some(store) = &facts.effects else {
            return base(
                Verdict::Inconclusive,
                format!(
                    "not enough data: {} events delivered, but the consumer's effects were not \
                     counted (give `--verify URL_WITH_{{event_id}}`; in a scenario `effects_once.verify`: \
                     a URL or query with {{event_id}})",
                    self.events.len()
                ),
            );
        };
        let counts = match &store.counts {
            Ok(c) => c,
            Err(e) => {
                return base(
                    Verdict::Inconclusive,
                    format!(
                        "not enough data: the consumer's effects could not be counted ({}): {e}",
                        store.source
                    ),
                )
            }
        };
        let mut findings = Findings::new(self.max_evidence);
        let (mut counted, mut once, mut duplicated, mut lost, mut extra, mut unreadable) =
            (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
        let mut first_unreadable = None;
        for k in counts {
            // The store was also asked about forgeries' ids: not this check's.
            let Some(state) = self.events.get(&k.key) else {
                continue;
            };
            let n = match &k.count {
                Ok(n) => *n,
                Err(e) => {
                    unreadable += 1;
                    first_unreadable.get_or_insert_with(|| format!("{}: {e}", k.key));
                    continue;
                }
            };
            counted += 1;
            match n {
                1 => once += 1,
                0 => {
                    if let Some(seq) = state.acknowledged {
                        lost += 1;
                        findings.push(
                            format!(
                                "event {} was acknowledged (2xx, seq {seq}) but took no effect: \
                                 the provider will not deliver it again",
                                k.key
                            ),
                            Some(k.key.clone()),
                            vec![seq],
                        );
                    }
                }
                n => {
                    duplicated += 1;
                    extra += n - 1;
                    findings.push(
                        format!(
                            "event {} took {n} effects from {} deliveries",
                            k.key, state.deliveries
                        ),
                        Some(k.key.clone()),
                        state.seqs.clone(),
                    );
                }
            }
        }
        let (verdict, summary) = if let Some(first) = findings.first_detail() {
            (
                Verdict::Fail,
                format!(
                    "{} of {counted} counted events did not take exactly one effect ({duplicated} \
                     more than once, {lost} acknowledged and lost); first: {first}",
                    findings.total()
                ),
            )
        } else if counted == 0 {
            (
                Verdict::Inconclusive,
                match &first_unreadable {
                    Some(e) => format!(
                        "not enough data: no event's effects could be read ({}); first: {e}",
                        store.source
                    ),
                    None => format!(
                        "not enough data: the consumer was asked about none of the {} events \
                         delivered",
                        self.events.len()
                    ),
                },
            )
        } else if once == 0 {
            (
                Verdict::Inconclusive,
                format!(
                    "not enough data: none of the {counted} counted events took an effect (none \
                     was acknowledged either)"
                ),
            )
        } else {
            let mut s = format!(
                "each of the {once} events that took an effect took exactly one ({} delivered, \
                 {counted} counted by {})",
                self.events.len(),
                store.source
            );
            if unreadable > 0 {
                s.push_str(&format!("; {unreadable} counts could not be read"));
            }
            (Verdict::Pass, s)
        };
        let mut result = base(verdict, summary)
            .metric("counted", counted)
            .metric("once", once)
            .metric("duplicated", duplicated)
            .metric("lost", lost)
            .metric("extra_effects", extra)
            .metric("unreadable", unreadable);
        if self.untracked > 0 {
            result = result.metric("untracked_deliveries", self.untracked);
        }
        if let (Some(e), true) = (first_unreadable, verdict != Verdict::Inconclusive) {
            result = result.evidence(Evidence {
                detail: format!("verify: a count could not be read: {e}"),
                key: None,
                seqs: Vec::new(),
            });
        }
        attach(result, findings)
    }
}

impl CheckSpec for EffectsOnceConfig {
    const NAME: &'static str = "effects_once";
    const ABOUT: About = About {
        catches: "a webhook event charged twice, or acknowledged and lost",
        how: "per event id, the consumer's count of effects (`verify`: URL, SQLite or PostgreSQL \
              with `{event_id}`) beside the deliveries the journal records",
        evidence: "the consumer counted at least one delivered event that took \
                   an effect, and every counted event took exactly one (none twice, none \
                   acknowledged with none)",
        limits: "needs `verify`; judges the events it asked about (at most 2000 a run); an effect \
                 the consumer does not count is not seen",
    };

    fn validate(&self) -> Result<(), Invalid> {
        match &self.verify {
            Some(v) if !v.is_complete() => Err(Invalid::new(
                "verify",
                "give `url` (with {event_id}), or `sqlite` or `postgres` with `query`",
            )),
            _ => Ok(()),
        }
    }

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(EffectsOnceCheck::new(ctx))
    }
}

#[cfg(test)]
mod tests {
    use history::{Facts, KeyCount, StoreCounts};
    use verdict::Verdict;

    use crate::testutil::{entry, judge_one, run_one};

    const NAME: &str = "effects_once";

    fn counts(c: &[(&str, Result<u64, &str>)]) -> Facts {
        Facts {
            effects: Some(StoreCounts {
                source: "GET /effects/{event_id}".into(),
                counts: Ok(c
                    .iter()
                    .map(|(k, n)| KeyCount {
                        key: k.to_string(),
                        count: n.map_err(str::to_string),
                    })
                    .collect()),
            }),
            ..Facts::default()
        }
    }

    /// Event e1 delivered twice together (both 200), e2 once, e3 refused (400) and never acked.
    fn journal() -> Vec<history::Entry> {
        vec![
            entry(1, 0)
                .delivery("e1", "in_1", "invoice.created", 1)
                .build(),
            entry(2, 0)
                .delivery("e1", "in_1", "invoice.created", 1)
                .build(),
            entry(3, 5)
                .delivery("e2", "in_1", "invoice.paid", 2)
                .build(),
            entry(4, 6)
                .delivery("e3", "in_2", "invoice.created", 1)
                .status(400)
                .build(),
            // A forgery, with an id of its own: not this check's.
            entry(5, 7)
                .delivery("f1", "in_2", "invoice.created", 1)
                .forged("signature")
                .status(400)
                .build(),
        ]
    }

    #[test]
    fn fails_an_event_that_took_two_effects() {
        let f = counts(&[("e1", Ok(2)), ("e2", Ok(1)), ("e3", Ok(0)), ("f1", Ok(1))]);
        let r = judge_one(NAME, "{}", &journal(), &f);
        assert_eq!(r.verdict, Verdict::Fail, "{r}");
        assert_eq!(r.evidence[0].key.as_deref(), Some("e1"));
        assert_eq!(r.evidence[0].seqs, vec![1, 2]);
        assert!(
            r.summary
                .contains("event e1 took 2 effects from 2 deliveries"),
            "{r}"
        );
        assert_eq!(r.metrics["duplicated"], 1);
        assert_eq!(r.metrics["extra_effects"], 1);
        // The forgery's effect is not counted here; e3 was never acknowledged.
        assert_eq!(r.metrics["lost"], 0);
    }

    #[test]
    fn fails_an_acknowledged_event_that_took_none() {
        let f = counts(&[("e1", Ok(1)), ("e2", Ok(0)), ("e3", Ok(0))]);
        let r = judge_one(NAME, "{}", &journal(), &f);
        assert_eq!(r.verdict, Verdict::Fail, "{r}");
        assert!(
            r.summary
                .contains("event e2 was acknowledged (2xx, seq 3) but took no effect"),
            "{r}"
        );
        assert_eq!(r.metrics["lost"], 1);
    }

    #[test]
    fn passes_when_every_counted_event_took_one() {
        let f = counts(&[("e1", Ok(1)), ("e2", Ok(1)), ("e3", Ok(0)), ("f1", Ok(0))]);
        let r = judge_one(NAME, "{}", &journal(), &f);
        assert_eq!(r.verdict, Verdict::Pass, "{r}");
        assert_eq!(r.metrics["once"], 2);
        assert_eq!(r.metrics["counted"], 3);
    }

    #[test]
    fn inconclusive_without_counts_or_deliveries() {
        let r = run_one(NAME, "{}", &journal());
        assert_eq!(r.verdict, Verdict::Inconclusive, "{r}");
        assert!(r.summary.contains("effects_once.verify"), "{r}");
        assert!(r.summary.contains("--verify URL_WITH_{event_id}"), "{r}");
        let plain = [entry(1, 0).key("k").build()];
        let r = judge_one(NAME, "{}", &plain, &counts(&[("k", Ok(2))]));
        assert_eq!(r.verdict, Verdict::Inconclusive, "{r}");
        let unreadable = counts(&[("e1", Err("answered 404")), ("e2", Err("answered 404"))]);
        let r = judge_one(NAME, "{}", &journal(), &unreadable);
        assert_eq!(r.verdict, Verdict::Inconclusive, "{r}");
        assert!(r.summary.contains("answered 404"), "{r}");
        let store_down = Facts {
            effects: Some(StoreCounts {
                source: "q".into(),
                counts: Err("connection refused".into()),
            }),
            ..Facts::default()
        };
        let r = judge_one(NAME, "{}", &journal(), &store_down);
        assert_eq!(r.verdict, Verdict::Inconclusive, "{r}");
        // Nothing took an effect and nothing was acknowledged: nothing to say about "once".
        let refused = [entry(1, 0).delivery("e9", "s", "t", 1).status(400).build()];
        let r = judge_one(NAME, "{}", &refused, &counts(&[("e9", Ok(0))]));
        assert_eq!(r.verdict, Verdict::Inconclusive, "{r}");
    }

    #[test]
    fn a_verify_source_must_be_one_thing() {
        for bad in [
            "{ verify: { query: q } }",
            "{ verify: { sqlite: a.db } }",
            "{ verify: { url: u, sqlite: a.db, query: q } }",
            "{ verify: { sqlite: a.db, postgres: \"postgres://x\", query: q } }",
        ] {
            let err = crate::ChecksConfig::from_yaml(&format!("effects_once: {bad}"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("effects_once.verify"), "{bad}: {err}");
        }
        for good in [
            "{ verify: { url: \"/effects/{event_id}\" } }",
            "{ verify: { sqlite: a.db, query: q } }",
            "{ verify: { postgres: \"postgres://x\", query: q } }",
        ] {
            crate::ChecksConfig::from_yaml(&format!("effects_once: {good}")).expect(good);
        }
    }
}
