"""ScaleNorm (Nguyen & Salazar 2019): a norm with one learned scalar, `g · x / ‖x‖`, g initialized to √C.

A norm fills the norm slots (`x + gate(F(norm(x)))`) and takes timm's norm-layer signature
`(dim, eps=..., device=None, dtype=None)`, so it also works as `norm_layer=` in timm's own models.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import math

import torch
from torch import nn

import normbench


@normbench.register_layer("scalenorm", kind="norm", formula="g x / max(‖x‖, ε); one scalar g = √C, ε = 1e-5",
                          source="Nguyen & Salazar 2019, Transformers without Tears; tnq177/transformers_without_tears "
                                 "layers.py ScaleNorm (scale = embed_dim ** 0.5, eps 1e-5)")
class ScaleNorm(nn.Module):
    """Channels last `(..., C)`. `eps` clamps the norm from below, as the source does (it is not added)."""

    def __init__(self, dim: int, eps: float = 1e-5, device=None, dtype=None) -> None:
        super().__init__()
        self.dim, self.eps = dim, eps
        self.g = nn.Parameter(torch.empty(1, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Fill the values here, not in __init__: a model built on the meta device is materialized through it."""
        nn.init.constant_(self.g, math.sqrt(self.dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., C) -> (..., C)
        return x * (self.g / torch.linalg.vector_norm(x, dim=-1, keepdim=True).clamp(min=self.eps))
