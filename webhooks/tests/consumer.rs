//! The example consumer (`examples/consumer.rs`) over real sockets, its SQLite system of record
//! read back through its `/effects` and `/state` endpoints: each mode does to duplicates,
//! reordered events and forgeries what its module doc says.

mod common;

use common::{now, plan, Consumer};
use webhooks::{Forgery, Style};

/// The `unique` consumer: one effect per event under a concurrent burst of copies, a 2xx to every
/// copy, every forgery refused with no effect, and reordered events ending in the logically last
/// state — for every style.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unique_takes_each_event_once_and_refuses_forgeries() {
    for style in Style::ALL {
        let c = Consumer::example(style, "unique", &[]);
        let p = plan(style, 2 + 2 * style.forgeries().len() as u64, 1);
        let first = p.events().get(0).unwrap();
        let d = Consumer::genuine(&p, &first);
        let statuses = c.burst(&d, 8).await;
        assert!(statuses.iter().all(|s| *s == 200), "{style}: {statuses:?}");
        assert_eq!(c.effects(&first.id).await, 1, "{style}");

        for (i, &f) in style.forgeries().iter().enumerate() {
            let e = p.events().get(2 + i as u64).unwrap();
            assert_eq!(
                c.send(&Consumer::forged(&p, &e, f)).await,
                400,
                "{style} {f}"
            );
            assert_eq!(c.effects(&e.id).await, 0, "{style} {f}");
            // The genuine delivery of the same event still takes its one effect.
            assert_eq!(c.send(&Consumer::genuine(&p, &e)).await, 200, "{style} {f}");
            assert_eq!(c.effects(&e.id).await, 1, "{style} {f}");
        }

        // Subject in_1 delivered reversed: paid, then created.
        let paid = p.events().get(1).unwrap();
        assert_eq!(c.send(&Consumer::genuine(&p, &paid)).await, 200);
        assert_eq!(c.send(&Consumer::genuine(&p, &first)).await, 200);
        assert_eq!(
            c.state("in_1").await.as_deref(),
            Some("invoice.paid"),
            "{style}"
        );
        assert_eq!(c.state("in_99").await, None);
    }
}

/// The `naive` consumer takes an effect per delivery and keeps the last delivered state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn naive_takes_a_duplicate_twice_and_the_last_delivered_state() {
    let style = Style::Stripe;
    let c = Consumer::example(style, "naive", &[]);
    let p = plan(style, 2, 2);
    let created = p.events().get(0).unwrap();
    let paid = p.events().get(1).unwrap();
    assert_eq!(c.send(&Consumer::genuine(&p, &paid)).await, 200);
    assert_eq!(c.send(&Consumer::genuine(&p, &created)).await, 200);
    assert_eq!(c.send(&Consumer::genuine(&p, &created)).await, 200);
    assert_eq!(c.effects(&created.id).await, 2);
    assert_eq!(c.effects(&paid.id).await, 1);
    assert_eq!(c.state("in_1").await.as_deref(), Some("invoice.created"));
    // It still verifies signatures.
    let forged = Consumer::forged(&p, &paid, Forgery::Signature);
    assert_eq!(c.send(&forged).await, 400);
    assert_eq!(c.effects(&paid.id).await, 1);
}

/// `select-then-insert` catches a duplicate that arrives after the first copy was recorded, and
/// not copies that arrive together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn select_then_insert_is_still_twice_under_a_concurrent_duplicate() {
    let style = Style::StandardWebhooks;
    // 300 ms between the check and the write: copies released together all pass the check.
    let c = Consumer::example(style, "select-then-insert", &["--delay-ms", "300"]);
    const ROUNDS: u64 = 5;
    let p = plan(style, ROUNDS + 1, 3);

    let sequential = p.events().get(ROUNDS).unwrap();
    let d = Consumer::genuine(&p, &sequential);
    assert_eq!(c.send(&d).await, 200);
    assert_eq!(c.send(&d).await, 200);
    assert_eq!(c.effects(&sequential.id).await, 1);

    let mut counts = Vec::new();
    for n in 0..ROUNDS {
        let e = p.events().get(n).unwrap();
        let statuses = c.burst(&Consumer::genuine(&p, &e), 4).await;
        assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
        counts.push(c.effects(&e.id).await);
    }
    // How many copies of a burst race depends on how the machine schedules them; that they can
    // race, and that none takes no effect, does not.
    assert!(counts.iter().all(|n| (1..=4).contains(n)), "{counts:?}");
    assert!(
        counts.iter().any(|n| *n > 1),
        "no duplicate effect in {ROUNDS} bursts: {counts:?}"
    );
}

/// `no-verify` accepts every forgery, and each takes its effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_verify_lets_every_forgery_take_effect() {
    for style in Style::ALL {
        let c = Consumer::example(style, "no-verify", &[]);
        let p = plan(style, style.forgeries().len() as u64, 4);
        for (i, &f) in style.forgeries().iter().enumerate() {
            let e = p.events().get(i as u64).unwrap();
            assert_eq!(
                c.send(&Consumer::forged(&p, &e, f)).await,
                200,
                "{style} {f}"
            );
            assert_eq!(c.effects(&e.id).await, 1, "{style} {f}");
        }
    }
}

/// `dup-500` takes no second effect, but answers the duplicate 500: the provider redelivers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dup_500_answers_a_duplicate_with_a_server_error() {
    let style = Style::Github;
    let c = Consumer::example(style, "dup-500", &[]);
    let p = plan(style, 1, 5);
    let e = p.events().get(0).unwrap();
    let d = Consumer::genuine(&p, &e);
    assert_eq!(c.send(&d).await, 200);
    assert_eq!(c.send(&d).await, 500);
    assert_eq!(c.effects(&e.id).await, 1);
}

/// With `--tolerance none` a stale delivery is accepted (the bug the `stale` forgery finds); a
/// replayed signature still is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_tolerance_a_stale_delivery_is_accepted() {
    for style in [Style::StandardWebhooks, Style::Stripe] {
        let c = Consumer::example(style, "unique", &["--tolerance", "none"]);
        let p = plan(style, 2, 6);
        let stale = p.events().get(0).unwrap();
        assert_eq!(
            c.send(&Consumer::forged(&p, &stale, Forgery::Stale)).await,
            200
        );
        assert_eq!(c.effects(&stale.id).await, 1);
        let replayed = p.events().get(1).unwrap();
        assert_eq!(
            c.send(&Consumer::forged(&p, &replayed, Forgery::Replayed))
                .await,
            400
        );
        assert_eq!(c.effects(&replayed.id).await, 0);
    }
}

/// A body that is no event, and a delivery signed for another style, are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_is_not_a_delivery_is_refused() {
    let c = Consumer::example(Style::Stripe, "no-verify", &[]);
    let p = plan(Style::Stripe, 1, 7);
    let e = p.events().get(0).unwrap();
    let mut d = Consumer::genuine(&p, &e);
    d.body = bytes::Bytes::from_static(b"not json");
    assert_eq!(c.send(&d).await, 400);

    let sw = Consumer::example(Style::StandardWebhooks, "unique", &[]);
    let stripe_delivery = p.signer().sign(&e.message(), now()).unwrap();
    assert_eq!(sw.send(&stripe_delivery).await, 400);
    assert_eq!(sw.effects(&e.id).await, 0);
}

/// Bad flags: one clear message and exit code 2, never a panic.
#[test]
fn bad_flags_get_one_clear_message() {
    let exe = common::example_exe();
    let out = std::process::Command::new(&exe)
        .args(["--style", "svix", "--secret", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown webhook style \"svix\""), "{err}");
    let out = std::process::Command::new(&exe)
        .args(["--style", "standard-webhooks", "--secret", "whsec_!!"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not base64"));
}
