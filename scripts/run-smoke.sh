#!/usr/bin/env bash
# The README's run command: set up .venv, train the smoke suite on the bundled digits into runs/smoke/ (not
# committed), then compare its numbers with the committed results/smoke/, which it never overwrites.
# Extra arguments go to `normbench run` (e.g. --workers 2); run it again to resume.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-env.sh
out=runs/smoke
# one thread per core, as results/smoke was trained, whatever else trains here: CPU float sums depend on the thread
# count, and a worker otherwise takes its share of the cores from the other normbench runs (train/cpu_share.py)
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-$(nproc)}"
.venv/bin/normbench run suites/smoke.yaml --out "$out" "$@"
.venv/bin/python scripts/compare_smoke.py "$out" results/smoke
