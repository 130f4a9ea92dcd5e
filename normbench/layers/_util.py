"""Helpers shared by several layer families. Imports no family, so any family may import it."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from normbench.layers.registry import LayerError


def no_decay(p: nn.Parameter) -> nn.Parameter:
    """Tag `p` for NormbenchViT.no_weight_decay. Set in `reset_parameters`: `to_empty` makes new Parameter objects,
    which drops the tag."""
    p._no_weight_decay = True  # type: ignore[attr-defined]
    return p


def qkv_slices(qkv: nn.Linear) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """timm fuses q, k, v into one (3C, C) weight; these are views of its three (C, C) blocks."""
    return qkv.weight.chunk(3, dim=0)  # type: ignore[return-value]


def check_count_argument(key: str, value: Any, unknown: dict[str, Any], *, family: str, meaning: str, noun: str,
                         hint: str) -> None:
    """LayerError (one line) unless `block_kwargs` is `{key: value}` alone with `value` an integer >= 1: the block
    families that take one count (hyper-connections' streams, frac-connections' fractions)."""
    if unknown:
        raise LayerError(f"block_kwargs: {', '.join(f'`{k}`' for k in sorted(unknown))} is not a {family} argument; "
                         f"the one it takes is `{key}` ({meaning})")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LayerError(f"block_kwargs.{key}: {value!r} is not a {noun}; use an integer of 1 or more{hint}")
