"""Fixup (Zhang et al. 2019) as its official Transformer code does it: scalar shifts and multipliers and the init.

Fixup has no norm. Its modules, all built with the model: `FixupBias` (registry `fixup_bias`, a norm) shifts each
branch's input, `x - b`, and also sits in timm Mlp's inner norm slot before fc2 (declared by the gate specs as
`mlp_norm`); `FixupGate` (registry `fixup` and `fixup_official`, gates) scales each branch's output. `fixup_init`
then only sets values: the rescaled Xavier init and the zeros.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import torch
from torch import nn

from normbench.errors import NormbenchError
from normbench.layers._util import no_decay
from normbench.layers.registry import register_layer

# Fixup's scalar parameters train at this multiple of the lr in the author's scripts (`'lr': args.base_lr/10.` for
# every parameter named *bias* or *scale*, hongyi-zhang/Fixup imagenet/imagenet_train.py)
FIXUP_SCALAR_LR_SCALE = 0.1


# --- the rule ---------------------------------------------------------------------------------------------------------


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
      0 and subsume the shift after fc1); the scalar shift before fc2 (the source's `shift3`) is the FixupBias the
      block built in timm Mlp's `norm` slot, already 0.
    - the classifier 0 (Fixup's rule 1; the ResNet code zeroes every `nn.Linear`, imagenet/models/
      fixup_resnet_imagenet.py).
    """
    blocks = model.blocks  # type: ignore[attr-defined]
    qkv_scale, fc1_scale = fixup_scales(len(blocks))
    for block in blocks:
        attn, mlp = block.attn, block.mlp
        if not isinstance(mlp.norm, FixupBias):  # an init rule sets values; it does not add modules
            raise NormbenchError("fixup_init needs a FixupBias before fc2 (`mlp.norm`); register the layer with "
                                 "`mlp_norm=FixupBias` so that the block builds it")
        nn.init.xavier_uniform_(attn.qkv.weight)
        attn.qkv.weight.mul_(qkv_scale)
        nn.init.zeros_(attn.proj.weight)
        nn.init.xavier_uniform_(mlp.fc1.weight)
        mlp.fc1.weight.mul_(fc1_scale)
        nn.init.zeros_(mlp.fc2.weight)
        for linear in (attn.qkv, attn.proj, mlp.fc1, mlp.fc2):
            if linear.bias is not None:
                nn.init.zeros_(linear.bias)
    head = model.head  # type: ignore[attr-defined]
    if isinstance(head, nn.Linear):
        nn.init.zeros_(head.weight)
        nn.init.zeros_(head.bias)


def fixup_scalars(model: nn.Module) -> list[nn.Parameter]:
    """Fixup's scalar shifts and multipliers: every parameter of a FixupBias or FixupGate module."""
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


# --- the modules ------------------------------------------------------------------------------------------------------


@register_layer("fixup_bias", kind="norm", formula="x - b; scalar b = 0 (Fixup's shift at a branch's input)",
                source="Zhang et al. 2019, Fixup; hongyi-zhang/Fixup fairseq/models/transformer_zero.py LayerShift")
class FixupBias(nn.Module):
    """Fixup's scalar shift `x - b` before a residual branch (the official `LayerShift`); it sits in the norm slot
    since Fixup has no norm, and in the MLP before fc2 where the Fixup gates declare it."""

    normalizes = False

    def __init__(self, dim: int, eps: float = 1e-6, device=None, dtype=None) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.empty(1, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x - self.bias


@register_layer("fixup", kind="gate", partner="fixup_bias", init_rule=fixup_init, mlp_norm=FixupBias,
                formula="x + s F(x - b); scalars s = 1, b = 0; Xavier, qkv × L^(-1/6), fc1 × L^(-1/2), "
                        "proj/fc2/head 0; L = 2·depth",
                source="Zhang et al. 2019, Fixup; hongyi-zhang/Fixup fairseq/modules/multihead_attention_zero.py "
                       "reset_parameters + fairseq/models/transformer_zero.py")
class FixupGate(nn.Module):
    """Fixup's scalar multiplier (init 1) at a branch's output, the official Transformer's `LayerScale`
    (`x * self.weight`, fairseq/models/transformer_zero.py). The branch-input shift `x - b` is `fixup_bias` in the
    norm slot; the rescaling is `fixup_init`.
    """

    def __init__(self, dim: int, *, depth: int, init_values: float | None = None, device=None, dtype=None) -> None:
        super().__init__()
        self.init_values = 1.0 if init_values is None else init_values
        self.scale = nn.Parameter(torch.empty(1, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(no_decay(self.scale), self.init_values)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


@register_layer("fixup_official", kind="gate", partner="fixup_bias", init_rule=fixup_official_init,
                mlp_norm=FixupBias,
                formula="fixup, plus the author's optimizer recipe: the scalars at 0.1x lr, weight decay on every "
                        "parameter",
                source="hongyi-zhang/Fixup imagenet/imagenet_train.py (param groups: *bias*/*scale* at base_lr/10, "
                       "one weight_decay for all)")
class FixupGateOfficial(FixupGate):
    """`fixup` with the author's training recipe (0.1x lr scalars, full weight decay), as parameter tags."""
