# Recipes for the chaos harness. `just --list` shows them all.

release := "cargo run --release --quiet"

# The main job: mixed faults against a well-behaved retrying client
demo:
    {{release}} -p harness -- run scenarios/quickstart.yaml

# The tests (what CI runs after fmt and clippy)
test:
    cargo test --workspace

# Exactly what CI runs
ci:
    bash .ci/run

# The book (docs/): built into docs/book with a pinned mdBook, failing on a broken internal link
docs:
    bash .ci/docs

# The fault server with one path per fault, for curl
fault-server:
    {{release}} -p fault-server -- --config fault-server/examples/all-faults.yaml

# Idempotency under concurrency: the correct implementation passes
idempotency-burst:
    {{release}} -p harness -- run scenarios/idempotency-burst.yaml

# Idempotency under concurrency: SELECT-then-INSERT fails with duplicates
idempotency-race:
    {{release}} -p harness -- run scenarios/idempotency-race.yaml

# Exercise 1 without a network: the seed's table
simulate-herd:
    {{release}} -p harness -- simulate herd

# Exercise 1 with real clients: the four jitter kinds, reports (with the charts) in out/<name>/
herd:
    #!/usr/bin/env bash
    for j in none equal full decorrelated; do
      {{release}} -p harness -- run scenarios/thundering-herd-$j.yaml --report-dir out/thundering-herd-$j --format markdown | head -12
    done

# Exercise 2: retry amplification through relay tiers, and its mitigations
amplification:
    #!/usr/bin/env bash
    for s in 3 4 innermost budget deadline breaker; do
      {{release}} -p harness -- run scenarios/retry-amplification-$s.yaml | head -8
    done

# Exercise 3: lost responses, with the same key and with a new key per attempt
lost-response:
    -{{release}} -p harness -- run scenarios/idempotency-lost-response.yaml
    -{{release}} -p harness -- run scenarios/idempotency-lost-response-new-key.yaml

# Conditional state transitions, and the read-then-write race
state-transition:
    -{{release}} -p harness -- run scenarios/state-transition.yaml
    -{{release}} -p harness -- run scenarios/state-transition-race.yaml

# Retry-After ignored, then honoured
retry-after:
    -{{release}} -p harness -- run scenarios/retry-after.yaml
    -{{release}} -p harness -- run scenarios/retry-after-honored.yaml

# A sustained outage without and with a circuit breaker
circuit-breaker:
    -{{release}} -p harness -- run scenarios/circuit-breaker.yaml
    -{{release}} -p harness -- run scenarios/circuit-breaker-with-breaker.yaml

# A client that retries 400s
retry-on-4xx:
    -{{release}} -p harness -- run scenarios/retry-on-4xx.yaml

# Per-attempt timeouts without and with a total timeout
total-timeout:
    -{{release}} -p harness -- run scenarios/total-timeout.yaml
    -{{release}} -p harness -- run scenarios/total-timeout-bounded.yaml

# The CI gate on the example service: naive fails, resilient passes
ci-gate mode="naive":
    cargo build --release -p harness --example orders_service
    {{release}} -p harness -- exec scenarios/ci-gate-example.yaml -- \
      target/release/examples/orders_service --bind 127.0.0.1:18700 --payments-url '$HARNESS_FAULT_URL' --mode {{mode}}

# Run every scenario and show its verdict
scenarios:
    #!/usr/bin/env bash
    for s in scenarios/*.yaml; do
      [ "$s" = scenarios/ci-gate-example.yaml ] && continue   # needs `just ci-gate`
      {{release}} -p harness -- run "$s" --format json > /dev/null; echo "$s: exit $?"
    done

# Benchmarks against wrk and oha (see BENCHMARKS.md)
bench:
    bash bench/run.sh
