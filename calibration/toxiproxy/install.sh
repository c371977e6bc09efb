#!/usr/bin/env bash
# Installs Toxiproxy's published client libraries and the Redis and PostgreSQL clients their tests
# drive, pinned, into the repo's .cache/ (calibration/install.sh calls this; so does a developer):
#   .cache/toxiproxy/venv   python3 -m venv with toxiproxy-python, redis, psycopg (requirements.txt)
#   .cache/toxiproxy/node   npm ci of package.json + package-lock.json: toxiproxy-node-client,
#                           ioredis, pg
# Idempotent: a stamp file per part records the hash of its pin file; when it matches, nothing
# runs. Needs python3 with venv and node >= 20 with npm (calibration/install.sh installs them).
# Exits non-zero with a message naming what failed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
HERE="$ROOT/calibration/toxiproxy"
CACHE="$ROOT/.cache/toxiproxy"
mkdir -p "$CACHE"
[ -f "$ROOT/.cache/.gitignore" ] || printf '*\n' >"$ROOT/.cache/.gitignore"

die() { echo "calibration/toxiproxy/install.sh: $*" >&2; exit 1; }
hash_of() { cat "$@" | sha256sum | cut -d' ' -f1; }

PY_STAMP="$CACHE/venv/.toxiproxy-stamp"
py_want="$(hash_of "$HERE/requirements.txt")"
if [ "$(cat "$PY_STAMP" 2>/dev/null)" != "$py_want" ]; then
    echo "toxiproxy clients: creating $CACHE/venv" >&2
    rm -rf "$CACHE/venv"
    python3 -m venv "$CACHE/venv" || die "python3 -m venv failed"
    "$CACHE/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        --timeout 30 --retries 2 -r "$HERE/requirements.txt" \
        || die "pip install -r calibration/toxiproxy/requirements.txt failed (is PyPI reachable?)"
    echo "$py_want" >"$PY_STAMP"
fi

NODE_DIR="$CACHE/node"
NODE_STAMP="$NODE_DIR/.toxiproxy-stamp"
node_want="$(hash_of "$HERE/package.json" "$HERE/package-lock.json")"
if [ "$(cat "$NODE_STAMP" 2>/dev/null)" != "$node_want" ] || [ ! -d "$NODE_DIR/node_modules" ]; then
    echo "toxiproxy clients: npm ci into $NODE_DIR" >&2
    rm -rf "$NODE_DIR"
    mkdir -p "$NODE_DIR"
    cp "$HERE/package.json" "$HERE/package-lock.json" "$NODE_DIR/"
    (cd "$NODE_DIR" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error --fetch-retries=1 \
        --fetch-timeout=30000) || die "npm ci failed (is the npm registry reachable?)"
    echo "$node_want" >"$NODE_STAMP"
fi

echo "toxiproxy clients: ready ($("$CACHE/venv/bin/python" -c 'import importlib.metadata as m; print(", ".join(f"{p} {m.version(p)}" for p in ("toxiproxy-python","redis","psycopg")))'); $(cd "$NODE_DIR" && node -e 'for (const p of ["toxiproxy-node-client","ioredis","pg"]) process.stdout.write(p+" "+require("./node_modules/"+p+"/package.json").version+"  ")'))"
