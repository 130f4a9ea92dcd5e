"""Attention Residuals, Block AttnRes (Kimi Team, Moonshot AI 2026, arXiv 2603.15031): each sublayer reads a softmax
over earlier blocks' outputs, through one learned pseudo-query, instead of the running sum.

The official pseudocode (MoonshotAI/Attention-Residuals README, `block_attn_res` and the layer's `forward`), per
layer (attention, then MLP), with `blocks` the completed block representations and `partial` the current block's
running sum:

    h = Σ_i softmax_i(w · RMSNorm(V_i)) V_i,  V = [blocks..., partial]         block_attn_res, before attention
    if layer % S == 0: blocks.append(partial); partial = None                    a block of S layers ends
    partial = partial + attn(norm(h))   (or attn(norm(h)) when None)
    h = block_attn_res([blocks..., partial]) with the MLP's own w and RMSNorm
    partial = partial + mlp(norm(h))

b_0 is the embedding (block 0 starts with no completed block and the embedding as its partial, so the first
boundary stores it; its attention reads that one source, where a softmax is 1, so it has no w); w is zero-initialised,
so at step 0 every sublayer reads the plain mean of its sources (not the pre-norm residual); the keys' RMSNorm has a
learnable weight (1). After the last layer the model's input to its
final norm is one more such softmax over all sources with its own w and RMSNorm: the pseudocode stops at the layers,
and this is the output aggregation NVIDIA Megatron-LM's implementation (PR 6840) and the hcfactory reproduction
apply ("one final router"). Blocks: N = 8
(the paper: ~8 blocks recover most of Full AttnRes), S = ⌈L/N⌉ layers each (`block_kwargs: {attn_res_blocks: N}`).

A block family: the blocks carry (B, N, k, C), the completed blocks then the partial sum (k grows by one at each
block boundary). Telemetry's `stream_rms` and the probe's `rms_in` / `rms_out` are the RMS over all k sources; the
probe's `token_cos` reads the final aggregation (`merge`).
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import math
from typing import Any

import torch
from torch import nn

from normbench.layers._util import no_decay
from normbench.layers.blocks import PreNormBlock
from normbench.layers.norms import RMSNorm
from normbench.layers.registry import Family, LayerError, register_layer

DEFAULT_BLOCKS = 8  # N: the paper's Block AttnRes uses ~8 blocks


def check_blocks(attn_res_blocks: Any = DEFAULT_BLOCKS, **unknown: Any) -> None:
    """LayerError (one line) unless `attn_res_blocks` is an integer N >= 1 and nothing else is given."""
    if unknown:
        raise LayerError(f"block_kwargs: {', '.join(f'`{k}`' for k in sorted(unknown))} is not an attention-residual "
                         "argument; the one it takes is `attn_res_blocks` (the number of blocks N, default 8)")
    if isinstance(attn_res_blocks, bool) or not isinstance(attn_res_blocks, int) or attn_res_blocks < 1:
        raise LayerError(f"block_kwargs.attn_res_blocks: {attn_res_blocks!r} is not a number of blocks; use an integer "
                         "of 1 or more (the paper's N = 8)")


def layers_per_block(depth: int, blocks: int = DEFAULT_BLOCKS) -> int:
    """S = ⌈L/N⌉: the layers of one block, so that the L layers make at most N blocks."""
    return math.ceil(depth / blocks)


class DepthAttention(nn.Module):
    """Σ_i softmax_i(w · RMSNorm(V_i)) V_i over the sources V (..., k, C): one pseudo-query w (C,), zero at init."""

    def __init__(self, dim: int, device=None, dtype=None) -> None:
        super().__init__()
        self.query = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))
        self.key_norm = RMSNorm(dim, device=device, dtype=dtype)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.zeros_(no_decay(self.query))
        no_decay(self.key_norm.weight)

    def forward(self, sources: torch.Tensor) -> torch.Tensor:  # (..., k, C) -> (..., C)
        weights = (self.key_norm(sources) * self.query).sum(dim=-1).softmax(dim=-1)  # (..., k)
        return (weights.unsqueeze(-1) * sources).sum(dim=-2)


class EmbeddingAsPartial(nn.Module):
    """Before block 0: the tokens as its partial sum and no completed block, (B, N, C) -> (B, N, 1, C)."""

    def __init__(self, dim: int, *, depth: int, **_: Any) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.unsqueeze(-2)


class FinalAggregation(DepthAttention):
    """After the last block: the softmax over every source with its own pseudo-query, before the final norm."""

    def __init__(self, dim: int, *, depth: int, **_: Any) -> None:
        super().__init__(dim)


@register_layer("attn_res", kind="family", partner="layernorm",
                family=Family(expand=EmbeddingAsPartial, merge=FinalAggregation, check_kwargs=check_blocks),
                formula="each sublayer reads Σ softmax(w·RMSNorm(V_i)) V_i over [b_0 = embedding, completed blocks, "
                        "partial sum]; N = 8 blocks of ⌈L/8⌉ layers; w = 0 (uniform mean at init); output = a final "
                        "such softmax",
                source="Kimi Team 2026, Attention Residuals (Moonshot AI, arXiv 2603.15031), Block AttnRes; "
                       "MoonshotAI/Attention-Residuals README pseudocode block_attn_res and the layer forward; final "
                       "aggregation as NVIDIA Megatron-LM PR 6840")
class AttnResBlock(PreNormBlock):
    """A pre-norm block whose two sublayers read `attn_res` / `mlp_res` over the carried sources and add their output
    to the partial sum. Carries (B, N, k, C)."""

    def __init__(self, dim: int, num_heads: int, *, depth: int, block_index: int = 0,
                 attn_res_blocks: int = DEFAULT_BLOCKS, **kwargs: Any) -> None:
        check_blocks(attn_res_blocks)
        super().__init__(dim, num_heads, depth=depth, block_index=block_index, **kwargs)
        # block 0's attention reads one source, the embedding: a softmax over one is 1, and its w would never learn
        self.attn_res = DepthAttention(dim) if block_index > 0 else None
        self.mlp_res = DepthAttention(dim)
        self.starts_block = block_index % layers_per_block(depth, attn_res_blocks) == 0

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (B, N, k, C) -> (B, N, k or k + 1, C)
        x = self.attn_res(h) if self.attn_res is not None else h[..., 0, :]
        branch = self.drop_path1(self.ls1(self.attn(self.norm1(x))))
        if self.starts_block:  # the partial sum so far completes a block
            completed, partial = h, branch
        else:
            completed, partial = h[..., :-1, :], h[..., -1, :] + branch
        x = self.mlp_res(torch.cat([completed, partial.unsqueeze(-2)], dim=-2))
        partial = partial + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
        return torch.cat([completed, partial.unsqueeze(-2)], dim=-2)
