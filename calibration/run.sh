#!/usr/bin/env bash
# Runs every (script, scenario) case of calibration/expected.tsv under `harness exec` and compares
# each check's verdict with the expected one. Prints one line per check (ok / MISMATCH) and exits 1
# on any mismatch (2 when a case could not be run at all).
#
#   bash calibration/run.sh                 # all cases
#   bash calibration/run.sh zero_delay      # only cases whose script path contains this
#
# Env: HARNESS (default: target/release/harness), CALIB_CLIENTS (fleet size, overrides each
# script's default), CALIB_OUT (where each case's JSON report goes; default .cache/calibration/out).
set -uo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
HARNESS="${HARNESS:-$ROOT/target/release/harness}"
OUT="${CALIB_OUT:-$ROOT/.cache/calibration/out}"
FILTER="${1:-}"
[ -x "$HARNESS" ] || { echo "run.sh: no harness binary at $HARNESS (set HARNESS=…)" >&2; exit 2; }
bash calibration/install.sh >&2 || exit 2
mkdir -p "$OUT"

PY="$ROOT/.cache/calibration/venv/bin/python"
cases=$(grep -v '^#' calibration/expected.tsv | awk -F'\t' 'NF>=4 {print $1"\t"$2}' | awk '!seen[$0]++')
mismatches=0
broken=0
start=$(date +%s)
while IFS=$'\t' read -r script scenario; do
    [ -n "$FILTER" ] && [[ "$script" != *"$FILTER"* ]] && continue
    case "$script" in
        *.py) cmd=("$PY" "calibration/$script") ;;
        *.mjs) cmd=(node "calibration/$script") ;;
        *) echo "run.sh: unknown script type: $script" >&2; broken=1; continue ;;
    esac
    name="$(basename "${script%.*}")__$scenario"
    t0=$(date +%s.%N)
    "$HARNESS" exec "calibration/scenarios/$scenario.yaml" --format json -- "${cmd[@]}" \
        >"$OUT/$name.json" 2>"$OUT/$name.stderr"
    rc=$?
    secs=$(echo "$(date +%s.%N) - $t0" | bc)
    if [ "$rc" -ge 2 ] || ! python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$OUT/$name.json" 2>/dev/null; then
        echo "BROKEN   $script × $scenario: harness exit $rc (see $OUT/$name.stderr)"
        broken=1
        continue
    fi
    # One line per expected check: ok/MISMATCH, expected, actual, summary.
    result=$(python3 - "$OUT/$name.json" "$script" "$scenario" <<'EOF'
import json, sys
report, script, scenario = sys.argv[1:4]
d = json.load(open(report))
actual = {c["name"]: c for c in d.get("checks", [])}
bad = 0
for line in open("calibration/expected.tsv"):
    if line.startswith("#") or not line.strip():
        continue
    f = line.rstrip("\n").split("\t")
    if f[0] != script or f[1] != scenario:
        continue
    check, want = f[2], f[3]
    c = actual.get(check)
    got = c["verdict"] if c else "absent"
    tag = "ok      " if got == want else "MISMATCH"
    bad += got != want
    summary = (c or {}).get("summary", "")
    print(f"{tag} {script} × {scenario} · {check}: expected {want}, got {got} — {summary[:160]}")
if d.get("exec", {}).get("exit_code") not in (0, None):
    print(f"BROKEN   {script} × {scenario}: the client exited {d['exec']['exit_code']}")
    bad += 1
sys.exit(1 if bad else 0)
EOF
)
    status=$?
    printf '%s   (%.1f s)\n' "$result" "$secs"
    [ $status -ne 0 ] && mismatches=$((mismatches + $(grep -c -E '^(MISMATCH|BROKEN)' <<<"$result")))
done <<<"$cases"

echo "calibration: $(( $(date +%s) - start )) s; $mismatches mismatching verdicts; reports in $OUT"
[ $broken -ne 0 ] && exit 2
[ $mismatches -ne 0 ] && exit 1
exit 0
