"""SeeDNorm (Cai, Zhu, Liu & Min, ByteDance Seed, ICLR 2026, arXiv 2510.22777): RMSNorm whose gain depends on the
input, so the norm of x that RMSNorm discards comes back through the gain.

    SeeDNorm(x) = [tanh(x · βᵀ) α + γ] ⊙ x / RMS(x),     RMS(x) = √(mean(x²) + ε)

with the paper's multi-head form for vision (the one its ViT results use): x and β split into n heads of D/n
channels, head h's scalar tanh(x_h · β_hᵀ) scaling α over that head's channels (n = 16, its best on ViT-B; one head
diverged there, its Theorem 3.2: the dot product's variance grows with D).

- Init: γ = 1, β = 0, α = 1 (the paper's; its ablation: α = 0.1 converges slower, α = 10 is unstable). With β = 0,
  tanh(0) = 0: SeeDNorm starts as RMSNorm exactly, and the gradient reaches β through α.
- Weight decay on α and β ("for numerical stability"), γ as the baseline's norm weight (none here): α and β carry
  the `_force_weight_decay` tag normbench/train/optim_groups.py reads. timm's `no_weight_decay()` still lists them,
  as every norm parameter.
- The paper's vision trick "α·βᵀ divided by the dimension": the dot product x_h · β_hᵀ is divided by D. The source
  code is not public; this reading is ours (docs/layers.md, SeeDNorm).
- Its other vision trick, dropout on the dynamic term at the drop-path rate, is off at drop-path 0 (every suite here)
  and not built.
- No code is published; formulas and constants from the paper as summarised in its ICLR 2026 notes (papernotes.org).
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import torch
from torch import nn

from normbench.layers.registry import register_layer

SEEDNORM_HEADS = 16  # the paper's ViT-B best (8: 82.5, 16: 82.7, 32: 82.5; 1 diverged)
ALPHA_INIT = 1.0     # the paper's default (its ablation: 0.1 slower, 10 unstable)


@register_layer("seednorm", kind="norm",
                formula="[tanh(x_h·β_hᵀ / D) α + γ] ⊙ x / RMS(x), per head h of D/16 channels; γ = 1, β = 0, α = 1 "
                        "(= RMSNorm at init); weight decay on α and β",
                source="Cai, Zhu, Liu & Min 2025, SeeDNorm: Self-Rescaled Dynamic Normalization (ByteDance Seed, "
                       "ICLR 2026, arXiv 2510.22777): its formula, multi-head form, init and vision recipe (16 "
                       "heads, the dot product / D); no code released")
class SeeDNorm(nn.Module):
    """SeeDNorm over the last dimension (channels last), multi-head.

    Args:
        dim: channels D, a multiple of `num_heads`.
        eps: inside the RMS (RMSNorm's 1e-6 here).
        num_heads: heads n of the self-rescaling term (the paper's ViT: 16).
        alpha_init: α's start (the paper's 1).
    """

    def __init__(self, dim: int, eps: float = 1e-6, device=None, dtype=None, num_heads: int = SEEDNORM_HEADS,
                 alpha_init: float = ALPHA_INIT) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"SeeDNorm: {dim} channels do not split into {num_heads} heads; use a width that is a "
                             f"multiple of {num_heads}, or norm_kwargs: {{num_heads: n}} with n dividing it")
        self.eps, self.num_heads, self.head_dim, self.dim = eps, num_heads, dim // num_heads, dim
        self.alpha_init = alpha_init
        dd = dict(device=device, dtype=dtype)
        self.gamma = nn.Parameter(torch.empty(dim, **dd))
        self.alpha = nn.Parameter(torch.empty(dim, **dd))
        self.beta = nn.Parameter(torch.empty(dim, **dd))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.ones_(self.gamma)
        nn.init.constant_(self.alpha, self.alpha_init)
        nn.init.zeros_(self.beta)
        for p in (self.alpha, self.beta):  # the paper decays them; set here, as `to_empty` drops tags
            p._force_weight_decay = True  # type: ignore[attr-defined]

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (..., D) -> (..., D)
        normed = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        heads = x.unflatten(-1, (self.num_heads, self.head_dim)) * self.beta.view(self.num_heads, self.head_dim)
        seed = torch.tanh(heads.sum(dim=-1) / self.dim)  # (..., n): one scalar per head
        return (self.alpha * seed.repeat_interleave(self.head_dim, dim=-1) + self.gamma) * normed
