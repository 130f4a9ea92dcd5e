#!/usr/bin/env bash
# The GPU figure set: six mission layers x depths 12 24 36 x dims 192 384, batch 256, bf16 autocast, torch.compile.
# Writes results/bench-<gpu slug>-<torch version>.csv and .md. Extra arguments go to `normbench bench`
# (e.g. `--device cuda:1`, `--compile off`). Run from anywhere; it uses the repository's .venv when there is one.
set -euo pipefail

cd "$(dirname "$0")/.."
python="${PYTHON:-.venv/bin/python}"
[[ -x "$python" ]] || python=python3

if ! "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    echo "bench.sh: no CUDA device visible; for CPU figures run: $python -m normbench bench --depth 12 --dim 192" >&2
    exit 2
fi

exec "$python" -m normbench bench --depth 12 24 36 --dim 192 384 --batch-size 256 --device cuda --compile auto \
    --out results "$@"
