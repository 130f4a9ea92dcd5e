"""CompleteP (Dey et al. 2025): each branch times L_base/L with the official base depth 2 (α = 1), against
Depth-μP's 1/√L; pre-LN's model exactly at L = L_base; no init rule (the init does not depend on depth)."""

from __future__ import annotations

import pytest
import torch

from normbench.layers.completep import CompletePScale
from normbench.layers.depth_mup import DepthMuPScale
from tests.layers._cases import images, tiny_vit
from tests.layers._reference import attention, layer_norm, mlp, randomize_


@pytest.mark.parametrize("depth", [1, 2, 12, 36])
def test_the_multiplier_is_the_base_depth_over_the_depth(depth):
    assert CompletePScale(8, depth=depth).multiplier == pytest.approx(2 / depth, rel=1e-12)
    assert CompletePScale(8, depth=depth, init_values=4.0).multiplier == pytest.approx(4 / depth, rel=1e-12)


def test_alpha_one_scales_deeper_than_depth_mups_alpha_one_half():
    # the comparison the source makes: at L = 36, (L/2)^-1 = 1/18 against Depth-μP's 1/√36 = 1/6
    assert CompletePScale(8, depth=36).multiplier == pytest.approx(1 / 18)
    assert DepthMuPScale(8, depth=36).multiplier == pytest.approx(1 / 6)


def test_at_the_base_depth_it_is_the_pre_norm_model():
    completep, layernorm = tiny_vit("completep", depth=2), tiny_vit("layernorm", depth=2)
    assert completep.state_dict().keys() == layernorm.state_dict().keys()
    for key, value in layernorm.state_dict().items():  # no init rule: timm's depth-independent init, as pre-LN's
        assert torch.equal(completep.state_dict()[key], value), key
    torch.testing.assert_close(completep(images()), layernorm(images()), rtol=0, atol=0)


def test_a_deep_block_adds_each_branch_times_2_over_l():
    model = randomize_(tiny_vit("completep", depth=12)).eval()
    block = model.blocks[5]
    x = torch.randn(2, 17, 32)
    y = x + (2 / 12) * attention(block.attn, layer_norm(block.norm1, x))
    y = y + (2 / 12) * mlp(block.mlp, layer_norm(block.norm2, y))
    torch.testing.assert_close(block(x), y, rtol=1e-5, atol=1e-6)


def test_an_init_values_that_is_no_depth_is_refused_not_turned_into_a_tiny_branch_scale():
    from normbench.layers.registry import LayerError

    with pytest.raises(LayerError, match="completep: model.init_values is CompleteP's base depth"):
        CompletePScale(8, depth=36, init_values=1e-6)  # LayerScale's ε, set for the whole suite
    assert CompletePScale(8, depth=36, init_values=1.0).multiplier == pytest.approx(1 / 36)
