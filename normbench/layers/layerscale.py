"""LayerScale (CaiT): a learned per-channel scale on each residual branch, and CaiT's depth rule for its init ε.

A gate: it fills the gate slots, `x + gate(F(norm(x)))`. Like every gate it takes
`(dim, *, depth, init_values=None, device=None, dtype=None)`; `depth` is the model's number of blocks.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import torch
from torch import nn

from normbench.layers._util import no_decay
from normbench.layers.registry import Tunable, register_layer


def cait_init_values(depth: int) -> float:
    """LayerScale's ε as CaiT sets it: 0.1 up to depth 18, 1e-5 at depth 24, 1e-6 for deeper networks."""
    if depth <= 18:
        return 0.1
    if depth <= 24:
        return 1e-5
    return 1e-6


CAIT_EPSILON = Tunable("init_values", "init_values", low=1e-6, high=0.1, log=True, default=cait_init_values,
                       init_only=True,
                       source="CaiT Sec. 2: ε = 0.1 up to depth 18, 1e-5 at depth 24, 1e-6 deeper")


@register_layer("layerscale", kind="gate", partner="layernorm", tunables=(CAIT_EPSILON,),
                formula="x + diag(λ) F(norm(x)); λ = ε: 0.1 (depth ≤ 18), 1e-5 (24), 1e-6 (deeper)",
                source="Touvron et al. 2021, Going deeper with Image Transformers (CaiT), Sec. 2; "
                       "facebookresearch/deit cait_models.py")
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
        self.gamma = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(no_decay(self.gamma), self.init_values)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., C) -> (..., C)
        return x * self.gamma

    def flop_count(self, num_tokens: int) -> int:
        """Multiplies in one forward pass over `num_tokens` positions: one per element."""
        return num_tokens * self.gamma.shape[0]
