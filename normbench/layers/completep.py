"""CompleteP (Dey et al., Cerebras, NeurIPS 2025, arXiv 2505.01618): depth-μP with α = 1, each residual branch times
(L/L_base)^-1, against Depth-μP's α = 1/2 (depth_mup.py, a/√L).

The official code (EleutherAI/nanoGPT-mup, branch `completep`, model.py `Block.forward` and `configure_optimizers`)
scales a branch by `depth_multiplier ** -depth_alpha_exp`, `depth_multiplier = n_layer / base_depth`; with α = 1:

    x ← x + (L_base/L) F(norm(x))          L_base = 2 (its run script, completep_examples/.../depth_alpha_1_aka_
                                           completep/run.sh: mup_base_depth=2); the model's `init_values` overrides it
    hidden lr × (L/L_base)^(α-1) = × 1     nothing to apply at α = 1 (CompleteP's point: Adam's lr transfers as is)
    hidden init σ_base, independent of L   timm's trunc-normal std 0.02 is that (nanoGPT-mup's init_std 0.02)
    AdamW ε × (L/L_base)^-α                NOT applied: the optimizer's groups (normbench/train/optim_groups.py) have no
                                           per-parameter ε; at ε = 1e-8 it acts only where |g| is near 1e-8

The code runs on μP (width); at width multiplier 1, as here, μP's multipliers are 1 except its attention scale
1/d_h (for 1/√d_h), which belongs to width and is not applied, as Depth-μP applies none of μP's width side. At
L = L_base the block is pre-LN's exactly.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import torch
from torch import nn

from normbench.layers.registry import LayerError, register_layer

COMPLETEP_ALPHA = 1.0    # depth_alpha_exp: CompleteP is α = 1
COMPLETEP_BASE_DEPTH = 2  # mup_base_depth in the official run script


@register_layer("completep", kind="gate", partner="layernorm",
                formula="x + (L_base/L) F(norm(x)); L_base = 2, fixed; init and Adam lr independent of L (α = 1); "
                        "AdamW ε × L_base/L not applied",
                source="Dey et al. 2025, Don't be lazy: CompleteP enables compute-efficient deep transformers "
                       "(arXiv 2505.01618), α = 1; EleutherAI/nanoGPT-mup branch completep, model.py Block.forward "
                       "(residual_scaling) and configure_optimizers; base depth 2 from its completep_examples run.sh")
class CompletePScale(nn.Module):
    """The fixed branch multiplier (L/L_base)^-α = L_base/L (a Python float: no parameter, no state)."""

    def __init__(self, dim: int, *, depth: int, init_values: float | None = None, device=None, dtype=None) -> None:
        super().__init__()
        base = COMPLETEP_BASE_DEPTH if init_values is None else init_values
        if not base >= 1:  # a LayerScale ε (1e-6) set for the whole suite would scale every branch by ~3e-8, silently
            raise LayerError(f"completep: model.init_values is CompleteP's base depth L_base (a depth, 1 or more; "
                             f"default {COMPLETEP_BASE_DEPTH}), got {init_values!r}: a suite that sets init_values "
                             "for another layer's gate (LayerScale's ε) sets it for completep too; train completep "
                             "in a suite without it, or give it a base depth")
        self.multiplier = (depth / base) ** -COMPLETEP_ALPHA

    def reset_parameters(self) -> None:
        """Nothing to fill: the multiplier is a constant."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.multiplier
