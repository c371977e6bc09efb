//! The calibration consumers (`calibration/webhooks/consumer.py`), written with the providers'
//! real libraries, behave as their code says: each starts, accepts genuine deliveries, and
//! accepts or refuses each forgery — and takes an effect or not — as its mode implies:
//!
//! - `correct` refuses every forgery, and none takes an effect;
//! - `parse-first` refuses every forgery, yet every one has taken its effect;
//! - `no-tolerance` accepts a stale delivery (and takes its effect), refuses the others;
//! - `naive` and `dup-409` refuse every forgery as `correct` does; a duplicate takes a second
//!   effect in `naive`, and is answered 409 with no second effect in `dup-409`.
//!
//! Later the harness's delivery checks are run against these same consumers; here the
//! expectation is stated once, from the code. The libraries are installed by
//! `calibration/install.sh`; without them this test says that it skips, unless
//! `HARNESS_REQUIRE_TOOLS=1`.

mod common;

use std::process::Command;

use common::{plan, root, secret, Consumer};
use webhooks::{Forgery, Style};

fn python() -> Option<std::path::PathBuf> {
    let python = root().join(".cache/calibration/venv/bin/python");
    if python.exists() {
        return Some(python);
    }
    assert!(
        std::env::var("HARNESS_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "the calibration libraries are not installed and HARNESS_REQUIRE_TOOLS=1: run \
         `bash calibration/install.sh`"
    );
    eprintln!("skipping the calibration consumers: run `bash calibration/install.sh` first (.ci/run does)");
    None
}

/// The consumer's modes.
const MODES: [&str; 5] = ["correct", "parse-first", "no-tolerance", "naive", "dup-409"];

/// What the mode's code does with forgery `f`: (the status, whether it took an effect).
fn expected(mode: &str, f: Forgery) -> (u16, bool) {
    match (mode, f) {
        ("correct" | "naive" | "dup-409", _) => (400, false),
        ("parse-first", _) => (400, true),
        ("no-tolerance", Forgery::Stale) => (200, true),
        ("no-tolerance", _) => (400, false),
        _ => unreachable!("{mode}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_calibration_consumer_does_what_its_code_says() {
    let Some(python) = python() else {
        return;
    };
    let script = root().join("calibration/webhooks/consumer.py");
    let dir = tempfile::tempdir().unwrap();
    let mut seen = 0;
    for (library, style) in [
        ("standardwebhooks", Style::StandardWebhooks),
        ("svix", Style::StandardWebhooks),
        ("stripe", Style::Stripe),
    ] {
        for mode in MODES {
            let db = dir.path().join(format!("{library}-{mode}.sqlite"));
            let mut cmd = Command::new(&python);
            cmd.arg(&script)
                .args([
                    "--library",
                    library,
                    "--mode",
                    mode,
                    "--secret",
                    &secret(style),
                ])
                .arg("--db")
                .arg(&db);
            let c = Consumer::spawn(cmd);
            let p = plan(style, 2 + style.forgeries().len() as u64, 9);
            let what = format!("{library} {mode}");

            // Genuine deliveries: accepted; a duplicate answered 200 with no new effect, but in
            // the modes that get duplicates wrong.
            let e = p.events().get(0).unwrap();
            let d = Consumer::genuine(&p, &e);
            let (again, effects) = match mode {
                "naive" => (200, 2),
                "dup-409" => (409, 1),
                _ => (200, 1),
            };
            assert_eq!(c.send(&d).await, 200, "{what}");
            assert_eq!(c.send(&d).await, again, "{what}");
            assert_eq!(c.effects(&e.id).await, effects, "{what}");
            // Reordered: the state moves forward only (`created`, delivered above, is a
            // duplicate now).
            let created = p.events().get(0).unwrap();
            let paid = p.events().get(1).unwrap();
            assert_eq!(c.send(&Consumer::genuine(&p, &paid)).await, 200, "{what}");
            assert_eq!(
                c.send(&Consumer::genuine(&p, &created)).await,
                again,
                "{what}"
            );
            assert_eq!(
                c.state("in_1").await.as_deref(),
                Some("invoice.paid"),
                "{what}"
            );

            for (i, &f) in style.forgeries().iter().enumerate() {
                let e = p.events().get(2 + i as u64).unwrap();
                let status = c.send(&Consumer::forged(&p, &e, f)).await;
                let effects = c.effects(&e.id).await;
                let (want_status, want_effect) = expected(mode, f);
                assert_eq!(
                    (status, effects),
                    (want_status, u64::from(want_effect)),
                    "{what}: the {f} forgery"
                );
                seen += 1;
            }
        }
    }
    assert_eq!(seen, 3 * MODES.len() * Style::Stripe.forgeries().len());
}
