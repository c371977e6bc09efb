//! The control API: schedule replacement, reset, stats, health — never journaled, never faulted.

mod common;

use std::time::Duration;

#[tokio::test]
async fn schedule_can_be_replaced_and_a_bad_one_is_refused() {
    let s = common::start("rules:\n  - { id: all, fault: { status: 503 } }\n").await;
    let c = reqwest::Client::new();
    let u = |p: &str| format!("{}{p}", s.url());
    assert_eq!(c.get(u("/x")).send().await.unwrap().status(), 503);
    // The control API is never faulted, even by a match-everything rule.
    assert_eq!(
        c.get(u("/__harness/health")).send().await.unwrap().status(),
        200
    );

    let bad = c
        .put(u("/__harness/schedule"))
        .body("rules:\n  - fault: { status: 999 }\n")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let reason = bad.text().await.unwrap();
    assert!(
        reason.contains("schedule:2:")
            && reason.contains("rules[0].fault")
            && reason.contains("out of range"),
        "{reason}"
    );
    assert_eq!(
        c.get(u("/x")).send().await.unwrap().status(),
        503,
        "the old schedule stays"
    );

    let ok = c
        .put(u("/__harness/schedule"))
        .body(r#"{"rules": [{"id": "teapot", "match": {"path": "/x"}, "fault": {"status": 418}}]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    assert_eq!(c.get(u("/x")).send().await.unwrap().status(), 418);
    assert_eq!(c.get(u("/y")).send().await.unwrap().status(), 200);

    assert!(s.settle(Duration::from_secs(5)).await);
    let stats: serde_json::Value = c
        .get(u("/__harness/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["requests"], 4);
    assert_eq!(stats["by_rule"]["all"], 2);
    assert_eq!(stats["by_rule"]["teapot"], 1);
    assert_eq!(stats["by_fault"]["status"], 3);
    assert_eq!(stats["by_status"]["418"], 1);
    assert_eq!(stats["by_outcome"]["responded"], 4);
    assert_eq!(
        s.journal().written(),
        4,
        "control requests are not journaled"
    );
}

#[tokio::test]
async fn reset_clears_journal_counters_and_store() {
    let s = common::start(
        "rules:\n  - { id: first, match: { requests: 1 }, fault: { status: 503 } }\n",
    )
    .await;
    let c = reqwest::Client::new();
    let u = |p: &str| format!("{}{p}", s.url());
    assert_eq!(c.get(u("/a")).send().await.unwrap().status(), 503);
    let r = c
        .post(u("/orders"))
        .header("idempotency-key", "k")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(
        c.post(u("/__harness/reset")).send().await.unwrap().status(),
        200
    );
    assert_eq!(s.journal().written(), 0);
    // Request numbering starts again, so `requests: 1` fires again; the key is new again.
    assert_eq!(c.get(u("/a")).send().await.unwrap().status(), 503);
    let r = c
        .post(u("/orders"))
        .header("idempotency-key", "k")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let j = common::journal(&s).await;
    assert_eq!(j.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(j[1].key_attempt, Some(1));
    let health: serde_json::Value = c
        .get(u("/__harness/health"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(health["status"], "ok");
    assert_eq!(health["received"], 2);
    assert_eq!(
        c.get(u("/__harness/nope")).send().await.unwrap().status(),
        404
    );
}

#[tokio::test]
async fn random_faults_are_reproducible_whatever_the_arrival_order() {
    let yaml =
        "seed: 11\nrules:\n  - { id: coin, match: { probability: 0.4 }, fault: { status: 503 } }\n";
    let outcome = |order: Vec<usize>| async move {
        let s = common::start(yaml).await;
        let c = reqwest::Client::new();
        let mut got = vec![0u16; order.len()];
        for i in order {
            got[i] = c
                .post(format!("{}/orders", s.url()))
                .header("idempotency-key", format!("key-{i}"))
                .body("{}")
                .send()
                .await
                .unwrap()
                .status()
                .as_u16();
        }
        got
    };
    let forward = outcome((0..60).collect()).await;
    let backward = outcome((0..60).rev().collect()).await;
    assert_eq!(forward, backward);
    let faulted = forward.iter().filter(|s| **s == 503).count();
    assert!((10..40).contains(&faulted), "{faulted}");
}

/// `name{labels} value` lines of an exposition, as (name, labels, value).
fn samples(text: &str) -> Vec<(String, std::collections::BTreeMap<String, String>, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("a sample line");
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split(',')
                .filter(|kv| !kv.is_empty())
                .map(|kv| {
                    let (k, v) = kv.split_once('=').expect("label=value");
                    (k.to_string(), v.trim_matches('"').to_string())
                })
                .collect();
            (name.to_string(), labels, value.parse().expect("a number"))
        })
        .collect()
}

#[tokio::test]
async fn metrics_count_what_was_sent() {
    let s = common::start(
        "rules:\n  - { id: down, match: { path: /down }, fault: { status: 503 } }\n  - { id: gone, match: { path: /gone }, fault: drop }\n",
    )
    .await;
    let c = reqwest::Client::new();
    let u = |p: &str| format!("{}{p}", s.url());
    for _ in 0..5 {
        assert_eq!(c.get(u("/down")).send().await.unwrap().status(), 503);
    }
    for _ in 0..7 {
        assert_eq!(c.get(u("/up")).send().await.unwrap().status(), 200);
    }
    for _ in 0..2 {
        assert!(c.get(u("/gone")).send().await.is_err(), "dropped");
    }
    assert!(s.settle(Duration::from_secs(30)).await);

    let res = c.get(u("/__harness/metrics")).send().await.unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(
        res.headers()["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let text = res.text().await.unwrap();
    assert!(text.ends_with("# EOF\n"), "{text}");
    assert!(
        text.contains("# TYPE fault_server_requests counter"),
        "{text}"
    );
    let samples = samples(&text);
    let requests = |rule: &str, fault: &str, status: &str, outcome: &str| {
        samples
            .iter()
            .filter(|(n, l, _)| {
                n == "fault_server_requests_total"
                    && l["rule"] == rule
                    && l["fault"] == fault
                    && l["status"] == status
                    && l["outcome"] == outcome
            })
            .map(|(_, _, v)| *v)
            .sum::<f64>()
    };
    assert_eq!(
        requests("down", "status", "503", "responded"),
        5.0,
        "{text}"
    );
    assert_eq!(requests("none", "none", "200", "responded"), 7.0, "{text}");
    assert_eq!(requests("gone", "drop", "none", "dropped"), 2.0, "{text}");
    let total: f64 = samples
        .iter()
        .filter(|(n, _, _)| n == "fault_server_requests_total")
        .map(|(_, _, v)| *v)
        .sum();
    assert_eq!(total, 14.0, "{text}");
    let gauge = |name: &str| {
        samples
            .iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, _, v)| *v)
            .unwrap_or_else(|| panic!("{name} in {text}"))
    };
    assert_eq!(gauge("fault_server_journal_entries"), 14.0);
    assert_eq!(gauge("fault_server_received_requests"), 14.0);
    assert!(gauge("fault_server_open_connections") >= 0.0);

    // The same access rules as the rest of the control API.
    let refused = c
        .get(u("/__harness/metrics"))
        .header("host", "evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 403);

    // A reset starts the counts again.
    c.post(u("/__harness/reset")).send().await.unwrap();
    let text = c
        .get(u("/__harness/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(!text.contains("fault_server_requests_total{"), "{text}");
    s.shutdown().await;
}

/// Every `fault_server_…` metric name in `text`.
fn metric_names(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("fault_server_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// What a scrape says the server exports, checked against `fault_server::metrics::ALL` (a family
/// with no sample is left out of a scrape, so the list is what names them all); then
/// `deploy/grafana/dashboard.json`, the dashboard for them (and for the harness's own metrics,
/// `harness_*`, which the harness's tests check), queries every one and no other
/// `fault_server_*` name. Its panels are what Grafana imports: unique ids, a place on the 24-column grid, the
/// Prometheus data source the dashboard asks for.
#[tokio::test]
async fn the_grafana_dashboard_queries_every_metric_the_server_exports_and_no_other() {
    use fault_server::metrics::ALL;
    let s = common::start(
        "rules:\n  - { id: down, match: { path: /down }, fault: { status: 503 } }\nproxies:\n  - { name: db, listen: 127.0.0.1:0, upstream: 127.0.0.1:9 }\n",
    )
    .await;
    let c = reqwest::Client::new();
    let u = |p: &str| format!("{}{p}", s.url());
    assert_eq!(c.get(u("/down")).send().await.unwrap().status(), 503);
    assert!(s.settle(Duration::from_secs(30)).await);
    let text = c
        .get(u("/__harness/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    s.shutdown().await;
    // Every family the scrape has is in the list, with its kind and help.
    let mut seen = 0;
    for line in text.lines() {
        let Some((name, kind)) = line.strip_prefix("# TYPE ").and_then(|l| l.split_once(' '))
        else {
            continue;
        };
        let m = ALL
            .iter()
            .find(|m| format!("fault_server_{}", m.name) == name)
            .unwrap_or_else(|| panic!("{name} is exported but not in metrics::ALL"));
        assert_eq!(kind, m.kind.name(), "{name}");
        assert!(
            text.contains(&format!("# HELP {name} {}", m.help)),
            "{name}: {text}"
        );
        seen += 1;
    }
    // What this server had samples for: the requests, the journal, connections and its proxy.
    assert!(seen >= 5, "{text}");

    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/grafana/dashboard.json");
    let raw = std::fs::read_to_string(&path).expect("deploy/grafana/dashboard.json");
    let dashboard: serde_json::Value = serde_json::from_str(&raw).expect("the dashboard is JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut ids = std::collections::BTreeSet::new();
    let mut queried = std::collections::BTreeSet::new();
    for p in panels {
        let title = p["title"].as_str().unwrap_or_default();
        assert!(
            ids.insert(p["id"].as_u64().expect("an id")),
            "{title}: its id is unique"
        );
        let g = &p["gridPos"];
        let (x, w) = (g["x"].as_u64().expect("x"), g["w"].as_u64().expect("w"));
        assert!(
            x + w <= 24 && g["h"].as_u64().is_some(),
            "{title}: on the grid"
        );
        if p["type"] == "row" {
            continue;
        }
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: queries something");
        for t in targets {
            let expr = t["expr"].as_str().expect("a PromQL expression");
            let names = metric_names(expr);
            // The harness's panels query `harness_*`, which the harness's tests check.
            assert!(
                !names.is_empty() || expr.contains("harness_"),
                "{title}: {expr}"
            );
            queried.extend(names);
        }
    }
    let variables = dashboard["templating"]["list"].to_string();
    assert!(variables.contains("\"type\":\"datasource\""), "{variables}");
    queried.extend(metric_names(&variables));
    let exported: std::collections::BTreeSet<String> = ALL.iter().map(|m| m.series()).collect();
    let unknown: Vec<_> = queried.difference(&exported).collect();
    assert!(
        unknown.is_empty(),
        "the dashboard queries metrics the server does not export: {unknown:?}"
    );
    let missing: Vec<_> = exported.difference(&queried).collect();
    assert!(missing.is_empty(), "exported, on no panel: {missing:?}");
}
