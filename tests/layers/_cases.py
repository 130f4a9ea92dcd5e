"""Shared cases for the layer tests, generated from the registry: a newly registered layer is tested with no new
test code. `COMBOS` adds a few `+` combinations on top of the single entries."""

from __future__ import annotations

import timm
import torch

import normbench

COMBOS = ["learnable_scaler+layerscale", "rmsnorm+layerscale", "post_ln+layerscale", "dyt+rezero"]
ALL_LAYERS = normbench.list_layers() + COMBOS
NORMS = normbench.list_layers(kind="norm")
GATES = normbench.list_layers(kind="gate")
PLACEMENTS = normbench.list_layers(kind="placement")

NUM_CLASSES = 5
TINY = dict(depth=3, embed_dim=32, num_heads=2, patch_size=4, img_size=16, num_classes=NUM_CLASSES)


def tiny_vit(layer: str, seed: int = 0, **overrides) -> torch.nn.Module:
    """The tiny template every layer test builds, through timm's registry as a user would."""
    torch.manual_seed(seed)
    return timm.create_model("normbench_vit", layer=layer, **{**TINY, **overrides})


def images(batch: int = 2, size: int = 16, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))
