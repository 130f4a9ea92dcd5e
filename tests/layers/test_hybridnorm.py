"""HybridNorm (Zhuo et al. 2025): QKV-norm inside attention with no norm before it, then the FFN's norm on the stream
and the FFN's residual taken after it; HybridNorm* makes block 0 pre-norm. Checked against hand-written blocks."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from normbench.layers import LayerError, RMSNorm, resolve_layer
from tests.layers._cases import tiny_vit
from tests.layers._reference import attention, layer_norm, mlp, randomize_


def qkv_norms(attn: nn.Module) -> tuple:
    return (lambda q: layer_norm(attn.q_norm, q), lambda k: layer_norm(attn.k_norm, k),
            lambda v: layer_norm(attn.v_norm, v))


def hybrid_block(block: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """y = x + Attn_QKV(x); x_next = norm(y) + FFN(norm(y))."""
    y = x + attention(block.attn, x, norms=qkv_norms(block.attn))
    y = layer_norm(block.norm2, y)
    return y + mlp(block.mlp, y)


def test_a_hybridnorm_block_matches_the_official_block():
    model = randomize_(tiny_vit("hybridnorm")).eval()
    x = torch.randn(2, 17, 32)
    for block in model.blocks:
        torch.testing.assert_close(block(x), hybrid_block(block, x), rtol=1e-5, atol=1e-5)


def test_hybridnorm_star_makes_block_0_pre_norm_with_its_qkv_norms():
    model = randomize_(tiny_vit("hybridnorm_star")).eval()
    x = torch.randn(2, 17, 32)
    first = model.blocks[0]
    y = x + attention(first.attn, layer_norm(first.norm1, x), norms=qkv_norms(first.attn))
    y = y + mlp(first.mlp, layer_norm(first.norm2, y))
    torch.testing.assert_close(first(x), y, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(model.blocks[1](x), hybrid_block(model.blocks[1], x), rtol=1e-5, atol=1e-5)


def test_the_blocks_have_qkv_norms_over_each_head_and_no_norm_before_attention():
    model = tiny_vit("hybridnorm")
    for block in model.blocks:
        assert isinstance(block.norm1, nn.Identity)
        for norm in (block.attn.q_norm, block.attn.k_norm, block.attn.v_norm):
            assert isinstance(norm, nn.LayerNorm) and norm.normalized_shape == (16,)  # d_h = 32 / 2 heads
    star = tiny_vit("hybridnorm_star")
    assert isinstance(star.blocks[0].norm1, nn.LayerNorm) and isinstance(star.blocks[1].norm1, nn.Identity)
    assert isinstance(model.norm, nn.LayerNorm), "OLMo's final norm is kept"


def test_the_sources_rmsnorm_goes_to_q_k_and_v():
    block = tiny_vit("rmsnorm+hybridnorm").blocks[0]
    assert all(isinstance(n, RMSNorm) for n in (block.attn.q_norm, block.attn.k_norm, block.attn.v_norm, block.norm2))


@pytest.mark.parametrize("layer", ["hybridnorm+qk_norm", "hybridnorm_star+qk_norm"])
def test_qk_norm_on_top_is_refused_in_one_line(layer):
    with pytest.raises(LayerError, match="takes no modifier .*q, k and v are normalised already") as excinfo:
        resolve_layer(layer)
    assert "\n" not in str(excinfo.value)
