#!/usr/bin/env bash
# The README's test command: set up .venv, make sure PostgreSQL's binaries exist, lint, run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh
if [ "$(id -u)" = 0 ]; then bash scripts/install-postgres.sh; fi
export MLFLOW_DISABLE_TELEMETRY=true
.venv/bin/ruff check --quiet normbench tests scripts examples
exec .venv/bin/python -m pytest "$@"
