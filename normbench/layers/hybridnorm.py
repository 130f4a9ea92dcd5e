"""HybridNorm (Zhuo et al. 2025, arXiv 2503.04598): QKV-norm inside attention, post-norm on the FFN.

The official code (BryceZhuo/HybridNorm, dense_model/olmo/model.py `OLMoSequentialBlock.forward` and `attention`;
configs/exps/1.2B-dense-HybriedNorm.yaml: `attn_norm: false`, `use_query_norm / use_key_norm / use_value_norm: true`,
`ffn_norm: true`, `ffn_residual_after_norm: true`), per block:

    x ← x + Attn_QKV(x)        no norm before attention; q, k, v each normalised per head (over d_h) before softmax
    x ← norm(x)                the FFN's norm replaces the stream (`ffn_residual_after_norm`: the residual is taken
    x ← x + FFN(x)             after the norm): x_next = norm(y) + FFN(norm(y))

The model keeps its final norm (OLMo's `ln_f`). HybridNorm* (`hybridnorm_star`, the README's second command,
`norm_pos_special_config="_{0:{'attn_norm':True,'ffn_residual':False}}_"`) makes block 0 a full pre-norm block
(x + Attn_QKV(norm(x)), x + FFN(norm(x))), keeping its QKV norms. The norms are the combination's norm class
(LayerNorm for `hybridnorm`, the ViT's; the source's RMSNorm is `rmsnorm+hybridnorm`). `qk_norm` is refused: q and k
are normalised already.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

from typing import Any

import torch
from torch import nn

from normbench.layers.attention import SlotAttention
from normbench.layers.blocks import ModuleFactory, PreNormBlock
from normbench.layers.registry import register_layer

QKV_NORMED = "q, k and v are normalised already (QKV-norm)"


@register_layer("hybridnorm", kind="placement", partner="layernorm", refuses=("qk_norm",), refuses_why=QKV_NORMED,
                formula="x + Attn(x) with norm(q), norm(k), norm(v) per head; then x ← norm(x), x + FFN(x) (the "
                        "FFN's residual after its norm); final norm kept",
                source="Zhuo et al. 2025, HybridNorm: Towards Stable and Efficient Transformer Training via Hybrid "
                       "Normalization (arXiv 2503.04598); BryceZhuo/HybridNorm dense_model/olmo/model.py "
                       "OLMoSequentialBlock.forward, configs/exps/1.2B-dense-HybriedNorm.yaml")
class HybridNormBlock(PreNormBlock):
    """No attention input norm (`norm1` is the identity), QKV-norm in `attn` (`q_norm`, `k_norm`, `v_norm`), and the
    FFN norm `norm2` applied to the stream itself."""

    attention_cls = SlotAttention

    def __init__(self, dim: int, num_heads: int, *, depth: int, norm_layer: ModuleFactory,
                 attn_kwargs: dict[str, Any] | None = None, qk_norm_layer: ModuleFactory | None = None,
                 block_index: int = 0, **kwargs: Any) -> None:
        super().__init__(dim, num_heads, depth=depth, norm_layer=norm_layer, qk_norm_layer=norm_layer,
                         attn_kwargs={**(attn_kwargs or {}), "v_norm_layer": norm_layer}, block_index=block_index,
                         **kwargs)
        self.pre_norm = self.pre_norm_block(block_index)
        if not self.pre_norm:
            self.norm1 = nn.Identity()  # HybridNorm has no norm before attention

    def pre_norm_block(self, block_index: int) -> bool:
        """Whether this block is a pre-norm block (HybridNorm*'s block 0); HybridNorm has none."""
        return False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.pre_norm:
            x = x + self.drop_path1(self.ls1(self.attn(self.norm1(x))))
            return x + self.drop_path2(self.ls2(self.mlp(self.norm2(x))))
        x = x + self.drop_path1(self.ls1(self.attn(x)))
        x = self.norm2(x)
        return x + self.drop_path2(self.ls2(self.mlp(x)))


@register_layer("hybridnorm_star", kind="placement", partner="layernorm", refuses=("qk_norm",),
                refuses_why=QKV_NORMED,
                formula="hybridnorm with block 0 pre-norm: x + Attn(norm(x)), x + FFN(norm(x)) (its QKV norms kept)",
                source="Zhuo et al. 2025 (arXiv 2503.04598), HybridNorm*; BryceZhuo/HybridNorm README, "
                       "norm_pos_special_config \"_{0:{'attn_norm':True,'ffn_residual':False}}_\"")
class HybridNormStarBlock(HybridNormBlock):
    """HybridNorm*: HybridNorm whose first block is pre-norm."""

    def pre_norm_block(self, block_index: int) -> bool:
        return block_index == 0
