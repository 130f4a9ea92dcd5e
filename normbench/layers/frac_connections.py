"""Frac-connections (Zhu et al., ByteDance Seed 2025, arXiv 2503.14125): hyper-connections that split the hidden state
into m fractions instead of widening it into n streams (expansion rate n = 1/m), dynamic (the paper's DFC; DFC×4,
m = 4, its headline).

Per sublayer, on x (B, N, C) seen as F (B, N, m, c), c = C/m (hyper_connections.py's Algorithm 2 with rows for
fractions and m layer-input columns for the one stream):

    width connection    [F_in; F'] = αᵀ F            α (m, 2m) = [A_m | A_r]: F_in = A_mᵀ F, F' = A_rᵀ F
    the sublayer        y = gate(F(norm(cat(F_in))))   the suite's norm and gate slots, timm's Attention / Mlp
    depth connection    F ← diag(β) split(y) + F'     β (m,): fraction i of the output goes to fraction i
    dynamic (DFC)       α = s_α·tanh(F̄ W_α) + α_static, β = s_β·tanh(F̄ W_β) + β_static, F̄ = LayerNorm over each
                        fraction's c channels, W_α (c, 2m) and W_β (c,) zero, s_α = s_β = 0.01

Init: A_m = A_r = I_m, β = 1, W = 0: at step 0 each sublayer reads x and adds its output to x, the pre-norm block.
No code is released and the paper's Sec. 3 could not be read here: the form is the authors' HC Algorithm 2 for
fractions, as the same team's Generalized Hyper-Connections (Virtual Width Networks, arXiv 2511.11238, Eq. 5-6, 11-12)
reduce to with as many fractions as streams (n = m) and B at its init diagonal, and as the independent
hcfactory implementation (m×2m mixing, LayerNorm per fraction, A_m = A_r = I, B = 1) writes it; its LayerNorm
and dynamic scales are HC's (Eq. 10-13). The stream keeps its shape (B, N, C): no expand or merge step.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

from typing import Any

import torch
from torch import nn

from normbench.layers._util import check_count_argument, no_decay
from normbench.layers.blocks import PreNormBlock
from normbench.layers.hyper_connections import DYNAMIC_SCALE_INIT
from normbench.layers.norms import LayerNorm
from normbench.layers.registry import Family, LayerError, register_layer

DEFAULT_FRAC_RATE = 4  # m: the paper's DFC×4


def check_frac_rate(frac_rate: Any = DEFAULT_FRAC_RATE, **unknown: Any) -> None:
    """LayerError (one line) unless `frac_rate` is an integer m >= 1 and nothing else is given; whether m divides
    the width is checked when the block is built (the suite knows its width there)."""
    check_count_argument("frac_rate", frac_rate, unknown, family="frac-connection",
                         meaning="the number of fractions m, default 4", noun="number of fractions",
                         hint=" that divides the width (the paper's m = 4)")


class FracConnection(nn.Module):
    """One sublayer's dynamic width and depth connections over m fractions of C channels."""

    def __init__(self, dim: int, frac_rate: int, device=None, dtype=None) -> None:
        super().__init__()
        if dim % frac_rate:
            raise LayerError(f"block_kwargs.frac_rate: {frac_rate} does not divide the width {dim}; use a divisor of "
                             f"{dim} (the paper's m = 4)")
        dd = dict(device=device, dtype=dtype)
        m = self.frac_rate = frac_rate
        self.frac_dim = dim // m
        self.static_alpha = nn.Parameter(torch.empty(m, 2 * m, **dd))
        self.static_beta = nn.Parameter(torch.empty(m, **dd))
        self.dynamic_alpha_fn = nn.Parameter(torch.empty(self.frac_dim, 2 * m, **dd))
        self.dynamic_alpha_scale = nn.Parameter(torch.empty(1, **dd))
        self.dynamic_beta_fn = nn.Parameter(torch.empty(self.frac_dim, **dd))
        self.dynamic_beta_scale = nn.Parameter(torch.empty(1, **dd))
        self.layer_norm = LayerNorm(self.frac_dim, **dd)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        m = self.frac_rate
        self.static_alpha.copy_(torch.cat([torch.eye(m), torch.eye(m)], dim=1))  # A_m = A_r = I
        nn.init.ones_(self.static_beta)                                          # β = 1
        nn.init.zeros_(self.dynamic_alpha_fn)
        nn.init.zeros_(self.dynamic_beta_fn)
        nn.init.constant_(self.dynamic_alpha_scale, DYNAMIC_SCALE_INIT)
        nn.init.constant_(self.dynamic_beta_scale, DYNAMIC_SCALE_INIT)
        for p in self.parameters(recurse=False):
            no_decay(p)

    def width(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(the sublayer's input (B, N, C), the mixed fractions F' (B, N, m, c), β (B, N, m))."""
        fracs = x.unflatten(-1, (self.frac_rate, self.frac_dim))
        normed = self.layer_norm(fracs)
        alpha = torch.tanh(normed @ self.dynamic_alpha_fn) * self.dynamic_alpha_scale + self.static_alpha
        beta = torch.tanh(normed @ self.dynamic_beta_fn) * self.dynamic_beta_scale + self.static_beta
        mixed = alpha.transpose(-1, -2) @ fracs  # (B, N, 2m, c): αᵀ F
        return mixed[..., :self.frac_rate, :].flatten(-2), mixed[..., self.frac_rate:, :], beta

    def depth(self, y: torch.Tensor, mixed: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        """F' + diag(β) split(y), as (B, N, C)."""
        out = mixed + beta.unsqueeze(-1) * y.unflatten(-1, (self.frac_rate, self.frac_dim))
        return out.flatten(-2)


@register_layer("frac_connections", kind="family", partner="layernorm",
                family=Family(check_kwargs=check_frac_rate),
                formula="x as m fractions F (block_kwargs.frac_rate, default 4): in = cat(A_mᵀF), F ← A_rᵀF + "
                        "diag(β) split(F(norm(in))); A, β + 0.01·tanh(LN(F) W); init A_m = A_r = I, β = 1, W = 0 "
                        "(= pre-norm)",
                source="Zhu et al. 2025, Frac-Connections: Fractional Extension of Hyper-Connections (arXiv "
                       "2503.14125), DFC×4; no code released: HC's Algorithm 2 over fractions, as the authors' GHC "
                       "(arXiv 2511.11238, Eq. 5-6, 11-12) gives with n = m (normbench/layers/frac_connections.py)")
class FracConnectionBlock(PreNormBlock):
    """A pre-norm block whose two residual connections are frac-connections (`frac1`, `frac2`) around the same timm
    Attention, Mlp and slots. Carries (B, N, C)."""

    def __init__(self, dim: int, num_heads: int, *, depth: int, block_index: int = 0,
                 frac_rate: int = DEFAULT_FRAC_RATE, **kwargs: Any) -> None:
        check_frac_rate(frac_rate)
        super().__init__(dim, num_heads, depth=depth, block_index=block_index, **kwargs)
        self.frac1 = FracConnection(dim, frac_rate)
        self.frac2 = FracConnection(dim, frac_rate)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        branch, mixed, beta = self.frac1.width(x)
        x = self.frac1.depth(self.drop_path1(self.ls1(self.attn(self.norm1(branch)))), mixed, beta)
        branch, mixed, beta = self.frac2.width(x)
        x = self.frac2.depth(self.drop_path2(self.ls2(self.mlp(self.norm2(branch)))), mixed, beta)
        return x
