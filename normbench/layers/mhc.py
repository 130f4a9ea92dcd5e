"""mHC, manifold-constrained hyper-connections (Xie et al., DeepSeek, arXiv 2512.24880): hyper-connections whose
residual mixing matrix is projected onto the doubly stochastic matrices, restoring the identity path's conservation
(row and column sums 1, so the mean over streams passes through any product of them) that plain hyper-connections
lose at scale.

Per sublayer, on the streams x (B, N, n, C) (the paper's Eq. 3, 7-9):

    x̃ = RMSNorm(vec(x))                                  over all n·C features of a token
    H̃_pre  = α_pre  · x̃ φ_pre  + b_pre                  (n,)
    H̃_post = α_post · x̃ φ_post + b_post                 (n,)
    H̃_res  = α_res  · mat(x̃ φ_res) + b_res              (n, n)
    H_pre = σ(H̃_pre),  H_post = 2σ(H̃_post),  H_res = Sinkhorn-Knopp(H̃_res)
    x ← H_res x + H_postᵀ F(H_pre x)                      F: the sublayer with the suite's norm and gate slots

Sinkhorn-Knopp as the paper's Eq. 9: M⁽⁰⁾ = exp(H̃_res), then t_max = 20 alternations of column and row
normalisation (rows sum to 1 exactly after the last, columns to within the iterations' residual, which grows with
the logits' range: tests/layers/test_mhc.py checks 1e-3 on every matrix at init and after training, and telemetry
records it as `mix_ds_error`). n = 4 and the gating factors α start at 0.01, the paper's
values.

Where public implementations differ, this follows the paper, and says what it chose where the paper is silent:
- the post map is 2σ (the paper; lucidrains' hyper-connections `manifold_constrained_hyper_connections.py` agrees).
  DeepSeek-V4's released code adds an ε to σ(pre) and starts Sinkhorn from softmax + ε: kernels' guards against
  exact zeros, not part of the method; here exp is taken after subtracting the matrix's max (which Sinkhorn's
  scale invariance leaves without effect) and there is no ε beyond RMSNorm's;
- the projections φ start at 0 (as the dynamic terms of hyper-connections), so at step 0 each map is its bias;
- the biases are not given in the paper. They make each block the pre-norm residual at step 0, as hyper-connections'
  Eq. 14 init does: b_pre = -ln(n-1) (H_pre = 1/n: the stream mean, which is x while the streams are equal copies),
  b_post = 0 (H_post = 1: every stream receives F, as B = 1), b_res = 0 on the diagonal and -8 off it (H_res is
  0.999 on the diagonal and 3.4e-4 off it: the identity path, yet every entry has a gradient; a doubly stochastic
  matrix, so equal streams stay equal). lucidrains' code
  instead puts I into the logits (H_res ≈ 0.47 on the diagonal), σ(1) and σ(0) into H_pre, 2σ(1) into H_post.
The streams are copies of the embedded tokens before the first block and summed after the last, as `hc`.
"""

# No `from __future__ import annotations`: torch.fx copies forward annotations into code TorchScript must resolve

import math
from typing import Any

import torch
from torch import nn

from normbench.layers._util import no_decay
from normbench.layers.blocks import PreNormBlock
from normbench.layers.hyper_connections import StreamExpand, StreamSum, check_expansion_rate
from normbench.layers.norms import RMSNorm
from normbench.layers.registry import Family, register_layer

MHC_STREAMS = 4           # the paper's n
SINKHORN_ITERS = 20       # the paper's t_max
GATING_INIT = 0.01        # the paper's α init
RES_OFF_DIAGONAL = -8.0   # b_res off the diagonal: H_res at step 0 has 0.999 on the diagonal, 3.4e-4 off it


def sinkhorn_knopp(logits: torch.Tensor, iters: int = SINKHORN_ITERS) -> torch.Tensor:
    """The matrix Sinkhorn-Knopp reaches from exp(logits) (..., n, n) in `iters` alternations of column then row
    normalisation, in float32. Rows sum to 1 exactly; columns to within a residual that
    shrinks with the iterations and grows with the logits' range (near-permutation matrices converge slowly: mHC-lite,
    arXiv 2601.05732), which telemetry's `mix_ds_error` records."""
    logits = logits.float()
    m = torch.exp(logits - logits.amax(dim=(-2, -1), keepdim=True))
    for _ in range(iters):
        m = m / m.sum(dim=-2, keepdim=True)
        m = m / m.sum(dim=-1, keepdim=True)
    return m


def doubly_stochastic_error(m: torch.Tensor) -> torch.Tensor:
    """max |row sum - 1|, |column sum - 1| over every matrix of `m` (..., n, n): 0 for doubly stochastic ones."""
    m = m.detach().float()
    return torch.maximum((m.sum(dim=-1) - 1).abs().amax(), (m.sum(dim=-2) - 1).abs().amax())


class SinkhornKnopp(nn.Module):
    """H_res from its logits; a module so that telemetry can observe every mixing matrix (`residual_mixing`)."""

    residual_mixing = True  # telemetry: this module's output is a residual mixing matrix (B, N, n, n)

    def __init__(self, iters: int = SINKHORN_ITERS) -> None:
        super().__init__()
        self.iters = iters

    def forward(self, logits: torch.Tensor) -> torch.Tensor:
        return sinkhorn_knopp(logits, self.iters)


class ManifoldHyperConnection(nn.Module):
    """One sublayer's H_pre, H_post and H_res (Eq. 7-9) and the update they make (Eq. 3).

    Args:
        dim: channels C.
        expansion_rate: streams n.
    """

    def __init__(self, dim: int, expansion_rate: int = MHC_STREAMS, device=None, dtype=None) -> None:
        super().__init__()
        dd = dict(device=device, dtype=dtype)
        n = self.expansion_rate = expansion_rate
        self.norm = RMSNorm(n * dim, **dd)  # x̃ = RMSNorm(vec(x)), with its learnable weight
        self.phi = nn.Parameter(torch.empty(n * dim, 2 * n + n * n, **dd))  # [φ_pre | φ_post | φ_res]
        self.alpha = nn.Parameter(torch.empty(3, **dd))  # α_pre, α_post, α_res
        self.b_pre = nn.Parameter(torch.empty(n, **dd))
        self.b_post = nn.Parameter(torch.empty(n, **dd))
        self.b_res = nn.Parameter(torch.empty(n, n, **dd))
        self.sinkhorn = SinkhornKnopp()
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        n = self.expansion_rate
        nn.init.zeros_(self.phi)
        nn.init.constant_(self.alpha, GATING_INIT)
        nn.init.constant_(self.b_pre, -math.log(n - 1) if n > 1 else 0.0)
        nn.init.zeros_(self.b_post)
        self.b_res.fill_(RES_OFF_DIAGONAL).fill_diagonal_(0.0)
        for p in self.parameters(recurse=False):
            no_decay(p)
        no_decay(self.norm.weight)

    def maps(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(H_pre (B, N, n), H_post (B, N, n), H_res (B, N, n, n)) for the streams x (B, N, n, C), in float32."""
        n = self.expansion_rate
        flat = self.norm(x.flatten(-2)).float() @ self.phi.float()  # (B, N, 2n + n²), float32 as the paper's kernels
        alpha = self.alpha.float()
        h_pre = torch.sigmoid(alpha[0] * flat[..., :n] + self.b_pre)
        h_post = 2 * torch.sigmoid(alpha[1] * flat[..., n:2 * n] + self.b_post)
        h_res = self.sinkhorn(alpha[2] * flat[..., 2 * n:].unflatten(-1, (n, n)) + self.b_res)
        return h_pre, h_post, h_res

    def width(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(the sublayer's input H_pre x (B, N, C), the mixed streams H_res x (B, N, n, C), H_post)."""
        h_pre, h_post, h_res = self.maps(x)
        branch_in = (h_pre.unsqueeze(-2).to(x.dtype) @ x).squeeze(-2)
        return branch_in, h_res.to(x.dtype) @ x, h_post

    def depth(self, y: torch.Tensor, mixed: torch.Tensor, h_post: torch.Tensor) -> torch.Tensor:
        """H_res x + H_postᵀ y: stream i receives H_post,i · y."""
        return mixed + h_post.unsqueeze(-1).to(y.dtype) * y.unsqueeze(-2)


@register_layer("mhc", kind="family", partner="layernorm",
                family=Family(expand=StreamExpand, merge=StreamSum, check_kwargs=check_expansion_rate),
                formula="x ← H_res x + H_postᵀ F(H_pre x), n = 4 streams; H_pre = σ(·), H_post = 2σ(·), H_res = "
                        "Sinkhorn-Knopp(exp(·)), 20 iterations (doubly stochastic); each α·(RMSNorm(vec x) φ) + b, "
                        "α = 0.01, φ = 0, b: a pre-norm residual at step 0",
                source="Xie et al. 2025, mHC: Manifold-Constrained Hyper-Connections (arXiv 2512.24880), Eq. 3, 7-9, "
                       "t_max = 20, n = 4; the paper's 2σ post map and no ε (DeepSeek-V4's code adds ε guards; "
                       "lucidrains hyper-connections manifold_constrained_hyper_connections.py normalises per stream); "
                       "the biases, unstated in the paper, make step 0 the pre-norm residual (normbench/layers/mhc.py)")
class MHCBlock(PreNormBlock):
    """A pre-norm block whose residual connections are mHC's (`hc1`, `hc2`) around the same timm Attention, Mlp and
    slots. Carries (B, N, n, C)."""

    def __init__(self, dim: int, num_heads: int, *, depth: int, block_index: int = 0,
                 expansion_rate: int = MHC_STREAMS, **kwargs: Any) -> None:
        check_expansion_rate(expansion_rate)
        super().__init__(dim, num_heads, depth=depth, block_index=block_index, **kwargs)
        self.hc1 = ManifoldHyperConnection(dim, expansion_rate)
        self.hc2 = ManifoldHyperConnection(dim, expansion_rate)

    def forward(self, h: torch.Tensor) -> torch.Tensor:  # (B, N, n, C) -> (B, N, n, C)
        x, h, post = self.hc1.width(h)
        h = self.hc1.depth(self.drop_path1(self.ls1(self.attn(self.norm1(x)))), h, post)
        x, h, post = self.hc2.width(h)
        h = self.hc2.depth(self.drop_path2(self.ls2(self.mlp(self.norm2(x)))), h, post)
        return h
