"""Value residual learning, ResFormer (Zhou et al. 2024, arXiv 2410.17897): every block after the first attends over
its own values mixed with the first block's.

The official code (Zcchill/Value-Residual-Learning, src/modeling/modeling_llama_resformer.py, `LlamaAttention.forward`
and the decoder loop's `formal_layer_values`), per block n ≥ 1, on the values after the v projection (per head):

    V_n ← 0.5 · V_1 + 0.5 · V_n          λ = 0.5, fixed; block 0's values V_1 unchanged (and not detached)

A block family, because every block needs V_1: the blocks carry (B, N, 2, C), the residual stream x in slot 0 and
V_1 (its heads laid out as timm's channels, h·d_h + j) in slot 1, which block 0 writes and the others read. Before
block 0 the tokens become (B, N, 1, C); after the last the model reads slot 0 before its final norm. Everything else
is the pre-norm block with the suite's norm and gate slots. With one block it is pre-LN's model exactly.

Telemetry's `stream_rms` and the probe's `rms_in` / `rms_out` read the whole carried tensor, so from block 1 on they
are the RMS over x and V_1 together; the probe's `token_cos` reads slot 0 (the merged stream).
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

from typing import Any

import torch
from torch import nn

from normbench.layers.attention import SlotAttention
from normbench.layers.blocks import PreNormBlock
from normbench.layers.registry import Family, LayerError, register_layer

VALUE_FIRST_WEIGHT = 0.5  # `0.5*formal_layer_values[0] + 0.5*value_states`


def check_no_kwargs(**unknown: Any) -> None:
    """LayerError (one line): value residuals take no block_kwargs."""
    if unknown:
        raise LayerError(f"block_kwargs: {', '.join(f'`{k}`' for k in sorted(unknown))} is not an argument of "
                         "`value_residual` (it takes none; λ = 0.5 is the source's constant); remove it")


class StreamWithValues(nn.Module):
    """Before block 0: the tokens as the first slot of the carried tensor, (B, N, C) -> (B, N, 1, C)."""

    def __init__(self, dim: int, *, depth: int, **_: Any) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.unsqueeze(-2)


class StreamOnly(nn.Module):
    """After the last block: the residual stream (slot 0), before the final norm."""

    def __init__(self, dim: int, *, depth: int, **_: Any) -> None:
        super().__init__()

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h[..., 0, :]


@register_layer("value_residual", kind="family", partner="layernorm",
                family=Family(expand=StreamWithValues, merge=StreamOnly, check_kwargs=check_no_kwargs),
                formula="pre-norm blocks; block n ≥ 1 attends with V_n ← 0.5·V_1 + 0.5·V_n, V_1 the first block's "
                        "values (λ = 0.5 fixed, not detached)",
                source="Zhou et al. 2024, Value Residual Learning For Alleviating Attention Concentration In "
                       "Transformers (ResFormer, arXiv 2410.17897); Zcchill/Value-Residual-Learning "
                       "src/modeling/modeling_llama_resformer.py LlamaAttention.forward (formal_layer_values)")
class ValueResidualBlock(PreNormBlock):
    """A pre-norm block on (x, V_1): block 0 writes its values as V_1, the others mix them into theirs."""

    attention_cls = SlotAttention

    def __init__(self, dim: int, num_heads: int, *, depth: int, block_index: int = 0, **kwargs: Any) -> None:
        super().__init__(dim, num_heads, depth=depth, block_index=block_index, **kwargs)
        self.first = block_index == 0
        self.attn.value_first_weight = VALUE_FIRST_WEIGHT

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (B, N, 1 or 2, C) -> (B, N, 2, C)
        x = h[..., 0, :]
        normed = self.norm1(x)
        heads, head_dim = self.attn.num_heads, self.attn.head_dim
        if self.first:
            values = self.attn.values(normed).transpose(1, 2).flatten(-2)  # (B, N, C): V_1, timm's channel order
            x = x + self.drop_path1(self.ls1(self.attn(normed)))
        else:
            values = h[..., 1, :]
            v_first = values.unflatten(-1, (heads, head_dim)).transpose(1, 2)  # (B, heads, N, d_h)
            x = x + self.drop_path1(self.ls1(self.attn(normed, v_first)))
        x = x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
        return torch.stack([x, values], dim=-2)
