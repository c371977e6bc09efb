//! `repeated_request`: a PUT or DELETE sent again, and several at once, must leave the state one
//! leaves, and a client that repeats it must not get a server error for it.
//!
//! Why: RFC 9110 (§9.2.2) makes PUT and DELETE idempotent, and clients, proxies and retry
//! libraries rely on it: they repeat either after a timeout without asking whether the first got
//! through. So a repeat of a PUT succeeds as the first did and its resource is there once (the
//! collection holds as many items as after the first PUT); a repeated DELETE may say the
//! resource is gone (404, 410) or succeed, and the resource's GET then finds nothing. Neither
//! may be answered with a server error, alone or concurrently (a race in the server's handling
//! shows there, as a 5xx or a dropped connection).
//!
//! Read from the exchanges a probe recorded, grouped by the part each played ([`Repeated`]), and
//! the collection's size after the first request and at the end when the probe could count it.

use verdict::{CheckResult, Verdict};

use crate::exchange::{statuses, Exchange};

/// The check's name, as its result carries it.
pub const NAME: &str = "repeated_request";

/// What a probe of a PUT or DELETE recorded.
#[derive(Debug, Clone, Copy)]
pub struct Repeated<'h> {
    /// The request, answered 2xx; its entry's method (`PUT` or `DELETE`) says which promise is
    /// judged.
    pub first: Exchange<'h>,
    /// The same request sent again, one after another.
    pub repeats: &'h [Exchange<'h>],
    /// Copies sent at once (a DELETE's on a fresh resource); none when they were not sent.
    pub concurrent: &'h [Exchange<'h>],
    /// The resource's GET after the repeats, when there is one.
    pub after_repeats: Option<Exchange<'h>>,
    /// The resource's GET after the concurrent requests.
    pub after_burst: Option<Exchange<'h>>,
    /// The collection's size after the first request and at the end.
    pub listed: Option<(usize, usize)>,
}

/// The verdict on what a probe of a PUT or DELETE recorded.
pub fn judge(r: &Repeated<'_>) -> CheckResult {
    let method = r.first.entry.method.as_str();
    if let Some(x) = server_error(r.repeats) {
        return fail(
            &x,
            format!(
                "the same {method} sent again was answered {}: a client's retry gets an error",
                x.answered()
            ),
        );
    }
    if let Some(x) = server_error(r.concurrent) {
        return fail(
            &x,
            format!(
                "concurrent identical {method}s: one was answered {}",
                x.answered()
            ),
        );
    }
    if method == "PUT" {
        if let Some(x) = r
            .repeats
            .iter()
            .find(|x| x.status().is_some_and(|s| !(200..300).contains(&s)))
        {
            return fail(
                x,
                format!(
                    "the same PUT sent again was answered {}: PUT is idempotent, a repeat must \
                     succeed as the first did",
                    x.answered()
                ),
            );
        }
        for (x, g) in [got(r.after_repeats), got(r.after_burst)]
            .into_iter()
            .flatten()
        {
            if !(200..300).contains(&g) {
                return fail(
                    &x,
                    format!(
                        "the resource the PUT answered {} for is not there: its GET answered {g}",
                        first_status(r)
                    ),
                );
            }
        }
        if let Some((x, y)) = r.listed {
            if y != x {
                return fail(
                    &r.first,
                    format!(
                        "repeated and concurrent PUTs of one resource changed the list from {x} \
                         to {y} items: two PUTs must leave one resource"
                    ),
                );
            }
        }
        return CheckResult::new(
            NAME,
            Verdict::Pass,
            format!(
                "repeated and concurrent PUTs answered {}; the resource is there once",
                statuses(r.repeats.iter().chain(r.concurrent))
            ),
        );
    }
    if let Some((x, g)) = got(r.after_repeats).filter(|(_, g)| (200..300).contains(g)) {
        return fail(
            &x,
            format!(
                "DELETE answered {} yet the resource's GET still answers {g}",
                first_status(r)
            ),
        );
    }
    if let Some((x, g)) = got(r.after_burst).filter(|(_, g)| (200..300).contains(g)) {
        return fail(
            &x,
            format!("after concurrent DELETEs the resource's GET still answers {g}"),
        );
    }
    CheckResult::new(
        NAME,
        Verdict::Pass,
        format!(
            "a repeated DELETE answered {}, concurrent ones {}; never a 5xx",
            statuses(r.repeats),
            if r.concurrent.is_empty() {
                "were not sent".to_string()
            } else {
                statuses(r.concurrent)
            }
        ),
    )
}

/// The first exchange of `set` answered with a server error, or not answered at all.
fn server_error<'h>(set: &[Exchange<'h>]) -> Option<Exchange<'h>> {
    set.iter()
        .find(|x| x.status().is_none_or(|s| s >= 500))
        .copied()
}

/// A GET that was answered, with its status.
fn got(g: Option<Exchange<'_>>) -> Option<(Exchange<'_>, u16)> {
    g.and_then(|x| x.status().map(|s| (x, s)))
}

/// A failure, the exchange that shows it as its evidence.
fn fail(x: &Exchange<'_>, summary: String) -> CheckResult {
    CheckResult::new(NAME, Verdict::Fail, summary.clone()).evidence(x.evidence(summary))
}

/// The first answer's status (it is a 2xx: the probe judges nothing otherwise).
fn first_status(r: &Repeated<'_>) -> String {
    r.first
        .status()
        .map_or_else(|| "no answer".to_string(), |s| s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use history::sample::entry;
    use history::{Entry, Outcome};

    fn e(seq: u64, method: &str, status: u16) -> Entry {
        entry(seq, seq as f64)
            .at(method, "/things/t-1")
            .status(status)
            .build()
    }

    fn x(entry: &Entry) -> Exchange<'_> {
        Exchange { entry, said: "" }
    }

    #[test]
    fn a_second_delete_may_answer_404_but_never_5xx() {
        let first = e(1, "DELETE", 204);
        let again = [e(2, "DELETE", 404), e(3, "DELETE", 404)];
        let together = [e(4, "DELETE", 204), e(5, "DELETE", 404)];
        let gone = e(6, "GET", 404);
        let (again, together) = (again.each_ref().map(x), together.each_ref().map(x));
        let probe = Repeated {
            first: x(&first),
            repeats: &again,
            concurrent: &together,
            after_repeats: Some(x(&gone)),
            after_burst: Some(x(&gone)),
            listed: None,
        };
        let r = judge(&probe);
        r.assert_passes();
        assert_eq!(
            r.summary,
            "a repeated DELETE answered 404×2, concurrent ones 204×1, 404×1; never a 5xx"
        );
        let failed = e(2, "DELETE", 500);
        let failed = [Exchange {
            entry: &failed,
            said: "oops",
        }];
        let r = judge(&Repeated {
            repeats: &failed,
            ..probe
        });
        r.assert_fails();
        assert_eq!(
            r.summary,
            "the same DELETE sent again was answered 500: \"oops\": a client's retry gets an error"
        );
        assert_eq!(r.evidence[0].seqs, [2]);
        let still = e(6, "GET", 200);
        let kept = judge(&Repeated {
            after_repeats: Some(x(&still)),
            ..probe
        });
        kept.assert_fails();
        assert!(kept.summary.contains("still answers 200"), "{kept}");
    }

    #[test]
    fn two_puts_leave_one_resource() {
        let first = e(1, "PUT", 201);
        let reps = [e(2, "PUT", 200), e(3, "PUT", 200)];
        let there = e(4, "GET", 200);
        let reps = reps.each_ref().map(x);
        let probe = Repeated {
            first: x(&first),
            repeats: &reps,
            concurrent: &reps,
            after_repeats: Some(x(&there)),
            after_burst: Some(x(&there)),
            listed: Some((1, 1)),
        };
        judge(&probe).assert_passes();
        let grew = judge(&Repeated {
            listed: Some((1, 4)),
            ..probe
        });
        grew.assert_fails();
        assert!(grew.summary.contains("from 1 to 4"), "{grew}");
        let conflict = e(2, "PUT", 409);
        let conflict = [x(&conflict)];
        judge(&Repeated {
            repeats: &conflict,
            concurrent: &[],
            ..probe
        })
        .assert_fails();
        let died = entry(5, 5.0)
            .at("PUT", "/things/t-1")
            .no_response(Outcome::Dropped)
            .build();
        let died = [Exchange {
            entry: &died,
            said: "no answer (closed)",
        }];
        let crashed = judge(&Repeated {
            concurrent: &died,
            ..probe
        });
        crashed.assert_fails();
        assert_eq!(
            crashed.summary,
            "concurrent identical PUTs: one was answered no answer (closed)"
        );
        let gone = e(4, "GET", 404);
        let lost = judge(&Repeated {
            after_repeats: Some(x(&gone)),
            ..probe
        });
        lost.assert_fails();
        assert!(lost.summary.contains("its GET answered 404"), "{lost}");
    }
}
