"""Transformer blocks, pre-norm and post-norm. Built from timm's Attention, Mlp and DropPath.

Pre-norm (the default, timm's `Block` with a gate slot) is not a registry entry; `post_ln` is, as kind `placement`
(DeepNorm, a post-norm block with its own init rule, is in deepnorm.py). Every unused slot is `nn.Identity()`, so
forward reads like the equation.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

from collections.abc import Callable
from typing import Any

import torch
from timm.layers import DropPath, Mlp
from timm.models.vision_transformer import Attention
from torch import nn

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
        mlp_norm_layer: hidden -> module for timm Mlp's inner norm slot (`mlp.norm`, before fc2), for methods that
            need one there (Fixup's shift); None: `nn.Identity()`.
        qk_norm_layer: head_dim -> the norm of each head's q and k, built by timm's Attention itself
            (`qk_norm=True, norm_layer=...`); None: no QK-norm (`nn.Identity()`, timm's default).
        block_index: this block's 0-based place in the stack, for placements whose constants depend on it
            (LayerNorm Scaling's 1/√ℓ, Mix-LN's post-LN share).
        attn_kwargs: more keyword arguments for the attention (the combination's `attn_kwargs`: gated attention's
            `{"gated": True}`); None: none.

    `attention_cls` is the attention the block builds: timm's `Attention`, or a subclass (normbench/layers/
    attention.py) for a block whose method acts inside attention (HybridNorm's norm on v, value residuals).

    A gate class with `shared_across_branches = True` (ReZero's one α per block) is tied: `ls2` uses `ls1`'s
    parameters, under its own state_dict names.
    """

    output_is_normalized = False  # True where the block ends in its norm, so the model needs no final norm
    attention_cls = Attention  # no annotation: TorchScript would read it as an attribute to compile

    def __init__(self, dim: int, num_heads: int, *, depth: int, norm_layer: ModuleFactory, gate_layer: ModuleFactory,
                 mlp_ratio: float = 4.0, qkv_bias: bool = True, proj_drop: float = 0.0, attn_drop: float = 0.0,
                 drop_path: float = 0.0, act_layer: type[nn.Module] = nn.GELU,
                 mlp_norm_layer: ModuleFactory | None = None, qk_norm_layer: ModuleFactory | None = None,
                 block_index: int = 0, attn_kwargs: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.block_index = block_index
        self.norm1 = norm_layer(dim)
        self.attn = self.attention_cls(dim, num_heads=num_heads, qkv_bias=qkv_bias, qk_norm=qk_norm_layer is not None,
                                       norm_layer=qk_norm_layer, attn_drop=attn_drop, proj_drop=proj_drop,
                                       **(attn_kwargs or {}))
        self.ls1 = gate_layer(dim)
        self.drop_path1 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self.norm2 = norm_layer(dim)
        self.mlp = Mlp(in_features=dim, hidden_features=int(dim * mlp_ratio), act_layer=act_layer,
                       norm_layer=mlp_norm_layer, drop=proj_drop)
        self.ls2 = gate_layer(dim)
        self.drop_path2 = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()
        self._tie_gates()

    def reset_parameters(self) -> None:
        """Re-tie shared gates: `to_empty` (materializing a meta-device model) gives each name its own tensor."""
        self._tie_gates()

    def _tie_gates(self) -> None:
        if getattr(self.ls1, "shared_across_branches", False):
            for name, p in self.ls1.named_parameters(recurse=False):
                setattr(self.ls2, name, p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, C) -> (B, N, C)
        x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x))))
        x = x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
        return x


@register_layer("post_ln", kind="placement", partner="layernorm", formula="x = norm(x + F(x)) (post-norm)",
                source="Vaswani et al. 2017, Attention Is All You Need, Sec. 3.1: LayerNorm(x + Sublayer(x))")
class PostNormBlock(PreNormBlock):
    """The original Transformer's placement: the norm after the residual sum."""

    output_is_normalized = True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.drop_path1(self.ls1(self.attn(x))))
        x = self.norm2(x + self.drop_path2(self.ls2(self.mlp(x))))
        return x
