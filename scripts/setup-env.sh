#!/usr/bin/env bash
# Create .venv in the checkout and install normbench with its test extra. Idempotent: a second call is instant.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.normbench-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  # The registry's regular torch build (it runs on CPU too); torchvision must match it, so neither is pinned.
  .venv/bin/python -m pip install -q -e '.[test]'
  touch "$stamp"
fi
