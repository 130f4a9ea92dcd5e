"""Depth-μP (Yang et al. 2023, Tensor Programs VI; Bordelon et al. 2023): pre-LN, each residual branch times a/√L.

A gate: `x + (a/√L) F(norm(x))`, L the number of blocks, a = 1 (the paper's branch multiplier constant; the model's
`init_values` overrides it), fixed, not learned. The paper's init keeps the hidden weights' variance independent of L
(`depth_mup_init`: each block's Linear weights ~ N(0, 1/fan_in), biases 0; only the multiplier carries the depth).

What it implies for the lr across depth (TP-VI; Bordelon et al.): with the 1/√L
multiplier the optimal lr transfers across depth for SGD at a constant lr, while Adam(W) needs the hidden weights'
lr scaled by 1/√L. normbench does not rescale the lr: a suite's lr grid picks the lr per (layer, depth), so under
Depth-μP with AdamW the selected lr should fall as 1/√L, and a flat one says the transfer did not hold here.
The width side of μP is not applied (the template's width is fixed across a sweep).
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import math

import torch
from torch import nn

from normbench.layers.registry import register_layer


@torch.no_grad()
def depth_mup_init(model: nn.Module) -> None:
    """Every block's qkv, proj, fc1, fc2 weight ~ N(0, 1/fan_in), bias 0: Depth-μP's depth-independent init."""
    for block in model.blocks:  # type: ignore[attr-defined]
        for linear in (block.attn.qkv, block.attn.proj, block.mlp.fc1, block.mlp.fc2):
            nn.init.normal_(linear.weight, std=linear.in_features ** -0.5)
            if linear.bias is not None:
                nn.init.zeros_(linear.bias)


@register_layer("depth_mup", kind="gate", partner="layernorm", init_rule=depth_mup_init,
                formula="x + (a/√L) F(norm(x)); a = 1, fixed; block weights N(0, 1/fan_in); AdamW lr ∝ 1/√L to "
                        "transfer (not applied)",
                source="Yang, Yu, Zhu & Hayou 2023, Tensor Programs VI: Feature Learning in Infinite-Depth Neural "
                       "Networks (Depth-μP); Bordelon et al. 2023, Depthwise Hyperparameter Transfer in "
                       "Residual Networks; depth rule only, no official code file")
class DepthMuPScale(nn.Module):
    """The fixed branch multiplier a/√L (a Python float: no parameter, no state)."""

    def __init__(self, dim: int, *, depth: int, init_values: float | None = None, device=None, dtype=None) -> None:
        super().__init__()
        self.multiplier = (1.0 if init_values is None else init_values) / math.sqrt(depth)

    def reset_parameters(self) -> None:
        """Nothing to fill: the multiplier is a constant."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.multiplier
