"""Norm-slot families with no init rule of their own: LayerNorm, RMSNorm, LearnableScaler, DyT and Derf (point-wise
squashing in place of a norm), none.

Every class follows timm's norm-layer contract `(dim, eps=..., device=None, dtype=None)`, so any of them can also be
passed as `norm_layer=` to timm's own models, and fills its values in `reset_parameters()`. Norms that come with an
init rule live with it: `fixup_bias` in fixup.py, `tfixup` in tfixup.py.

`normalizes = False` marks a class that does not bound its output's scale (an affine map, the identity): `qk_norm`
then puts LayerNorm on q and k instead of it (compose.py). A class without the attribute normalizes.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import torch
import torch.nn.functional as F
from torch import nn

from normbench.layers.registry import Tunable, register_layer

# α's init as `normbench tune` may search it (`layer.alpha_init`), where each source says which values it trained
DYT_ALPHA = Tunable("alpha_init", "norm_kwargs.alpha_init", low=0.5, high=1.2, default=lambda depth: 0.5,
                    init_only=True,
                    source="DyT Sec. 7.1 (Fig. 9): on non-LLM models α0 from 0.5 to 1.2 generally trains well (ViT-L "
                           "diverges above 0.6); Table 13: ViT-B 82.5 at 0.5, 82.6 at 1.0")
DERF_ALPHA = Tunable("alpha_init", "norm_kwargs.alpha_init", choices=(0.5, 1.0), default=lambda depth: 0.5,
                     init_only=True,
                     source="zlab-princeton/Derf's own values: ViT 0.5 (ViT/dynamic_erf.py), DiT-XL 1.0 "
                            "(DiT/train.py); no ablation of α's init is published")


@register_layer("layernorm", kind="norm", formula="γ ⊙ (x - μ) / √(σ² + ε) + β, over channels",
                source="Ba et al. 2016, Layer Normalization, Sec. 3; torch.nn.LayerNorm (fused kernel)")
class LayerNorm(nn.LayerNorm):
    """torch's fused LayerNorm with timm's ViT default eps=1e-6."""

    def __init__(self, dim: int, eps: float = 1e-6, device=None, dtype=None) -> None:
        super().__init__(dim, eps=eps, device=device, dtype=dtype)


@register_layer("rmsnorm", kind="norm", formula="γ ⊙ x / √(mean(x²) + ε), over channels",
                source="Zhang & Sennrich 2019, Root Mean Square Layer Normalization, Eq. 4; torch.nn.RMSNorm")
class RMSNorm(nn.RMSNorm):
    """torch's fused RMSNorm with eps=1e-6 (as timm's RMSNorm)."""

    def __init__(self, dim: int, eps: float = 1e-6, device=None, dtype=None) -> None:
        super().__init__(dim, eps=eps, device=device, dtype=dtype)


@register_layer("learnable_scaler", kind="norm", formula="a ⊙ x + b, per channel; a ~ N(0, 1), b = 0",
                source="nghiemtuan/LearnableScaler, its README and timm/layers/norm.py: "
                       "`a = nn.init.normal_(torch.ones(C))`; the layer only, not its training recipe")
class LearnableScaler(nn.Module):
    """Per-channel affine map in place of a norm, channels last `(..., C)`. Not a normalization (`normalizes`).

    The source writes `nn.init.normal_(torch.ones(C))`, which overwrites the ones with draws from N(0, 1); that is the
    init its code runs, so it is the default here. `init="ones"` (registered as `learnable_scaler_ones`) is the
    variant the code's author probably meant.

    This is the layer, not the recipe behind the source's ViT result (depth 36: 76.32% -> 79.77%): that run also used
    two auxiliary losses (`--attn-extra-loss 0.03` on the first 6 blocks, `--train-feature-decay 0.1`), LAMB at lr
    5e-3, weight decay 0.02, batch 2048 (256 x 8 accumulated), clip 14, a custom schedule and 300 epochs. The losses
    are opt-in TrainConfig keys (normbench/train/aux_losses.py); `suites/learnable-scaler-source.yaml` scales the recipe
    down to digits. A plain suite trains the layer under the benchmark's shared recipe.

    Args:
        dim: channels C.
        eps: accepted for the norm-layer contract; unused (there is no division).
        init: "normal" (a ~ N(0, 1), the source's behaviour) or "ones" (a = 1).
    """

    normalizes = False

    def __init__(self, dim: int, eps: float = 1e-6, device=None, dtype=None, init: str = "normal") -> None:
        super().__init__()
        if init not in ("normal", "ones"):
            raise ValueError(f"LearnableScaler init must be 'normal' or 'ones', not {init!r}")
        self.init = init
        self.a = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))
        self.b = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))
        # mean 0 and variance 1 for batch_norm's inference kernel (see forward); not saved in checkpoints
        self.register_buffer("_mean0", torch.empty(dim, device=device, dtype=dtype), persistent=False)
        self.register_buffer("_var1", torch.empty(dim, device=device, dtype=dtype), persistent=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.normal_(self.a) if self.init == "normal" else nn.init.ones_(self.a)
        nn.init.zeros_(self.b)
        # the constant buffers too: no state_dict refills them after `to_empty`
        nn.init.zeros_(self._mean0)
        nn.init.ones_(self._var1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., C) -> (..., C)
        return self._affine(x.reshape(-1, x.shape[-1])).reshape(x.shape)

    def _affine(self, x: torch.Tensor) -> torch.Tensor:  # (N, C, ...) -> (N, C, ...), channels at dim 1
        # a ⊙ x + b, exactly: inference-mode batch_norm with mean 0 and variance 1 computes x / sqrt(1 + eps) · a + b,
        # and 1 + eps rounds to 1 for the smallest normal float32 (torch before 2.14 refuses eps 0, as an H200 image
        # with torch 2.11 showed). A literal, not a module constant: TorchScript cannot read a global float.
        # Its forward and its backward (dx, da and db in one pass) are single fused kernels, where addcmul's
        # autograd runs four; on CPU that made the op ~1.5x faster
        # (0.70x LayerNorm's time against 1.09x, scripts/bench_scaler_op.py).
        return F.batch_norm(x, self._mean0, self._var1, self.a, self.b, training=False, momentum=0.0,
                            eps=1.1754943508222875e-38)


@register_layer("learnable_scaler_ones", kind="norm", formula="a ⊙ x + b, per channel; a = 1, b = 0",
                source="nghiemtuan/LearnableScaler, with the ones its code builds before overwriting them; "
                       "layer only")
class LearnableScalerOnes(LearnableScaler):
    def __init__(self, dim: int, eps: float = 1e-6, device=None, dtype=None) -> None:
        super().__init__(dim, eps, device, dtype, init="ones")


class LearnableScaler2d(LearnableScaler):
    """Channels-first LearnableScaler for CNNs, `(B, C, H, W)`, in place of BatchNorm2d."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C, H, W) -> (B, C, H, W)
        return self._affine(x)


@register_layer("dyt", kind="norm", formula="γ ⊙ tanh(α x) + β; scalar α = 0.5, γ = 1, β = 0", tunables=(DYT_ALPHA,),
                source="Zhu et al. 2025, Transformers without Normalization (DyT); jiachenzhu/DyT dynamic_tanh.py")
class DyT(nn.Module):
    """Dynamic Tanh. `alpha_init=0.5` is the paper's default for non-LLM models such as ViT."""

    def __init__(self, dim: int, eps: float = 1e-6, device=None, dtype=None, alpha_init: float = 0.5) -> None:
        super().__init__()
        self.alpha_init = alpha_init
        self.alpha = nn.Parameter(torch.empty(1, device=device, dtype=dtype))
        self.weight = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.alpha, self.alpha_init)
        nn.init.ones_(self.weight)
        nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., C) -> (..., C)
        return torch.addcmul(self.bias, torch.tanh(self.alpha * x), self.weight)


@register_layer("derf", kind="norm", formula="γ ⊙ erf(α x + s) + β; scalars α = 0.5, s = 0; γ = 1, β = 0 per channel",
                tunables=(DERF_ALPHA,),
                source="Chen et al. 2025, Stronger Normalization-Free Transformers (Derf), arXiv 2512.10938; "
                       "zlab-princeton/Derf ViT/dynamic_erf.py (Dynamic_erf, alpha_init_value=0.5, "
                       "shift_init_value=0.0)")
class Derf(nn.Module):
    """Dynamic erf: DyT's form with erf and a learned scalar shift inside it, both scalars learnable.

    Args:
        dim: channels C (γ and β are per channel).
        alpha_init: α's init (the source's default 0.5, its ViT recipe's value).
        shift_init: s's init (the source's default 0).
    """

    def __init__(self, dim: int, eps: float = 1e-6, device=None, dtype=None, alpha_init: float = 0.5,
                 shift_init: float = 0.0) -> None:
        super().__init__()
        self.alpha_init, self.shift_init = alpha_init, shift_init
        self.alpha = nn.Parameter(torch.empty(1, device=device, dtype=dtype))
        self.shift = nn.Parameter(torch.empty(1, device=device, dtype=dtype))
        self.weight = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(dim, device=device, dtype=dtype))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.alpha, self.alpha_init)
        nn.init.constant_(self.shift, self.shift_init)
        nn.init.ones_(self.weight)
        nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., C) -> (..., C)
        return torch.addcmul(self.bias, torch.erf(torch.addcmul(self.shift, self.alpha, x)), self.weight)


DERF_MUON_ALPHA = 0.3  # Abouzeid 2026's α for Derf under Muon (the source's own default is 0.5)


@register_layer("derf_alpha03", kind="norm",
                formula="γ ⊙ erf(α x + s) + β; scalars α = 0.3, s = 0; γ = 1, β = 0 per channel (derf with α = 0.3)",
                source="Abouzeid 2026, Does Your Optimizer Care How You Normalize? (arXiv 2604.01563): Derf with "
                       "α = 0.3 instead of 0.5 recovers most of its gap to RMSNorm under Muon; the layer is Chen et "
                       "al. 2025's Derf")
class DerfAlpha03(Derf):
    """Derf with α initialised to 0.3: the one constant that differs."""

    def __init__(self, dim: int, eps: float = 1e-6, device=None, dtype=None, alpha_init: float = DERF_MUON_ALPHA,
                 shift_init: float = 0.0) -> None:
        super().__init__(dim, eps, device, dtype, alpha_init=alpha_init, shift_init=shift_init)


@register_layer("none", kind="norm", formula="x (no normalization)", source="-")
class NoNorm(nn.Identity):
    """Identity in the norm slot, with the norm-layer signature."""

    normalizes = False

    def __init__(self, dim: int, eps: float = 1e-6, device=None, dtype=None) -> None:
        super().__init__()

    def reset_parameters(self) -> None:
        """Nothing to fill; here so every norm class answers the same calls."""
