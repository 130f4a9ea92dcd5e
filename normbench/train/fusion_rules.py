"""Which cells may train as one fused model (train/fused.py), and why not when they may not.

Members may differ in `train.lr`, `train.seed`, `train.epochs`, `train.warmup_epochs`, `train.weight_decay`,
`train.adam_beta2` and a layer's init-only tunables (LayerScale's ε, DyT's α0: layers/registry.py `Tunable.init_only`,
which set a parameter's first value and build the same modules) only: everything else (model, data, the rest of the
recipe) is the group's. So a row's lrs and seeds fuse, and so do a tune search's trials. A recipe whose randomness
or hooks would be shared by the members, or escape `vmap`, is refused with the reason; the worker then trains those
cells one by one, as always.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from normbench.contracts.layer_tunables import declared
from normbench.contracts.recipe import CellConfig

# what members may differ in: a row's lrs and seeds, its convergence check's stretched schedule (2x epochs and
# warmup), and a tune trial's weight decay and beta2, which the fused step computes per member
# (train/stacked_adamw.py, train/stacked_muon.py; Muon's own momentum is the group's)
FUSABLE_KEYS = frozenset({"train.lr", "train.seed", "train.epochs", "train.warmup_epochs", "train.weight_decay",
                          "train.adam_beta2"})


class FusionRefused(Exception):
    """These cells cannot train fused; the message says why in a few words (they train unfused instead)."""


def refusal(cells: Sequence[CellConfig], dev: torch.device,
            resumes: Sequence[dict[str, Any] | None] | None = None) -> str | None:
    """Why `cells` cannot train as one fused model on `dev`, or None when they can."""
    if not cells:
        return "no cells"
    flats = [_shared_part(c) for c in cells]
    differ = sorted({key for f in flats for key in f if f.get(key) != flats[0].get(key)} - FUSABLE_KEYS)
    if differ:
        return (f"the cells differ in {', '.join(differ)}, not only in lr, seed, epochs, warmup, weight decay, beta2 "
                "and init-only layer tunables")
    model, tc = cells[0].model, cells[0].train
    if tc.mixup > 0 or tc.cutmix > 0:
        return "mixup/cutmix draw from the process's global generators, which the members would share"
    if model.drop_path_rate > 0:
        return "stochastic depth would draw one mask for the whole group, not one per member"
    if tc.attn_extra_loss > 0 or tc.train_feature_decay > 0:
        return "the auxiliary losses read activations through hooks, which escape vmap"
    if tc.grad_accum_steps > 1:
        return "gradient accumulation (train.grad_accum_steps > 1) is not fused yet"
    if model.grad_checkpointing:
        return "activation checkpointing (model.grad_checkpointing) is not fused"
    if tc.optimizer.lower() == "adamuon":
        return ("adamuon's second moment is not in the fused Muon step (train/stacked_muon.py steps muon's); "
                "adamuon cells train one by one")
    points = {_point(r) for r in (resumes or [None] * len(cells))}
    if len(points) > 1:
        return "the members' checkpoints stand at different points (or some have none)"
    return None


def _shared_part(cell: CellConfig) -> dict[str, Any]:
    """The cell's flat recipe without its layer's init-only tunables (`init_values`, `norm_kwargs.alpha_init`): what
    every member must share, FUSABLE_KEYS aside."""
    flat = cell.flat()
    for tunable in declared(cell.model.layer).values():
        if not tunable.init_only:
            continue
        field, _, item = tunable.target.partition(".")
        key = f"model.{field}"
        if item and isinstance(flat.get(key), dict):
            flat[key] = {k: v for k, v in flat[key].items() if k != item}
        elif not item:
            flat.pop(key, None)
    return flat


def same_point(resumes: Sequence[dict[str, Any] | None]) -> list[int]:
    """The indices of the largest set of members whose checkpoints stand at one point (or that start afresh): a kill
    between the members' checkpoint writes leaves some one epoch ahead, and those cannot be rewound to fuse."""
    by_point: dict[Any, list[int]] = {}
    for i, resume in enumerate(resumes):
        by_point.setdefault(_point(resume), []).append(i)
    return max(by_point.values(), key=len) if by_point else []


def _point(resume: dict[str, Any] | None) -> tuple[int, int, int] | None:
    """Where a checkpoint goes on: (step, epoch, batch); None for a fresh start."""
    if resume is None:
        return None
    epoch = resume["epoch"]
    return (int(resume["step"]), int(resume["progress"]["next_epoch"] if epoch is None else epoch["epoch"]),
            0 if epoch is None else int(epoch["micro"]))
