#!/usr/bin/env bash
# GPU first contact: everything a first CUDA machine should measure, stage by stage, each under its own time limit.
#   1. tests: the CUDA-only tests (CUDA iteration without host syncs, a compiled bf16 cell with fused AdamW)
#   2. suite: suites/gpu-first-contact.yaml (CIFAR-100-shaped synthetic data, depth 36, bf16 + compile) through
#      `normbench run`; it resumes, so a cut-short stage finishes on the next machine if results/gpu-first-contact
#      travels with the tree
#   3. bench: `normbench bench`, six mission layers x depth 36/12 x dim 192/384, batch 256, bf16, eager (a row is
#      written as soon as it is measured; compiling two models per row would fit a few rows, and the compiled path
#      is stages 1 and 2)
#   4. families: the block families' cost (hc, hc_dynamic, mhc, ngpt vs layernorm, depth 12/36 x width 64/192,
#      batch 256, bf16, eager) into results/bench-families/ (scripts/bench_families.py)
#   5. attention: the attention-path crossover on CUDA (scripts/attention_path.py)
#   6. checkpoint: a cell checkpoint's size and write time at depth 12/36 x width 64/192 (scripts/bench_checkpoint.py)
#   7. workers: cells/hour with 1, 4 and 14 workers on one GPU (scripts/workers_per_device.py) on suites/gpu-workers.yaml,
#      the modern sweep's digits cells cut to 8 epochs (fp32 eager, as the sweep trains them)
#   8. cost: every layer of the modern sweep, one train step at its own shape (digits, depth 36, batch 64, fp32
#      eager) against layernorm (`normbench bench SUITE`), beside the sweep's ledger, for its leaderboard
#   9. fuse: a fused group equals its cells trained alone on CUDA (tests/train/test_fused.py -k cuda), then cells per
#      hour fused in groups of 1/4/16/64 against one by one on the modern sweep's cells (layernorm, ngpt, hc: `normbench
#      bench SUITE --fuse`) into results/fuse/; docs/speed.md compares it with 14 workers' 7 cells a minute
# The limits come from the first contact (H200, torch 2.11, 2026-11-26: a compiled depth-36 cell took 93 s) and add
# up to about 18 minutes, more than one 10-minute command or one 15-minute lease: STAGES picks some, e.g.
#   STAGES="tests suite bench" bash scripts/gpu-first-contact.sh, then STAGES="families attention checkpoint workers cost",
# and LIMIT_<stage>=SECONDS overrides one stage's limit.
# Every figure goes to results/ (bench-<gpu>-<torch>.*, gpu-first-contact/, bench-families/, attention-path-*,
# checkpoint-cost/, workers-per-device-*), and the console output is appended to results/gpu-first-contact-<gpu>.log.
# A stage that fails or runs out of time is reported and the others still run; the exit status is 1 if any failed.
# With $OUT set (a device lease), every file this run wrote under results/ is packed into $OUT/gpu-first-contact.tgz
# after each stage, so what was measured comes back even when the lease's own limit cuts a later stage (keep the
# call's limit ~60 s above the stages' sum: the pip install and the first CUDA context come before them).
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
exec > >(tee -a "$log") 2>&1
failed=()
started=$(mktemp)  # files under results/ newer than this are this run's

pack() {  # the figures so far into $OUT, where the device tool brings them back
    [[ -n "${OUT:-}" ]] || return 0
    find results -type f -newer "$started" -print0 | tar -czf "$OUT/gpu-first-contact.tgz" --null -T -
}

# shellcheck source=scripts/lib/stage.sh
source scripts/lib/stage.sh  # stage NAME SECONDS COMMAND...
KILL_AFTER=10

date -u
nvidia-smi || true
"$python" -c 'import torch, timm; print("torch", torch.__version__, "cuda", torch.version.cuda, "timm", timm.__version__)'

stage tests 80 "$python" -m pytest -q -rs -k cuda tests/train/test_device.py tests/train/test_fastpath.py \
    tests/data/test_data_device_loader.py
stage suite 220 "$python" -m normbench run suites/gpu-first-contact.yaml --device cuda --out results/gpu-first-contact
stage bench 240 "$python" -m normbench bench --depth 36 12 --dim 192 384 --batch-size 256 --device cuda \
    --compile off --out results
stage families 120 "$python" scripts/bench_families.py --device cuda --batch-size 256 --warmup 3 --steps 10 \
    --repeats 3 --op-iters 50 --compile off --out results/bench-families
stage attention 25 "$python" scripts/attention_path.py --device cuda
stage checkpoint 40 "$python" scripts/bench_checkpoint.py --device cuda --repeats 3
stage workers 240 "$python" scripts/workers_per_device.py suites/gpu-workers.yaml --device cuda --workers 1 4 14
modern=results/depth-sweep-digits-modern
[[ -d "$modern" ]] || modern=results/in-progress/depth-sweep-digits-modern
stage cost 60 "$python" -m normbench bench suites/depth-sweep-digits-modern.yaml --device cuda --out "$modern"
stage fuse 240 bash -c "\"$python\" -m pytest -q -rs -k cuda tests/train/test_fused.py && \"$python\" -m normbench \
    bench suites/depth-sweep-digits-modern.yaml --fuse 1 4 16 64 --layers layernorm ngpt hc --repeats 2 --device cuda \
    --out results/fuse"

if ((${#failed[@]})); then
    echo "gpu-first-contact.sh: failed or cut short: ${failed[*]}; figures so far are in results/, log in $log"
    exit 1
fi
echo "gpu-first-contact.sh: done; figures in results/, log in $log"
