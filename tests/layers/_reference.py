"""Hand-written references for the layer tests: a pre-norm sublayer computed from a block's weights with plain
matrix products, independent of timm's and normbench's forward code, so that a test compares a module with its
equation rather than with itself."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def heads(t: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, N, C) -> (B, H, N, d_h), head h at channels [h·d_h, (h+1)·d_h) as timm lays them out."""
    B, N, C = t.shape
    return t.view(B, N, num_heads, C // num_heads).transpose(1, 2)


def qkv(attn: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v (B, H, N, d_h) from a timm Attention's fused qkv weight, by hand."""
    C = x.shape[-1]
    weight, bias = attn.qkv.weight, attn.qkv.bias
    out = [x @ weight[i * C:(i + 1) * C].T + (bias[i * C:(i + 1) * C] if bias is not None else 0) for i in range(3)]
    return tuple(heads(t, attn.num_heads) for t in out)  # type: ignore[return-value]


def attention(attn: nn.Module, x: torch.Tensor, *, norms: tuple | None = None, v_first: torch.Tensor | None = None,
              v_first_weight: float = 0.0, gate: tuple[torch.Tensor, torch.Tensor | None] | None = None
              ) -> torch.Tensor:
    """proj(gate ⊙ softmax(q kᵀ/√d_h) v) by hand. `norms`: (q, k, v) callables applied per head; `v_first`: values
    (B, H, N, d_h) mixed in as w·v_first + (1 - w)·v; `gate`: (W, b) of σ(x Wᵀ + b) on the heads' output."""
    q, k, v = qkv(attn, x)
    if norms is not None:
        q, k, v = norms[0](q), norms[1](k), norms[2](v)
    if v_first is not None:
        v = v_first_weight * v_first + (1 - v_first_weight) * v
    probs = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]), dim=-1)
    out = (probs @ v).transpose(1, 2).flatten(-2)
    if gate is not None:
        weight, bias = gate
        out = out * torch.sigmoid(x @ weight.T + (bias if bias is not None else 0))
    return out @ attn.proj.weight.T + attn.proj.bias


def mlp(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """fc2(GELU(fc1 x)) by hand from a timm Mlp's weights."""
    hidden = F.gelu(x @ m.fc1.weight.T + m.fc1.bias)
    return hidden @ m.fc2.weight.T + m.fc2.bias


def layer_norm(norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """γ (x - μ)/√(σ² + ε) + β by hand from a LayerNorm's weights."""
    mu = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    return (x - mu) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def randomize_(module: nn.Module, scale: float = 0.1, seed: int = 5) -> nn.Module:
    """Perturb every parameter (zero-initialised ones would hide wrong wiring), reproducibly."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * torch.randn(p.shape, generator=generator, dtype=p.dtype))
    return module
