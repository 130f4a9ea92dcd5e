"""NormFormer: pre-LN plus a post-attention norm, a per-head scale before W_O (init 1) and a norm after the MLP's
activation, each of the combination's norm class."""

from __future__ import annotations

import pytest
import torch

from normbench.layers import HeadScale, LayerError, LayerNorm, RMSNorm, resolve_layer
from tests.layers._cases import tiny_vit


def test_it_builds_its_three_additions_with_the_combinations_norm():
    for layer, cls in (("normformer", LayerNorm), ("rmsnorm+normformer", RMSNorm)):
        for block in tiny_vit(layer).blocks:
            assert isinstance(block.attn.norm, HeadScale), "timm's slot between the heads and proj"
            assert torch.equal(block.attn.norm.gamma, torch.ones(2)), "one learnable scale per head, init 1"
            assert type(block.post_attn_norm) is cls and block.post_attn_norm.normalized_shape == (32,)
            assert type(block.mlp.norm) is cls and block.mlp.norm.normalized_shape == (128,), "after the activation"
            assert type(block.norm1) is cls


@torch.no_grad()
def test_head_scale_multiplies_each_heads_output_before_the_output_projection():
    block = tiny_vit("normformer").blocks[0].eval()
    attn = block.attn
    attn.norm.gamma.copy_(torch.tensor([0.5, 3.0]))
    x = torch.randn(2, 5, 32)
    q, k, v = attn.qkv(x).reshape(2, 5, 3, 2, 16).permute(2, 0, 3, 1, 4)
    heads = ((q @ k.transpose(-2, -1)) / 4).softmax(-1) @ v  # (B, H, N, d_h)
    heads = heads * torch.tensor([0.5, 3.0]).view(1, 2, 1, 1)
    torch.testing.assert_close(attn(x), attn.proj(heads.transpose(1, 2).reshape(2, 5, 32)), rtol=1e-5, atol=1e-5)


@torch.no_grad()
def test_block_equation():
    block = tiny_vit("normformer").blocks[1].eval()
    for p in block.parameters():
        p.add_(0.1 * torch.randn_like(p))
    x = torch.randn(2, 17, 32)
    mid = x + block.post_attn_norm(block.attn(block.norm1(x)))
    mlp = block.mlp
    hidden = mlp.norm(mlp.act(mlp.fc1(block.norm2(mid))))
    torch.testing.assert_close(block(x), mid + mlp.fc2(hidden))


def test_a_second_module_before_fc2_is_refused():
    with pytest.raises(LayerError, match="before the MLP's fc2"):
        resolve_layer("fixup+normformer")
