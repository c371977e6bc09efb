#!/usr/bin/env bash
# What `--dashboard` costs the load: `harness load` at its top rate (closed loop, -c 64) against
# the fault server, without the dashboard and with it and a reader on its event stream (curl,
# as a browser's EventSource reads it) and a Prometheus-style scrape of /metrics every second.
#
#   bash bench/dashboard.sh [--rounds N] [--secs S] [--profile release|dist]
#
# The two are interleaved round by round (the order alternates), so whatever else runs on the
# machine slows both alike. Prints each round, then the medians of throughput and of client CPU
# per request (user + system of the harness process, from /usr/bin/time) and their ratios.
# Load only ever goes to 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=5
SECS=5
PROFILE=release
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --secs) SECS="$2"; shift 2 ;;
    --profile) PROFILE="$2"; shift 2 ;;
    -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
    *) echo "bench/dashboard.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

cargo build --profile "$PROFILE" -p fault-server -p harness --bins
BIN=target/$PROFILE
HARNESS=$BIN/harness
TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

"$BIN/fault-server" --config bench/five-rules.yaml --bind 127.0.0.1:0 \
  --journal "$TMP/journal.jsonl" > "$TMP/fault.out" 2> "$TMP/fault.err" &
PIDS+=($!)
for _ in $(seq 100); do
  grep -q '^listening on ' "$TMP/fault.out" && break
  sleep 0.1
done
URL=$(sed -n 's/^listening on //p' "$TMP/fault.out" | head -1)
[ -n "$URL" ] || { echo "the fault server did not start:" >&2; cat "$TMP/fault.err" >&2; exit 3; }
echo "fault server (journal on, bench/five-rules.yaml): $URL"

json() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }
reset_fault() { curl -fsS -X POST "$URL/__harness/reset" > /dev/null; }

# One measurement: rps and client CPU µs per completed request, appended to $TMP/$1.tsv.
measure() { # name [--dashboard]
  local name="$1"; shift
  reset_fault
  if [ "${1:-}" = "--dashboard" ]; then
    /usr/bin/time -f '%U %S' -o "$TMP/cpu.out" \
      "$HARNESS" load "$URL/" --concurrency 64 --duration "${SECS}s" --format json \
      --dashboard 127.0.0.1 > "$TMP/out" 2> "$TMP/err" &
    local load=$!
    local dash=""
    for _ in $(seq 100); do
      dash=$(sed -n 's/^dashboard: //p' "$TMP/err" | head -1)
      [ -n "$dash" ] && break
      sleep 0.05
    done
    [ -n "$dash" ] || { echo "no dashboard URL:" >&2; cat "$TMP/err" >&2; exit 3; }
    curl -sN "${dash}events" > "$TMP/events" &
    local reader=$!
    ( while kill -0 "$load" 2>/dev/null; do
        curl -fsS "${dash}metrics" > /dev/null 2>&1 || true
        sleep 1
      done ) &
    local scraper=$!
    wait "$load"
    wait "$reader" 2>/dev/null || true
    wait "$scraper" 2>/dev/null || true
    local snapshots
    snapshots=$(grep -c '^data: ' "$TMP/events" || true)
    [ "$snapshots" -ge 2 ] || { echo "the reader got $snapshots snapshots" >&2; exit 3; }
  else
    /usr/bin/time -f '%U %S' -o "$TMP/cpu.out" \
      "$HARNESS" load "$URL/" --concurrency 64 --duration "${SECS}s" --format json > "$TMP/out"
  fi
  local n rps cpu
  n=$(json "$TMP/out" "d['requests']['completed']")
  rps=$(json "$TMP/out" "d['throughput_rps']")
  cpu=$(awk -v n="$n" '{print ($1 + $2) / n * 1e6}' "$TMP/cpu.out")
  printf '%s\t%s\n' "$rps" "$cpu" >> "$TMP/$name.tsv"
  printf '  %-10s %10.0f req/s  %6.2f µs CPU/request\n' "$name" "$rps" "$cpu"
}

for r in $(seq "$ROUNDS"); do
  echo "round $r"
  if [ $((r % 2)) -eq 1 ]; then
    measure off; measure dashboard --dashboard
  else
    measure dashboard --dashboard; measure off
  fi
done

median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
OFF_RPS=$(cut -f1 "$TMP/off.tsv" | median)
ON_RPS=$(cut -f1 "$TMP/dashboard.tsv" | median)
OFF_CPU=$(cut -f2 "$TMP/off.tsv" | median)
ON_CPU=$(cut -f2 "$TMP/dashboard.tsv" | median)
echo
echo "medians of $ROUNDS rounds, ${SECS} s each, -c 64:"
printf '  off        %10.0f req/s  %6.2f µs CPU/request\n' "$OFF_RPS" "$OFF_CPU"
printf '  dashboard  %10.0f req/s  %6.2f µs CPU/request\n' "$ON_RPS" "$ON_CPU"
awk -v a="$ON_RPS" -v b="$OFF_RPS" -v c="$ON_CPU" -v d="$OFF_CPU" \
  'BEGIN {printf "  throughput with the dashboard: %.3fx (%.1f %% lost); CPU per request %.3fx\n", a / b, 100 * (1 - a / b), c / d}'
