"""Helpers shared by several layer families. Imports no family, so any family may import it."""

from __future__ import annotations

import torch
from torch import nn


def no_decay(p: nn.Parameter) -> nn.Parameter:
    """Tag `p` for NormbenchViT.no_weight_decay. Set in `reset_parameters`: `to_empty` makes new Parameter objects,
    which drops the tag."""
    p._no_weight_decay = True  # type: ignore[attr-defined]
    return p


def qkv_slices(qkv: nn.Linear) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """timm fuses q, k, v into one (3C, C) weight; these are views of its three (C, C) blocks."""
    return qkv.weight.chunk(3, dim=0)  # type: ignore[return-value]
