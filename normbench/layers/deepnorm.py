"""DeepNorm (Wang et al. 2022, DeepNet): post-norm with the skip up-weighted by α, and its init with gain β.

A placement (registry `deepnorm`): `DeepNormBlock` is the block, `deepnorm_init` the init rule.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import torch
from torch import nn

from normbench.layers._util import qkv_slices
from normbench.layers.blocks import PreNormBlock
from normbench.layers.registry import register_layer


def deepnorm_constants(depth: int) -> tuple[float, float]:
    """DeepNorm's (α, β) for an encoder-only model of N = depth layers: α = (2N)^(1/4), β = (8N)^(-1/4)."""
    return (2 * depth) ** 0.25, (8 * depth) ** -0.25


@torch.no_grad()
def deepnorm_init(model: nn.Module) -> None:
    """DeepNorm (Wang et al. 2022): Xavier-normal init with gain β for the FFN, value and output projections,
    gain 1 for queries and keys."""
    blocks = model.blocks  # type: ignore[attr-defined]
    _, beta = deepnorm_constants(len(blocks))
    for block in blocks:
        q, k, v = qkv_slices(block.attn.qkv)
        nn.init.xavier_normal_(q, gain=1.0)
        nn.init.xavier_normal_(k, gain=1.0)
        nn.init.xavier_normal_(v, gain=beta)
        for linear in (block.attn.proj, block.mlp.fc1, block.mlp.fc2):
            nn.init.xavier_normal_(linear.weight, gain=beta)


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
