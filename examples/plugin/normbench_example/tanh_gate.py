"""Flamingo's tanh gate: `x + tanh(α) F(norm(x))`, one scalar α per residual branch, initialized to 0.

A gate fills the gate slots and takes `(dim, *, depth, init_values=None, device=None, dtype=None)`: `depth` is the
model's number of blocks (for a depth rule such as CaiT's), `init_values` the suite's `model.init_values`, which
overrides the default init. Each block builds two gates (attention and MLP), so α is per branch; a gate class with
`shared_across_branches = True` would share one α per block, as ReZero does. `partner` is the norm the gate brings
when a suite names no norm (`tanh_gate` alone is layernorm + tanh_gate; `scalenorm+tanh_gate` overrides it).
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import torch
from torch import nn

import normbench


@normbench.register_layer("tanh_gate", kind="gate", partner="layernorm",
                          formula="x + tanh(α) F(norm(x)); a scalar α = 0 per branch",
                          source="Alayrac et al. 2022, Flamingo, Sec. 2.2 (tanh gating, α initialized at 0); "
                                 "lucidrains/flamingo-pytorch GatedCrossAttentionBlock attn_gate, ff_gate")
class TanhGate(nn.Module):
    """Scales a branch's output by tanh(α), channels last `(..., C)`: the branch is closed at init and opens as α
    learns, its contribution bounded by ±1."""

    def __init__(self, dim: int, *, depth: int, init_values: float | None = None, device=None, dtype=None) -> None:
        super().__init__()
        self.init_values = 0.0 if init_values is None else init_values
        self.alpha = nn.Parameter(torch.empty(1, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.alpha, self.init_values)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., C) -> (..., C)
        return x * torch.tanh(self.alpha)
