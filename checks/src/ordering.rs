//! `ordering`: a subject whose events arrived out of order ends in the state of its logically
//! last event.
//!
//! Why: providers do not deliver in order — Stripe says so, a redelivery overtakes the events
//! after it, two workers race — and related events come in sequences (`invoice.created`, then
//! `invoice.paid`). A consumer that sets the subject's state from whatever arrived last ends an
//! invoice that was paid as merely created. The journal says, per subject, which events were
//! delivered in which order (their first deliveries, by the time they left) and which event is
//! logically last (`event_seq`); the consumer's own state for the subject, read after the run
//! through `verify_state` (a URL or an SQL query with `{subject}`), must be that event's type.
//!
//! Only subjects delivered out of order are judged (in order, any consumer ends right), and only
//! those whose last event was acknowledged (a consumer may rightly not have an event it refused).
//!
//! Metrics: `subjects`, `out_of_order`, `judged`, `wrong_state`, `unreadable`.

use std::collections::HashMap;
use std::path::PathBuf;

use history::Facts;
use serde::{Deserialize, Serialize};
use verdict::{CheckResult, Verdict};

use super::evidence::{attach, Findings};
use super::spec::{About, CheckSpec, Invalid};
use super::{Attempt, Check, Context};

/// Where to read the state each subject ended in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StateConfig {
    /// A URL (or a path on the target) with `{subject}`, answering JSON with the state; a 404
    /// means the consumer has no state for the subject.
    #[serde(default)]
    pub url: Option<String>,
    /// The JSON field holding the state (default `type`: the type of the event that set it).
    #[serde(default = "state_field")]
    pub field: String,
    /// An SQLite database file to query instead.
    #[serde(default)]
    pub sqlite: Option<PathBuf>,
    /// A PostgreSQL database (`postgres://…`) to query instead.
    #[serde(default)]
    pub postgres: Option<String>,
    /// The SQL returning the state of one subject (`{subject}`, or `?1` / `$1`); no row means no
    /// state.
    #[serde(default)]
    pub query: Option<String>,
}

fn state_field() -> String {
    "type".to_string()
}

/// Configuration of the `ordering` check.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct OrderingConfig {
    /// After a harness run, read each subject's final state from the consumer's system of
    /// record. Ignored by `analyze`.
    pub verify_state: Option<StateConfig>,
}

/// One event of a subject: its place, type, when its first delivery left, whether acknowledged.
#[derive(Debug, Clone)]
struct Seen {
    seq: u32,
    event_type: String,
    first_us: u64,
    first_seq: u64,
    acknowledged: bool,
}

/// Most events per subject followed (a sequence has at most 64 types).
const EVENTS_PER_SUBJECT: usize = 64;

/// The `ordering` check.
pub(crate) struct OrderingCheck {
    subjects: HashMap<String, Vec<Seen>>,
    max_evidence: usize,
}

impl OrderingCheck {
    pub(crate) fn new(ctx: Context) -> Self {
        OrderingCheck {
            subjects: HashMap::new(),
            max_evidence: ctx.max_evidence,
        }
    }
}

/// A subject's events in the order their first deliveries left, if that is not their logical
/// order; and its logically last event.
fn out_of_order(events: &[Seen]) -> Option<(Vec<&Seen>, &Seen)> {
    let mut by_arrival: Vec<&Seen> = events.iter().collect();
    by_arrival.sort_by_key(|s| (s.first_us, s.first_seq));
    let ordered = by_arrival.windows(2).all(|w| w[0].seq < w[1].seq);
    let last = events.iter().max_by_key(|s| s.seq)?;
    (!ordered).then_some((by_arrival, last))
}

impl Check for OrderingCheck {
    fn name(&self) -> &'static str {
        "ordering"
    }

    fn observe(&mut self, a: &Attempt<'_>) {
        let e = a.entry;
        if !e.is_genuine_delivery() {
            return;
        }
        let (Some(subject), Some(seq), Some(t)) = (&e.resource, e.event_seq, &e.event_type) else {
            return;
        };
        if !self.subjects.contains_key(subject) {
            if self.subjects.len() >= super::effects_once::EVENTS_KEPT {
                return;
            }
            self.subjects.insert(subject.clone(), Vec::new());
        }
        let Some(events) = self.subjects.get_mut(subject) else {
            return;
        };
        let acked = e.answered() && e.status.is_some_and(|s| (200..300).contains(&s));
        if let Some(s) = events.iter_mut().find(|s| s.seq == seq) {
            s.acknowledged |= acked;
            if e.t_recv_us < s.first_us {
                s.first_us = e.t_recv_us;
                s.first_seq = e.seq;
            }
        } else if events.len() < EVENTS_PER_SUBJECT {
            events.push(Seen {
                seq,
                event_type: t.clone(),
                first_us: e.t_recv_us,
                first_seq: e.seq,
                acknowledged: acked,
            });
        }
    }

    fn finish(self: Box<Self>, facts: &Facts) -> CheckResult {
        let disordered: HashMap<&str, (Vec<&Seen>, &Seen)> = self
            .subjects
            .iter()
            .filter_map(|(k, v)| Some((k.as_str(), out_of_order(v)?)))
            .collect();
        let base = |verdict, summary: String| {
            CheckResult::new("ordering", verdict, summary)
                .metric("subjects", self.subjects.len() as u64)
                .metric("out_of_order", disordered.len() as u64)
        };
        if disordered.is_empty() {
            return base(
                Verdict::Inconclusive,
                format!(
                    "not enough data: none of {} subjects had its events delivered out of order \
                     (give `--reorder F`; in a scenario `reorder`: a share of subjects)",
                    self.subjects.len()
                ),
            );
        }
        let Some(store) = &facts.states else {
            return base(
                Verdict::Inconclusive,
                format!(
                    "not enough data: {} subjects were delivered out of order, but their final \
                     state was not read (give `--verify-state URL_WITH_{{subject}}`; in a \
                     scenario `ordering.verify_state`: a URL or query with {{subject}})",
                    disordered.len()
                ),
            );
        };
        let states = match &store.states {
            Ok(s) => s,
            Err(e) => {
                return base(
                    Verdict::Inconclusive,
                    format!(
                        "not enough data: the states could not be read ({}): {e}",
                        store.source
                    ),
                )
            }
        };
        let mut findings = Findings::new(self.max_evidence);
        let (mut judged, mut unreadable) = (0u64, 0u64);
        let mut first_unreadable = None;
        for k in states {
            let Some((arrival, last)) = disordered.get(k.key.as_str()) else {
                continue;
            };
            if !last.acknowledged {
                continue;
            }
            let state = match &k.state {
                Ok(s) => s.as_deref(),
                Err(e) => {
                    unreadable += 1;
                    first_unreadable.get_or_insert_with(|| format!("{}: {e}", k.key));
                    continue;
                }
            };
            judged += 1;
            if state == Some(last.event_type.as_str()) {
                continue;
            }
            let order: Vec<String> = arrival
                .iter()
                .map(|s| format!("{} ({})", s.event_type, s.seq))
                .collect();
            findings.push(
                format!(
                    "subject {} ended in {}, not {} (its logically last event): its events \
                     arrived as {}",
                    k.key,
                    state.map_or_else(|| "no state".to_string(), |s| format!("state {s}")),
                    last.event_type,
                    order.join(" → ")
                ),
                Some(k.key.clone()),
                arrival.iter().map(|s| s.first_seq).collect(),
            );
        }
        let (verdict, summary) = if let Some(first) = findings.first_detail() {
            (
                Verdict::Fail,
                format!(
                    "{} of {judged} subjects delivered out of order ended in the wrong state; \
                     first: {first}",
                    findings.total()
                ),
            )
        } else if judged == 0 {
            (
                Verdict::Inconclusive,
                match first_unreadable {
                    Some(e) => format!(
                        "not enough data: no subject's state could be read ({}); first: {e}",
                        store.source
                    ),
                    None => format!(
                        "not enough data: {} subjects were delivered out of order, but none was \
                         both acknowledged and asked about",
                        disordered.len()
                    ),
                },
            )
        } else {
            (
                Verdict::Pass,
                format!(
                    "all {judged} subjects delivered out of order ended in their logically last \
                     event's state"
                ),
            )
        };
        let result = base(verdict, summary)
            .metric("judged", judged)
            .metric("wrong_state", findings.total())
            .metric("unreadable", unreadable);
        attach(result, findings)
    }
}

impl CheckSpec for OrderingConfig {
    const NAME: &'static str = "ordering";
    const ABOUT: About = About {
        catches: "a webhook consumer whose state follows arrival order, not event order",
        how: "per subject delivered out of order (journal `resource`, `event_seq`), the \
              consumer's final state (`verify_state`: URL or query with `{subject}`) must be its \
              logically last event's type",
        evidence: "at least one subject was delivered out of order, had its \
                   last event acknowledged and its state read, and every such state was right",
        limits: "needs `verify_state`; compares the state with the event type (a consumer that \
                 stores another name needs a query that returns the type)",
    };

    fn validate(&self) -> Result<(), Invalid> {
        if let Some(s) = &self.verify_state {
            let sql = s.sqlite.is_some() || s.postgres.is_some();
            let both = s.sqlite.is_some() && s.postgres.is_some();
            if both || s.url.is_some() == sql || (sql != s.query.is_some()) {
                return Err(Invalid::new(
                    "verify_state",
                    "give `url` (with {subject}), or `sqlite` or `postgres` with `query`",
                ));
            }
        }
        Ok(())
    }

    fn build(&self, ctx: Context) -> Box<dyn Check> {
        Box::new(OrderingCheck::new(ctx))
    }
}

#[cfg(test)]
mod tests {
    use history::{Facts, KeyState, StoreStates};
    use verdict::Verdict;

    use crate::testutil::{entry, judge_one, run_one};

    const NAME: &str = "ordering";

    fn states(s: &[(&str, Option<&str>)]) -> Facts {
        Facts {
            states: Some(StoreStates {
                source: "GET /state/{subject}".into(),
                states: Ok(s
                    .iter()
                    .map(|(k, v)| KeyState {
                        key: k.to_string(),
                        state: Ok(v.map(str::to_string)),
                    })
                    .collect()),
            }),
            ..Facts::default()
        }
    }

    /// in_1 delivered reversed (paid, then created), in_2 in order.
    fn journal() -> Vec<history::Entry> {
        vec![
            entry(1, 0)
                .delivery("e2", "in_1", "invoice.paid", 2)
                .build(),
            entry(2, 5)
                .delivery("e1", "in_1", "invoice.created", 1)
                .build(),
            entry(3, 6)
                .delivery("e3", "in_2", "invoice.created", 1)
                .build(),
            entry(4, 7)
                .delivery("e4", "in_2", "invoice.paid", 2)
                .build(),
        ]
    }

    #[test]
    fn fails_a_reordered_subject_left_in_the_last_arrived_state() {
        let f = states(&[
            ("in_1", Some("invoice.created")),
            ("in_2", Some("invoice.paid")),
        ]);
        let r = judge_one(NAME, "{}", &journal(), &f);
        assert_eq!(r.verdict, Verdict::Fail, "{r}");
        assert!(
            r.summary
                .contains("subject in_1 ended in state invoice.created, not invoice.paid"),
            "{r}"
        );
        assert!(
            r.summary.contains("invoice.paid (2) → invoice.created (1)"),
            "{r}"
        );
        assert_eq!(r.evidence[0].seqs, vec![1, 2]);
        let f = states(&[("in_1", None)]);
        assert_eq!(judge_one(NAME, "{}", &journal(), &f).verdict, Verdict::Fail);
    }

    #[test]
    fn passes_a_reordered_subject_in_the_logically_last_state() {
        let f = states(&[
            ("in_1", Some("invoice.paid")),
            ("in_2", Some("invoice.created")),
        ]);
        let r = judge_one(NAME, "{}", &journal(), &f);
        // in_2 came in order: not judged, whatever its state.
        assert_eq!(r.verdict, Verdict::Pass, "{r}");
        assert_eq!(r.metrics["judged"], 1);
        assert_eq!(r.metrics["out_of_order"], 1);
    }

    #[test]
    fn a_redelivery_does_not_move_an_events_first_arrival() {
        // e1 first left at 0 ms; its redelivery after e2 does not make the subject reordered.
        let j = [
            entry(1, 0)
                .delivery("e1", "in_1", "invoice.created", 1)
                .status(500)
                .build(),
            entry(2, 5)
                .delivery("e2", "in_1", "invoice.paid", 2)
                .build(),
            entry(3, 90)
                .delivery("e1", "in_1", "invoice.created", 1)
                .attempt(2)
                .build(),
        ];
        let r = judge_one(
            NAME,
            "{}",
            &j,
            &states(&[("in_1", Some("invoice.created"))]),
        );
        assert_eq!(r.verdict, Verdict::Inconclusive, "{r}");
    }

    #[test]
    fn inconclusive_without_states_disorder_or_an_acknowledged_last_event() {
        let r = run_one(NAME, "{}", &journal());
        assert_eq!(r.verdict, Verdict::Inconclusive, "{r}");
        assert!(r.summary.contains("ordering.verify_state"), "{r}");
        assert!(
            r.summary.contains("--verify-state URL_WITH_{subject}"),
            "{r}"
        );
        let in_order = &journal()[2..];
        let r = judge_one(NAME, "{}", in_order, &states(&[("in_2", Some("x"))]));
        assert_eq!(r.verdict, Verdict::Inconclusive, "{r}");
        assert!(r.summary.contains("(give `--reorder F`"), "{r}");
        let refused = [
            entry(1, 0)
                .delivery("e2", "in_1", "invoice.paid", 2)
                .status(400)
                .build(),
            entry(2, 5)
                .delivery("e1", "in_1", "invoice.created", 1)
                .build(),
        ];
        let r = judge_one(
            NAME,
            "{}",
            &refused,
            &states(&[("in_1", Some("invoice.created"))]),
        );
        assert_eq!(r.verdict, Verdict::Inconclusive, "{r}");
    }

    #[test]
    fn a_state_source_must_be_one_thing() {
        let err = crate::ChecksConfig::from_yaml("ordering: { verify_state: { query: x } }")
            .unwrap_err()
            .to_string();
        assert!(err.contains("ordering.verify_state"), "{err}");
        assert!(crate::ChecksConfig::from_yaml(
            "ordering: { verify_state: { url: \"/state/{subject}\" } }"
        )
        .is_ok());
        assert!(crate::ChecksConfig::from_yaml(
            "ordering: { verify_state: { postgres: \"postgres://x\", query: q } }"
        )
        .is_ok());
    }
}
