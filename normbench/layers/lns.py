"""LayerNorm Scaling (Sun et al. 2025, The Curse of Depth in LLMs): each pre-norm's output scaled by 1/√ℓ.

`x = x + F(norm(x) / √ℓ)`, ℓ the block's 1-based depth (block index + 1), on both sublayers; a constant, not learned.
The official code (lmsdss/LayerNorm-Scaling peft_pretraining/modeling_llama.py, NORM_TYPE=LNS) multiplies the
output of `input_layernorm` and of `post_attention_layernorm` by `1 / math.sqrt(self.layer_index + 1)`; the final
norm is not scaled.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import math

import torch

from normbench.layers.blocks import PreNormBlock
from normbench.layers.registry import register_layer


def lns_scale(block_index: int) -> float:
    """1/√ℓ for the block at 0-based `block_index` (ℓ = block_index + 1)."""
    return 1.0 / math.sqrt(block_index + 1)


@register_layer("lns", kind="placement", partner="layernorm",
                formula="x + F(norm(x) / √ℓ), ℓ = the block's 1-based depth; constant, both sublayers",
                source="Sun et al. 2025, The Curse of Depth in Large Language Models, Eq. 12; lmsdss/LayerNorm-"
                       "Scaling peft_pretraining/modeling_llama.py (NORM_TYPE=LNS: scale_factor = 1 / "
                       "math.sqrt(self.layer_index + 1))")
class LNSBlock(PreNormBlock):
    """Pre-norm with the norms' output scaled by `lns_scale(block_index)`."""

    def __init__(self, dim: int, num_heads: int, *, depth: int, block_index: int = 0, **kwargs) -> None:
        super().__init__(dim, num_heads, depth=depth, block_index=block_index, **kwargs)
        self.lns_scale = lns_scale(block_index)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x) * self.lns_scale)))
        x = x + self.drop_path2(self.ls2(self.mlp(self.norm2(x) * self.lns_scale)))
        return x
