"""scripts/gpu-lease.sh, the plan for a 15-minute GPU lease, rehearsed end to end on this CPU (FAKE_CUDA=1): the tests
stage, the fuse bench and the sweep of the queue's folders, fused, each stage's files packed into $OUT as it ends;
the ledgers it packs resume here. Without CUDA and without the switch it refuses before doing anything."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pandas as pd
import pytest
import torch
from optuna.trial import TrialState

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu-lease.sh"


def test_script_parses() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_refuses_without_cuda_and_writes_nothing(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHON": sys.executable, "RESULTS": str(tmp_path / "results"), "OUT": str(tmp_path)}
    env.pop("FAKE_CUDA", None)
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "no CUDA device visible" in done.stderr and "FAKE_CUDA=1" in done.stderr
    assert not (tmp_path / "results").exists() and list(tmp_path.iterdir()) == []


def test_the_lease_rehearsed_on_a_cpu_packs_each_stage_and_its_ledgers_resume_here(write_suite, tmp_path: Path):
    suite = write_suite(train={"epochs": 2, "batch_size": 256, "warmup_epochs": 0, "telemetry_every": 0},
                        matrix={"depth": [1], "layer": ["layernorm"], "lr": [1e-3, 3e-3], "seed": [0]},
                        report_seeds=[100])
    folder = tmp_path / "in-progress" / "tiny"
    queue = tmp_path / "queue.txt"
    tuned = write_suite("tuned", train={"epochs": 1, "batch_size": 256, "warmup_epochs": 0, "telemetry_every": 0},
                        matrix={"depth": [1], "layer": ["layernorm"], "lr": [1e-3], "seed": [0]},
                        tune={"trials": 1, "confirm_top": 0, "space": {"lr": {"low": 1e-4, "high": 1e-2, "log": True}}})
    queue.write_text(f"# the sweeps in progress\n{suite} {folder}\n\n{suite} {tmp_path / 'second'} gpu-only\n"
                     f"{tuned} {tmp_path / 'tuned'} tune\n{suite} {tmp_path / 'cpu'} cpu-only\n")
    out = tmp_path / "out"
    out.mkdir()
    env = {**os.environ, "PYTHON": sys.executable, "FAKE_CUDA": "1", "OUT": str(out), "QUEUE": str(queue),
           "RESULTS": str(tmp_path / "results"), "WALL": "420", "LIMIT_tests": "120", "LIMIT_bench": "150",
           "BENCH_SUITE": str(suite), "BENCH_ARGS": "--fuse 1 2 --repeats 1 --workers 1 1", "FUSE": "2",
           "SWEEP_ARGS": "--workers 1"}
    done = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=600)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log
    assert "=== tests" in log and "=== bench" in log and f"=== sweep: run {suite} into {folder} (--select-only)" in log
    with tarfile.open(out / "gpu-lease-figures.tgz") as tar:
        names = tar.getnames()
        [csv] = [n for n in names if n.endswith(".csv") and "/fuse/fuse-cpu-" in n]
        rows = pd.read_csv(tar.extractfile(csv))
    assert set(rows["config"]) == {"alone", "fused"} and any(n.endswith("gpu-lease-cpu.log") for n in names)
    unpacked = tmp_path / "unpacked"
    with tarfile.open(out / "gpu-lease-ledgers.tgz") as tar:
        tar.extractall(unpacked, filter="data")
    copy = unpacked / str(folder).lstrip("/")
    assert sorted(p.name for p in copy.iterdir()) == ["ledger.journal", "suite.yaml"]
    from normbench.store.ledger import Ledger

    ledger = Ledger(None, copy)  # the ledger as it came back: both cells finished, fused, ready to resume here
    trials = [t for name in ledger.study_names() for t in ledger.trials(ledger.study(name), (TrialState.COMPLETE,))]
    assert len(trials) == 2 and {t.user_attrs["result"]["fused_group"] for t in trials} == {2}
    # its report cell scores the folder beside CPU cells: queued for the CPU, not trained on the lease
    assert [t.state for t in ledger.trials(ledger.study("report:tiny"))] == [TrialState.WAITING]
    second = Ledger(None, tmp_path / "second")  # a gpu-only line is the lease's to train too, report cells and all
    assert [t.state for t in second.trials(second.study("report:tiny"))] == [TrialState.COMPLETE]
    assert f"=== sweep: tune {tuned} into {tmp_path / 'tuned'}" in log  # a `tune` line tunes, as here
    assert (tmp_path / "tuned" / "ledger.journal").exists()
    assert not (tmp_path / "cpu").exists() and f"=== {suite}: cpu-only, left to the CPU" in log  # the CPU's
