#!/usr/bin/env bash
# The README's test command: set up .venv, make sure PostgreSQL's binaries exist, lint, run the whole test suite.
# Arguments go to pytest. With none that pick tests (no path, -k, -m, -n, --lf...), the whole suite runs in two
# parts: the tests not marked `serial` on two xdist workers, then the `serial` ones alone (tests/conftest.py says
# which and why); each part gets the arguments, and the exit code is the first part's if it failed, else the
# second's. With a path or a selection, pytest runs as asked, in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh
if [ "$(id -u)" = 0 ]; then bash scripts/install-postgres.sh; fi
export MLFLOW_DISABLE_TELEMETRY=true
.venv/bin/ruff check --quiet normbench tests scripts examples

whole_suite=1
stop_at_first=0
value_next=0
for arg in "$@"; do
  if [ "$value_next" = 1 ]; then value_next=0; continue; fi
  case "$arg" in
    -x | --exitfirst | --maxfail=1) stop_at_first=1 ;;
    -p | -o | -W | -r | --durations | --maxfail | --tb | --basetemp | --junitxml | --junit-xml) value_next=1 ;;
    -k* | -m* | -n* | --numprocesses* | -c* | --lf | --last-failed | --ff | --failed-first | --sw | --stepwise* | \
      --deselect* | --ignore* | --co | --collect-only | --pdb* | --trace | --rootdir* | --confcutdir*) whole_suite=0 ;;
    -*) ;;
    *) whole_suite=0 ;;  # a path or node id: pytest runs as asked
  esac
done
if [ "$whole_suite" = 0 ]; then
  exec .venv/bin/python -m pytest "$@"
fi

status=0
.venv/bin/python -m pytest -n 2 -m "not serial" "$@" || status=$?
if [ "$status" != 0 ] && [ "$stop_at_first" = 1 ]; then
  exit "$status"
fi
second=0
.venv/bin/python -m pytest -m serial "$@" || second=$?
if [ "$status" = 0 ]; then
  status=$second
fi
exit "$status"
