"""Gate-slot layers: they scale a residual branch's output, `x + gate(F(norm(x)))`.

Every gate takes `(dim, *, depth, init_values=None, device=None, dtype=None)`; `depth` is the model's number of
blocks, for gates whose init depends on it. Gate parameters carry `_no_weight_decay = True`.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import torch
from torch import nn

from normbench.layers.init_rules import fixup_init
from normbench.layers.registry import register_layer


def cait_init_values(depth: int) -> float:
    """LayerScale's ε as CaiT sets it: 0.1 up to depth 18, 1e-5 at depth 24, 1e-6 for deeper networks."""
    if depth <= 18:
        return 0.1
    if depth <= 24:
        return 1e-5
    return 1e-6


def _no_decay(p: nn.Parameter) -> nn.Parameter:
    p._no_weight_decay = True  # type: ignore[attr-defined]  # read by NormbenchViT.no_weight_decay
    return p


@register_layer("layerscale", kind="gate", partner="layernorm",
                formula="x + diag(λ) F(norm(x)); λ = ε: 0.1 (depth ≤ 18), 1e-5 (24), 1e-6 (deeper)",
                source="Touvron et al. 2021, Going deeper with Image Transformers (CaiT)")
class LayerScale(nn.Module):
    """Per-channel scale γ of a residual branch, channels last `(..., C)`; timm's key name `gamma`.

    Args:
        dim: channels C.
        depth: number of blocks; picks ε by CaiT's schedule unless `init_values` is given.
        init_values: overrides ε.
    """

    def __init__(self, dim: int, *, depth: int, init_values: float | None = None, device=None, dtype=None) -> None:
        super().__init__()
        self.init_values = cait_init_values(depth) if init_values is None else init_values
        self.gamma = _no_decay(nn.Parameter(torch.full((dim,), self.init_values, device=device, dtype=dtype)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., C) -> (..., C)
        return x * self.gamma

    def flop_count(self, num_tokens: int) -> int:
        """Multiplies in one forward pass over `num_tokens` positions: one per element."""
        return num_tokens * self.gamma.shape[0]


@register_layer("rezero", kind="gate", partner="none", formula="x + α F(x); scalar α = 0, no norm",
                source="Bachlechner et al. 2020, ReZero is All You Need")
class ReZero(nn.Module):
    """A scalar α per branch, zero at init, so every block starts as the identity. `init_values` overrides 0."""

    def __init__(self, dim: int, *, depth: int, init_values: float | None = None, device=None, dtype=None) -> None:
        super().__init__()
        self.alpha = _no_decay(nn.Parameter(torch.full((1,), init_values or 0.0, device=device, dtype=dtype)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.alpha


@register_layer("skipinit", kind="gate", partner="none", formula="x + α F(x); scalar α = 0, no norm",
                source="De & Smith 2020, Batch Normalization Biases Residual Blocks Towards the Identity (SkipInit)")
class SkipInit(ReZero):
    """SkipInit's multiplier: the same operation as ReZero, from a different paper (ResNets, not Transformers)."""


@register_layer("fixup", kind="gate", partner="fixup_bias", init_rule=fixup_init,
                formula="x + s F(x + b₁) + b₂; s = 1, b = 0; last branch layer 0, others × L^(-1/(2m-2))",
                source="Zhang et al. 2019, Fixup Initialization: Residual Learning Without Normalization")
class FixupGate(nn.Module):
    """Fixup's scalar multiplier (init 1) and scalar bias (init 0) at a branch's output.

    Fixup also puts scalar biases inside the branch; a ViT's Linear layers already carry per-channel biases, which
    subsume them. The branch-input bias is `fixup_bias` in the norm slot; the rescaling is `fixup_init`.
    """

    def __init__(self, dim: int, *, depth: int, init_values: float | None = None, device=None, dtype=None) -> None:
        super().__init__()
        scale = 1.0 if init_values is None else init_values
        self.scale = _no_decay(nn.Parameter(torch.full((1,), scale, device=device, dtype=dtype)))
        self.bias = _no_decay(nn.Parameter(torch.zeros(1, device=device, dtype=dtype)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(self.bias, x, self.scale)
