#!/usr/bin/env bash
# Installs the tools of the deploy tests (deploy/requirements.txt: kubernetes-validate) into the
# project's ignored venv .cache/venv. Idempotent: does nothing when that venv already holds what
# requirements.txt pins.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.cache/venv
requirements=deploy/requirements.txt
stamp="$venv/.deploy-requirements.sha256"
want=$(sha256sum "$requirements" | cut -d' ' -f1)

if [ -x "$venv/bin/kubernetes-validate" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
  exit 0
fi

echo "== installing deploy test tools into $venv"
if [ ! -x "$venv/bin/python" ]; then
  mkdir -p "$(dirname "$venv")"
  if ! python3 -m venv "$venv" 2>/dev/null; then
    # Debian's python3 keeps venv (ensurepip) in a package of its own.
    flock /tmp/apt.harness.lock apt-get -o DPkg::Lock::Timeout=600 update -qq && DEBIAN_FRONTEND=noninteractive flock /tmp/apt.harness.lock apt-get -o DPkg::Lock::Timeout=600 install -y -qq python3-venv >/dev/null
    rm -rf "$venv"
    python3 -m venv "$venv"
  fi
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
"$venv/bin/kubernetes-validate" --version >/dev/null
echo "$want" > "$stamp"
