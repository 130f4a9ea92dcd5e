"""The fused step (train/fused_step.py) reads nothing back from the device and copies no host data to it (the ops it
dispatches, on any device; on CUDA also torch's sync debug mode); compiled, it trains each member as the eager step
does, and its compiled functions are kept for the next group of that shape; on CUDA the whole step replays as one
CUDA graph and trains as the eager step."""

from __future__ import annotations

import math

import pytest
import torch

from normbench.contracts.recipe import CellConfig, ModelConfig, TrainConfig
from normbench.train import fused, fused_step
from normbench.train.fused import train_group
from normbench.train.loop import build_fit
from tests.train._sync_ops import SyncOps

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA; scripts/gpu-lease.sh runs it")


def cell(layer: str = "layernorm", lr: float = 1e-3, seed: int = 0, epochs: int = 2, depth: int = 2,
         width: int = 16, **train) -> CellConfig:
    return CellConfig(model=ModelConfig(layer=layer, depth=depth, embed_dim=width, num_heads=2, patch_size=4),
                      train=TrainConfig(epochs=epochs, batch_size=256, lr=lr, seed=seed, warmup_epochs=1,
                                        telemetry_every=0, **train))


def group_of(cells: list[CellConfig], dev: str = "cpu", **kwargs) -> fused._Group:
    members = [fused.Member(c, build_fit(c, dev, None, None)) for c in cells]
    return fused._Group(members, torch.device(dev), compile=kwargs.pop("compile", False),
                        graphs=kwargs.pop("graphs", False))


def batch(group: fused._Group) -> tuple[torch.Tensor, torch.Tensor]:
    batches = [next(iter(m.fit.data.train)) for m in group.members]
    return torch.stack([b[0] for b in batches]), torch.stack([b[1] for b in batches])


@pytest.mark.parametrize("layer", ["layernorm", "ngpt"])
def test_a_fused_step_dispatches_no_op_that_waits_for_the_device_or_copies_host_data_to_it(layer):
    group = group_of([cell(layer, seed=0), cell(layer, lr=3e-3, seed=1)])
    x, y = batch(group)
    group._step_stacked(x, y, observed=False)  # the first step: its refusal guard, no different in kind
    with SyncOps() as seen:
        group._step_stacked(x, y, observed=False)
    assert seen.ops == []
    with SyncOps() as control:  # what it would have seen: the checker sees each kind
        group.fused.acc["finite"].tolist()
        float(group.fused.acc["loss_sum"][0])
        torch.tensor([1.0, 2.0])
    assert control.ops == ["Tensor.tolist", "aten::_local_scalar_dense", "aten::lift_fresh"]


@CUDA
def test_on_cuda_a_fused_step_runs_under_sync_debug_mode_error():
    group = group_of([cell(seed=0), cell(seed=1)], "cuda")
    x, y = batch(group)
    group._step_stacked(x, y, observed=False)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(3):
            group._step_stacked(x, y, observed=False)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_compiled_trains_each_member_as_eager_and_the_next_group_reuses_the_compiled_step():
    """inductor on this CPU: a depth-1, width-8 model keeps the compile to a few minutes."""
    cells = [cell("ngpt", lr, seed, depth=1, width=8) for lr, seed in ((1e-3, 0), (3e-3, 1))]
    fused_step.STEPS.clear()
    eager = train_group(cells, "cpu", compile=False)
    compiled = train_group(cells, "cpu", compile=True)
    assert len(fused_step.STEPS) == 1
    kit = next(iter(fused_step.STEPS.values()))
    assert kit.compiled
    again = train_group(cells, "cpu", compile=True)  # a second group of this shape: the same compiled functions
    assert list(fused_step.STEPS.values()) == [kit]
    for e, c, a in zip(eager, compiled, again, strict=True):
        for run in (c, a):
            for he, hc in zip(e.result.history, run.result.history, strict=True):
                assert math.isfinite(hc["train_loss"])
                assert abs(he["train_loss"] - hc["train_loss"]) <= 1e-4 * abs(he["train_loss"])


@CUDA
@pytest.mark.parametrize("layer", ["layernorm", "ngpt"])
def test_on_cuda_the_whole_step_replays_as_one_cuda_graph_and_trains_as_eager(layer):
    cells = [cell(layer, lr, seed, epochs=2, amp="none", compile="off") for lr, seed in ((1e-3, 0), (3e-3, 1))]
    eager = train_group(cells, "cuda", graphs=False)
    graphed = train_group(cells, "cuda", graphs=True)
    for e, g in zip(eager, graphed, strict=True):
        for he, hg in zip(e.result.history, g.result.history, strict=True):
            assert abs(he["train_loss"] - hg["train_loss"]) <= 1e-4 * abs(he["train_loss"])
    group = group_of(cells, "cuda", graphs=True)
    x, y = batch(group)
    for _ in range(fused_step.GraphedStep.WARMUP + 2):
        group._step_stacked(x, y, observed=False)
    assert group.graphed is not None and group.graphed.graph is not None  # captured, then replayed
