"""GPT-2's scaled init (Radford et al. 2019): pre-LN, every residual output projection at std 0.02/√(2·depth).

GPT-2 (Sec. 2.3) scales "the weights of residual layers at initialization by a factor of 1/√N where N is the number of
residual layers"; nanoGPT's model.py does it as `torch.nn.init.normal_(p, mean=0.0, std=0.02/math.sqrt(2 *
config.n_layer))` for every `c_proj.weight` (attention's and the MLP's output projections), N = 2 · n_layer. Here
those are `attn.proj` and `mlp.fc2`; every other weight keeps timm's ViT init (trunc-normal std 0.02, biases 0),
which matches nanoGPT's N(0, 0.02) for the other Linears. A placement: the pre-norm block, plus this init rule.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import math

import torch
from torch import nn

from normbench.layers.blocks import PreNormBlock
from normbench.layers.registry import register_layer

GPT2_STD = 0.02  # nanoGPT's std for every Linear


def scaled_init_std(depth: int) -> float:
    """0.02/√(2·depth): the std of the residual output projections (0.02/√72 at depth 36)."""
    return GPT2_STD / math.sqrt(2 * depth)


@torch.no_grad()
def gpt2_scaled_init(model: nn.Module) -> None:
    """Every block's attn.proj and mlp.fc2 weight ~ N(0, scaled_init_std(depth)²), as nanoGPT's c_proj."""
    blocks = model.blocks  # type: ignore[attr-defined]
    std = scaled_init_std(len(blocks))
    for block in blocks:
        for linear in (block.attn.proj, block.mlp.fc2):
            nn.init.normal_(linear.weight, mean=0.0, std=std)


@register_layer("scaled_init", kind="placement", partner="layernorm", init_rule=gpt2_scaled_init,
                formula="x + F(norm(x)); attn.proj and mlp.fc2 weights ~ N(0, (0.02/√(2·depth))²) at init",
                source="Radford et al. 2019, Language Models are Unsupervised Multitask Learners (GPT-2), Sec. 2.3; "
                       "karpathy/nanoGPT model.py GPT.__init__ (c_proj.weight std 0.02/math.sqrt(2 * n_layer))")
class ScaledInitBlock(PreNormBlock):
    """The pre-norm block unchanged: `gpt2_scaled_init` is all of the method."""
