#!/usr/bin/env bash
# A pending sweep on a lent GPU for as long as the lease allows: K workers share the GPU (digits-sized cells are
# bound by kernel launches, so one worker leaves it mostly idle), the run is interrupted after SECONDS (each worker's
# cell in progress goes back to the queue), and the ledger and suite are packed into $OUT to be copied back over
# the folder here, where the sweep resumes (`normbench run SUITE --out FOLDER`).
#   bash scripts/gpu-sweep.sh suites/depth-sweep-digits-modern.yaml results/in-progress/depth-sweep-digits-modern 330 14
# FUSE=K (default auto: 16 on CUDA) has each worker train up to K cells of a row as one fused model (docs/speed.md);
# with fusion a few workers fill the GPU: e.g. FUSE=16 ... 330 4 (the `fuse` stage of gpu-first-contact.sh says which)
# Cells trained there say so in the ledger (device, torch): the leaderboard's "trained on" line counts them.
set -uo pipefail
cd "$(dirname "$0")/.."
if (($# < 2)); then
    echo "usage: bash scripts/gpu-sweep.sh SUITE OUT [SECONDS=300] [WORKERS=cores-2]" >&2
    exit 2
fi
suite=$1 out=$2 seconds=${3:-300} workers=${4:-$(( $(nproc) > 2 ? $(nproc) - 2 : 1 ))}
python="${PYTHON:-.venv/bin/python}"
[[ -x "$python" ]] || python=python3
if ! "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu-sweep.sh: no CUDA device visible, so nothing was run; on this machine resume the sweep with" \
         "normbench run $suite --out $out" >&2
    exit 2
fi
export MLFLOW_DISABLE_TELEMETRY=true PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

fuse=${FUSE:-auto}
echo "=== gpu-sweep: $suite into $out, $workers workers, --fuse $fuse, ${seconds}s ($(date -u))"
"$python" -m normbench run "$suite" --out "$out" --dry-run | tail -n 6
t0=$SECONDS
timeout -s INT -k 60 "$seconds" "$python" -m normbench run "$suite" --out "$out" --device cuda --workers "$workers" \
    --fuse "$fuse" --quiet
echo "=== gpu-sweep: exit $? after $((SECONDS - t0)) s"
"$python" -m normbench run "$suite" --out "$out" --dry-run | grep -E "cells?,|finished" | tail -n 3
if [[ -n "${OUT:-}" ]]; then
    # with any cost file measured there (gpu-first-contact.sh's `cost` stage writes it beside the ledger)
    tar -czf "$OUT/sweep-ledger.tgz" "$out/ledger.journal" "$out/suite.yaml" $(ls "$out"/cost-* 2>/dev/null) \
        && ls -l "$OUT/sweep-ledger.tgz"
fi
