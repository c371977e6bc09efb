//! Real public documents: the Swagger Petstore in OpenAPI 3.0 and 3.1, and GitHub's REST
//! description (1,200+ operations). They are not kept in the repository: `documents/install.sh`
//! installs them, pinned by `documents/package-lock.json`, from the npm registry into `.cache/`.
//! Without the registry each test says that it skips, unless `HARNESS_REQUIRE_TOOLS=1` (CI),
//! where that is a failure.
//!
//! Every operation must get a request that the test's own validator accepts, or a stated reason;
//! the time and memory of the GitHub build are measured by BENCHMARKS.md, not asserted here.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use openapi::{Api, Config, LinkPlan, RequestBuilder, ValueSource};

/// The installed packages' directory, or None (with a message) when they cannot be had.
fn documents() -> Option<&'static Path> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/documents/install.sh");
        let out = Command::new("bash").arg(&script).output();
        let required = std::env::var("HARNESS_REQUIRE_TOOLS").as_deref() == Ok("1");
        match out {
            Ok(o) if o.status.success() => {
                let dir = String::from_utf8_lossy(&o.stdout).trim().to_string();
                Some(PathBuf::from(dir).join("node_modules"))
            }
            other => {
                let why = match other {
                    Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
                    Err(e) => format!("bash: {e}"),
                };
                assert!(
                    !required,
                    "the real OpenAPI documents could not be installed, and HARNESS_REQUIRE_TOOLS=1: {why}"
                );
                eprintln!("skipping the real-document tests: {why}");
                None
            }
        }
    })
    .as_deref()
}

/// Builds every operation of `api` with `seed`, checks each request with the test's validator,
/// and returns the number built and the stated reasons.
fn build_and_check(api: &Api, seed: u64) -> (usize, Vec<String>) {
    let mut builder = RequestBuilder::new(api, seed).unwrap();
    let mut checker = common::Checker::new(api);
    let mut built = 0;
    let mut reasons = Vec::new();
    for op in api.operations() {
        match builder.build(op) {
            Ok(request) => {
                if let Err(e) = checker.check_request(&request) {
                    panic!(
                        "{} {}: the built request is not valid: {e}",
                        op.label(),
                        op.id
                    );
                }
                built += 1;
            }
            Err(why) => {
                assert!(!why.part.is_empty() && !why.reason.is_empty(), "{why:?}");
                reasons.push(why.to_string());
            }
        }
    }
    (built, reasons)
}

#[test]
fn the_petstore_in_3_0_and_3_1() {
    let Some(dir) = documents() else {
        return;
    };
    for version in ["3.0", "3.1"] {
        let path = dir.join(format!("@readme/oas-examples/{version}/json/petstore.json"));
        let api = Api::from_file(&path, &Config::default()).unwrap();
        assert_eq!(api.version().to_string(), version);
        assert_eq!(api.operations().len(), 20);
        assert_eq!(api.unsafe_operations().count(), 12, "{version}");
        for seed in [0, 1, 2] {
            let (built, reasons) = build_and_check(&api, seed);
            assert_eq!(
                (built, reasons.as_slice()),
                (20, &[][..]),
                "{version} seed {seed}"
            );
        }
        // An order's id comes from `POST /store/order`'s Location, else its answer's declared
        // `id`; `POST /pet` declares no success answer (only 405), so a pet's id can come from
        // its Location or from whatever its answer holds (its request's `id` is readOnly); a
        // user's name from `POST /user`'s Location, answer or request.
        let plan = LinkPlan::new(&api);
        let order = plan.bindings_for("getOrderById").next().unwrap();
        assert_eq!(
            (order.producer.as_str(), &order.sources[..2]),
            (
                "placeOrder",
                &[
                    ValueSource::Location {
                        template: "/store/order/{orderId}".into()
                    },
                    ValueSource::BodyField("/id".into())
                ][..]
            )
        );
        let pet = plan.bindings_for("getPetById").next().unwrap();
        let pet_sources: Vec<String> = pet.sources.iter().map(ToString::to_string).collect();
        assert_eq!(
            (pet.producer.as_str(), pet_sources.as_slice()),
            (
                "addPet",
                &["Location header", "JSON answer field petId, id, uuid"].map(String::from)[..]
            )
        );
        let user = plan.bindings_for("getUserByName").next().unwrap();
        assert_eq!(user.producer, "createUser");
        assert!(
            user.sources
                .contains(&ValueSource::RequestBodyField("/username".into())),
            "{user:?}"
        );
        let order = plan.order();
        let at = |id: &str| order.iter().position(|o| o == id).unwrap();
        assert!(at("addPet") < at("getPetById") && at("getPetById") < at("deletePet"));
        assert!(at("placeOrder") < at("getOrderById") && at("getOrderById") < at("deleteOrder"));
        let auth = api.operation("addPet").unwrap().security.describe();
        assert!(auth.contains("Authorization: Bearer <token>"), "{auth}");
    }
}

#[test]
fn every_github_operation_gets_a_valid_request_or_a_stated_reason() {
    let Some(dir) = documents() else {
        return;
    };
    let path = dir.join("@octokit/openapi/generated/api.github.com.json");
    let api = Api::from_file(&path, &Config::default()).unwrap();
    let total = api.operations().len();
    assert!(total > 1000, "{total} operations");
    let (built, reasons) = build_and_check(&api, 0);
    println!(
        "GitHub: {total} operations, {built} requests, {} reasons",
        reasons.len()
    );
    for r in &reasons {
        println!("  {r}");
    }
    assert_eq!(built + reasons.len(), total);
    assert!(
        built * 100 >= total * 99,
        "{built} of {total} built:\n{}",
        reasons.join("\n")
    );
    let plan = LinkPlan::new(&api);
    assert!(
        plan.bindings().len() > 100,
        "{} bindings",
        plan.bindings().len()
    );
    let issue = plan
        .bindings_for("issues/get")
        .find(|b| b.parameter == "issue_number")
        .unwrap();
    assert_eq!(issue.producer, "issues/create");
    assert_eq!(
        issue.sources[..2],
        [
            ValueSource::Location {
                template: "/repos/{owner}/{repo}/issues/{issue_number}".into()
            },
            ValueSource::BodyField("/number".into())
        ]
    );
}

#[test]
fn github_requests_are_byte_identical_for_one_seed() {
    let Some(dir) = documents() else {
        return;
    };
    let path = dir.join("@octokit/openapi/generated/api.github.com.json");
    let api = Api::from_file(&path, &Config::default()).unwrap();
    let bytes = |seed: u64| -> Vec<Vec<u8>> {
        let mut builder = RequestBuilder::new(&api, seed).unwrap();
        builder
            .build_all()
            .into_iter()
            .map(|r| {
                r.map(|r| r.to_http())
                    .unwrap_or_else(|e| e.to_string().into_bytes())
            })
            .collect()
    };
    let first = bytes(11);
    assert_eq!(first, bytes(11));
    assert_ne!(first, bytes(12));
}
