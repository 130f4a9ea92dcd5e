"""One cell across the GPUs of a node: DistributedDataParallel under torchrun.

    torchrun --nproc_per_node 8 -m normbench worker suites/big.yaml --storage postgresql://...

Rank 0 is an ordinary worker (it claims cells from the ledger, logs to MLflow, finishes trials) and hands each
cell's recipe to the other ranks, which only train. Every rank draws the same global batch (same seed) and keeps
its 1/world share, and DDP averages the gradients, so a cell trained on N GPUs follows the same recipe, global
batch size included, as on one. Without torchrun (WORLD_SIZE unset or 1) nothing here is used.
"""

from __future__ import annotations

import inspect
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as torch_dist
from torch import nn

from normbench.train.device import resolve_device

CONTROL_TIMEOUT = timedelta(days=7)


@dataclass(frozen=True)
class Dist:
    """This process's place in the group."""

    rank: int
    world: int
    local_rank: int
    control: Any = None  # the gloo group that carries recipes and decisions (see from_env)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def device(self, device: str | torch.device) -> torch.device:
        """The GPU of this rank's local_rank on CUDA; the device unchanged otherwise."""
        device = resolve_device(device)
        return resolve_device(f"cuda:{self.local_rank}") if device.type == "cuda" else device


def from_env() -> Dist | None:
    """Join the process group torchrun describes in the environment; None when not launched by torchrun."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return None
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if not torch_dist.is_initialized():
        if torch.cuda.is_available():
            torch.cuda.set_device(local_rank)  # else every rank's NCCL traffic would start on GPU 0
        # gloo for CPU tensors and NCCL for CUDA ones, so `--device cpu` works on a GPU host too
        torch_dist.init_process_group("cpu:gloo,cuda:nccl" if torch.cuda.is_available() else "gloo")
    # Recipes travel on their own gloo group with a long timeout: the other ranks wait in `follow` for as long as
    # rank 0 waits for the ledger (other nodes' cells, slow databases), which would trip the training timeout.
    control = torch_dist.new_group(backend="gloo", timeout=CONTROL_TIMEOUT)
    return Dist(rank=torch_dist.get_rank(), world=torch_dist.get_world_size(), local_rank=local_rank,
                control=control)


def wrap_ddp(model: nn.Module, device: torch.device) -> nn.parallel.DistributedDataParallel:
    """DDP without per-forward buffer syncs: training changes no buffer (they are constants or eval statistics)."""
    # torch 2.15 renamed broadcast_buffers (now deprecated, with a warning per cell) to forward_sync_buffers
    real_ddp = torch.nn.parallel.distributed.DistributedDataParallel  # the class itself, even where it is wrapped
    renamed = "forward_sync_buffers" in inspect.signature(real_ddp).parameters
    no_buffer_sync = {"forward_sync_buffers" if renamed else "broadcast_buffers": False}
    device_ids = [device.index] if device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=device_ids, **no_buffer_sync)


def all_sum(tensor: torch.Tensor, dist: Dist | None) -> torch.Tensor:
    """Sum `tensor` over the group in place (a no-op alone)."""
    if dist is not None:
        torch_dist.all_reduce(tensor, op=torch_dist.ReduceOp.SUM)
    return tensor


def broadcast(obj: Any, dist: Dist | None) -> Any:
    """Rank 0's `obj` on every rank (a no-op alone)."""
    if dist is None:
        return obj
    box = [obj]
    torch_dist.broadcast_object_list(box, src=0, group=dist.control)
    return box[0]


def shutdown(dist: Dist | None) -> None:
    if dist is not None and torch_dist.is_initialized():
        torch_dist.destroy_process_group()
