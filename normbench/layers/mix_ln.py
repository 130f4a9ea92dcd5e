"""Mix-LN (Li et al. 2024): post-LN in the first ⌊αL⌋ blocks, pre-LN in the rest; α = 0.25.

The official code (pixeli99/MixLN peft_pretraining/modeling_llama.py, NORM_TYPE=post_pre) picks the placement per layer
from `layer_index < POST_NUM`; its scripts and README use POST_NUM = 3 of 12 layers (71M) and 6 of 24 (1B), i.e.
α = 0.25, and the model keeps its final norm. Here both placements are one forward with slots: a post-LN block has
`nn.Identity()` before its branches and the norm after the sum, a pre-LN block the reverse, so no `if` in forward.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import torch
from torch import nn

from normbench.layers.blocks import ModuleFactory, PreNormBlock
from normbench.layers.registry import LayerError, register_layer

POST_LN_RATIO = 0.25  # the paper's α: the share of blocks, from the input, that are post-LN


def post_ln_blocks(depth: int, ratio: float = POST_LN_RATIO) -> int:
    """How many of the first blocks are post-LN: ⌊ratio · depth⌋ (3 of 12, 6 of 24, 9 of 36)."""
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"Mix-LN's post_ln_ratio must lie in [0, 1], not {ratio!r}")
    return int(ratio * depth)


@register_layer("mix_ln", kind="placement", partner="layernorm",
                formula="blocks ℓ < ⌊αL⌋: x = norm(x + F(x)); the rest: x = x + F(norm(x)); α = 0.25 (kwarg "
                        "post_ln_ratio); final norm kept",
                source="Li et al. 2024, Mix-LN: Unleashing the Power of Deeper Layers by Combining Pre-LN and "
                       "Post-LN (α = 0.25); pixeli99/MixLN peft_pretraining/modeling_llama.py (NORM_TYPE=post_pre, "
                       "POST_NUM = 3 of 12 and 6 of 24 in its scripts)")
class MixLNBlock(PreNormBlock):
    """`x = post1(x + F(pre1(x)))`: post-LN blocks fill `post_norm1/2` and leave `norm1/2` empty, pre-LN blocks the
    reverse.

    Args:
        block_index: this block's 0-based index; post-LN when below `post_ln_blocks(depth, post_ln_ratio)`.
        post_ln_ratio: Mix-LN's α (default 0.25); NormbenchViT passes it through `block_kwargs`.
    """

    def __init__(self, dim: int, num_heads: int, *, depth: int, norm_layer: ModuleFactory, block_index: int = 0,
                 post_ln_ratio: float = POST_LN_RATIO, **kwargs) -> None:
        post = block_index < post_ln_blocks(depth, post_ln_ratio)
        pre_norm, post_norm = (_identity, norm_layer) if post else (norm_layer, _identity)
        super().__init__(dim, num_heads, depth=depth, norm_layer=pre_norm, block_index=block_index, **kwargs)
        self.is_post_ln = post
        self.post_norm1 = post_norm(dim)
        self.post_norm2 = post_norm(dim)

    @staticmethod
    def check_kwargs(post_ln_ratio: float = POST_LN_RATIO, **unknown: object) -> None:
        """What a suite's `model.block_kwargs` may give Mix-LN, checked before anything is built (LayerError)."""
        if unknown:
            raise LayerError(f"block_kwargs: {', '.join(f'`{k}`' for k in sorted(unknown))} is not an argument of "
                             "`mix_ln`'s block (it takes `post_ln_ratio`); remove it")
        if isinstance(post_ln_ratio, bool) or not isinstance(post_ln_ratio, (int, float)) \
                or not 0.0 <= post_ln_ratio <= 1.0:
            raise LayerError(f"block_kwargs.post_ln_ratio: {post_ln_ratio!r} is not a share of the blocks; give a "
                             "number in [0, 1] (the paper's 0.25: the first quarter post-LN)")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.post_norm1(x + self.drop_path1(self.ls1(self.attn(self.norm1(x)))))
        x = self.post_norm2(x + self.drop_path2(self.ls2(self.mlp(self.norm2(x)))))
        return x


def _identity(dim: int) -> nn.Module:
    return nn.Identity()
