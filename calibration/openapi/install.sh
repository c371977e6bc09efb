#!/usr/bin/env bash
# Installs the FastAPI service's libraries (calibration/openapi/requirements.txt: FastAPI, uvicorn,
# pinned with their dependencies) into the repo's .cache/calibration/openapi/venv, for
# harness/tests/audit_fastapi.rs. calibration/install.sh runs it (and .ci/run runs that); it can
# also be run alone. Idempotent: a stamp file records the hash of the pin file; when it matches,
# nothing runs. Needs python3 with venv. Exits non-zero with a message naming what failed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PINS="$ROOT/calibration/openapi/requirements.txt"
VENV="$ROOT/.cache/calibration/openapi/venv"
STAMP="$VENV/.calibration-stamp"
mkdir -p "$ROOT/.cache/calibration/openapi"
# .cache/ is not in the repo's .gitignore: make it ignore itself, so nothing here is committed.
[ -f "$ROOT/.cache/.gitignore" ] || printf '*\n' >"$ROOT/.cache/.gitignore"

die() { echo "calibration/openapi/install.sh: $*" >&2; exit 1; }

want="$(sha256sum "$PINS" | cut -d' ' -f1)"
if [ "$(cat "$STAMP" 2>/dev/null)" != "$want" ]; then
    echo "calibration: creating $VENV" >&2
    rm -rf "$VENV"
    python3 -m venv "$VENV" || die "python3 -m venv failed"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check \
        --timeout 30 --retries 2 -r "$PINS" \
        || die "pip install -r calibration/openapi/requirements.txt failed (is PyPI reachable?)"
    echo "$want" >"$STAMP"
fi
echo "calibration: FastAPI service ready ($("$VENV/bin/python" -c 'import importlib.metadata as m; print(", ".join(f"{p} {m.version(p)}" for p in ("fastapi", "uvicorn", "pydantic")))'))"
