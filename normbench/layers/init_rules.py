"""Init rules: applied to the whole model after timm's weight init (which would otherwise overwrite them).

Each takes a NormbenchViT-shaped model: `model.blocks[i].attn.{qkv,proj}`, `model.blocks[i].mlp.{fc1,norm,fc2}`,
`model.head`, `model.patch_embed.proj`.
"""

from __future__ import annotations

import math

import torch
from torch import nn

# Fixup's scalar parameters train at this multiple of the lr in the author's scripts (`'lr': args.base_lr/10.` for
# every parameter named *bias* or *scale*, hongyi-zhang/Fixup imagenet/imagenet_train.py)
FIXUP_SCALAR_LR_SCALE = 0.1


def _qkv_slices(qkv: nn.Linear) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """timm fuses q, k, v into one (3C, C) weight; these are views of its three (C, C) blocks."""
    return qkv.weight.chunk(3, dim=0)  # type: ignore[return-value]


def fixup_num_branches(depth: int) -> int:
    """Fixup's L for an encoder of `depth` blocks: the number of residual branches, 2 per block.

    The official Transformer counts `num_blocks = args.encoder_layers * 2 + args.decoder_layers * 3` (one branch per
    attention and per FFN; hongyi-zhang/Fixup fairseq/models/transformer_zero.py); an encoder-only ViT has no decoder.
    """
    return 2 * depth


def fixup_scales(depth: int) -> tuple[float, float]:
    """(in-projection scale, fc1 scale) = (L^(-1/6), L^(-1/2)), L = 2 * depth.

    Fixup scales a branch of m layers by L^(-1/(2m-2)); the official code treats attention as m = 4 (q/k, softmax,
    v, out: `in_proj_weight *= num_blocks ** (-1/6)`, modules/multihead_attention_zero.py) and the FFN as m = 2
    (`Linear(..., scale=1/sqrt(num_blocks))`, models/transformer_zero.py).
    """
    num_branches = fixup_num_branches(depth)
    return num_branches ** (-1.0 / 6.0), num_branches ** -0.5


@torch.no_grad()
def fixup_init(model: nn.Module) -> None:
    """Fixup as its official Transformer code does it (hongyi-zhang/Fixup, fairseq/modules/
    multihead_attention_zero.py `reset_parameters` and fairseq/models/transformer_zero.py `Linear`):

    - Xavier-uniform on the fused (3C, C) in-projection, then × L^(-1/6); out-projection weight 0.
    - Xavier-uniform on fc1, then × L^(-1/2); fc2 weight 0.
    - every bias of the branch 0 (the source has `bias=False` plus scalar shifts; a ViT's per-channel biases start at
      0 and subsume the shift after fc1); the scalar shift before fc2 (the source's `shift3`) goes into timm Mlp's
      `norm` slot.
    - the classifier 0 (Fixup's rule 1; the ResNet code zeroes every `nn.Linear`, imagenet/models/
      fixup_resnet_imagenet.py).
    """
    from normbench.layers.norms import FixupBias  # norms imports this module

    blocks = model.blocks  # type: ignore[attr-defined]
    qkv_scale, fc1_scale = fixup_scales(len(blocks))
    for block in blocks:
        attn, mlp = block.attn, block.mlp
        nn.init.xavier_uniform_(attn.qkv.weight)
        attn.qkv.weight.mul_(qkv_scale)
        nn.init.zeros_(attn.proj.weight)
        nn.init.xavier_uniform_(mlp.fc1.weight)
        mlp.fc1.weight.mul_(fc1_scale)
        nn.init.zeros_(mlp.fc2.weight)
        for linear in (attn.qkv, attn.proj, mlp.fc1, mlp.fc2):
            if linear.bias is not None:
                nn.init.zeros_(linear.bias)
        if isinstance(mlp.norm, nn.Identity):
            mlp.norm = FixupBias(mlp.fc2.in_features, device=mlp.fc2.weight.device, dtype=mlp.fc2.weight.dtype)
    head = model.head  # type: ignore[attr-defined]
    if isinstance(head, nn.Linear):
        nn.init.zeros_(head.weight)
        nn.init.zeros_(head.bias)


def fixup_scalars(model: nn.Module) -> list[nn.Parameter]:
    """Fixup's scalar shifts and multipliers: every parameter of a FixupBias or FixupGate module."""
    from normbench.layers.gates import FixupGate
    from normbench.layers.norms import FixupBias

    return [p for m in model.modules() if isinstance(m, (FixupBias, FixupGate)) for p in m.parameters()]


@torch.no_grad()
def fixup_official_init(model: nn.Module) -> None:
    """`fixup_init` plus the author's optimizer recipe, as parameter tags read by normbench/train/optim_groups.py:
    the scalar shifts and multipliers train at 0.1x the lr (`_lr_scale`) and every parameter gets weight decay
    (`_force_weight_decay`; the scripts pass one `weight_decay` to all groups, imagenet/imagenet_train.py)."""
    fixup_init(model)
    for p in model.parameters():
        p._force_weight_decay = True  # type: ignore[attr-defined]
    for p in fixup_scalars(model):
        p._lr_scale = FIXUP_SCALAR_LR_SCALE  # type: ignore[attr-defined]


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
        _, _, v = _qkv_slices(block.attn.qkv)
        nn.init.xavier_uniform_(v)  # Xavier on v's own (C, C) matrix, not the fused (3C, C) one: √2 larger
        v.mul_(scale)
        for linear in (block.attn.proj, block.mlp.fc1, block.mlp.fc2):
            linear.weight.mul_(scale)
    embed = model.patch_embed.proj  # type: ignore[attr-defined]
    fan_in = embed.weight[0].numel()  # in_chans * patch * patch
    nn.init.normal_(embed.weight, std=tfixup_embedding_std(len(blocks)) / math.sqrt(fan_in))
    if embed.bias is not None:
        nn.init.zeros_(embed.bias)


@torch.no_grad()
def rezero_share_alpha(model: nn.Module) -> None:
    """ReZero's one α per block, shared by the attention and MLP branches (majumderb/rezero
    rezero/transformer/rztx.py: `self.resweight` multiplies both `src2`s of `RZTXEncoderLayer.forward`).

    The gate slots are built per branch; this ties the second gate's α to the first's, so the block's forward is
    unchanged and the model holds one parameter per block (state_dict keeps both names, as tied weights do).
    """
    for block in model.blocks:  # type: ignore[attr-defined]
        block.ls2.alpha = block.ls1.alpha
