"""One cell over several processes (torchrun + DDP, normbench/train/distributed.py), on CPU with the gloo backend: it
follows the single-process run, and `normbench worker` under torchrun finishes every cell exactly once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from normbench.cli import main
from normbench.contracts.recipe import CellConfig, ModelConfig, TrainConfig
from normbench.errors import SuiteError
from normbench.train.distributed import Dist
from normbench.train.loop import train_cell
from tests.sweep.test_runner import assert_each_cell_once

CELL = CellConfig(model=ModelConfig(layer="layerscale", depth=2, embed_dim=32, num_heads=2, patch_size=4),
                  train=TrainConfig(epochs=2, batch_size=64, warmup_epochs=0, lr=3e-3))

RANK_SCRIPT = """
import dataclasses, json, sys
import torch
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from normbench.contracts.recipe import CellConfig, ModelConfig, TrainConfig
from normbench.train.distributed import from_env, shutdown
from normbench.train.loop import train_cell

all_reduces = []

class CountingDDP(torch.nn.parallel.DistributedDataParallel):  # counts the gradient all-reduces DDP really makes
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register_comm_hook(None, lambda state, bucket: all_reduces.append(1) or allreduce_hook(state, bucket))

torch.nn.parallel.DistributedDataParallel = CountingDDP
dist = from_env()
cell = CellConfig(model=ModelConfig(layer="layerscale", depth=2, embed_dim=32, num_heads=2, patch_size=4),
                  train=TrainConfig(epochs=2, batch_size=64, warmup_epochs=0, lr=3e-3))
seen = []
result = train_cell(cell, device="cpu", dist=dist, on_epoch=lambda record: seen.append(record["epoch"]))
plain_all_reduces = len(all_reduces)
all_reduces.clear()
accum = dataclasses.replace(cell, train=dataclasses.replace(cell.train, grad_accum_steps=2))
accumulated = train_cell(accum, device="cpu", dist=dist)
accum_all_reduces = len(all_reduces)
pruned = train_cell(cell, device="cpu", dist=dist, on_epoch=lambda record: True)  # rank 0 prunes at epoch 0
json.dump({"rank": dist.rank, "history": result.history, "on_epoch_calls": seen,
           "accum_history": accumulated.history, "all_reduces": [plain_all_reduces, accum_all_reduces],
           "pruned": [pruned.status, pruned.epochs_run]},
          open(sys.argv[1] + f"/rank{dist.rank}.json", "w"))
shutdown(dist)
"""


LOST_CLAIM_SCRIPT = """
import json, sys
from normbench.errors import ClaimLostError
from normbench.contracts.recipe import CellConfig, ModelConfig, TrainConfig
from normbench.train.distributed import from_env, shutdown
from normbench.train.loop import CellAbandoned, train_cell

dist = from_env()
cell = CellConfig(model=ModelConfig(layer="layerscale", depth=1, embed_dim=16, num_heads=2, patch_size=4),
                  train=TrainConfig(epochs=3, batch_size=256, warmup_epochs=0, lr=3e-3))

def lose(record):  # rank 0's ledger says another worker took the cell over
    raise ClaimLostError("taken over")

try:
    train_cell(cell, device="cpu", dist=dist, on_epoch=lose)
    ended = "returned"
except ClaimLostError:
    ended = "ClaimLostError"
except CellAbandoned:
    ended = "CellAbandoned"
after = train_cell(cell, device="cpu", dist=dist)  # the ranks are still in step: the next cell trains
json.dump({"ended": ended, "after": after.epochs_run}, open(sys.argv[1] + f"/lost{dist.rank}.json", "w"))
shutdown(dist)
"""


def torchrun(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MLFLOW_DISABLE_TELEMETRY": "true"}
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                           *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def single_process_history() -> list[dict]:
    return train_cell(CELL, device="cpu").history


@pytest.fixture(scope="module")
def single_process_accum_history() -> list[dict]:
    return train_cell(replace(CELL, train=replace(CELL.train, grad_accum_steps=2)), device="cpu").history


def assert_follows(ddp_history: list[dict], single_history: list[dict]) -> None:
    for ddp, single in zip(ddp_history, single_history, strict=True):
        assert ddp["train_loss"] == pytest.approx(single["train_loss"], rel=1e-3)
        assert abs(ddp["val_top1"] - single["val_top1"]) <= 0.6  # two of 360 images, for float noise
        assert ddp["images_per_sec"] > 0


def test_two_ranks_follow_the_single_process_run(tmp_path, single_process_history, single_process_accum_history):
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    done = torchrun(str(script), str(tmp_path), cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-3000:]
    assert "is deprecated" not in done.stderr  # e.g. DDP's broadcast_buffers, once per cell
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    # each rank trained on half of every global batch; DDP's averaged gradients make it the same optimisation
    for rank in ranks:
        assert_follows(rank["history"], single_process_history)
        assert_follows(rank["accum_history"], single_process_accum_history)
        # with 2-step accumulation only every other backward all-reduces (no_sync on the first)
        plain, accumulated = rank["all_reduces"]
        assert 0 < accumulated and 2 * accumulated <= plain
    # metrics are summed over ranks, so both report the same numbers; only rank 0 calls on_epoch
    timeless = [[{k: v for k, v in h.items() if k != "images_per_sec"} for h in r["history"]] for r in ranks]
    assert timeless[0] == timeless[1]
    assert ranks[0]["on_epoch_calls"] == [0, 1] and ranks[1]["on_epoch_calls"] == []
    assert ranks[0]["pruned"] == ranks[1]["pruned"] == ["pruned", 1]  # rank 0's decision reached rank 1


def test_a_claim_lost_on_rank_0_mid_cell_ends_the_cell_on_every_rank_without_a_hang(tmp_path):
    script = tmp_path / "lost.py"
    script.write_text(LOST_CLAIM_SCRIPT)
    done = torchrun(str(script), str(tmp_path), cwd=Path(__file__).resolve().parents[2])  # a hang: TimeoutExpired
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"lost{r}.json").read_text()) for r in (0, 1)]
    assert [r["ended"] for r in ranks] == ["ClaimLostError", "CellAbandoned"]  # rank 0 told rank 1, then raised
    assert [r["after"] for r in ranks] == [3, 3]


def test_worker_under_torchrun_finishes_every_cell_once(write_suite, tmp_path):
    layers = ["layernorm", "layerscale", "rezero"]
    path = write_suite(matrix={"depth": [1], "layer": layers, "lr": [1e-3], "seed": [0]})
    out = tmp_path / "out"
    done = torchrun("-m", "normbench", "worker", str(path), "--out", str(out), "--device", "cpu", "--quiet",
                    cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert main(["leaderboard", str(out)]) == 0
    assert_each_cell_once(out, "tiny", len(layers))


def test_mixup_needs_an_even_share_of_the_batch_per_process():
    cell = CellConfig(model=CELL.model, train=TrainConfig(epochs=1, batch_size=6, mixup=0.8))
    with pytest.raises(SuiteError, match="even"):  # 3 images per process: timm's Mixup pairs them
        train_cell(cell, device="cpu", dist=Dist(rank=0, world=2, local_rank=0))
