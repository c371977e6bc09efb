#!/usr/bin/env bash
# Fuzzes the parsers that face outside input, SECONDS each (default 60):
#
#   bench/fuzz.sh [SECONDS] [TARGET…]     targets: scenario fault_config schedule journal response request
#
# The targets are in fuzz/fuzz_targets/ and call the entry points of the `fuzzing` crate. New
# inputs that reach new code are kept in fuzz/corpus/TARGET/ (minimized after each run); an input
# that crashes is copied to fuzz/regressions/TARGET/, where `cargo test -p fuzzing` replays it on
# the stable toolchain from then on. Exit 1 when any target crashed.
#
# cargo fuzz passes nightly-only flags to rustc (the sanitizer, coverage); RUSTC_BOOTSTRAP=1 lets the
# stable toolchain accept them, so no second toolchain is needed.
set -uo pipefail
each="${1:-60}"
shift || true
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=(scenario fault_config schedule journal response request)
fi
command -v cargo-fuzz > /dev/null || cargo install cargo-fuzz --locked || exit 3
cd "$(dirname "$0")/../fuzz" || exit 3
export RUSTC_BOOTSTRAP=1
crashed=()
for t in "${targets[@]}"; do
  mkdir -p "corpus/$t" "artifacts/$t" "regressions/$t"
  echo "== $t: ${each}s"
  if ! cargo fuzz run -O "$t" "corpus/$t" -- \
      -max_total_time="$each" -max_len=65536 -rss_limit_mb=4096 -timeout=30 \
      -print_final_stats=1; then
    crashed+=("$t")
  fi
  for f in artifacts/"$t"/crash-* artifacts/"$t"/oom-* artifacts/"$t"/timeout-*; do
    [ -e "$f" ] && cp -n "$f" "regressions/$t/" && echo "   kept $f as a regression"
  done
  cargo fuzz cmin -O "$t" "corpus/$t" > /dev/null 2>&1 || echo "   (corpus not minimized)"
  echo "   corpus: $(ls "corpus/$t" | wc -l) inputs"
done
if [ ${#crashed[@]} -gt 0 ]; then
  echo "crashed: ${crashed[*]} (inputs in fuzz/regressions/)"
  exit 1
fi
echo "no crash"
