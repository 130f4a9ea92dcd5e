"""Shared cases for the layer tests, generated from the registry: a newly registered layer is tested with no new
test code. `COMBOS` adds a few `+` combinations on top of the single entries; a modifier that cannot stand alone
(`qk_norm`) is tested only in combinations. A layer whose init needs data (`admin`) is built with `init_images`."""

from __future__ import annotations

import timm
import torch

import normbench
from normbench.layers import LayerError, resolve_layer

COMBOS = ["learnable_scaler+layerscale", "rmsnorm+layerscale", "post_ln+layerscale", "dyt+rezero",
          "layernorm+qk_norm", "layerscale+qk_norm", "dyt+qk_norm", "rezero+qk_norm", "res_post_norm+qk_norm",
          "rmsnorm+normformer", "derf+mix_ln", "admin+qk_norm", "hc+layerscale", "mhc+qk_norm", "hc_dynamic+rmsnorm",
          "layerscale+gated_attn", "value_residual+gated_attn", "rmsnorm+hybridnorm", "attn_res+layerscale"]


def _standalone(name: str) -> bool:
    try:
        resolve_layer(name)
    except LayerError:
        return False
    return True


SINGLE = [n for n in normbench.list_layers() if _standalone(n)]  # every entry that builds alone
ALL_LAYERS = SINGLE + COMBOS
NORMS = normbench.list_layers(kind="norm")
GATES = normbench.list_layers(kind="gate")
PLACEMENTS = normbench.list_layers(kind="placement")
MODIFIERS = normbench.list_layers(kind="modifier")
FAMILIES = normbench.list_layers(kind="family")

NUM_CLASSES = 5
TINY = dict(depth=3, embed_dim=32, num_heads=2, patch_size=4, img_size=16, num_classes=NUM_CLASSES)


def data_kwargs(layer: str, img_size: int = 16, in_chans: int = 3) -> dict[str, torch.Tensor]:
    """`init_images` for a layer whose init profiles training images (Admin), else nothing."""
    if not resolve_layer(layer).data_init_rules:
        return {}
    return {"init_images": images(batch=8, size=img_size, seed=7, chans=in_chans)}


def tiny_vit(layer: str, seed: int = 0, **overrides) -> torch.nn.Module:
    """The tiny template every layer test builds, through timm's registry as a user would."""
    kwargs = {**TINY, **overrides}
    kwargs = {**data_kwargs(layer, kwargs["img_size"], kwargs.get("in_chans", 3)), **kwargs}
    torch.manual_seed(seed)
    return timm.create_model("normbench_vit", layer=layer, **kwargs)


def images(batch: int = 2, size: int = 16, seed: int = 1, chans: int = 3) -> torch.Tensor:
    return torch.randn(batch, chans, size, size, generator=torch.Generator().manual_seed(seed))
