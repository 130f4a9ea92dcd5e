"""Depth-μP: each residual branch times a/√L (fixed), block weights N(0, 1/fan_in) whatever the depth."""

from __future__ import annotations

import pytest
import torch

from normbench.layers import DepthMuPScale, LayerNorm
from tests.layers._cases import tiny_vit


@pytest.mark.parametrize(("depth", "multiplier"), [(4, 0.5), (16, 0.25), (36, 1 / 6)])
def test_every_branch_is_multiplied_by_one_over_sqrt_depth(depth, multiplier):
    model = tiny_vit("depth_mup", depth=depth, embed_dim=16)
    for block in model.blocks:
        for gate in (block.ls1, block.ls2):
            assert isinstance(gate, DepthMuPScale) and gate.multiplier == pytest.approx(multiplier, rel=1e-12)
            assert not list(gate.parameters()), "fixed, not learned"
        assert isinstance(block.norm1, LayerNorm), "pre-LN"


def test_init_values_sets_the_papers_constant_a():
    assert DepthMuPScale(8, depth=16, init_values=2.0).multiplier == 0.5


@torch.no_grad()
def test_block_equation():
    block = tiny_vit("depth_mup", depth=16).blocks[3].eval()
    x = torch.randn(2, 17, 32)
    mid = x + 0.25 * block.attn(block.norm1(x))
    torch.testing.assert_close(block(x), mid + 0.25 * block.mlp(block.norm2(mid)))


def test_block_weights_have_variance_one_over_fan_in_at_every_depth():
    for depth in (2, 12):
        model = tiny_vit("depth_mup", depth=depth)
        for name in ("attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2"):
            linears = [b.get_submodule(name) for b in model.blocks]
            weights = torch.cat([lin.weight.flatten() for lin in linears])
            fan_in = linears[0].in_features
            # n >= 2048 draws: the sample std is within 5% of its value with probability > 0.99
            assert weights.std().item() == pytest.approx(fan_in ** -0.5, rel=0.05), (depth, name)
            assert all(torch.equal(lin.bias, torch.zeros_like(lin.bias)) for lin in linears)
