"""Init rules: applied to the whole model after timm's weight init (which would otherwise overwrite them).

Each takes a NormbenchViT-shaped model: `model.blocks[i].attn.{qkv,proj}`, `model.blocks[i].mlp.{fc1,fc2}`,
`model.head`, `model.patch_embed.proj`.
"""

from __future__ import annotations

import torch
from torch import nn


def _qkv_slices(qkv: nn.Linear) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """timm fuses q, k, v into one (3C, C) weight; these are views of its three (C, C) blocks."""
    return qkv.weight.chunk(3, dim=0)  # type: ignore[return-value]


@torch.no_grad()
def fixup_init(model: nn.Module) -> None:
    """Fixup (Zhang et al. 2019): zero the classifier and each branch's last layer, scale the other branch layers.

    With L residual branches of m layers each, the non-final layers are scaled by L^(-1/(2m-2)). A ViT block has
    two branches (attention: qkv -> proj, MLP: fc1 -> fc2), so L = 2 * depth and m = 2.
    """
    blocks = model.blocks  # type: ignore[attr-defined]
    num_branches, layers_per_branch = 2 * len(blocks), 2
    scale = num_branches ** (-1.0 / (2 * layers_per_branch - 2))
    for block in blocks:
        block.attn.qkv.weight.mul_(scale)
        block.mlp.fc1.weight.mul_(scale)
        nn.init.zeros_(block.attn.proj.weight)
        nn.init.zeros_(block.mlp.fc2.weight)
    head = model.head  # type: ignore[attr-defined]
    if isinstance(head, nn.Linear):
        nn.init.zeros_(head.weight)
        nn.init.zeros_(head.bias)


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
        q, k, v = _qkv_slices(block.attn.qkv)
        nn.init.xavier_normal_(q, gain=1.0)
        nn.init.xavier_normal_(k, gain=1.0)
        nn.init.xavier_normal_(v, gain=beta)
        for linear in (block.attn.proj, block.mlp.fc1, block.mlp.fc2):
            nn.init.xavier_normal_(linear.weight, gain=beta)


@torch.no_grad()
def tfixup_init(model: nn.Module) -> None:
    """T-Fixup (Huang et al. 2020), encoder rule: Xavier init everywhere, input embedding ~ N(0, d^(-1/2)),
    then the value and output projections and both MLP weights of every block scaled by 0.67 N^(-1/4)."""
    blocks = model.blocks  # type: ignore[attr-defined]
    scale = 0.67 * len(blocks) ** -0.25
    for block in blocks:
        for linear in (block.attn.qkv, block.attn.proj, block.mlp.fc1, block.mlp.fc2):
            nn.init.xavier_uniform_(linear.weight)
        _, _, v = _qkv_slices(block.attn.qkv)
        nn.init.xavier_uniform_(v)  # Xavier on v's own (C, C) matrix, not the fused (3C, C) one: √2 larger
        v.mul_(scale)
        for linear in (block.attn.proj, block.mlp.fc1, block.mlp.fc2):
            linear.weight.mul_(scale)
    embed = model.patch_embed.proj  # type: ignore[attr-defined]
    nn.init.normal_(embed.weight, std=embed.out_channels ** -0.5)
