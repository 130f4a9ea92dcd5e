"""Peri-LN (Kim et al. 2025): a norm on each sublayer's input and on its output before the residual add.

`x = x + norm_out(F(norm_in(x)))`. CogView's Sandwich-LN (Ding et al. 2021, Sec. 2.4) is the same placement; CogView
adds its fp16 tricks beside it (PB-Relax: attention logits computed as (q/α)·k then rescaled, the final LN's input
divided by its max), which change rounding, not the function, and are not part of this entry. The model keeps its
final norm. A gate is refused, as for res_post_norm: the output norm's γ already scales each branch per channel.

`peri_ln_out_gamma` is not a source's: the output norms' γ starts at 1/√(2·depth) instead of 1, so the 2·depth
unit-RMS branches sum to about the embedding's RMS at init. It tests the collapse mechanism docs/layers.md names
("Peri-LN and NormFormer at init") by training; the source's form stays `peri_ln`.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import math

import torch
from torch import nn

from normbench.layers.blocks import ModuleFactory, PreNormBlock
from normbench.layers.registry import register_layer
from normbench.layers.res_post_norm import GATE_AFTER_NORM

OUTPUT_NORMS = ("post_attn_norm", "post_mlp_norm")  # the branch-output norms (OLMo-core's names)


def output_norm_gain(depth: int) -> float:
    """1/√(2·depth): 2·depth branches of RMS γ add up to RMS about 1 (as independent unit vectors would)."""
    return 1 / math.sqrt(2 * depth)


@torch.no_grad()
def scale_output_norms(model: nn.Module) -> None:
    """Init rule of the `*_out_gamma` variants: every branch-output norm's γ at 1/√(2·depth); its bias stays 0."""
    blocks = model.blocks  # type: ignore[attr-defined]
    for block in blocks:
        for name in OUTPUT_NORMS:
            norm = getattr(block, name, None)
            if norm is not None:
                nn.init.constant_(norm.weight, output_norm_gain(len(blocks)))


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


@register_layer("peri_ln_out_gamma", kind="placement", partner="layernorm", init_rule=scale_output_norms,
                refuses=("gate",), refuses_why=GATE_AFTER_NORM,
                formula="peri_ln with both output norms' γ initialised to 1/√(2·depth) (the source: 1)",
                source="no source: normbench's test of the collapse mechanism (docs/layers.md, 'Peri-LN and NormFormer "
                       "at init'); the block is Kim et al. 2025's Peri-LN")
class PeriLNOutGammaBlock(PeriLNBlock):
    """peri_ln's block; `scale_output_norms` is the whole difference."""
