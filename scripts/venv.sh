#!/usr/bin/env bash
# Creates (or refreshes) .venv with the project installed in editable mode plus dev tools.
# Sourced by scripts/examples and scripts/test; safe to run again (a stamp skips pip).
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

python=${PYTHON:-python3}
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  echo "error: harness needs Python >= 3.11 (found: $("$python" --version 2>&1 || echo none))" >&2
  exit 2
fi

if [ ! -x .venv/bin/python ]; then
  if ! "$python" -m venv .venv 2>/dev/null; then
    # Debian ships venv/ensurepip separately; install it when we can.
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      ver=$("$python" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "python${ver}-venv" python3-venv >/dev/null
      rm -rf .venv
      "$python" -m venv .venv
    else
      echo "error: '$python -m venv' failed; install python3-venv (Debian) and retry" >&2
      exit 2
    fi
  fi
fi

stamp=.venv/.harness-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e '.[dev,ray]'
  touch "$stamp"
fi
