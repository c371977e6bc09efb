#!/usr/bin/env bash
# Webhook delivery's two figures (BENCHMARKS.md, "Webhook signing"):
#
#   bash bench/webhooks.sh [--rounds N] [--events N] [--only sign,skew]
#
# sign  `harness deliver` (Stripe-signed events, one journal entry per attempt) against
#       `harness load` sending the same number of unsigned POSTs of the same size with the same
#       concurrency, to the same fault server; rounds alternate which goes first. Prints each
#       round's throughput_rps and their ratio, then the median ratio.
# skew  Duplicate bursts (every event delivered as 10 copies at once) in each sync mode; the
#       fault server's journal gives when each copy's last byte arrived (t_wire_us), and the
#       spread within each burst is the skew the consumer saw. Prints p50/p90/max per mode.
#
# Uses target/dist/{harness,fault-server} (cargo build --profile dist -p harness -p fault-server
# --bins). Load only goes to 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=5
EVENTS=100000
ONLY=sign,skew
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --events) EVENTS="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
wants() { [[ ",$ONLY," == *",$1,"* ]]; }
BIN=target/dist
for b in harness fault-server; do
  [ -x "$BIN/$b" ] || { echo "$BIN/$b is missing: cargo build --profile dist -p harness -p fault-server --bins" >&2; exit 3; }
done
TMP=$(mktemp -d)
SERVER=
trap '[ -n "$SERVER" ] && kill "$SERVER" 2>/dev/null; rm -rf "$TMP"' EXIT

"$BIN/fault-server" --bind 127.0.0.1:0 > "$TMP/server.out" 2> "$TMP/server.err" &
SERVER=$!
for _ in $(seq 100); do grep -q '^listening on ' "$TMP/server.out" && break; sleep 0.1; done
URL=$(sed -n 's/^listening on //p' "$TMP/server.out" | head -1)
[ -n "$URL" ] || { cat "$TMP/server.err" >&2; exit 3; }
reset() { curl -fsS -X POST "$URL/__harness/reset" > /dev/null; }
rps() { python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["throughput_rps"]))' "$1"; }

if wants sign; then
  # The unsigned request carries a body of the signed deliveries' size and a header of the
  # signature's length, so both send the same bytes but for the HMAC.
  body=$(python3 -c 'import json; print(json.dumps({"id": "evt_" + "x" * 24, "object": "event", "type": "invoice.created", "created": 1764800000, "data": {"object": {"id": "sub_000000001", "object": "invoice"}}}, separators=(",", ":")))')
  echo "== sign: $EVENTS events, -c 64, $ROUNDS rounds (deliver | load | ratio)"
  ratios=()
  for r in $(seq "$ROUNDS"); do
    deliver() {
      reset
      "$BIN/harness" deliver "$URL/hooks" --style stripe --secret whsec_benchsecret \
        --events "$EVENTS" -c 64 --format json > "$TMP/deliver.json" 2> /dev/null || true
    }
    load() {
      reset
      "$BIN/harness" load "$URL/hooks" -m POST --json "$body" \
        -H "stripe-signature: t=1764800000,v1=$(printf '0%.0s' $(seq 64))" \
        -c 64 -n "$EVENTS" --format json > "$TMP/load.json" 2> /dev/null || true
    }
    if [ $((r % 2)) -eq 1 ]; then deliver; load; else load; deliver; fi
    d=$(rps "$TMP/deliver.json"); l=$(rps "$TMP/load.json")
    ratio=$(python3 -c "print(f'{$d / $l:.3f}')")
    ratios+=("$ratio")
    echo "round $r: $d | $l | $ratio"
  done
  python3 -c 'import statistics,sys; print("median ratio", statistics.median(map(float, sys.argv[1:])))' "${ratios[@]}"
fi

if wants skew; then
  echo "== skew: 200 events, each as 10 copies at once (consumer-side spread of the last byte, µs)"
  for mode in "last-byte" "release" "single-packet --http2"; do
    set -- $mode
    reset
    "$BIN/harness" deliver "$URL/hooks" ${2:-} --style standard-webhooks \
      --secret whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw --events 200 --duplicates 1 --copies 10 \
      --sync "$1" -c 1 --format json > "$TMP/skew.json" 2> /dev/null || true
    curl -fsS "$URL/__harness/journal" > "$TMP/journal.jsonl"
    python3 - "$TMP/journal.jsonl" "$mode" <<'EOF'
import json, sys, collections
groups = collections.defaultdict(list)
text = open(sys.argv[1]).read().strip()
lines = json.loads(text) if text.startswith("[") else [json.loads(l) for l in text.splitlines() if l]
if isinstance(lines, dict):
    lines = lines.get("entries", [])
for e in lines:
    if e.get("t_wire_us") is not None and e.get("body_sha256"):
        groups[e["body_sha256"]].append(e["t_wire_us"])
spreads = sorted(max(v) - min(v) for v in groups.values() if len(v) > 1)
if not spreads:
    print(f"{sys.argv[2]}: no bursts in the journal"); sys.exit(0)
q = lambda p: spreads[min(len(spreads) - 1, int(p * len(spreads)))]
over = sum(1 for s in spreads if s >= 100)
print(f"{sys.argv[2]}: {len(spreads)} bursts, p50 {q(0.5)}, p90 {q(0.9)}, max {spreads[-1]}, >=100 µs: {over}")
EOF
  done
fi
