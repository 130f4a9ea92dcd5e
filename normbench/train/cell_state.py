"""How far a cell has trained: what `train_cell` carries from epoch to epoch, and what an epoch cut short carries
from batch to batch. Both are what a checkpoint (train/checkpoint.py) keeps besides the model and optimizer."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from normbench.contracts.results import EpochRecord


@dataclass
class CellProgress:
    """The epochs trained so far, over every attempt of the cell (an attempt resumed from a checkpoint goes on)."""

    history: list[EpochRecord] = field(default_factory=list)
    train_seconds: float = 0.0   # training seconds of the finished epochs (images_per_sec's denominator)
    images_seen: int = 0         # training images of the finished epochs, all ranks
    seconds_before: float = 0.0  # wall seconds the earlier attempts spent, up to the checkpoint this one resumed
    next_epoch: int = 0          # the epoch to train next (the one in `EpochSoFar` when an epoch was cut short)
    world: int = 1               # processes the cell trains over (torchrun); a checkpoint says which it was under


@dataclass
class EpochSoFar:
    """An epoch stopped between two optimizer steps (SIGTERM): its counters and where its data pass stands."""

    epoch: int
    micro: int                   # micro-batches of the pass trained (the next one is batch `micro` of the pass)
    optimizer_steps: int
    images: int                  # this rank's images so far
    loss_sum: torch.Tensor       # summed micro-batch losses, on the device
    grad_norm_sum: torch.Tensor  # summed pre-clipping gradient norms, on the device
    lr: float
    seconds: float               # training seconds of the epoch so far
    generator: torch.Tensor | None  # the data pass's generator state before batch `micro` (None: not needed)
