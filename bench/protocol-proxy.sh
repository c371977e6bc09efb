#!/usr/bin/env bash
# The protocol-aware proxies' figures (BENCHMARKS.md, "Protocol-aware proxies: PostgreSQL and
# Redis"):
#
#   bash bench/protocol-proxy.sh [--rounds N] [--secs S] [--requests N]
#
# Three paths to the same server, interleaved round by round with the order rotating (so a
# slowdown of the machine hits every path alike): `direct`, through the fault server's plain TCP
# proxy (`protocol: tcp`), and through its protocol-aware proxy (`protocol: postgres` or
# `protocol: redis`, no rule: every statement and command read and journaled, none faulted). Both
# proxies are in one fault server, which journals to a file as a run does.
#
#   pgbench -S -c 16 -j 2 -T S      read-only: one SELECT per transaction
#   pgbench -c 8 -j 2 -T S          TPC-B-like: BEGIN, 3 UPDATEs, a SELECT, an INSERT, END
#   redis-benchmark -c 50 -n N -t get,set
#
# Prints each round's throughput and latency, the fault server's CPU time per transaction (or
# request) on each proxied path (user + system, /proc/PID/stat), and the median ratios
# aware/tcp and aware/direct. The cost per statement of reading the protocol is the CPU
# difference between the two proxies.
#
# Starts its own Redis (redis-server on a free port, no persistence) and uses PostgreSQL from
# `bash .ci/postgres`. Uses target/release/fault-server, built with `cargo build --release -p
# fault-server`. Load only goes to 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=3
SECS=10
REQUESTS=200000
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --secs) SECS="$2"; shift 2 ;;
    --requests) REQUESTS="$2"; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) echo "bench/protocol-proxy.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done

FAULT=target/release/fault-server
[ -x "$FAULT" ] || { echo "$FAULT is missing: cargo build --release -p fault-server" >&2; exit 3; }
for tool in redis-server redis-cli redis-benchmark pgbench python3; do
  command -v "$tool" >/dev/null || { echo "$tool is missing (apt-get install redis-server postgresql-client python3)" >&2; exit 3; }
done

TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)
median() { sort -g | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

# --- the servers --------------------------------------------------------------------------------
REDIS_PORT=$(free_port)
redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --maxclients 10000 \
  --dir "$TMP" --logfile "$TMP/redis.log" &
PIDS+=($!)
for _ in $(seq 50); do [ "$(redis-cli -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ] && break; sleep 0.1; done

PG_URL=$(bash .ci/postgres)
PG_PORT=$(python3 -c "from urllib.parse import urlparse; print(urlparse('$PG_URL').port or 5432)")
export PGPASSWORD=harness
pgbench -i -q -s 1 -h 127.0.0.1 -p "$PG_PORT" -U harness harness >/dev/null 2>&1

PG_TCP=$(free_port); PG_AWARE=$(free_port); R_TCP=$(free_port); R_AWARE=$(free_port)
cat > "$TMP/fault.yaml" <<CFG
proxies:
  - { name: pg-tcp, listen: "127.0.0.1:$PG_TCP", upstream: "127.0.0.1:$PG_PORT" }
  - { name: pg, listen: "127.0.0.1:$PG_AWARE", upstream: "127.0.0.1:$PG_PORT", protocol: postgres }
  - { name: redis-tcp, listen: "127.0.0.1:$R_TCP", upstream: "127.0.0.1:$REDIS_PORT" }
  - { name: redis, listen: "127.0.0.1:$R_AWARE", upstream: "127.0.0.1:$REDIS_PORT", protocol: redis }
CFG
"$FAULT" --bind 127.0.0.1:0 --config "$TMP/fault.yaml" --journal "$TMP/journal.jsonl" \
  >"$TMP/fault.out" 2>"$TMP/fault.err" &
FAULT_PID=$!
PIDS+=($FAULT_PID)
for _ in $(seq 100); do grep -q 'listening on' "$TMP/fault.out" && break; sleep 0.1; done
sleep 0.5
echo "== machine: $(nproc) cores; redis $(redis-server --version | cut -d' ' -f3); $(pgbench --version)"
echo "== fault server: $FAULT ($(stat -c %y "$FAULT" | cut -d. -f1))"

paths=(direct tcp aware)
port_of() { # WHICH PATH
  case "$1:$2" in
    pg:direct) echo "$PG_PORT" ;; pg:tcp) echo "$PG_TCP" ;; pg:aware) echo "$PG_AWARE" ;;
    redis:direct) echo "$REDIS_PORT" ;; redis:tcp) echo "$R_TCP" ;; redis:aware) echo "$R_AWARE" ;;
  esac
}

# One row per round and path: the figure, its latency, the fault server's CPU µs per unit.
printf 'bench\tround\tpath\tper_s\tlat_ms\tcpu_us\n' >"$TMP/rows.tsv"
record() { # BENCH ROUND PATH PER_S LAT_MS TICKS UNITS
  local cpu
  cpu=$(awk -v t="$6" -v hz="$HZ" -v n="$7" 'BEGIN { if (n > 0) printf "%.2f", t * 1e6 / hz / n; else print "-" }')
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$cpu" | tee -a "$TMP/rows.tsv"
}

pgbench_round() { # NAME ROUND ARGS…
  local name=$1 r=$2; shift 2
  for k in 0 1 2; do
    local path=${paths[$(( (k + r) % 3 ))]}
    local port t0 t1 out tps lat txs
    port=$(port_of pg "$path")
    t0=$(ticks "$FAULT_PID")
    out=$(pgbench "$@" -j 2 -T "$SECS" -h 127.0.0.1 -p "$port" -U harness harness 2>/dev/null)
    t1=$(ticks "$FAULT_PID")
    tps=$(echo "$out" | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -1)
    lat=$(echo "$out" | sed -n 's/^latency average = \([0-9.]*\) ms/\1/p')
    txs=$(echo "$out" | sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p')
    [ "$path" = direct ] && t1=$t0
    record "$name" "$r" "$path" "$tps" "$lat" $((t1 - t0)) "$txs"
  done
}

redis_round() { # ROUND
  local r=$1
  for k in 0 1 2; do
    local path=${paths[$(( (k + r) % 3 ))]}
    local port t0 t1 csv set_line get_line
    port=$(port_of redis "$path")
    t0=$(ticks "$FAULT_PID")
    csv=$(redis-benchmark -h 127.0.0.1 -p "$port" -c 50 -n "$REQUESTS" -t set,get --csv 2>/dev/null)
    t1=$(ticks "$FAULT_PID")
    [ "$path" = direct ] && t1=$t0
    set_line=$(echo "$csv" | grep '^"SET"' | tr -d '"')
    get_line=$(echo "$csv" | grep '^"GET"' | tr -d '"')
    IFS=, read -r _ s_rps _ _ s_p50 _ _ _ <<<"$set_line"
    IFS=, read -r _ g_rps _ _ g_p50 _ _ _ <<<"$get_line"
    record redis-set "$r" "$path" "$s_rps" "$s_p50" 0 0
    # The CPU of both commands' runs, per command.
    record redis-get "$r" "$path" "$g_rps" "$g_p50" $((t1 - t0)) $((2 * REQUESTS))
  done
}

echo "== $ROUNDS rounds: pgbench -S -c 16 -j 2 -T $SECS; pgbench -c 8 -j 2 -T $SECS; redis-benchmark -c 50 -n $REQUESTS -t set,get"
echo "   (per_s: transactions or requests per second; lat_ms: pgbench's average, redis-benchmark's p50;"
echo "    cpu_us: the fault server's CPU per transaction, or per command for redis-get: both commands)"
for r in $(seq "$ROUNDS"); do
  pgbench_round pgbench-S "$r" -S -c 16
  pgbench_round pgbench-tpcb "$r" -c 8
  redis_round "$r"
done

echo "== medians over $ROUNDS rounds"
for bench in pgbench-S pgbench-tpcb redis-set redis-get; do
  for path in direct tcp aware; do
    v=$(awk -v b="$bench" -v p="$path" '$1 == b && $3 == p { print $4 }' "$TMP/rows.tsv" | median)
    l=$(awk -v b="$bench" -v p="$path" '$1 == b && $3 == p { print $5 }' "$TMP/rows.tsv" | median)
    c=$(awk -v b="$bench" -v p="$path" '$1 == b && $3 == p && $6 != "-" { print $6 }' "$TMP/rows.tsv" | median)
    printf '%s\t%s\t%s/s\tlatency %s ms\tcpu %s us\n' "$bench" "$path" "$v" "$l" "${c:--}"
  done
  for against in tcp direct; do
    ratios=$(for r in $(seq "$ROUNDS"); do
      a=$(awk -v b="$bench" -v r="$r" '$1 == b && $2 == r && $3 == "aware" { print $4 }' "$TMP/rows.tsv")
      o=$(awk -v b="$bench" -v r="$r" -v p="$against" '$1 == b && $2 == r && $3 == p { print $4 }' "$TMP/rows.tsv")
      awk -v a="$a" -v o="$o" 'BEGIN { printf "%.3f\n", a / o }'
    done)
    echo "$bench aware/$against per round: $(echo "$ratios" | tr '\n' ' ') median $(echo "$ratios" | median)"
  done
done
echo "journaled statements: $(grep -c '"postgres":' "$TMP/journal.jsonl" || true); commands: $(grep -c '"redis":' "$TMP/journal.jsonl" || true)"
