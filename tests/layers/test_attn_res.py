"""Block AttnRes (Kimi Team 2026): a model against the official pseudocode run literally (blocks list, partial sum,
the boundary every S layers), the uniform mean at init, N = 8 blocks of ⌈L/8⌉ layers, and its block_kwargs."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from normbench.layers import LayerError, resolve_layer
from normbench.layers.attn_res import DEFAULT_BLOCKS, layers_per_block
from tests.layers._cases import images, tiny_vit
from tests.layers._reference import attention, layer_norm, mlp, randomize_


def block_attn_res(blocks: list, partial: torch.Tensor, res) -> torch.Tensor:
    """The README's `block_attn_res`: V = stack(blocks + [partial]), K = RMSNorm(V), softmax over the sources."""
    values = torch.stack(blocks + [partial])  # (k, B, T, D)
    keys = F.rms_norm(values, (values.shape[-1],), res.key_norm.weight, eps=1e-6)
    logits = torch.einsum("d, n b t d -> n b t", res.query, keys)
    return torch.einsum("n b t, n b t d -> b t d", logits.softmax(0), values)


def official_logits(model, x: torch.Tensor, layers_in_block: int) -> torch.Tensor:
    """The README's layer `forward` for every layer, `block_size // 2` = S layers per block; the output the final
    softmax over every source, then the model's final norm and head."""
    blocks, partial = [], model._pos_embed(model.patch_embed(x))
    for layer_number, layer in enumerate(model.blocks):
        # layer 0 reads one source (the embedding): the softmax over one is 1, so its module has no query to learn
        h = block_attn_res(blocks, partial, layer.attn_res) if blocks else partial
        if layer_number % layers_in_block == 0:
            blocks.append(partial)
            partial = None
        attn_out = attention(layer.attn, layer_norm(layer.norm1, h))
        partial = partial + attn_out if partial is not None else attn_out
        h = block_attn_res(blocks, partial, layer.mlp_res)
        partial = partial + mlp(layer.mlp, layer_norm(layer.norm2, h))
    return model.forward_head(layer_norm(model.norm, block_attn_res(blocks, partial, model.merge)))


@pytest.mark.parametrize("depth, blocks", [(5, 2), (6, 8)])  # S = 3 (boundaries at layers 0 and 3); S = 1
def test_a_model_matches_the_official_pseudocode(depth, blocks):
    # float64: with weights perturbed by 1.0 the float32 roundings of two summation orders differ by ~1e-3
    model = tiny_vit("attn_res", depth=depth, block_kwargs={"attn_res_blocks": blocks})
    model = randomize_(model, scale=1.0).eval().double()
    x = images().double()
    torch.testing.assert_close(model(x), official_logits(model, x, layers_per_block(depth, blocks)), rtol=1e-9,
                               atol=1e-9)


def test_the_queries_start_at_zero_so_each_sublayer_reads_the_mean_of_its_sources():
    model = tiny_vit("attn_res", depth=3)
    assert model.blocks[0].attn_res is None
    for res in [*(b.attn_res for b in model.blocks[1:]), *(b.mlp_res for b in model.blocks), model.merge]:
        assert torch.equal(res.query, torch.zeros(32)) and torch.equal(res.key_norm.weight, torch.ones(32))
    sources = torch.randn(2, 5, 3, 32)
    torch.testing.assert_close(model.blocks[1].attn_res(sources), sources.mean(dim=-2))


def test_eight_blocks_of_the_ceiling_of_l_over_8_layers_and_the_sources_they_leave():
    assert DEFAULT_BLOCKS == 8
    assert layers_per_block(36, 8) == 5 and layers_per_block(8, 8) == 1 and layers_per_block(1, 8) == 1
    model = tiny_vit("attn_res", depth=12)  # S = 2: boundaries at layers 0, 2, ..., 10
    h = model.expand(model._pos_embed(model.patch_embed(images())))
    counts = []
    for block in model.blocks:
        h = block(h)
        counts.append(h.shape[-2])
    assert counts == [2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7]  # b_0 = the embedding, then one per finished block


def test_block_kwargs_are_checked_in_one_line():
    for value in (0, 1.5, True):
        with pytest.raises(LayerError, match="not a number of blocks") as excinfo:
            resolve_layer("attn_res").check_block_kwargs({"attn_res_blocks": value})
        assert "\n" not in str(excinfo.value)
    with pytest.raises(LayerError, match="`blocks` is not an attention-residual argument"):
        resolve_layer("attn_res").check_block_kwargs({"blocks": 4})
