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

# The fault server with one path per fault, for curl
fault-server:
    {{release}} -p fault-server -- --config fault-server/examples/all-faults.yaml

# Idempotency under concurrency: the correct implementation passes
idempotency-burst:
    {{release}} -p harness -- run scenarios/idempotency-burst.yaml

# Idempotency under concurrency: SELECT-then-INSERT fails with duplicates
idempotency-race:
    {{release}} -p harness -- run scenarios/idempotency-race.yaml

# Run every scenario and show its verdict
scenarios:
    #!/usr/bin/env bash
    for s in scenarios/*.yaml; do
      {{release}} -p harness -- run "$s" --format json > /dev/null; echo "$s: exit $?"
    done

# Benchmarks against wrk and oha (see BENCHMARKS.md)
bench:
    bash bench/run.sh
