"""Hyper-connections (Zhu et al., ICLR 2025, arXiv 2409.19606), static (`hc`) and dynamic (`hc_dynamic`): a block
family whose residual stream is n parallel streams mixed by learnable matrices.

The paper's Algorithm 2 (Appendix J), per sublayer (attention, then MLP) of a pre-norm block, on the streams
H (B, N, n, C):

    width connection    [h₀; H'] = αᵀ H                α (n, n+1) = [A_m | A_r]: h₀ = A_mᵀ H, H' = A_rᵀ H
    the sublayer        y = gate(F(norm(h₀)))          the suite's norm and gate slots, timm's Attention / Mlp
    depth connection    H ← Bᵀ y + H'                  B (n,): stream i receives β_i y

Static (`hc`): α and β are parameters. Dynamic (`hc_dynamic`, the paper's DHC, Eq. 10-13): each gets a token-wise
term from the streams themselves, H̄ = LayerNorm(H) (per stream, over C),

    α = s_α · tanh(H̄ W_α) + α_static        W_α (C, n+1) zero-initialised, s_α = 0.01
    β = s_β · tanh(H̄ W_β) + β_static        W_β (C,)     zero-initialised, s_β = 0.01

Initialisation (Eq. 14), the k-th sublayer (k = 2·block + 0 for attention, + 1 for the MLP): A_m = e_{k mod n},
A_r = I_n, B = 1; with W = 0 the dynamic terms are 0. Before the first block the n streams are copies of the embedded
tokens (`StreamExpand`), after the last they are summed (`StreamSum`) and the model's final norm follows. At step 0
every stream therefore equals the pre-norm residual x_k of the plain model and the sum is n·x_L, which the final
LayerNorm maps to LayerNorm(x_L) (up to its ε): the same logits as `layernorm` with the same weights.

Ours, not the `hyper-connections` package (lucidrains, PyPI 0.4.11, hyper_connections/hyper_connections.py), which
computes the same width and depth connections (tests/layers/test_hyper_connections.py checks the formulas against
it) but does not fit the template: it folds the streams into the batch ((B·n, N, C)), always builds the dynamic
projections, normalises them with its own RMSNorm where the paper has LayerNorm, picks a random stream for A_m when
no layer index is given, and needs einops. Its parameters are tagged no-weight-decay, as every norm and gate here.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

from typing import Any

import torch
from torch import nn

from normbench.layers._util import check_count_argument, no_decay
from normbench.layers.blocks import PreNormBlock
from normbench.layers.norms import LayerNorm
from normbench.layers.registry import Family, Tunable, register_layer

DEFAULT_EXPANSION_RATE = 4  # the paper's n (its best trade-off, Sec. 4; DeepSeek's mHC uses the same)
DYNAMIC_SCALE_INIT = 0.01  # s_α, s_β (Algorithm 2: `torch.ones(1) * 0.01`)


def check_expansion_rate(expansion_rate: Any = DEFAULT_EXPANSION_RATE, **unknown: Any) -> None:
    """LayerError (one line) unless `expansion_rate` is an integer n >= 1 and nothing else is given."""
    check_count_argument("expansion_rate", expansion_rate, unknown, family="hyper-connection",
                         meaning="the number of streams n, default 4", noun="number of streams",
                         hint=" (the paper's n = 4; n = 1 is one stream with learnable weights)")


class StreamExpand(nn.Module):
    """Before the first block: n copies of the tokens, (B, N, C) -> (B, N, n, C) (the paper's initial H⁰)."""

    def __init__(self, dim: int, *, depth: int, expansion_rate: int = DEFAULT_EXPANSION_RATE, **_: Any) -> None:
        super().__init__()
        self.expansion_rate = expansion_rate

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N, C) -> (B, N, n, C), a view
        return x.unsqueeze(-2).expand(-1, -1, self.expansion_rate, -1)


class StreamSum(nn.Module):
    """After the last block: the streams summed, (B, N, n, C) -> (B, N, C), before the final norm."""

    def __init__(self, dim: int, *, depth: int, **_: Any) -> None:
        super().__init__()

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h.sum(dim=-2)


class HyperConnection(nn.Module):
    """One sublayer's static width and depth connections (Algorithm 2's `HyperConnection`, dynamic=False).

    Args:
        dim: channels C.
        expansion_rate: streams n.
        layer_id: the sublayer's index k; A_m starts as e_{k mod n}.
    """

    dynamic = False

    def __init__(self, dim: int, expansion_rate: int, layer_id: int, device=None, dtype=None) -> None:
        super().__init__()
        dd = dict(device=device, dtype=dtype)
        self.expansion_rate, self.layer_id = expansion_rate, layer_id
        n = expansion_rate
        self.static_alpha = nn.Parameter(torch.empty(n, n + 1, **dd))
        self.static_beta = nn.Parameter(torch.empty(n, **dd))
        if self.dynamic:
            self.dynamic_alpha_fn = nn.Parameter(torch.empty(dim, n + 1, **dd))
            self.dynamic_alpha_scale = nn.Parameter(torch.empty(1, **dd))
            self.dynamic_beta_fn = nn.Parameter(torch.empty(dim, **dd))
            self.dynamic_beta_scale = nn.Parameter(torch.empty(1, **dd))
            self.layer_norm = LayerNorm(dim, **dd)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        n = self.expansion_rate
        self.static_alpha.zero_()
        self.static_alpha[self.layer_id % n, 0] = 1.0  # A_m = e_{k mod n}
        self.static_alpha[:, 1:].copy_(torch.eye(n))   # A_r = I
        nn.init.ones_(self.static_beta)                # B = 1
        if self.dynamic:
            nn.init.zeros_(self.dynamic_alpha_fn)
            nn.init.zeros_(self.dynamic_beta_fn)
            nn.init.constant_(self.dynamic_alpha_scale, DYNAMIC_SCALE_INIT)
            nn.init.constant_(self.dynamic_beta_scale, DYNAMIC_SCALE_INIT)
        for p in self.parameters(recurse=False):
            no_decay(p)

    def coefficients(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(α, β) for the streams h (B, N, n, C): the static (n, n+1) and (n,)."""
        return self.static_alpha, self.static_beta
    def width(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The width connection: (sublayer input h₀ (B, N, C), mixed streams H' (B, N, n, C), β)."""
        alpha, beta = self.coefficients(h)
        mixed = alpha.transpose(-1, -2).to(h.dtype) @ h  # (B, N, n+1, C): αᵀ H
        return mixed[..., 0, :], mixed[..., 1:, :], beta

    def depth(self, y: torch.Tensor, mixed: torch.Tensor, beta: torch.Tensor) -> torch.Tensor:
        """The depth connection: stream i gets β_i y. (B, N, C), (B, N, n, C) -> (B, N, n, C)."""
        return mixed + beta.unsqueeze(-1).to(y.dtype) * y.unsqueeze(-2)


class DynamicHyperConnection(HyperConnection):
    """Algorithm 2 with dynamic=True (DHC): α and β also depend on the streams, through tanh of their LayerNorm."""

    dynamic = True

    def coefficients(self, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(α (B, N, n, n+1), β (B, N, n)) for the streams h (B, N, n, C)."""
        normed = self.layer_norm(h)
        alpha = torch.tanh(normed @ self.dynamic_alpha_fn) * self.dynamic_alpha_scale + self.static_alpha
        beta = torch.tanh(normed @ self.dynamic_beta_fn) * self.dynamic_beta_scale + self.static_beta
        return alpha, beta


def hyper_connection(dim: int, expansion_rate: int, layer_id: int, dynamic: bool) -> HyperConnection:
    """The static or the dynamic connection of one sublayer."""
    return (DynamicHyperConnection if dynamic else HyperConnection)(dim, expansion_rate, layer_id)


class HyperConnectionBlock(PreNormBlock):
    """A pre-norm block whose two residual connections are hyper-connections: the same timm Attention, Mlp, norm and
    gate slots (keys `norm1`, `attn`, `ls1`, ... as timm's Block), plus `hc1`, `hc2`. Carries (B, N, n, C)."""

    dynamic = False

    def __init__(self, dim: int, num_heads: int, *, depth: int, block_index: int = 0,
                 expansion_rate: int = DEFAULT_EXPANSION_RATE, **kwargs: Any) -> None:
        check_expansion_rate(expansion_rate)
        super().__init__(dim, num_heads, depth=depth, block_index=block_index, **kwargs)
        self.hc1 = hyper_connection(dim, expansion_rate, 2 * block_index, self.dynamic)
        self.hc2 = hyper_connection(dim, expansion_rate, 2 * block_index + 1, self.dynamic)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (B, N, n, C) -> (B, N, n, C)
        x, h, beta = self.hc1.width(h)
        h = self.hc1.depth(self.drop_path1(self.ls1(self.attn(self.norm1(x)))), h, beta)
        x, h, beta = self.hc2.width(h)
        h = self.hc2.depth(self.drop_path2(self.ls2(self.mlp(self.norm2(x)))), h, beta)
        return h


HC_FAMILY = Family(expand=StreamExpand, merge=StreamSum, check_kwargs=check_expansion_rate)
_SOURCE = ("Zhu et al. 2025, Hyper-Connections (ICLR), Algorithm 2 (App. J) and Eq. 14 init; ours, checked against "
           "the hyper-connections package (lucidrains, PyPI 0.4.11) hyper_connections/hyper_connections.py "
           "HyperConnections.width_connection/depth_connection; streams summed before the final norm")


# the rates the paper's ablation trains (Sec. 4.1, 1B models: n = 1, 2, 4, 8; its vision runs use 2)
EXPANSION_RATES = Tunable("expansion_rate", "block_kwargs.expansion_rate", choices=(1, 2, 4, 8),
                          default=lambda depth: DEFAULT_EXPANSION_RATE,
                          source="Zhu et al. 2024, Hyper-Connections, Sec. 4.1 ablation of the expansion rate n")


@register_layer("hc", kind="family", partner="layernorm", family=HC_FAMILY, tunables=(EXPANSION_RATES,),
                formula="n streams H (block_kwargs.expansion_rate, default 4): h₀ = A_mᵀH, H ← A_rᵀH + Bᵀ F(norm(h₀)); "
                        "init A_m = e_(k mod n), A_r = I, B = 1 (a pre-norm residual at step 0); H⁰ = n copies, "
                        "summed before the final norm",
                source=_SOURCE)
class StaticHyperConnectionBlock(HyperConnectionBlock):
    """Static hyper-connections (SHC): α and β are parameters."""


@register_layer("hc_dynamic", kind="family", partner="layernorm", family=HC_FAMILY, tunables=(EXPANSION_RATES,),
                formula="hc with token-wise terms: α = 0.01·tanh(LN(H) W_α) + α_static, β = 0.01·tanh(LN(H) W_β) + "
                        "β_static; W_α, W_β = 0 at init",
                source=_SOURCE.replace("Algorithm 2", "Algorithm 2 (dynamic), Eq. 10-13"))
class DynamicHyperConnectionBlock(HyperConnectionBlock):
    """Dynamic hyper-connections (DHC): α and β also depend on the streams through tanh, scaled by s = 0.01."""

    dynamic = True
