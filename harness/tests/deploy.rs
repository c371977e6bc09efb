//! The deployment files in `deploy/`: every Kubernetes manifest validates against the schemas of a
//! pinned Kubernetes version (`kubernetes-validate`, offline: the schemas ship in its wheel), the
//! facts the sharded run depends on hold (an Indexed Job with one pod per shard, fault-server
//! replicas named after their pods, non-root pods), the scenario and the fault schedule in the
//! ConfigMaps load, and the Dockerfile builds in stages and runs as a non-root user.
//!
//! `kubernetes-validate` is found through `KUBERNETES_VALIDATE`, on `PATH`, or in the project's
//! `.cache/venv` (`deploy/install-tools.sh` puts it there). Without it the validation tests say
//! that they skip — unless `HARNESS_REQUIRE_TOOLS=1` (CI), where a missing tool fails them.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::Deserialize;
use serde_norway::Value;

/// The Kubernetes version the manifests are validated against.
const KUBERNETES_VERSION: &str = "1.30.0";

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the harness crate sits in the workspace")
        .to_path_buf()
}

fn k8s_dir() -> PathBuf {
    root().join("deploy/k8s")
}

/// The Kubernetes manifests: every `.yaml` in deploy/k8s but the kustomization.
fn manifests() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(k8s_dir())
        .expect("deploy/k8s")
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.extension().is_some_and(|e| e == "yaml" || e == "yml")
                && p.file_name().is_some_and(|n| n != "kustomization.yaml")
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifests in deploy/k8s");
    files
}

/// The documents of a (multi-document) YAML file.
fn documents(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|doc| Value::deserialize(doc).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        .filter(|v| !v.is_null())
        .collect()
}

/// Every resource of every manifest.
fn resources() -> Vec<Value> {
    manifests().iter().flat_map(|p| documents(p)).collect()
}

/// The resource of this kind and name.
fn resource(kind: &str, name: &str) -> Value {
    resources()
        .into_iter()
        .find(|r| r["kind"].as_str() == Some(kind) && r["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no {kind} {name} in deploy/k8s"))
}

fn str_of<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what} is not a string: {v:?}"))
}

fn seq<'a>(v: &'a Value, what: &str) -> &'a Vec<Value> {
    v.as_sequence()
        .unwrap_or_else(|| panic!("{what} is not a list: {v:?}"))
}

/// The container of this name in a pod spec.
fn container<'a>(pod: &'a Value, name: &str) -> &'a Value {
    seq(&pod["containers"], "containers")
        .iter()
        .find(|c| c["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no container {name}"))
}

/// The env entry of this name in a container.
fn env<'a>(c: &'a Value, name: &str) -> &'a Value {
    seq(&c["env"], "env")
        .iter()
        .find(|e| e["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no env {name} in container {:?}", c["name"]))
}

/// A container's command and args as one text.
fn command_text(c: &Value) -> String {
    let mut words = Vec::new();
    for key in ["command", "args"] {
        if let Some(list) = c[key].as_sequence() {
            words.extend(list.iter().map(|w| str_of(w, key).to_string()));
        }
    }
    words.join(" ")
}

// ---------------------------------------------------------------------------------------------
// kubernetes-validate

/// Where kubernetes-validate is, if anywhere; `None` means the caller skips.
fn validator() -> Option<PathBuf> {
    let required = std::env::var("HARNESS_REQUIRE_TOOLS").is_ok_and(|v| v == "1");
    // Named explicitly: used as it is (a wrong path fails the test, it does not skip it).
    if let Some(tool) = std::env::var_os("KUBERNETES_VALIDATE") {
        return Some(PathBuf::from(tool));
    }
    // Else the first that runs: a file on PATH may be a shim for a version that lacks it.
    let runs = |p: &PathBuf| {
        p.is_file()
            && Command::new(p)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
    };
    let on_path = std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join("kubernetes-validate"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    let found = on_path
        .into_iter()
        .chain([root().join(".cache/venv/bin/kubernetes-validate")])
        .find(runs);
    match found {
        Some(p) => Some(p),
        None if required => panic!(
            "kubernetes-validate not found (KUBERNETES_VALIDATE, PATH, .cache/venv) and \
             HARNESS_REQUIRE_TOOLS=1: run deploy/install-tools.sh"
        ),
        None => {
            println!(
                "skipping: kubernetes-validate not found (set KUBERNETES_VALIDATE, put it on PATH, \
                 or run deploy/install-tools.sh)"
            );
            None
        }
    }
}

/// Runs kubernetes-validate, strict, on the files; its exit status and what it printed.
fn validate(tool: &Path, files: &[PathBuf]) -> (bool, String) {
    let out = Command::new(tool)
        .args(["--kubernetes-version", KUBERNETES_VERSION, "--strict"])
        .args(files)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", tool.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn every_manifest_validates_against_the_kubernetes_schemas() {
    let Some(tool) = validator() else { return };
    let files = manifests();
    let (ok, text) = validate(&tool, &files);
    assert!(ok, "kubernetes-validate refused deploy/k8s:\n{text}");
    // Each resource was checked against a schema (a kind without one only warns).
    let checked = text.matches(" passed for resource ").count();
    assert_eq!(
        checked,
        resources().len(),
        "not every resource was validated:\n{text}"
    );
}

#[test]
fn kubernetes_validate_refuses_broken_manifests() {
    let Some(tool) = validator() else { return };
    let job = std::fs::read_to_string(k8s_dir().join("harness-job.yaml")).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let broken = [
        // A string where an integer belongs.
        (
            "string-for-int",
            "  completions: 3\n",
            "  completions: \"three\"\n",
            "completions",
        ),
        // A misspelt field: --strict refuses what the schema does not know.
        (
            "unknown-field",
            "  backoffLimit: 0\n",
            "  backofLimit: 0\n",
            "backofLimit",
        ),
    ];
    for (name, from, to, field) in broken {
        assert!(
            job.contains(from),
            "harness-job.yaml no longer has {from:?}"
        );
        let path = tmp.path().join(format!("{name}.yaml"));
        std::fs::write(&path, job.replacen(from, to, 1)).unwrap();
        let (ok, text) = validate(&tool, &[path]);
        assert!(
            !ok,
            "{name}: kubernetes-validate accepted a broken Job:\n{text}"
        );
        assert!(
            text.contains(field),
            "{name}: the refusal does not name {field}:\n{text}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// What the sharded run depends on

#[test]
fn the_job_runs_one_indexed_pod_per_shard() {
    let job = resource("Job", "harness");
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"].as_str(), Some("Indexed"));
    assert_eq!(
        spec["backoffLimit"].as_u64(),
        Some(0),
        "a shard must not be retried"
    );
    let completions = spec["completions"].as_u64().expect("completions");
    let parallelism = spec["parallelism"].as_u64().expect("parallelism");
    assert_eq!(completions, parallelism, "every shard runs at once");
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["restartPolicy"].as_str(), Some("Never"));
    let c = container(pod, "harness");
    let shards: u64 = str_of(&env(c, "HARNESS_SHARDS")["value"], "HARNESS_SHARDS")
        .parse()
        .expect("HARNESS_SHARDS is a number");
    assert_eq!(shards, completions, "one pod per shard");
    assert_eq!(
        env(c, "HARNESS_START_AT")["value"].as_str(),
        Some("${HARNESS_START_AT}"),
        "the start time is filled in when the Job is applied (envsubst)"
    );
    let cmd = command_text(c);
    for word in [
        "harness run /scenarios/",
        "--target http://fault-server:8080",
        "--format json",
    ] {
        assert!(
            cmd.contains(word),
            "the shard's command lacks {word:?}: {cmd}"
        );
    }
}

#[test]
fn the_job_runs_the_scenario_its_config_map_holds() {
    let job = resource("Job", "harness");
    let pod = &job["spec"]["template"]["spec"];
    let c = container(pod, "harness");
    let mount = seq(&c["volumeMounts"], "volumeMounts")
        .iter()
        .find(|m| m["name"].as_str() == Some("scenario"))
        .expect("the scenario volume is mounted");
    let dir = str_of(&mount["mountPath"], "mountPath");
    let volume = seq(&pod["volumes"], "volumes")
        .iter()
        .find(|v| v["name"].as_str() == Some("scenario"))
        .expect("a scenario volume");
    let map = resource(
        "ConfigMap",
        str_of(&volume["configMap"]["name"], "configMap.name"),
    );
    let data = map["data"].as_mapping().expect("ConfigMap data");
    assert_eq!(data.len(), 1, "one scenario");
    let (key, text) = data.iter().next().unwrap();
    let key = str_of(key, "key");
    let cmd = command_text(c);
    assert!(
        cmd.contains(&format!("harness run {dir}/{key} ")),
        "the command runs {dir}/{key}: {cmd}"
    );
    // The scenario loads as the harness will load it, with the command line's target.
    let overrides = harness::scenario::Overrides {
        target: Some("http://fault-server:8080".into()),
        ..Default::default()
    };
    let text = str_of(text, "scenario");
    if let Err(e) = harness::scenario::load_str(text, Path::new(key), &overrides) {
        panic!("the Job's scenario does not load: {e}");
    }
}

#[test]
fn the_target_is_the_fault_server_service() {
    let svc = resource("Service", "fault-server");
    let ports = seq(&svc["spec"]["ports"], "ports");
    assert!(
        ports.iter().any(|p| p["port"].as_u64() == Some(8080)),
        "the fault-server Service serves port 8080"
    );
    let deploy = resource("Deployment", "fault-server");
    let labels = &deploy["spec"]["template"]["metadata"]["labels"];
    for (k, v) in svc["spec"]["selector"].as_mapping().expect("a selector") {
        assert_eq!(&labels[k], v, "the Service selects the fault-server pods");
    }
}

#[test]
fn fault_server_replicas_are_named_after_their_pods() {
    let deploy = resource("Deployment", "fault-server");
    let replicas = deploy["spec"]["replicas"].as_u64().expect("replicas");
    assert!(replicas >= 2, "at least two replicas, found {replicas}");
    let pod = &deploy["spec"]["template"]["spec"];
    let c = container(pod, "fault-server");
    assert_eq!(
        env(c, "FAULT_SERVER_REPLICA_ID")["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        Some("metadata.name")
    );
    let token = &env(c, "FAULT_SERVER_CONTROL_TOKEN")["valueFrom"]["secretKeyRef"];
    assert!(
        token["name"].is_string(),
        "the control token comes from a Secret"
    );
    let cmd = command_text(c);
    for word in [
        "fault-server --config ",
        "--bind 0.0.0.0:8080",
        "--journal ",
    ] {
        assert!(
            cmd.contains(word),
            "the server's command lacks {word:?}: {cmd}"
        );
    }
    let probe = serde_norway::to_string(&c["readinessProbe"]).unwrap();
    assert!(
        probe.contains("/__harness/health"),
        "readiness is the health endpoint: {probe}"
    );
    let annotations = &deploy["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/scrape"].as_str(), Some("true"));
    assert_eq!(
        annotations["prometheus.io/path"].as_str(),
        Some("/__harness/metrics")
    );

    // Each replica reachable on its own, ready or not, for its journal.
    let headless = resources()
        .into_iter()
        .find(|r| {
            r["kind"].as_str() == Some("Service")
                && r["spec"]["clusterIP"].as_str() == Some("None")
                && r["spec"]["selector"] == deploy["spec"]["selector"]["matchLabels"]
        })
        .expect("a headless Service for the fault-server pods");
    assert_eq!(
        headless["spec"]["publishNotReadyAddresses"].as_bool(),
        Some(true)
    );
}

/// The fault-server container's readiness probe, run by `bash` against `port` instead of the
/// pod's 8080, with `token` as the control token; its exit code.
fn run_readiness_probe(port: u16, token: &str) -> i32 {
    let deploy = resource("Deployment", "fault-server");
    let c = container(&deploy["spec"]["template"]["spec"], "fault-server");
    let cmd = seq(
        &c["readinessProbe"]["exec"]["command"],
        "the probe's command",
    );
    let words: Vec<&str> = cmd.iter().map(|w| str_of(w, "command")).collect();
    assert_eq!(&words[..2], ["bash", "-c"], "an exec probe run by bash");
    let script = words[2].replace(
        "/dev/tcp/127.0.0.1/8080",
        &format!("/dev/tcp/127.0.0.1/{port}"),
    );
    assert_ne!(
        script, words[2],
        "the probe connects to the server's port 8080"
    );
    let out = Command::new("bash")
        .args(["-c", &script])
        .env("FAULT_SERVER_CONTROL_TOKEN", token)
        .output()
        .expect("bash runs");
    out.status.code().unwrap_or(-1)
}

/// A peer that answers one request with `answer` and closes.
fn answer_once(answer: &'static str) -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("its address").port();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            // The whole request head first, as a server reads it.
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let _ = s.write_all(answer.as_bytes());
        }
    });
    port
}

#[test]
fn the_readiness_probe_reads_the_health_body_not_only_its_status() {
    // A real fault server with its control token: ready.
    let rt = tokio::runtime::Runtime::new().expect("a runtime");
    let server = rt
        .block_on(fault_server::FaultServer::start(
            fault_server::config::Config::from_yaml("{}", "test").expect("an empty config"),
            fault_server::ServerOptions {
                control_token: Some("s3cret".into()),
                ..fault_server::ServerOptions::default()
            },
        ))
        .expect("the server starts");
    let port = server.addr().port();
    assert_eq!(
        run_readiness_probe(port, "s3cret"),
        0,
        "a healthy server is ready"
    );
    assert_eq!(
        run_readiness_probe(port, "wrong"),
        1,
        "a refused probe (401) is not ready"
    );
    // Health answers 200 while the orders' database is unreachable, and says so in its body
    // (the fault server's own test of that: fault-server/tests/postgres.rs): not ready.
    let degraded = answer_once(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 118\r\nconnection: close\r\n\r\n\
         {\"received\":0,\"status\":\"degraded\",\"store\":{\"backend\":\"postgres\",\"error\":\"no answer within 1s\",\"status\":\"unreachable\"}}",
    );
    assert_eq!(
        run_readiness_probe(degraded, "s3cret"),
        1,
        "degraded is not ready"
    );
    drop(server);
}

#[test]
fn fault_server_config_shares_the_postgres_store() {
    let map = resource("ConfigMap", "fault-server-config");
    let text = str_of(&map["data"]["fault-server.yaml"], "fault-server.yaml");
    let config: Value = serde_norway::from_str(text).unwrap();
    assert_eq!(config["state"].as_str(), Some("shared"));
    let db = str_of(&config["orders"]["database"], "orders.database");
    assert!(db.starts_with("postgres://"), "{db}");
    let host = db.rsplit_once('@').map(|(_, h)| h).unwrap_or_default();
    assert!(
        host.starts_with("postgres:5432/"),
        "the postgres Service: {db}"
    );
    resource("Service", "postgres");
    // The fault schedule is one the fault server accepts.
    let rules = serde_norway::to_string(&serde_norway::Mapping::from_iter([(
        Value::from("rules"),
        config["rules"].clone(),
    )]))
    .unwrap();
    if let Err(e) = fault_server::config::ScheduleConfig::from_yaml(&rules, "fault-server.yaml") {
        panic!("the fault-server rules do not load: {e}");
    }
}

#[test]
fn every_pod_runs_as_non_root_within_limits() {
    let mut pods = 0;
    for r in resources() {
        let (kind, name) = (
            r["kind"].as_str().unwrap_or_default().to_string(),
            r["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
        );
        if !["Deployment", "StatefulSet", "Job"].contains(&kind.as_str()) {
            continue;
        }
        pods += 1;
        let pod = &r["spec"]["template"]["spec"];
        assert_eq!(
            pod["securityContext"]["runAsNonRoot"].as_bool(),
            Some(true),
            "{kind} {name}: runAsNonRoot"
        );
        let uid = pod["securityContext"]["runAsUser"].as_u64();
        assert!(
            uid.is_some_and(|u| u > 0),
            "{kind} {name}: runAsUser {uid:?}"
        );
        let containers = seq(&pod["containers"], "containers")
            .iter()
            .chain(pod["initContainers"].as_sequence().into_iter().flatten());
        for c in containers {
            let what = format!("{kind} {name} container {:?}", c["name"]);
            let sc = &c["securityContext"];
            assert_eq!(
                sc["allowPrivilegeEscalation"].as_bool(),
                Some(false),
                "{what}"
            );
            assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true), "{what}");
            assert_eq!(
                sc["capabilities"]["drop"],
                serde_norway::from_str::<Value>("[ALL]").unwrap(),
                "{what}"
            );
            for bound in ["requests", "limits"] {
                for resource in ["cpu", "memory"] {
                    assert!(
                        !c["resources"][bound][resource].is_null(),
                        "{what}: resources.{bound}.{resource}"
                    );
                }
            }
        }
    }
    assert!(pods >= 3, "postgres, fault-server and the Job");
}

#[test]
fn the_kustomization_lists_every_manifest() {
    let k: Value = serde_norway::from_str(
        &std::fs::read_to_string(k8s_dir().join("kustomization.yaml")).unwrap(),
    )
    .unwrap();
    let mut listed: Vec<String> = seq(&k["resources"], "resources")
        .iter()
        .map(|r| str_of(r, "resource").to_string())
        .collect();
    listed.sort();
    let mut files: Vec<String> = manifests()
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(listed, files);
    assert_eq!(k["namespace"].as_str(), Some("harness"));
    for r in resources() {
        let ns = r["metadata"]["namespace"].as_str();
        if r["kind"].as_str() == Some("Namespace") {
            assert_eq!(r["metadata"]["name"].as_str(), Some("harness"));
        } else {
            assert_eq!(
                ns,
                Some("harness"),
                "{:?} {:?}",
                r["kind"],
                r["metadata"]["name"]
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The Dockerfile

/// The workspace members, from the root Cargo.toml's `members = [...]`.
fn workspace_members() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let start = text.find("members = [").expect("workspace members") + "members = [".len();
    let end = start + text[start..].find(']').unwrap();
    text[start..end]
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

/// The Dockerfile's instructions, continuation lines joined, comments dropped.
fn dockerfile() -> Vec<String> {
    let text = std::fs::read_to_string(root().join("deploy/Dockerfile")).unwrap();
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('#') || (t.is_empty() && current.is_empty()) {
            continue;
        }
        if let Some(head) = t.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
        } else {
            current.push_str(t);
            out.push(std::mem::take(&mut current));
        }
    }
    out
}

#[test]
fn the_dockerfile_builds_in_stages_and_runs_as_non_root() {
    let lines = dockerfile();
    let froms: Vec<&String> = lines.iter().filter(|l| l.starts_with("FROM ")).collect();
    assert!(
        froms.len() >= 2,
        "a build stage and a runtime stage: {froms:?}"
    );
    let last_from = lines.iter().rposition(|l| l.starts_with("FROM ")).unwrap();
    let user = lines[last_from..]
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix("USER "))
        .expect("the runtime stage sets USER");
    let name = user.split(':').next().unwrap().trim();
    assert!(
        name.parse::<u32>().is_ok_and(|uid| uid > 0),
        "USER is a numeric non-root uid (runAsNonRoot can verify it): {user}"
    );
    let build = lines
        .iter()
        .rev()
        .find(|l| l.starts_with("RUN ") && l.contains("cargo build"))
        .expect("a cargo build");
    for word in [
        "--profile dist",
        "--locked",
        "-p fault-server",
        "-p harness",
    ] {
        assert!(build.contains(word), "the build lacks {word}: {build}");
    }
    let runtime = &lines[last_from..];
    for bin in ["fault-server", "harness"] {
        assert!(
            runtime.iter().any(|l| l.starts_with("COPY --from=")
                && l.contains(bin)
                && l.ends_with("/usr/local/bin/")),
            "{bin} is copied into /usr/local/bin"
        );
    }
    assert!(
        runtime.iter().any(|l| l == "COPY scenarios/ /scenarios/"),
        "the scenarios are in /scenarios"
    );
}

/// The settings of one `[profile.NAME]` table of the root Cargo.toml and of its
/// `[profile.NAME.package]` table (one inline table per crate): `(profile, packages)`, each a list
/// of `(key, value)` as written.
type ProfileTables = (Vec<(String, String)>, Vec<(String, String)>);

fn profile_tables(name: &str) -> ProfileTables {
    let text = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let own = format!("[profile.{name}]");
    let packages = format!("[profile.{name}.package]");
    let (mut profile, mut per_package) = (Vec::new(), Vec::new());
    let mut table = String::new();
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            assert!(
                !t.starts_with(&format!("[profile.{name}.package.")),
                "Cargo.toml: write `{t}` as a line of `{packages}`, which this test reads"
            );
            table = t.to_string();
            continue;
        }
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let Some((key, value)) = t.split_once('=') else {
            continue;
        };
        let entry = (key.trim().to_string(), value.trim().to_string());
        if table == own {
            profile.push(entry);
        } else if table == packages {
            per_package.push(entry);
        }
    }
    (profile, per_package)
}

#[test]
fn the_dist_profile_compiles_every_crate_at_opt_level_3() {
    // `dist` (the image, the Action, the benchmarks) inherits `release`, and with it the crates
    // `release` compiles below opt-level 3 for a newcomer's first build: each is set back here.
    let (dist, dist_packages) = profile_tables("dist");
    for setting in [
        ("inherits", "\"release\""),
        ("lto", "\"fat\""),
        ("codegen-units", "1"),
    ] {
        assert!(
            dist.iter()
                .any(|(k, v)| (k.as_str(), v.as_str()) == setting),
            "[profile.dist] lacks `{} = {}`: {dist:?}",
            setting.0,
            setting.1
        );
    }
    let (_, release_packages) = profile_tables("release");
    let lowered: Vec<&String> = release_packages
        .iter()
        .filter(|(_, v)| v.contains("opt-level") && !v.contains("opt-level = 3"))
        .map(|(k, _)| k)
        .collect();
    assert!(
        !lowered.is_empty(),
        "no per-crate opt-level read from [profile.release.package]"
    );
    for crate_name in lowered {
        assert!(
            dist_packages
                .iter()
                .any(|(k, v)| k == crate_name && v == "{ opt-level = 3 }"),
            "[profile.release.package] lowers {crate_name}'s opt-level; \
             [profile.dist.package] must set it back: `{crate_name} = {{ opt-level = 3 }}`"
        );
    }
    for (crate_name, value) in &dist_packages {
        assert_eq!(
            value, "{ opt-level = 3 }",
            "[profile.dist.package] only restores opt-level 3: {crate_name}"
        );
    }
}

#[test]
fn the_dockerfile_copies_every_workspace_member() {
    // The dependency layer is built from the members' manifests with stub sources, then the
    // sources are copied: a member missing from either step breaks the image build.
    let lines = dockerfile();
    for member in workspace_members() {
        let manifest = format!("COPY {member}/Cargo.toml {member}/");
        assert!(
            lines.contains(&manifest),
            "deploy/Dockerfile lacks `{manifest}`"
        );
        let sources = format!("COPY {member}/ {member}/");
        assert!(
            lines.contains(&sources),
            "deploy/Dockerfile lacks `{sources}`"
        );
        let stubs = lines
            .iter()
            .find(|l| l.contains("for member in "))
            .expect("the stub loop");
        assert!(
            stubs
                .split_whitespace()
                .any(|w| w.trim_end_matches(';') == member),
            "the stub loop does not make {member}'s sources"
        );
    }
}

#[test]
fn the_docker_context_leaves_build_output_out() {
    let text = std::fs::read_to_string(root().join(".dockerignore")).expect(".dockerignore");
    let entries: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    for entry in ["target", "**/target", "fuzz/corpus", ".git"] {
        assert!(entries.contains(&entry), ".dockerignore lacks {entry}");
    }
}

// ---------------------------------------------------------------------------------------------
// deploy/merge.sh

fn merge_script() -> PathBuf {
    root().join("deploy/merge.sh")
}

/// A stand-in for kubectl that answers the calls deploy/merge.sh makes from the files of
/// `$FAKE_KUBECTL_DIR` — `job` (completions, succeeded, conditions), `shard-I.log` (the log of
/// shard I's pod), `servers` (fault-server pods and their restarts), `journal-POD.jsonl` — writes
/// each call to `calls`, and refuses any call it does not know, as kubectl would a wrong one.
const FAKE_KUBECTL: &str = r#"#!/usr/bin/env bash
set -eu
d=$FAKE_KUBECTL_DIR
printf '%s\n' "$*" >> "$d/calls"
if [ "$1" != -n ] || [ "$2" != harness ]; then
  echo "fake kubectl: the namespace first (-n harness): $*" >&2; exit 1
fi
shift 2
case "$1 $2" in
  "get job")
    if [ "$3" != harness ]; then
      echo "Error from server (NotFound): jobs.batch \"$3\" not found" >&2; exit 1
    fi
    cat "$d/job" ;;
  "get pods")
    index='' servers=''
    for a in "$@"; do
      case "$a" in
        batch.kubernetes.io/job-name=harness,batch.kubernetes.io/job-completion-index=*)
          index=${a##*=} ;;
        app.kubernetes.io/name=fault-server) servers=1 ;;
      esac
    done
    if [ -n "$index" ]; then
      case " $* " in *" --field-selector=status.phase=Succeeded -o name "*) ;; *)
        echo "fake kubectl: unexpected: $*" >&2; exit 1 ;;
      esac
      if [ -f "$d/shard-$index.log" ]; then echo "pod/harness-$index-x7k2p"; fi
    elif [ -n "$servers" ]; then
      cat "$d/servers"
    else
      echo "fake kubectl: unexpected: $*" >&2; exit 1
    fi ;;
  "logs pod/harness-"*)
    [ "$3 $4" = "-c harness" ] || { echo "fake kubectl: unexpected: $*" >&2; exit 1; }
    i=${2#pod/harness-}
    cat "$d/shard-${i%%-*}.log" ;;
  "exec fault-server-"*)
    [ "$3 $4 $5 $6 $7" = "-c fault-server -- cat /var/lib/fault-server/journal.jsonl" ] \
      || { echo "fake kubectl: unexpected: $*" >&2; exit 1; }
    if [ ! -f "$d/journal-$2.jsonl" ]; then
      echo "error: unable to upgrade connection: container not found" >&2; exit 1
    fi
    cat "$d/journal-$2.jsonl" ;;
  *) echo "fake kubectl: unexpected: $*" >&2; exit 1 ;;
esac
"#;

/// A cluster as deploy/merge.sh sees it through the fake kubectl: a finished Job of two shards
/// whose pods' logs hold real shard reports, and two fault-server replicas.
struct FakeCluster {
    dir: tempfile::TempDir,
}

impl FakeCluster {
    fn new() -> FakeCluster {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        let kubectl = bin.join("kubectl");
        std::fs::write(&kubectl, FAKE_KUBECTL).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&kubectl, std::fs::Permissions::from_mode(0o755)).unwrap();
        let c = FakeCluster { dir };
        c.write("job", "2 2 Complete\n");
        c.write("servers", "fault-server-a 0\nfault-server-b 0\n");
        // Two shards of one run, as the Job's pods print them (a warning on each side).
        let scenario = c.path("scenario.yaml");
        std::fs::write(
            &scenario,
            "server: {}\nphases:\n  - name: p\n    clients: { concurrency: 2, requests: 4 }\n    \
             request: { path: / }\nchecks: { duplicates: {}, thresholds: { rules: [\"p99 < 20s\"] } }\n",
        )
        .unwrap();
        let start_at = harness::shard::now_unix_ms().to_string();
        for i in 0..2 {
            let out = Command::new(env!("CARGO_BIN_EXE_harness"))
                .arg("run")
                .arg(&scenario)
                .args(["--shard", &format!("{i}/2"), "--start-at", &start_at])
                .args(["--format", "json"])
                .output()
                .unwrap();
            assert!(
                matches!(out.status.code(), Some(0 | 1)),
                "shard {i}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let log = format!(
                "2026-01-01T00:00:00Z WARN shard {i} started 3 ms late\n{}\nWARN done\n",
                String::from_utf8_lossy(&out.stdout).trim_end()
            );
            c.write(&format!("shard-{i}.log"), &log);
        }
        c.journals(false);
        c
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn write(&self, name: &str, text: &str) {
        std::fs::write(self.path(name), text).unwrap();
    }

    /// The replicas' journals: an order each, or (`duplicate`) one key that made an order on
    /// each replica.
    fn journals(&self, duplicate: bool) {
        let line = |replica: &str, seq, key: &str, order: &str| {
            let mut e = history::sample::entry(seq, 10.0 * seq as f64)
                .key(key)
                .created(order)
                .status(201)
                .build();
            e.replica = Some(replica.into());
            serde_json::to_string(&e).unwrap() + "\n"
        };
        self.write(
            "journal-fault-server-a.jsonl",
            &line("fault-server-a", 1, "k-1", "o-1"),
        );
        let key_b = if duplicate { "k-1" } else { "k-2" };
        self.write(
            "journal-fault-server-b.jsonl",
            &line("fault-server-b", 1, key_b, "o-2"),
        );
    }

    /// Runs deploy/merge.sh with `args`; (exit code, stdout and stderr).
    fn merge(&self, args: &[&str]) -> (Option<i32>, String) {
        let path = format!(
            "{}:{}",
            self.path("bin").display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = Command::new("bash")
            .arg(merge_script())
            .args(["--out"])
            .arg(self.path("out"))
            .args(args)
            .env("PATH", path)
            .env("FAKE_KUBECTL_DIR", self.dir.path())
            .env("HARNESS", env!("CARGO_BIN_EXE_harness"))
            .env_remove("FAULT_SERVER_CONTROL_TOKEN")
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    }
}

#[test]
fn the_merge_script_is_valid_shell() {
    let out = Command::new("bash")
        .arg("-n")
        .arg(merge_script())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "bash -n deploy/merge.sh: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    match Command::new("shellcheck").arg(merge_script()).output() {
        Ok(out) => assert!(
            out.status.success(),
            "shellcheck deploy/merge.sh:\n{}",
            String::from_utf8_lossy(&out.stdout)
        ),
        Err(_) => println!("skipping shellcheck: not installed"),
    }
    // It reads the journal where the fault-server Deployment writes it.
    let deploy = resource("Deployment", "fault-server");
    let cmd = command_text(container(
        &deploy["spec"]["template"]["spec"],
        "fault-server",
    ));
    let script = std::fs::read_to_string(merge_script()).unwrap();
    let journal = cmd
        .split("--journal ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .expect("the server's --journal");
    assert!(
        script.contains(&format!("JOURNAL={journal}\n")),
        "deploy/merge.sh reads {journal}"
    );
}

#[test]
fn the_merge_script_collects_every_shard_and_replica_and_exits_as_merge_does() {
    let c = FakeCluster::new();
    let (code, text) = c.merge(&["--", "--format", "json"]);
    assert_eq!(code, Some(0), "{text}");
    let merged: reports::Report =
        reports::from_json(&std::fs::read_to_string(c.path("out/merged/report.json")).unwrap())
            .unwrap();
    assert_eq!(merged.shard.as_ref().unwrap().merged, vec![0, 1]);
    assert_eq!(merged.requests.sent, 4, "both shards' requests");
    assert!(
        merged
            .notes
            .iter()
            .any(|n| n.contains("2 journals (2 replicas: fault-server-a, fault-server-b)")),
        "{:?}",
        merged.notes
    );
    for f in [
        "shard-0.json",
        "shard-1.json",
        "journal-fault-server-a.jsonl",
        "journal-fault-server-b.jsonl",
        "merged/journal.jsonl",
        "merged/junit.xml",
    ] {
        assert!(c.path("out").join(f).is_file(), "{f}: {text}");
    }
    // The warnings the log interleaves stay out of the reports.
    let shard0 = std::fs::read_to_string(c.path("out/shard-0.json")).unwrap();
    assert!(shard0.starts_with('{') && !shard0.contains("WARN"));
    let calls = std::fs::read_to_string(c.path("calls")).unwrap();
    assert_eq!(calls.lines().filter(|l| l.contains(" logs ")).count(), 2);
    assert_eq!(calls.lines().filter(|l| l.contains(" exec ")).count(), 2);

    // A duplicate only the union of the replicas' journals shows: merge fails, and so does the
    // script, naming the key.
    c.journals(true);
    let (code, text) = c.merge(&[]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("k-1"), "{text}");
}

#[test]
fn the_merge_script_says_why_it_cannot_merge() {
    let c = FakeCluster::new();
    let refused = |args: &[&str], says: &str| {
        let (code, text) = c.merge(args);
        assert_eq!(code, Some(3), "{args:?}: {text}");
        assert!(text.contains(says), "{args:?}: {text}");
        assert!(
            !c.path("out/merged/report.json").exists(),
            "{args:?}: merged anyway"
        );
    };
    c.write("job", "2 1\n");
    refused(
        &[],
        "not complete yet (1 of 2 shards done): wait with kubectl",
    );
    c.write("job", "2 1 Failed\n");
    refused(&[], "Job harness failed (1 of 2 shards succeeded)");
    c.write("job", "2 2 Complete\n");
    refused(
        &["--job", "other"],
        "cannot read Job other in namespace harness",
    );

    let log = std::fs::read_to_string(c.path("shard-1.log")).unwrap();
    c.write("shard-1.log", "WARN target unreachable\n");
    refused(
        &[],
        "shard 1: the log of pod/harness-1-x7k2p holds no report",
    );
    std::fs::remove_file(c.path("shard-1.log")).unwrap();
    refused(&[], "shard 1: no succeeded pod of Job harness");
    c.write("shard-1.log", &log);

    c.write("servers", "fault-server-a 0\nfault-server-b 1\n");
    refused(&[], "fault-server pod fault-server-b restarted (1 times)");
    let (code, text) = c.merge(&["--allow-restarts"]);
    assert_eq!(code, Some(0), "{text}");
    std::fs::remove_dir_all(c.path("out")).unwrap();
    c.write("servers", "fault-server-a 0\nfault-server-c 0\n");
    refused(&[], "cannot read the journal of fault-server-c");
    c.write("servers", "");
    refused(&[], "no fault-server pods");

    // Without kubectl at all.
    let bash = std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .map(|d| d.join("bash"))
        .find(|p| p.is_file())
        .expect("bash on PATH");
    let out = Command::new(bash)
        .arg(merge_script())
        .env("PATH", c.path("nothing"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(String::from_utf8_lossy(&out.stderr).contains("kubectl not found on PATH"));
    // And a wrong argument.
    let (code, text) = c.merge(&["--bogus"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("unknown argument --bogus"), "{text}");
}
