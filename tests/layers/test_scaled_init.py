"""GPT-2's scaled init (nanoGPT's c_proj): residual output projections at std 0.02/√(2·depth), the rest at 0.02."""

from __future__ import annotations

import math

import pytest
import torch

from normbench.layers import ScaledInitBlock, scaled_init_std
from tests.layers._cases import tiny_vit


def _pooled(model: torch.nn.Module, name: str) -> torch.Tensor:
    return torch.cat([b.get_submodule(name).weight.flatten() for b in model.blocks])


def test_output_projections_have_std_002_over_sqrt_72_at_depth_36():
    model = tiny_vit("scaled_init", depth=36)
    assert all(isinstance(b, ScaledInitBlock) for b in model.blocks)
    assert scaled_init_std(36) == 0.02 / math.sqrt(72)
    weights = torch.cat([_pooled(model, "attn.proj"), _pooled(model, "mlp.fc2")])  # 36 x (32·32 + 128·32) draws
    # relative standard error of a sample std from n normal draws: 1/√(2n) = 0.16% here; 1% is > 6 errors
    assert weights.std().item() == pytest.approx(0.02 / math.sqrt(72), rel=0.01)
    assert weights.mean().abs().item() < 4 * 0.02 / math.sqrt(72) / math.sqrt(weights.numel())


def test_every_other_weight_keeps_std_002():
    model = tiny_vit("scaled_init", depth=36)
    for name in ("attn.qkv", "mlp.fc1"):
        assert _pooled(model, name).std().item() == pytest.approx(0.02, rel=0.01), name


def test_the_block_is_pre_ln():
    block = tiny_vit("scaled_init").blocks[0].eval()
    x = torch.randn(2, 17, 32)
    with torch.no_grad():
        mid = x + block.attn(block.norm1(x))
        torch.testing.assert_close(block(x), mid + block.mlp(block.norm2(mid)))
