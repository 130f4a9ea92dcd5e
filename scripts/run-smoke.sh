#!/usr/bin/env bash
# The README's run command: set up .venv, train the smoke suite on the bundled digits into runs/smoke/ (not
# committed), then compare its numbers with the committed results/smoke/, which it never overwrites.
# Extra arguments go to `normbench run` (e.g. --workers 2); run it again to resume.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh
out=runs/smoke
.venv/bin/normbench run suites/smoke.yaml --out "$out" "$@"
.venv/bin/python scripts/compare_smoke.py "$out" results/smoke
