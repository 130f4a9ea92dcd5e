"""Value residuals (ResFormer, Zhou et al. 2024): blocks n ≥ 1 attend with 0.5·V_1 + 0.5·V_n, V_1 block 0's values,
not detached. A whole model against a hand-written forward; pre-LN's model with one block; block_kwargs refused."""

from __future__ import annotations

import pytest
import torch

from normbench.layers import LayerError, resolve_layer
from normbench.layers.value_residual import VALUE_FIRST_WEIGHT
from tests.layers._cases import images, tiny_vit
from tests.layers._reference import attention, layer_norm, mlp, qkv, randomize_


def resformer_logits(model, x: torch.Tensor) -> torch.Tensor:
    """The official loop: block 0 keeps its values as V_1; every later block mixes 0.5 V_1 + 0.5 V_n."""
    h = model._pos_embed(model.patch_embed(x))
    v_first = None
    for block in model.blocks:
        normed = layer_norm(block.norm1, h)
        if v_first is None:
            v_first = qkv(block.attn, normed)[2]
            h = h + attention(block.attn, normed)
        else:
            h = h + attention(block.attn, normed, v_first=v_first, v_first_weight=0.5)
        h = h + mlp(block.mlp, layer_norm(block.norm2, h))
    return model.forward_head(layer_norm(model.norm, h))


def test_a_model_matches_the_official_loop():
    model = randomize_(tiny_vit("value_residual", depth=4)).eval()
    x = images()
    torch.testing.assert_close(model(x), resformer_logits(model, x), rtol=1e-5, atol=1e-5)


def test_the_first_blocks_values_are_carried_and_keep_their_gradient():
    model = randomize_(tiny_vit("value_residual", depth=3)).eval()
    tokens = model.expand(model._pos_embed(model.patch_embed(images())))
    assert tokens.shape[-2] == 1
    out = model.blocks[0](tokens)
    assert out.shape[-2] == 2
    first = model.blocks[0]
    # V_1 as the v projection lays it out (head h at channels h·d_h ...), the v rows of the fused qkv
    v = layer_norm(first.norm1, tokens[..., 0, :]) @ first.attn.qkv.weight[64:].T + first.attn.qkv.bias[64:]
    torch.testing.assert_close(out[..., 1, :], v, rtol=1e-5, atol=1e-6)


def test_v1_is_not_detached_so_block_0s_values_learn_from_every_later_block():
    model = randomize_(tiny_vit("value_residual", depth=3)).eval()
    x = images()
    params = list(model.parameters())
    got = torch.autograd.grad(model(x).square().sum(), params)
    want = torch.autograd.grad(resformer_logits(model, x).square().sum(), params)  # autograd through the official loop
    for name, g, w in zip((n for n, _ in model.named_parameters()), got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-6, msg=name)


def test_the_mixing_weight_is_the_sources_one_half_and_block_0_does_not_mix():
    assert VALUE_FIRST_WEIGHT == 0.5
    model = tiny_vit("value_residual")
    assert [b.first for b in model.blocks] == [True, False, False]
    assert all(b.attn.value_first_weight == 0.5 for b in model.blocks)


def test_with_one_block_it_is_the_pre_norm_model():
    residual, layernorm = tiny_vit("value_residual", depth=1), tiny_vit("layernorm", depth=1)
    assert residual.state_dict().keys() == layernorm.state_dict().keys()
    residual.load_state_dict(layernorm.state_dict())
    torch.testing.assert_close(residual(images()), layernorm(images()), rtol=0, atol=1e-6)


def test_block_kwargs_are_refused_in_one_line():
    with pytest.raises(LayerError, match="`lam` is not an argument of `value_residual`") as excinfo:
        resolve_layer("value_residual").check_block_kwargs({"lam": 0.3})
    assert "\n" not in str(excinfo.value)
