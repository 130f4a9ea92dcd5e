"""Peri-LN (Kim et al. 2025): a norm on each sublayer's input and on its output before the residual add.

`x = x + norm_out(F(norm_in(x)))`. CogView's Sandwich-LN (Ding et al. 2021, Sec. 2.4) is the same placement; CogView
adds its fp16 tricks beside it (PB-Relax: attention logits computed as (q/α)·k then rescaled, the final LN's input
divided by its max), which change rounding, not the function, and are not part of this entry. The model keeps its
final norm. A gate is refused, as for res_post_norm: the output norm's γ already scales each branch per channel.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import torch

from normbench.layers.blocks import ModuleFactory, PreNormBlock
from normbench.layers.registry import register_layer
from normbench.layers.res_post_norm import GATE_AFTER_NORM


@register_layer("peri_ln", kind="placement", partner="layernorm", refuses=("gate",), refuses_why=GATE_AFTER_NORM,
                formula="x + norm_out(F(norm_in(x))) for attention and MLP; final norm kept",
                source="Kim et al. 2025, Peri-LN: Revisiting Normalization Layer in the Transformer Architecture "
                       "(ICML), the block placement (no official code; the same block as allenai/OLMo-core "
                       "src/olmo_core/nn/transformer/block.py PeriNormTransformerBlock); = Ding et al. 2021, CogView, "
                       "Sec. 2.4 Sandwich-LN (its PB-Relax fp16 tricks not included)")
class PeriLNBlock(PreNormBlock):
    """Pre-norm plus an output norm per branch (`post_attn_norm`, `post_mlp_norm`, OLMo-core's names), inside the
    gate slot so the telemetry sees the branch as added."""

    def __init__(self, dim: int, num_heads: int, *, depth: int, norm_layer: ModuleFactory, **kwargs) -> None:
        super().__init__(dim, num_heads, depth=depth, norm_layer=norm_layer, **kwargs)
        self.post_attn_norm = norm_layer(dim)
        self.post_mlp_norm = norm_layer(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path1(self.ls1(self.post_attn_norm(self.attn(self.norm1(x)))))
        x = x + self.drop_path2(self.ls2(self.post_mlp_norm(self.mlp(self.norm2(x)))))
        return x
