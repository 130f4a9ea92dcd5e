"""Norm-slot layers. Every class follows timm's norm-layer contract `(dim, eps=..., device=None, dtype=None)`,
so any of them can also be passed as `norm_layer=` to timm's own models."""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import torch
import torch.nn.functional as F
from torch import nn

from normbench.layers.init_rules import tfixup_init
from normbench.layers.registry import register_layer


@register_layer("layernorm", kind="norm", formula="γ ⊙ (x - μ) / √(σ² + ε) + β, over channels",
                source="Ba et al. 2016, Layer Normalization; torch's fused kernel")
class LayerNorm(nn.LayerNorm):
    """torch's fused LayerNorm with timm's ViT default eps=1e-6."""

    def __init__(self, dim: int, eps: float = 1e-6, device=None, dtype=None) -> None:
        super().__init__(dim, eps=eps, device=device, dtype=dtype)


@register_layer("rmsnorm", kind="norm", formula="γ ⊙ x / √(mean(x²) + ε), over channels",
                source="Zhang & Sennrich 2019, Root Mean Square Layer Normalization; torch's fused kernel")
class RMSNorm(nn.RMSNorm):
    """torch's fused RMSNorm with eps=1e-6 (as timm's RMSNorm)."""

    def __init__(self, dim: int, eps: float = 1e-6, device=None, dtype=None) -> None:
        super().__init__(dim, eps=eps, device=device, dtype=dtype)


@register_layer("learnable_scaler", kind="norm", formula="a ⊙ x + b, per channel; a ~ N(0, 1), b = 0",
                source="LearnableScaler README (seed 004): `a = nn.init.normal_(torch.ones(C))`")
class LearnableScaler(nn.Module):
    """Per-channel affine map in place of a norm, channels last `(..., C)`.

    The source writes `nn.init.normal_(torch.ones(C))`, which overwrites the ones with draws from N(0, 1); that is
    what its published result (ViT depth 36: 76.32% -> 79.77%) trained with, so it is the default here.
    `init="ones"` (registered as `learnable_scaler_ones`) is the variant the code's author probably meant.

    Args:
        dim: channels C.
        eps: accepted for the norm-layer contract; unused (there is no division).
        init: "normal" (a ~ N(0, 1), the source's behaviour) or "ones" (a = 1).
    """

    def __init__(self, dim: int, eps: float = 1e-6, device=None, dtype=None, init: str = "normal") -> None:
        super().__init__()
        if init not in ("normal", "ones"):
            raise ValueError(f"LearnableScaler init must be 'normal' or 'ones', not {init!r}")
        self.init = init
        self.a = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))
        self.b = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))
        # mean 0 and variance 1 for batch_norm's inference kernel (see forward); not saved in checkpoints
        self.register_buffer("_mean0", torch.zeros(dim, device=device, dtype=dtype), persistent=False)
        self.register_buffer("_var1", torch.ones(dim, device=device, dtype=dtype), persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.a) if self.init == "normal" else nn.init.ones_(self.a)
        nn.init.zeros_(self.b)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., C) -> (..., C)
        return self._affine(x.reshape(-1, x.shape[-1])).reshape(x.shape)

    def _affine(self, x: torch.Tensor) -> torch.Tensor:  # (N, C, ...) -> (N, C, ...), channels at dim 1
        # a ⊙ x + b, exactly: inference-mode batch_norm with mean 0, variance 1 and eps 0 computes x · 1 · a + b.
        # Its forward and its backward (dx, da and db in one pass) are single fused kernels, where addcmul's
        # autograd runs four; on CPU that made the op ~1.5x faster
        # (0.70x LayerNorm's time against 1.09x, scripts/bench_scaler_op.py).
        return F.batch_norm(x, self._mean0, self._var1, self.a, self.b, training=False, momentum=0.0, eps=0.0)


@register_layer("learnable_scaler_ones", kind="norm", formula="a ⊙ x + b, per channel; a = 1, b = 0",
                source="LearnableScaler README (seed 004), with the ones the code builds before overwriting them")
class LearnableScalerOnes(LearnableScaler):
    def __init__(self, dim: int, eps: float = 1e-6, device=None, dtype=None) -> None:
        super().__init__(dim, eps, device, dtype, init="ones")


class LearnableScaler2d(LearnableScaler):
    """Channels-first LearnableScaler for CNNs, `(B, C, H, W)`, in place of BatchNorm2d (seed 004)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, H, W) -> (B, C, H, W)
        return self._affine(x)


@register_layer("dyt", kind="norm", formula="γ ⊙ tanh(α x) + β; scalar α = 0.5, γ = 1, β = 0",
                source="Zhu et al. 2025, Transformers without Normalization (DyT)")
class DyT(nn.Module):
    """Dynamic Tanh. `alpha_init=0.5` is the paper's default for non-LLM models such as ViT."""

    def __init__(self, dim: int, eps: float = 1e-6, device=None, dtype=None, alpha_init: float = 0.5) -> None:
        super().__init__()
        self.alpha_init = alpha_init
        self.alpha = nn.Parameter(torch.empty(1, device=device, dtype=dtype))
        self.weight = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.alpha, self.alpha_init)
        nn.init.ones_(self.weight)
        nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., C) -> (..., C)
        return torch.addcmul(self.bias, torch.tanh(self.alpha * x), self.weight)


@register_layer("none", kind="norm", formula="x (no normalization)", source="-")
class NoNorm(nn.Identity):
    """Identity in the norm slot, with the norm-layer signature."""

    def __init__(self, dim: int, eps: float = 1e-6, device=None, dtype=None) -> None:
        super().__init__()


@register_layer("fixup_bias", kind="norm", formula="x + b; scalar b = 0 (Fixup's bias at a branch's input)",
                source="Zhang et al. 2019, Fixup Initialization")
class FixupBias(nn.Module):
    """Fixup's scalar bias before a residual branch; sits in the norm slot since Fixup has no norm."""

    def __init__(self, dim: int, eps: float = 1e-6, device=None, dtype=None) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(1, device=device, dtype=dtype))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.bias


@register_layer("tfixup", kind="norm", init_rule=tfixup_init,
                formula="x (no norm); Xavier init, value/out/MLP weights × 0.67 N^(-1/4), embedding ~ N(0, d^-½)",
                source="Huang et al. 2020, Improving Transformer Optimization Through Better Initialization (T-Fixup)")
class TFixupNoNorm(NoNorm):
    """T-Fixup removes the norm; its work is all in `tfixup_init`."""
