"""timm's Attention with two more places where a method acts inside it, for the blocks whose method needs them:

    q, k, v = qkv(x) per head;  q, k, v = q_norm(q), k_norm(k), v_norm(v)       v_norm: HybridNorm's norm on v
    v = w · v_first + (1 - w) · v   when a block passes `v_first`                 value residual (ResFormer), w = 0.5
    out = proj(gate ⊙ norm(softmax(q kᵀ/√d_h) v))                                 timm's own norm slot and gate

With `v_norm` the identity and no `v_first` it computes exactly timm's `Attention` (same state_dict keys, the same
fused and explicit paths, `fused_attn` set by the fast path and the fused trainer as on timm's class). `values(x)`
returns the values of `x` alone, from the v rows of the fused qkv weight, for the block whose values later blocks
read (the value residual's first block), without calling `qkv` again (its telemetry hook fires once per forward).
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve


import torch
import torch.nn.functional as F
from timm.layers import maybe_add_mask, resolve_self_attn_mask
from timm.models.vision_transformer import Attention
from torch import nn


class SlotAttention(Attention):
    """timm's Attention plus a norm slot on each head's values (`v_norm`, over d_h) and a value-mixing input.

    Args:
        dim, num_heads, **kwargs: timm's `Attention` arguments (qkv_bias, qk_norm, norm_layer, gated, ...).
        v_norm_layer: head_dim -> the norm of each head's v; None: `nn.Identity()`.

    `value_first_weight` (w, default 0: unused) is the weight of `v_first` when `forward` is given one.
    """

    def __init__(self, dim: int, num_heads: int = 8, *, v_norm_layer=None, **kwargs) -> None:
        super().__init__(dim, num_heads=num_heads, **kwargs)
        self.v_norm = v_norm_layer(self.head_dim) if v_norm_layer is not None else nn.Identity()
        self.value_first_weight = 0.0

    def values(self, x: torch.Tensor) -> torch.Tensor:
        """This attention's values for `x` (B, N, C): (B, heads, N, d_h), after `v_norm`."""
        B, N, _ = x.shape
        weight = self.qkv.weight[2 * self.attn_dim:]
        bias = self.qkv.bias
        if bias is not None:
            bias = bias[2 * self.attn_dim:]
        v = F.linear(x, weight, bias).reshape(B, N, self.num_heads, self.head_dim).transpose(1, 2)
        return self.v_norm(v)

    def forward(self, x: torch.Tensor, v_first: torch.Tensor | None = None,
                attn_mask: torch.Tensor | None = None, is_causal: bool = False) -> torch.Tensor:
        B, N, C = x.shape
        gate = self.gate(x).sigmoid() if self.gate is not None else None
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        q, k, v = self.q_norm(q), self.k_norm(k), self.v_norm(v)
        if v_first is not None:
            v = self.value_first_weight * v_first + (1.0 - self.value_first_weight) * v

        if self.fused_attn:
            x = F.scaled_dot_product_attention(
                q, k, v,
                attn_mask=attn_mask,
                dropout_p=self.attn_drop.p if self.training else 0.,
                is_causal=is_causal,
            )
        else:
            q = q * self.scale
            attn = q @ k.transpose(-2, -1)
            attn_bias = resolve_self_attn_mask(N, attn, attn_mask, is_causal)
            attn = maybe_add_mask(attn, attn_bias)
            attn = attn.softmax(dim=-1)
            attn = self.attn_drop(attn)
            x = attn @ v

        x = x.transpose(1, 2).reshape(B, N, self.attn_dim)
        x = self.norm(x)
        if gate is not None:
            x = x * gate
        x = self.proj(x)
        x = self.proj_drop(x)
        return x
