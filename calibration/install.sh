#!/usr/bin/env bash
# Installs the real libraries the calibration suites drive, pinned, into the repo's .cache/: the retry
# libraries (run.sh) and the webhook verification libraries (webhooks/tests/*.rs, calibration/webhooks/):
#   .cache/calibration/venv   python3 -m venv with backoff, stamina, httpx, standardwebhooks, svix, stripe,
#                             grpcio, grpcio-tools (calibration/python/requirements.txt)
#   .cache/calibration/node   npm ci of calibration/node/package.json + package-lock.json
#   .cache/calibration/go-cache       the Go build cache of calibration/go/ (Go itself and
#                             github.com/cenkalti/backoff are Debian's packages, installed here
#                             when missing)
#   .cache/calibration/rust-target    `cargo build --release --locked` of calibration/rust/ (backon
#                             and reqwest, pinned by its Cargo.lock): the backon_fleet adapter
#   .cache/calibration/openapi/venv   FastAPI and uvicorn for harness/tests/audit_fastapi.rs
#                             (calibration/openapi/install.sh, calibration/openapi/requirements.txt)
#   .cache/calibration/below/venv     psycopg and redis-py for checks/tests/below_services.rs
#                             (calibration/below/install.sh, calibration/below/requirements.txt)
# and, through calibration/toxiproxy/install.sh, Toxiproxy's published clients (Python and Node) with
# the Redis and PostgreSQL clients their tests drive, in .cache/toxiproxy/.
# Idempotent: a stamp file per part records the hash of its pin file; when it matches, nothing runs.
# Needs python3 (with venv) and node >= 20 with npm; installs Debian's packages when they are missing.
# Exit non-zero with a message naming what failed (e.g. a registry that cannot be reached).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CAL="$ROOT/calibration"
CACHE="$ROOT/.cache/calibration"
mkdir -p "$CACHE"
# .cache/ is not in the repo's .gitignore: make it ignore itself, so nothing here is committed.
[ -f "$ROOT/.cache/.gitignore" ] || printf '*\n' >"$ROOT/.cache/.gitignore"

die() { echo "calibration/install.sh: $*" >&2; exit 1; }
hash_of() { cat "$@" | sha256sum | cut -d' ' -f1; }

apt_install() {
    command -v apt-get >/dev/null || die "$1 is missing and apt-get is not available: install $* by hand"
    echo "installing Debian packages: $*" >&2
    flock /tmp/apt.harness.lock apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null || die "apt-get update failed: the Debian package archive is unreachable"
    DEBIAN_FRONTEND=noninteractive flock /tmp/apt.harness.lock apt-get -o DPkg::Lock::Timeout=600 install -y -qq "$@" >/dev/null \
        || die "apt-get install $* failed"
}

# ---- tools -------------------------------------------------------------------------------------
if ! python3 -c 'import venv, ensurepip' 2>/dev/null; then
    apt_install python3 python3-venv
fi
node_major() { node -e 'console.log(process.versions.node.split(".")[0])' 2>/dev/null || echo 0; }
if ! command -v node >/dev/null || ! command -v npm >/dev/null || [ "$(node_major)" -lt 20 ]; then
    apt_install nodejs npm
    [ "$(node_major)" -ge 20 ] || die "node >= 20 is needed (p-retry 7, ky 1.14); found $(node --version 2>/dev/null || echo none)"
fi

# Go and github.com/cenkalti/backoff from Debian's packages (the Go calibration programs build in
# GOPATH mode against /usr/share/gocode: nothing is downloaded).
if ! command -v go >/dev/null || [ ! -d /usr/share/gocode/src/github.com/cenkalti/backoff ]; then
    apt_install golang-go golang-github-cenkalti-backoff-dev
fi
mkdir -p "$CACHE/go-cache"

# ---- python ------------------------------------------------------------------------------------
PY_PINS="$CAL/python/requirements.txt"
PY_STAMP="$CACHE/venv/.calibration-stamp"
py_want="$(hash_of "$PY_PINS")"
if [ "$(cat "$PY_STAMP" 2>/dev/null)" != "$py_want" ]; then
    echo "calibration: creating $CACHE/venv" >&2
    rm -rf "$CACHE/venv"
    python3 -m venv "$CACHE/venv" || die "python3 -m venv failed"
    "$CACHE/venv/bin/python" -m pip install --quiet --disable-pip-version-check \
        --timeout 30 --retries 2 -r "$PY_PINS" \
        || die "pip install -r calibration/python/requirements.txt failed (is PyPI reachable?)"
    echo "$py_want" >"$PY_STAMP"
fi

# The FastAPI service `harness audit` is tested against, in a venv of its own.
bash "$CAL/openapi/install.sh" || die "calibration/openapi/install.sh failed"

# The services behind the protocol-aware proxies (psycopg, redis-py; Debian's redis-server).
bash "$CAL/below/install.sh" || die "calibration/below/install.sh failed"

# ---- node --------------------------------------------------------------------------------------
NODE_DIR="$CACHE/node"
NODE_STAMP="$NODE_DIR/.calibration-stamp"
node_want="$(hash_of "$CAL/node/package.json" "$CAL/node/package-lock.json")"
if [ "$(cat "$NODE_STAMP" 2>/dev/null)" != "$node_want" ] || [ ! -d "$NODE_DIR/node_modules" ]; then
    echo "calibration: npm ci into $NODE_DIR" >&2
    rm -rf "$NODE_DIR"
    mkdir -p "$NODE_DIR"
    cp "$CAL/node/package.json" "$CAL/node/package-lock.json" "$NODE_DIR/"
    (cd "$NODE_DIR" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error --fetch-retries=1 \
        --fetch-timeout=30000) || die "npm ci failed (is the npm registry reachable?)"
    echo "$node_want" >"$NODE_STAMP"
fi

echo "calibration: ready ($(go version | cut -d' ' -f3), cenkalti/backoff $(dpkg-query -W -f='${Version}' golang-github-cenkalti-backoff-dev 2>/dev/null); $("$CACHE/venv/bin/python" -c 'import backoff, stamina, httpx, standardwebhooks, svix, stripe, grpc, grpc_tools, importlib.metadata as m; print(", ".join(f"{p} {m.version(p)}" for p in ("backoff","stamina","httpx","standardwebhooks","svix","stripe","grpcio","grpcio-tools")))'); node $(node --version): $(cd "$NODE_DIR" && node -e 'for (const p of ["p-retry","ky","exponential-backoff","standardwebhooks","svix","@octokit/webhooks-methods","@grpc/grpc-js","@grpc/proto-loader"]) process.stdout.write(p+" "+require("./node_modules/"+p+"/package.json").version+"  ")'))"

# ---- rust --------------------------------------------------------------------------------------
# calibration/rust/ is a cargo project of its own (not a member of the repository's workspace).
RUST_DIR="$CAL/rust"
RUST_TARGET="$CACHE/rust-target"
RUST_STAMP="$RUST_TARGET/.calibration-stamp"
rust_want="$(hash_of "$RUST_DIR/Cargo.toml" "$RUST_DIR/Cargo.lock" "$RUST_DIR"/src/*.rs)"
if [ "$(cat "$RUST_STAMP" 2>/dev/null)" != "$rust_want" ] || [ ! -x "$RUST_TARGET/release/backon_fleet" ]; then
    command -v cargo >/dev/null || die "cargo is needed to build calibration/rust/ (backon)"
    echo "calibration: cargo build --release of calibration/rust into $RUST_TARGET" >&2
    (cd "$RUST_DIR" && CARGO_TARGET_DIR="$RUST_TARGET" nice cargo build --release --locked --quiet) \
        || die "cargo build of calibration/rust failed (is crates.io reachable?)"
    echo "$rust_want" >"$RUST_STAMP"
fi
echo "calibration: rust adapter ready ($(grep -A1 '^name = "backon"' "$RUST_DIR/Cargo.lock" | sed -n 's/^version = "\(.*\)"/backon \1/p'), $(grep -A1 '^name = "reqwest"' "$RUST_DIR/Cargo.lock" | sed -n 's/^version = "\(.*\)"/reqwest \1/p'))" >&2

# ---- Toxiproxy's clients -----------------------------------------------------------------------
bash "$CAL/toxiproxy/install.sh"
