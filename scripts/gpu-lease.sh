#!/usr/bin/env bash
# A 15-minute GPU lease in one command, under 9 minutes of wall time (WALL, default 510 s), three stages:
#   1. tests (LIMIT_tests, 60 s): the CUDA tests of the fused path: its step under torch's sync debug mode, the
#      whole step as one CUDA graph, a fused group equal to its cells alone on CUDA
#   2. bench (LIMIT_bench, 180 s): `normbench bench` of the modern suite's real groups (a row's 8 selection cells):
#      one cell alone, 14 workers unfused, fused, fused + compiled, fused as CUDA graphs, 4 fused workers, and the
#      model FLOPs utilisation at the depth36 shape (diagnostics/fuse_bench.py) into results/fuse/, a row written as
#      measured; `--fuse auto` in stage 3 reads it (sweep/fuse_plan.py)
#   3. sweep (what is left of WALL): the pending cells of each folder results/in-progress/queue.txt lists ("SUITE
#      OUT [FLAGS]"; '#' comments; a `tune` line runs `normbench tune`), in order, fused (`--fuse auto`, its workers per GPU), each run stopped by
#      SIGINT when the wall time runs out (its cells in flight go back to the queue, checkpointed); `--select-only`
#      except on a `gpu-only` line: a CPU folder's report, 2x and claim cells (tune's re-runs) stay the CPU's
# After each stage its files are packed into $OUT (figures and log: gpu-lease-figures.tgz; every folder's ledger,
# suite and cost files: gpu-lease-ledgers.tgz), so what was done comes back even when the lease's own limit cuts a
# later stage. Stop the local sweep (scripts/resume-in-progress.sh) before the lease: unpacking replaces the ledgers,
# and a cell trained here meanwhile would be lost. Back here, unpack both over the checkout
# (`tar -xzf gpu-lease-ledgers.tgz`) and resume: `normbench run SUITE --out OUT` trains what is left (docs/speed.md).
# Env: WALL, LIMIT_<stage>, STAGES (e.g. "bench sweep"), QUEUE (the queue file), RESULTS (where figures and the
# log go, default results), BENCH_SUITE / BENCH_ARGS (the bench's suite and options), MPS=1 (start NVIDIA's MPS
# daemon for the sweep's workers, where nvidia-cuda-mps-control exists).
# FAKE_CUDA=1 rehearses the whole plan on a CPU (tests/test_gpu_lease.py): every stage runs with --device cpu and
# the limits it is given, nothing asks for a GPU. Without CUDA (and without FAKE_CUDA) it refuses with exit 2.
set -uo pipefail

cd "$(dirname "$0")/.."
python="${PYTHON:-.venv/bin/python}"
[[ -x "$python" ]] || python=python3
t0=$SECONDS
wall=${WALL:-510}
results=${RESULTS:-results}
queue=${QUEUE:-results/in-progress/queue.txt}
device=cuda
if [[ "${FAKE_CUDA:-}" == 1 ]]; then
    device=cpu
elif ! "$python" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu-lease.sh: no CUDA device visible (torch.cuda.is_available() is False), so nothing was run; on a GPU" \
         "machine run it as is, or rehearse it here with FAKE_CUDA=1" >&2
    exit 2
fi
if [[ -d .whl ]] && ! "$python" -c 'import optuna, mlflow' 2>/dev/null; then  # a bare lent machine: carried wheels
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl && export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
export MLFLOW_DISABLE_TELEMETRY=true PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
slug=$("$python" -c "import torch; from normbench.diagnostics.bench import device_slug; \
print(device_slug(torch.device('$device')))")
mkdir -p "$results/fuse"
log="$results/gpu-lease-$slug.log"
exec > >(tee -a "$log") 2>&1
failed=()
folders=()
while read -r suite folder flags; do
    case "$suite" in ''|'#'*) continue ;; esac
    # a `cpu-only` line measures this CPU (the device effect: GPU cells trained again here): never on the lease
    case " ${flags:-} " in *" cpu-only "*) echo "=== $suite: cpu-only, left to the CPU"; continue ;; esac
    command=run
    case " ${flags:-} " in *" tune "*) command=tune ;; esac  # a `tune` line tunes (its trials), as here
    # a CPU folder gets the cells that choose (matrix, bracketing, searches); those that score it, compared with
    # other folders' CPU cells, wait for the CPU (docs/protocol.md "Devices"); a gpu-only folder is the GPU's whole
    scope=--select-only
    case " ${flags:-} " in *" gpu-only "*) scope= ;; esac
    folders+=("$suite $folder $command $scope")
done < <(cat "$queue" 2>/dev/null)

pack() {  # figures, log and ledgers so far into $OUT, where the device tool brings them back
    [[ -n "${OUT:-}" ]] || return 0
    tar -czf "$OUT/gpu-lease-figures.tgz" "$results/fuse" "$log" 2>/dev/null
    local keep=() entry folder
    for entry in "${folders[@]}"; do
        folder=${entry#* } folder=${folder%% *}
        for f in "$folder/ledger.journal" "$folder/suite.yaml" "$folder"/cost-*; do
            [[ -f "$f" ]] && keep+=("$f")
        done
    done
    ((${#keep[@]})) && tar -czf "$OUT/gpu-lease-ledgers.tgz" "${keep[@]}"
    return 0
}

left() { echo $((wall - (SECONDS - t0))); }

# shellcheck source=scripts/lib/stage.sh
source scripts/lib/stage.sh  # stage NAME SECONDS COMMAND...

date -u
[[ $device == cuda ]] && { nvidia-smi || true; }
"$python" -c 'import torch, timm; print("torch", torch.__version__, "cuda", torch.version.cuda, "timm", timm.__version__)'

stage tests 60 "$python" -m pytest -q -rs -p no:cacheprovider -k cuda tests/train/test_fused_step.py \
    tests/train/test_fused.py
# shellcheck disable=SC2086
stage bench 180 "$python" -m normbench bench "${BENCH_SUITE:-suites/depth-sweep-digits-modern.yaml}" \
    ${BENCH_ARGS:---fuse 1 8 --layers layernorm --repeats 1} --device "$device" --out "$results/fuse"

# 3. the sweep: each folder's pending cells, fused, one folder after another until the wall time is spent
if [[ -z "${STAGES:-}" || " $STAGES " == *" sweep "* ]]; then
    mps=0
    if [[ "${MPS:-}" == 1 && $device == cuda ]] && command -v nvidia-cuda-mps-control >/dev/null; then
        nvidia-cuda-mps-control -d && mps=1
    fi
    for entry in "${folders[@]}"; do
        read -r suite folder command scope <<<"$entry"
        if (($(left) < 30)); then
            echo "=== sweep: $(left)s left, $folder and those after it wait for the next lease"
            break
        fi
        echo "=== sweep: $command $suite into $folder${scope:+ ($scope)}, $(left)s left ($(date -u +%T))"
        t1=$SECONDS
        # shellcheck disable=SC2086
        timeout -s INT -k 30 $(($(left) - 15)) "$python" -m normbench "$command" "$suite" --out "$folder" \
            --device "$device" --fuse "${FUSE:-auto}" ${scope:-} ${SWEEP_ARGS:-} --quiet
        rc=$?
        echo "=== sweep: $folder: exit $rc after $((SECONDS - t1)) s"
        pack
        # 0: the folder is done; 124/130: cut by the wall time, its cells in flight back in the queue; 75: its time
        # limit left cells queued
        ((rc == 0 || rc == 75 || rc == 124 || rc == 130)) || failed+=("sweep of $folder (exit $rc)")
    done
    ((mps)) && { echo quit | nvidia-cuda-mps-control; }
fi

echo "=== gpu-lease: $((SECONDS - t0)) s of wall time"
if ((${#failed[@]})); then
    echo "gpu-lease.sh: failed or cut short: ${failed[*]}; what was done is in $results and \$OUT"
    exit 1
fi
echo "gpu-lease.sh: done; figures in $results/fuse, log in $log, ledgers packed into \$OUT"
