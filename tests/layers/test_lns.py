"""LayerNorm Scaling: each pre-norm's output scaled by 1/√ℓ, ℓ the block's 1-based depth (official code)."""

from __future__ import annotations

import math

import torch

from normbench.layers import LNSBlock, lns_scale
from tests.layers._cases import tiny_vit


def test_block_9_scales_by_one_third_and_block_1_by_one():
    model = tiny_vit("lns", depth=12)
    assert all(isinstance(b, LNSBlock) for b in model.blocks)
    assert model.blocks[8].lns_scale == 1 / 3  # the ninth block: ℓ = 9
    assert model.blocks[0].lns_scale == 1.0
    assert [b.lns_scale for b in model.blocks] == [1 / math.sqrt(i + 1) for i in range(12)]
    assert lns_scale(8) == 1 / 3


@torch.no_grad()
def test_both_sublayers_see_the_scaled_norm_output():
    block = tiny_vit("lns", depth=9).blocks[8].eval()
    with torch.no_grad():
        for p in block.parameters():
            p.add_(0.1 * torch.randn_like(p))
    x = torch.randn(2, 17, 32)
    mid = x + block.attn(block.norm1(x) / 3)
    torch.testing.assert_close(block(x), mid + block.mlp(block.norm2(mid) / 3))
    assert not torch.allclose(block(x), mid + block.mlp(block.norm2(mid))), "the MLP's input is scaled too"


def test_the_scale_is_a_constant_not_a_parameter():
    model = tiny_vit("lns", depth=4)
    assert sum(p.numel() for p in model.parameters()) == sum(p.numel() for p in tiny_vit("layernorm", depth=4)
                                                           .parameters())
