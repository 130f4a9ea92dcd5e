#!/usr/bin/env bash
# The README's run command: set up .venv, train the smoke suite on the bundled digits, write results/smoke/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh
exec .venv/bin/normbench run suites/smoke.yaml "$@"
