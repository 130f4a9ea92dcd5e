#!/usr/bin/env bash
# GPU first contact: everything a first CUDA machine should measure, in one command, within 10 minutes.
#   1. the CUDA-only tests (pytest -k cuda: CUDA iteration without host syncs, a compiled bf16 cell with fused AdamW)
#   2. `normbench bench`, six mission layers x depth 12/36 x dim 192/384, batch 256, bf16 + torch.compile
#   3. suites/gpu-first-contact.yaml (CIFAR-100-shaped synthetic data, depth 36, bf16 + compile) via `normbench run`
#   4. cells/hour with 1 and 2 workers on one GPU (scripts/workers_per_device.py)
#   5. the attention-path crossover on CUDA (scripts/attention_path.py)
#   6. a cell checkpoint's size and write time at depth 12/36 x width 64/192 (scripts/bench_checkpoint.py)
#   7. the block families' cost (hc, hc_dynamic, mhc, ngpt vs layernorm, depth 12/36 x width 64/192, batch 256,
#      bf16, eager to fit its time) into results/bench-families/ (scripts/bench_families.py)
# Every figure goes to results/ (bench-<gpu>-<torch>.*, gpu-first-contact/, workers-per-device-*, attention-path-*,
# checkpoint-cost/),
# and the whole console output to results/gpu-first-contact-<gpu>.log. Each stage has its own time limit; a stage
# that fails or runs out of time is reported and the others still run; the exit status is 1 if any failed.
# On a machine without CUDA it refuses with exit 2 before doing anything.
set -uo pipefail

cd "$(dirname "$0")/.."
python="${PYTHON:-.venv/bin/python}"
[[ -x "$python" ]] || python=python3

if ! "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu-first-contact.sh: no CUDA device visible (torch.cuda.is_available() is False), so there is nothing" \
         "to measure here; run it on a GPU machine. CPU figures: scripts/peer_timm_loop.py, normbench bench --device cpu" >&2
    exit 2
fi

export MLFLOW_DISABLE_TELEMETRY=true PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
slug=$("$python" -c 'import torch; from normbench.diagnostics.bench import device_slug; print(device_slug(torch.device("cuda")))')
mkdir -p results
log="results/gpu-first-contact-$slug.log"
exec > >(tee "$log") 2>&1
failed=()

stage() {  # stage NAME SECONDS COMMAND...: run with a time limit (SIGINT first, so partial results get written)
    local name=$1 limit=$2
    shift 2
    echo "=== $name (limit ${limit}s): $*"
    local t0=$SECONDS
    timeout -s INT -k 20 "$limit" "$@"
    local rc=$?
    echo "=== $name: exit $rc after $((SECONDS - t0)) s"
    ((rc == 0)) || failed+=("$name (exit $rc)")
}

date -u
nvidia-smi || true
"$python" -c 'import torch, timm; print("torch", torch.__version__, "cuda", torch.version.cuda, "timm", timm.__version__)'

stage tests 90 "$python" -m pytest -q -rs -k cuda tests
stage bench 210 "$python" -m normbench bench --depth 12 36 --dim 192 384 --batch-size 256 --device cuda \
    --compile auto --out results
stage suite 150 "$python" -m normbench run suites/gpu-first-contact.yaml --device cuda --out results/gpu-first-contact
stage workers 100 "$python" scripts/workers_per_device.py suites/gpu-first-contact.yaml --device cuda --workers 1 2
stage attention 30 "$python" scripts/attention_path.py --device cuda
stage checkpoint 20 "$python" scripts/bench_checkpoint.py --device cuda --repeats 3
stage families 90 "$python" scripts/bench_families.py --device cuda --batch-size 256 --warmup 3 --steps 10 \
    --repeats 3 --op-iters 50 --compile off --out results/bench-families

if ((${#failed[@]})); then
    echo "gpu-first-contact.sh: failed or cut short: ${failed[*]}; figures so far are in results/, log in $log"
    exit 1
fi
echo "gpu-first-contact.sh: done; figures in results/, log in $log"
