#!/usr/bin/env bash
# Fuzzes the parsers that face outside input, SECONDS each (default 60):
#
#   bench/fuzz.sh [SECONDS] [TARGET…]     targets: scenario fault_config schedule journal response request
#                                         h2_frames hpack report grpc_request
#
# The targets are in fuzz/fuzz_targets/ and call the entry points of the `fuzzing` crate. New
# inputs that reach new code are kept in fuzz/corpus/TARGET/ (minimized after each run); an input
# that crashes is copied to fuzz/regressions/TARGET/, where `cargo test -p fuzzing` replays it on
# the stable toolchain from then on. Exit 1 when a target crashed, 3 when they could not be built.
#
# cargo fuzz passes nightly-only flags to rustc (the sanitizer, coverage); RUSTC_BOOTSTRAP=1 lets the
# stable toolchain accept them, so no second toolchain is needed. Every target is built first and
# then run from its binary, so the source may change while the fuzzers run.
set -uo pipefail
each="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(scenario fault_config schedule journal response request h2_frames hpack report grpc_request)
fi
command -v cargo-fuzz > /dev/null || cargo install cargo-fuzz --locked || exit 3
cd "$(dirname "$0")/../fuzz" || exit 3
export RUSTC_BOOTSTRAP=1
echo "== building ${targets[*]}"
for t in "${targets[@]}"; do
  cargo fuzz build -O "$t" || { echo "cannot build $t" >&2; exit 3; }
done
bin=target/x86_64-unknown-linux-gnu/release
stash=$(mktemp -d)
trap 'rm -rf "$stash"' EXIT
for t in "${targets[@]}"; do
  cp "$bin/$t" "$stash/$t"
done
crashed=()
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "artifacts/$t" "regressions/$t"
  echo "== $t: ${each}s"
  if ! "$stash/$t" "corpus/$t" -artifact_prefix="artifacts/$t/" \
      -max_total_time="$each" -max_len=65536 -rss_limit_mb=4096 -timeout=30 \
      -print_final_stats=1 2>&1 | grep -E "^(Done|stat::|==[0-9]+==|SUMMARY|INFO: Seed)|panicked|ERROR"; then
    :
  fi
  status=${PIPESTATUS[0]}
  [ "$status" -ne 0 ] && crashed+=("$t")
  for f in artifacts/"$t"/crash-* artifacts/"$t"/oom-* artifacts/"$t"/timeout-*; do
    [ -e "$f" ] && cp -n "$f" "regressions/$t/" && echo "   kept $f as a regression"
  done
  # Keep only the inputs that add coverage.
  mkdir -p "$stash/min-$t"
  if "$stash/$t" -merge=1 "$stash/min-$t" "corpus/$t" > /dev/null 2>&1; then
    rm -rf "corpus/$t" && mv "$stash/min-$t" "corpus/$t"
  else
    echo "   (corpus not minimized)"
  fi
  echo "   corpus: $(ls "corpus/$t" | wc -l) inputs"
done
if [ ${#crashed[@]} -gt 0 ]; then
  echo "crashed: ${crashed[*]} (inputs in fuzz/regressions/)"
  exit 1
fi
echo "no crash"
