"""Peri-LN (= CogView's Sandwich-LN placement): a norm on each branch's input and on its output."""

from __future__ import annotations

import math

import pytest
import torch

from normbench.layers import LayerNorm, RMSNorm
from tests.layers._cases import tiny_vit


def _randomize(model: torch.nn.Module) -> torch.nn.Module:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


@torch.no_grad()
def test_block_normalizes_each_branchs_input_and_output():
    block = _randomize(tiny_vit("peri_ln")).blocks[1].eval()
    x = 3 * torch.randn(2, 17, 32)
    mid = x + block.post_attn_norm(block.attn(block.norm1(x)))
    torch.testing.assert_close(block(x), mid + block.post_mlp_norm(block.mlp(block.norm2(mid))))


def test_four_norms_per_block_of_the_combinations_class_and_a_final_norm():
    for layer, cls in (("peri_ln", LayerNorm), ("rmsnorm+peri_ln", RMSNorm)):
        model = tiny_vit(layer)
        for block in model.blocks:
            norms = (block.norm1, block.post_attn_norm, block.norm2, block.post_mlp_norm)
            assert all(type(n) is cls for n in norms) and len({id(n) for n in norms}) == 4
        assert type(model.norm) is cls


@torch.no_grad()
def test_the_stream_grows_by_at_most_one_unit_branch_per_sublayer():
    # the point of the output norm: each branch adds an O(1) vector, whatever its weights' scale
    model = tiny_vit("peri_ln", depth=6).eval()
    with torch.no_grad():
        for block in model.blocks:
            block.attn.proj.weight.mul_(1e3)
            block.mlp.fc2.weight.mul_(1e3)
    x = torch.randn(2, 17, 32)
    for block in model.blocks:
        y = block(x)
        assert (y - x).pow(2).mean().sqrt() < 2.5  # two unit-RMS branches at most, norm weights at 1
        x = y


@pytest.mark.parametrize("layer", ["peri_ln_out_gamma", "normformer_out_gamma", "rmsnorm+peri_ln_out_gamma"])
def test_out_gamma_starts_every_branch_output_norm_at_one_over_root_two_depth_and_changes_nothing_else(layer):
    depth = 3
    source = layer.replace("_out_gamma", "")
    torch.manual_seed(0)
    model = tiny_vit(layer, depth=depth)
    torch.manual_seed(0)
    plain = tiny_vit(source, depth=depth)
    scaled = [n for n, _ in model.named_parameters() if ".post_attn_norm.weight" in n or ".post_mlp_norm.weight" in n]
    expected = 2 * depth if "peri_ln" in layer else depth  # NormFormer has no norm after its MLP's output
    assert len(scaled) == expected
    theirs = dict(plain.named_parameters())
    for name, p in model.named_parameters():
        if name in scaled:
            torch.testing.assert_close(p, torch.full_like(p, 1 / math.sqrt(2 * depth)))
            assert torch.equal(theirs[name], torch.ones_like(p))  # the source's γ = 1
        else:
            assert torch.equal(p, theirs[name]), name


@torch.no_grad()
def test_out_gamma_keeps_the_stream_near_the_embeddings_scale_where_the_source_grows_it():
    growth = {}
    for layer in ("peri_ln", "peri_ln_out_gamma"):
        torch.manual_seed(0)
        model = tiny_vit(layer, depth=12).eval()
        x = model._pos_embed(model.patch_embed(torch.randn(4, 3, 16, 16)))
        start = x.pow(2).mean().sqrt()
        for block in model.blocks:
            x = block(x)
        growth[layer] = (x.pow(2).mean().sqrt() / start).item()
    assert growth["peri_ln_out_gamma"] < growth["peri_ln"] / 3
