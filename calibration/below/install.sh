#!/usr/bin/env bash
# Installs the libraries of the services behind the protocol-aware proxies
# (calibration/below/requirements.txt: psycopg, redis-py, pinned with their dependencies) into the
# repo's .cache/calibration/below/venv, and Debian's redis-server when it is missing, for
# checks/tests/below_services.rs. calibration/install.sh runs it (and .ci/run runs that); it can also
# be run alone. Idempotent: a stamp file records the hash of the pin file; when it matches, nothing
# runs. Needs python3 with venv. Exits non-zero with a message naming what failed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PINS="$ROOT/calibration/below/requirements.txt"
VENV="$ROOT/.cache/calibration/below/venv"
STAMP="$VENV/.calibration-stamp"
mkdir -p "$ROOT/.cache/calibration/below"
# .cache/ is not in the repo's .gitignore: make it ignore itself, so nothing here is committed.
[ -f "$ROOT/.cache/.gitignore" ] || printf '*\n' >"$ROOT/.cache/.gitignore"

die() { echo "calibration/below/install.sh: $*" >&2; exit 1; }

if ! command -v redis-server >/dev/null; then
    command -v apt-get >/dev/null || die "redis-server is missing and apt-get is not available"
    echo "installing Debian's redis-server" >&2
    flock /tmp/apt.harness.lock apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null || die "apt-get update failed: the Debian package archive is unreachable"
    DEBIAN_FRONTEND=noninteractive flock /tmp/apt.harness.lock apt-get -o DPkg::Lock::Timeout=600 install -y -qq redis-server >/dev/null \
        || die "apt-get install redis-server failed"
fi

want="$(sha256sum "$PINS" | cut -d' ' -f1)"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
    echo "calibration: creating $VENV" >&2
    rm -rf "$VENV"
    python3 -m venv "$VENV" || die "python3 -m venv failed"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        --timeout 30 --retries 2 -r "$PINS" \
        || die "pip install -r calibration/below/requirements.txt failed (is PyPI reachable?)"
    echo "$want" >"$STAMP"
fi
echo "calibration: services below HTTP ready ($("$VENV/bin/python" -c 'import importlib.metadata as m; print(", ".join(f"{p} {m.version(p)}" for p in ("psycopg", "psycopg-binary", "redis")))'); $(redis-server --version | cut -d' ' -f1-3))"
