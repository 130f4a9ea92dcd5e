"""Transformer blocks, one per placement of the norm. Built from timm's Attention, Mlp and DropPath.

Pre-norm (the default, timm's `Block` with a gate slot) is not a registry entry; `post_ln` and `deepnorm` are,
as kind `placement`. Every unused slot is `nn.Identity()`, so forward reads like the equation.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

from collections.abc import Callable

import torch
from timm.layers import DropPath, Mlp
from timm.models.vision_transformer import Attention
from torch import nn

from normbench.layers.init_rules import deepnorm_constants, deepnorm_init
from normbench.layers.registry import register_layer

ModuleFactory = Callable[[int], nn.Module]  # dim -> module


class PreNormBlock(nn.Module):
    """`x = x + gate(attn(norm(x)))`, `x = x + gate(mlp(norm(x)))`. Keys match timm's `Block`.

    Args:
        dim: channels C.
        num_heads: attention heads.
        depth: the model's number of blocks (for placements whose constants depend on it).
        norm_layer: dim -> norm module (the norm slots).
        gate_layer: dim -> gate module (the gate slots, `ls1`/`ls2` as timm names LayerScale).
        mlp_ratio: hidden width of the MLP over C.
        qkv_bias: bias on the fused qkv projection.
        proj_drop, attn_drop: dropout rates.
        drop_path: stochastic-depth rate of this block.
    """

    output_is_normalized = False  # True where the block ends in its norm, so the model needs no final norm

    def __init__(self, dim: int, num_heads: int, *, depth: int, norm_layer: ModuleFactory, gate_layer: ModuleFactory,
                 mlp_ratio: float = 4.0, qkv_bias: bool = True, proj_drop: float = 0.0, attn_drop: float = 0.0,
                 drop_path: float = 0.0, act_layer: type[nn.Module] = nn.GELU) -> None:
        super().__init__()
        self.norm1 = norm_layer(dim)
        self.attn = Attention(dim, num_heads=num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop, proj_drop=proj_drop)
        self.ls1 = gate_layer(dim)
        self.drop_path1 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(in_features=dim, hidden_features=int(dim * mlp_ratio), act_layer=act_layer, drop=proj_drop)
        self.ls2 = gate_layer(dim)
        self.drop_path2 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, C) -> (B, N, C)
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x))))
        x = x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
        return x


@register_layer("post_ln", kind="placement", partner="layernorm", formula="x = norm(x + F(x)) (post-norm)",
                source="Vaswani et al. 2017, Attention Is All You Need, Sec. 3.1: LayerNorm(x + Sublayer(x)) "
                       "(seed 003)")
class PostNormBlock(PreNormBlock):
    """The original Transformer's placement: the norm after the residual sum."""

    output_is_normalized = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.drop_path1(self.ls1(self.attn(x))))
        x = self.norm2(x + self.drop_path2(self.ls2(self.mlp(x))))
        return x


@register_layer("deepnorm", kind="placement", partner="layernorm", init_rule=deepnorm_init,
                formula="x = norm(α x + F(x)); α = (2N)^(1/4), init gain β = (8N)^(-1/4)",
                source="Wang et al. 2022, DeepNet: Scaling Transformers to 1,000 Layers, Fig. 2 "
                       "(encoder-only constants)")
class DeepNormBlock(PreNormBlock):
    """Post-norm with the skip up-weighted by α; DeepNorm's β goes into `deepnorm_init`."""

    output_is_normalized = True

    def __init__(self, dim: int, num_heads: int, *, depth: int, **kwargs) -> None:
        super().__init__(dim, num_heads, depth=depth, **kwargs)
        self.alpha, _ = deepnorm_constants(depth)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x * self.alpha + self.drop_path1(self.ls1(self.attn(x))))
        x = self.norm2(x * self.alpha + self.drop_path2(self.ls2(self.mlp(x))))
        return x
