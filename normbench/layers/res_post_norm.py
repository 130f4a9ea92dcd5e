"""Residual post-norm (Swin Transformer v2; OLMo 2's reordered norm): `x + norm(F(x))`, no norm on the branch input.

Two placements share the block: `res_post_norm` (Swin v2: LayerNorm whose weight and bias start at 0, so every branch
starts switched off; `swin_respostnorm_init`) and `res_post_norm_olmo2` (OLMo 2: RMSNorm, weight 1). Both keep the
model's final norm (Swin v2's `norm`, OLMo 2's final RMSNorm). A gate is refused: the norm's γ already scales each
branch per channel (Swin v2 zero-initialises it to act as one), so a gate after it only reparametrises γ.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import torch
from torch import nn

from normbench.layers.blocks import PreNormBlock
from normbench.layers.registry import register_layer

GATE_AFTER_NORM = "its branch ends in a norm whose γ already scales the branch per channel, so a gate after it " \
                  "only reparametrises γ"


@torch.no_grad()
def swin_respostnorm_init(model: nn.Module) -> None:
    """Swin v2's `_init_respostnorm` (timm/models/swin_transformer_v2.py): every block's two post-branch norms get
    weight 0 and bias 0 (where the norm has them: RMSNorm has no bias)."""
    for block in model.blocks:  # type: ignore[attr-defined]
        for norm in (block.norm1, block.norm2):
            for name in ("weight", "bias"):
                if isinstance(getattr(norm, name, None), nn.Parameter):
                    nn.init.zeros_(getattr(norm, name))


@register_layer("res_post_norm", kind="placement", partner="layernorm", init_rule=swin_respostnorm_init,
                refuses=("gate",), refuses_why=GATE_AFTER_NORM,
                formula="x + norm(F(x)), no input norm; the norm's weight and bias start at 0; final norm kept",
                source="Liu et al. 2022, Swin Transformer V2: Scaling Up Capacity and Resolution (res-post-norm); "
                       "timm/models/swin_transformer_v2.py SwinTransformerV2Block.forward and _init_respostnorm")
class ResPostNormBlock(PreNormBlock):
    """`x = x + norm1(attn(x))`, `x = x + norm2(mlp(x))`: the norm slots hold the branch-output norms (Swin v2's key
    names). The gate slots stay `nn.Identity()` (gates are refused) but are kept where the telemetry hooks them."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path1(self.ls1(self.norm1(self.attn(x))))
        x = x + self.drop_path2(self.ls2(self.norm2(self.mlp(x))))
        return x


@register_layer("res_post_norm_olmo2", kind="placement", partner="rmsnorm", refuses=("gate",),
                refuses_why=GATE_AFTER_NORM,
                formula="x + RMSNorm(F(x)), no input norm; weight 1; final norm kept",
                source="Team OLMo 2025, 2 OLMo 2 Furious (reordered norm); allenai/OLMo-core "
                       "src/olmo_core/nn/transformer/block.py ReorderedNormTransformerBlock; placement and norm only "
                       "(its QK-norm is `+qk_norm`, its N(0, 0.02) init is close to timm's)")
class OLMo2Block(ResPostNormBlock):
    """OLMo 2's reordered norm: the same placement, with RMSNorm at its default weight 1 (no init rule)."""
