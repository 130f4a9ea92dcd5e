"""Gate-slot layers: they scale a residual branch's output, `x + gate(F(norm(x)))`.

Every gate takes `(dim, *, depth, init_values=None, device=None, dtype=None)`; `depth` is the model's number of
blocks, for gates whose init depends on it. Gate parameters carry `_no_weight_decay = True`.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import torch
from torch import nn

from normbench.layers.init_rules import fixup_init, fixup_official_init, rezero_share_alpha
from normbench.layers.registry import register_layer


def cait_init_values(depth: int) -> float:
    """LayerScale's ε as CaiT sets it: 0.1 up to depth 18, 1e-5 at depth 24, 1e-6 for deeper networks."""
    if depth <= 18:
        return 0.1
    if depth <= 24:
        return 1e-5
    return 1e-6


def _no_decay(p: nn.Parameter) -> nn.Parameter:
    p._no_weight_decay = True  # type: ignore[attr-defined]  # read by NormbenchViT.no_weight_decay
    return p


@register_layer("layerscale", kind="gate", partner="layernorm",
                formula="x + diag(λ) F(norm(x)); λ = ε: 0.1 (depth ≤ 18), 1e-5 (24), 1e-6 (deeper)",
                source="Touvron et al. 2021, Going deeper with Image Transformers (CaiT), Sec. 2; "
                       "facebookresearch/deit cait_models.py")
class LayerScale(nn.Module):
    """Per-channel scale γ of a residual branch, channels last `(..., C)`; timm's key name `gamma`.

    Args:
        dim: channels C.
        depth: number of blocks; picks ε by CaiT's schedule unless `init_values` is given.
        init_values: overrides ε.
    """

    def __init__(self, dim: int, *, depth: int, init_values: float | None = None, device=None, dtype=None) -> None:
        super().__init__()
        self.init_values = cait_init_values(depth) if init_values is None else init_values
        self.gamma = _no_decay(nn.Parameter(torch.full((dim,), self.init_values, device=device, dtype=dtype)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., C) -> (..., C)
        return x * self.gamma

    def flop_count(self, num_tokens: int) -> int:
        """Multiplies in one forward pass over `num_tokens` positions: one per element."""
        return num_tokens * self.gamma.shape[0]


@register_layer("rezero_per_branch", kind="gate", partner="none",
                formula="x + α₁ Attn(x); x + α₂ MLP(x); a scalar α = 0 per branch, no norm",
                source="variant: ReZero with one α per branch (normbench's earlier form; not the official code)")
class ReZero(nn.Module):
    """A scalar α, zero at init, so the block starts as the identity. `init_values` overrides 0.

    As a registry entry this is `rezero_per_branch`: each branch its own α. The official `rezero` shares one α per
    block (`ReZeroShared`).
    """

    def __init__(self, dim: int, *, depth: int, init_values: float | None = None, device=None, dtype=None) -> None:
        super().__init__()
        self.alpha = _no_decay(nn.Parameter(torch.full((1,), init_values or 0.0, device=device, dtype=dtype)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.alpha


@register_layer("rezero", kind="gate", partner="none", init_rule=rezero_share_alpha,
                formula="x + α Attn(x); x + α MLP(x); one scalar α = 0 per block, shared by both branches, no norm",
                source="Bachlechner et al. 2020, ReZero is All You Need; majumderb/rezero rezero/transformer/rztx.py "
                       "(RZTXEncoderLayer.resweight)")
class ReZeroShared(ReZero):
    """ReZero as its official code does it: `rezero_share_alpha` ties the MLP gate's α to the attention gate's."""


@register_layer("skipinit", kind="gate", partner="none", formula="x + α F(x); scalar α = 0, no norm",
                source="De & Smith 2020, Batch Normalization Biases Residual Blocks Towards the Identity (SkipInit), "
                       "one α per residual branch")
class SkipInit(ReZero):
    """SkipInit's multiplier: the same operation as ReZero, from a different paper (ResNets, not Transformers)."""


@register_layer("fixup", kind="gate", partner="fixup_bias", init_rule=fixup_init,
                formula="x + s F(x - b); scalars s = 1, b = 0; Xavier, qkv × L^(-1/6), fc1 × L^(-1/2), "
                        "proj/fc2/head 0; L = 2·depth",
                source="Zhang et al. 2019, Fixup; hongyi-zhang/Fixup fairseq/modules/multihead_attention_zero.py "
                       "reset_parameters + fairseq/models/transformer_zero.py")
class FixupGate(nn.Module):
    """Fixup's scalar multiplier (init 1) at a branch's output, the official Transformer's `LayerScale`
    (`x * self.weight`, fairseq/models/transformer_zero.py). The branch-input shift `x - b` is `fixup_bias` in the
    norm slot; the rescaling (and the shift before fc2) is `fixup_init`.
    """

    def __init__(self, dim: int, *, depth: int, init_values: float | None = None, device=None, dtype=None) -> None:
        super().__init__()
        scale = 1.0 if init_values is None else init_values
        self.scale = _no_decay(nn.Parameter(torch.full((1,), scale, device=device, dtype=dtype)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


@register_layer("fixup_official", kind="gate", partner="fixup_bias", init_rule=fixup_official_init,
                formula="fixup, plus the author's optimizer recipe: the scalars at 0.1x lr, weight decay on every "
                        "parameter",
                source="hongyi-zhang/Fixup imagenet/imagenet_train.py (param groups: *bias*/*scale* at base_lr/10, "
                       "one weight_decay for all)")
class FixupGateOfficial(FixupGate):
    """`fixup` with the author's training recipe (0.1x lr scalars, full weight decay), as parameter tags."""
