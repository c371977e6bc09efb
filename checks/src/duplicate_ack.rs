//! `duplicate_ack`: a redelivery of an event the consumer already processed was answered 2xx.
//!
//! Why: a provider counts a delivery acknowledged on a 2xx alone. A consumer that deduplicates
//! correctly but answers a duplicate with `409 Conflict` or `500` ("already done") has told the
//! provider to try again — and it will, on its schedule, for hours or days, each redelivery
//! answered the same way, until it gives up and (at Stripe, at Svix) disables the endpoint. The
//! right answer to a duplicate is the answer to the original: 2xx.
//!
//! Which deliveries are redeliveries of a processed event, from the journal: a genuine delivery
//! of an event sent after an earlier delivery of the same event was acknowledged (its 2xx had
//! arrived before this one left), or after an earlier delivery whose answer the sender dropped
//! on purpose (`lost_ack`: the consumer had the whole request) when the consumer's count says the
//! event took its effect (`effects_once.verify`). Copies sent together are not judged against
//! each other — neither had been processed when the other left — but their redeliveries are. So
//! `harness deliver` sends part of a duplicated event's copies after the first was answered (its
//! default `spacing`, `mixed`), and a run with duplicates has something to judge.
//!
//! Inconclusive, the summary says what was missing and the flag that supplies it: no event sent
//! twice (`--duplicates`), copies sent only together (`--spacing`), dropped answers whose effects
//! were not counted (`--verify`), or nothing acknowledged at all.
//!
//! `on_failure: weak` makes a non-2xx answer to a duplicate a weak verdict instead of a failure
//! (for consumers whose provider is known to tolerate it).
//!
//! Metrics: `redeliveries` (the deliveries judged), `acknowledged`, `not_acknowledged`,
//! `sent_together` (copies that left while another copy of the event was in flight: not judged),
//! `by_status_<code>`.

use std::collections::{BTreeMap, HashMap};

use history::{Facts, Outcome};
use serde::{Deserialize, Serialize};
use verdict::{CheckResult, Verdict};

use super::evidence::{attach, Findings};
use super::spec::{About, CheckSpec};
use super::{Attempt, Check, Context};

/// What a non-2xx answer to a duplicate makes of the check.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum OnFailure {
    /// The check fails (the default).
    #[default]
    Fail,
    /// The check is weak: it does not fail the run.
    Weak,
}

/// Configuration of the `duplicate_ack` check.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct DuplicateAckConfig {
    /// `fail` (default) or `weak`: the verdict when a duplicate was not answered 2xx.
    pub on_failure: OnFailure,
}

/// Deliveries of one event kept (its copies and their redeliveries); beyond, counted only.
const DELIVERIES_KEPT: usize = 128;

/// One genuine delivery, as the check needs it.
#[derive(Debug, Clone, Copy)]
struct Delivery {
    seq: u64,
    t_recv_us: u64,
    t_done_us: u64,
    /// The status, when an answer arrived.
    status: Option<u16>,
    dropped: bool,
    /// The request reached the consumer (not a connection that could not be made).
    reached: bool,
    attempt: u32,
}

/// The `duplicate_ack` check.
pub(crate) struct DuplicateAckCheck {
    cfg: DuplicateAckConfig,
    events: HashMap<String, Vec<Delivery>>,
    max_evidence: usize,
}

impl DuplicateAckCheck {
    pub(crate) fn new(cfg: &DuplicateAckConfig, ctx: Context) -> Self {
        DuplicateAckCheck {
            cfg: cfg.clone(),
            events: HashMap::new(),
            max_evidence: ctx.max_evidence,
        }
    }
}

impl Check for DuplicateAckCheck {
    fn name(&self) -> &'static str {
        "duplicate_ack"
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        let e = a.entry;
        if !e.is_genuine_delivery() {
            return;
        }
        let Some(id) = &e.idempotency_key else { return };
        if !self.events.contains_key(id) {
            if self.events.len() >= super::effects_once::EVENTS_KEPT {
                return;
            }
            self.events.insert(id.clone(), Vec::new());
        }
        let Some(list) = self.events.get_mut(id) else {
            return;
        };
        if list.len() < DELIVERIES_KEPT {
            list.push(Delivery {
                seq: e.seq,
                t_recv_us: e.t_recv_us,
                t_done_us: e.t_done_us,
                status: e.status.filter(|_| e.answered()),
                dropped: e.answer_dropped,
                // A connection that was never made (the journal's `client_closed` with nothing
                // sent) reached nobody.
                reached: e.answered() || e.answer_dropped || e.outcome != Outcome::ClientClosed,
                attempt: e.delivery_attempt.unwrap_or(1),
            });
        }
    }

    fn finish(self: Box<Self>, facts: &Facts) -> CheckResult {
        let took_effect: HashMap<&str, u64> = match facts.effects.as_ref().map(|s| &s.counts) {
            Some(Ok(c)) => c
                .iter()
                .filter_map(|k| Some((k.key.as_str(), *k.count.as_ref().ok()?)))
                .collect(),
            _ => HashMap::new(),
        };
        let mut findings = Findings::new(self.max_evidence);
        let mut by_status: BTreeMap<String, u64> = BTreeMap::new();
        let (mut judged, mut acked) = (0u64, 0u64);
        let ok = |s: Option<u16>| s.is_some_and(|s| (200..300).contains(&s));
        let counted = matches!(facts.effects.as_ref().map(|s| &s.counts), Some(Ok(_)));
        // What the journal held instead, for an inconclusive verdict's reason.
        let mut seen = Seen::default();
        for (id, list) in &self.events {
            let effect = took_effect.get(id.as_str()).is_some_and(|n| *n > 0);
            let reached = list.iter().filter(|d| d.reached).count();
            seen.repeated |= reached > 1;
            seen.acknowledged |= list.iter().any(|d| ok(d.status));
            seen.dropped_uncounted |= !counted && reached > 1 && list.iter().any(|d| d.dropped);
            for d in list {
                if d.dropped || !d.reached {
                    continue;
                }
                // Processed before this one left: an acknowledgement that had arrived, or a
                // dropped answer to a whole request whose effect the consumer counts.
                let after = list.iter().any(|p| {
                    p.seq != d.seq
                        && p.t_done_us <= d.t_recv_us
                        && (ok(p.status) || (p.dropped && effect))
                });
                if !after {
                    let overlaps = list.iter().any(|p| {
                        p.seq != d.seq && p.t_recv_us < d.t_done_us && d.t_recv_us < p.t_done_us
                    });
                    seen.together += u64::from(overlaps);
                    continue;
                }
                judged += 1;
                let label = d
                    .status
                    .map_or_else(|| "no answer".to_string(), |s| s.to_string());
                *by_status.entry(label.clone()).or_default() += 1;
                if ok(d.status) {
                    acked += 1;
                    continue;
                }
                let got = if d.status.is_some() {
                    format!("a {label}")
                } else {
                    label
                };
                let which = if d.attempt > 1 {
                    format!("its redelivery (attempt {})", d.attempt)
                } else {
                    "a copy delivered after that".to_string()
                };
                findings.push(
                    format!(
                        "event {id} was already processed, and {which} got {got}: the provider \
                         will deliver it again"
                    ),
                    Some(id.clone()),
                    vec![d.seq],
                );
            }
        }
        let (verdict, summary) = if let Some(first) = findings.first_detail() {
            let verdict = match self.cfg.on_failure {
                OnFailure::Fail => Verdict::Fail,
                OnFailure::Weak => Verdict::Weak,
            };
            (
                verdict,
                format!(
                    "{} of {judged} deliveries of events already processed (later copies, \
                     redeliveries) were not acknowledged; first: {first}",
                    findings.total()
                ),
            )
        } else if judged == 0 {
            (
                Verdict::Inconclusive,
                format!(
                    "not enough data: no event was delivered again after it was processed: {}",
                    seen.reason()
                ),
            )
        } else {
            let together = match seen.together {
                0 => String::new(),
                n => format!(
                    " ({n} deliveries that left while another of their event was in flight were \
                     not judged)"
                ),
            };
            (
                Verdict::Pass,
                format!(
                    "all {judged} deliveries of events already processed (later copies, \
                     redeliveries) were answered 2xx{together}"
                ),
            )
        };
        let mut result = CheckResult::new("duplicate_ack", verdict, summary)
            .metric("redeliveries", judged)
            .metric("acknowledged", acked)
            .metric("not_acknowledged", findings.total())
            .metric("sent_together", seen.together);
        for (s, n) in by_status {
            result = result.metric(&format!("by_status_{}", s.replace(' ', "_")), n);
        }
        attach(result, findings)
    }
}

/// What the journal held besides redeliveries of processed events.
#[derive(Debug, Default)]
struct Seen {
    /// An event reached the consumer more than once.
    repeated: bool,
    /// A delivery was answered 2xx.
    acknowledged: bool,
    /// An event delivered again after a dropped answer, its effects not counted.
    dropped_uncounted: bool,
    /// Deliveries, not judged, that left while another of the same event was in flight.
    together: u64,
}

impl Seen {
    /// Why nothing could be judged, and the flag (or scenario field) that would change it.
    fn reason(&self) -> String {
        if !self.repeated {
            "no event reached the consumer more than once (give `--duplicates F` or `--lost-ack \
             F`; in a scenario `duplicates` or `lost_ack`)"
                .into()
        } else if self.dropped_uncounted {
            "events were delivered again after a dropped answer, but whether they had been \
             processed is the consumer's to say (give `--verify URL_WITH_{event_id}`; in a \
             scenario `effects_once.verify`)"
                .into()
        } else if !self.acknowledged {
            "no delivery was acknowledged (2xx), so no event is known to have been processed".into()
        } else if self.together > 0 {
            format!(
                "the {} deliveries of events sent more than once all left while another of \
                 their event was in flight, none after one was answered (leave `--spacing` at \
                 `mixed`, its default, or give a gap; in a scenario `spacing`)",
                self.together
            )
        } else {
            "every delivery sent again followed one that was not acknowledged".into()
        }
    }
}

impl CheckSpec for DuplicateAckConfig {
    const NAME: &'static str = "duplicate_ack";
    const ABOUT: About = About {
        catches: "a duplicate webhook answered 409 or 5xx, so the provider redelivers it again",
        how: "each genuine delivery of an event sent after an earlier one was acknowledged — a \
              copy sent after the first was answered (`spacing: mixed`, the default, sends part of \
              them so) or a redelivery — or after one whose answer was dropped when the event took \
              effect, must be answered 2xx",
        evidence: "at least one redelivery of an already processed event was \
                   seen and every one was answered 2xx (`on_failure: weak` makes a miss weak)",
        limits: "copies sent together are judged only through their redeliveries (with \
                 `spacing: together` only redeliveries are judged); an answer dropped by the \
                 sender counts as processed only with `effects_once.verify`",
    };

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(DuplicateAckCheck::new(self, ctx))
    }
}

#[cfg(test)]
mod tests {
    use history::{Facts, KeyCount, Outcome, StoreCounts};
    use verdict::Verdict;

    use crate::testutil::{entry, judge_one, run_one};

    const NAME: &str = "duplicate_ack";

    fn d(seq: u64, t: f64, id: &str) -> history::sample::EntryBuilder {
        entry(seq, t).delivery(id, "in_1", "invoice.paid", 2)
    }

    #[test]
    fn fails_a_duplicate_answered_500_after_the_ack() {
        // Two copies together: one 200, one 500 (neither judged), then the 500's redelivery.
        let j = [
            d(1, 0.0, "e1").build(),
            d(2, 0.0, "e1").status(500).build(),
            d(3, 100.0, "e1").attempt(2).status(500).build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{r}");
        assert_eq!(r.evidence[0].seqs, vec![3]);
        assert!(
            r.summary.contains("redelivery (attempt 2) got a 500"),
            "{r}"
        );
        assert_eq!(r.metrics["redeliveries"], 1);
        assert_eq!(r.metrics["by_status_500"], 1);
        let r = run_one(NAME, "{ on_failure: weak }", &j);
        assert_eq!(r.verdict, Verdict::Weak, "{r}");
    }

    #[test]
    fn a_409_after_a_dropped_answer_fails_when_the_event_took_effect() {
        let j = [
            d(1, 0.0, "e1").answer_dropped().build(),
            d(2, 50.0, "e1").attempt(2).status(409).build(),
        ];
        // Without the consumer's count, the dropped answer proves nothing was processed.
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Inconclusive, "{r}");
        assert!(r.summary.contains("--verify URL_WITH_{event_id}"), "{r}");
        let facts = Facts {
            effects: Some(StoreCounts {
                source: "q".into(),
                counts: Ok(vec![KeyCount {
                    key: "e1".into(),
                    count: Ok(1),
                }]),
            }),
            ..Facts::default()
        };
        let r = judge_one(NAME, "{}", &j, &facts);
        assert_eq!(r.verdict, Verdict::Fail, "{r}");
        assert!(r.summary.contains("got a 409"), "{r}");
    }

    #[test]
    fn a_copy_sent_after_the_ack_is_judged_and_copies_together_are_not() {
        // e1: two copies together, then a third after both were answered, answered 409.
        let j = [
            d(1, 0.0, "e1").took(5.0).build(),
            d(2, 1.0, "e1").took(5.0).build(),
            d(3, 10.0, "e1").status(409).build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{r}");
        assert!(
            r.summary
                .contains("a copy delivered after that got a 409: the provider will deliver"),
            "{r}"
        );
        assert_eq!(r.evidence[0].seqs, vec![3]);
        assert_eq!(r.metrics["redeliveries"], 1, "{r}");
        assert_eq!(r.metrics["sent_together"], 2, "{r}");
        let fine = [
            d(1, 0.0, "e1").took(5.0).build(),
            d(2, 1.0, "e1").took(5.0).build(),
            d(3, 10.0, "e1").build(),
        ];
        let r = run_one(NAME, "{}", &fine);
        assert_eq!(r.verdict, Verdict::Pass, "{r}");
        assert!(
            r.summary.contains("2 deliveries that left while another"),
            "{r}"
        );
    }

    #[test]
    fn an_inconclusive_verdict_names_what_would_decide_it() {
        let cases: [(&[history::Entry], &str); 4] = [
            (
                &[d(1, 0.0, "e1").build(), d(2, 5.0, "e2").build()],
                "no event reached the consumer more than once (give `--duplicates F`",
            ),
            (
                &[
                    d(1, 0.0, "e1").took(5.0).build(),
                    d(2, 1.0, "e1").took(5.0).build(),
                ],
                "none after one was answered (leave `--spacing` at `mixed`",
            ),
            (
                &[
                    d(1, 0.0, "e1").status(500).build(),
                    d(2, 10.0, "e1").attempt(2).status(500).build(),
                ],
                "no delivery was acknowledged (2xx)",
            ),
            (
                &[
                    d(1, 0.0, "e1").answer_dropped().build(),
                    d(2, 10.0, "e1").attempt(2).build(),
                ],
                "(give `--verify URL_WITH_{event_id}`",
            ),
        ];
        for (journal, says) in cases {
            let r = run_one(NAME, "{}", journal);
            assert_eq!(r.verdict, Verdict::Inconclusive, "{r}");
            assert!(r.summary.contains(says), "{says}: {r}");
        }
    }

    #[test]
    fn passes_duplicates_answered_2xx() {
        let j = [
            d(1, 0.0, "e1").build(),
            d(2, 0.0, "e1").build(),
            d(3, 10.0, "e1").status(204).build(),
            d(4, 20.0, "e2").status(503).build(),
            // e2's redelivery after a 503: the event was not processed before, not judged.
            d(5, 30.0, "e2").attempt(2).build(),
            d(6, 40.0, "e2").attempt(3).build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Pass, "{r}");
        assert_eq!(r.metrics["redeliveries"], 2);
    }

    #[test]
    fn a_timeout_on_a_duplicate_is_a_miss_and_nothing_to_judge_is_inconclusive() {
        let j = [
            d(1, 0.0, "e1").build(),
            d(2, 10.0, "e1")
                .no_response(Outcome::Hung)
                .took(10_000.0)
                .build(),
        ];
        let r = run_one(NAME, "{}", &j);
        assert_eq!(r.verdict, Verdict::Fail, "{r}");
        assert!(r.summary.contains("got no answer"), "{r}");
        let once = [d(1, 0.0, "e1").build(), d(2, 5.0, "e2").build()];
        assert_eq!(run_one(NAME, "{}", &once).verdict, Verdict::Inconclusive);
        // A connection that could not be made reached nobody.
        let refused = [
            d(1, 0.0, "e1").build(),
            d(2, 10.0, "e1").no_response(Outcome::ClientClosed).build(),
        ];
        assert_eq!(run_one(NAME, "{}", &refused).verdict, Verdict::Inconclusive);
    }
}
