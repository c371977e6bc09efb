#!/usr/bin/env bash
# Installs the public OpenAPI documents the openapi crate's tests read, pinned by
# package-lock.json (integrity hashes), from the npm registry into the repo's .cache/:
#   .cache/openapi-documents/node_modules/@readme/oas-examples/3.0/json/petstore.json   (3.0)
#   .cache/openapi-documents/node_modules/@readme/oas-examples/3.1/json/petstore.json   (3.1)
#   .cache/openapi-documents/node_modules/@octokit/openapi/generated/api.github.com.json (GitHub REST, 3.0)
# Of @octokit/openapi only api.github.com.json is kept (the package also ships dereferenced and
# GitHub Enterprise variants, ~400 MB). Idempotent: a stamp records the hash of the pin files.
# Prints the directory on success; exits non-zero with a message naming what failed.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../../.." && pwd)"
DEST="$ROOT/.cache/openapi-documents"
STAMP="$DEST/.stamp"
GITHUB="$DEST/node_modules/@octokit/openapi/generated/api.github.com.json"
PETSTORE="$DEST/node_modules/@readme/oas-examples/3.1/json/petstore.json"

die() { echo "openapi/tests/documents/install.sh: $*" >&2; exit 1; }

mkdir -p "$ROOT/.cache"
# .cache/ is not in the repo's .gitignore: make it ignore itself, so nothing here is committed.
[ -f "$ROOT/.cache/.gitignore" ] || printf '*\n' >"$ROOT/.cache/.gitignore"

want="$(cat "$HERE/package.json" "$HERE/package-lock.json" | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$STAMP" 2>/dev/null)" = "$want" ] && [ -f "$GITHUB" ] && [ -f "$PETSTORE" ]; then
    echo "$DEST"
    exit 0
fi
command -v npm >/dev/null || die "npm is not installed (Debian: apt-get install npm)"
rm -rf "$DEST"
mkdir -p "$DEST"
cp "$HERE/package.json" "$HERE/package-lock.json" "$DEST/"
(cd "$DEST" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error --fetch-retries=1 \
    --fetch-timeout=60000 >&2) || die "npm ci failed (is the npm registry reachable?)"
find "$DEST/node_modules/@octokit/openapi/generated" -type f ! -name api.github.com.json -delete
[ -f "$GITHUB" ] && [ -f "$PETSTORE" ] || die "the installed packages lack the expected documents"
echo "$want" >"$STAMP"
echo "$DEST"
