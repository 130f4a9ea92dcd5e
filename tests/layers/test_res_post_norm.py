"""Residual post-norm: Swin v2's zero-initialised norms, OLMo 2's RMSNorm at 1, the block equation, no gate."""

from __future__ import annotations

import pytest
import torch

from normbench.layers import LayerError, LayerNorm, RMSNorm, resolve_layer
from tests.layers._cases import tiny_vit


def _randomize(model: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def test_swin_v2_norms_start_at_weight_0_and_bias_0():
    model = tiny_vit("res_post_norm")
    for block in model.blocks:
        for norm in (block.norm1, block.norm2):
            assert isinstance(norm, LayerNorm)
            assert torch.equal(norm.weight, torch.zeros(32)) and torch.equal(norm.bias, torch.zeros(32))
    assert torch.equal(model.norm.weight, torch.ones(32)), "the final norm keeps its default init"


@torch.no_grad()
def test_swin_v2_blocks_start_as_the_identity():
    model = tiny_vit("res_post_norm").eval()
    x = torch.randn(2, 17, 32)
    for block in model.blocks:
        assert torch.equal(block(x), x)


def test_olmo2_uses_rmsnorm_at_weight_1_and_keeps_the_final_norm():
    model = tiny_vit("res_post_norm_olmo2")
    for block in model.blocks:
        for norm in (block.norm1, block.norm2):
            assert isinstance(norm, RMSNorm) and torch.equal(norm.weight, torch.ones(32))
    assert isinstance(model.norm, RMSNorm)


@pytest.mark.parametrize("layer", ["res_post_norm", "res_post_norm_olmo2"])
@torch.no_grad()
def test_block_adds_the_normalized_branch_to_an_unnormalized_stream(layer):
    block = _randomize(tiny_vit(layer)).blocks[1].eval()
    x = torch.randn(2, 17, 32)
    mid = x + block.norm1(block.attn(x))
    torch.testing.assert_close(block(x), mid + block.norm2(block.mlp(mid)))


@pytest.mark.parametrize("layer", ["res_post_norm+layerscale", "res_post_norm_olmo2+rezero", "peri_ln+layerscale"])
def test_a_gate_after_an_output_norm_is_refused_in_one_line(layer):
    with pytest.raises(LayerError, match="takes no gate") as excinfo:
        resolve_layer(layer)
    assert "\n" not in str(excinfo.value) and excinfo.value.exit_code == 2
