"""nGPT, the normalized Transformer (Loshchilov et al., ICLR 2025, arXiv 2410.01131), adapted to the ViT template: a
block family whose hidden states and weight vectors all live on the unit hypersphere, with no norm layers.

Per block, h a unit vector per token (the paper's Eq. 10-11, Sec. 2.6):

    h ← Norm(h + α_A ⊙ (Norm(Attn(h)) - h))
    h ← Norm(h + α_M ⊙ (Norm(MLP(h)) - h))                Norm(x) = x / ‖x‖ over channels, no parameters

- eigen learning rates α_A, α_M (C,), stored as α·(α_init/α_scale) with α_init = 0.05, α_scale = 1/√C (the paper's
  trick: the parameter starts at α_scale so that the optimizer's lr applies to it as to the matrices);
- q and k normalised per head and scaled by s_qk (head_dim,) (init 1, scale 1/√C), softmax scale √d_h instead of
  1/√d_h (built into timm's Attention through its own `qk_norm=True, norm_layer=...`: the norm returns
  √d_h·s_qk ⊙ q/‖q‖, so timm's 1/√d_h gives √d_h·s_qk²·q̂·k̂);
- the MLP's hidden pre-activation scaled by s_u·√C (init 1, scale 1; the paper's s_uv for SwiGLU, here on timm's GELU
  Mlp through its `act_layer`); no biases in attention and MLP (`qkv_bias`, `proj_bias`, `bias=False`);
- the logits scaled by s_z (num_classes,) (init 1, scale 1/√C) on a head whose rows are unit vectors;
- after every optimizer step every weight matrix is renormalised along its embedding dimension (`ngpt_normalize`,
  the family's after-step hook; the paper's `normalize_matrices`): rows of qkv, fc1 and the head (their input is
  C), columns of the attention and MLP output projections (their output is C);
- its recipe comes with it, the way `fixup_official` brings its own, as parameter tags the optimizer groups read:
  no weight decay and no lr warmup (the paper trains nGPT without either); the suite's lr, schedule and clipping
  apply otherwise.

The ViT adaptation (the paper is a decoder-only language model):
- patch embedding: a linear map of pixels, not a lookup table; its weight's columns (one C-vector per pixel feature)
  are renormalised like an embedding's, its bias, the position embedding and the class token (each a C-vector
  renormalised too) are added as in ViT, and the sum is normalised before the first block (`UnitSphere`, the
  family's expand step), so every hidden state starts on the sphere;
- class token: pooled from the last block's output as in ViT, already on the sphere: no final norm;
- head: the classifier plays the output embedding (rows normalised, logits × s_z), with no bias;
- α_init stays the paper's 0.05 at every depth (`block_kwargs: {alpha_init: ...}` overrides it; the paper suggests
  the order of 1/depth); s_qk is shared by the heads (timm builds one q-norm for all), the paper's code has one per
  head; the paper's Norm of h before the update is skipped, h already being a unit vector.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import math
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from timm.layers import DropPath, Mlp
from timm.models.vision_transformer import Attention
from torch import nn

from normbench.layers._util import no_decay
from normbench.layers.registry import Family, LayerError, register_layer

ALPHA_INIT = 0.05  # α_A,init = α_M,init (Sec. 2.6; NVIDIA/ngpt model.py attn_alpha_init_value)


def unit(x: torch.Tensor) -> torch.Tensor:
    """x / ‖x‖ over the last dimension (the paper's Norm, `justnorm`)."""
    return F.normalize(x, dim=-1)


class ScaledVector(nn.Module):
    """A learned per-channel scale s (n,), stored as the paper stores it: the parameter starts at `scale` and the
    effective value is param · (init / scale), so that it trains at the lr's pace like a unit-norm matrix entry."""

    def __init__(self, size: int, init: float, scale: float, device=None, dtype=None) -> None:
        super().__init__()
        self.init, self.scale = init, scale
        self.weight = nn.Parameter(torch.empty(size, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(no_decay(self.weight), self.scale)

    def value(self) -> torch.Tensor:
        return self.weight * (self.init / self.scale)


class EigenLR(ScaledVector):
    """The eigen learning rate α (C,) of one sublayer: the step `α ⊙ (Norm(F(h)) - h)` towards the sublayer's
    suggestion. Sits in the gate slot (`ls1`, `ls2`), so telemetry reads the step's size as the branch's."""

    def __init__(self, dim: int, alpha_init: float = ALPHA_INIT, device=None, dtype=None) -> None:
        super().__init__(dim, alpha_init, 1 / math.sqrt(dim), device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.value()


class NGPTQKNorm(ScaledVector):
    """q or k of one head normalised and scaled: √d_h · s_qk ⊙ x/‖x‖ (timm's Attention then divides by √d_h)."""

    def __init__(self, head_dim: int, *, model_dim: int, device=None, dtype=None) -> None:
        super().__init__(head_dim, 1.0, 1 / math.sqrt(model_dim), device=device, dtype=dtype)
        self.head_dim = head_dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return unit(x) * (self.value() * math.sqrt(self.head_dim)).to(x.dtype)


class NGPTScaledGELU(ScaledVector):
    """GELU(s_u·√C ⊙ u) on the MLP's hidden pre-activation u (s_u init 1, scale 1), as timm Mlp's `act_layer`."""

    def __init__(self, hidden: int, model_dim: int) -> None:
        super().__init__(hidden, 1.0, 1.0)
        self.sqrt_dim = math.sqrt(model_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x * (self.value() * self.sqrt_dim).to(x.dtype))


class UnitSphere(nn.Module):
    """Before the first block: every token normalised onto the unit sphere."""

    def __init__(self, dim: int, *, depth: int, **_: Any) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return unit(x)


class NGPTHead(nn.Linear):
    """The classifier as nGPT's output embedding: unit rows (renormalised after each step), logits × s_z, no bias."""

    def __init__(self, dim: int, num_classes: int, device=None, dtype=None) -> None:
        super().__init__(dim, num_classes, bias=False, device=device, dtype=dtype)
        self.logit_scale = ScaledVector(num_classes, 1.0, 1 / math.sqrt(dim), device=device, dtype=dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight) * self.logit_scale.value().to(x.dtype)


def check_ngpt_kwargs(alpha_init: Any = ALPHA_INIT, **unknown: Any) -> None:
    if unknown:
        raise LayerError(f"block_kwargs: {', '.join(f'`{k}`' for k in sorted(unknown))} is not an nGPT argument; "
                         "the one it takes is `alpha_init` (the eigen learning rates' start, default 0.05)")
    if isinstance(alpha_init, bool) or not isinstance(alpha_init, (int, float)) or not 0 < alpha_init <= 1:
        raise LayerError(f"block_kwargs.alpha_init: {alpha_init!r}; use a number in (0, 1] (the paper's 0.05)")


def _normalize_(weight: torch.Tensor, dim: int) -> None:
    weight.copy_(F.normalize(weight, dim=dim))


@torch.no_grad()
def ngpt_normalize(model: nn.Module) -> None:
    """Every weight matrix back on the sphere along its embedding dimension (the paper's `normalize_matrices`)."""
    for block in model.blocks:  # type: ignore[attr-defined]
        _normalize_(block.attn.qkv.weight, 1)   # (3C, C): each row reads the C-dim hidden state
        _normalize_(block.attn.proj.weight, 0)  # (C, C): each column writes a C-dim vector
        _normalize_(block.mlp.fc1.weight, 1)    # (hidden, C)
        _normalize_(block.mlp.fc2.weight, 0)    # (C, hidden)
    embed = model.patch_embed.proj.weight  # type: ignore[attr-defined]  # (C, in_chans, p, p)
    embed.copy_(F.normalize(embed.flatten(1), dim=0).view_as(embed))
    _normalize_(model.pos_embed, -1)  # type: ignore[attr-defined]
    if model.cls_token is not None:  # type: ignore[attr-defined]
        _normalize_(model.cls_token, -1)  # type: ignore[attr-defined]
    head = model.head  # type: ignore[attr-defined]
    if isinstance(head, nn.Linear):
        _normalize_(head.weight, 1)  # (classes, C)


@torch.no_grad()
def ngpt_init(model: nn.Module) -> None:
    """After timm's init: the scales at their start (timm's init passes over the head, a Linear), every matrix on
    the sphere, and the recipe's tags: no weight decay (`_force_weight_decay = False`) and no warmup (`_no_warmup`),
    read by normbench/train/optim_groups.py."""
    for module in model.modules():
        if isinstance(module, ScaledVector):
            module.reset_parameters()
    ngpt_normalize(model)
    for p in model.parameters():
        p._force_weight_decay = False  # type: ignore[attr-defined]
        p._no_warmup = True  # type: ignore[attr-defined]


@register_layer("ngpt", kind="family", partner="none", init_rule=ngpt_init,
                family=Family(expand=UnitSphere, head=NGPTHead, after_step=ngpt_normalize,
                              check_kwargs=check_ngpt_kwargs),
                refuses=("norm", "gate", "modifier"),
                refuses_why="it has no norm layers, its eigen learning rates take the gates' place and its q and k "
                            "are normalised already",
                formula="h ← Norm(h + α ⊙ (Norm(F(h)) - h)) per sublayer, all on the unit sphere; α init 0.05 "
                        "(scale 1/√C); q, k unit × s_qk, softmax scale √d_h; MLP input × s_u√C; logits × s_z; "
                        "weights renormalised after each step; no weight decay, no warmup",
                source="Loshchilov et al. 2025, nGPT: Normalized Transformer with Representation Learning on the "
                       "Hypersphere (ICLR), Sec. 2.6 and NVIDIA/ngpt model.py; ViT adaptation: patch embedding "
                       "columns unit, tokens normalised before block 0, class-token head with unit rows and s_z, "
                       "GELU MLP (normbench/layers/ngpt.py)")
class NGPTBlock(nn.Module):
    """nGPT's block from timm's Attention (no biases, normalised q and k) and Mlp (no biases, scaled GELU); the gate
    slots hold the eigen learning rates. Unit vectors in, unit vectors out (`output_is_normalized`: no final norm).

    Takes the template's block arguments; the norm and gate factories are not used (nGPT has no norm layers, and its
    eigen learning rates are its gates), nor qkv_bias (no biases).
    """

    output_is_normalized = True

    def __init__(self, dim: int, num_heads: int, *, depth: int, norm_layer: Any = None, gate_layer: Any = None,
                 mlp_ratio: float = 4.0, qkv_bias: bool = True, proj_drop: float = 0.0, attn_drop: float = 0.0,
                 drop_path: float = 0.0, act_layer: type[nn.Module] = nn.GELU, block_index: int = 0,
                 alpha_init: float = ALPHA_INIT) -> None:
        super().__init__()
        check_ngpt_kwargs(alpha_init)
        self.block_index = block_index
        self.attn = Attention(dim, num_heads=num_heads, qkv_bias=False, proj_bias=False, qk_norm=True,
                              norm_layer=partial(NGPTQKNorm, model_dim=dim), attn_drop=attn_drop, proj_drop=proj_drop)
        self.ls1 = EigenLR(dim, alpha_init)
        self.drop_path1 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        hidden = int(dim * mlp_ratio)
        self.mlp = Mlp(in_features=dim, hidden_features=hidden, act_layer=partial(NGPTScaledGELU, hidden, dim),
                       bias=False, drop=proj_drop)
        self.ls2 = EigenLR(dim, alpha_init)
        self.drop_path2 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (B, N, C) unit rows -> (B, N, C) unit rows
        h = unit(h + self.drop_path1(self.ls1(unit(self.attn(h)) - h)))
        h = unit(h + self.drop_path2(self.ls2(unit(self.mlp(h)) - h)))
        return h
