"""T-Fixup (Huang et al. 2020): no norm, and an init that keeps a deep post-norm-free Transformer trainable.

The layer is the identity in the norm slot (`TFixupNoNorm`, registry `tfixup`); all its work is `tfixup_init`.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import math

import torch
from torch import nn

from normbench.layers._util import qkv_slices
from normbench.layers.norms import NoNorm
from normbench.layers.registry import register_layer


def tfixup_embedding_std(depth: int) -> float:
    """T-Fixup's embedding entry std, (9N)^(-1/4) for N encoder layers.

    layer6ai-labs/T-Fixup fairseq/models/transformer.py `TransformerEncoder.__init__` multiplies the N(0, d^-1/2)
    embedding table by `(9 * args.encoder_layers) ** (-1/4)`, and `forward_embedding` multiplies the lookup by
    `embed_scale = sqrt(d)`: each entry ends with std (9N)^(-1/4).
    """
    return (9 * depth) ** -0.25


@torch.no_grad()
def tfixup_init(model: nn.Module) -> None:
    """T-Fixup (Huang et al. 2020), encoder rule: Xavier init everywhere, the value and output projections and both
    MLP weights of every block scaled by 0.67 N^(-1/4), and patch-embedding entries of std (9N)^(-1/4).

    The patch conv plays the embedding table: weight ~ N(0, (9N)^(-1/2) / fan_in) and bias 0, so that on inputs of
    unit second moment (normalized images) each entry has std (9N)^(-1/4), as the official encoder's embeddings do.
    """
    blocks = model.blocks  # type: ignore[attr-defined]
    scale = 0.67 * len(blocks) ** -0.25
    for block in blocks:
        for linear in (block.attn.qkv, block.attn.proj, block.mlp.fc1, block.mlp.fc2):
            nn.init.xavier_uniform_(linear.weight)
        _, _, v = qkv_slices(block.attn.qkv)
        nn.init.xavier_uniform_(v)  # Xavier on v's own (C, C) matrix, not the fused (3C, C) one: √2 larger
        v.mul_(scale)
        for linear in (block.attn.proj, block.mlp.fc1, block.mlp.fc2):
            linear.weight.mul_(scale)
    embed = model.patch_embed.proj  # type: ignore[attr-defined]
    fan_in = embed.weight[0].numel()  # in_chans * patch * patch
    nn.init.normal_(embed.weight, std=tfixup_embedding_std(len(blocks)) / math.sqrt(fan_in))
    if embed.bias is not None:
        nn.init.zeros_(embed.bias)


@register_layer("tfixup", kind="norm", init_rule=tfixup_init,
                formula="x (no norm); Xavier init, value/out/MLP weights × 0.67 N^(-1/4), "
                        "embedding entries std (9N)^(-1/4)",
                source="Huang et al. 2020, T-Fixup; layer6ai-labs/T-Fixup fairseq/models/transformer.py "
                       "TransformerEncoder.__init__ and modules/transformer_layer.py fixup_initialization")
class TFixupNoNorm(NoNorm):
    """T-Fixup removes the norm; its work is all in `tfixup_init`."""
