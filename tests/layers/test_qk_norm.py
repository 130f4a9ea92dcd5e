"""QK-norm: a norm over each head's q and k, built into timm's Attention, on any entry; which norm each gets."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from normbench.layers import DyT, LayerNorm, QKNorm, RMSNorm
from tests.layers._cases import tiny_vit

HEAD_DIM = 16  # TINY: embed_dim 32, 2 heads


def test_every_block_of_layerscale_qk_norm_has_q_and_k_norms_over_head_dim():
    model = tiny_vit("layerscale+qk_norm")
    for block in model.blocks:
        q_norm, k_norm = block.attn.q_norm, block.attn.k_norm
        assert q_norm is not k_norm, "q and k have a norm each"
        for norm in (q_norm, k_norm):
            assert isinstance(norm, LayerNorm) and norm.normalized_shape == (HEAD_DIM,)


def test_without_the_modifier_there_is_no_qk_norm():
    for block in tiny_vit("layerscale").blocks:
        assert isinstance(block.attn.q_norm, nn.Identity) and isinstance(block.attn.k_norm, nn.Identity)


@pytest.mark.parametrize(("layer", "cls"), [
    ("layernorm+qk_norm", LayerNorm), ("rmsnorm+qk_norm", RMSNorm), ("dyt+qk_norm", DyT),
    ("rezero+qk_norm", QKNorm), ("learnable_scaler+qk_norm", QKNorm), ("fixup+qk_norm", QKNorm),
    ("res_post_norm+qk_norm", LayerNorm),
])
def test_q_and_k_get_the_entrys_norm_when_it_normalizes_else_layernorm(layer, cls):
    attn = tiny_vit(layer).blocks[0].attn
    assert type(attn.q_norm) is cls and type(attn.k_norm) is cls


def test_the_entrys_norm_kwargs_reach_q_and_k():
    attn = tiny_vit("dyt+qk_norm", norm_kwargs={"alpha_init": 1.5}).blocks[0].attn
    assert attn.q_norm.alpha.item() == 1.5 and attn.k_norm.alpha.item() == 1.5


@pytest.mark.parametrize("fused", [True, False])
@torch.no_grad()
def test_attention_normalizes_each_heads_q_and_k_before_the_dot_product(fused):
    attn = tiny_vit("layerscale+qk_norm").blocks[0].attn.eval()
    attn.fused_attn = fused
    with torch.no_grad():  # non-trivial norm weights: a norm that is skipped would show
        for p in (*attn.q_norm.parameters(), *attn.k_norm.parameters()):
            p.copy_(torch.randn_like(p))
    x = torch.randn(2, 5, 32)
    q, k, v = attn.qkv(x).reshape(2, 5, 3, 2, HEAD_DIM).permute(2, 0, 3, 1, 4)
    q, k = F.layer_norm(q, (HEAD_DIM,), attn.q_norm.weight, attn.q_norm.bias, 1e-6), \
        F.layer_norm(k, (HEAD_DIM,), attn.k_norm.weight, attn.k_norm.bias, 1e-6)
    heads = ((q @ k.transpose(-2, -1)) / HEAD_DIM ** 0.5).softmax(-1) @ v  # (B, H, N, d_h)
    expected = attn.proj(heads.transpose(1, 2).reshape(2, 5, 32))
    torch.testing.assert_close(attn(x), expected, rtol=1e-5, atol=1e-5)
