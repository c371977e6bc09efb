#!/usr/bin/env bash
# The verdict of a sharded run on Kubernetes, in one command, once the harness Job is Complete:
#
#   deploy/merge.sh [-n NAMESPACE] [--job NAME] [--out DIR] [--allow-restarts] [-- MERGE_ARGS…]
#
# Collects every shard's report.json from the log of its pod (the Indexed Job's pod of each
# completion index), and every fault-server replica's journal from its pod (`kubectl exec … cat`,
# the file the server streams its journal to), then runs `harness merge` on them and exits with
# merge's exit code: 0 every check passed, 1 a check failed or no verdict, 2 bad input.
# Exits 3 before merging when it cannot collect: kubectl missing, the Job not Complete (or
# Failed), a shard's log without a report, a replica's journal unreadable, or a replica that
# restarted (its journal then starts at the restart; --allow-restarts merges anyway).
#
#   -n, --namespace NS   the namespace (default harness)
#   --job NAME           the Indexed Job (default harness)
#   --out DIR            where the reports, journals and the merged report go (default k8s-run):
#                        DIR/shard-I.json, DIR/journal-POD.jsonl, DIR/merged/ (report.json,
#                        junit.xml, report.html, summary.md and the merged journal.jsonl)
#   --allow-restarts     merge even when a fault-server container restarted
#   -- MERGE_ARGS…       passed on to `harness merge` (e.g. --format json)
#
# `harness` is $HARNESS when set, else `harness` on PATH, else `cargo run --release -p harness`
# from this repository.
set -euo pipefail

NAMESPACE=harness
JOB=harness
OUT=k8s-run
ALLOW_RESTARTS=0
# The fault-server pods, their container and where it writes its journal (deploy/k8s/fault-server.yaml).
SERVER_SELECTOR=app.kubernetes.io/name=fault-server
SERVER_CONTAINER=fault-server
JOURNAL=/var/lib/fault-server/journal.jsonl
SHARD_CONTAINER=harness

die() { # code message…
  local code=$1
  shift
  echo "deploy/merge.sh: $*" >&2
  exit "$code"
}

merge_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    -n | --namespace) [ $# -ge 2 ] || die 2 "$1 needs a value"; NAMESPACE=$2; shift 2 ;;
    --job) [ $# -ge 2 ] || die 2 "$1 needs a value"; JOB=$2; shift 2 ;;
    --out) [ $# -ge 2 ] || die 2 "$1 needs a value"; OUT=$2; shift 2 ;;
    --allow-restarts) ALLOW_RESTARTS=1; shift ;;
    -h | --help) sed -n '2,22p' "$0"; exit 0 ;;
    --) shift; merge_args=("$@"); break ;;
    *) die 2 "unknown argument $1 (see --help)" ;;
  esac
done

command -v kubectl > /dev/null 2>&1 \
  || die 3 "kubectl not found on PATH: install it (https://kubernetes.io/docs/tasks/tools/) and point it at the cluster"

if [ -n "${HARNESS:-}" ]; then
  read -r -a harness <<< "$HARNESS"
elif command -v harness > /dev/null 2>&1; then
  harness=(harness)
else
  harness=(cargo run --quiet --release --manifest-path "$(dirname "$0")/../Cargo.toml" -p harness --)
fi

k() { kubectl -n "$NAMESPACE" "$@"; }

# The Job: Complete, and how many shards it ran.
status=$(k get job "$JOB" -o jsonpath='{.spec.completions} {.status.succeeded} {.status.conditions[?(@.status=="True")].type}') \
  || die 3 "cannot read Job $JOB in namespace $NAMESPACE (kubectl -n $NAMESPACE get job $JOB)"
read -r shards succeeded conditions <<< "$status"
case "$succeeded" in '' | *[!0-9]*) conditions="$succeeded $conditions"; succeeded=0 ;; esac
case "$shards" in
  '' | *[!0-9]* | 0) die 3 "Job $JOB has no completion count (.spec.completions): is it the Indexed Job of deploy/k8s/harness-job.yaml?" ;;
esac
case " $conditions " in
  *" Complete "*) ;;
  *" Failed "*)
    die 3 "Job $JOB failed ($succeeded of $shards shards succeeded): a shard could not run, so there is no verdict; see kubectl -n $NAMESPACE get pods -l batch.kubernetes.io/job-name=$JOB" ;;
  *)
    die 3 "Job $JOB is not complete yet ($succeeded of $shards shards done): wait with kubectl -n $NAMESPACE wait --for=condition=complete job/$JOB --timeout=30m, then run this again" ;;
esac

mkdir -p "$OUT"
reports=()
for ((i = 0; i < shards; i++)); do
  pod=$(k get pods -l "batch.kubernetes.io/job-name=$JOB,batch.kubernetes.io/job-completion-index=$i" \
    --field-selector=status.phase=Succeeded -o name) \
    || die 3 "cannot list the pods of shard $i"
  pod=${pod%%$'\n'*}
  [ -n "$pod" ] || die 3 "shard $i: no succeeded pod of Job $JOB (finished pods are kept for ttlSecondsAfterFinished)"
  report="$OUT/shard-$i.json"
  # The report starts at a line `{` and ends at a line `}`; warnings the shard wrote on stderr,
  # which the log interleaves, stay out.
  k logs "$pod" -c "$SHARD_CONTAINER" | sed -n '/^{/,/^}/p' > "$report" \
    || die 3 "shard $i: cannot read the log of $pod"
  [ -s "$report" ] || die 3 "shard $i: the log of $pod holds no report (kubectl -n $NAMESPACE logs $pod)"
  reports+=("$report")
done

# Every fault-server replica: its journal, and whether it restarted since it served the run.
servers=$(k get pods -l "$SERVER_SELECTOR" \
  -o jsonpath="{range .items[*]}{.metadata.name}{\" \"}{.status.containerStatuses[?(@.name==\"$SERVER_CONTAINER\")].restartCount}{\"\\n\"}{end}") \
  || die 3 "cannot list the fault-server pods ($SERVER_SELECTOR)"
journals=()
while read -r pod restarts; do
  [ -n "$pod" ] || continue
  if [ "${restarts:-0}" != 0 ] && [ "$ALLOW_RESTARTS" = 0 ]; then
    die 3 "fault-server pod $pod restarted ($restarts times): a replica starts a new journal when it starts, so the requests it saw before are missing. If it restarted before the run (kubectl -n $NAMESPACE describe pod $pod), run again with --allow-restarts"
  fi
  journal="$OUT/journal-$pod.jsonl"
  k exec "$pod" -c "$SERVER_CONTAINER" -- cat "$JOURNAL" > "$journal" \
    || die 3 "cannot read the journal of $pod ($JOURNAL)"
  journals+=("$journal")
done <<< "$servers"
[ "${#journals[@]}" -gt 0 ] || die 3 "no fault-server pods ($SERVER_SELECTOR) in namespace $NAMESPACE: no journal to judge"

echo "deploy/merge.sh: ${#reports[@]} shard reports and ${#journals[@]} journals in $OUT/" >&2
exec "${harness[@]}" merge "${reports[@]}" --journal "${journals[@]}" --report-dir "$OUT/merged" "${merge_args[@]}"
