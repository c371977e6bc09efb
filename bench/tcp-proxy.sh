#!/usr/bin/env bash
# The TCP proxies' figures (BENCHMARKS.md, "TCP proxies against HAProxy"):
#
#   bash bench/tcp-proxy.sh [--rounds N] [--secs S] [--only throughput,cpu,latency,idle]
#
# throughput  redis-benchmark -c 50 -t get,set and pgbench -S -c 16, each straight to the server,
#             through HAProxy (`mode tcp`, Debian's haproxy) and through the fault server's proxy
#             (`--proxy`, no toxic, journal to a file): interleaved round by round, the order
#             rotating, so a slowdown of the machine hits every path alike. Prints each round's
#             requests (transactions) per second and latency, and the median ratios.
# cpu         the CPU time (user + system, /proc/PID/stat) each proxy spends per request of
#             `redis-benchmark -c 50 -n 200000 -t get`, a round per proxy, alternating: steadier
#             than throughput on a machine that other work shares.
# latency     1,000 connections through the fault server's proxy to Redis, each a PING every
#             100 ms at its own phase (bench/tcp-rtt: an open, paced load), without a toxic and
#             with a `latency` toxic of 10 ms: the toxic's added p50 and p99 are the differences.
# idle        1,000 idle connections held through each proxy: its resident memory before and
#             after, per connection.
#
# Starts its own Redis (redis-server on a free port, no persistence) and uses PostgreSQL from
# `bash .ci/postgres`. Uses target/dist/fault-server, built with `cargo build --profile dist -p
# fault-server` (what build is used is printed), and builds bench/tcp-rtt. Load only goes to
# 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=3
SECS=10
ONLY=throughput,cpu,latency,idle
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS="$2"; shift 2 ;;
    --secs) SECS="$2"; shift 2 ;;
    --only) ONLY="$2"; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "bench/tcp-proxy.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
wants() { [[ ",$ONLY," == *",$1,"* ]]; }

FAULT=target/dist/fault-server
[ -x "$FAULT" ] || { echo "$FAULT is missing: cargo build --profile dist -p fault-server" >&2; exit 3; }
for tool in redis-server redis-benchmark haproxy pgbench psql python3; do
  command -v "$tool" >/dev/null || { echo "$tool is missing (apt-get install redis-server haproxy postgresql-client python3)" >&2; exit 3; }
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
rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }

# --- the servers --------------------------------------------------------------------------------
REDIS_PORT=$(free_port)
redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --save '' --appendonly no --maxclients 10000 \
  --dir "$TMP" --logfile "$TMP/redis.log" &
PIDS+=($!)
for _ in $(seq 50); do [ "$(redis-cli -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ] && break; sleep 0.1; done

PG_URL=$(bash .ci/postgres)
PG_HOST_PORT=$(python3 -c "from urllib.parse import urlparse; u=urlparse('$PG_URL'); print(f'{u.hostname}:{u.port}')")
PG_PORT=${PG_HOST_PORT##*:}
export PGPASSWORD=harness
pgbench -i -q -s 1 -h 127.0.0.1 -p "$PG_PORT" -U harness harness >/dev/null 2>&1

HA_REDIS=$(free_port); HA_PG=$(free_port)
cat > "$TMP/haproxy.cfg" <<CFG
global
  maxconn 5000
  nbthread 2
defaults
  mode tcp
  timeout connect 5s
  timeout client 1h
  timeout server 1h
listen redis
  bind 127.0.0.1:$HA_REDIS
  server r 127.0.0.1:$REDIS_PORT
listen pg
  bind 127.0.0.1:$HA_PG
  server p 127.0.0.1:$PG_PORT
CFG
haproxy -f "$TMP/haproxy.cfg" -db >"$TMP/haproxy.log" 2>&1 &
HAPROXY=$!
PIDS+=($HAPROXY)
for _ in $(seq 50); do [ "$(redis-cli -p "$HA_REDIS" ping 2>/dev/null)" = PONG ] && break; sleep 0.1; done
[ "$(redis-cli -p "$HA_REDIS" ping 2>/dev/null)" = PONG ] || { echo "haproxy did not start:" >&2; cat "$TMP/haproxy.log" >&2; exit 3; }

FS_REDIS=$(free_port); FS_PG=$(free_port)
cat > "$TMP/fault.yaml" <<CFG
proxies:
  - { name: redis, listen: "127.0.0.1:$FS_REDIS", upstream: "127.0.0.1:$REDIS_PORT", max_connections: 5000 }
  - { name: pg, listen: "127.0.0.1:$FS_PG", upstream: "127.0.0.1:$PG_PORT" }
CFG
"$FAULT" --bind 127.0.0.1:0 --config "$TMP/fault.yaml" --toxiproxy-api 127.0.0.1:0 \
  --journal "$TMP/journal.jsonl" >"$TMP/fault.out" 2>"$TMP/fault.err" &
FAULT_PID=$!
PIDS+=($FAULT_PID)
for _ in $(seq 100); do grep -q 'Toxiproxy API on' "$TMP/fault.err" && break; sleep 0.1; done
API=$(sed -n 's/^Toxiproxy API on http:\/\///p' "$TMP/fault.err")
sleep 0.5
echo "== machine: $(nproc) cores; $(haproxy -v | head -1 | cut -d' ' -f1-3); redis $(redis-server --version | cut -d' ' -f3); $(pgbench --version)"
echo "== fault server: $FAULT ($(stat -c %y "$FAULT" | cut -d. -f1))"

median() { sort -g | awk '{ a[NR] = $1 } END { if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

# --- throughput ---------------------------------------------------------------------------------
if wants throughput; then
  echo "== throughput: $ROUNDS rounds, redis-benchmark -c 50 -n (SECS x 40k) -t get,set; pgbench -S -c 16 -j 2 -T $SECS"
  printf 'round\tpath\tredis_set_rps\tredis_set_p50_ms\tredis_set_p99_ms\tredis_get_rps\tredis_get_p50_ms\tredis_get_p99_ms\tpg_tps\tpg_lat_ms\n' >"$TMP/throughput.tsv"
  paths=(direct haproxy fault)
  for r in $(seq "$ROUNDS"); do
    for k in 0 1 2; do
      path=${paths[$(( (k + r) % 3 ))]}
      case $path in
        direct) rp=$REDIS_PORT; pp=$PG_PORT ;;
        haproxy) rp=$HA_REDIS; pp=$HA_PG ;;
        fault) rp=$FS_REDIS; pp=$FS_PG ;;
      esac
      csv=$(redis-benchmark -h 127.0.0.1 -p "$rp" -c 50 -n $(( SECS * 40000 )) -t set,get --csv 2>/dev/null)
      set_line=$(echo "$csv" | grep '^"SET"' | tr -d '"')
      get_line=$(echo "$csv" | grep '^"GET"' | tr -d '"')
      pg=$(pgbench -S -c 16 -j 2 -T "$SECS" -h 127.0.0.1 -p "$pp" -U harness harness 2>/dev/null)
      tps=$(echo "$pg" | sed -n 's/^tps = \([0-9.]*\).*/\1/p' | head -1)
      lat=$(echo "$pg" | sed -n 's/^latency average = \([0-9.]*\) ms/\1/p')
      IFS=, read -r _ s_rps _ _ s_p50 _ s_p99 _ <<<"$set_line"
      IFS=, read -r _ g_rps _ _ g_p50 _ g_p99 _ <<<"$get_line"
      printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$path" "$s_rps" "$s_p50" "$s_p99" "$g_rps" "$g_p50" "$g_p99" "$tps" "$lat" | tee -a "$TMP/throughput.tsv"
    done
  done
  for col in 3 6 9; do
    name=$(head -1 "$TMP/throughput.tsv" | cut -f$col)
    for against in direct haproxy; do
      ratios=$(for r in $(seq "$ROUNDS"); do
        f=$(awk -v r="$r" -v c="$col" '$1 == r && $2 == "fault" { print $c }' "$TMP/throughput.tsv")
        a=$(awk -v r="$r" -v c="$col" -v p="$against" '$1 == r && $2 == p { print $c }' "$TMP/throughput.tsv")
        awk -v f="$f" -v a="$a" 'BEGIN { printf "%.3f\n", f / a }'
      done)
      echo "$name fault/$against per round: $(echo "$ratios" | tr '\n' ' ') median $(echo "$ratios" | median)"
    done
  done
  echo "journaled connections: $(grep -c '"tcp":' "$TMP/journal.jsonl" || true)"
fi

# --- cpu per request ----------------------------------------------------------------------------
if wants cpu; then
  echo "== cpu: redis-benchmark -c 50 -n 200000 -t get through each proxy, $ROUNDS rounds"
  ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
  hz=$(getconf CLK_TCK)
  for r in $(seq "$ROUNDS"); do
    for which in haproxy fault; do
      case $which in
        haproxy) pid=$HAPROXY; port=$HA_REDIS ;;
        fault) pid=$FAULT_PID; port=$FS_REDIS ;;
      esac
      t0=$(ticks "$pid")
      redis-benchmark -h 127.0.0.1 -p "$port" -c 50 -n 200000 -t get -q >/dev/null 2>&1
      t1=$(ticks "$pid")
      awk -v r="$r" -v w="$which" -v t=$((t1 - t0)) -v hz="$hz" 'BEGIN { printf "%s\t%s\t%.2f us per request\n", r, w, t * 1e6 / hz / 200000 }'
    done
  done
fi

# --- latency ------------------------------------------------------------------------------------
if wants latency; then
  echo "== building bench/tcp-rtt"
  CARGO_TARGET_DIR=target/bench-tcp-rtt cargo build --release --quiet --manifest-path bench/tcp-rtt/Cargo.toml
  RTT=target/bench-tcp-rtt/release/tcp-rtt
  echo "== latency: 1000 connections, a PING every 100 ms each (10k/s), $SECS s, $ROUNDS rounds"
  for r in $(seq "$ROUNDS"); do
    base=$("$RTT" "127.0.0.1:$FS_REDIS" 1000 100 "$SECS")
    curl -s -XPOST "http://$API/proxies/redis/toxics" -d '{"type":"latency","attributes":{"latency":10}}' >/dev/null
    slow=$("$RTT" "127.0.0.1:$FS_REDIS" 1000 100 "$SECS")
    curl -s -XDELETE "http://$API/proxies/redis/toxics/latency_downstream" >/dev/null
    python3 - "$base" "$slow" <<'PY'
import json, sys
b, s = json.loads(sys.argv[1]), json.loads(sys.argv[2])
print(f"no toxic: {b}")
print(f"latency 10 ms: {s}")
print("added p50 {:.3f} ms, p99 {:.3f} ms".format((s["p50_us"] - b["p50_us"]) / 1000, (s["p99_us"] - b["p99_us"]) / 1000))
PY
  done
fi

# --- idle memory --------------------------------------------------------------------------------
if wants idle; then
  echo "== idle: 1000 connections held open through each proxy"
  for which in haproxy fault; do
    case $which in
      haproxy) pid=$HAPROXY; port=$HA_REDIS ;;
      fault) pid=$FAULT_PID; port=$FS_REDIS ;;
    esac
    before=$(rss_kb "$pid")
    python3 - "$port" "$pid" "$before" <<'PY'
import socket, sys, time
port, pid, before = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
socks = []
for _ in range(1000):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"PING\r\n")
    assert s.recv(16).startswith(b"+PONG")
    socks.append(s)
time.sleep(2)
after = int([l for l in open(f"/proc/{pid}/status") if l.startswith("VmRSS")][0].split()[1])
print(f"RSS before {before} KiB, with 1000 idle connections {after} KiB: {(after - before) / 1000:.1f} KiB per connection")
for s in socks:
    s.close()
PY
  done
fi
