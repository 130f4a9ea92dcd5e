#!/usr/bin/env bash
# Create .venv in the checkout and install normbench with its test extra. Idempotent: a second call is instant.
set -euo pipefail
cd "$(dirname "$0")/.."
# torch.compile on CPU (the compile+bf16 cell in tests/test_train.py) builds C++ with the system compiler
if ! command -v g++ >/dev/null && ! command -v c++ >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ >/dev/null
  else
    echo "setup-env.sh: no C++ compiler (g++ or c++) on PATH; torch.compile on CPU needs one: install g++" >&2
    exit 1
  fi
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.normbench-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  # an editable install rewrites where the environment imports normbench from: in a .venv linked from another
  # checkout it would silently point that checkout's commands (and any sweep it runs) at this one's code
  linked=$(cd .venv/bin && pwd -P)
  if [ "$linked" != "$(pwd -P)/.venv/bin" ]; then
    echo "setup-env.sh: .venv/bin is $linked, another checkout's environment; installing normbench here would" \
      "point it at this checkout's code. Make this checkout its own: rm .venv && bash scripts/setup-env.sh" >&2
    exit 1
  fi
  .venv/bin/python -m pip install -q --upgrade pip
  # The registry's regular torch build (it runs on CPU too); torchvision must match it, so neither is pinned.
  .venv/bin/python -m pip install -q -e '.[test]'
  touch "$stamp"
fi
