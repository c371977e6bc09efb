#!/usr/bin/env bash
# Benchmarks of the harness and the fault server against wrk, oha and a bare axum hello-world.
#
#   bash bench/run.sh [--rounds N] [--secs S] [--soak S] [--only LIST]     (or: just bench)
#
# Every competitor is measured in the same run, interleaved round by round (the order rotates each
# round), so a build that starts on this machine halfway through slows every tool alike; results
# are reported as medians and as ratios to their anchor. Load only ever goes to 127.0.0.1.
#
#   --rounds N   rounds of the interleaved measurements (default 3)
#   --secs S     seconds per measurement (default 5)
#   --soak S     length of the RSS soaks (default 60; the documented runs use 3600): the driver
#                at 5k req/s, and the fault server at 20k req/s with its journal kept
#   --only LIST  comma-separated parts: throughput,rate,burst,analyze,merge,orders-store,conns,soak,server-soak,
#                tls,h2,grpc,sync,proxy (default: all)
#   --summary F  where the summary goes (default bench/results/latest.json)
#
# Raw samples go to bench/results/raw-<time>.tsv; the summary to --summary.
# BENCHMARKS.md says what each number means and what the last documented run gave.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=3
SECS=5
SOAK=60
ONLY="throughput,rate,burst,analyze,merge,orders-store,conns,soak,server-soak,tls,h2,grpc,sync,proxy"
SUMMARY=bench/results/latest.json
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --secs) SECS="$2"; shift 2 ;;
    --soak) SOAK="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    --summary) SUMMARY="$2"; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "bench/run.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
wants() { [[ ",$ONLY," == *",$1,"* ]]; }

CONNS=64
RATE=20000
BIG_CONNS=10000
SOAK_RATE=5000
SERVER_SOAK_RATE=20000

# --- tools ----------------------------------------------------------------------------------------
echo "== building (dist: the whole program optimized as one)"
cargo build --profile dist -p fault-server -p harness --examples --bins
BIN=target/dist
HARNESS=$BIN/harness

if wants grpc; then
  echo "== building the bare tonic server (bench/tonic-orders, the gRPC anchor)"
  CARGO_TARGET_DIR=target/bench-tonic cargo build --release --manifest-path bench/tonic-orders/Cargo.toml
fi

# wrk and oha only for the parts that run them.
NEEDS_WRK_OHA=0
for part in throughput rate tls conns proxy soak server-soak; do
  if wants "$part"; then NEEDS_WRK_OHA=1; fi
done
if [ $NEEDS_WRK_OHA = 1 ] && ! command -v wrk >/dev/null 2>&1; then
  echo "== installing wrk"
  flock /tmp/apt.harness.lock apt-get -o DPkg::Lock::Timeout=600 update -qq && DEBIAN_FRONTEND=noninteractive flock /tmp/apt.harness.lock apt-get -o DPkg::Lock::Timeout=600 install -y -qq wrk >/dev/null
fi
if ! command -v h2load >/dev/null 2>&1; then
  echo "== installing h2load (nghttp2-client)"
  flock /tmp/apt.harness.lock apt-get -o DPkg::Lock::Timeout=600 update -qq && DEBIAN_FRONTEND=noninteractive flock /tmp/apt.harness.lock apt-get -o DPkg::Lock::Timeout=600 install -y -qq nghttp2-client >/dev/null
fi
if wants proxy && ! command -v nginx >/dev/null 2>&1; then
  echo "== installing nginx (the proxy part's upstream and its proxy_pass anchor)"
  flock /tmp/apt.harness.lock apt-get -o DPkg::Lock::Timeout=600 update -qq && DEBIAN_FRONTEND=noninteractive flock /tmp/apt.harness.lock apt-get -o DPkg::Lock::Timeout=600 install -y -qq nginx >/dev/null
fi
if [ $NEEDS_WRK_OHA = 1 ] && ! command -v oha >/dev/null 2>&1; then
  echo "== installing oha (a few minutes of compiling, once)"
  cargo install oha --locked
  export PATH="$HOME/.cargo/bin:$PATH"
fi
# /usr/bin/time (peak RSS, CPU time) and curl (the fault server's reset between runs).
for tool in /usr/bin/time:time curl:curl; do
  if ! command -v "${tool%%:*}" >/dev/null 2>&1; then
    flock /tmp/apt.harness.lock apt-get -o DPkg::Lock::Timeout=600 update -qq && DEBIAN_FRONTEND=noninteractive flock /tmp/apt.harness.lock apt-get -o DPkg::Lock::Timeout=600 install -y -qq "${tool##*:}" >/dev/null
  fi
done

# 10k connections need 10k descriptors on both ends (the servers inherit this limit).
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt $((BIG_CONNS + 1000)) ]; then
  ulimit -n $((BIG_CONNS + 1000)) 2>/dev/null || echo "warning: ulimit -n is $(ulimit -n); the 10k-connection test may fail"
fi

TMP=$(mktemp -d /tmp/harness-bench.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

mkdir -p bench/results
STAMP=$(date -u +%Y%m%dT%H%M%SZ)
RAW=bench/results/raw-$STAMP.tsv
printf 'part\tname\tround\tmetric\tvalue\n' > "$RAW"
record() { printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" >> "$RAW"; }

# Starts a server that prints `listening on URL`; sets URL to it and LAST_PID to its pid.
start_server() {
  local name="$1"; shift
  "$@" > "$TMP/$name.out" 2> "$TMP/$name.err" &
  LAST_PID=$!
  PIDS+=("$LAST_PID")
  for _ in $(seq 100); do
    if grep -q '^listening on ' "$TMP/$name.out"; then break; fi
    sleep 0.1
  done
  URL=$(sed -n 's/^listening on //p' "$TMP/$name.out" | head -1)
  if [ -z "$URL" ]; then
    echo "$name did not start:" >&2; cat "$TMP/$name.err" >&2; exit 3
  fi
}

echo "== starting the servers"
start_server axum "$BIN/examples/bare_axum" 127.0.0.1:0
AXUM_URL=$URL
AXUM_PID=$LAST_PID
start_server fault "$BIN/fault-server" --config bench/five-rules.yaml --bind 127.0.0.1:0 \
  --journal "$TMP/journal.jsonl"
FAULT_URL=$URL
FAULT_PID=$LAST_PID
echo "bare axum: $AXUM_URL   fault server (journal on, bench/five-rules.yaml): $FAULT_URL"
if wants grpc; then
  # gRPC: the fault server answering orders.v1.Orders/GetOrder with a canned order (journal on),
  # and a bare tonic server answering the same bytes; h2load sends both the same framed call.
  start_server grpc-fault "$BIN/fault-server" --config bench/grpc-canned.yaml --bind 127.0.0.1:0 \
    --journal "$TMP/journal-grpc.jsonl"
  GRPC_FAULT_URL=$URL
  GRPC_FAULT_PID=$LAST_PID
  start_server tonic target/bench-tonic/release/tonic-orders 127.0.0.1:0
  TONIC_URL=http://$URL
  TONIC_PID=$LAST_PID
  printf '\x00\x00\x00\x00\x07\x0a\x05ord-1' > "$TMP/grpc-req.bin"
  echo "gRPC: fault server (bench/grpc-canned.yaml) $GRPC_FAULT_URL   bare tonic $TONIC_URL"
fi
if wants tls; then
  start_server tls "$BIN/fault-server" --config bench/five-rules.yaml --bind 127.0.0.1:0 \
    --journal "$TMP/journal-tls.jsonl" --tls-self-signed "$TMP/ca.pem"
  TLS_URL=$URL
  TLS_PID=$LAST_PID
  echo "fault server over TLS (its own certificate in $TMP/ca.pem): $TLS_URL"
fi

# Clears the fault server's journal (memory and file) so no run pays for the previous one's.
reset_fault() { curl -fsS -X POST "$FAULT_URL/__harness/reset" > /dev/null; }
json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

# --- one measurement each ------------------------------------------------------------------------
# Besides throughput, each closed-loop measurement records CPU time per completed request of the
# load generator (user + system, from /usr/bin/time) and of the server (from /proc/PID/stat):
# throughput on a shared two-core machine swings with whatever else runs, CPU per request much less.
TICK=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
server_pid() {
  case "$1" in
    "$AXUM_URL") echo "$AXUM_PID" ;;
    "${TLS_URL:-none}") echo "$TLS_PID" ;;
    "${GRPC_FAULT_URL:-none}") echo "$GRPC_FAULT_PID" ;;
    "${TONIC_URL:-none}") echo "$TONIC_PID" ;;
    *) echo "$FAULT_PID" ;;
  esac
}
# Runs a closed-loop tool (CMD...) against URL; records rps, and CPU µs per request given by N_EXPR.
measure() { # name url round count-command -- cmd...
  local name="$1" url="$2" round="$3" count="$4"; shift 5
  local spid s0 s1 n
  spid=$(server_pid "$url")
  s0=$(cpu_ticks "$spid")
  /usr/bin/time -f '%U %S' -o "$TMP/cpu.out" "$@" > "$TMP/out"
  s1=$(cpu_ticks "$spid")
  n=$($count)
  record throughput "$name" "$round" rps "$(rps_of_$count)"
  record throughput "$name" "$round" client_cpu_us "$(awk -v n="$n" '{print ($1 + $2) / n * 1e6}' "$TMP/cpu.out")"
  record throughput "$name" "$round" server_cpu_us "$(awk -v n="$n" -v a="$s0" -v b="$s1" -v t="$TICK" 'BEGIN{print (b - a) / t / n * 1e6}')"
}
count_wrk() { awk '/ requests in /{print $1}' "$TMP/out"; }
rps_of_count_wrk() { awk '/^Requests\/sec/{print $2}' "$TMP/out"; }
count_oha() { json "$TMP/out" "sum(d['statusCodeDistribution'].values())"; }
rps_of_count_oha() { json "$TMP/out" "d['summary']['requestsPerSec']"; }
count_harness() { json "$TMP/out" "d['requests']['completed']"; }
rps_of_count_harness() { json "$TMP/out" "d['throughput_rps']"; }
count_h2load() { awk '/^requests:/{print $8}' "$TMP/out"; }
rps_of_count_h2load() { awk '/^finished in/{print $4}' "$TMP/out"; }

run_wrk() { # name url round
  measure "$1" "$2" "$3" count_wrk -- wrk -t1 -c$CONNS -d${SECS}s "$2/"
}
run_oha() { # name url round
  measure "$1" "$2" "$3" count_oha -- oha -c $CONNS -z ${SECS}s --no-tui --output-format json "$2/"
}
run_harness() { # name url round
  measure "$1" "$2" "$3" count_harness -- \
    $HARNESS load "$2/" --concurrency $CONNS --duration ${SECS}s --format json
  record throughput "$1" "$3" errors "$(json "$TMP/out" "d['requests']['errors']")"
}
run_harness_rate() { # round
  $HARNESS load "$FAULT_URL/" --rate $RATE --duration ${SECS}s --format json > "$TMP/r.json"
  record rate harness-rate-fault "$1" rps "$(json "$TMP/r.json" "d['throughput_rps']")"
  record rate harness-rate-fault "$1" late_starts "$(json "$TMP/r.json" "d['requests']['late_starts']")"
  record rate harness-rate-fault "$1" p50_ms "$(json "$TMP/r.json" "d['latency_ms']['p50']")"
  record rate harness-rate-fault "$1" p99_ms "$(json "$TMP/r.json" "d['latency_ms']['p99']")"
  record rate harness-rate-fault "$1" intended_p50_ms "$(json "$TMP/r.json" "d['phases'][0]['latency_intended_ms']['p50']")"
  record rate harness-rate-fault "$1" intended_p99_ms "$(json "$TMP/r.json" "d['phases'][0]['latency_intended_ms']['p99']")"
}
run_oha_rate() { # round
  oha -c $CONNS -q $RATE --latency-correction -z ${SECS}s --no-tui --output-format json \
    "$FAULT_URL/" > "$TMP/oq.json"
  record rate oha-rate-fault "$1" rps "$(json "$TMP/oq.json" "d['summary']['requestsPerSec']")"
  record rate oha-rate-fault "$1" intended_p50_ms "$(json "$TMP/oq.json" "d['latencyPercentiles']['p50']*1000")"
  record rate oha-rate-fault "$1" intended_p99_ms "$(json "$TMP/oq.json" "d['latencyPercentiles']['p99']*1000")"
}

# TLS: the same closed loop over https (wrk and oha do not verify the certificate; the harness
# trusts the server's own). Then connections that close after each request, over TLS and plain,
# whose difference in CPU per request is the cost of a TLS handshake.
run_tls_wrk() { measure "$1" "$TLS_URL" "$2" count_wrk -- wrk -t1 -c$CONNS -d${SECS}s "$TLS_URL/"; }
run_tls_oha() {
  measure "$1" "$TLS_URL" "$2" count_oha -- oha -c $CONNS -z ${SECS}s --insecure --no-tui \
    --output-format json "$TLS_URL/"
}
run_tls_harness() {
  measure "$1" "$TLS_URL" "$2" count_harness -- $HARNESS load "$TLS_URL/" --concurrency $CONNS \
    --duration ${SECS}s --cacert "$TMP/ca.pem" --format json
}
run_close_harness() { # name url round
  local extra=()
  [ "$2" = "$TLS_URL" ] && extra=(--cacert "$TMP/ca.pem")
  measure "$1" "$2" "$3" count_harness -- $HARNESS load "$2/" --concurrency 16 --requests 3000 \
    -H 'connection: close' "${extra[@]}" --format json
}
# HTTP/2 over h2c (prior knowledge): 4 connections, 100 streams in flight on each.
run_h2_h2load() {
  measure h2load-h2 "$FAULT_URL" "$1" count_h2load -- h2load -c 4 -m 100 -D $SECS "$FAULT_URL/"
}
run_h2_harness() {
  measure harness-h2 "$FAULT_URL" "$1" count_harness -- $HARNESS load "$FAULT_URL/" --http2 \
    -c 4 --streams 100 --duration ${SECS}s --format json
}
# The same on one runtime thread: h2load's default (-t 1), so both clients run on one thread.
run_h2_harness_t1() {
  measure harness-h2-t1 "$FAULT_URL" "$1" count_harness -- $HARNESS --threads 1 load "$FAULT_URL/" \
    --http2 -c 4 --streams 100 --duration ${SECS}s --format json
}

# gRPC unary calls (orders.v1.Orders/GetOrder, 4 connections, 100 calls in flight on each): h2load
# sending a framed call by hand to the fault server and to bare tonic, and `harness load grpc://`
# building the same call from JSON to the fault server.
GRPC_PATH=/orders.v1.Orders/GetOrder
run_grpc_h2load() { # name url round
  measure "$1" "$2" "$3" count_h2load -- h2load -c 4 -m 100 -D $SECS -d "$TMP/grpc-req.bin" \
    -H 'content-type: application/grpc' -H 'te: trailers' "$2$GRPC_PATH"
}
run_grpc_harness() { # round
  measure harness-grpc-fault "$GRPC_FAULT_URL" "$1" count_harness -- $HARNESS load \
    "grpc://${GRPC_FAULT_URL#http://}" --call orders.v1.Orders/GetOrder --json '{"id":"ord-1"}' \
    -c 4 --streams 100 --duration ${SECS}s --format json
}

# Runs CMD with its peak RSS (kB) and wall time (s) appended to the record as rss_kb and wall_s.
timed() { # part name round cmd...
  local part="$1" name="$2" round="$3"; shift 3
  local code=0
  /usr/bin/time -f '%M %e' -o "$TMP/time.out" "$@" > "$TMP/timed.out" 2> "$TMP/timed.err" || code=$?
  read -r rss wall < <(tail -1 "$TMP/time.out")
  record "$part" "$name" "$round" rss_kb "$rss"
  record "$part" "$name" "$round" wall_s "$wall"
  record "$part" "$name" "$round" exit "$code"
}

# --- interleaved rounds --------------------------------------------------------------------------
if wants throughput || wants rate || wants tls || wants h2 || wants grpc; then
  STEPS=()
  if wants throughput; then
    STEPS+=("run_wrk wrk-axum $AXUM_URL" "run_wrk wrk-fault $FAULT_URL"
            "run_oha oha-fault $FAULT_URL" "run_harness harness-fault $FAULT_URL"
            "run_harness harness-axum $AXUM_URL")
  fi
  if wants rate; then STEPS+=("run_harness_rate" "run_oha_rate"); fi
  if wants tls; then
    STEPS+=("run_tls_wrk wrk-tls" "run_tls_oha oha-tls" "run_tls_harness harness-tls"
            "run_close_harness harness-close-tls $TLS_URL" "run_close_harness harness-close-plain $FAULT_URL")
  fi
  if wants h2; then STEPS+=("run_h2_h2load" "run_h2_harness" "run_h2_harness_t1"); fi
  if wants grpc; then
    STEPS+=("run_grpc_h2load h2load-grpc-fault $GRPC_FAULT_URL" "run_grpc_harness"
            "run_grpc_h2load h2load-grpc-tonic $TONIC_URL")
  fi
  n=${#STEPS[@]}
  for ((r = 1; r <= ROUNDS; r++)); do
    echo "== round $r/$ROUNDS"
    for ((k = 0; k < n; k++)); do
      step=${STEPS[$(((k + r - 1) % n))]}
      reset_fault
      [ -n "${TLS_URL:-}" ] && curl -fsS --cacert "$TMP/ca.pem" -X POST "$TLS_URL/__harness/reset" > /dev/null
      [ -n "${GRPC_FAULT_URL:-}" ] && curl -fsS -X POST "$GRPC_FAULT_URL/__harness/reset" > /dev/null
      # The step is a function name and its arguments: split on purpose.
      # shellcheck disable=SC2086
      $step "$r"
      echo "   $step"
    done
  done
fi

# --- burst release skew --------------------------------------------------------------------------
if wants burst; then
  echo "== burst release skew (scenarios/idempotency-burst.yaml)"
  for ((r = 1; r <= ROUNDS; r++)); do
    $HARNESS run scenarios/idempotency-burst.yaml --format json > "$TMP/b.json" || true
    record burst idempotency-burst "$r" skew_max_us "$(json "$TMP/b.json" "d['phases'][0]['metrics']['release_skew_us_max']")"
    record burst idempotency-burst "$r" skew_p50_us "$(json "$TMP/b.json" "d['phases'][0]['metrics']['release_skew_us_p50']")"
  done
fi

# --- release skew of every sync mode ------------------------------------------------------------
if wants sync; then
  echo "== release skew by sync mode (20 rounds of 10, embedded fault server)"
  for ((r = 1; r <= ROUNDS; r++)); do
    for mode in burst burst-last-byte burst-single-packet; do
      $HARNESS run "scenarios/idempotency-$mode.yaml" --format json > "$TMP/s.json" || true
      record sync "sync-$mode" "$r" skew_max_us "$(json "$TMP/s.json" "d['phases'][0]['metrics']['release_skew_us_max']")"
      record sync "sync-$mode" "$r" skew_p50_us "$(json "$TMP/s.json" "d['phases'][0]['metrics']['release_skew_us_p50']")"
    done
  done
fi

# --- analyze on a 1M-entry journal ---------------------------------------------------------------
if wants analyze; then
  echo "== analyze: generating journals (1,000,000 and 250,000 entries)"
  "$BIN/examples/gen_journal" "$TMP/j1m.jsonl" 1000000
  "$BIN/examples/gen_journal" "$TMP/j250k.jsonl" 250000
  for ((r = 1; r <= ROUNDS; r++)); do
    echo "   round $r/$ROUNDS"
    timed analyze read-1m "$r" cat "$TMP/j1m.jsonl"
    timed analyze analyze-1m "$r" "$HARNESS" analyze "$TMP/j1m.jsonl" --format json
    timed analyze analyze-250k "$r" "$HARNESS" analyze "$TMP/j250k.jsonl" --format json
  done
  rm -f "$TMP/j1m.jsonl" "$TMP/j250k.jsonl"
fi

# --- harness merge: 100 shard reports of 1M samples each, and 1,000 ---------------------------------
if wants merge; then
  echo "== merge: 100 and 1,000 shard reports of 1,000,000 samples each"
  "$BIN/examples/gen_shard_reports" "$TMP/shards-100" 100 1000000
  "$BIN/examples/gen_shard_reports" "$TMP/shards-1000" 1000 1000000
  record merge report-bytes 0 bytes "$(stat -c %s "$TMP/shards-100/shard-0.json")"
  for ((r = 1; r <= ROUNDS; r++)); do
    echo "   round $r/$ROUNDS"
    timed merge merge-100 "$r" "$HARNESS" merge "$TMP"/shards-100/*.json --format json
    timed merge merge-1000 "$r" "$HARNESS" merge "$TMP"/shards-1000/*.json --format json
  done
  rm -rf "$TMP/shards-100" "$TMP/shards-1000"
fi

# --- the orders store: SQLite against PostgreSQL, one replica and two ------------------------------
# Creations per second (32 clients, a new key each, 10 s) and same-key bursts (100 rounds of 10),
# against one fault server on SQLite, one on PostgreSQL, and two on one PostgreSQL (the load as two
# shards, one per replica, merged).
if wants orders-store; then
  echo "== orders store: SQLite vs PostgreSQL, one replica and two"
  PG_URL="$(bash .ci/postgres)"
  orders_cfg() { printf 'orders: { idempotency: unique, database: "%s" }\n' "$1" > "$TMP/orders-$2.yaml"; }
  orders_cfg "$TMP/orders.db" sqlite
  orders_cfg "$PG_URL" pg
  for ((r = 1; r <= ROUNDS; r++)); do
    echo "   round $r/$ROUNDS"
    for store in sqlite pg; do
      rm -f "$TMP/orders.db"*
      start_server "orders-$store" "$BIN/fault-server" --config "$TMP/orders-$store.yaml" --bind 127.0.0.1:0
      pid=$LAST_PID
      curl -fsS -X POST "$URL/__harness/reset" > /dev/null
      "$HARNESS" run bench/orders-store.yaml --target "$URL" --format json > "$TMP/os.json" || true
      record orders-store "creations-$store-1" "$r" rps "$(json "$TMP/os.json" "d['throughput_rps']")"
      record orders-store "creations-$store-1" "$r" p99_ms "$(json "$TMP/os.json" "d['latency_ms']['p99']")"
      "$HARNESS" run bench/orders-bursts.yaml --target "$URL" --format json > "$TMP/ob.json" || true
      record orders-store "bursts-$store" "$r" p50_ms "$(json "$TMP/ob.json" "d['latency_ms']['p50']")"
      record orders-store "bursts-$store" "$r" p99_ms "$(json "$TMP/ob.json" "d['latency_ms']['p99']")"
      record orders-store "bursts-$store" "$r" duplicates_passed "$(json "$TMP/ob.json" "[c['passed'] for c in d['checks'] if c['name']=='duplicates'][0]")"
      kill "$pid" 2>/dev/null || true
    done
    # Two replicas on one PostgreSQL, the load as two shards, one per replica. A shard's own exit
    # code is not the verdict (it sees no journal); the merge's is.
    start_server orders-pg-a "$BIN/fault-server" --config "$TMP/orders-pg.yaml" --bind 127.0.0.1:0 --replica-id a
    url_a=$URL; pid_a=$LAST_PID
    start_server orders-pg-b "$BIN/fault-server" --config "$TMP/orders-pg.yaml" --bind 127.0.0.1:0 --replica-id b
    url_b=$URL; pid_b=$LAST_PID
    at=$(( $(date +%s%3N) + 2000 ))
    "$HARNESS" run bench/orders-store.yaml --target "$url_a" --shard 0/2 --start-at "$at" --report-dir "$TMP/os-s0" --format json > /dev/null &
    s0=$!
    "$HARNESS" run bench/orders-store.yaml --target "$url_b" --shard 1/2 --start-at "$at" --report-dir "$TMP/os-s1" --format json > /dev/null || true
    wait "$s0" || true
    "$HARNESS" merge "$TMP/os-s0/report.json" "$TMP/os-s1/report.json" --format json > "$TMP/os2.json" || true
    record orders-store creations-pg-2 "$r" rps "$(json "$TMP/os2.json" "d['throughput_rps']")"
    record orders-store creations-pg-2 "$r" p99_ms "$(json "$TMP/os2.json" "d['latency_ms']['p99']")"
    # The same-key bursts split over the two replicas: each round's ten requests at one instant,
    # five to each; the duplicates check on both replicas' journals.
    curl -fsS -X POST "$url_a/__harness/reset" > /dev/null
    curl -fsS -X POST "$url_b/__harness/reset" > /dev/null
    at=$(( $(date +%s%3N) + 2000 ))
    "$HARNESS" run bench/orders-bursts-split.yaml --target "$url_a" --shard 0/2 --start-at "$at" --report-dir "$TMP/ob-s0" --format json > /dev/null &
    s0=$!
    "$HARNESS" run bench/orders-bursts-split.yaml --target "$url_b" --shard 1/2 --start-at "$at" --report-dir "$TMP/ob-s1" --format json > /dev/null || true
    wait "$s0" || true
    "$HARNESS" merge "$TMP/ob-s0/report.json" "$TMP/ob-s1/report.json" --fault-url "$url_a" --fault-url "$url_b" \
      --format json > "$TMP/ob2.json" || true
    record orders-store bursts-pg-2 "$r" p50_ms "$(json "$TMP/ob2.json" "d['latency_ms']['p50']")"
    record orders-store bursts-pg-2 "$r" p99_ms "$(json "$TMP/ob2.json" "d['latency_ms']['p99']")"
    record orders-store bursts-pg-2 "$r" duplicates_passed "$(json "$TMP/ob2.json" "[c['passed'] for c in d['checks'] if c['name']=='duplicates'][0]")"
    kill "$pid_a" "$pid_b" 2>/dev/null || true
  done
fi

# --- proxy mode against nginx's proxy_pass -------------------------------------------------------
# One upstream (nginx answering `200 ok` itself), and in front of it, on equal terms, the fault
# server with `--upstream` (no rules, journal on) and nginx with `proxy_pass` over kept-alive
# HTTP/1.1 connections (an `upstream` block with `keepalive`, the recommended setup). Throughput:
# wrk -c 64, closed loop. Latency the proxy adds: oha at a fixed 2,000 req/s (16 connections,
# latency corrected), through each proxy and straight to the upstream, p50 and p99. Beside them,
# for reference, examples/bare_proxy.rs.
PROXY_RATE=2000
nginx_conf() { # dir port body
  mkdir -p "$1"
  cat > "$1/nginx.conf" <<CONF
worker_processes auto;
daemon off;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $1/body; proxy_temp_path $1/proxy; fastcgi_temp_path $1/fcgi;
  uwsgi_temp_path $1/uwsgi; scgi_temp_path $1/scgi;
  $3
  server { listen 127.0.0.1:$2; location / { $4 } }
}
CONF
}
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() { for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$1/" > /dev/null 2>&1 && return 0; sleep 0.1; done; echo "port $1 did not answer" >&2; exit 3; }
run_proxy_wrk() { # name url round
  wrk -t1 -c$CONNS -d${SECS}s --latency "$2/" > "$TMP/pw.out"
  record proxy "$1" "$3" rps "$(awk '/^Requests\/sec/{print $2}' "$TMP/pw.out")"
  record proxy "$1" "$3" non2xx "$(awk '/Non-2xx/{print $NF}' "$TMP/pw.out" | tail -1)"
  if [ "$2" = "${FAULT_PX_URL:-}" ]; then
    # Every request the proxy saw is in its journal (the journal was reset before the step).
    record proxy "$1" "$3" sent "$(awk '/ requests in /{print $1}' "$TMP/pw.out")"
    record proxy "$1" "$3" journaled "$(curl -fsS "$FAULT_PX_URL/__harness/health" | python3 -c "import json,sys; print(json.load(sys.stdin)['journaled'])")"
  fi
}
run_proxy_lat() { # name url round
  oha -c 16 -q $PROXY_RATE --latency-correction -z ${SECS}s --no-tui --output-format json "$2/" > "$TMP/pl.json"
  record proxy "$1" "$3" p50_ms "$(json "$TMP/pl.json" "d['latencyPercentiles']['p50']*1000")"
  record proxy "$1" "$3" p99_ms "$(json "$TMP/pl.json" "d['latencyPercentiles']['p99']*1000")"
  record proxy "$1" "$3" ok "$(json "$TMP/pl.json" "d['statusCodeDistribution'].get('200', 0)")"
}
if wants proxy; then
  echo "== proxy: fault server --upstream vs nginx proxy_pass, same upstream"
  up_port=$(free_port); px_port=$(free_port)
  nginx_conf "$TMP/nginx-up" "$up_port" "" "return 200 ok;"
  nginx_conf "$TMP/nginx-px" "$px_port" "upstream up { server 127.0.0.1:$up_port; keepalive 256; }" \
    "proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection \"\";"
  nginx -p "$TMP/nginx-up" -c "$TMP/nginx-up/nginx.conf" 2> "$TMP/nginx-up.err" &
  PIDS+=("$!")
  nginx -p "$TMP/nginx-px" -c "$TMP/nginx-px/nginx.conf" 2> "$TMP/nginx-px.err" &
  PIDS+=("$!")
  wait_port "$up_port"; wait_port "$px_port"
  UP_URL="http://127.0.0.1:$up_port"; NGINX_PX_URL="http://127.0.0.1:$px_port"
  start_server proxy "$BIN/fault-server" --bind 127.0.0.1:0 --upstream "$UP_URL" \
    --journal "$TMP/journal-proxy.jsonl"
  FAULT_PX_URL=$URL
  # The floor: the least a tokio proxy does (examples/bare_proxy.rs), to tell the runtime's cost
  # from what the fault server adds. A reference, not a goal.
  start_server bare-proxy "$BIN/examples/bare_proxy" 127.0.0.1:0 "127.0.0.1:$up_port"
  BARE_PX_URL=$URL
  echo "upstream (nginx): $UP_URL   fault-server proxy: $FAULT_PX_URL   nginx proxy: $NGINX_PX_URL   bare tokio proxy: $BARE_PX_URL"
  PSTEPS=("run_proxy_wrk wrk-proxy-fault $FAULT_PX_URL" "run_proxy_wrk wrk-proxy-nginx $NGINX_PX_URL"
          "run_proxy_wrk wrk-proxy-bare $BARE_PX_URL"
          "run_proxy_wrk wrk-upstream $UP_URL" "run_proxy_lat lat-proxy-fault $FAULT_PX_URL"
          "run_proxy_lat lat-proxy-nginx $NGINX_PX_URL" "run_proxy_lat lat-upstream $UP_URL")
  n=${#PSTEPS[@]}
  for ((r = 1; r <= ROUNDS; r++)); do
    echo "== proxy round $r/$ROUNDS"
    for ((k = 0; k < n; k++)); do
      step=${PSTEPS[$(((k + r - 1) % n))]}
      curl -fsS -X POST "$FAULT_PX_URL/__harness/reset" > /dev/null
      # shellcheck disable=SC2086
      $step "$r"
      echo "   $step"
    done
  done
fi

# --- RSS at 10k connections ----------------------------------------------------------------------
if wants conns; then
  echo "== $BIG_CONNS connections (peak RSS of the driver)"
  for ((r = 1; r <= ROUNDS; r++)); do
    reset_fault
    timed conns harness-10k "$r" "$HARNESS" load "$FAULT_URL/" --concurrency $BIG_CONNS \
      --duration ${SECS}s --format json
    record conns harness-10k "$r" rps "$(json "$TMP/timed.out" "d['throughput_rps']")"
    record conns harness-10k "$r" errors "$(json "$TMP/timed.out" "d['requests']['errors']")"
    reset_fault
    timed conns wrk-10k "$r" wrk -t1 -c$BIG_CONNS -d${SECS}s "$FAULT_URL/"
    record conns wrk-10k "$r" rps "$(awk '/^Requests\/sec/{print $2}' "$TMP/timed.out")"
    reset_fault
    timed conns oha-10k "$r" oha -c $BIG_CONNS -z ${SECS}s --no-tui --output-format json "$FAULT_URL/"
    record conns oha-10k "$r" rps "$(json "$TMP/timed.out" "d['summary']['requestsPerSec']")"
  done
fi

# --- RSS soak ------------------------------------------------------------------------------------
if wants soak; then
  echo "== soak: ${SOAK}s at $SOAK_RATE req/s against bare axum, RSS every 5 s"
  $HARNESS load "$AXUM_URL/" --rate $SOAK_RATE --duration "${SOAK}s" --format json \
    > "$TMP/soak.json" &
  SOAK_PID=$!
  PIDS+=("$SOAK_PID")
  t=0
  while kill -0 "$SOAK_PID" 2>/dev/null; do
    rss=$(awk '/^VmRSS:/{print $2}' "/proc/$SOAK_PID/status" 2>/dev/null || true)
    [ -n "$rss" ] && record soak harness-soak "$t" rss_kb "$rss"
    sleep 5
    t=$((t + 5))
  done
  wait "$SOAK_PID" || true
  record soak harness-soak 0 rps "$(json "$TMP/soak.json" "d['throughput_rps']")"
  record soak harness-soak 0 late_starts "$(json "$TMP/soak.json" "d['requests']['late_starts']")"
fi

# --- the fault server's RSS soak -----------------------------------------------------------------
# A fresh fault server with every default (the journal in a temporary file, a window of it in
# memory) under 20k req/s of mixed requests: a fault rule on a share of them, the rest answered.
if wants server-soak; then
  echo "== server soak: ${SOAK}s at $SERVER_SOAK_RATE req/s against a fault server, its RSS every 5 s"
  start_server soak-server "$BIN/fault-server" --config bench/five-rules.yaml --bind 127.0.0.1:0
  SOAK_URL=$URL
  SOAK_SERVER_PID=$LAST_PID
  $HARNESS load "$SOAK_URL/" --rate $SERVER_SOAK_RATE --duration "${SOAK}s" --format json \
    > "$TMP/server-soak.json" &
  LOAD_PID=$!
  PIDS+=("$LOAD_PID")
  t=0
  while kill -0 "$LOAD_PID" 2>/dev/null; do
    rss=$(awk '/^VmRSS:/{print $2}' "/proc/$SOAK_SERVER_PID/status" 2>/dev/null || true)
    [ -n "$rss" ] && record server-soak fault-server-soak "$t" rss_kb "$rss"
    sleep 5
    t=$((t + 5))
  done
  wait "$LOAD_PID" || true
  record server-soak fault-server-soak 0 rps "$(json "$TMP/server-soak.json" "d['throughput_rps']")"
  record server-soak fault-server-soak 0 sent "$(json "$TMP/server-soak.json" "d['requests']['sent']")"
  journaled=$(curl -fsS "$SOAK_URL/__harness/health" | python3 -c "import json,sys; print(json.load(sys.stdin)['journaled'])")
  record server-soak fault-server-soak 0 journaled "$journaled"
  kill "$SOAK_SERVER_PID" 2>/dev/null || true
fi

# --- summary -------------------------------------------------------------------------------------
FAULT_RSS=$(awk '/^VmHWM:/{print $2}' "/proc/$FAULT_PID/status" 2>/dev/null || echo 0)
record server fault-server 0 peak_rss_kb "$FAULT_RSS"
python3 bench/summarize.py "$RAW" "$SUMMARY" \
  --meta rounds="$ROUNDS" secs="$SECS" soak="$SOAK" conns=$CONNS rate=$RATE \
  big_conns=$BIG_CONNS soak_rate=$SOAK_RATE server_soak_rate=$SERVER_SOAK_RATE
