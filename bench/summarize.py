#!/usr/bin/env python3
"""Summarizes the raw samples of bench/run.sh: medians, ratios to anchors, targets.

    python3 bench/summarize.py RAW.tsv OUT.json [--meta key=value ...]

A ratio is computed per round (both sides measured in the same round, back to back) and the
median of those per-round ratios is reported, next to the ratio of the medians.
"""

import json
import os
import platform
import statistics
import subprocess
import sys
from collections import defaultdict


def load(path):
    samples = defaultdict(dict)  # (name, metric) -> {round: value}
    with open(path) as f:
        next(f)
        for line in f:
            part, name, rnd, metric, value = line.rstrip("\n").split("\t")
            try:
                samples[(name, metric)][int(rnd)] = float(value)
            except ValueError:
                pass
    return samples


def median(xs):
    return statistics.median(xs) if xs else None


def machine():
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    def out(cmd):
        try:
            return subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
        except OSError:
            return ""
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "kernel": platform.release(),
        "wrk": out(["wrk", "--version"]).splitlines()[0] if out(["wrk", "--version"]) else "",
        "oha": out(["oha", "--version"]),
        "h2load": out(["h2load", "--version"]).splitlines()[0] if out(["h2load", "--version"]) else "",
        "rustc": out(["rustc", "--version"]),
    }


def main():
    raw, out = sys.argv[1], sys.argv[2]
    meta = {}
    if "--meta" in sys.argv:
        for kv in sys.argv[sys.argv.index("--meta") + 1:]:
            k, v = kv.split("=", 1)
            meta[k] = v
    s = load(raw)

    def med(name, metric):
        return median(list(s.get((name, metric), {}).values()))

    def ratio(num, den, metric, num_metric=None):
        a = s.get((num, num_metric or metric), {})
        b = s.get((den, metric), {})
        per_round = [a[r] / b[r] for r in sorted(a) if r in b and b[r]]
        ma, mb = med(num, num_metric or metric), med(den, metric)
        return {
            "median_of_round_ratios": median(per_round),
            "ratio_of_medians": (ma / mb) if ma and mb else None,
            "rounds": per_round,
        }

    medians = {}
    for (name, metric), by_round in sorted(s.items()):
        medians.setdefault(name, {})[metric] = median(list(by_round.values()))

    targets = []

    def target(what, value, goal, ok, anchor):
        targets.append({"target": what, "value": value, "goal": goal, "met": ok, "anchor": anchor})

    rate_goal = float(meta.get("rate", 20000))
    if ("harness-fault", "rps") in s:
        r1 = ratio("harness-fault", "oha-fault", "rps")
        r2 = ratio("harness-fault", "wrk-fault", "rps")
        r3 = ratio("wrk-fault", "wrk-axum", "rps")
        r4 = ratio("harness-axum", "wrk-axum", "rps")
        v1, v2, v3 = r1["median_of_round_ratios"], r2["median_of_round_ratios"], r3["median_of_round_ratios"]
        target("harness load -c 64 vs oha -c 64 (fault server)", v1, ">= 1.0", v1 is not None and v1 >= 1.0, "oha-fault")
        target("harness load -c 64 vs wrk -t1 -c64 (fault server)", v2, ">= 0.85", v2 is not None and v2 >= 0.85, "wrk-fault")
        target("fault server (journal, 5 rules) vs bare axum, wrk -t1 -c64", v3, ">= 0.8", v3 is not None and v3 >= 0.8, "wrk-axum")
        ratios_tp = {
            "harness-fault/oha-fault": r1,
            "harness-fault/wrk-fault": r2,
            "wrk-fault/wrk-axum": r3,
            "harness-axum/wrk-axum": r4,
        }
        # CPU per request: what each side costs, less swayed by other load than throughput.
        if ("harness-fault", "client_cpu_us") in s:
            ratios_tp["client CPU/req harness-fault/wrk-fault"] = ratio("harness-fault", "wrk-fault", "client_cpu_us")
            ratios_tp["client CPU/req harness-fault/oha-fault"] = ratio("harness-fault", "oha-fault", "client_cpu_us")
            ratios_tp["server CPU/req fault/axum (wrk)"] = ratio("wrk-fault", "wrk-axum", "server_cpu_us")
    else:
        ratios_tp = {}
    if ("harness-rate-fault", "rps") in s:
        rr = s[("harness-rate-fault", "rps")]
        per_round = [v / rate_goal for v in rr.values()]
        v = median(per_round)
        target(f"harness load --rate {int(rate_goal)} holds the rate within 1%", v, "0.99..1.01",
               v is not None and abs(v - 1) <= 0.01, f"{int(rate_goal)} req/s")
        ratios_tp["harness-rate/requested"] = {"median_of_round_ratios": v, "rounds": per_round}
        ratios_tp["harness-rate/oha-rate (rps)"] = ratio("harness-rate-fault", "oha-rate-fault", "rps")
        ratios_tp["harness-rate/oha-rate (intended p99)"] = ratio(
            "harness-rate-fault", "oha-rate-fault", "intended_p99_ms")
    if ("harness-tls", "rps") in s:
        t1 = ratio("harness-tls", "wrk-tls", "rps")
        t2 = ratio("harness-tls", "oha-tls", "rps")
        v1, v2 = t1["median_of_round_ratios"], t2["median_of_round_ratios"]
        target("harness load https -c 64 vs wrk -t1 -c64 (TLS)", v1, ">= 1.0", v1 is not None and v1 >= 1.0, "wrk-tls")
        target("harness load https -c 64 vs oha -c 64 (TLS)", v2, ">= 1.0", v2 is not None and v2 >= 1.0, "oha-tls")
        ratios_tp["harness-tls/wrk-tls"] = t1
        ratios_tp["harness-tls/oha-tls"] = t2
        ratios_tp["client CPU/req harness-tls/wrk-tls"] = ratio("harness-tls", "wrk-tls", "client_cpu_us")
        for side in ("client_cpu_us", "server_cpu_us"):
            a = med("harness-close-tls", side)
            b = med("harness-close-plain", side)
            if a is not None and b is not None:
                medians.setdefault("tls-handshake", {})[side] = a - b
    def against(side, anchor, what, goal, cpu_metric, cpu_label):
        """The throughput ratio of `side` to `anchor` as a target (at least `goal`), and the ratio
        of their CPU per request."""
        r = ratio(side, anchor, "rps")
        v = r["median_of_round_ratios"]
        target(what, v, f">= {goal}", v is not None and v >= goal, anchor)
        ratios_tp[f"{side}/{anchor}"] = r
        ratios_tp[cpu_label] = ratio(side, anchor, cpu_metric)

    for name, what in (
        ("harness-h2", "harness load --http2 -c 4 --streams 100 vs h2load -c 4 -m 100"),
        ("harness-h2-t1", "harness --threads 1 load --http2 -c 4 --streams 100 vs h2load -c 4 -m 100 (one thread each)"),
    ):
        if (name, "rps") in s:
            against(name, "h2load-h2", what, 1.0, "client_cpu_us", f"client CPU/req {name}/h2load-h2")
    if ("harness-grpc-fault", "rps") in s:
        against("harness-grpc-fault", "h2load-grpc-fault",
                "harness load grpc:// -c 4 --streams 100 vs h2load -c 4 -m 100 (fault server, canned GetOrder)",
                1.0, "client_cpu_us", "client CPU/call harness-grpc-fault/h2load-grpc-fault")
    if ("h2load-grpc-tonic", "rps") in s:
        against("h2load-grpc-fault", "h2load-grpc-tonic",
                "fault server (journal on) vs bare tonic, unary GetOrder under h2load -c 4 -m 100",
                0.9, "server_cpu_us", "server CPU/call fault/tonic (h2load)")
    if ("wrk-proxy-fault", "rps") in s:
        px = ratio("wrk-proxy-fault", "wrk-proxy-nginx", "rps")
        v = px["median_of_round_ratios"]
        target("fault-server --upstream vs nginx proxy_pass, wrk -c 64", v, ">= 0.95",
               v is not None and v >= 0.95, "wrk-proxy-nginx")
        ratios_tp["wrk-proxy-fault/wrk-proxy-nginx"] = px
        if ("wrk-proxy-bare", "rps") in s:
            # The floor (examples/bare_proxy.rs): what a tokio proxy doing nothing else reaches.
            ratios_tp["wrk-proxy-bare/wrk-proxy-nginx"] = ratio("wrk-proxy-bare", "wrk-proxy-nginx", "rps")
            ratios_tp["wrk-proxy-fault/wrk-proxy-bare"] = ratio("wrk-proxy-fault", "wrk-proxy-bare", "rps")
        for who in ("fault", "nginx"):
            for q in ("p50_ms", "p99_ms"):
                a, b = med(f"lat-proxy-{who}", q), med("lat-upstream", q)
                if a is not None and b is not None:
                    medians.setdefault(f"lat-proxy-{who}", {})[f"added_{q}"] = a - b
    for mode in ("burst-last-byte", "burst-single-packet", "burst"):
        if (f"sync-{mode}", "skew_max_us") in s:
            v = med(f"sync-{mode}", "skew_max_us")
            goal_ok = v is not None and (v < 100 if mode != "burst" else v < 1000)
            target(f"release skew max, {mode}", v, "< 100 us" if mode != "burst" else "< 1000 us", goal_ok, "100 us")
    if ("idempotency-burst", "skew_max_us") in s:
        v = med("idempotency-burst", "skew_max_us")
        target("burst release skew max (10 requests)", v, "< 1000 us", v is not None and v < 1000, "1 ms")
    if ("analyze-1m", "wall_s") in s:
        v = med("analyze-1m", "wall_s")
        target("harness analyze, 1,000,000 entries", v, "< 5 s", v is not None and v < 5, "5 s")
        ratios_tp["analyze-1m/analyze-250k (rss)"] = ratio("analyze-1m", "analyze-250k", "rss_kb")
        ratios_tp["analyze-1m/analyze-250k (wall)"] = ratio("analyze-1m", "analyze-250k", "wall_s")
    if ("harness-10k", "rss_kb") in s:
        v = med("harness-10k", "rss_kb")
        target("harness load RSS at 10k connections", v / 1024 if v else None, "< 300 MB",
               v is not None and v < 300 * 1024, "300 MB")
        ratios_tp["harness-10k/wrk-10k (rss)"] = ratio("harness-10k", "wrk-10k", "rss_kb")
        ratios_tp["harness-10k/oha-10k (rss)"] = ratio("harness-10k", "oha-10k", "rss_kb")
    soak = s.get(("harness-soak", "rss_kb"), {})
    if soak:
        ts = sorted(soak)
        warm = [t for t in ts if t >= 10] or ts
        first, last, peak = soak[warm[0]], soak[ts[-1]], max(soak.values())
        growth = last / first if first else None
        target("soak: driver RSS flat (last / first sample after 10 s)", growth, "<= 1.05",
               growth is not None and growth <= 1.05, "RSS at 10 s")
        medians["harness-soak"]["rss_first_kb"] = first
        medians["harness-soak"]["rss_last_kb"] = last
        medians["harness-soak"]["rss_peak_kb"] = peak
    ssoak = s.get(("fault-server-soak", "rss_kb"), {})
    if ssoak:
        ts = sorted(ssoak)
        warm = [t for t in ts if t >= 60] or ts
        first, last, peak = ssoak[warm[0]], ssoak[ts[-1]], max(ssoak.values())
        growth = last / first if first else None
        target("server soak: fault-server RSS flat at 20k req/s (last / first sample after 60 s)",
               growth, "<= 1.10", growth is not None and growth <= 1.10, "RSS at 60 s")
        medians["fault-server-soak"]["rss_first_kb"] = first
        medians["fault-server-soak"]["rss_last_kb"] = last
        medians["fault-server-soak"]["rss_peak_kb"] = peak

    summary = {
        "meta": meta,
        "machine": machine(),
        "medians": medians,
        "ratios": ratios_tp,
        "targets": targets,
        "samples": {f"{n}/{m}": v for (n, m), v in sorted(s.items())},
    }
    with open(out, "w") as f:
        json.dump(summary, f, indent=2)
        f.write("\n")

    print("\n== medians")
    for name, metrics in medians.items():
        shown = ", ".join(f"{m}={v:.4g}" for m, v in metrics.items() if v is not None)
        print(f"  {name:22} {shown}")
    print("\n== ratios (median of per-round ratios; ratio of medians)")
    for k, r in ratios_tp.items():
        a, b = r.get("median_of_round_ratios"), r.get("ratio_of_medians")
        fa = f"{a:.3f}" if a is not None else "-"
        fb = f"{b:.3f}" if b is not None else "-"
        print(f"  {k:40} {fa:>8} {fb:>8}")
    print("\n== targets")
    for t in targets:
        v = t["value"]
        fv = f"{v:.4g}" if isinstance(v, (int, float)) else "-"
        print(f"  [{'met' if t['met'] else 'NOT MET'}] {t['target']}: {fv} (goal {t['goal']}, anchor {t['anchor']})")
    print(f"\nsummary: {out}")


if __name__ == "__main__":
    main()
