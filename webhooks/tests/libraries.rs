//! Every style's deliveries judged by the provider's own published verification library, run for
//! real: `standardwebhooks` and `svix` (PyPI and npm) for Standard Webhooks, `stripe`
//! (`stripe.Webhook.construct_event`, PyPI) for Stripe, `@octokit/webhooks-methods` (`verify`,
//! npm) for GitHub. Genuine deliveries — a secret being rotated included — must verify under
//! every library of their style, and every forgery must be refused by every one of them; a stale
//! or replayed forgery must moreover carry the library's own signature of an earlier delivery, so
//! it is refused for its time alone.
//!
//! The libraries are installed, pinned, by `calibration/install.sh` into `.cache/calibration/`
//! (`.ci/run` calls it); the scripts that drive them are `calibration/webhooks/verify.py` and
//! `verify.mjs`. Without the install this test says that it skips, unless
//! `HARNESS_REQUIRE_TOOLS=1`, where a missing install is a failure.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use webhooks::{Delivery, Forgery, Plan, PlanSpec, Secret, Signer, Style};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The installed interpreters, or `None` (after saying why) when the test should skip.
fn tools() -> Option<(PathBuf, &'static str)> {
    let python = root().join(".cache/calibration/venv/bin/python");
    let installed = python.exists()
        && root()
            .join(".cache/calibration/node/node_modules/@octokit/webhooks-methods")
            .exists();
    if installed {
        return Some((python, "node"));
    }
    assert!(
        std::env::var("HARNESS_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "the webhook verification libraries are not installed and HARNESS_REQUIRE_TOOLS=1: run \
         `bash calibration/install.sh`"
    );
    eprintln!(
        "skipping the verification libraries' test: run `bash calibration/install.sh` first (.ci/run does)"
    );
    None
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs()
}

/// The secret's text, as each style's provider shows it.
fn secret_text(style: Style) -> String {
    match style {
        Style::StandardWebhooks => Secret::standard_webhooks_text(b"0123456789abcdef01234567"),
        Style::Stripe => "whsec_5aVr8ph0v1zQm3dK2yJq7tLx9bN4cWgE".into(),
        Style::Github => "It's a Secret to Everybody".into(),
    }
}

fn case(name: String, style: Style, secret: &str, d: &Delivery) -> Value {
    let headers: BTreeMap<String, String> = d
        .headers
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_str().expect("text headers").to_string()))
        .collect();
    json!({
        "case": name,
        "style": style.name(),
        "secret": secret,
        "headers": headers,
        "body": std::str::from_utf8(&d.body).expect("a JSON body"),
        "signed_at": d.signed_at,
    })
}

/// The libraries of each style, as the scripts name them.
fn libraries(style: Style) -> BTreeSet<&'static str> {
    match style {
        Style::StandardWebhooks => [
            "standardwebhooks (PyPI)",
            "svix (PyPI)",
            "standardwebhooks (npm)",
            "svix (npm)",
        ]
        .into(),
        Style::Stripe => ["stripe (PyPI)"].into(),
        Style::Github => ["@octokit/webhooks-methods"].into(),
    }
}

#[test]
fn genuine_deliveries_verify_and_forged_ones_fail_under_the_providers_libraries() {
    let Some((python, node)) = tools() else {
        return;
    };
    let at = now();
    let mut cases = Vec::new();
    // What each case is: its style and forgery (None for genuine).
    let mut expected: BTreeMap<String, (Style, Option<Forgery>)> = BTreeMap::new();
    for style in Style::ALL {
        let secret = secret_text(style);
        let plan = Plan::new(&PlanSpec {
            seed: 7,
            ..PlanSpec::new(style, secret.clone())
        })
        .expect("a plan");
        for n in 0..2 {
            let event = plan.events().get(n).expect("an event");
            let genuine = plan.signer().sign(&event.message(), at).expect("signed");
            let name = format!("{style}/genuine/{n}");
            cases.push(case(name.clone(), style, &secret, &genuine));
            expected.insert(name, (style, None));
            for &f in style.forgeries() {
                let forged = plan
                    .signer()
                    .forge(&event.message(), at, f)
                    .expect("forged");
                let name = format!("{style}/{f}/{n}");
                cases.push(case(name.clone(), style, &secret, &forged));
                expected.insert(name, (style, Some(f)));
            }
        }
        if style != Style::Github {
            // Rotation: signed with a new secret and the one the consumer still has.
            let other = match style {
                Style::StandardWebhooks => {
                    Secret::standard_webhooks_text(b"another key, 24 bytes!!!")
                }
                _ => "whsec_anotherSecretForRotation000000".into(),
            };
            let signer = Signer::new(style, Secret::parse(style, &other).expect("a secret"))
                .also_signing_with(Secret::parse(style, &secret).expect("a secret"))
                .expect("rotation");
            let event = plan.events().get(0).expect("an event");
            let d = signer.sign(&event.message(), at).expect("signed");
            let name = format!("{style}/genuine/rotated");
            cases.push(case(name.clone(), style, &secret, &d));
            expected.insert(name, (style, None));
        }
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("cases.json");
    std::fs::write(&file, serde_json::to_vec(&cases).expect("JSON")).expect("cases written");

    let scripts = root().join("calibration/webhooks");
    let mut results: Vec<Value> = Vec::new();
    for (program, script) in [
        (python.as_os_str(), "verify.py"),
        (std::ffi::OsStr::new(node), "verify.mjs"),
    ] {
        let out = Command::new(program)
            .arg(scripts.join(script))
            .arg(&file)
            .output()
            .unwrap_or_else(|e| panic!("{script} runs: {e}"));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{script} exited {:?}\n{stdout}\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        for line in stdout.lines() {
            results.push(serde_json::from_str(line).unwrap_or_else(|e| panic!("{line}: {e}")));
        }
    }

    let mut judged: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let mut wrong = Vec::new();
    for r in &results {
        let name = r["case"].as_str().expect("case");
        let library = r["library"].as_str().expect("library");
        judged.entry(name).or_default().insert(library);
        let (style, forged) = expected[name];
        let verified = r["verified"].as_bool().expect("verified");
        let mut problems = Vec::new();
        match forged {
            None if !verified => problems.push("refused a genuine delivery"),
            Some(_) if verified => problems.push("accepted a forgery"),
            _ => {}
        }
        match forged {
            Some(Forgery::Stale) => {
                if r["library_signature"] != json!(true) {
                    problems.push("a stale delivery's signature is not the library's own");
                }
                if style == Style::Stripe && r["lax"] != json!(true) {
                    problems.push("without its tolerance, stripe refused a stale delivery");
                }
            }
            Some(Forgery::Replayed) => {
                if r["library_signature"] != json!(true) {
                    problems.push(
                        "a replayed signature is not the library's own of the earlier delivery",
                    );
                }
                if style == Style::Stripe && r["lax"] != json!(false) {
                    problems.push("without its tolerance, stripe accepted a replayed signature");
                }
            }
            None if style == Style::Stripe && r["lax"] != json!(true) => {
                problems.push("stripe without tolerance refused a genuine delivery");
            }
            _ => {}
        }
        for p in problems {
            wrong.push(format!("{library} on {name}: {p} ({})", r["error"]));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Every case was judged by every library of its style: none skipped, none broken.
    for (name, (style, _)) in &expected {
        assert_eq!(
            judged.get(name.as_str()),
            Some(&libraries(*style)),
            "{name} was not judged by every library of its style"
        );
    }
    let forgeries: usize = Style::ALL.iter().map(|s| s.forgeries().len()).sum();
    assert_eq!(expected.len(), 3 * 2 + 2 * forgeries + 2);
    println!(
        "{} verdicts from the providers' libraries on {} deliveries",
        results.len(),
        expected.len()
    );
}
