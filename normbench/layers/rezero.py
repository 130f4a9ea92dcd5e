"""ReZero and SkipInit: a scalar α, zero at init, on each residual branch, so every block starts as the identity.

Three registry entries share the operation `x + α F(x)` (no norm): `rezero` (the official code: one α per block,
shared by its two branches), `rezero_per_branch` (one α per branch) and `skipinit` (the same multiplier, from the
ResNet paper). They need no init rule: the zero is the gate's own init, and the sharing is built with the block
(`shared_across_branches`, read by PreNormBlock).
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import torch
from torch import nn

from normbench.layers._util import no_decay
from normbench.layers.registry import register_layer


@register_layer("rezero_per_branch", kind="gate", partner="none",
                formula="x + α₁ Attn(x); x + α₂ MLP(x); a scalar α = 0 per branch, no norm",
                source="variant: ReZero with one α per branch (normbench's earlier form; not the official code)")
class ReZero(nn.Module):
    """A scalar α, zero at init, so the block starts as the identity. `init_values` overrides 0.

    As a registry entry this is `rezero_per_branch`: each branch its own α. The official `rezero` shares one α per
    block (`ReZeroShared`).
    """

    shared_across_branches = False

    def __init__(self, dim: int, *, depth: int, init_values: float | None = None, device=None, dtype=None) -> None:
        super().__init__()
        self.init_values = init_values or 0.0
        self.alpha = nn.Parameter(torch.empty(1, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(no_decay(self.alpha), self.init_values)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.alpha


@register_layer("rezero", kind="gate", partner="none",
                formula="x + α Attn(x); x + α MLP(x); one scalar α = 0 per block, shared by both branches, no norm",
                source="Bachlechner et al. 2020, ReZero is All You Need; majumderb/rezero rezero/transformer/rztx.py "
                       "(RZTXEncoderLayer.resweight)")
class ReZeroShared(ReZero):
    """ReZero as its official code does it: one α per block (rztx.py `self.resweight` multiplies both branches).

    The block builds a gate per branch and ties the MLP gate's α to the attention gate's, so the model holds one
    parameter per block and the state_dict keeps both names, as tied weights do.
    """

    shared_across_branches = True


@register_layer("skipinit", kind="gate", partner="none", formula="x + α F(x); scalar α = 0, no norm",
                source="De & Smith 2020, Batch Normalization Biases Residual Blocks Towards the Identity (SkipInit), "
                       "one α per residual branch")
class SkipInit(ReZero):
    """SkipInit's multiplier: the same operation as ReZero, from a different paper (ResNets, not Transformers)."""
