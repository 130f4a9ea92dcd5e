#!/usr/bin/env bash
# A disk that fills up mid-cell, by hand (tests/faults/test_full_disk.py does it when it may mount; root needed):
# a 16 MB tmpfs as --out, filled while the first cell trains. Expect within seconds: exit 2, one line naming
# OUT/mlflow.db and "the disk is full", no traceback, no RUNNING trial or MLflow run, no *.tmp; then, once the
# filler is gone, the same command finishes every cell once.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "needs root (mount -t tmpfs)" >&2; exit 2; }
out=$(mktemp -d /tmp/normbench-full.XXXXXX)
suite="$out.yaml"
trap 'umount -l "$out" 2>/dev/null || true; rm -rf "$out" "$suite"' EXIT
mount -t tmpfs -o size=16m tmpfs "$out"
cat > "$suite" <<'EOF'
name: full
dataset: {name: digits}
model: {embed_dim: 16, num_heads: 2, patch_size: 4}
train: {epochs: 100, batch_size: 64, warmup_epochs: 0}
matrix: {depth: [1], layer: [layernorm, layerscale], lr: [1.0e-3], seed: [0]}
EOF
export MLFLOW_DISABLE_TELEMETRY=true
.venv/bin/normbench run "$suite" --out "$out" --quiet &
run=$!
until grep -q '"state":0' "$out/ledger.journal" 2>/dev/null; do sleep 1; done  # a cell in flight
sleep 8  # its first epochs logged (a RUNNING trial: state 0)
dd if=/dev/zero of="$out/filler" bs=64k 2>/dev/null || true
echo "disk full at $(date +%T)" >&2
set +e; wait "$run"; code=$?; set -e
echo "exit $code at $(date +%T) (expected 2, within seconds)" >&2
ls -la "$out" 2>/dev/null || true
rm "$out/filler"
.venv/bin/normbench run "$suite" --out "$out" --quiet
echo "resumed: exit $? (expected 0)" >&2
